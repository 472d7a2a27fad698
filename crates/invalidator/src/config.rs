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
//! [invalidator]
//! route = "everywhere"
//! batch_keys = 512
//! batch_wait_ms = 2
//! check_one_in = 1000        # look every 1000th deleted key up everywhere (paper §7.3)
//! report_every_s = 60        # log counts, commit-to-delivered latency, spool depth and age
//! metrics_listen = "127.0.0.1:9151"   # optional: Prometheus metrics at /metrics
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
    }
}
