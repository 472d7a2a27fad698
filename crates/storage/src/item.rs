//! The layout of one item inside a segment.
//!
//! Everything an item needs that is not shared with its neighbours fits in a 5-byte header:
//!
//! ```text
//! byte 0      key length (1..=255)
//! bytes 1..4  value length, 24-bit little endian
//! byte 4      flag bits:
//!             0-1  width of the client flags that follow: 0, 1, 2 or 4 bytes
//!             2    an own deadline (u32) follows
//!             3    STALE      the value is stale (meta `md I`, or kept after a delete)
//!             4    TOMBSTONE  delete hold-off: no value, `add` refused (paper §4.3)
//!             5    TOKEN      a lease was handed out: token (u64) and issue time (u32) follow
//!             6    EMPTY      a placeholder created by a lease miss: no client stored a value
//!             7    DELETED    kept after a delete: only lease reads see it (paper §3.2.1)
//! then        [own deadline: 4] [lease: 12] [client flags: 0/1/2/4] key value
//! ```
//!
//! What each mark means to each command is decided in one place, `lease.rs` (`Visibility`).
//!
//! What the paper moves out of the item lives elsewhere: creation time, expiry and reference
//! count in the segment header; CAS, lock and last-access time in the hash bucket; frequency
//! and location in the hash slot.
//!
//! **Client flags.** memcached hands back the 32 bits a client stored, and clients depend on it
//! (pymemcache, spymemcached and pylibmc encode the value's type there). They are stored in the
//! smallest width that holds them: flags 0 cost nothing, flags below 256 cost one byte, below
//! 65 536 two bytes, anything else four. Most clients use 0 or small values, so the typical
//! cost is 0–1 byte per item.
//!
//! **Own deadline.** Rewrites that keep an item's expiry (incr, decr, append, prepend) store the
//! exact deadline so repeated rewrites cannot drift it earlier; see `ttl.rs` for why plain sets
//! need none.

/// Bytes in every item header.
pub const HEADER_LEN: usize = 5;
/// The longest key the item format can hold.
pub const MAX_KEY_LEN: usize = u8::MAX as usize;
/// The longest value the item format can hold (the segment size is the practical limit).
pub const MAX_VALUE_LEN: usize = (1 << 24) - 1;

const FLAGS_WIDTH_MASK: u8 = 0b11;
const OWN_DEADLINE: u8 = 1 << 2;
/// The value is stale: invalidated by meta `md I`, or (with [`MARK_DELETED`]) deleted.
pub const MARK_STALE: u8 = 1 << 3;
/// Delete hold-off marker: not a value, but blocks `add`.
pub const MARK_TOMBSTONE: u8 = 1 << 4;
/// A lease token was handed out for this key; the header carries it ([`Lease`]).
pub const MARK_TOKEN: u8 = 1 << 5;
/// A placeholder a lease miss created (memcached's autovivified item): its value is empty.
pub const MARK_EMPTY: u8 = 1 << 6;
/// A value kept after a delete: plain reads miss it, lease reads may serve it as stale.
pub const MARK_DELETED: u8 = 1 << 7;
/// Every mark.
pub const MARKS: u8 = MARK_STALE | MARK_TOMBSTONE | MARK_TOKEN | MARK_EMPTY | MARK_DELETED;
/// Bytes of the lease extension.
const LEASE_LEN: usize = 12;

/// A lease handed out for a key (Facebook §3.2.1): the token a later set must carry, and
/// when it was issued (on the cache's clock), which rate-limits tokens per key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The 64-bit token (never 0 or 1: mcrouter's ASCII protocol gives those meanings).
    pub token: u64,
    /// Cache-clock second of issue.
    pub issued: u32,
}

/// A lease extension whose issue time is this carries no lease but a CAS unique the client
/// chose (meta `E<cas>`): the item's CAS until it is rewritten. (A real lease's issue time is
/// a cache-clock second, which never gets near it.)
pub const EXPLICIT_CAS: u32 = u32::MAX;

impl Lease {
    /// The extension that stores a client-chosen CAS unique (see `EXPLICIT_CAS`).
    pub fn explicit_cas(cas: u64) -> Lease {
        Lease {
            token: cas,
            issued: EXPLICIT_CAS,
        }
    }
}

/// The optional parts of an item beyond key, value and flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Extras {
    /// An exact deadline kept across rewrites.
    pub own_deadline: Option<u32>,
    /// The outstanding lease, if any (sets [`MARK_TOKEN`]).
    pub lease: Option<Lease>,
    /// Marks other than [`MARK_TOKEN`].
    pub marks: u8,
}

