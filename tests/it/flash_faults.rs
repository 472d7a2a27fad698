//! The flash's filesystem runs out of space, for real: each server here runs in a mount
//! namespace of its own (`unshare --mount`) with a small tmpfs over its flash directory,
//! which the test fills and punches holes in from outside (`nsenter`).
//!
//! | fault | expected |
//! |---|---|
//! | a flash larger than its filesystem | refused at start, saying so |
//! | no space left while running (ENOSPC on the flash's writes) | the server keeps serving; what is in RAM stays exact; the failed writes are counted (`flash_write_errors`) and logged; flash items whose blocks were taken read as misses, never wrong bytes |
//! | space again | flash writes resume |
//!
//! Needs root (mount namespaces); says so and skips otherwise. (tmpfs takes O_DIRECT from
//! Linux 6.6; before, the flash runs buffered here, `flash_direct_io 0`, with the same write
//! path and errors.)

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::{free_port, until_serving, Conn, Killed};

/// A directory of this test's, with a log file beside it; removed at the end.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "memfleet-flash-faults-{}-{name}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn log(&self) -> PathBuf {
        self.0.with_extension("log")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        let _ = std::fs::remove_file(self.log());
    }
}

/// Why this machine cannot run these tests, if it cannot: mount namespaces need root.
fn unavailable() -> Option<String> {
    let ok = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "true"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    (!ok).then(|| "cannot make a mount namespace (`unshare --mount`: needs root)".into())
}

/// `memfleet server ARGS` in a mount namespace of its own with a tmpfs of `mib` MiB over
/// `dir` (the same directory outside shows none of it); stderr to `log`.
fn server_on_tmpfs(dir: &Path, mib: u32, log: &Path, args: &[String]) -> std::process::Child {
    let script = format!("mount -t tmpfs -o size={mib}m memfleet-test \"$0\" && exec \"$@\"",);
    Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .arg(dir)
        .arg(env!("CARGO_BIN_EXE_memfleet"))
        .arg("server")
        .args(args)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .expect("unshare runs")
}

/// Runs `script` (with `$0` the flash directory) in the mount namespace of process `pid`.
fn inside(pid: u32, dir: &Path, script: &str) {
    let status = Command::new("nsenter")
        .args(["-t", &pid.to_string(), "-m", "sh", "-c", script])
        .arg(dir)
        .status()
        .expect("nsenter runs");
    assert!(status.success(), "{script}: {status}");
}

#[test]
fn a_flash_larger_than_its_filesystem_is_refused_at_start() {
    if let Some(why) = unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let scratch = Scratch::new("refused");
    let port = free_port();
    let flash = format!("{}/flash:64m", scratch.0.display());
    let mut child = server_on_tmpfs(
        &scratch.0,
        4,
        &scratch.log(),
        &["-p".into(), port.to_string(), "--flash".into(), flash],
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "a server with no room for its flash started"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success());
    let log = std::fs::read_to_string(scratch.log()).unwrap();
    assert!(
        log.contains("No space left on device") && log.contains("flash"),
        "the error says what is wrong: {log}"
    );
}

fn value(tag: &str, i: usize) -> String {
    format!("{tag}{i:07}").repeat(100)
}

/// Sets `tag{i}` for `i` in `range`, pipelined, each reply `STORED`.
fn set_all(c: &mut Conn, tag: &str, range: std::ops::Range<usize>) {
    for chunk in range.collect::<Vec<_>>().chunks(200) {
        for &i in chunk {
            let v = value(tag, i);
            c.send(format!("set {tag}{i} {i} 0 {}\r\n{v}\r\n", v.len()));
        }
        for _ in chunk {
            assert_eq!(c.read_line(), "STORED\r\n");
        }
    }
}

/// `tag{i}`'s value, checked to be exactly what was set; `None` for a miss.
fn get_exact(c: &mut Conn, tag: &str, i: usize) -> Option<()> {
    c.send(format!("get {tag}{i}\r\n"));
    let line = c.read_line();
    if line == "END\r\n" {
        return None;
    }
    let want = value(tag, i);
    assert_eq!(line, format!("VALUE {tag}{i} {i} {}\r\n", want.len()));
    let data = c.read_line();
    assert_eq!(data, format!("{want}\r\n"), "{tag}{i}: wrong bytes");
    assert_eq!(c.read_line(), "END\r\n");
    Some(())
}

