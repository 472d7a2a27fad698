//! Prometheus' memcached_exporter (v0.14.4, pinned by tests/exporter/go.mod; built by
//! scripts/memcached-exporter into target/) scrapes memfleet as it scrapes memcached:
//! `memcached_up 1`, no error in its log, and every metric family it produces for memcached
//! also produced for memfleet, so memcached's dashboards and alerts work unchanged.
//!
//! The reference is `memcached` on the PATH (Debian's, which scripts/test installs), or the
//! binary `MEMFLEET_MEMCACHED_BIN` names (e.g. a memcached 1.6.45 build). The test skips,
//! saying why, only when the exporter cannot be built (no Go toolchain or no module proxy).

use crate::support;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::{connect, free_port, memfleet_server, Killed};

/// Families memcached has and memfleet deliberately lacks, each with its reason. None.
const NOT_FOR_MEMFLEET: &[(&str, &str)] = &[];

/// The exporter's path, or why it could not be built.
fn exporter() -> Result<PathBuf, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/memcached-exporter");
    let out = Command::new(&script)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    Ok(PathBuf::from(path))
}

/// The reference memcached on a free port, as `nobody` (so that it also starts as root).
fn memcached() -> (Killed, u16) {
    let bin = std::env::var("MEMFLEET_MEMCACHED_BIN").unwrap_or_else(|_| "memcached".into());
    let port = free_port();
    let child = Command::new(&bin)
        .args(["-u", "nobody", "-l", "127.0.0.1", "-U", "0"])
        .args(["-p", &port.to_string()])
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{bin} (scripts/test installs memcached): {e}"));
    (Killed(child), port)
}

/// Some traffic, so that a slab class exists and the counters are not all 0: two sets
/// that store, one item left.
fn traffic(port: u16) {
    let mut s = connect(port, Duration::from_secs(5));
    for (request, reply) in [
        ("set a 0 0 1\r\nx\r\n", "STORED\r\n"),
        ("get a b\r\n", "VALUE a 0 1\r\nx\r\nEND\r\n"),
        ("incr n 1\r\n", "NOT_FOUND\r\n"),
        ("touch a 10\r\n", "TOUCHED\r\n"),
        ("delete a\r\n", "DELETED\r\n"),
        ("set b 0 0 1\r\ny\r\n", "STORED\r\n"),
    ] {
        s.write_all(request.as_bytes()).unwrap();
        let mut got = vec![0; reply.len()];
        s.read_exact(&mut got).unwrap();
        assert_eq!(String::from_utf8_lossy(&got), reply, "{request:?}");
    }
}

/// One scrape of the exporter at `port`: the body of `GET /metrics`.
fn scrape(port: u16) -> String {
    let mut s = connect(port, Duration::from_secs(10));
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP reply");
    assert!(head.starts_with("HTTP/1.0 200"), "scrape failed: {text}");
    body.to_string()
}

