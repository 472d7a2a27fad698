//! Writing requests as a trace file in any format the readers of [`super::trace`] read:
//! Twitter's cache-trace CSV, libCacheSim's 20-byte `twr` and 24-byte `oracleGeneral`.
//! `memfleet sim --write-trace` uses it to turn a synthetic workload into a file, so that a
//! test (or a machine without the published traces) can replay a real file through each
//! reader, in-process and against live servers.
//!
//! What each format keeps: CSV and `twr` keep every field ([`Request`]'s key id becomes the
//! CSV key text of [`keys::key_bytes`], which the CSV reader hashes to another id, one to
//! one). `oracleGeneral` has no operation, key size or TTL: every request is written as an
//! access to its object, and `next_access_vtime` (the index of the object's next request, -1
//! when none) is computed, which needs the whole trace in memory. Not here: reading.

use std::collections::HashMap;
use std::io::{self, Write};

use super::keys;
use super::request::Request;
use super::trace::{TraceError, TraceFormat};

/// A trace could not be written.
#[derive(Debug, thiserror::Error)]
pub enum WriteTraceError {
    /// Reading the requests failed.
    #[error(transparent)]
    Read(#[from] TraceError),
    /// Writing the file failed.
    #[error("writing the trace: {0}")]
    Io(#[from] io::Error),
    /// A request has a field the format cannot hold.
    #[error("request {index} cannot be written as {format:?}: {reason}")]
    Unrepresentable {
        /// 0-based request index.
        index: u64,
        /// The format asked for.
        format: TraceFormat,
        /// Which field is out of range.
        reason: String,
    },
}

/// Largest key size of a `twr` record (10 bits).
const TWR_MAX_KEY: u32 = (1 << 10) - 1;
/// Largest value size of a `twr` record (22 bits).
const TWR_MAX_VALUE: u32 = (1 << 22) - 1;
/// Largest TTL of a `twr` record (24 bits, about 194 days).
const TWR_MAX_TTL: u32 = (1 << 24) - 1;

/// Writes every request to `out` in `format`; returns how many were written.
pub fn write_trace<I>(
    requests: I,
    format: TraceFormat,
    out: &mut dyn Write,
) -> Result<u64, WriteTraceError>
where
    I: IntoIterator<Item = Result<Request, TraceError>>,
{
    let mut written = 0u64;
    match format {
        TraceFormat::Csv => {
            let mut key = Vec::with_capacity(64);
            for req in requests {
                let req = req?;
                keys::write_key(req.key, req.key_size, &mut key);
                write!(out, "{},", req.time)?;
                out.write_all(&key)?;
                // The client id column: the generator has one client.
                writeln!(
                    out,
                    ",{},{},0,{},{}",
                    req.key_size,
                    req.value_size,
                    req.op.as_str(),
                    req.ttl
                )?;
                written += 1;
            }
        }
        TraceFormat::Twr => {
            for req in requests {
                let req = req?;
                out.write_all(&twr_record(&req, written)?)?;
                written += 1;
            }
        }
        TraceFormat::Oracle => {
            let all: Vec<Request> = requests.into_iter().collect::<Result<_, _>>()?;
            for (req, next) in all.iter().zip(next_accesses(&all)) {
                let mut rec = [0u8; 24];
                rec[0..4].copy_from_slice(&req.time.to_le_bytes());
                rec[4..12].copy_from_slice(&req.key.to_le_bytes());
                rec[12..16].copy_from_slice(&req.value_size.to_le_bytes());
                rec[16..24].copy_from_slice(&next.to_le_bytes());
                out.write_all(&rec)?;
                written += 1;
            }
        }
    }
    out.flush()?;
    Ok(written)
}

fn twr_record(req: &Request, index: u64) -> Result<[u8; 20], WriteTraceError> {
    let unrepresentable = |reason: String| WriteTraceError::Unrepresentable {
        index,
        format: TraceFormat::Twr,
        reason,
    };
    if req.key_size > TWR_MAX_KEY {
        return Err(unrepresentable(format!(
            "key size {} > {TWR_MAX_KEY}",
            req.key_size
        )));
    }
    if req.value_size > TWR_MAX_VALUE {
        return Err(unrepresentable(format!(
            "value size {} > {TWR_MAX_VALUE}",
            req.value_size
        )));
    }
    if req.ttl > TWR_MAX_TTL {
        return Err(unrepresentable(format!("TTL {} > {TWR_MAX_TTL}", req.ttl)));
    }
    let kv = (req.key_size << 22) | req.value_size;
    let op_ttl = (u32::from(req.op.libcachesim_code()) << 24) | req.ttl;
    let mut rec = [0u8; 20];
    rec[0..4].copy_from_slice(&req.time.to_le_bytes());
    rec[4..12].copy_from_slice(&req.key.to_le_bytes());
    rec[12..16].copy_from_slice(&kv.to_le_bytes());
    rec[16..20].copy_from_slice(&op_ttl.to_le_bytes());
    Ok(rec)
}

/// For each request, the index of the next request for the same object, or -1.
fn next_accesses(all: &[Request]) -> Vec<i64> {
    let mut next = vec![-1i64; all.len()];
    let mut seen: HashMap<u64, i64> = HashMap::new();
    for (i, req) in all.iter().enumerate().rev() {
        if let Some(later) = seen.insert(req.key, i as i64) {
            next[i] = later;
        }
    }
    next
}

#[cfg(test)]
mod tests {
    use super::super::binary::{OracleGeneralReader, TwrReader};
    use super::super::request::TraceOp;
    use super::super::trace::{key_id, CsvReader};
    use super::*;

    fn requests() -> Vec<Request> {
        let mk = |time, key, op, ttl| Request {
            time,
            key,
            key_size: 12,
            value_size: 300,
            op,
            ttl,
        };
        vec![
            mk(0, 7, TraceOp::Get, 0),
            mk(0, 9, TraceOp::Set, 3600),
            mk(1, 7, TraceOp::Get, 120),
            mk(2, 9, TraceOp::Delete, 0),
            mk(5, 70_000, TraceOp::Get, 0),
        ]
    }

    fn write(format: TraceFormat, reqs: &[Request]) -> Vec<u8> {
        let mut out = Vec::new();
        let n = write_trace(reqs.iter().copied().map(Ok), format, &mut out).unwrap();
        assert_eq!(n, reqs.len() as u64);
        out
    }

    #[test]
    fn twr_round_trips_every_field() {
        let reqs = requests();
        let bytes = write(TraceFormat::Twr, &reqs);
        assert_eq!(bytes.len(), 20 * reqs.len());
        let back: Vec<Request> = TwrReader::new(&bytes[..]).map(Result::unwrap).collect();
        assert_eq!(back, reqs);
    }

    #[test]
    fn csv_round_trips_all_but_the_key_id() {
        let reqs = requests();
        let bytes = write(TraceFormat::Csv, &reqs);
        let back: Vec<Request> = CsvReader::new(&bytes[..]).map(Result::unwrap).collect();
        for (b, r) in back.iter().zip(&reqs) {
            assert_eq!(b.key, key_id(&keys::key_bytes(r.key, r.key_size)));
            assert_eq!(Request { key: r.key, ..*b }, *r);
        }
        assert_eq!(back[0].key, back[2].key, "the same object keeps its key");
        assert_ne!(back[0].key, back[1].key);
    }

    #[test]
    fn oracle_general_keeps_objects_sizes_and_next_access() {
        let reqs = requests();
        let bytes = write(TraceFormat::Oracle, &reqs);
        assert_eq!(bytes.len(), 24 * reqs.len());
        let back: Vec<Request> = OracleGeneralReader::new(&bytes[..])
            .map(Result::unwrap)
            .collect();
        let keys: Vec<(u32, u64, u32)> =
            back.iter().map(|r| (r.time, r.key, r.value_size)).collect();
        let want: Vec<(u32, u64, u32)> =
            reqs.iter().map(|r| (r.time, r.key, r.value_size)).collect();
        assert_eq!(keys, want);
        assert!(back.iter().all(|r| r.op == TraceOp::Get));
        let next: Vec<i64> = bytes
            .chunks(24)
            .map(|c| i64::from_le_bytes(c[16..24].try_into().unwrap()))
            .collect();
        assert_eq!(next, vec![2, 3, -1, -1, -1]);
    }

    #[test]
    fn fields_a_format_cannot_hold_are_errors() {
        let mut reqs = requests();
        reqs[3].value_size = 5 << 20;
        let err =
            write_trace(reqs.into_iter().map(Ok), TraceFormat::Twr, &mut Vec::new()).unwrap_err();
        assert!(
            matches!(err, WriteTraceError::Unrepresentable { index: 3, .. }),
            "{err}"
        );
    }
}
