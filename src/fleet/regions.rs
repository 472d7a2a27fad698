//! `memfleet fleet up --regions 2`: Facebook §5 on one machine. The first region (the
//! master) is the usual fleet plus a PostgreSQL 16 primary and an invalidator reading it;
//! the second (a replica region) has its own cluster, gutter, regional pool and router, a
//! streaming standby of the primary (`pg_basebackup -R`) and an invalidator reading the
//! *standby*, so that its deletes reach the region only after its data did.
//!
//! The databases are started with the test kit's scratch PostgreSQL (PostgreSQL 16 or
//! later: `scripts/postgres16`, or `MEMFLEET_POSTGRES_BIN`) in `<dir>/databases`, left
//! running, and listed in `<dir>/postgres` so that `fleet down` stops them (and removes
//! their files) after the processes. `--standby-delay` holds the standby's replay back
//! (`recovery_min_apply_delay`), to watch the §5 race the replica region's invalidator
//! closes: a read in that region sees the old row for that long after the commit.

use anyhow::Context;
use memfleet_testkit::{Detached, Postgres, RouterConfig};
use std::path::Path;

/// The file listing the fleet's databases (one [`Detached::to_line`] each, the standby
/// first: it is stopped first).
pub(super) const DATABASES: &str = "postgres";

/// The two databases, running.
pub(super) struct Databases {
    pub(super) primary: Detached,
    pub(super) standby: Detached,
}

/// Starts the primary and its standby (its replay `standby_delay_ms` behind, 0: as soon as
/// it can) under `dir/databases` and records them in `dir/postgres`.
pub(super) fn start_databases(dir: &Path, standby_delay_ms: u64) -> anyhow::Result<Databases> {
    let data = dir.join("databases");
    std::fs::create_dir_all(&data).with_context(|| format!("creating {}", data.display()))?;
    let primary = Postgres::start_in(&data, 16, &[]).with_context(|| {
        format!(
            "--regions 2 needs PostgreSQL 16 or later (logical decoding on a standby): run \
             scripts/postgres16, or name a bin directory in MEMFLEET_POSTGRES_BIN; as root, \
             PostgreSQL runs as nobody, who must be able to reach {}",
            data.display()
        )
    })?;
    let delay = format!("recovery_min_apply_delay={standby_delay_ms}ms");
    let standby = primary
        .standby_in(&data, &[&delay])
        .context("making the standby")?;
    let (primary, standby) = (primary.detach(), standby.detach());
    std::fs::write(
        dir.join(DATABASES),
        format!("{}\n{}\n", standby.to_line(), primary.to_line()),
    )?;
    Ok(Databases { primary, standby })
}

/// Stops the databases `dir/postgres` lists (none: nothing to do).
pub(super) fn stop_databases(dir: &Path) -> anyhow::Result<usize> {
    let Ok(text) = std::fs::read_to_string(dir.join(DATABASES)) else {
        return Ok(0);
    };
    let mut stopped = 0;
    for line in text.lines() {
        let db =
            Detached::from_line(line).with_context(|| format!("bad line in postgres: {line:?}"))?;
        if let Err(e) = db.stop() {
            eprintln!("PostgreSQL on 127.0.0.1:{}: {e:#}", db.port);
        }
        stopped += 1;
    }
    std::fs::remove_file(dir.join(DATABASES))?;
    Ok(stopped)
}

/// The databases' ports, for `fleet status` (primary first).
pub(super) fn database_ports(dir: &Path) -> Vec<(&'static str, u16)> {
    let text = std::fs::read_to_string(dir.join(DATABASES)).unwrap_or_default();
    let mut lines: Vec<u16> = text
        .lines()
        .filter_map(Detached::from_line)
        .map(|d| d.port)
        .collect();
    lines.reverse();
    ["postgres-primary", "postgres-standby"]
        .into_iter()
        .zip(lines)
        .collect()
}

/// Ports of the replica region's processes, from the fleet's base port.
pub(super) struct ReplicaPorts {
    pub(super) router: u16,
    pub(super) metrics_master: u16,
    pub(super) metrics_replica: u16,
}

impl ReplicaPorts {
    pub(super) fn of(base: u16) -> ReplicaPorts {
        ReplicaPorts {
            router: base + 300,
            metrics_master: base + 150,
            metrics_replica: base + 350,
        }
    }
}

/// An invalidator's configuration: read `db` (a standby when `primary` is given), delete
/// through the routers on `routers` (one pool: each router broadcasts a delete to its
/// region's clusters).
pub(super) fn invalidator_config(
    name: &str,
    db: &Detached,
    primary: Option<&Detached>,
    routers: &[u16],
    metrics: u16,
    dir: &str,
) -> String {
    let mut c = RouterConfig::new();
    c.invalidator_database(
        db.port,
        &format!("memfleet_{name}"),
        primary.map(|p| p.port),
    );
    c.section("invalidator")
        .set_str("route", "region")
        .set_str("metrics_listen", &format!("127.0.0.1:{metrics}"));
    c.section("router")
        .set_str("spool_dir", &format!("{dir}/spool-invalidator-{name}"));
    c.pool("region", routers);
    c.text()
}

/// The invalidators (started after everything else): name, metrics port, arguments.
pub(super) fn invalidators(dir: &str, ports: &ReplicaPorts) -> Vec<(String, u16, Vec<String>)> {
    [
        ("invalidator-master", ports.metrics_master),
        ("invalidator-replica", ports.metrics_replica),
    ]
    .into_iter()
    .map(|(name, port)| {
        let args = vec![
            "invalidator".into(),
            "--config".into(),
            format!("{dir}/{name}.toml"),
        ];
        (name.to_string(), port, args)
    })
    .collect()
}
