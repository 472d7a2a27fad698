//! memfleet's placement and configuration model: which server holds a key, and what a
//! deployment is made of. It decides; it never connects.
//!
//! Facebook keeps all distribution logic in a stateless client that runs embedded in the
//! application or as a proxy (mcrouter); memfleet does the same. This crate is the part of
//! that logic that needs no I/O: key hashes (`hash`) and the distributions that map a hash to
//! a server (`ring`), each compatible bit for bit with a library already deployed
//! (libmemcached, twemproxy, spymemcached, pymemcache), so a pool keeps its keys where they
//! are when its clients move to memfleet; and the configuration of pools and routes, read
//! from memfleet's TOML or twemproxy's YAML and checked. Running that configuration over
//! server connections is `memfleet_client`'s job (for the router and applications alike).
//!
//! | module | what it holds |
//! |--------|---------------|
//! | `hash` | twemproxy's key hashes (md5, crc16, crc32, crc32a, fnv1*, hsieh, murmur, jenkins, one_at_a_time) and murmur3 |
//! | `ring` | ketama (libmemcached and spymemcached dialects), modula, rendezvous, jump; hash tags |
//! | `config` | pools and router settings from memfleet's TOML or twemproxy's YAML, read the way twemproxy reads it |
//! | `routes` | the route tree's configuration, a file per route type (prefix, operation, replicated, gutter, broadcast, warmup, null, error, ttl, failover, all-fastest, all-initial, shadow, migrate, bigvalue), checked: names exist, no loops |
//! | `toml_table` | one TOML table read as a type, its errors naming the key |
//! | `listener_workers` | a listener's `workers`: the router workers that serve its clients, and each client's lane |
//!
//! ```
//! use memfleet_routing::{Distribution, KetamaDialect, KeyHash, Node, Ring};
//!
//! let nodes = (11211..11215).map(|port| Node::new("127.0.0.1", port)).collect();
//! let ring = Ring::new(nodes, Distribution::Ketama(KetamaDialect::Libmemcached), KeyHash::Md5)?;
//! let server = &ring.nodes()[ring.pick(b"user:42")];
//! assert_eq!(server.host, "127.0.0.1");
//! # Ok::<(), memfleet_routing::RingError>(())
//! ```

pub mod config;
pub mod hash;
mod listener_workers;
pub mod ring;
pub mod routes;
mod toml_table;

pub use config::{
    check_toml, check_twemproxy_yaml, from_toml, from_twemproxy_yaml, ConfigError, ConfigOrigin,
    DiscoverySettings, DnsEntry, Fraction, ListenOptions, MaxOutstanding, PasswordSource, PoolAuth,
    PoolConfig, PoolRates, PoolTls, RouterConfig,
};
pub use hash::KeyHash;
pub use listener_workers::ListenerWorkers;
pub use ring::{twemproxy_order, Distribution, KetamaDialect, Node, Ring, RingError};
pub use routes::{
    BigValue, Broadcast, BroadcastMode, ErrorAnswer, Failover, FailoverErrors, FailoverLimit,
    FailoverOrder, Fanout, Gutter, Migrate, Null, Operation, Prefix, Replicated, RouteConfig,
    RouteKind, Shadow, ShadowKeys, TtlRewrite, WarmUp, WritePolicy,
};