/// The exporter against the server at `server_port`: its scrape and its log.
fn exporter_scrape(exporter: &Path, server_port: u16, log: &Path) -> String {
    let web = free_port();
    let _exporter = Killed(
        Command::new(exporter)
            .arg(format!("--memcached.address=127.0.0.1:{server_port}"))
            .arg(format!("--web.listen-address=127.0.0.1:{web}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .expect("memcached_exporter starts"),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", web)).is_err() {
        assert!(Instant::now() < deadline, "the exporter never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
    scrape(web)
}

/// The metric families of a scrape (`# TYPE <name> <kind>` lines).
fn families(scrape: &str) -> BTreeSet<String> {
    scrape
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .filter(|name| name.starts_with("memcached_"))
        .map(str::to_string)
        .collect()
}

#[test]
fn memcached_exporter_scrapes_memfleet_as_it_scrapes_memcached() {
    let exporter = match exporter() {
        Ok(path) => path,
        Err(why) => {
            eprintln!("SKIPPED: memcached_exporter could not be built (scripts/memcached-exporter): {why}");
            return;
        }
    };
    let dir = std::env::temp_dir().join(format!("memfleet-exporter-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    let (_memcached, mc_port) = memcached();
    traffic(mc_port);
    let reference = exporter_scrape(&exporter, mc_port, &dir.join("memcached.log"));
    assert!(
        reference.lines().any(|l| l == "memcached_up 1"),
        "the exporter cannot scrape the reference memcached itself:\n{reference}"
    );

    let (_memfleet, mf_port) = memfleet_server(&["-l", "127.0.0.1"]);
    traffic(mf_port);
    let log_path = dir.join("memfleet.log");
    let scraped = exporter_scrape(&exporter, mf_port, &log_path);
    let log = std::fs::read_to_string(&log_path).unwrap();
    let _ = std::fs::remove_dir_all(&dir);

    assert!(
        scraped.lines().any(|l| l == "memcached_up 1"),
        "memcached_up is not 1; the exporter's log:\n{log}"
    );
    let errors: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("level=error") || l.contains("level=warn") || l.contains("Failed"))
        .collect();
    assert!(errors.is_empty(), "the exporter complained: {errors:#?}");

    let ours = families(&scraped);
    let theirs = families(&reference);
    let missing: Vec<&String> = theirs
        .iter()
        .filter(|f| !ours.contains(*f) && !NOT_FOR_MEMFLEET.iter().any(|(n, _)| n == f))
        .collect();
    assert!(
        missing.is_empty(),
        "families the exporter produces for memcached but not for memfleet: {missing:?}"
    );
    // A sample of values the exporter read from memfleet's answers.
    for series in [
        "memcached_slab_commands_total{command=\"set\",slab=\"1\",status=\"hit\"} 2",
        "memcached_commands_total{command=\"get\",status=\"miss\"} 1",
        "memcached_commands_total{command=\"touch\",status=\"hit\"} 1",
    ] {
        assert!(
            scraped.lines().any(|l| l == series),
            "no `{series}` in:\n{scraped}"
        );
    }
}

/// A directory anyone may write (memcached opens its `ext_path` file after dropping to
/// `nobody`), removed on drop.
struct OpenDir(PathBuf);

impl Drop for OpenDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn open_dir(name: &str) -> OpenDir {
    use std::os::unix::fs::PermissionsExt;
    // /var/tmp is a disk (memfleet's flash wants O_DIRECT); the temp dir may be tmpfs.
    let base = ["/var/tmp"]
        .iter()
        .map(PathBuf::from)
        .find(|d| d.is_dir())
        .unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!("memfleet-exporter-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    OpenDir(dir)
}

/// memcached with extstore (`-o ext_path`) has metric families memcached without it lacks
/// (`memcached_extstore_*`, the extstore get counters); memfleet with `--flash` has them all.
#[test]
fn memcached_exporter_shows_memfleets_flash_as_memcacheds_extstore() {
    let exporter = match exporter() {
        Ok(path) => path,
        Err(why) => {
            eprintln!("SKIPPED: memcached_exporter could not be built (scripts/memcached-exporter): {why}");
            return;
        }
    };
    let dir = open_dir("ext");
    let bin = std::env::var("MEMFLEET_MEMCACHED_BIN").unwrap_or_else(|_| "memcached".into());
    let scrape_memcached = |extra: &[String], name: &str| {
        let port = free_port();
        let _server = Killed(
            Command::new(&bin)
                .args(["-u", "nobody", "-l", "127.0.0.1", "-U", "0"])
                .args(["-p", &port.to_string()])
                .args(extra)
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("{bin}: {e}")),
        );
        support::until_serving(port);
        traffic(port);
        exporter_scrape(&exporter, port, &dir.0.join(format!("{name}.log")))
    };
    let plain = families(&scrape_memcached(&[], "plain"));
    let ext_path = format!("ext_path={}:64m", dir.0.join("mc-flash").display());
    let with_ext = families(&scrape_memcached(&["-o".into(), ext_path], "ext"));
    let extstore: Vec<&String> = with_ext.difference(&plain).collect();
    assert!(
        extstore
            .iter()
            .any(|f| f.starts_with("memcached_extstore_")),
        "the reference memcached shows no extstore families: {with_ext:?}"
    );

    let flash = format!("{}:64m", dir.0.join("mf-flash").display());
    let (_memfleet, port) = memfleet_server(&["-l", "127.0.0.1", "--flash", &flash]);
    traffic(port);
    let log_path = dir.0.join("memfleet.log");
    let scraped = exporter_scrape(&exporter, port, &log_path);
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        scraped.lines().any(|l| l == "memcached_up 1"),
        "memcached_up is not 1; the exporter's log:\n{log}"
    );
    let ours = families(&scraped);
    let missing: Vec<&&String> = extstore.iter().filter(|f| !ours.contains(**f)).collect();
    assert!(
        missing.is_empty(),
        "extstore families the exporter shows for memcached but not for memfleet --flash: {missing:?}"
    );
    println!("extstore families shown for memfleet --flash: {extstore:?}");
}
