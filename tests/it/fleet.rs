//! `memfleet fleet up` end to end: a whole local deployment from one command, then the
//! paper's behaviours through its routers — deletes reach the other cluster, a dead server's
//! keys are covered by the gutter with no client-visible error — and `fleet down`.

use crate::support::Conn;

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

const EXE: &str = env!("CARGO_BIN_EXE_memfleet");

/// A fleet that is taken down when the test ends, whatever happens.
struct Fleet {
    dir: PathBuf,
    base: u16,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        let _ = Command::new(EXE)
            .args(["fleet", "down", "--dir"])
            .arg(&self.dir)
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Offsets from the base port that a fleet of 3-server clusters uses (with a replica
/// region: 61.. and after).
const OFFSETS: [u16; 18] = [
    1, 2, 3, 11, 12, 13, 41, 51, 100, 200, 61, 62, 63, 91, 92, 150, 300, 350,
];

/// A base port whose fleet ports are all free now.
fn free_base() -> u16 {
    memfleet_testkit::free_ports_at(&OFFSETS)
}

fn pid_of(dir: &Path, name: &str) -> i32 {
    let pids = std::fs::read_to_string(dir.join("pids")).unwrap();
    pids.lines()
        .find_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w[1] == name).then(|| w[0].parse().unwrap())
        })
        .unwrap_or_else(|| panic!("{name} not in pids:\n{pids}"))
}

/// Held by each test while it runs a fleet: the tests of this file run one at a time, so
/// that two fleets never pick the same free ports.
static ONE_FLEET: Mutex<()> = Mutex::new(());

fn one_fleet() -> MutexGuard<'static, ()> {
    ONE_FLEET.lock().unwrap_or_else(|e| e.into_inner())
}

