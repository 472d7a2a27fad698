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
//!             3    STALE      value kept after an invalidating delete (leases, paper §3.2.1)
//!             4    TOMBSTONE  delete hold-off: no value, `add` refused (paper §4.3)
//!             5    TOKEN      a lease token was handed out for this key
//! then        [own deadline: 4 bytes] [client flags: 0/1/2/4 bytes] key value
//! ```
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
/// Value kept after an invalidating delete.
pub const MARK_STALE: u8 = 1 << 3;
/// Delete hold-off marker: not a value, but blocks `add`.
pub const MARK_TOMBSTONE: u8 = 1 << 4;
/// A lease token was handed out for this key.
pub const MARK_TOKEN: u8 = 1 << 5;
/// The marks a caller may set.
pub const MARKS: u8 = MARK_STALE | MARK_TOMBSTONE | MARK_TOKEN;

/// What an item header says, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub key_len: usize,
    pub value_len: usize,
    pub client_flags: u32,
    pub own_deadline: Option<u32>,
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
pub fn encoded_len(key_len: usize, value_len: usize, flags: u32, own_deadline: bool) -> usize {
    HEADER_LEN + if own_deadline { 4 } else { 0 } + flags_width(flags).1 + key_len + value_len
}

/// Writes the header and key of an item into `out` (which is exactly `key_offset + key_len`
/// long) and returns the offset at which the value must go.
pub fn encode_prefix(
    out: &mut [u8],
    key: &[u8],
    value_len: usize,
    flags: u32,
    own_deadline: Option<u32>,
    marks: u8,
) -> usize {
    debug_assert!(!key.is_empty() && key.len() <= MAX_KEY_LEN);
    debug_assert!(value_len <= MAX_VALUE_LEN);
    let (code, width) = flags_width(flags);
    out[0] = key.len() as u8;
    out[1..4].copy_from_slice(&(value_len as u32).to_le_bytes()[..3]);
    let mut bits = code | (marks & MARKS);
    let mut at = HEADER_LEN;
    if let Some(deadline) = own_deadline {
        bits |= OWN_DEADLINE;
        out[at..at + 4].copy_from_slice(&deadline.to_le_bytes());
        at += 4;
    }
    out[4] = bits;
    out[at..at + width].copy_from_slice(&flags.to_le_bytes()[..width]);
    at += width;
    out[at..at + key.len()].copy_from_slice(key);
    at + key.len()
}

/// Bytes needed for the header, extensions and key (the part [`encode_prefix`] writes).
pub fn prefix_len(key_len: usize, flags: u32, own_deadline: bool) -> usize {
    encoded_len(key_len, 0, flags, own_deadline)
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
    let width = width_of(bits);
    let mut flag_bytes = [0u8; 4];
    flag_bytes[..width].copy_from_slice(&bytes[at..at + width]);
    at += width;
    Header {
        key_len,
        value_len,
        client_flags: u32::from_le_bytes(flag_bytes),
        own_deadline,
        marks: bits & MARKS,
        key_offset: at,
    }
}

/// The most bytes a header with all extensions can take (for bounds checks).
pub const MAX_PREFIX: usize = HEADER_LEN + 4 + 4;

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(key: &[u8], value_len: usize, flags: u32, own: Option<u32>, marks: u8) {
        let len = prefix_len(key.len(), flags, own.is_some());
        let mut buf = vec![0u8; len];
        let value_at = encode_prefix(&mut buf, key, value_len, flags, own, marks);
        assert_eq!(value_at, len);
        let h = decode(&buf);
        assert_eq!(h.key_len, key.len());
        assert_eq!(h.value_len, value_len);
        assert_eq!(h.client_flags, flags);
        assert_eq!(h.own_deadline, own);
        assert_eq!(h.marks, marks);
        assert_eq!(&buf[h.key_offset..h.key_offset + h.key_len], key);
        assert_eq!(h.len(), len + value_len);
    }

    #[test]
    fn headers_roundtrip() {
        for flags in [0, 1, 255, 256, 65_535, 65_536, u32::MAX] {
            for own in [None, Some(0), Some(123_456)] {
                for marks in [0, MARK_STALE, MARK_TOMBSTONE | MARK_TOKEN] {
                    roundtrip(b"k", 0, flags, own, marks);
                    roundtrip(&[b'x'; 255], MAX_VALUE_LEN, flags, own, marks);
                }
            }
        }
    }

    #[test]
    fn client_flags_cost_what_the_docs_say() {
        assert_eq!(encoded_len(10, 50, 0, false), 65);
        assert_eq!(encoded_len(10, 50, 7, false), 66);
        assert_eq!(encoded_len(10, 50, 300, false), 67);
        assert_eq!(encoded_len(10, 50, 1 << 20, false), 69);
        assert_eq!(encoded_len(10, 50, 0, true), 69);
    }
}
