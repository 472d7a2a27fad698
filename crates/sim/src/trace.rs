//! Reading recorded cache traces: Twitter's `cache-trace` CSV (this module)
//! and libCacheSim's binary formats (`binary`), behind one [`open_trace`].
//!
//! The CSV rows are `timestamp,anonymized key,key size,value size,client id,
//! operation,TTL` (timestamp in seconds); the key string is hashed (xxh3) to a
//! compact 64-bit key id. Not here: decompression (`.zst` files must be
//! decompressed first with `zstd -d`), and no interpretation of the requests
//! (that is `replay`).

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::Path;

use xxhash_rust::xxh3::xxh3_64;

pub use super::binary::{OracleGeneralReader, TwrReader, ORACLE_KEY_SIZE};
pub use super::request::{Request, TraceOp};
pub use super::trace_error::TraceError;

/// The compact key id of a textual key (xxh3-64 of its bytes).
pub fn key_id(key: &[u8]) -> u64 {
    xxh3_64(key)
}

/// Trace file formats understood by [`open_trace`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TraceFormat {
    /// Twitter cache-trace CSV.
    Csv,
    /// libCacheSim oracleGeneral binary (24-byte records).
    Oracle,
    /// libCacheSim twr binary (20-byte records of converted Twitter traces).
    Twr,
}

impl TraceFormat {
    /// Guesses the format from a file name: `*.csv`/`*.txt` are CSV, names
    /// containing `oracleGeneral` are oracle. `twr` must be asked for explicitly.
    pub fn detect(path: &Path) -> Option<TraceFormat> {
        let name = path.file_name()?.to_string_lossy().to_ascii_lowercase();
        if name.contains("oraclegeneral") {
            Some(TraceFormat::Oracle)
        } else if name.ends_with(".csv") || name.ends_with(".txt") {
            Some(TraceFormat::Csv)
        } else {
            None
        }
    }
}

/// A boxed stream of requests, as read from a trace.
pub type RequestStream = Box<dyn Iterator<Item = Result<Request, TraceError>>>;

/// Opens `path` as a trace of the given format.
pub fn open_trace(path: &Path, format: TraceFormat) -> io::Result<RequestStream> {
    let file = BufReader::with_capacity(1 << 16, File::open(path)?);
    Ok(match format {
        TraceFormat::Csv => Box::new(CsvReader::new(file)),
        TraceFormat::Oracle => Box::new(OracleGeneralReader::new(file)),
        TraceFormat::Twr => Box::new(TwrReader::new(file)),
    })
}

/// Streaming reader of Twitter cache-trace CSV.
///
/// Blank lines and lines starting with `#` are skipped. A malformed line yields
/// [`TraceError::Malformed`] with its line number and reading continues with the
/// next line; after an I/O error the stream ends. The key may itself contain
/// commas: the six other fields are taken from the two ends of the line.
pub struct CsvReader<R> {
    inner: R,
    line: u64,
    buf: Vec<u8>,
    done: bool,
}

impl<R: BufRead> CsvReader<R> {
    /// Wraps a buffered reader.
    pub fn new(inner: R) -> Self {
        CsvReader {
            inner,
            line: 0,
            buf: Vec::with_capacity(256),
            done: false,
        }
    }
}

impl<R: BufRead> Iterator for CsvReader<R> {
    type Item = Result<Request, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            self.buf.clear();
            match self.inner.read_until(b'\n', &mut self.buf) {
                Ok(0) => self.done = true,
                Ok(_) => {
                    self.line += 1;
                    let text = self.buf.trim_ascii();
                    if text.is_empty() || text.starts_with(b"#") {
                        continue;
                    }
                    let line = self.line;
                    return Some(
                        parse_csv_line(text)
                            .map_err(|reason| TraceError::Malformed { line, reason }),
                    );
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.done = true;
                    return Some(Err(e.into()));
                }
            }
        }
        None
    }
}

/// Parses one non-empty CSV line (without its line terminator).
pub fn parse_csv_line(line: &[u8]) -> Result<Request, String> {
    let found = line.iter().filter(|&&b| b == b',').count() + 1;
    let shape = || format!("expected 7 comma-separated fields, found {found}");
    let first = line.iter().position(|&b| b == b',').ok_or_else(shape)?;
    let (time_field, rest) = (&line[..first], &line[first + 1..]);
    let mut tail = rest.rsplitn(6, |&b| b == b',');
    let ttl = tail.next().ok_or_else(shape)?;
    let op = tail.next().ok_or_else(shape)?;
    let _client = tail.next().ok_or_else(shape)?;
    let value_size = tail.next().ok_or_else(shape)?;
    let key_size = tail.next().ok_or_else(shape)?;
    let key = tail.next().ok_or_else(shape)?;
    if key.is_empty() {
        return Err("empty key".into());
    }
    let op_text = op.trim_ascii();
    let op = TraceOp::parse(op_text)
        .ok_or_else(|| format!("unknown operation {:?}", String::from_utf8_lossy(op_text)))?;
    Ok(Request {
        time: parse_time(time_field)?,
        key: key_id(key),
        key_size: parse_u32(key_size, "key size")?,
        value_size: parse_u32(value_size, "value size")?,
        op,
        ttl: parse_u32(ttl, "TTL")?,
    })
}

