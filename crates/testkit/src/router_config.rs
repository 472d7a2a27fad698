//! [`RouterConfig`]: a `memfleet router` (or invalidator) configuration written pool by pool
//! and route by route, every server on 127.0.0.1, in the order it is built (so a file a
//! person reads keeps the order its author chose). Values are TOML: [`RouterConfig::set`]
//! takes them as written (numbers, booleans, inline tables), `set_str` and `set_strs` quote.
//! Not here: what the keys mean (`memfleet_routing::config`, the book's router chapter, docs/router.md).

use std::fmt::{Display, Write as _};

/// A router configuration being written; [`RouterConfig::text`] is the file.
#[derive(Clone, Debug, Default)]
pub struct RouterConfig {
    text: String,
}

/// TOML's basic string for `s`.
fn quoted(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

impl RouterConfig {
    /// An empty configuration.
    pub fn new() -> RouterConfig {
        RouterConfig::default()
    }

    /// Starts the table `[header]`; the keys set next go in it.
    pub fn section(&mut self, header: &str) -> &mut RouterConfig {
        if !self.text.is_empty() {
            self.text.push('\n');
        }
        let _ = writeln!(self.text, "[{header}]");
        self
    }

    /// Starts `[pools.NAME]` with `servers` on 127.0.0.1 at `ports`.
    pub fn pool(&mut self, name: &str, ports: &[u16]) -> &mut RouterConfig {
        let servers: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let servers: Vec<&str> = servers.iter().map(String::as_str).collect();
        self.section(&format!("pools.{name}"))
            .set_strs("servers", &servers)
    }

    /// Starts `[routes.NAME]` of type `kind`.
    pub fn route(&mut self, name: &str, kind: &str) -> &mut RouterConfig {
        self.section(&format!("routes.{name}"))
            .set_str("type", kind)
    }

    /// Starts a `gutter` route `name` (§3.3): `main` while it answers, `gutter` (with sets
    /// kept at most `ttl` seconds) when it does not. `listen` or more keys may follow.
    pub fn gutter_route(
        &mut self,
        name: &str,
        main: &str,
        gutter: &str,
        ttl: u32,
    ) -> &mut RouterConfig {
        self.route(name, "gutter")
            .set_str("main", main)
            .set_str("gutter", gutter)
            .set("gutter_ttl", ttl)
    }

    /// `listen = "127.0.0.1:PORT"` in the current pool or route.
    pub fn listen(&mut self, port: u16) -> &mut RouterConfig {
        self.set_str("listen", &format!("127.0.0.1:{port}"))
    }

    /// The failover of a pool whose servers a test or an experiment kills: 200 ms timeouts,
    /// marked down after 2 failures, retried after a second.
    pub fn quick_failover(&mut self) -> &mut RouterConfig {
        self.set("timeout_ms", 200)
            .set("server_failure_limit", 2)
            .set("server_retry_timeout_ms", 1000)
    }

    /// An invalidator's `[database]`: the scratch PostgreSQL on 127.0.0.1:`port` (user and
    /// database `postgres`), slot `slot`, created when missing; with `primary`, the port of
    /// the primary it is a standby of (`[database.primary]`).
    pub fn invalidator_database(
        &mut self,
        port: u16,
        slot: &str,
        primary: Option<u16>,
    ) -> &mut RouterConfig {
        self.section("database")
            .set_str("host", "127.0.0.1")
            .set("port", port)
            .set_str("user", "postgres")
            .set_str("dbname", "postgres")
            .set_str("slot", slot)
            .set("create", true);
        if let Some(primary) = primary {
            self.section("database.primary")
                .set_str("host", "127.0.0.1")
                .set("port", primary);
        }
        self
    }

    /// `key = value`, the value written as TOML as it is.
    pub fn set(&mut self, key: &str, value: impl Display) -> &mut RouterConfig {
        let _ = writeln!(self.text, "{key} = {value}");
        self
    }

    /// `key = "value"`.
    pub fn set_str(&mut self, key: &str, value: &str) -> &mut RouterConfig {
        self.set(key, quoted(value))
    }

    /// `key = ["a", "b", ...]`.
    pub fn set_strs(&mut self, key: &str, values: &[&str]) -> &mut RouterConfig {
        let list: Vec<String> = values.iter().map(|v| quoted(v)).collect();
        self.set(key, format!("[{}]", list.join(", ")))
    }

    /// The configuration file's text.
    pub fn text(&self) -> String {
        self.text.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_and_routes_read_back_as_built() {
        let mut c = RouterConfig::new();
        c.section("router").set_str("spool_dir", "/tmp/a \"b\"");
        c.pool("main", &[1, 2]).listen(3).quick_failover();
        c.route("cache", "gutter")
            .listen(4)
            .set_str("main", "main")
            .set("prefixes", "{ \"/r/\" = \"main\" }")
            .set("enabled", true);
        let t: toml::Table = toml::from_str(&c.text()).unwrap();
        assert_eq!(t["router"]["spool_dir"].as_str(), Some("/tmp/a \"b\""));
        let main = &t["pools"]["main"];
        assert_eq!(
            main["servers"].as_array().unwrap(),
            &vec![
                toml::Value::from("127.0.0.1:1"),
                toml::Value::from("127.0.0.1:2")
            ]
        );
        assert_eq!(main["listen"].as_str(), Some("127.0.0.1:3"));
        assert_eq!(main["timeout_ms"].as_integer(), Some(200));
        assert_eq!(main["server_failure_limit"].as_integer(), Some(2));
        assert_eq!(main["server_retry_timeout_ms"].as_integer(), Some(1000));
        let cache = &t["routes"]["cache"];
        assert_eq!(cache["type"].as_str(), Some("gutter"));
        assert_eq!(cache["listen"].as_str(), Some("127.0.0.1:4"));
        assert_eq!(cache["prefixes"]["/r/"].as_str(), Some("main"));
        assert_eq!(cache["enabled"].as_bool(), Some(true));
        // Written in the order built: the router section first.
        assert!(c.text().starts_with("[router]\n"), "{}", c.text());
    }
}
