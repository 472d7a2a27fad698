//! Reading a server's `stats` over the memcached text protocol, for scenarios that sample a
//! server while loading it (the warm-up experiment's cold-cluster hit rate, the expiry
//! experiment's memory held), and a process's resident memory from procfs.

use std::collections::HashMap;
use std::net::SocketAddr;

use anyhow::{bail, Context, Result};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// A connection kept open for repeated `stats` requests.
pub struct StatsConn {
    conn: BufReader<TcpStream>,
    line: String,
}

/// One `stats` reply: name to value, as the server wrote them.
#[derive(Debug, Clone, Default)]
pub struct Stats(pub HashMap<String, String>);

impl Stats {
    /// A counter or gauge, if the server reported it as an integer.
    pub fn int(&self, name: &str) -> Option<u64> {
        self.0.get(name).and_then(|v| v.parse().ok())
    }

    /// A counter or gauge, 0 when absent (a server that does not count it).
    pub fn int_or_zero(&self, name: &str) -> u64 {
        self.int(name).unwrap_or(0)
    }
}

impl StatsConn {
    /// Connects to `addr`.
    pub async fn connect(addr: SocketAddr) -> Result<StatsConn> {
        let stream = TcpStream::connect(addr)
            .await
            .with_context(|| format!("connecting to {addr} for stats"))?;
        Ok(StatsConn {
            conn: BufReader::new(stream),
            line: String::new(),
        })
    }

    /// `stats` (an empty `group`) or `stats <group>` (`settings`, `memfleet`, ...).
    pub async fn get(&mut self, group: &str) -> Result<Stats> {
        let request = if group.is_empty() {
            "stats\r\n".to_string()
        } else {
            format!("stats {group}\r\n")
        };
        self.conn.get_mut().write_all(request.as_bytes()).await?;
        let mut stats = HashMap::new();
        loop {
            self.line.clear();
            if self.conn.read_line(&mut self.line).await? == 0 {
                bail!("the server closed the connection during {request:?}");
            }
            let line = self.line.trim_end();
            if line == "END" {
                return Ok(Stats(stats));
            }
            let Some(stat) = line.strip_prefix("STAT ") else {
                bail!("unexpected reply to {}: {line:?}", request.trim_end());
            };
            if let Some((name, value)) = stat.split_once(' ') {
                stats.insert(name.to_string(), value.to_string());
            }
        }
    }
}

/// The resident set size of process `pid` in bytes (`VmRSS` of /proc/PID/status).
pub fn resident_bytes(pid: u32) -> Result<u64> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|kib| kib.trim().parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .with_context(|| format!("no VmRSS in {path}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_its_own_resident_size() {
        let rss = resident_bytes(std::process::id()).unwrap();
        assert!(rss > 100 * 1024, "{rss}");
    }

    #[test]
    fn integers_and_absent_stats() {
        let s = Stats(HashMap::from([
            ("bytes".to_string(), "42".to_string()),
            ("version".to_string(), "1.6.18".to_string()),
        ]));
        assert_eq!(s.int("bytes"), Some(42));
        assert_eq!(s.int("version"), None);
        assert_eq!(s.int_or_zero("curr_items"), 0);
    }
}