fn field_str<'a>(field: &'a [u8], what: &str) -> Result<&'a str, String> {
    std::str::from_utf8(field.trim_ascii()).map_err(|_| format!("{what} is not text"))
}

fn parse_u32(field: &[u8], what: &str) -> Result<u32, String> {
    let text = field_str(field, what)?;
    text.parse()
        .map_err(|_| format!("{what} {text:?} is not an unsigned 32-bit integer"))
}

/// Whole seconds; a fractional timestamp is truncated.
fn parse_time(field: &[u8]) -> Result<u32, String> {
    let text = field_str(field, "timestamp")?;
    if let Ok(t) = text.parse::<u32>() {
        return Ok(t);
    }
    match text.parse::<f64>() {
        Ok(t) if t.is_finite() && (0.0..=f64::from(u32::MAX)).contains(&t) => Ok(t as u32),
        _ => Err(format!("timestamp {text:?} is not a number of seconds")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csv(text: &str) -> Vec<Result<Request, TraceError>> {
        CsvReader::new(text.as_bytes()).collect()
    }

    #[test]
    fn parses_sample_lines_and_skips_blanks() {
        let text = "0,nz:u:eeW511W3dcH3de3d15ec,24,136,3,get,0\n\n\
                    \r\n1,nz:u:eeW511W3dcH3de3d15ec,24,140,3,set,86400\r\n\
                    # comment\n2,a,1,0,7,DELETE,0";
        let reqs: Vec<Request> = csv(text).into_iter().map(Result::unwrap).collect();
        assert_eq!(reqs.len(), 3);
        let k = key_id(b"nz:u:eeW511W3dcH3de3d15ec");
        assert_eq!(
            reqs[0],
            Request {
                time: 0,
                key: k,
                key_size: 24,
                value_size: 136,
                op: TraceOp::Get,
                ttl: 0
            }
        );
        assert_eq!(
            reqs[1],
            Request {
                time: 1,
                key: k,
                key_size: 24,
                value_size: 140,
                op: TraceOp::Set,
                ttl: 86400
            }
        );
        assert_eq!(reqs[2].op, TraceOp::Delete);
        assert_eq!(reqs[2].key, key_id(b"a"));
        assert_ne!(reqs[2].key, k);
    }

    #[test]
    fn key_with_commas_and_fractional_time() {
        let r = parse_csv_line(b"12.75,a,b,c,5,10,1,gets,0").unwrap();
        assert_eq!(r.time, 12);
        assert_eq!(r.key, key_id(b"a,b,c"));
        assert_eq!((r.key_size, r.value_size, r.op), (5, 10, TraceOp::Gets));
    }

    #[test]
    fn malformed_lines_report_their_line_number_and_reading_continues() {
        let text = "0,k,1,2,3,get,0\n\n1,k,1,2,3,frobnicate,0\n2,k,1,2\n3,k,x,2,3,get,0\n4,k,1,2,3,get,0\n";
        let out = csv(text);
        assert_eq!(out.len(), 5);
        assert!(out[0].is_ok());
        let lines: Vec<(u64, String)> = out[1..4]
            .iter()
            .map(|r| match r {
                Err(TraceError::Malformed { line, reason }) => (*line, reason.clone()),
                other => panic!("expected malformed, got {other:?}"),
            })
            .collect();
        assert_eq!(lines[0].0, 3);
        assert!(lines[0].1.contains("frobnicate"), "{}", lines[0].1);
        assert_eq!(lines[1].0, 4);
        assert!(lines[1].1.contains("found 4"), "{}", lines[1].1);
        assert_eq!(lines[2].0, 5);
        assert!(lines[2].1.contains("key size"), "{}", lines[2].1);
        assert_eq!(out[4].as_ref().unwrap().time, 4);
        let msg = out[1].as_ref().unwrap_err().to_string();
        assert!(msg.starts_with("trace line 3:"), "{msg}");
    }

    #[test]
    fn detects_format_by_name() {
        assert_eq!(
            TraceFormat::detect(Path::new("/x/cluster52.csv")),
            Some(TraceFormat::Csv)
        );
        assert_eq!(
            TraceFormat::detect(Path::new("cluster52.oracleGeneral.bin")),
            Some(TraceFormat::Oracle)
        );
        assert_eq!(TraceFormat::detect(Path::new("cluster52.sbin")), None);
    }
}
