//! A memory file's snapshot (`PATH.meta`) in every state a crash, a kill or an operator can
//! leave it: `memfleet server` (the real process) always starts, empty, serving, and its log
//! says why; it never exits at start (a pod restarted in place would crash-loop). Torn,
//! garbage, empty and unreadable snapshots, a memory file of the wrong size, another `-m`, a
//! save killed before its rename, and SIGKILL at every moment of a graceful stop.

use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::{free_port, Killed};

const EXE: &str = env!("CARGO_BIN_EXE_memfleet");

/// Items each seeded server holds.
const ITEMS: usize = 2000;

/// A scratch directory holding the memory file, its snapshot and the servers' logs.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!("memfleet-meta-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }
    fn heap(&self) -> PathBuf {
        self.0.join("heap")
    }
    fn meta(&self) -> PathBuf {
        self.0.join("heap.meta")
    }
    fn tmp(&self) -> PathBuf {
        self.0.join("heap.meta.tmp")
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running server and where its log goes.
struct Running {
    child: Killed,
    port: u16,
    log: PathBuf,
}

impl Running {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// `memfleet server -m MIB --memory-file DIR/heap`, waited for until it accepts. A server
/// that exits instead fails the test with its log.
fn start(dir: &Dir, mib: usize) -> Running {
    start_as(dir, mib, &[])
}

/// [`start`] under `wrapper` (e.g. `setpriv` to another user).
fn start_as(dir: &Dir, mib: usize, wrapper: &[&str]) -> Running {
    let port = free_port();
    let log = dir.0.join(format!("server-{port}.log"));
    let mut argv: Vec<&str> = wrapper.to_vec();
    argv.push(EXE);
    let child = Command::new(argv[0])
        .args(&argv[1..])
        .args(["server", "-l", "127.0.0.1", "-t", "1"])
        .args(["-p", &port.to_string(), "-m", &mib.to_string()])
        .arg("--memory-file")
        .arg(dir.heap())
        .env("MEMFLEET_LOG", "info")
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut running = Running {
        child: Killed(child),
        port,
        log,
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(status) = running.child.0.try_wait().unwrap() {
            panic!("the server refused to start ({status}):\n{}", running.log());
        }
        assert!(Instant::now() < deadline, "no listener:\n{}", running.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    // Serving: a write and a read.
    let mut s = conn(port);
    s.write_all(b"set probe 0 0 2\r\nok\r\nget probe\r\n")
        .unwrap();
    let reply = read_until(&mut s, b"END\r\n");
    assert!(
        reply.starts_with("STORED\r\nVALUE probe 0 2\r\nok\r\n"),
        "{reply}"
    );
    running
}

fn conn(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

fn read_until(s: &mut TcpStream, end: &[u8]) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    while !got.ends_with(end) {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "connection closed");
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// Stores `n` items `key:I`.
fn fill(port: u16, n: usize) {
    let mut s = conn(port);
    let mut batch = String::new();
    for i in 0..n {
        batch += &format!("set key:{i} 0 0 10 noreply\r\n{i:010}\r\n");
    }
    batch += "mn\r\n";
    s.write_all(batch.as_bytes()).unwrap();
    read_until(&mut s, b"MN\r\n");
}

/// How many of `key:0..n` the server holds.
fn held(port: u16, n: usize) -> usize {
    let mut s = conn(port);
    let mut batch = String::new();
    for i in 0..n {
        batch += &format!("mg key:{i} k\r\n");
    }
    batch += "mn\r\n";
    s.write_all(batch.as_bytes()).unwrap();
    read_until(&mut s, b"MN\r\n")
        .lines()
        .filter(|l| l.starts_with("HD"))
        .count()
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill() sends a signal to our own child, not yet reaped.
    unsafe { libc::kill(child.id() as libc::pid_t, sig) };
}

/// SIGTERM, and a clean exit (the snapshot written).
fn stop(mut running: Running) {
    signal(&running.child.0, libc::SIGTERM);
    let status = running.child.0.wait().unwrap();
    assert!(status.success(), "{status}:\n{}", running.log());
}

/// A memory file of `mib` holding ITEMS items, stopped gracefully: a good snapshot beside it.
fn seeded(name: &str, mib: usize) -> Dir {
    let dir = Dir::new(name);
    let running = start(&dir, mib);
    fill(running.port, ITEMS);
    stop(running);
    assert!(dir.meta().exists());
    dir
}

/// Starts on `dir`, which must come up empty with `why` in its log line, serve, and stop
/// cleanly.
fn starts_empty(dir: &Dir, mib: usize, why: &str) {
    let running = start(dir, mib);
    let log = running.log();
    let line = log
        .lines()
        .find(|l| l.contains("memory file: starting empty"))
        .unwrap_or_else(|| panic!("no line saying the cache starts empty:\n{log}"));
    assert!(line.contains(why), "wanted {why:?} in: {line}");
    assert_eq!(held(running.port, ITEMS), 0);
    assert!(!dir.meta().exists(), "the unused snapshot was left");
    assert!(!dir.tmp().exists(), "the partial snapshot was left");
    fill(running.port, 10);
    stop(running);
}

#[test]
fn a_good_snapshot_comes_back_warm() {
    let dir = seeded("good", 16);
    let running = start(&dir, 16);
    assert!(running.log().contains("memory file: warm restart"));
    assert_eq!(held(running.port, ITEMS), ITEMS);
    stop(running);
}

#[test]
fn a_torn_snapshot_starts_empty() {
    let dir = seeded("torn", 16);
    let bytes = std::fs::read(dir.meta()).unwrap();
    std::fs::write(dir.meta(), &bytes[..bytes.len() / 2]).unwrap();
    starts_empty(&dir, 16, "checksum mismatch");
    // Empty, or only the magic's first bytes: too short to be checked.
    std::fs::write(dir.meta(), &bytes[..5]).unwrap();
    starts_empty(&dir, 16, "too short");
    std::fs::write(dir.meta(), b"").unwrap();
    starts_empty(&dir, 16, "too short");
}

#[test]
fn a_garbage_snapshot_starts_empty() {
    let dir = seeded("garbage", 16);
    let len = std::fs::metadata(dir.meta()).unwrap().len() as usize;
    let garbage: Vec<u8> = (0..len).map(|i| (i * 7919 % 251) as u8).collect();
    std::fs::write(dir.meta(), garbage).unwrap();
    starts_empty(&dir, 16, "checksum mismatch");
    // A bit flipped in the middle of a real snapshot.
    let dir = seeded("flipped", 16);
    let mut bytes = std::fs::read(dir.meta()).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x10;
    std::fs::write(dir.meta(), bytes).unwrap();
    starts_empty(&dir, 16, "checksum mismatch");
}

#[test]
fn a_memory_file_of_the_wrong_size_starts_empty() {
    for (name, change) in [("shorter", -4096i64), ("longer", 1 << 20)] {
        let dir = seeded(name, 16);
        let len = std::fs::metadata(dir.heap()).unwrap().len();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.heap())
            .unwrap();
        file.set_len((len as i64 + change) as u64).unwrap();
        drop(file);
        starts_empty(&dir, 16, "the memory file has");
        // The file was sized again for this memory limit: the next graceful stop and
        // start are warm.
        assert_eq!(std::fs::metadata(dir.heap()).unwrap().len(), len);
    }
}

#[test]
fn a_snapshot_for_another_memory_limit_starts_empty() {
    let dir = seeded("other-m", 16);
    starts_empty(&dir, 32, "this memory limit needs");
    let dir = seeded("other-m-down", 32);
    starts_empty(&dir, 16, "this memory limit needs");
}

#[test]
fn a_save_killed_before_its_rename_starts_empty_and_says_so() {
    // What a SIGKILL in the middle of writing the snapshot leaves: part of it under the
    // temporary name, no snapshot (the last start removed it).
    let dir = seeded("interrupted", 16);
    let bytes = std::fs::read(dir.meta()).unwrap();
    std::fs::remove_file(dir.meta()).unwrap();
    std::fs::write(dir.tmp(), &bytes[..bytes.len() / 3]).unwrap();
    starts_empty(&dir, 16, "the last save was interrupted");
}

#[test]
fn an_unreadable_snapshot_starts_empty() {
    // The snapshot of a server once run by another user (root, say), mode 0600: this server
    // cannot read it, but may remove it from its directory. As root the server runs as
    // nobody (setpriv) with the directory and memory file its own; otherwise as this user.
    let dir = seeded("unreadable", 16);
    std::fs::set_permissions(dir.meta(), std::fs::Permissions::from_mode(0o000)).unwrap();
    // SAFETY: geteuid has no preconditions.
    let wrapper: &[&str] = if unsafe { libc::geteuid() } == 0 {
        for path in [dir.0.clone(), dir.heap()] {
            std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
        }
        &[
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
        ]
    } else {
        &[]
    };
    let running = start_as(&dir, 16, wrapper);
    let log = running.log();
    assert!(
        log.lines()
            .any(|l| l.contains("starting empty") && l.contains("could not be read")),
        "{log}"
    );
    assert!(!dir.meta().exists());
    assert_eq!(held(running.port, ITEMS), 0);
    stop(running);
}

#[test]
fn a_crash_while_serving_starts_empty() {
    let dir = seeded("crash", 16);
    let mut running = start(&dir, 16);
    assert!(
        !dir.meta().exists(),
        "the snapshot in use was not removed at start"
    );
    running.child.0.kill().unwrap();
    running.child.0.wait().unwrap();
    starts_empty(&dir, 16, "no snapshot");
}

/// When SIGKILL follows SIGTERM: from before the handler runs to after the exit (a debug
/// build's graceful stop of 64 MiB takes tens of milliseconds).
const DELAYS_US: [u64; 10] = [
    0, 500, 2000, 5000, 10_000, 20_000, 40_000, 80_000, 200_000, 2_000_000,
];

/// SIGTERM, then SIGKILL after `delay`: the kill lands before, during or after the save.
/// Whatever it left, the next start serves: warm with every item, or empty saying why.
#[test]
fn sigkill_at_any_moment_of_a_graceful_stop_never_stops_the_next_start() {
    let dir = Dir::new("kill-during-save");
    let mut warm = 0;
    let mut killed = 0;
    let mut mid_save = 0;
    for delay_us in DELAYS_US {
        let running = start(&dir, 64);
        fill(running.port, 20_000);
        let mut child = running.child;
        signal(&child.0, libc::SIGTERM);
        std::thread::sleep(Duration::from_micros(delay_us));
        signal(&child.0, libc::SIGKILL);
        let status = child.0.wait().unwrap();
        if !status.success() {
            killed += 1;
        }
        if dir.tmp().exists() {
            mid_save += 1;
        }
        let next = start(&dir, 64);
        let log = next.log();
        if log.contains("memory file: warm restart") {
            warm += 1;
            assert_eq!(held(next.port, 20_000), 20_000, "a warm restart lost items");
        } else {
            assert!(log.contains("memory file: starting empty"), "{log}");
            assert_eq!(held(next.port, 20_000), 0);
        }
        assert!(!dir.tmp().exists());
        stop(next);
        // The graceful stop above left a good snapshot: set it aside so each round starts
        // from a fresh, filled server.
        std::fs::remove_file(dir.meta()).unwrap();
    }
    eprintln!(
        "{killed} of {} stops killed before they exited ({mid_save} while writing the \
         snapshot); {warm} restarts warm",
        DELAYS_US.len()
    );
    assert!(
        killed > 0,
        "no SIGKILL landed before the exit: the test proves nothing"
    );
    assert!(
        warm > 0,
        "no stop finished its save: the test proves nothing"
    );
}

/// A tmpfs too small for the memory file (a container's 64 MiB /dev/shm under `-m 1024`)
/// is refused at start, saying what to change, instead of dying of SIGBUS once the cache
/// fills. Needs root (a tmpfs of its own in a mount namespace).
#[test]
fn a_tmpfs_too_small_for_the_memory_file_is_refused_at_start() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: mounting a small tmpfs needs root");
        return;
    }
    let dir = Dir::new("small-tmpfs");
    let run = |mib: usize| {
        Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(format!(
                "mount -t tmpfs -o size=24m tmpfs {dir} && exec {EXE} server -l 127.0.0.1 \
                 -p {port} -m {mib} --memory-file {dir}/heap",
                dir = dir.0.display(),
                port = free_port(),
            ))
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let out = run(32).wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("needs 32 MiB"), "{stderr}");
    assert!(stderr.contains("--shm-size"), "{stderr}");
    // A memory limit that fits starts (and is stopped by the test).
    let mut fits = Killed(run(8));
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        fits.0.try_wait().unwrap().is_none(),
        "a memory file that fits was refused"
    );
}