/// `memfleet fleet up` with `extra` flags in a fresh directory on a free base port; the
/// fleet is taken down when the returned value drops.
fn fleet_up(name: &str, extra: &[&str]) -> (Fleet, std::process::Output) {
    let dir =
        std::env::temp_dir().join(format!("memfleet-fleet-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let base = free_base();
    let up = Command::new(EXE)
        .args([
            "fleet",
            "up",
            "--memory",
            "16",
            "--base-port",
            &base.to_string(),
        ])
        .args(extra)
        .arg("--dir")
        .arg(&dir)
        .output()
        .unwrap();
    (Fleet { dir, base }, up)
}

#[test]
fn a_local_fleet_routes_invalidates_and_covers_a_dead_server() {
    let _one = one_fleet();
    let (fleet, up) = fleet_up("main", &[]);
    let base = fleet.base;
    assert!(
        up.status.success(),
        "fleet up: {}",
        String::from_utf8_lossy(&up.stderr)
    );
    let printed = String::from_utf8_lossy(&up.stdout);
    assert!(
        printed.contains(&format!("{:<20} 127.0.0.1:{}", "router-c1", base + 100)),
        "{printed}"
    );

    let mut r1 = Conn::new(fleet.base + 100);
    let mut r2 = Conn::new(fleet.base + 200);
    for i in 0..60 {
        assert_eq!(
            r1.lines(&format!("set k{i} 0 0 2\r\nv{}\r\n", i % 10), 1),
            ["STORED"]
        );
    }
    // Cluster 2 has its own cache: the keys are not there.
    assert_eq!(r2.get("k1"), None);
    r2.lines("set k1 0 0 2\r\nw1\r\n", 1);
    // A delete through cluster 2's router reaches cluster 1 too.
    r2.lines("delete k1\r\n", 1);
    assert_eq!(r1.get("k1"), None);
    assert_eq!(r2.get("k1"), None);
    // The regional pool is shared: what one cluster stores there, the other reads.
    r1.lines("set /regional/shared 0 0 1\r\ns\r\n", 1);
    assert_eq!(r2.get("/regional/shared").as_deref(), Some("s"));

    // One of cluster 1's servers dies: no get through its router fails.
    let victim = pid_of(&fleet.dir, "c1-server2");
    // SAFETY: kill takes no pointers.
    assert_eq!(unsafe { libc::kill(victim, libc::SIGKILL) }, 0);
    let mut missing = Vec::new();
    for i in 2..60 {
        if r1.get(&format!("k{i}")).is_none() {
            missing.push(i);
        }
    }
    assert!(!missing.is_empty(), "the dead server held none of 58 keys");
    // The application refills them: they land in the gutter and hit from then on.
    for &i in &missing {
        assert_eq!(r1.lines(&format!("set k{i} 0 0 1\r\ng\r\n"), 1), ["STORED"]);
    }
    for &i in &missing {
        assert_eq!(r1.get(&format!("k{i}")).as_deref(), Some("g"), "k{i}");
    }
    let hits: usize = r1.stat("route:cache:gutter_hits").unwrap() as usize;
    assert_eq!(hits, missing.len());

    let status = Command::new(EXE)
        .args(["fleet", "status", "--dir"])
        .arg(&fleet.dir)
        .output()
        .unwrap();
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(
        status
            .lines()
            .any(|l| l.starts_with("c1-server2") && l.ends_with("stopped")),
        "{status}"
    );
    assert_eq!(status.matches("running").count(), 9, "{status}");
    let down = Command::new(EXE)
        .args(["fleet", "down", "--dir"])
        .arg(&fleet.dir)
        .output()
        .unwrap();
    assert!(
        down.status.success(),
        "{}",
        String::from_utf8_lossy(&down.stderr)
    );
    assert!(!fleet.dir.join("pids").exists());
}

#[test]
fn a_regional_delete_through_either_router_removes_the_key_everywhere() {
    let _one = one_fleet();
    let (fleet, up) = fleet_up("regional", &["--servers", "1"]);
    assert!(
        up.status.success(),
        "fleet up: {}",
        String::from_utf8_lossy(&up.stderr)
    );
    let mut r1 = Conn::new(fleet.base + 100);
    let mut r2 = Conn::new(fleet.base + 200);
    let mut regional = Conn::new(fleet.base + 51);
    for (key, deleter) in [("/regional/a", 1), ("/regional/b", 2)] {
        assert_eq!(
            r1.lines(&format!("set {key} 0 0 1\r\nr\r\n"), 1),
            ["STORED"]
        );
        assert_eq!(r2.get(key).as_deref(), Some("r"), "{key}");
        // Stored in the regional pool without its routing prefix.
        let stripped = key.strip_prefix("/regional/").unwrap();
        assert_eq!(regional.get(stripped).as_deref(), Some("r"));
        let router = if deleter == 1 { &mut r1 } else { &mut r2 };
        assert_eq!(
            router.lines(&format!("delete {key}\r\n"), 1),
            ["DELETED"],
            "delete {key} through router {deleter}"
        );
        assert_eq!(r1.get(key), None, "{key} through router 1");
        assert_eq!(r2.get(key), None, "{key} through router 2");
        assert_eq!(
            regional.get(stripped),
            None,
            "{stripped} in the regional pool"
        );
        // A second delete finds nothing.
        assert_eq!(r1.lines(&format!("delete {key}\r\n"), 1), ["NOT_FOUND"]);
    }
    // A plain key's delete stays out of the regional pool: "/regional/c" and "c" are
    // different keys.
    assert_eq!(r1.lines("set /regional/c 0 0 1\r\nr\r\n", 1), ["STORED"]);
    assert_eq!(r1.lines("set c 0 0 1\r\nl\r\n", 1), ["STORED"]);
    // DELETED: cluster 1 had it (an all-sync broadcast delete is DELETED when any
    // destination deleted the key, though cluster 2 never had it).
    assert_eq!(r2.lines("delete c\r\n", 1), ["DELETED"]);
    assert_eq!(r1.get("c"), None);
    assert_eq!(r1.get("/regional/c").as_deref(), Some("r"));
}

#[test]
fn fleet_up_fails_loudly_and_stops_everything_when_a_process_cannot_listen() {
    let _one = one_fleet();
    let base = free_base();
    let hold = |offsets: &[u16]| -> Vec<TcpListener> {
        offsets
            .iter()
            .map(|o| TcpListener::bind(("127.0.0.1", base + o)).unwrap())
            .collect()
    };
    let up = |name: &str| {
        let dir =
            std::env::temp_dir().join(format!("memfleet-fleet-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let out = Command::new(EXE)
            .args([
                "fleet",
                "up",
                "--memory",
                "16",
                "--base-port",
                &base.to_string(),
            ])
            .arg("--dir")
            .arg(&dir)
            .output()
            .unwrap();
        (Fleet { dir, base }, out)
    };

    // Every port is taken by someone else: every process fails to bind.
    let taken = hold(&OFFSETS);
    let (fleet, out) = up("taken");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "fleet up succeeded:\n{stderr}");
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("127.0.0.1"),
        "addresses printed for a fleet that is not up"
    );
    assert!(stderr.contains("10 of 10 processes failed"), "{stderr}");
    for name in ["c1-server1", "gutter", "regional", "router-c2"] {
        assert!(stderr.contains(name), "{name} not named:\n{stderr}");
    }
    // Each with the end of its log: why it failed.
    assert!(stderr.contains("Address already in use"), "{stderr}");
    assert!(!fleet.dir.join("pids").exists());
    drop(fleet);
    drop(taken);

    // One server's port is taken: the fleet fails, naming it, and the nine processes
    // that did start are stopped (their ports are free again).
    let taken = hold(&[12]);
    let (fleet, out) = up("one-taken");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "fleet up succeeded:\n{stderr}");
    assert!(stderr.contains("1 of 10 processes failed"), "{stderr}");
    assert!(
        stderr.contains(&format!("c2-server2 (127.0.0.1:{})", base + 12)),
        "{stderr}"
    );
    assert!(!stderr.contains("c2-server1"), "{stderr}");
    assert!(!fleet.dir.join("pids").exists());
    for o in OFFSETS.iter().filter(|&&o| o != 12) {
        assert!(
            TcpListener::bind(("127.0.0.1", base + o)).is_ok(),
            "port {} still taken after a failed fleet up",
            base + o
        );
    }
    drop(taken);
}

/// `fleet up --regions 2`: a delete committed on the primary reaches the master region at
/// once and the replica region only once its standby replayed the transaction (held back a
/// second here by `--standby-delay`), each through its own invalidator; the databases live
/// in the fleet's directory, and `fleet down` stops them too.
#[test]
fn two_regions_are_invalidated_each_from_its_own_database() {
    let _one = one_fleet();
    let (fleet, up) = fleet_up(
        "regions",
        &[
            "--servers",
            "1",
            "--regions",
            "2",
            "--standby-delay",
            "1000",
        ],
    );
    assert!(
        up.status.success(),
        "fleet up: {}\n{}",
        String::from_utf8_lossy(&up.stdout),
        String::from_utf8_lossy(&up.stderr)
    );
    // `postgres` lists the standby, then the primary: "port dir bin".
    let listed = std::fs::read_to_string(fleet.dir.join("postgres")).unwrap();
    let ports: Vec<u16> = listed
        .lines()
        .map(|l| l.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    let (standby, primary) = (ports[0], ports[1]);
    for line in listed.lines() {
        let dir = line.split_whitespace().nth(1).unwrap();
        assert!(
            Path::new(dir).starts_with(fleet.dir.join("databases")),
            "a database outside the fleet's directory: {line}"
        );
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let connect = |port: u16| {
        rt.block_on(async move {
            let (client, conn) = tokio_postgres::Config::new()
                .host("127.0.0.1")
                .port(port)
                .user("postgres")
                .dbname("postgres")
                .connect(tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(conn);
            client
        })
    };
    let (primary, standby) = (connect(primary), connect(standby));
    let mut master_region = Conn::new(fleet.base + 100);
    let mut replica_region = Conn::new(fleet.base + 300);
    for conn in [&mut master_region, &mut replica_region] {
        assert_eq!(conn.lines("set user:1 0 0 2\r\nv1\r\n", 1), ["STORED"]);
    }
    let committed = std::time::Instant::now();
    rt.block_on(async {
        primary
            .batch_execute(
                "BEGIN; SELECT pg_logical_emit_message(true, 'memfleet', 'user:1'); COMMIT",
            )
            .await
            .unwrap();
    });
    let deadline = committed + Duration::from_secs(15);
    while master_region.get("user:1").is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "master region never invalidated"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let master_after = committed.elapsed();
    assert!(
        replica_region.get("user:1").is_some(),
        "the replica region was invalidated before its standby replayed (master after {master_after:?})"
    );
    while replica_region.get("user:1").is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "replica region never invalidated"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let replica_after = committed.elapsed();
    assert!(
        replica_after >= Duration::from_millis(900),
        "the replica region's delete came {replica_after:?} after the commit, before the 1 s replay delay"
    );
    // The replica region's invalidator knows it reads a standby.
    let mut metrics = memfleet_testkit::connect(fleet.base + 350, Duration::from_secs(5));
    metrics
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    std::io::Read::read_to_string(&mut metrics, &mut text).unwrap();
    assert!(
        text.contains("\nmemfleet_invalidator_reading_standby 1\n"),
        "{text}"
    );
    drop((primary, standby));
    let down = Command::new(EXE)
        .args(["fleet", "down", "--dir"])
        .arg(&fleet.dir)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&down.stdout);
    assert!(
        down.status.success() && said.contains("2 databases"),
        "{said}"
    );
    assert!(!fleet.dir.join("postgres").exists());
    let left: Vec<_> = std::fs::read_dir(fleet.dir.join("databases"))
        .unwrap()
        .collect();
    assert!(left.is_empty(), "database files left behind: {left:?}");
    for port in ports {
        assert!(
            TcpStream::connect(("127.0.0.1", port)).is_err(),
            "PostgreSQL on {port} still up"
        );
    }
}
