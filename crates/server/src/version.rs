//! The version the server reports (`version`, `stats`, the binary protocol's version
//! packet): a leaf, so the commands and the statistics both read it.

/// The version string: memcached's protocol level, then ours. Clients that parse the
/// version as numbers (libmemcached, spymemcached) see 1.6.18, which enables the commands
/// they gate on it (touch, gat, meta).
pub const VERSION: &[u8] = concat!("1.6.18-memfleet-", env!("CARGO_PKG_VERSION")).as_bytes();
