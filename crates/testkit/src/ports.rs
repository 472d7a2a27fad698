//! Ports on 127.0.0.1 that nothing else is handed, and a connection that waits for its
//! listener. Not here: starting what listens (`process`).
//!
//! Binding port 0 and letting go is not enough: the kernel may give the same port to the
//! next caller (one process then lists a server twice), and an outgoing connection's source
//! port may take it before the server that was meant to bind it does. So a port handed out
//! here comes from below the kernel's ephemeral range (`ip_local_port_range`, where neither
//! a `bind(…:0)` nor a `connect` ever picks), must be free for TCP and UDP when it is handed
//! out, and is claimed by a lock file (`$TMPDIR/memfleet-ports/PORT`, `flock`) held until
//! the process exits: no two callers in this process, in tests running side by side or in
//! the child processes they start, get the same port while its holder lives.

use std::fs::{File, OpenOptions};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Ports never handed out, though below the ephemeral range: memcached's, twemproxy's and
/// PostgreSQL's defaults, which a service the machine runs (or a package just installed)
/// may bind at any moment.
const RESERVED: [u16; 6] = [5432, 11211, 11212, 22121, 22122, 22222];

/// The lowest port handed out (below: well-known and registered services' usual ports).
const LOWEST: u16 = 10_000;

/// The lock files of the ports this process holds, kept open until it exits.
static CLAIMED: Mutex<Vec<(u16, File)>> = Mutex::new(Vec::new());

/// Where to look next, so that successive calls do not retry the ports just claimed.
static NEXT: Mutex<Option<u16>> = Mutex::new(None);

/// A port on 127.0.0.1, free for TCP and UDP now and handed to no other caller while this
/// process lives (see the module's documentation).
pub fn try_free_port() -> std::io::Result<u16> {
    let (low, high) = handed_out_range();
    let mut next = NEXT.lock().unwrap_or_else(|e| e.into_inner());
    let start = next.unwrap_or_else(|| low + (start_offset() % u32::from(high - low)) as u16);
    let port = claim_port(low, high, start)?;
    *next = Some(if port + 1 >= high { low } else { port + 1 });
    Ok(port)
}

/// The first port from `start` on (wrapping within `low..high`) that is not reserved, not
/// claimed and free for TCP and UDP, claimed for the rest of the process's life.
fn claim_port(low: u16, high: u16, start: u16) -> std::io::Result<u16> {
    let span = u32::from(high - low);
    let dir = claims_dir()?;
    for i in 0..span {
        let port = low + ((u32::from(start - low) + i) % span) as u16;
        if RESERVED.contains(&port) {
            continue;
        }
        if let Some(lock) = claim_free(&dir, port)? {
            keep(port, lock);
            return Ok(port);
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        format!("every port in {low}..{high} is claimed or bound"),
    ))
}

fn claims_dir() -> std::io::Result<PathBuf> {
    let dir = std::env::temp_dir().join("memfleet-ports");
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Claims `port` if no one has and it is free for TCP and UDP: its lock, or `None`. A port
/// bound by something that takes no part in the claims stays claimed (kept), so that no one
/// here tries it again.
fn claim_free(dir: &std::path::Path, port: u16) -> std::io::Result<Option<File>> {
    let Some(lock) = claim(dir.join(port.to_string()))? else {
        return Ok(None);
    };
    let free = TcpListener::bind(("127.0.0.1", port)).is_ok()
        && UdpSocket::bind(("127.0.0.1", port)).is_ok();
    if free {
        Ok(Some(lock))
    } else {
        keep(port, lock);
        Ok(None)
    }
}

/// Holds `port`'s claim until the process exits.
fn keep(port: u16, lock: File) {
    CLAIMED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((port, lock));
}

/// A base port such that `base + offset` is free and claimed (as [`try_free_port`]'s
/// ports) for every offset: for something that takes its ports at fixed offsets from one
/// base (`memfleet fleet up --base-port`).
pub fn try_free_ports_at(offsets: &[u16]) -> std::io::Result<u16> {
    let (low, high) = handed_out_range();
    let widest = offsets.iter().copied().max().unwrap_or(0);
    if u32::from(low) + u32::from(widest) >= u32::from(high) {
        return Err(std::io::Error::other(
            "offsets wider than the ports handed out",
        ));
    }
    let bases = high - low - widest;
    let dir = claims_dir()?;
    let mut next = NEXT.lock().unwrap_or_else(|e| e.into_inner());
    let start = next.unwrap_or_else(|| low + (start_offset() % u32::from(bases)) as u16);
    let start = if start >= low + bases { low } else { start };
    'base: for i in 0..u32::from(bases) {
        let base = low + ((u32::from(start - low) + i) % u32::from(bases)) as u16;
        let mut locks = Vec::new();
        for &o in offsets {
            let port = base + o;
            if RESERVED.contains(&port) {
                continue 'base;
            }
            match claim_free(&dir, port)? {
                Some(lock) => locks.push((port, lock)),
                // What this attempt claimed is let go (dropping the locks).
                None => continue 'base,
            }
        }
        for (port, lock) in locks {
            keep(port, lock);
        }
        let after = u32::from(base) + u32::from(widest) + 1;
        *next = Some(if after >= u32::from(high) {
            low
        } else {
            after as u16
        });
        return Ok(base);
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        format!("no base in {low}..{high} with every offset free"),
    ))
}

