//! The two regions of `memfleet bench regions`, started on loopback: a PostgreSQL 16
//! primary (the master region's database) and its streaming standby (the replica
//! region's), and in each region two `memfleet server`s behind a `memfleet router` and a
//! `memfleet invalidator` (child processes) that deletes in that region only, reading its
//! own region's database: the master's the primary, the replica's the standby (or, with
//! `--replica-invalidator primary`, the primary: the mistake the paper's design avoids).

use memfleet_testkit::ServerSpec;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use memfleet_testkit::{Postgres, Router, RouterConfig, Spawned};

use super::super::target::free_port;

/// The application's table: one row per key, its version.
pub(super) const TABLE: &str = "CREATE TABLE kv (k text PRIMARY KEY, v bigint NOT NULL)";

/// One region's caches and invalidator.
pub(super) struct Region {
    /// Its router's port: the application's clients in the region talk to it.
    pub(super) router_port: u16,
    /// The invalidator's /metrics.
    pub(super) metrics: SocketAddr,
    /// Its invalidator's configuration file (to start it again).
    config_path: PathBuf,
    pub(super) invalidator: Option<Spawned>,
    _router: Router,
    _servers: Vec<Spawned>,
}

/// Both regions and their databases.
pub(super) struct World {
    pub(super) primary: Postgres,
    pub(super) standby: Postgres,
    pub(super) regions: Vec<Region>,
    bin: String,
    dir: PathBuf,
}

impl World {
    /// Starts both databases, and each region's servers, router and invalidator.
    pub(super) fn start(bin: &str, replica_reads_primary: bool) -> Result<World> {
        let primary = Postgres::start_at_least(16, &[]).context(
            "starting PostgreSQL 16 or later (logical decoding on a standby): run \
             scripts/postgres16 first",
        )?;
        let standby = primary
            .standby(&[])
            .context("making the replica region's standby (pg_basebackup -R)")?;
        let dir =
            std::env::temp_dir().join(format!("memfleet-bench-regions-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let mut world = World {
            primary,
            standby,
            regions: Vec::new(),
            bin: bin.to_string(),
            dir,
        };
        for (name, reads_standby) in [("master", false), ("replica", !replica_reads_primary)] {
            let region = world.start_region(name, reads_standby)?;
            world.regions.push(region);
        }
        Ok(world)
    }

    fn start_region(&self, name: &'static str, reads_standby: bool) -> Result<Region> {
        let bin = self.bin.as_str();
        let mut servers = Vec::new();
        let mut ports = Vec::new();
        for _ in 0..2 {
            let server = ServerSpec::memfleet(bin, 64).start()?;
            ports.push(server.addr.port());
            servers.push(server);
        }
        let (router, router_port) =
            Router::in_front_of(bin, name, &ports, &self.dir.join(format!("router-{name}")))?;
        let metrics: SocketAddr = ([127, 0, 0, 1], free_port()?).into();
        let db = if reads_standby {
            &self.standby
        } else {
            &self.primary
        };
        let mut config = RouterConfig::new();
        config.invalidator_database(
            db.port,
            &format!("memfleet_{name}"),
            reads_standby.then_some(self.primary.port),
        );
        config
            .section("invalidator")
            .set_str("route", name)
            .set("batch_wait_ms", 1)
            .set("report_every_s", 3600)
            .set_str("metrics_listen", &metrics.to_string());
        config.section("router").set_str(
            "spool_dir",
            &self
                .dir
                .join(format!("invalidator-{name}"))
                .display()
                .to_string(),
        );
        config.pool(name, &[router_port]);
        let config_path = self.dir.join(format!("invalidator-{name}.toml"));
        std::fs::write(&config_path, config.text())?;
        let invalidator = start_invalidator(bin, &config_path, metrics)?;
        Ok(Region {
            router_port,
            metrics,
            config_path,
            invalidator: Some(invalidator),
            _router: router,
            _servers: servers,
        })
    }

    /// Kills region `i`'s invalidator with SIGKILL (no goodbye to the database).
    pub(super) fn kill_invalidator(&mut self, i: usize) {
        if let Some(mut inv) = self.regions[i].invalidator.take() {
            let _ = inv.stop_with(libc::SIGKILL);
        }
    }

    /// Starts region `i`'s invalidator again (its slot resumes where it was acknowledged).
    pub(super) fn restart_invalidator(&mut self, i: usize) -> Result<()> {
        let region = &mut self.regions[i];
        region.invalidator = Some(start_invalidator(
            &self.bin,
            &region.config_path,
            region.metrics,
        )?);
        Ok(())
    }
}

impl Drop for World {
    fn drop(&mut self) {
        self.regions.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `memfleet invalidator --config PATH`, once its metrics port answers (the slot exists
/// then: every transaction committed from there on is in it).
fn start_invalidator(bin: &str, config: &Path, metrics: SocketAddr) -> Result<Spawned> {
    let argv: Vec<String> = vec![
        bin.to_string(),
        "invalidator".into(),
        "--config".into(),
        config.display().to_string(),
    ];
    Spawned::start(&argv, metrics, None)
}

/// Creates the table with `keys` rows of version 0 on the primary and waits until the
/// standby has them.
pub(super) async fn create_table(
    primary: &tokio_postgres::Client,
    standby: &tokio_postgres::Client,
    keys: usize,
) -> Result<()> {
    primary.batch_execute(TABLE).await?;
    primary
        .execute(
            "INSERT INTO kv SELECT 'user:' || i, 0 FROM generate_series(0, $1::int - 1) i",
            &[&(keys as i32)],
        )
        .await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let row = standby
            .query_opt("SELECT count(*) FROM kv", &[])
            .await
            .ok()
            .flatten();
        if row.is_some_and(|r| r.get::<_, i64>(0) == keys as i64) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the standby did not replay the table in 30 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Holds the standby's replay back by `delay` (`recovery_min_apply_delay`, set with ALTER
/// SYSTEM and a reload: it applies to commits replayed from now on).
pub(super) async fn set_apply_delay(
    standby: &tokio_postgres::Client,
    delay: Duration,
) -> Result<()> {
    // Two statements: ALTER SYSTEM cannot run in the transaction a batch of them makes.
    standby
        .batch_execute(&format!(
            "ALTER SYSTEM SET recovery_min_apply_delay = '{}ms'",
            delay.as_millis()
        ))
        .await
        .context("setting recovery_min_apply_delay on the standby")?;
    standby.batch_execute("SELECT pg_reload_conf()").await?;
    Ok(())
}

/// Waits (at most `wait`) until the standby has replayed everything the primary had
/// written when this was called.
pub(super) async fn wait_replayed(
    primary: &tokio_postgres::Client,
    standby: &tokio_postgres::Client,
    wait: Duration,
) -> Result<()> {
    let target: f64 = primary
        .query_one("SELECT (pg_current_wal_lsn() - '0/0')::float8", &[])
        .await?
        .get(0);
    let deadline = Instant::now() + wait;
    loop {
        let replayed: f64 = standby
            .query_one("SELECT (pg_last_wal_replay_lsn() - '0/0')::float8", &[])
            .await?
            .get(0);
        if replayed >= target {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the standby did not catch up with the primary in {wait:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
