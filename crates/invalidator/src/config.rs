//! The invalidator's TOML file: `[database]` (where the commit log is), `[invalidator]`
//! (batching, which route deletes take), and the destinations written exactly as a
//! `memfleet router` configuration — `[pools.*]` (usually each cluster's routers),
//! `[routes.*]` (a `broadcast` to all of them) and `[router] spool_dir` (where deletes for
//! an unreachable destination wait, so the slot can move on).
//!
//! ```toml
//! [database]
//! host = "127.0.0.1"
//! port = 5432
//! user = "memfleet"          # needs REPLICATION (or superuser)
//! password_env = "PGPASSWORD"
//! dbname = "app"
//! slot = "memfleet"
//! publication = "memfleet"   # an empty publication is enough
//! prefix = "memfleet"        # pg_logical_emit_message(true, 'memfleet', 'key1 key2')
//! create = true              # create the slot and publication if missing
//!
//! # In a replica region (paper §5), [database] is the region's standby (PostgreSQL 16 or
//! # later), and the master region's primary is named for what a standby cannot do itself:
//! # the replication lag in bytes, creating the publication, and a running-transactions
//! # record so that the slot can be made on the standby at once.
//! [database.primary]
//! host = "10.0.0.5"
//! port = 5432                # user, password, password_env, dbname: the standby's unless given
//!
//! [invalidator]
//! route = "everywhere"
//! batch_keys = 512
//! batch_wait_ms = 2
//! check_one_in = 1000        # look every 1000th deleted key up everywhere (paper §7.3)
//! report_every_s = 60        # log counts, commit-to-delivered latency, spool depth and age
//! metrics_listen = "127.0.0.1:9151"   # optional: Prometheus metrics at /metrics
//! marker_prefix = "remote-marker:"    # deleted keys so named are remote markers cleared
//!
//! [router]
//! spool_dir = "/var/spool/memfleet-invalidator"   # default: a slot of the state directory
//!
//! [pools.cluster_a]
//! servers = ["10.0.1.1:5000"]
//! [pools.cluster_b]
//! servers = ["10.0.2.1:5000"]
//! # Destinations that require memcached's ASCII auth (`memfleet router -Y`, `memfleet
//! # server -Y`, memcached -Y): every connection logs in first, as the router's pools do.
//! auth_user = "invalidator"
//! auth_password_file = "/etc/memfleet/invalidator-password"
//!
//! [routes.everywhere]
//! type = "broadcast"
//! to = ["cluster_a", "cluster_b"]
//! ```

use anyhow::Context;
use memfleet_routing::RouterConfig;
use serde::Deserialize;
use std::path::Path;
use std::time::Duration;

/// Where the commit log is read.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Database {
    /// Host name or address.
    pub host: String,
    /// Port.
    #[serde(default = "default_port")]
    pub port: u16,
    /// A user with the REPLICATION attribute (or a superuser).
    pub user: String,
    /// The password, if given in the file.
    #[serde(default)]
    pub password: Option<String>,
    /// The environment variable holding the password (kept out of the file).
    #[serde(default)]
    pub password_env: Option<String>,
    /// The database whose transactions carry invalidations.
    pub dbname: String,
    /// The logical replication slot (pgoutput).
    #[serde(default = "default_name")]
    pub slot: String,
    /// The publication the slot streams (may be empty: messages need no table).
    #[serde(default = "default_name")]
    pub publication: String,
    /// The message prefix invalidations use.
    #[serde(default = "default_name")]
    pub prefix: String,
    /// Create the slot and the publication when they are missing.
    #[serde(default)]
    pub create: bool,
    /// When `host` is a standby: the primary it replicates (see the module's example).
    #[serde(default)]
    pub primary: Option<Primary>,
}

