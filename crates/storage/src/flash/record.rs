//! One item as it lies in a flash segment: a 12-byte record header, then the item's bytes
//! exactly as they were in RAM (`item.rs`'s layout):
//!
//! ```text
//! bytes 0..4   checksum: xxh3 of the item's bytes seeded with (segment id, deadline), low 32 bits
//! bytes 4..8   the flash segment id (lap and place) the record was written under
//! bytes 8..12  the item's deadline (engine seconds; `NEVER` for none)
//! then         the item: header, extensions, client flags, key, value
//! ```
//!
//! The segment id in the record makes a read of a place that has since been rewritten (a
//! reclaimed flash segment filled again) fail its check instead of returning another item;
//! the checksum catches flipped or torn bytes. A record of at most one block (4 KiB) never
//! straddles a block boundary, so reading an item costs one aligned block read; a longer one
//! starts at a block boundary.
//!
//! Pure functions, no I/O: the engine encodes, the server's I/O reads bytes, the engine
//! decodes and checks them.

use crate::item::{self, Header};

/// Bytes before the item in every record.
pub(crate) const RECORD_HEADER: usize = 12;
/// The device block: records of at most this size stay inside one.
pub const BLOCK: usize = 4096;

/// Where a record of `len` bytes goes at or after `offset` in a segment of `segment_size`
/// bytes (skipping to the next block rather than straddle one), or `None` if it does not fit.
pub(crate) fn place(offset: usize, len: usize, segment_size: usize) -> Option<usize> {
    let at = if len <= BLOCK {
        let block_end = (offset / BLOCK + 1) * BLOCK;
        if offset + len > block_end {
            block_end
        } else {
            offset
        }
    } else {
        offset.div_ceil(BLOCK) * BLOCK
    };
    (at + len <= segment_size).then_some(at)
}

fn checksum(seg: u32, deadline: u32, item: &[u8]) -> u32 {
    let seed = (u64::from(seg) << 32) | u64::from(deadline);
    xxhash_rust::xxh3::xxh3_64_with_seed(item, seed) as u32
}

/// Writes the record of `item` (written under flash segment `seg`, expiring at `deadline`)
/// at the start of `out`, which is at least `RECORD_HEADER + item.len()` long.
pub(crate) fn encode(out: &mut [u8], seg: u32, deadline: u32, item: &[u8]) {
    out[0..4].copy_from_slice(&checksum(seg, deadline, item).to_le_bytes());
    out[4..8].copy_from_slice(&seg.to_le_bytes());
    out[8..12].copy_from_slice(&deadline.to_le_bytes());
    out[RECORD_HEADER..RECORD_HEADER + item.len()].copy_from_slice(item);
}

/// How many bytes to read for the record at `offset`: the rest of its block (a record of
/// at most a block is inside it; a longer one starts it), never past the segment.
pub(crate) fn first_read(offset: usize, segment_size: usize) -> usize {
    (BLOCK - offset % BLOCK).min(segment_size - offset)
}

/// What a record's bytes turned out to be.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Decoded {
    /// A whole, checked item.
    Item {
        /// Its deadline.
        deadline: u32,
        /// Its header (offsets relative to the item's first byte, `RECORD_HEADER` into the
        /// bytes).
        header: Header,
    },
    /// The record is longer than the bytes given: read this many from its start.
    NeedMore(usize),
    /// Not a record written under `seg`, or its checksum does not match.
    Corrupt,
}

/// Decodes and checks the record at the start of `bytes`, which should have been written
/// under flash segment `seg`.
pub(crate) fn decode(bytes: &[u8], seg: u32) -> Decoded {
    let Some(fixed) = bytes.get(..RECORD_HEADER + item::HEADER_LEN) else {
        return Decoded::Corrupt;
    };
    let word = |i: usize| u32::from_le_bytes([fixed[i], fixed[i + 1], fixed[i + 2], fixed[i + 3]]);
    let (sum, written_under, deadline) = (word(0), word(4), word(8));
    if written_under != seg {
        return Decoded::Corrupt;
    }
    let item_bytes = &bytes[RECORD_HEADER..];
    let prefix = item::HEADER_LEN + item::extensions_len(item_bytes);
    if item_bytes.len() < prefix {
        return Decoded::NeedMore(RECORD_HEADER + prefix);
    }
    let header = item::decode(item_bytes);
    if header.key_len == 0 {
        return Decoded::Corrupt;
    }
    let len = header.len();
    if item_bytes.len() < len {
        return Decoded::NeedMore(RECORD_HEADER + len);
    }
    if checksum(seg, deadline, &item_bytes[..len]) != sum {
        return Decoded::Corrupt;
    }
    Decoded::Item { deadline, header }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::item::{encode_prefix, encoded_len, prefix_len, Extras};

    fn item(key: &[u8], value: &[u8], flags: u32) -> Vec<u8> {
        let extras = Extras::default();
        let mut out = vec![0; encoded_len(key.len(), value.len(), flags, &extras)];
        let at = prefix_len(key.len(), flags, &extras);
        encode_prefix(&mut out[..at], key, value.len(), flags, &extras);
        out[at..].copy_from_slice(value);
        out
    }

    #[test]
    fn a_record_round_trips_and_any_flipped_byte_is_caught() {
        let it = item(b"key", b"some value", 7);
        let mut rec = vec![0; RECORD_HEADER + it.len()];
        encode(&mut rec, 1234, 99, &it);
        let Decoded::Item { deadline, header } = decode(&rec, 1234) else {
            panic!("a fresh record decodes");
        };
        assert_eq!(
            (deadline, header.client_flags, header.value_len),
            (99, 7, 10)
        );
        assert_eq!(decode(&rec, 1235), Decoded::Corrupt, "another segment id");
        for i in 0..rec.len() {
            let mut bad = rec.clone();
            bad[i] ^= 0x10;
            assert!(
                !matches!(decode(&bad, 1234), Decoded::Item { .. }),
                "byte {i} flipped went unnoticed"
            );
        }
    }

    #[test]
    fn short_bytes_ask_for_the_whole_record() {
        let it = item(b"k", &[b'v'; 5000], 0);
        let mut rec = vec![0; RECORD_HEADER + it.len()];
        encode(&mut rec, 1, 2, &it);
        assert_eq!(decode(&rec[..4096], 1), Decoded::NeedMore(rec.len()));
        assert_eq!(decode(&rec[..3], 1), Decoded::Corrupt);
        assert!(matches!(decode(&rec, 1), Decoded::Item { .. }));
    }

    #[test]
    fn small_records_never_straddle_a_block() {
        assert_eq!(place(0, 100, 1 << 20), Some(0));
        assert_eq!(place(4000, 96, 1 << 20), Some(4000));
        assert_eq!(place(4000, 97, 1 << 20), Some(4096));
        assert_eq!(
            place(10, 5000, 1 << 20),
            Some(4096),
            "a long record starts a block"
        );
        assert_eq!(place((1 << 20) - 50, 100, 1 << 20), None);
        assert_eq!(first_read(4000, 1 << 20), 96);
        assert_eq!(first_read(0, 1 << 20), 4096);
    }
}
