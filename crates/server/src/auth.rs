//! memcached's ASCII authentication (`-Y authfile`) for the server: reading the auth file.
//! The file's format and the check are `memfleet_authfile`'s, memcached's replies
//! `memfleet_protocol::auth`'s, both shared with the router's listeners; `connection::process` gates every request on it
//! until a `set` authenticates. Binary clients authenticate with SASL instead (`sasl.rs`,
//! `-S`); with ASCII authentication on, binary connections are closed.

use anyhow::Context;
pub use memfleet_authfile::Credentials;
use std::path::Path;

/// Reads an auth file (`user:password` lines).
pub fn load(path: &Path) -> anyhow::Result<Credentials> {
    let text = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Credentials::parse(&text).with_context(|| format!("in {}", path.display()))
}
