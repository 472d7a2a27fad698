//! memcached's ASCII authentication (`-Y authfile`, memcached 1.5.15+): a file of
//! `user:password` lines; a connection is refused every command (`CLIENT_ERROR
//! unauthenticated`) until it sends `set <any key> <flags> <exptime> <len>` whose data is
//! `<user> <password>` (`STORED`, and nothing is stored; a wrong pair gets `CLIENT_ERROR
//! authentication failure` and may try again). The binary protocol's SASL is not offered:
//! with authentication on, binary connections are closed.
//!
//! This only keeps strangers out of a cache on a shared network; the password travels in
//! clear text, as with memcached. See SECURITY.md.

use anyhow::{bail, Context};
use std::path::Path;

/// The users allowed in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credentials {
    users: Vec<(Vec<u8>, Vec<u8>)>,
}

/// Replies of the authentication exchange (memcached's words).
pub const UNAUTHENTICATED: &[u8] = b"CLIENT_ERROR unauthenticated\r\n";
/// A `set` whose data is not a known `user password` pair.
pub const FAILURE: &[u8] = b"CLIENT_ERROR authentication failure\r\n";
/// An authenticating `set` whose data block does not end with `\r\n` (memcached 1.6's
/// words for it on this path).
pub const BAD_TERMINATION: &[u8] = b"CLIENT_ERROR bad command line termination\r\n";

impl Credentials {
    /// Reads an auth file.
    pub fn load(path: &Path) -> anyhow::Result<Credentials> {
        let text = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        Credentials::parse(&text).with_context(|| format!("in {}", path.display()))
    }

    /// Parses `user:password` lines (empty lines and `#` comments skipped).
    pub fn parse(text: &[u8]) -> anyhow::Result<Credentials> {
        let mut users = Vec::new();
        for (i, line) in text.split(|&b| b == b'\n').enumerate() {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() || line.starts_with(b"#") {
                continue;
            }
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                bail!("line {}: expected user:password", i + 1);
            };
            let (user, password) = (&line[..colon], &line[colon + 1..]);
            if user.is_empty() || user.contains(&b' ') {
                bail!(
                    "line {}: a user name must be non-empty and without spaces",
                    i + 1
                );
            }
            users.push((user.to_vec(), password.to_vec()));
        }
        if users.is_empty() {
            bail!("no users: every client would be refused");
        }
        Ok(Credentials { users })
    }

    /// Whether `data` (a `set`'s value) is `<user> <password>` of a known user. Every
    /// entry is compared in full, so the time taken does not tell how much matched.
    pub fn accepts(&self, data: &[u8]) -> bool {
        let Some(space) = data.iter().position(|&b| b == b' ') else {
            return false;
        };
        let (user, password) = (&data[..space], &data[space + 1..]);
        let mut ok = false;
        for (u, p) in &self.users {
            ok |= same(u, user) & same(p, password);
        }
        ok
    }
}

/// Equal bytes, in time that depends only on the lengths.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_files_parse_and_only_exact_pairs_pass() {
        let c = Credentials::parse(b"# users\nalice:s3cret\r\n\nbob:pass:with:colons\n").unwrap();
        assert!(c.accepts(b"alice s3cret"));
        assert!(c.accepts(b"bob pass:with:colons"));
        for bad in [
            &b"alice s3cre"[..],
            b"alice s3cret ",
            b"alices3cret",
            b"carol s3cret",
            b"",
        ] {
            assert!(!c.accepts(bad), "{:?}", String::from_utf8_lossy(bad));
        }
        assert!(Credentials::parse(b"no colon here\n").is_err());
        assert!(Credentials::parse(b"\n# nothing\n").is_err());
        assert!(Credentials::parse(b"a b:c\n").is_err());
    }
}