/// What an item header says, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub key_len: usize,
    pub value_len: usize,
    pub client_flags: u32,
    pub own_deadline: Option<u32>,
    pub lease: Option<Lease>,
    /// A CAS unique the client chose (meta `E`), carried in the lease extension.
    pub explicit_cas: Option<u64>,
    pub marks: u8,
    /// Bytes from the start of the item to the key.
    pub key_offset: usize,
}

impl Header {
    /// Bytes the item occupies, before alignment.
    pub fn len(&self) -> usize {
        self.key_offset + self.key_len + self.value_len
    }
}

fn flags_width(flags: u32) -> (u8, usize) {
    match flags {
        0 => (0, 0),
        1..=0xff => (1, 1),
        0x100..=0xffff => (2, 2),
        _ => (3, 4),
    }
}

fn width_of(code: u8) -> usize {
    [0, 1, 2, 4][(code & FLAGS_WIDTH_MASK) as usize]
}

/// The size an item with these fields needs, before alignment.
#[inline]
pub fn encoded_len(key_len: usize, value_len: usize, flags: u32, extras: &Extras) -> usize {
    HEADER_LEN
        + if extras.own_deadline.is_some() { 4 } else { 0 }
        + if extras.lease.is_some() { LEASE_LEN } else { 0 }
        + flags_width(flags).1
        + key_len
        + value_len
}

/// Writes the header and key of an item into `out` (which is exactly `key_offset + key_len`
/// long) and returns the offset at which the value must go.
#[inline]
pub fn encode_prefix(
    out: &mut [u8],
    key: &[u8],
    value_len: usize,
    flags: u32,
    extras: &Extras,
) -> usize {
    debug_assert!(!key.is_empty() && key.len() <= MAX_KEY_LEN);
    debug_assert!(value_len <= MAX_VALUE_LEN);
    let (code, width) = flags_width(flags);
    out[0] = key.len() as u8;
    out[1..4].copy_from_slice(&(value_len as u32).to_le_bytes()[..3]);
    let mut bits = code | (extras.marks & MARKS & !MARK_TOKEN);
    let mut at = HEADER_LEN;
    if let Some(deadline) = extras.own_deadline {
        bits |= OWN_DEADLINE;
        out[at..at + 4].copy_from_slice(&deadline.to_le_bytes());
        at += 4;
    }
    if let Some(lease) = extras.lease {
        bits |= MARK_TOKEN;
        out[at..at + 8].copy_from_slice(&lease.token.to_le_bytes());
        out[at + 8..at + 12].copy_from_slice(&lease.issued.to_le_bytes());
        at += LEASE_LEN;
    }
    out[4] = bits;
    out[at..at + width].copy_from_slice(&flags.to_le_bytes()[..width]);
    at += width;
    out[at..at + key.len()].copy_from_slice(key);
    at + key.len()
}

/// Bytes needed for the header, extensions and key (the part [`encode_prefix`] writes).
#[inline]
pub fn prefix_len(key_len: usize, flags: u32, extras: &Extras) -> usize {
    encoded_len(key_len, 0, flags, extras)
}

/// Decodes the header at the start of `bytes`, which must hold at least the header and its
/// extensions (the key and value are not needed).
pub fn decode(bytes: &[u8]) -> Header {
    let key_len = bytes[0] as usize;
    let value_len = u32::from_le_bytes([bytes[1], bytes[2], bytes[3], 0]) as usize;
    let bits = bytes[4];
    let mut at = HEADER_LEN;
    let own_deadline = if bits & OWN_DEADLINE != 0 {
        let d = u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
        at += 4;
        Some(d)
    } else {
        None
    };
    let lease = if bits & MARK_TOKEN != 0 {
        let mut token = [0u8; 8];
        token.copy_from_slice(&bytes[at..at + 8]);
        let issued =
            u32::from_le_bytes([bytes[at + 8], bytes[at + 9], bytes[at + 10], bytes[at + 11]]);
        at += LEASE_LEN;
        Some(Lease {
            token: u64::from_le_bytes(token),
            issued,
        })
    } else {
        None
    };
    let width = width_of(bits);
    // One load per width rather than a copy of a variable length (a call to memcpy).
    let client_flags = match width {
        0 => 0,
        1 => u32::from(bytes[at]),
        2 => u32::from(u16::from_le_bytes([bytes[at], bytes[at + 1]])),
        _ => u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]),
    };
    at += width;
    let (lease, explicit_cas, marks) = match lease {
        Some(l) if l.issued == EXPLICIT_CAS => (None, Some(l.token), bits & MARKS & !MARK_TOKEN),
        lease => (lease, None, bits & MARKS),
    };
    Header {
        key_len,
        value_len,
        client_flags,
        own_deadline,
        lease,
        explicit_cas,
        marks,
        key_offset: at,
    }
}

