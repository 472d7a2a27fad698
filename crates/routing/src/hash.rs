//! The key hash functions deployments use to place keys: twemproxy's `hash:` choices (the
//! names are twemproxy's), each returning the 32 bits twemproxy and libmemcached feed to
//! their distributions, plus murmur3 for pymemcache's rendezvous hashing.
//!
//! They must agree bit for bit with the C originals, quirks included: twemproxy's `crc32`
//! is libmemcached's truncated 15-bit variant (`crc32a` is the real CRC-32), `md5` keeps the
//! first four digest bytes little-endian, `murmur` is MurmurHash2 seeded with
//! `0xdeadbeef * len`, and `one_at_a_time` and the last byte of `hsieh` read `char`s, which
//! are signed on x86, so bytes of 0x80 and above are sign-extended.

use md5::{Digest, Md5};

/// A key hash, by its twemproxy name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyHash {
    /// First four bytes of the MD5 digest, little-endian (libketama's, libmemcached's).
    Md5,
    /// twemproxy 0.5's CRC-16 (XMODEM table, 32-bit running value).
    Crc16,
    /// libmemcached's CRC-32: the top 15 bits of the complement.
    Crc32,
    /// The real CRC-32 (IEEE).
    Crc32a,
    /// FNV-1, 64-bit, truncated to 32 bits.
    Fnv1_64,
    /// FNV-1a, 64-bit, truncated to 32 bits (twemproxy's default).
    Fnv1a64,
    /// FNV-1, 32-bit.
    Fnv1_32,
    /// FNV-1a, 32-bit.
    Fnv1a32,
    /// Paul Hsieh's SuperFastHash.
    Hsieh,
    /// MurmurHash2, seeded with `0xdeadbeef * len`.
    Murmur,
    /// Bob Jenkins' lookup3 `hashlittle`, initial value 13.
    Jenkins,
    /// Bob Jenkins' one-at-a-time.
    OneAtATime,
}

impl KeyHash {
    /// Every hash, with its twemproxy name.
    pub const ALL: [(KeyHash, &'static str); 12] = [
        (KeyHash::Md5, "md5"),
        (KeyHash::Crc16, "crc16"),
        (KeyHash::Crc32, "crc32"),
        (KeyHash::Crc32a, "crc32a"),
        (KeyHash::Fnv1_64, "fnv1_64"),
        (KeyHash::Fnv1a64, "fnv1a_64"),
        (KeyHash::Fnv1_32, "fnv1_32"),
        (KeyHash::Fnv1a32, "fnv1a_32"),
        (KeyHash::Hsieh, "hsieh"),
        (KeyHash::Murmur, "murmur"),
        (KeyHash::Jenkins, "jenkins"),
        (KeyHash::OneAtATime, "one_at_a_time"),
    ];

    /// The hash twemproxy calls `name`.
    pub fn from_name(name: &str) -> Option<KeyHash> {
        KeyHash::ALL
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(h, _)| *h)
    }

    /// Its twemproxy name.
    pub fn name(self) -> &'static str {
        KeyHash::ALL
            .iter()
            .find(|(h, _)| *h == self)
            .map(|(_, n)| *n)
            .expect("every hash is listed")
    }

    /// The 32-bit hash of `key`.
    pub fn hash(self, key: &[u8]) -> u32 {
        match self {
            KeyHash::Md5 => md5_u32(key, 0),
            KeyHash::Crc16 => crc16_twemproxy(key),
            KeyHash::Crc32 => (!crc32_raw(key) >> 16) & 0x7fff,
            KeyHash::Crc32a => !crc32_raw(key),
            KeyHash::Fnv1_64 => fnv64(key, false) as u32,
            KeyHash::Fnv1a64 => fnv64(key, true) as u32,
            KeyHash::Fnv1_32 => fnv32(key, false),
            KeyHash::Fnv1a32 => fnv32(key, true),
            KeyHash::Hsieh => hsieh(key),
            KeyHash::Murmur => murmur2(key),
            KeyHash::Jenkins => lookup3(key, 13),
            KeyHash::OneAtATime => one_at_a_time(key),
        }
    }
}

