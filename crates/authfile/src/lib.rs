//! memcached's auth file (`-Y authfile`, memcached 1.5.15+): `user:password` lines, parsed
//! into [`Credentials`], and the check of a `<user> <password>` pair against them, in time
//! that does not tell how much matched. No I/O: the server and the router read the file
//! (and the router reloads it) themselves.
//!
//! Not here: the exchange on a connection (which requests count as attempts, memcached's
//! replies, the client's login request); that is memcached's protocol,
//! `memfleet_protocol::auth`. The file is an operator's configuration, not wire format, so
//! it lives apart from the protocol crate; the server and the router both read it, and
//! neither tool crate may depend on the other.

use memfleet_protocol::auth::{self, Attempt};
use memfleet_protocol::Request;

/// Why an auth file is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthFileError {
    /// A line without a colon.
    #[error("line {0}: expected user:password")]
    NoColon(usize),
    /// A user name memcached could not match (empty, or containing a space).
    #[error("line {0}: a user name must be non-empty and without spaces")]
    BadUser(usize),
    /// Nothing but comments and empty lines.
    #[error("no users: every client would be refused")]
    NoUsers,
}

/// The users allowed in.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    users: Vec<(Vec<u8>, Vec<u8>)>,
}

/// Passwords stay out of logs and `--print-config`.
impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("users", &self.users.len())
            .finish_non_exhaustive()
    }
}

impl Credentials {
    /// Parses `user:password` lines (empty lines and `#` comments skipped; the password is
    /// everything after the first colon, colons included).
    pub fn parse(text: &[u8]) -> Result<Credentials, AuthFileError> {
        let mut users = Vec::new();
        for (i, line) in text.split(|&b| b == b'\n').enumerate() {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() || line.starts_with(b"#") {
                continue;
            }
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                return Err(AuthFileError::NoColon(i + 1));
            };
            let (user, password) = (&line[..colon], &line[colon + 1..]);
            if user.is_empty() || user.contains(&b' ') {
                return Err(AuthFileError::BadUser(i + 1));
            }
            users.push((user.to_vec(), password.to_vec()));
        }
        if users.is_empty() {
            return Err(AuthFileError::NoUsers);
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

    /// Judges `request`, sent before the connection authenticated (`quit` is the caller's:
    /// memcached honours it).
    pub fn attempt(&self, request: &Request<'_>) -> Attempt {
        auth::attempt(request, |data| self.accepts(data))
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
mod tests;
