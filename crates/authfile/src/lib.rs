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
        Credentials::parse_with(text, |password| password)
    }

    /// Parses memcached's SASL password database (`MEMCACHED_SASL_PWDB`, memcached built
    /// with `--enable-sasl-pwdb`): `user:password` lines, where, as in memcached's
    /// `sasl_server_userdb_checkpass`, the password ends at the next colon (what follows is
    /// ignored).
    pub fn parse_sasl_pwdb(text: &[u8]) -> Result<Credentials, AuthFileError> {
        Credentials::parse_with(text, |password| {
            let end = password.iter().position(|&b| b == b':');
            &password[..end.unwrap_or(password.len())]
        })
    }

    fn parse_with(
        text: &[u8],
        password_of: impl Fn(&[u8]) -> &[u8],
    ) -> Result<Credentials, AuthFileError> {
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
            users.push((user.to_vec(), password_of(password).to_vec()));
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
        self.accepts_pair(&data[..space], &data[space + 1..])
    }

    /// Whether `user` with `password` is a known user (binary SASL PLAIN), in time that does
    /// not tell how much matched.
    pub fn accepts_pair(&self, user: &[u8], password: &[u8]) -> bool {
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
