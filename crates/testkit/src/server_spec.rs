//! A server to start, described once: which program (`memfleet server` or memcached), its
//! memory, threads and other flags, its address and CPU. An experiment says what differs
//! (`ServerSpec::memfleet(bin, 256).threads(2).arg("--flash")...`); the command line, the
//! free port and the wait until it accepts connections are this module's.

use crate::process::Spawned;
use anyhow::Result;
use std::net::{IpAddr, SocketAddr};

/// Which server program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Program {
    /// `BIN server ...`.
    Memfleet,
    /// memcached, as `nobody`, TCP only.
    Memcached,
}

/// A server to start (see the module doc).
#[derive(Clone, Debug)]
pub struct ServerSpec {
    bin: String,
    program: Program,
    ip: IpAddr,
    port: Option<u16>,
    memory_mib: u64,
    threads: usize,
    extra: Vec<String>,
    cpu: Option<usize>,
}

impl ServerSpec {
    /// `BIN server` with `memory_mib` of items and one worker, on 127.0.0.1.
    pub fn memfleet(bin: &str, memory_mib: u64) -> ServerSpec {
        ServerSpec::new(bin, Program::Memfleet, memory_mib)
    }

    /// memcached at `bin` with `memory_mib` of items and one worker, on 127.0.0.1, TCP only,
    /// as `nobody` (so it also starts as root).
    pub fn memcached(bin: &str, memory_mib: u64) -> ServerSpec {
        ServerSpec::new(bin, Program::Memcached, memory_mib)
    }

    fn new(bin: &str, program: Program, memory_mib: u64) -> ServerSpec {
        ServerSpec {
            bin: bin.to_string(),
            program,
            ip: IpAddr::from([127, 0, 0, 1]),
            port: None,
            memory_mib,
            threads: 1,
            extra: Vec::new(),
            cpu: None,
        }
    }

    /// Worker threads (`-t`).
    pub fn threads(mut self, threads: usize) -> ServerSpec {
        self.threads = threads;
        self
    }

    /// Listens on `ip` (`-l`).
    pub fn on(mut self, ip: IpAddr) -> ServerSpec {
        self.ip = ip;
        self
    }

    /// Listens on `port` (otherwise a free one is taken when it starts).
    pub fn port(mut self, port: u16) -> ServerSpec {
        self.port = Some(port);
        self
    }

    /// Runs under `taskset -c CPU` when `cpu` is given.
    pub fn cpu(mut self, cpu: Option<usize>) -> ServerSpec {
        self.cpu = cpu;
        self
    }

    /// One more argument, after the ones this type writes.
    pub fn arg(mut self, arg: impl Into<String>) -> ServerSpec {
        self.extra.push(arg.into());
        self
    }

    /// More arguments, after the ones this type writes.
    pub fn args<S: Into<String>>(mut self, args: impl IntoIterator<Item = S>) -> ServerSpec {
        self.extra.extend(args.into_iter().map(Into::into));
        self
    }

    /// The command line for a server on `port`.
    pub fn argv(&self, port: u16) -> Vec<String> {
        let (ip, port, memory, threads) = (
            self.ip.to_string(),
            port.to_string(),
            self.memory_mib.to_string(),
            self.threads.to_string(),
        );
        let head: Vec<&str> = match self.program {
            Program::Memfleet => vec![&self.bin, "server", "-l", &ip, "-p", &port],
            Program::Memcached => {
                vec![&self.bin, "-u", "nobody", "-l", &ip, "-U", "0", "-p", &port]
            }
        };
        head.into_iter()
            .chain(["-m", &memory, "-t", &threads])
            .map(String::from)
            .chain(self.extra.iter().cloned())
            .collect()
    }

    /// Starts it (on its port, or a free one) and waits until it accepts connections.
    pub fn start(&self) -> Result<Spawned> {
        let port = match self.port {
            Some(port) => port,
            None => crate::ports::try_free_port()?,
        };
        Spawned::start(&self.argv(port), SocketAddr::new(self.ip, port), self.cpu)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_program_gets_its_own_command_line() {
        let spec = ServerSpec::memfleet("memfleet", 256)
            .threads(2)
            .arg("--flash");
        assert_eq!(
            spec.argv(7000).join(" "),
            "memfleet server -l 127.0.0.1 -p 7000 -m 256 -t 2 --flash"
        );
        let mc = ServerSpec::memcached("memcached", 64).args(["-o", "ext_path=/f:1g"]);
        assert_eq!(
            mc.argv(7001).join(" "),
            "memcached -u nobody -l 127.0.0.1 -U 0 -p 7001 -m 64 -t 1 -o ext_path=/f:1g"
        );
    }
}