/// The MD5 digest of `data`.
pub fn md5(data: &[u8]) -> [u8; 16] {
    Md5::digest(data).into()
}

/// Bytes `4 * word .. 4 * word + 4` of the MD5 digest as a little-endian u32 (ketama's ring
/// points are words 0 to 3 of one digest).
pub fn md5_u32(data: &[u8], word: usize) -> u32 {
    let d = md5(data);
    u32::from_le_bytes([
        d[4 * word],
        d[4 * word + 1],
        d[4 * word + 2],
        d[4 * word + 3],
    ])
}

/// A C `char` on x86: signed, so a byte of 0x80 or more widens to 0xffffff80 and up.
fn signed_char(b: u8) -> u32 {
    b as i8 as i32 as u32
}

const fn crc_table(poly: u32) -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ poly } else { c >> 1 };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
}

/// Reflected CRC-32 (IEEE, polynomial 0xEDB88320), before the final complement.
const CRC32: [u32; 256] = crc_table(0xEDB8_8320);
/// CRC-16/XMODEM's table (polynomial 0x1021, most significant bit first).
const CRC16_XMODEM: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = (i as u32) << 8;
        let mut k = 0;
        while k < 8 {
            c = if c & 0x8000 != 0 {
                (c << 1) ^ 0x1021
            } else {
                c << 1
            };
            k += 1;
        }
        table[i] = c & 0xffff;
        i += 1;
    }
    table
};

fn crc32_raw(key: &[u8]) -> u32 {
    key.iter().fold(u32::MAX, |crc, &b| {
        (crc >> 8) ^ CRC32[((crc ^ u32::from(b)) & 0xff) as usize]
    })
}

/// twemproxy 0.5's CRC-16: the XMODEM table (polynomial 0x1021), but the running value is
/// a `uint32_t` that is never cut back to 16 bits, so long keys carry high bits along (the
/// table index still uses bits 8-15 only). Later twemproxy switched to CRC-16/ARC; Debian 12
/// ships 0.5.0, whose placement this reproduces.
fn crc16_twemproxy(key: &[u8]) -> u32 {
    key.iter().fold(0u32, |crc, &b| {
        (crc << 8) ^ CRC16_XMODEM[(((crc >> 8) ^ u32::from(b)) & 0xff) as usize]
    })
}

/// FNV at one width: FNV-1 (multiply, then xor) or, `alternate`, FNV-1a (xor, then
/// multiply).
macro_rules! fnv {
    ($name:ident, $t:ty, $offset:expr, $prime:expr) => {
        fn $name(key: &[u8], alternate: bool) -> $t {
            key.iter().fold($offset, |h: $t, &b| {
                if alternate {
                    (h ^ <$t>::from(b)).wrapping_mul($prime)
                } else {
                    h.wrapping_mul($prime) ^ <$t>::from(b)
                }
            })
        }
    };
}

fnv!(fnv64, u64, 0xcbf2_9ce4_8422_2325, 0x0000_0100_0000_01b3);
fnv!(fnv32, u32, 2_166_136_261, 16_777_619);

fn one_at_a_time(key: &[u8]) -> u32 {
    let mut v: u32 = 0;
    for &b in key {
        v = v.wrapping_add(signed_char(b));
        v = v.wrapping_add(v << 10);
        v ^= v >> 6;
    }
    v = v.wrapping_add(v << 3);
    v ^= v >> 11;
    v.wrapping_add(v << 15)
}

