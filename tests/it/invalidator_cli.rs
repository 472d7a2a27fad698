//! `memfleet invalidator` as a process against a real PostgreSQL: killed with SIGKILL in the
//! middle of a stream of transactions and started again, it still deletes every committed
//! key (what it had not acknowledged is read again from the slot); and setup mistakes (a
//! missing publication or slot) stop it with an error that says what to run.

use crate::support;

use memfleet_server::{Server, Settings};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::Killed;

const EXE: &str = env!("CARGO_BIN_EXE_memfleet");

fn has(port: u16, key: &str) -> bool {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(format!("mg {key}\r\n").as_bytes()).unwrap();
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).unwrap();
    buf[..n].starts_with(b"HD")
}

fn config_file(dir: &std::path::Path, pg: u16, cache: u16, create: bool) -> std::path::PathBuf {
    let path = dir.join("invalidator.toml");
    std::fs::write(
        &path,
        format!(
            "[database]\nhost = \"127.0.0.1\"\nport = {pg}\nuser = \"postgres\"\n\
             dbname = \"postgres\"\ncreate = {create}\n\n\
             [invalidator]\nroute = \"cache\"\n\n[pools.cache]\nservers = [\"127.0.0.1:{cache}\"]\n"
        ),
    )
    .unwrap();
    path
}

fn invalidator(config: &std::path::Path) -> Killed {
    Killed(
        Command::new(EXE)
            .args(["invalidator", "--config"])
            .arg(config)
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_invalidator_loses_no_committed_invalidation() {
    let postgres = memfleet_testkit::Postgres::start().unwrap();
    let db = postgres.connect().await.unwrap();
    let cache = Server::start(Settings::single_worker(0, 16 << 20)).unwrap();
    let port = cache.local_addr().port();
    let dir = std::env::temp_dir().join(format!("memfleet-inv-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A missing publication or slot is an operator's mistake: a clear error, no retrying.
    let refused = |want: &str| {
        let out = Command::new(EXE)
            .args(["invalidator", "--config"])
            .arg(config_file(&dir, postgres.port, port, false))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(stderr.contains(want), "{stderr}");
    };
    refused("CREATE PUBLICATION memfleet");
    db.batch_execute("CREATE PUBLICATION memfleet")
        .await
        .unwrap();
    refused("pg_create_logical_replication_slot('memfleet', 'pgoutput')");

    let config = config_file(&dir, postgres.port, port, true);
    let mut first = invalidator(&config);
    let deadline = Instant::now() + Duration::from_secs(20);
    while db
        .query_opt("SELECT 1 FROM pg_replication_slots WHERE active", &[])
        .await
        .unwrap()
        .is_none()
    {
        assert!(Instant::now() < deadline, "the invalidator never streamed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    const N: usize = 400;
    {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        for i in 0..N {
            s.write_all(format!("set key:{i} 0 0 1 noreply\r\nv\r\n").as_bytes())
                .unwrap();
        }
        s.write_all(b"mn\r\n").unwrap();
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf).unwrap();
    }
    // Transactions keep committing while the invalidator is killed and restarted.
    let committing = {
        let db = postgres.connect().await.unwrap();
        tokio::spawn(async move {
            for i in 0..N {
                db.batch_execute(&format!(
                    "SELECT pg_logical_emit_message(true, 'memfleet', 'key:{i}')"
                ))
                .await
                .unwrap();
                if i % 50 == 0 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while has(port, "key:40") {
        assert!(Instant::now() < deadline, "nothing was invalidated");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let _ = first.0.kill();
    let _ = first.0.wait();
    drop(first);
    let _second = invalidator(&config);
    committing.await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left: Vec<usize> = (0..N).filter(|i| has(port, &format!("key:{i}"))).collect();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} committed keys never deleted, e.g. {:?}",
            left.len(),
            &left[..left.len().min(5)]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Setup mistakes an operator makes: each stops the invalidator with what to change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_credentials_and_wal_level_are_named() {
    let dir = std::env::temp_dir().join(format!("memfleet-inv-err-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let refused = |config: &std::path::Path, want: &str| {
        let out = Command::new(EXE)
            .args(["invalidator", "--config"])
            .arg(config)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(stderr.contains(want), "wanted {want:?} in: {stderr}");
    };
    let replica = memfleet_testkit::Postgres::start_with(&["wal_level=replica"]).unwrap();
    refused(
        &config_file(&dir, replica.port, 1, true),
        "wal_level = replica; logical decoding needs wal_level = logical",
    );
    let path = config_file(&dir, replica.port, 1, true);
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("user = \"postgres\"", "user = \"nobody_here\"");
    std::fs::write(&path, text).unwrap();
    refused(&path, "check the address, the credentials and pg_hba.conf");
    let _ = std::fs::remove_dir_all(&dir);
}
