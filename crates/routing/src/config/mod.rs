//! Pool configuration: memfleet's TOML, and twemproxy's YAML read unchanged, both into the
//! same [`PoolConfig`]s, so a twemproxy user switches by changing one command line and keeps
//! every key on its server.
//!
//! memfleet's TOML names pools as tables; servers use twemproxy's `host:port:weight [name]`
//! syntax (weight and name optional):
//!
//! ```toml
//! [pools.main]
//! listen = "127.0.0.1:22122"
//! distribution = "ketama"        # ketama | ketama-spymemcached | modula | rendezvous | jump
//! hash = "md5"                   # any twemproxy hash name
//! hash_tag = "{}"                # optional: hash only what is between the two characters
//! timeout_ms = 400
//! server_failure_limit = 2       # failures in a row that mark a server down
//! server_retry_timeout_ms = 30000
//! auto_eject_hosts = false       # true: rehash a down server's keys (twemproxy's)
//! servers = ["10.0.0.1:11211:1", "10.0.0.2:11211:1 cache-b"]
//! ```
//!
//! A server marked down fails its keys fast until a probe finds it back (the paper's and
//! mcrouter's behaviour: no key moves, so no stale copy is left behind when it returns);
//! `auto_eject_hosts = true` rehashes them over the live servers instead, as twemproxy's
//! YAML key of that name does (and means the same in both formats).
//!
//! A `servers` entry may also name members to find in DNS and follow while the router runs:
//! `dns+NAME:PORT` (every A/AAAA address) or `dnssrv+_memcache._tcp.NAME` (every SRV target,
//! keyed on its name), looked up again every `resolve_interval` (a `[router]` key, 10 s by
//! default) through the system's nameservers or `[router] nameservers`: see [`discovery`].
//!
//! Routes across pools (prefix routing, replication, gutter, broadcast, warm-up) are
//! `[routes.NAME]` tables beside the pools: see [`crate::routes`]. A `[router]` table holds
//! what is not a pool's: `spool_dir`, where deletes that could not be delivered wait, and the DNS
//! settings `resolve_interval` and `nameservers`.
//!
//!
//! | file | what it holds |
//! |------|---------------|
//! | `model.rs` | what is read: [`PoolConfig`], [`RouterConfig`], TLS and authentication settings, [`ConfigError`] |
//! | `discovery.rs` | DNS entries in `servers` ([`DnsEntry`]) and how they are followed ([`DiscoverySettings`]) |
//! | `pool_keys.rs` | what both formats share: server lines, hash names, hash tags, the pool defaults |
//! | `toml_file.rs` | memfleet's TOML ([`from_toml`]): pools, routes, the `[router]` table |
//! | `twemproxy.rs` | twemproxy's YAML ([`from_twemproxy_yaml`]) |

pub mod discovery;
mod model;
mod pool_keys;
mod toml_file;
mod twemproxy;

pub use discovery::{DiscoverySettings, DnsEntry};
pub use model::{
    ConfigError, ConfigOrigin, Fraction, ListenOptions, MaxOutstanding, PasswordSource, PoolAuth,
    PoolConfig, PoolRates, PoolTls, RouterConfig, DEFAULT_ITEM_SIZE_MAX, MAX_ITEM_SIZE_MAX,
    MIN_ITEM_SIZE_MAX,
};
pub use pool_keys::parse_server;
pub use toml_file::{check_toml, from_toml};
pub use twemproxy::{check_twemproxy_yaml, from_twemproxy_yaml};