/// The primary a standby `[database]` replicates: asked for its WAL position (the lag in
/// bytes), to create the publication, and to log a running-transactions record while a
/// slot is being created on the standby (`pg_log_standby_snapshot()`). Any field left out
/// is the standby's.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Primary {
    /// Host name or address.
    pub host: String,
    /// Port.
    #[serde(default = "default_port")]
    pub port: u16,
    /// User (needs `pg_log_standby_snapshot`, i.e. superuser, only for creating a slot).
    #[serde(default)]
    pub user: Option<String>,
    /// Password.
    #[serde(default)]
    pub password: Option<String>,
    /// The environment variable holding the password.
    #[serde(default)]
    pub password_env: Option<String>,
    /// Database.
    #[serde(default)]
    pub dbname: Option<String>,
}

fn default_port() -> u16 {
    5432
}

fn default_name() -> String {
    "memfleet".into()
}

impl Database {
    /// The password: from the file, else from `password_env`, else empty (trust or peer
    /// authentication).
    pub fn password(&self) -> String {
        if let Some(p) = &self.password {
            return p.clone();
        }
        self.password_env
            .as_ref()
            .and_then(|v| std::env::var(v).ok())
            .unwrap_or_default()
    }

    /// The `[database.primary]` connection as a database of its own (the standby's
    /// user, password and database where it names none).
    pub fn primary_database(&self) -> Option<Database> {
        let p = self.primary.as_ref()?;
        Some(Database {
            host: p.host.clone(),
            port: p.port,
            user: p.user.clone().unwrap_or_else(|| self.user.clone()),
            password: p.password.clone().or_else(|| {
                p.password_env
                    .is_none()
                    .then(|| self.password.clone())
                    .flatten()
            }),
            password_env: p.password_env.clone().or_else(|| self.password_env.clone()),
            dbname: p.dbname.clone().unwrap_or_else(|| self.dbname.clone()),
            primary: None,
            ..self.clone()
        })
    }

    /// Connection settings for tokio-postgres.
    pub fn connect_config(&self) -> tokio_postgres::Config {
        let mut cfg = tokio_postgres::Config::new();
        cfg.host(&self.host)
            .port(self.port)
            .user(&self.user)
            .password(self.password())
            .dbname(&self.dbname)
            .connect_timeout(std::time::Duration::from_secs(10));
        cfg
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Invalidator {
    route: String,
    #[serde(default = "default_batch_keys")]
    batch_keys: usize,
    #[serde(default = "default_batch_wait_ms")]
    batch_wait_ms: u64,
    #[serde(default = "default_check_one_in")]
    check_one_in: u64,
    #[serde(default = "default_report_every_s")]
    report_every_s: u64,
    metrics_listen: Option<String>,
    #[serde(default = "default_marker_prefix")]
    marker_prefix: String,
}

fn default_marker_prefix() -> String {
    "remote-marker:".into()
}

fn default_check_one_in() -> u64 {
    1000
}

fn default_report_every_s() -> u64 {
    60
}

fn default_batch_keys() -> usize {
    512
}

fn default_batch_wait_ms() -> u64 {
    2
}

/// The whole configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// The commit log.
    pub database: Database,
    /// Where deletes go: pools, routes, spool.
    pub destinations: RouterConfig,
    /// The route (or pool) of `destinations` deletes take.
    pub route: String,
    /// Send a batch once it holds this many keys...
    pub batch_keys: usize,
    /// ...or once the log has been quiet this long.
    pub batch_wait: Duration,
    /// Look every n-th deleted key up in every destination (0: never).
    pub check_one_in: u64,
    /// How often the counters and latency percentiles are logged.
    pub report_every: Duration,
    /// Where Prometheus metrics are served (`GET /metrics`), if anywhere.
    pub metrics_listen: Option<String>,
    /// Deleted keys with this prefix are remote markers (paper §5) being cleared: counted.
    pub marker_prefix: String,
}

impl Config {
    /// Reads and checks a file.
    pub fn load(path: &Path) -> anyhow::Result<Config> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Config::parse(&text).with_context(|| format!("in {}", path.display()))
    }

