//! The experiment's clients, plain blocking sockets (one thread per connection): a
//! pipelined fill, the `stats` reply, and a closed loop of random gets whose values are all
//! checked, with a latency histogram.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use rand::{RngExt, SeedableRng};

/// The value of key `n`: its number, repeated to `size` bytes (every reply is checked).
pub fn value(n: u64, size: usize) -> Vec<u8> {
    let unit = format!("{n:012}|");
    unit.bytes().cycle().take(size).collect()
}

fn connect(addr: SocketAddr) -> Result<(BufReader<TcpStream>, TcpStream)> {
    let s = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    Ok((BufReader::with_capacity(1 << 20, s.try_clone()?), s))
}

/// Stores keys `0..items` with `conns` connections, `batch` sets in flight on each.
pub fn fill(addr: SocketAddr, items: u64, value_size: usize, conns: u64) -> Result<()> {
    let per = items.div_ceil(conns);
    let threads: Vec<_> = (0..conns)
        .map(|c| {
            std::thread::spawn(move || -> Result<()> {
                let (mut r, mut w) = connect(addr)?;
                let (first, last) = (c * per, ((c + 1) * per).min(items));
                let mut line = String::new();
                let mut at = first;
                let mut buf = Vec::new();
                while at < last {
                    let end = (at + 64).min(last);
                    buf.clear();
                    for n in at..end {
                        buf.extend_from_slice(
                            format!("set key:{n} 0 0 {value_size}\r\n").as_bytes(),
                        );
                        buf.extend_from_slice(&value(n, value_size));
                        buf.extend_from_slice(b"\r\n");
                    }
                    w.write_all(&buf)?;
                    for _ in at..end {
                        line.clear();
                        r.read_line(&mut line)?;
                        if line != "STORED\r\n" {
                            bail!("a set was answered {line:?}");
                        }
                    }
                    at = end;
                }
                Ok(())
            })
        })
        .collect();
    for t in threads {
        t.join().expect("fill thread")?;
    }
    Ok(())
}

/// `stats` as name → value.
pub fn stats(addr: SocketAddr) -> Result<HashMap<String, String>> {
    let (mut r, mut w) = connect(addr)?;
    w.write_all(b"stats\r\n")?;
    let mut out = HashMap::new();
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            bail!("the server closed the connection during stats");
        }
        if line == "END\r\n" {
            return Ok(out);
        }
        let mut words = line.split_whitespace();
        if let (Some("STAT"), Some(k), Some(v)) = (words.next(), words.next(), words.next()) {
            out.insert(k.to_string(), v.to_string());
        }
    }
}

/// A stat as a number (0 when absent).
pub fn stat(stats: &HashMap<String, String>, name: &str) -> u64 {
    stats.get(name).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// What the closed loop of gets measured.
#[derive(Debug, Clone)]
pub struct Reads {
    /// Gets answered.
    pub gets: u64,
    /// Of those, hits (every value checked).
    pub hits: u64,
    /// Seconds measured.
    pub seconds: f64,
    /// Latency of every get, microseconds.
    pub latency: Histogram<u64>,
}

/// `conns` connections each with `pipeline` gets in flight (sent together, then their
/// replies read), each of `keys_per_get` distinct random keys of `0..items` (a multi-get when
/// above 1), for `duration`. A wrong value fails the run; latency is per request, from the
/// batch's send to its reply.
#[allow(clippy::too_many_arguments)]
pub fn read_random(
    addr: SocketAddr,
    items: u64,
    value_size: usize,
    conns: u64,
    pipeline: usize,
    keys_per_get: usize,
    duration: Duration,
    seed: u64,
) -> Result<Reads> {
    let start = Instant::now();
    let threads: Vec<_> = (0..conns)
        .map(|c| {
            std::thread::spawn(move || -> Result<(u64, u64, Histogram<u64>)> {
                let (mut r, mut w) = connect(addr)?;
                let mut rng =
                    rand::rngs::SmallRng::seed_from_u64(seed ^ (c + 1).wrapping_mul(0x9e37_79b9));
                let mut hist = Histogram::<u64>::new(3)?;
                let (mut gets, mut hits) = (0, 0);
                let mut line = String::new();
                let mut data = Vec::new();
                let mut batch: Vec<Vec<u64>> = vec![Vec::with_capacity(keys_per_get); pipeline];
                let mut request = String::new();
                while start.elapsed() < duration {
                    request.clear();
                    for keys in &mut batch {
                        keys.clear();
                        while keys.len() < keys_per_get {
                            let n = rng.random_range(0..items);
                            if !keys.contains(&n) {
                                keys.push(n);
                            }
                        }
                        request.push_str("get");
                        for n in keys.iter() {
                            request.push_str(&format!(" key:{n}"));
                        }
                        request.push_str("\r\n");
                    }
                    let t = Instant::now();
                    w.write_all(request.as_bytes())?;
                    for keys in &batch {
                        // Values come in request order; missed keys are left out.
                        let mut next = 0;
                        loop {
                            line.clear();
                            r.read_line(&mut line)?;
                            if line == "END\r\n" {
                                break;
                            }
                            let mut words = line.split_whitespace();
                            let (Some("VALUE"), Some(key), Some(_flags), Some(len)) =
                                (words.next(), words.next(), words.next(), words.next())
                            else {
                                bail!("unexpected reply {line:?}");
                            };
                            let len: usize = len.parse().context("a VALUE line's length")?;
                            let Some(at) = keys[next..]
                                .iter()
                                .position(|n| key.strip_prefix("key:") == Some(&n.to_string()))
                            else {
                                bail!("{key}: not asked for, or out of order");
                            };
                            let n = keys[next + at];
                            next += at + 1;
                            data.resize(len + 2, 0);
                            r.read_exact(&mut data)?;
                            if data[..len] != value(n, value_size)[..] {
                                bail!("key:{n}: a wrong value");
                            }
                            hits += 1;
                        }
                        hist.record(t.elapsed().as_micros() as u64)?;
                        gets += keys_per_get as u64;
                    }
                }
                Ok((gets, hits, hist))
            })
        })
        .collect();
    let mut out = Reads {
        gets: 0,
        hits: 0,
        seconds: 0.0,
        latency: Histogram::new(3)?,
    };
    for t in threads {
        let (gets, hits, hist) = t.join().expect("reader thread")?;
        out.gets += gets;
        out.hits += hits;
        out.latency.add(hist)?;
    }
    out.seconds = start.elapsed().as_secs_f64();
    Ok(out)
}

/// Resident memory of process `pid`, bytes.
pub fn rss(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .context("VmRSS in /proc/PID/status")?;
    Ok(kib * 1024)
}