/// Bytes of extensions (own deadline, lease, client flags) that follow the fixed header
/// `fixed` (at least [`HEADER_LEN`] bytes: only the flag byte is read).
#[inline]
pub fn extensions_len(fixed: &[u8]) -> usize {
    let bits = fixed[4];
    (if bits & OWN_DEADLINE != 0 { 4 } else { 0 })
        + (if bits & MARK_TOKEN != 0 { LEASE_LEN } else { 0 })
        + width_of(bits)
}

/// Decodes the item at the start of `bytes` only if its header, key and value all lie
/// within `bytes` and the key is not empty (for checking untrusted state, e.g. a restored
/// heap); `None` otherwise.
pub fn decode_within(bytes: &[u8]) -> Option<Header> {
    let fixed = bytes.get(..HEADER_LEN)?;
    let prefix = HEADER_LEN + extensions_len(fixed);
    if bytes.len() < prefix {
        return None;
    }
    let header = decode(bytes);
    (header.key_len > 0 && header.len() <= bytes.len()).then_some(header)
}

/// The most bytes a header with all extensions can take (for bounds checks).
pub const MAX_PREFIX: usize = HEADER_LEN + 4 + LEASE_LEN + 4;

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(key: &[u8], value_len: usize, flags: u32, own: Option<u32>, extras: Extras) {
        let extras = Extras {
            own_deadline: own,
            ..extras
        };
        let len = prefix_len(key.len(), flags, &extras);
        let mut buf = vec![0u8; len];
        let value_at = encode_prefix(&mut buf, key, value_len, flags, &extras);
        assert_eq!(value_at, len);
        let h = decode(&buf);
        assert_eq!(h.key_len, key.len());
        assert_eq!(h.value_len, value_len);
        assert_eq!(h.client_flags, flags);
        assert_eq!(h.own_deadline, own);
        assert_eq!(h.lease, extras.lease);
        let token_mark = if extras.lease.is_some() {
            MARK_TOKEN
        } else {
            0
        };
        assert_eq!(h.marks, extras.marks | token_mark);
        assert_eq!(&buf[h.key_offset..h.key_offset + h.key_len], key);
        assert_eq!(h.len(), len + value_len);
    }

    #[test]
    fn headers_roundtrip() {
        for flags in [0, 1, 255, 256, 65_535, 65_536, u32::MAX] {
            for own in [None, Some(0), Some(123_456)] {
                let lease = Some(Lease {
                    token: u64::MAX - 7,
                    issued: 99,
                });
                for extras in [
                    Extras::default(),
                    Extras {
                        marks: MARK_STALE | MARK_DELETED,
                        ..Extras::default()
                    },
                    Extras {
                        marks: MARK_TOMBSTONE,
                        ..Extras::default()
                    },
                    Extras {
                        marks: MARK_EMPTY,
                        lease,
                        ..Extras::default()
                    },
                    Extras {
                        marks: MARK_STALE,
                        lease,
                        ..Extras::default()
                    },
                ] {
                    roundtrip(b"k", 0, flags, own, extras);
                    roundtrip(&[b'x'; 255], MAX_VALUE_LEN, flags, own, extras);
                }
            }
        }
    }

    #[test]
    fn client_flags_cost_what_the_docs_say() {
        let none = Extras::default();
        assert_eq!(encoded_len(10, 50, 0, &none), 65);
        assert_eq!(encoded_len(10, 50, 7, &none), 66);
        assert_eq!(encoded_len(10, 50, 300, &none), 67);
        assert_eq!(encoded_len(10, 50, 1 << 20, &none), 69);
        let own = Extras {
            own_deadline: Some(1),
            ..none
        };
        assert_eq!(encoded_len(10, 50, 0, &own), 69);
        let leased = Extras {
            lease: Some(Lease {
                token: 2,
                issued: 0,
            }),
            ..none
        };
        assert_eq!(encoded_len(10, 50, 0, &leased), 77);
    }
}