fn hsieh(key: &[u8]) -> u32 {
    if key.is_empty() {
        return 0;
    }
    let get16 = |d: &[u8]| u32::from(d[0]) | (u32::from(d[1]) << 8);
    let mut hash: u32 = 0;
    let mut chunks = key.chunks_exact(4);
    for c in &mut chunks {
        hash = hash.wrapping_add(get16(c));
        let tmp = (get16(&c[2..]) << 11) ^ hash;
        hash = (hash << 16) ^ tmp;
        hash = hash.wrapping_add(hash >> 11);
    }
    let rest = chunks.remainder();
    match rest.len() {
        3 => {
            hash = hash.wrapping_add(get16(rest));
            hash ^= hash << 16;
            hash ^= signed_char(rest[2]) << 18;
            hash = hash.wrapping_add(hash >> 11);
        }
        2 => {
            hash = hash.wrapping_add(get16(rest));
            hash ^= hash << 11;
            hash = hash.wrapping_add(hash >> 17);
        }
        1 => {
            hash = hash.wrapping_add(u32::from(rest[0]));
            hash ^= hash << 10;
            hash = hash.wrapping_add(hash >> 1);
        }
        _ => {}
    }
    hash ^= hash << 3;
    hash = hash.wrapping_add(hash >> 5);
    hash ^= hash << 4;
    hash = hash.wrapping_add(hash >> 17);
    hash ^= hash << 25;
    hash.wrapping_add(hash >> 6)
}

