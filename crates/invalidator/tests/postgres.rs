//! The invalidator against a real PostgreSQL (started by the test) and real memfleet
//! servers and routers: committed invalidations reach every cluster, rolled-back ones never;
//! a destination that is down holds the slot back and gets every delete once it is back.

use memfleet_invalidator::{run, setup, source::PgLogical, Config, Counters};
use memfleet_server::{Server, Settings};
use memfleet_testkit::Postgres;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn server(port: u16) -> Server {
    Server::start(Settings::single_worker(port, 16 << 20)).expect("server starts")
}

/// One request, one reply (small).
fn ask(port: u16, request: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut buf = [0u8; 4096];
    let n = s.read(&mut buf).unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

fn has(port: u16, key: &str) -> bool {
    ask(port, &format!("mg {key}\r\n")).starts_with("HD")
}

async fn eventually(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn config(pg: u16, destinations: &str) -> Config {
    Config::parse(&format!(
        "[database]\nhost = \"127.0.0.1\"\nport = {pg}\nuser = \"postgres\"\ndbname = \"postgres\"\n\
         create = true\n\n[invalidator]\nroute = \"everywhere\"\nbatch_wait_ms = 2\n\n{destinations}"
    ))
    .unwrap()
}

/// Starts the invalidator and waits until its slot is streaming.
async fn start(
    config: &Config,
    db: &tokio_postgres::Client,
) -> (tokio::task::JoinHandle<()>, Arc<Counters>) {
    let counters = Arc::new(Counters::default());
    let (config, c) = (config.clone(), counters.clone());
    let task = tokio::spawn(async move {
        setup::prepare(&config.database)
            .await
            .expect("database ready");
        let log = PgLogical::connect(&config.database)
            .await
            .expect("slot streams");
        run(&config, log, c).await.expect("invalidator runs");
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let active = db
            .query_opt(
                "SELECT 1 FROM pg_replication_slots WHERE slot_name = 'memfleet' AND active",
                &[],
            )
            .await
            .unwrap();
        if active.is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "the slot never became active");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (task, counters)
}

/// A router from `toml`, once its port is free again (a stopped router's port may linger
/// for a moment).
async fn restart_router(toml: &str) -> memfleet_router::RunningRouter {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match memfleet_router::RunningRouter::start(
            memfleet_routing::from_toml(toml).unwrap(),
            1,
            None,
        ) {
            Ok(r) => return r,
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(e) => panic!("router starts: {e:#}"),
        }
    }
}

/// A router on a free port in front of the server on `pb`, and the invalidator's
/// destinations for it: pool `a` (the server on `pa`), pool `b` (that router, quick to be
/// marked down; `spool_deletes` as given), a broadcast route `everywhere` to both. Returns
/// the running router, its configuration (to start it again) and the destinations' TOML.
async fn behind_a_router(
    pa: u16,
    pb: u16,
    spool_deletes: bool,
) -> (memfleet_router::RunningRouter, String, String) {
    let router_port = memfleet_testkit::free_port();
    let router_toml = format!(
        "[pools.main]\nlisten = \"127.0.0.1:{router_port}\"\nservers = [\"127.0.0.1:{pb}\"]\n"
    );
    let router = restart_router(&router_toml).await;
    let destinations = format!(
        "[pools.a]\nservers = [\"127.0.0.1:{pa}\"]\n\
         [pools.b]\nservers = [\"127.0.0.1:{router_port}\"]\ntimeout_ms = 200\n\
         server_failure_limit = 1\nserver_retry_timeout_ms = 100\nspool_deletes = {spool_deletes}\n\
         [routes.everywhere]\ntype = \"broadcast\"\nto = [\"a\", \"b\"]\n"
    );
    (router, router_toml, destinations)
}

/// How far the slot has been acknowledged, and where the log is now.
async fn slot_position(db: &tokio_postgres::Client) -> (u64, u64) {
    let row = db
        .query_one(
            "SELECT (confirmed_flush_lsn - '0/0')::bigint, (pg_current_wal_lsn() - '0/0')::bigint \
             FROM pg_replication_slots WHERE slot_name = 'memfleet'",
            &[],
        )
        .await
        .unwrap();
    (row.get::<_, i64>(0) as u64, row.get::<_, i64>(1) as u64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_keys_are_deleted_everywhere_and_rolled_back_ones_never() {
    let pg = Postgres::start().unwrap();
    let db = pg.connect().await.unwrap();
    let (a, b) = (server(0), server(0));
    let (pa, pb) = (a.local_addr().port(), b.local_addr().port());
    let config = config(
        pg.port,
        &format!(
            "[pools.a]\nservers = [\"127.0.0.1:{pa}\"]\n[pools.b]\nservers = [\"127.0.0.1:{pb}\"]\n\
             [routes.everywhere]\ntype = \"broadcast\"\nto = [\"a\", \"b\"]\n"
        ),
    );
    let (task, counters) = start(&config, &db).await;
    for k in ["k1", "k2", "k3", "k4", "k5"] {
        for p in [pa, pb] {
            assert_eq!(ask(p, &format!("set {k} 0 0 1\r\nv\r\n")), "STORED\r\n");
        }
    }
    db.batch_execute(
        "BEGIN; SELECT pg_logical_emit_message(true, 'memfleet', 'k1 k2'); COMMIT;
         BEGIN; SELECT pg_logical_emit_message(true, 'memfleet', 'k3'); ROLLBACK;
         SELECT pg_logical_emit_message(true, 'someone-else', 'k5');
         SELECT pg_logical_emit_message(true, 'memfleet', 'k4');",
    )
    .await
    .unwrap();
    // Commit order: once k4 (the last) is gone everywhere, everything before was handled.
    eventually("k4 deleted everywhere", || !has(pa, "k4") && !has(pb, "k4")).await;
    for p in [pa, pb] {
        assert!(
            !has(p, "k1") && !has(p, "k2"),
            "a committed key survived on {p}"
        );
        assert!(
            has(p, "k3"),
            "a rolled-back invalidation was applied on {p}"
        );
        assert!(has(p, "k5"), "another prefix's message was applied on {p}");
    }
    assert_eq!(counters.transactions.load(Ordering::Relaxed), 2);
    assert_eq!(counters.keys.load(Ordering::Relaxed), 3);
    // Every transaction's commit-to-deleted latency was recorded; the sampled key (the
    // first) was looked up everywhere and found gone.
    assert_eq!(counters.latency_us.lock().unwrap().len(), 2);
    let (p50, _, _, max) = counters.latency();
    assert!(p50 > 0 && max < 10_000_000, "latency {p50}..{max} µs");
    assert_eq!(counters.checked.load(Ordering::Relaxed), 1);
    assert_eq!(counters.check_failures.load(Ordering::Relaxed), 0);
    // The slot was acknowledged up to what was delivered.
    let acked = counters.acked.load(Ordering::Acquire);
    eventually_async_slot(&db, acked).await;
    task.abort();
}

async fn eventually_async_slot(db: &tokio_postgres::Client, at_least: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (confirmed, _) = slot_position(db).await;
        if confirmed >= at_least {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "slot confirmed {confirmed} < {at_least}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_that_is_down_holds_the_slot_and_gets_every_delete_when_back() {
    let pg = Postgres::start().unwrap();
    let db = pg.connect().await.unwrap();
    let a = server(0);
    let b = server(0);
    let (pa, pb) = (a.local_addr().port(), b.local_addr().port());
    // Cluster b is reached through its router, which goes away for a while.
    let (router, router_toml, destinations) = behind_a_router(pa, pb, false).await;
    let config = config(pg.port, &destinations);
    let (task, counters) = start(&config, &db).await;
    for p in [pa, pb] {
        assert_eq!(ask(p, "set held 0 0 1\r\nv\r\n"), "STORED\r\n");
    }
    drop(router);
    db.batch_execute("SELECT pg_logical_emit_message(true, 'memfleet', 'held');")
        .await
        .unwrap();
    let (_, commit) = slot_position(&db).await;
    // Cluster a gets it; b cannot (its spool turned off): the slot stays before the commit.
    eventually("held deleted in a", || !has(pa, "held")).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(has(pb, "held"));
    let (confirmed, _) = slot_position(&db).await;
    assert!(
        confirmed < commit,
        "the slot moved past an undelivered delete"
    );
    assert!(counters.retries.load(Ordering::Relaxed) > 0);
    // The router comes back on its port: the delete arrives and the slot moves on.
    let _router = restart_router(&router_toml).await;
    eventually("held deleted in b", || !has(pb, "held")).await;
    eventually_async_slot(&db, commit).await;
    task.abort();
}

/// docs/invalidation.sql: the helper function and the row trigger template work as
/// documented, through the invalidator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_sql_helpers_invalidate_through_the_invalidator() {
    let pg = Postgres::start().unwrap();
    let db = pg.connect().await.unwrap();
    let a = server(0);
    let pa = a.local_addr().port();
    let config = config(
        pg.port,
        &format!(
            "[pools.a]\nservers = [\"127.0.0.1:{pa}\"]\n\
             [routes.everywhere]\ntype = \"broadcast\"\nto = [\"a\"]\n"
        ),
    );
    let sql = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/invalidation.sql"
    ))
    .unwrap();
    db.batch_execute(&sql).await.unwrap();
    db.batch_execute(
        "CREATE TABLE users (id bigint PRIMARY KEY, name text NOT NULL);
         CREATE TRIGGER users_memfleet AFTER INSERT OR UPDATE OR DELETE ON users
             FOR EACH ROW EXECUTE FUNCTION memfleet_invalidate_row('user:{id}', 'profile:{id}');",
    )
    .await
    .unwrap();
    let (task, _) = start(&config, &db).await;
    for k in ["user:1", "profile:1", "user:2", "a", "b", "done"] {
        assert_eq!(ask(pa, &format!("set {k} 0 0 1\r\nv\r\n")), "STORED\r\n");
    }
    // One statement per call: several in one simple query share an implicit transaction,
    // which a ROLLBACK among them would undo whole.
    for statement in [
        "INSERT INTO users VALUES (1, 'Ada')",
        "BEGIN; UPDATE users SET id = 2 WHERE id = 1; ROLLBACK",
        "SELECT memfleet_invalidate('a', 'b')",
        "SELECT memfleet_invalidate('done')",
    ] {
        db.batch_execute(statement).await.unwrap();
    }
    eventually("the last invalidation", || !has(pa, "done")).await;
    assert!(
        !has(pa, "user:1") && !has(pa, "profile:1"),
        "the trigger's keys survived"
    );
    assert!(!has(pa, "a") && !has(pa, "b"));
    assert!(has(pa, "user:2"), "a key no row named was deleted");
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_spool_the_slot_moves_on_and_delivery_is_reported_when_the_replay_lands() {
    let pg = Postgres::start().unwrap();
    let db = pg.connect().await.unwrap();
    let (a, b) = (server(0), server(0));
    let (pa, pb) = (a.local_addr().port(), b.local_addr().port());
    let spool = std::env::temp_dir().join(format!("memfleet-inv-spool-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&spool);
    let (router, router_toml, destinations) = behind_a_router(pa, pb, true).await;
    let router_port = destinations
        .split("127.0.0.1:")
        .nth(2)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_string();
    let config = config(
        pg.port,
        &format!(
            "[router]\nspool_dir = \"{}\"\n{destinations}",
            spool.display()
        ),
    );
    let (task, counters) = start(&config, &db).await;
    for p in [pa, pb] {
        assert_eq!(ask(p, "set spooled 0 0 1\r\nv\r\n"), "STORED\r\n");
    }
    drop(router);
    db.batch_execute("SELECT pg_logical_emit_message(true, 'memfleet', 'spooled');")
        .await
        .unwrap();
    let (_, commit) = slot_position(&db).await;
    // The delete for b is on disk, so the slot moves past it while b is unreachable.
    eventually_async_slot(&db, commit).await;
    assert!(!has(pa, "spooled"));
    assert!(has(pb, "spooled"));
    // Spooled is not delivered: no latency yet, one batch owed, the queue in the metrics.
    eventually("the batch to be owed", || {
        counters.undelivered_batches.load(Ordering::Relaxed) == 1
    })
    .await;
    assert_eq!(counters.latency_us.lock().unwrap().len(), 0);
    let queue = format!("b--127.0.0.1-{router_port}");
    eventually("the spool in the metrics", || {
        memfleet_invalidator::metrics::render(&counters).contains(&format!(
            "memfleet_invalidator_spool_depth{{queue=\"{queue}\"}} 1"
        ))
    })
    .await;
    let outage = Duration::from_millis(1500);
    tokio::time::sleep(outage).await;
    let text = memfleet_invalidator::metrics::render(&counters);
    let oldest = text
        .lines()
        .find_map(|l| {
            l.strip_prefix(&format!(
                "memfleet_invalidator_spool_oldest_seconds{{queue=\"{queue}\"}} "
            ))
        })
        .and_then(|v| v.parse::<f64>().ok())
        .expect("the oldest queued age is a metric");
    assert!(oldest >= outage.as_secs_f64(), "oldest {oldest} s: {text}");
    // b's router is back: the spooled delete is replayed, and only now delivered.
    let _router = restart_router(&router_toml).await;
    eventually("the spooled delete in b", || !has(pb, "spooled")).await;
    eventually("the delivery to be counted", || {
        counters.undelivered_batches.load(Ordering::Relaxed) == 0
    })
    .await;
    let (_, _, _, max) = counters.latency();
    assert!(
        max >= outage.as_micros() as u64,
        "commit-to-delivered {max} µs does not include the {outage:?} outage"
    );
    assert_eq!(counters.spooled_batches.load(Ordering::Relaxed), 1);
    task.abort();
    let _ = std::fs::remove_dir_all(&spool);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destinations_found_in_dns_get_every_delete_and_show_in_the_metrics() {
    let pg = Postgres::start().unwrap();
    let db = pg.connect().await.unwrap();
    let (a, b) = (server(0), server(0));
    let (pa, pb) = (a.local_addr().port(), b.local_addr().port());
    // Pool a: every address of a.inv.test; pool b: the SRV targets of its service name.
    let dns = memfleet_testkit::DnsServer::start();
    let localhost: std::net::IpAddr = "127.0.0.1".parse().unwrap();
    dns.set_a("a.inv.test", &[localhost], 1);
    dns.set_a("b-0.inv.test", &[localhost], 1);
    dns.set_srv("_memcache._tcp.b.inv.test", &[("b-0.inv.test", pb)], 1);
    let config = config(
        pg.port,
        &format!(
            "[router]\nresolve_interval = \"300ms\"\nnameservers = [\"{}\"]\n\
             [pools.a]\nservers = [\"dns+a.inv.test:{pa}\"]\n\
             [pools.b]\nservers = [\"dnssrv+_memcache._tcp.b.inv.test\"]\n\
             [routes.everywhere]\ntype = \"broadcast\"\nto = [\"a\", \"b\"]\n",
            dns.addr()
        ),
    );
    let (task, counters) = start(&config, &db).await;
    for p in [pa, pb] {
        assert_eq!(ask(p, "set dk 0 0 1\r\nv\r\n"), "STORED\r\n");
    }
    db.batch_execute("SELECT pg_logical_emit_message(true, 'memfleet', 'dk');")
        .await
        .unwrap();
    eventually("dk deleted through both DNS pools", || {
        !has(pa, "dk") && !has(pb, "dk")
    })
    .await;
    // The destinations' members and lookups are in the invalidator's metrics.
    let metrics = || memfleet_invalidator::metrics::render(&counters);
    eventually("the destinations in the metrics", || {
        metrics().contains("memfleet_invalidator_pool_members{pool=\"b\"} 1")
    })
    .await;
    let text = metrics();
    assert!(
        text.contains("memfleet_invalidator_pool_members{pool=\"a\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("memfleet_invalidator_dns_failing{pool=\"b\"} 0"),
        "{text}"
    );
    assert!(
        !text.contains("memfleet_invalidator_dns_lookups_total{pool=\"a\"} 0"),
        "{text}"
    );
    task.abort();
}
