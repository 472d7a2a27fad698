//! memfleet's routing core: which server holds a key.
//!
//! Facebook keeps all distribution logic in a stateless client that runs embedded in the
//! application or as a proxy (mcrouter); memfleet does the same, and this crate is the part
//! the router and the client library share. It is I/O-free: key hashes (`hash`) and the
//! distributions that map a hash to a server (`ring`), each compatible bit for bit with a
//! library already deployed (libmemcached, twemproxy, spymemcached, pymemcache), so a pool
//! keeps its keys where they are when its clients move to memfleet.
//!
//! | module | what it holds |
//! |--------|---------------|
//! | `hash` | twemproxy's key hashes (md5, crc16, crc32, crc32a, fnv1*, hsieh, murmur, jenkins, one_at_a_time) and murmur3 |
//! | `ring` | ketama (libmemcached and spymemcached dialects), modula, rendezvous, jump; hash tags |
//! | `config` | pools from memfleet's TOML or twemproxy's YAML, read the way twemproxy reads it |
//! | `routes` | routes over pools: prefix, operation, replicated, gutter, broadcast, warm-up |
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
pub mod ring;
pub mod routes;

pub use config::{
    from_toml, from_twemproxy_yaml, ConfigError, PasswordSource, PoolAuth, PoolConfig, PoolTls,
    RouterConfig,
};
pub use hash::KeyHash;
pub use ring::{twemproxy_order, Distribution, KetamaDialect, Node, Ring, RingError};
pub use routes::{BroadcastMode, RouteConfig, RouteKind, WritePolicy};
