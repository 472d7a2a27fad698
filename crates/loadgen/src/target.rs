//! The servers under test: external ones (`--target NAME=ADDR[,pid=PID]`) and
//! ones this process starts itself (`--spawn memcached|memfleet|floor|NAME=COMMAND`),
//! on a free loopback port: their command lines. Starting them, waiting until they accept
//! connections and stopping them is `memfleet_testkit::Spawned`'s. Not here: the load
//! itself (`client`).

use std::net::{SocketAddr, ToSocketAddrs};

use anyhow::{Context, Result};

/// A server given on the command line with `--target`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalTarget {
    /// Name in the report.
    pub name: String,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its PID, for its CPU time.
    pub pid: Option<u32>,
}

/// Parses `NAME=HOST:PORT[,pid=PID]` or `HOST:PORT[,pid=PID]`.
pub fn parse_target(s: &str) -> Result<ExternalTarget, String> {
    let mut parts = s.split(',');
    let first = parts.next().unwrap_or_default();
    let (name, addr) = match first.split_once('=') {
        Some((name, addr)) if !name.is_empty() => (name.to_string(), addr),
        Some(_) => return Err(format!("empty target name in {s:?}")),
        None => (first.to_string(), first),
    };
    let addr = addr
        .to_socket_addrs()
        .map_err(|e| format!("bad address {addr:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("{addr:?} resolves to no address"))?;
    let mut pid = None;
    for part in parts {
        match part.split_once('=') {
            Some(("pid", p)) => {
                pid = Some(p.parse().map_err(|_| format!("bad pid {p:?} in {s:?}"))?);
            }
            _ => {
                return Err(format!(
                    "unknown target option {part:?} in {s:?} (only pid=PID)"
                ))
            }
        }
    }
    Ok(ExternalTarget { name, addr, pid })
}

/// A server to start: `memcached`, `memfleet`, `floor` or `NAME=COMMAND` (`{port}` in COMMAND is
/// replaced by the chosen port; split on whitespace, no shell).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpawnSpec {
    /// Debian's memcached.
    Memcached,
    /// `memfleet server`.
    Memfleet,
    /// `memfleet floor`: the do-nothing server of the `memfleet-floor` crate.
    Floor,
    /// Any command.
    Custom {
        /// Name in the report.
        name: String,
        /// The argument vector, with `{port}` placeholders.
        argv: Vec<String>,
    },
}

/// Parses a `--spawn` value.
pub fn parse_spawn(s: &str) -> Result<SpawnSpec, String> {
    match s {
        "memcached" => Ok(SpawnSpec::Memcached),
        "memfleet" => Ok(SpawnSpec::Memfleet),
        "floor" => Ok(SpawnSpec::Floor),
        _ => {
            let Some((name, cmd)) = s.split_once('=') else {
                return Err(format!(
                    "unknown server {s:?}: use memcached, memfleet, floor or NAME='COMMAND -p {{port}}'"
                ));
            };
            let argv: Vec<String> = cmd.split_whitespace().map(String::from).collect();
            if name.is_empty() || argv.is_empty() {
                return Err(format!("empty name or command in {s:?}"));
            }
            if !argv.iter().any(|a| a.contains("{port}")) {
                return Err(format!("the command in {s:?} must contain {{port}}"));
            }
            Ok(SpawnSpec::Custom {
                name: name.to_string(),
                argv,
            })
        }
    }
}

/// What the built-in server commands are made of.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// memcached executable.
    pub memcached_bin: String,
    /// memfleet executable.
    pub memfleet_bin: String,
    /// Worker threads (`-t`).
    pub threads: u32,
    /// Memory in MiB (`-m`).
    pub memory_mib: u64,
    /// Value size of the run: the floor server's get replies carry values of this size.
    pub value_size: usize,
    /// Also serve UDP on the same port number (memcached's and memfleet's `-U`).
    pub udp: bool,
}

impl SpawnSpec {
    /// Name in the report.
    pub fn name(&self) -> &str {
        match self {
            SpawnSpec::Memcached => "memcached",
            SpawnSpec::Memfleet => "memfleet",
            SpawnSpec::Floor => "floor",
            SpawnSpec::Custom { name, .. } => name,
        }
    }