fn murmur2(key: &[u8]) -> u32 {
    const M: u32 = 0x5bd1_e995;
    let len = key.len() as u32;
    let mut h = 0xdead_beef_u32.wrapping_mul(len) ^ len;
    let mut chunks = key.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let rest = chunks.remainder();
    if rest.len() >= 3 {
        h ^= u32::from(rest[2]) << 16;
    }
    if rest.len() >= 2 {
        h ^= u32::from(rest[1]) << 8;
    }
    if !rest.is_empty() {
        h ^= u32::from(rest[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^ (h >> 15)
}

/// lookup3's `mix(a, b, c)`, as steps `x -= z; x ^= rot(z, r); z += y` on `[a, b, c]`:
/// (r, [x, z, y]).
const MIX: [(u32, [usize; 3]); 6] = [
    (4, [0, 2, 1]),
    (6, [1, 0, 2]),
    (8, [2, 1, 0]),
    (16, [0, 2, 1]),
    (19, [1, 0, 2]),
    (4, [2, 1, 0]),
];

/// lookup3's `final(a, b, c)`, as steps `x ^= y; x -= rot(y, r)` on `[a, b, c]`: (r, [x, y]).
const FINAL: [(u32, [usize; 2]); 7] = [
    (14, [2, 1]),
    (11, [0, 2]),
    (25, [1, 0]),
    (16, [2, 1]),
    (4, [0, 2]),
    (14, [1, 0]),
    (24, [2, 1]),
];

/// Bob Jenkins' lookup3 `hashlittle` (the byte-at-a-time path, which gives the same result
/// as the aligned ones on little-endian machines).
pub fn lookup3(key: &[u8], initval: u32) -> u32 {
    let mut a = 0xdead_beef_u32
        .wrapping_add(key.len() as u32)
        .wrapping_add(initval);
    let (mut b, mut c) = (a, a);
    let word = |k: &[u8]| {
        let mut w = [0u8; 4];
        w[..k.len()].copy_from_slice(k);
        u32::from_le_bytes(w)
    };
    let mut k = key;
    while k.len() > 12 {
        a = a.wrapping_add(word(&k[0..4]));
        b = b.wrapping_add(word(&k[4..8]));
        c = c.wrapping_add(word(&k[8..12]));
        let mut v = [a, b, c];
        for (r, [x, z, y]) in MIX {
            v[x] = v[x].wrapping_sub(v[z]) ^ v[z].rotate_left(r);
            v[z] = v[z].wrapping_add(v[y]);
        }
        [a, b, c] = v;
        k = &k[12..];
    }
    if k.is_empty() {
        return c;
    }
    a = a.wrapping_add(word(&k[..k.len().min(4)]));
    if k.len() > 4 {
        b = b.wrapping_add(word(&k[4..k.len().min(8)]));
    }
    if k.len() > 8 {
        c = c.wrapping_add(word(&k[8..]));
    }
    let mut v = [a, b, c];
    for (r, [x, y]) in FINAL {
        v[x] = (v[x] ^ v[y]).wrapping_sub(v[y].rotate_left(r));
    }
    v[2]
}

/// MurmurHash3 x86 32-bit (pymemcache's rendezvous hash).
pub fn murmur3_32(key: &[u8], seed: u32) -> u32 {
    const C1: u32 = 0xcc9e_2d51;
    const C2: u32 = 0x1b87_3593;
    let mut h = seed;
    let mut chunks = key.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        h ^= k;
        h = h.rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut k = 0u32;
        for (i, &b) in rest.iter().enumerate() {
            k |= u32::from(b) << (8 * i);
        }
        k = k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        h ^= k;
    }
    h ^= key.len() as u32;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_check_values() {
        // The standard "123456789" check values of each CRC.
        assert_eq!(KeyHash::Crc32a.hash(b"123456789"), 0xCBF4_3926);
        // For a one-byte key twemproxy's CRC-16 is plain CRC-16/XMODEM; longer keys carry
        // high bits (checked against nutcracker in tests/it/twemproxy_hashing.rs).
        assert_eq!(KeyHash::Crc16.hash(b"A"), 0x58E5);
        assert_eq!(KeyHash::Crc16.hash(b"123456789") & 0xffff, 0x31C3);
        // FNV reference values.
        assert_eq!(KeyHash::Fnv1a32.hash(b""), 0x811c_9dc5);
        assert_eq!(KeyHash::Fnv1a32.hash(b"a"), 0xe40c_292c);
        assert_eq!(KeyHash::Fnv1_32.hash(b"a"), 0x050c_5d7e);
        assert_eq!(fnv64(b"a", true), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv64(b"a", false), 0xaf63_bd4c_8601_b7be);
        assert_eq!(KeyHash::Fnv1a64.hash(b"a"), 0x8601_ec8c);
        // Jenkins' one-at-a-time and lookup3 published values.
        assert_eq!(KeyHash::OneAtATime.hash(b"a"), 0xca2e_9442);
        assert_eq!(
            KeyHash::OneAtATime.hash(b"The quick brown fox jumps over the lazy dog"),
            0x519e_91f5
        );
        assert_eq!(lookup3(b"", 0), 0xdead_beef);
        assert_eq!(lookup3(b"Four score and seven years ago", 0), 0x1777_0551);
        assert_eq!(lookup3(b"Four score and seven years ago", 1), 0xcd62_8161);
        // MurmurHash3 x86_32 reference values.
        assert_eq!(murmur3_32(b"", 0), 0);
        assert_eq!(murmur3_32(b"", 1), 0x514e_28b7);
        assert_eq!(murmur3_32(b"hello", 0), 0x248b_fa47);
        assert_eq!(
            murmur3_32(b"The quick brown fox jumps over the lazy dog", 0),
            0x2e4f_f723
        );
        // libmemcached's crc32 is the top 15 bits of the real one.
        assert_eq!(
            KeyHash::Crc32.hash(b"123456789"),
            (0xCBF4_3926 >> 16) & 0x7fff
        );
        assert_eq!(KeyHash::Md5.hash(b""), 0xd98c_1dd4);
    }

    #[test]
    fn names_round_trip() {
        for (h, name) in KeyHash::ALL {
            assert_eq!(KeyHash::from_name(name), Some(h));
            assert_eq!(h.name(), name);
        }
        assert_eq!(KeyHash::from_name("sha1"), None);
    }

    #[test]
    fn high_bytes_are_sign_extended_where_c_reads_chars() {
        // 0xff as a signed char is -1: one_at_a_time adds 0xffffffff, not 0xff.
        let mut v: u32 = 0xffff_ffff;
        v = v.wrapping_add(v << 10);
        v ^= v >> 6;
        v = v.wrapping_add(v << 3);
        v ^= v >> 11;
        v = v.wrapping_add(v << 15);
        assert_eq!(one_at_a_time(&[0xff]), v);
    }
}
