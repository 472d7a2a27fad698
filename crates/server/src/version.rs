//! The version the server reports (`version`, `stats`, the binary protocol's version
//! packet): a leaf, so the commands and the statistics both read it.

/// The version string: the memcached release memfleet follows (1.6.45, the reference its
/// replies are checked against), then ours. Clients that parse the version as numbers
/// (libmemcached, spymemcached, meta-memcache) see 1.6.45, which enables the commands they
/// gate on it (touch, gat, meta).
pub const VERSION: &[u8] = concat!("1.6.45-memfleet-", env!("CARGO_PKG_VERSION")).as_bytes();