    /// The command line for a server on `port`.
    pub fn argv(&self, port: u16, s: &ServerSettings) -> Vec<String> {
        let (p, t, m) = (
            port.to_string(),
            s.threads.to_string(),
            s.memory_mib.to_string(),
        );
        let udp = if s.udp { p.clone() } else { "0".to_string() };
        // memcached and memfleet server take the same listening flags.
        let listen = |head: &[&str]| -> Vec<String> {
            let tail = ["-l", "127.0.0.1", "-p", &p, "-U", &udp, "-t", &t, "-m", &m];
            head.iter().chain(&tail).map(|a| a.to_string()).collect()
        };
        match self {
            // Root needs -u; as another user memcached ignores it.
            SpawnSpec::Memcached => listen(&[&s.memcached_bin, "-u", "nobody"]),
            SpawnSpec::Memfleet => listen(&[&s.memfleet_bin, "server"]),
            // Same executable as --spawn memfleet: the floor and the server it bounds come
            // from the same build.
            SpawnSpec::Floor => [
                s.memfleet_bin.as_str(),
                "floor",
                "--port",
                &p,
                "--value-size",
                &s.value_size.to_string(),
            ]
            .map(String::from)
            .to_vec(),
            SpawnSpec::Custom { argv, .. } => {
                // {memory} and {threads} let one command follow --memory-sizes (replay) and
                // --server-threads like the built-in servers do.
                argv.iter()
                    .map(|a| {
                        a.replace("{port}", &p)
                            .replace("{memory}", &m)
                            .replace("{threads}", &t)
                    })
                    .collect()
            }
        }
    }
}

/// A port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> Result<u16> {
    memfleet_testkit::try_free_port().context("finding a free port")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse() {
        assert_eq!(
            parse_target("memfleet=127.0.0.1:11211,pid=1234").unwrap(),
            ExternalTarget {
                name: "memfleet".into(),
                addr: "127.0.0.1:11211".parse().unwrap(),
                pid: Some(1234)
            }
        );
        let t = parse_target("127.0.0.1:5").unwrap();
        assert_eq!((t.name.as_str(), t.pid), ("127.0.0.1:5", None));
        assert!(parse_target("x=127.0.0.1:5,cpu=1").is_err());
        assert!(parse_target("x=127.0.0.1:5,pid=z").is_err());
        assert!(parse_target("=127.0.0.1:5").is_err());
        assert!(parse_target("x=nowhere").is_err());
    }

    #[test]
    fn spawn_commands() {
        let s = ServerSettings {
            memcached_bin: "memcached".into(),
            memfleet_bin: "target/release/memfleet".into(),
            threads: 1,
            memory_mib: 1024,
            value_size: 100,
            udp: false,
        };
        assert_eq!(
            parse_spawn("memcached").unwrap().argv(7, &s).join(" "),
            "memcached -u nobody -l 127.0.0.1 -p 7 -U 0 -t 1 -m 1024"
        );
        assert_eq!(
            parse_spawn("memfleet").unwrap().argv(7, &s).join(" "),
            "target/release/memfleet server -l 127.0.0.1 -p 7 -U 0 -t 1 -m 1024"
        );
        assert_eq!(
            parse_spawn("floor").unwrap().argv(7, &s).join(" "),
            "target/release/memfleet floor --port 7 --value-size 100"
        );
        assert_eq!(parse_spawn("floor").unwrap().name(), "floor");
        let c = parse_spawn("old=/opt/mc -p {port} -t 2").unwrap();
        assert_eq!(c.name(), "old");
        assert_eq!(c.argv(9, &s).join(" "), "/opt/mc -p 9 -t 2");
        let c = parse_spawn("new=/opt/mc -p {port} -m {memory} -t {threads}").unwrap();
        assert_eq!(c.argv(9, &s).join(" "), "/opt/mc -p 9 -m 1024 -t 1");
        assert!(parse_spawn("nginx").is_err());
        assert!(parse_spawn("x=/bin/true").is_err());
        assert!(parse_spawn("=a {port}").is_err());
    }
}
