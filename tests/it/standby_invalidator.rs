//! `memfleet invalidator` reading a streaming standby (a replica region's database, paper
//! §5), the process as an operator runs it: it makes its slot on the standby (the
//! publication on the primary it names), deletes a key only once the standby replayed the
//! transaction, says in /metrics that it reads a standby and how far behind it is, and goes
//! on when the standby is promoted: its slot survives the promotion, and the transactions
//! committed on the new primary are invalidated too.

use crate::support;

use memfleet_testkit::{Postgres, Spawned};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const EXE: &str = env!("CARGO_BIN_EXE_memfleet");

fn ask(port: u16, request: &str) -> String {
    let mut s = support::connect(port, Duration::from_secs(5));
    s.write_all(request.as_bytes()).unwrap();
    let mut buf = [0u8; 1024];
    let n = s.read(&mut buf).unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

fn cached(port: u16, key: &str) -> bool {
    ask(port, &format!("mg {key}\r\n")).starts_with("HD")
}

fn metric(addr: SocketAddr, name: &str) -> Option<f64> {
    let mut s = support::connect(addr.port(), Duration::from_secs(5));
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("memfleet_invalidator_{name} ")))
        .and_then(|v| v.parse().ok())
}

fn eventually(what: &str, within: Duration, mut ok: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !ok() {
        assert!(started.elapsed() < within, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalidator_on_a_standby_waits_for_its_replay_and_goes_on_after_a_promotion() {
    let primary = Postgres::start_at_least(16, &[]).expect("PostgreSQL 16: scripts/postgres16");
    let standby = primary
        .standby(&["recovery_min_apply_delay=700ms"])
        .unwrap();
    let (_server, port) = support::memfleet_server(&[]);
    let metrics: SocketAddr = ([127, 0, 0, 1], support::free_port()).into();
    let dir = std::env::temp_dir().join(format!("memfleet-standby-inv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("invalidator.toml");
    std::fs::write(
        &config,
        format!(
            "[database]\nhost = \"127.0.0.1\"\nport = {}\nuser = \"postgres\"\ndbname = \"postgres\"\n\
             create = true\n[database.primary]\nhost = \"127.0.0.1\"\nport = {}\n\
             [invalidator]\nroute = \"main\"\nbatch_wait_ms = 1\nmetrics_listen = \"{metrics}\"\n\
             [router]\nspool_dir = \"{}\"\n[pools.main]\nservers = [\"127.0.0.1:{port}\"]\n",
            standby.port,
            primary.port,
            dir.join("spool").display()
        ),
    )
    .unwrap();
    let argv: Vec<String> = vec![
        EXE.into(),
        "invalidator".into(),
        "--config".into(),
        config.display().to_string(),
    ];
    // Listening on its metrics port once the slot exists on the standby.
    let mut invalidator = Spawned::start(&argv, metrics, None).expect("the invalidator starts");
    eventually("reading_standby 1", Duration::from_secs(10), || {
        metric(metrics, "reading_standby") == Some(1.0)
    });
    let db = primary.connect().await.unwrap();
    assert!(ask(port, "set k1 0 0 1\r\nx\r\n").starts_with("STORED"));
    db.batch_execute("BEGIN; SELECT pg_logical_emit_message(true, 'memfleet', 'k1'); COMMIT")
        .await
        .unwrap();
    let took = eventually("k1's delete", Duration::from_secs(20), || {
        !cached(port, "k1")
    });
    assert!(
        took >= Duration::from_millis(650),
        "deleted {took:?} after the commit: before the standby's 700 ms replay delay"
    );
    // The lag it reports: the decode waited for the replay.
    let decoded_max = metric(metrics, "commit_to_decoded_seconds{quantile=\"1\"}").unwrap();
    assert!(decoded_max >= 0.65, "commit-to-decoded max {decoded_max} s");
    invalidator.check_alive().unwrap();

    // Promotion: the standby becomes a primary; its slot (and the invalidator) go on.
    standby.promote().unwrap();
    let new_primary = standby.connect().await.unwrap();
    assert!(ask(port, "set k2 0 0 1\r\nx\r\n").starts_with("STORED"));
    new_primary
        .batch_execute("BEGIN; SELECT pg_logical_emit_message(true, 'memfleet', 'k2'); COMMIT")
        .await
        .unwrap();
    eventually(
        "k2's delete, committed on the promoted standby",
        Duration::from_secs(30),
        || !cached(port, "k2"),
    );
    eventually(
        "the invalidator seeing it reads a primary now",
        Duration::from_secs(10),
        || metric(metrics, "reading_standby") == Some(0.0),
    );
    invalidator.check_alive().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
