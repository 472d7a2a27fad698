//! Streaming readers of libCacheSim's fixed-size binary trace formats.
//!
//! - `oracleGeneral`: 24-byte little-endian records (`u32 clock_time, u64 obj_id,
//!   u32 obj_size, i64 next_access_vtime`); every record is a `get` of
//!   `obj_size` value bytes with an 8-byte nominal key, filled on a miss.
//! - `twr` (Twitter traces as converted by libCacheSim), 20 bytes: `u32 time,
//!   u64 obj_id, u32 kv, u32 op_ttl`. The decoding follows libCacheSim's reader
//!   code (`twrBin.h`): key size is the *high* 10 bits of `kv` and value size the
//!   low 22; the op code is the high 8 bits of `op_ttl` (libCacheSim's
//!   `req_op_e`: 1 get, 2 gets, 3 set, 4 add, 5 cas, 6 replace, 7 append,
//!   8 prepend, 9 delete, 10 incr, 11 decr) and the TTL the low 24. That file's
//!   header comment lists the bit fields in the other order; the reader code is
//!   what reads the published files, so it is followed here.
//!
//! Not here: the CSV format and format detection (`trace`), decompression.

use std::io::{self, Read};

use super::request::{Request, TraceOp};
use super::trace_error::TraceError;

/// A stream of requests from fixed-size records of `N` bytes, each read by `decode` (given
/// the record and its index).
pub struct RecordReader<R, const N: usize> {
    inner: R,
    /// Records read so far.
    index: u64,
    done: bool,
    decode: fn(&[u8; N], u64) -> Result<Request, TraceError>,
}

impl<R: Read, const N: usize> RecordReader<R, N> {
    fn with(inner: R, decode: fn(&[u8; N], u64) -> Result<Request, TraceError>) -> Self {
        RecordReader {
            inner,
            index: 0,
            done: false,
            decode,
        }
    }
}

impl<R: Read, const N: usize> Iterator for RecordReader<R, N> {
    type Item = Result<Request, TraceError>;

    /// The next record's request; `None` at a clean end of file.
    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let index = self.index;
        let mut rec = [0u8; N];
        let mut filled = 0;
        while filled < N {
            match self.inner.read(&mut rec[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.done = true;
                    return Some(Err(e.into()));
                }
            }
        }
        match filled {
            0 => {
                self.done = true;
                None
            }
            n if n < N => {
                self.done = true;
                Some(Err(TraceError::Truncated {
                    index,
                    len: n,
                    record_size: N,
                }))
            }
            _ => {
                self.index += 1;
                Some((self.decode)(&rec, index))
            }
        }
    }
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(v)
}

/// Nominal key size given to oracleGeneral requests (the format has none).
pub const ORACLE_KEY_SIZE: u32 = 8;

/// Streaming reader of libCacheSim's oracleGeneral binary format.
///
/// Each record becomes a `get` with `value_size = obj_size`, key size
/// [`ORACLE_KEY_SIZE`] and no TTL, so replay's look-aside fill inserts it.
pub type OracleGeneralReader<R> = RecordReader<R, 24>;

impl<R: Read> OracleGeneralReader<R> {
    /// Wraps a reader (buffer it: records are read 24 bytes at a time).
    pub fn new(inner: R) -> Self {
        RecordReader::with(inner, decode_oracle)
    }
}

fn decode_oracle(rec: &[u8; 24], _index: u64) -> Result<Request, TraceError> {
    Ok(Request {
        time: le_u32(rec, 0),
        key: le_u64(rec, 4),
        key_size: ORACLE_KEY_SIZE,
        value_size: le_u32(rec, 12),
        op: TraceOp::Get,
        ttl: 0,
    })
}

/// Streaming reader of libCacheSim's 20-byte `twr` binary format (see the
/// module docs for the layout and its provenance).
pub type TwrReader<R> = RecordReader<R, 20>;

impl<R: Read> TwrReader<R> {
    /// Wraps a reader (buffer it: records are read 20 bytes at a time).
    pub fn new(inner: R) -> Self {
        RecordReader::with(inner, decode_twr)
    }
}

fn decode_twr(rec: &[u8; 20], index: u64) -> Result<Request, TraceError> {
    let kv = le_u32(rec, 12);
    let op_ttl = le_u32(rec, 16);
    let code = (op_ttl >> 24) as u8;
    let op = TraceOp::from_libcachesim(code).ok_or_else(|| TraceError::BadRecord {
        index,
        reason: format!("unknown op code {code}"),
    })?;
    Ok(Request {
        time: le_u32(rec, 0),
        key: le_u64(rec, 4),
        key_size: kv >> 22,
        value_size: kv & ((1 << 22) - 1),
        op,
        ttl: op_ttl & ((1 << 24) - 1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oracle_record(t: u32, id: u64, size: u32, next: i64) -> Vec<u8> {
        [
            &t.to_le_bytes()[..],
            &id.to_le_bytes(),
            &size.to_le_bytes(),
            &next.to_le_bytes(),
        ]
        .concat()
    }

    #[test]
    fn oracle_general_records_become_gets() {
        let mut bytes = oracle_record(5, 0xdead_beef_0102, 4096, 7);
        bytes.extend(oracle_record(6, 42, 100, -1));
        let reqs: Vec<Request> = OracleGeneralReader::new(&bytes[..])
            .map(Result::unwrap)
            .collect();
        assert_eq!(reqs.len(), 2);
        assert_eq!(
            reqs[0],
            Request {
                time: 5,
                key: 0xdead_beef_0102,
                key_size: 8,
                value_size: 4096,
                op: TraceOp::Get,
                ttl: 0
            }
        );
        assert_eq!(
            (reqs[1].time, reqs[1].key, reqs[1].value_size),
            (6, 42, 100)
        );
    }

    #[test]
    fn truncated_binary_trace_is_an_error_not_a_panic() {
        let mut bytes = oracle_record(1, 1, 1, 1);
        bytes.extend_from_slice(&[1, 2, 3]);
        let out: Vec<_> = OracleGeneralReader::new(&bytes[..]).collect();
        assert_eq!(out.len(), 2);
        assert!(matches!(
            out[1],
            Err(TraceError::Truncated {
                index: 1,
                len: 3,
                record_size: 24
            })
        ));
    }

    #[test]
    fn twr_records_decode_packed_fields() {
        let kv: u32 = (30 << 22) | 1000;
        let op_ttl: u32 = (3 << 24) | 3600;
        let rec = [
            &9u32.to_le_bytes()[..],
            &77u64.to_le_bytes(),
            &kv.to_le_bytes(),
            &op_ttl.to_le_bytes(),
        ]
        .concat();
        let mut bad = rec.clone();
        bad[19] = 200;
        let bytes = [rec, bad].concat();
        let out: Vec<_> = TwrReader::new(&bytes[..]).collect();
        assert_eq!(
            *out[0].as_ref().unwrap(),
            Request {
                time: 9,
                key: 77,
                key_size: 30,
                value_size: 1000,
                op: TraceOp::Set,
                ttl: 3600
            }
        );
        assert!(matches!(
            out[1],
            Err(TraceError::BadRecord { index: 1, .. })
        ));
    }
}