    /// Parses and checks a configuration's text.
    pub fn parse(text: &str) -> anyhow::Result<Config> {
        let mut table: toml::Table = toml::from_str(text)?;
        let database: Database = table
            .remove("database")
            .context("no [database] table")?
            .try_into()
            .context("[database]")?;
        let inv: Invalidator = table
            .remove("invalidator")
            .context("no [invalidator] table")?
            .try_into()
            .context("[invalidator]")?;
        // What is left is a router configuration.
        let destinations = memfleet_routing::from_toml(&toml::to_string(&table)?)?;
        let known = destinations.pools.iter().any(|p| p.name == inv.route)
            || destinations.routes.iter().any(|r| r.name == inv.route);
        anyhow::ensure!(
            known,
            "[invalidator] route {:?}: no such pool or route",
            inv.route
        );
        anyhow::ensure!(
            inv.batch_keys > 0,
            "[invalidator] batch_keys must be at least 1"
        );
        Ok(Config {
            database,
            destinations,
            route: inv.route,
            batch_keys: inv.batch_keys,
            batch_wait: Duration::from_millis(inv.batch_wait_ms),
            check_one_in: inv.check_one_in,
            report_every: Duration::from_secs(inv.report_every_s.max(1)),
            metrics_listen: inv.metrics_listen,
            marker_prefix: inv.marker_prefix,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_with_destinations_parses_and_mistakes_are_named() {
        let text = r#"
            [database]
            host = "127.0.0.1"
            user = "memfleet"
            dbname = "app"

            [invalidator]
            route = "everywhere"

            [pools.a]
            servers = ["127.0.0.1:5000"]
            [pools.b]
            servers = ["127.0.0.1:6000"]
            auth_user = "invalidator"
            auth_password_file = "/etc/memfleet/invalidator-password"
            [routes.everywhere]
            type = "broadcast"
            to = ["a", "b"]
        "#;
        let c = Config::parse(text).unwrap();
        assert_eq!(
            (c.database.port, c.database.slot.as_str()),
            (5432, "memfleet")
        );
        assert_eq!(
            (c.batch_keys, c.batch_wait),
            (512, Duration::from_millis(2))
        );
        assert_eq!(c.destinations.pools.len(), 2);
        let b = &c.destinations.pools[1];
        assert_eq!(
            b.auth.as_ref().map(|a| a.user.as_str()),
            Some("invalidator")
        );
        let err = |t: &str| format!("{:#}", Config::parse(t).unwrap_err());
        assert!(
            err(&text.replace("route = \"everywhere\"", "route = \"nowhere\"")).contains("nowhere")
        );
        assert!(err(&text.replace("[database]", "[db]")).contains("[database]"));
        assert!(err(&text.replace("dbname", "db_name")).contains("db_name"));
        assert_eq!(c.marker_prefix, "remote-marker:");
        assert!(c.database.primary_database().is_none());
    }

    #[test]
    fn a_standby_names_its_primary_which_borrows_what_it_leaves_out() {
        let text = r#"
            [database]
            host = "standby"
            user = "memfleet"
            password_env = "PGPASSWORD"
            dbname = "app"
            [database.primary]
            host = "primary"
            port = 6432
            [invalidator]
            route = "a"
            marker_prefix = "rm:"
            [pools.a]
            servers = ["127.0.0.1:5000"]
        "#;
        let c = Config::parse(text).unwrap();
        let p = c.database.primary_database().unwrap();
        assert_eq!(
            (p.host.as_str(), p.port, p.user.as_str(), p.dbname.as_str()),
            ("primary", 6432, "memfleet", "app")
        );
        assert_eq!(p.password_env.as_deref(), Some("PGPASSWORD"));
        assert_eq!(c.marker_prefix, "rm:");
        let err = Config::parse(&text.replace("port = 6432", "prot = 6432")).unwrap_err();
        assert!(format!("{err:#}").contains("prot"), "{err:#}");
    }
}