/// [`try_free_ports_at`] for tests: panics when no base can be had.
pub fn free_ports_at(offsets: &[u16]) -> u16 {
    try_free_ports_at(offsets).expect("free ports at the offsets on 127.0.0.1")
}

/// [`try_free_port`] for tests: panics when no port can be had.
pub fn free_port() -> u16 {
    try_free_port().expect("a free port on 127.0.0.1")
}

/// The lock file `path`, locked by this call, or `None` when another holder has it.
fn claim(path: PathBuf) -> std::io::Result<Option<File>> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}

/// The ports handed out: from [`LOWEST`] up to the kernel's ephemeral range (32768 by
/// default), or above it when the range starts too low to leave room below.
fn handed_out_range() -> (u16, u16) {
    let (ephemeral_low, ephemeral_high) =
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|s| {
                let mut it = s.split_whitespace().map(|n| n.parse::<u16>().ok());
                Some((it.next()??, it.next()??))
            })
            .unwrap_or((32768, 60999));
    if ephemeral_low >= LOWEST + 4096 {
        (LOWEST, ephemeral_low)
    } else {
        (ephemeral_high.saturating_add(1).max(LOWEST), u16::MAX)
    }
}

/// Where a process starts looking: its own place in the range (by process id and time), so
/// that processes starting together do not all contend for the same first ports.
fn start_offset() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    std::process::id().wrapping_mul(2_654_435_761) ^ nanos
}

/// Connects to 127.0.0.1:`port`, retrying for up to 10 s while nothing listens yet; reads
/// then time out after `read_timeout`. Panics (a test's failure) when nothing listens.
pub fn connect(port: u16, read_timeout: Duration) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(s) = TcpStream::connect(("127.0.0.1", port)) {
            s.set_read_timeout(Some(read_timeout)).unwrap();
            return s;
        }
        assert!(Instant::now() < deadline, "nothing listens on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_port_can_be_bound_and_connect_finds_its_listener() {
        let port = free_port();
        let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
        let s = connect(port, Duration::from_millis(100));
        assert_eq!(s.peer_addr().unwrap(), listener.local_addr().unwrap());
    }

    #[test]
    fn no_port_is_handed_out_twice_and_none_is_ephemeral_or_reserved() {
        let (low, high) = handed_out_range();
        let mut ports: Vec<u16> = (0..500).map(|_| free_port()).collect();
        let base = free_ports_at(&[0, 1, 100, 350]);
        ports.extend([base, base + 1, base + 100, base + 350]);
        let distinct: std::collections::HashSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len());
        for p in &ports {
            assert!((low..high).contains(p), "{p} outside {low}..{high}");
            assert!(!RESERVED.contains(p));
        }
    }

    /// Lets go of this process's claim on `port`.
    fn release(port: u16) {
        CLAIMED.lock().unwrap().retain(|(p, _)| *p != port);
    }

    #[test]
    fn a_port_held_by_another_process_or_bound_is_not_handed_out() {
        let (low, high) = handed_out_range();
        let dir = std::env::temp_dir().join("memfleet-ports");
        std::fs::create_dir_all(&dir).unwrap();
        // A child process (flock(1), as another test binary would) holds one port's lock.
        let held = free_port();
        let lock = dir.join(held.to_string());
        release(held);
        let mut holder = std::process::Command::new("flock")
            .arg(&lock)
            .args(["sleep", "30"])
            .spawn()
            .expect("flock(1) from util-linux");
        // flock(1) creates and locks the file before it runs sleep.
        let deadline = Instant::now() + Duration::from_secs(10);
        while claim(lock.clone()).unwrap().is_some() {
            assert!(Instant::now() < deadline, "flock(1) never took {lock:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
        let got = claim_port(low, high, held).unwrap();
        holder.kill().unwrap();
        holder.wait().unwrap();
        assert_ne!(got, held);
        // A port something binds without a claim is passed over too.
        let bound = free_port();
        release(bound);
        let listener = TcpListener::bind(("127.0.0.1", bound)).unwrap();
        assert_ne!(claim_port(low, high, bound).unwrap(), bound);
        drop(listener);
    }
}