/// Keys per round: about 11 MiB of values through an 8 MiB heap and an 8 MiB flash.
const ROUND: usize = 16_000;

#[test]
fn no_space_while_running_costs_flash_writes_not_ram_or_service() {
    if let Some(why) = unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let scratch = Scratch::new("enospc");
    let dir = scratch.0.clone();
    let port = free_port();
    let args: Vec<String> = [
        "-p",
        &port.to_string(),
        "-t",
        "1",
        "-m",
        "8",
        "--flash",
        &format!("{}/flash:8m", dir.display()),
        "--flash-threads",
        "1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let child = server_on_tmpfs(&dir, 12, &scratch.log(), &args);
    let pid = child.id();
    let _server = Killed(child);
    until_serving(port);
    let mut c = Conn::new(port);

    // 1. The flash works: items go there and come back.
    set_all(&mut c, "a", 0..ROUND);
    assert!(c.stat("extstore_bytes_written").unwrap() > 2 << 20);
    assert_eq!(c.stat("flash_write_errors").unwrap(), 0);
    let from_flash = (0..ROUND / 2)
        .step_by(50)
        .filter(|&i| get_exact(&mut c, "a", i).is_some())
        .count();
    assert!(
        c.stat("get_extstore").unwrap() > 0,
        "{from_flash} read back"
    );

    // 2. The filesystem fills up and the flash file's blocks are given back to it (a hole
    // punched), then taken by another file: every flash write now fails with ENOSPC.
    inside(
        pid,
        &dir,
        "dd if=/dev/zero of=\"$0/filler\" bs=64k 2>/dev/null; \
         fallocate --punch-hole --offset 0 --length 8MiB \"$0/flash\" && \
         { dd if=/dev/zero of=\"$0/filler2\" bs=64k 2>/dev/null; true; }",
    );
    let written_before = c.stat("extstore_bytes_written").unwrap();
    set_all(&mut c, "b", 0..ROUND);
    let errors = c.stat("flash_write_errors").unwrap();
    assert!(errors > 0, "the failed writes are counted");
    assert!(
        c.stat("extstore_bytes_written").unwrap() <= written_before + (2 << 20),
        "little or nothing was written"
    );
    assert_eq!(c.line("version\r\n").split(' ').next(), Some("VERSION"));
    // Still serving, and RAM holds what it would without flash, exact: the newest segment's
    // keys all, and in all about as many as RAM-only merge eviction keeps (8.7 k of these).
    for i in ROUND - 900..ROUND {
        assert!(get_exact(&mut c, "b", i).is_some(), "b{i} lost from RAM");
    }
    let held = (0..ROUND - 900)
        .filter(|&i| get_exact(&mut c, "b", i).is_some())
        .count();
    assert!(held > 5_000, "{held} b keys held");
    // Items that were on flash read as misses (their blocks are zeros now), never wrong bytes.
    for i in (0..ROUND).step_by(25) {
        let _ = get_exact(&mut c, "a", i);
    }
    let log = std::fs::read_to_string(scratch.log()).unwrap();
    assert!(
        log.contains("flash write failed") && log.contains("No space left on device"),
        "the fault is logged: {log}"
    );

    // 3. Space again: flash writes resume.
    inside(pid, &dir, "rm -f \"$0/filler\" \"$0/filler2\"");
    let written_before = c.stat("extstore_bytes_written").unwrap();
    set_all(&mut c, "c", 0..ROUND);
    assert!(
        c.stat("extstore_bytes_written").unwrap() > written_before + (2 << 20),
        "writes resumed"
    );
    let served = (0..ROUND / 2)
        .step_by(50)
        .filter(|&i| get_exact(&mut c, "c", i).is_some())
        .count();
    assert!(
        served > 0,
        "items written after the fault come back from flash"
    );
    assert_eq!(c.line("version\r\n").split(' ').next(), Some("VERSION"));
}
