//! memcached's ASCII authentication (`-Y authfile`, memcached 1.5.15+), both sides of it,
//! without I/O: the `user:password` file and the check a server (or a router's listener)
//! runs, and the request a client (the router towards its servers) sends.
//!
//! A connection is refused every command (`CLIENT_ERROR unauthenticated`) until it sends
//! `set <any key> <flags> <exptime> <len>` whose data is `<user> <password>` (`STORED`, and
//! nothing is stored; a wrong pair gets `CLIENT_ERROR authentication failure` and may try
//! again). The binary protocol's SASL is not part of it.
//!
//! This only keeps strangers out of a cache on a shared network; the password travels in
//! clear text (unless TLS is on), as with memcached. See SECURITY.md.

use crate::{ErrorKind, Request, StoreCommand};

/// Replies of the authentication exchange (memcached's words): anything before the
/// authenticating `set`.
pub const UNAUTHENTICATED: &[u8] = b"CLIENT_ERROR unauthenticated\r\n";
/// A `set` whose data is not a known `user password` pair.
pub const FAILURE: &[u8] = b"CLIENT_ERROR authentication failure\r\n";
/// An authenticating `set` whose data block does not end with `\r\n` (memcached 1.6's
/// words for it on this path).
pub const BAD_TERMINATION: &[u8] = b"CLIENT_ERROR bad command line termination\r\n";
/// The reply to a successful authentication.
pub const ACCEPTED: &[u8] = b"STORED\r\n";

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

/// What a request sent before authenticating gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// A `set` with a known pair: the connection is in; reply [`ACCEPTED`].
    Accepted,
    /// A `set` with an unknown pair: reply [`FAILURE`]; the client may try again.
    Refused,
    /// Not an authentication attempt: reply [`UNAUTHENTICATED`].
    NotAnAttempt,
}

impl Attempt {
    /// memcached's reply to it.
    pub fn reply(self) -> &'static [u8] {
        match self {
            Attempt::Accepted => ACCEPTED,
            Attempt::Refused => FAILURE,
            Attempt::NotAnAttempt => UNAUTHENTICATED,
        }
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
        match request {
            Request::Store(s) if s.command == StoreCommand::Set => {
                if self.accepts(s.data) {
                    Attempt::Accepted
                } else {
                    Attempt::Refused
                }
            }
            _ => Attempt::NotAnAttempt,
        }
    }
}

/// The reply to a request the parser refused before the connection authenticated:
/// memcached refuses even malformed commands as unauthenticated, except a `set` whose data
/// block is not followed by `\r\n`, which gets its own words.
pub fn rejection_reply(kind: ErrorKind) -> &'static [u8] {
    match kind {
        ErrorKind::BadDataChunk => BAD_TERMINATION,
        _ => UNAUTHENTICATED,
    }
}

/// Why a client cannot authenticate with a user name and password.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LoginError {
    /// memcached splits the data at the first space: a user name cannot hold one.
    #[error("an authentication user name must be non-empty and without spaces")]
    BadUser,
    /// The request ends at the first `\r\n` memcached would see as the end of a line.
    #[error("an authentication password cannot contain a line break")]
    BadPassword,
}

/// The key of a client's authenticating `set`. With authentication on, the server stores
/// nothing under it; a server without authentication would store it, which is why
/// [`login_request`] gives it an exptime in the past.
pub const LOGIN_KEY: &str = "memfleet:auth";

/// The request a client sends to authenticate as `user` with `password`: `set <key> 0 -1
/// <len>\r\n<user> <password>\r\n`. The exptime of -1 (already expired) matters only to a
/// server that does not require authentication: it answers `STORED` too, but keeps nothing
/// readable, so the password never sits in its cache.
pub fn login_request(user: &[u8], password: &[u8]) -> Result<Vec<u8>, LoginError> {
    if user.is_empty() || user.iter().any(|&b| b == b' ' || b == b'\r' || b == b'\n') {
        return Err(LoginError::BadUser);
    }
    if password.iter().any(|&b| b == b'\r' || b == b'\n') {
        return Err(LoginError::BadPassword);
    }
    let len = user.len() + 1 + password.len();
    let mut out = format!("set {LOGIN_KEY} 0 -1 {len}\r\n").into_bytes();
    out.extend_from_slice(user);
    out.push(b' ');
    out.extend_from_slice(password);
    out.extend_from_slice(b"\r\n");
    Ok(out)
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
    use crate::{parse, ParserConfig};

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
        assert_eq!(
            Credentials::parse(b"no colon here\n"),
            Err(AuthFileError::NoColon(1))
        );
        assert_eq!(
            Credentials::parse(b"\n# nothing\n"),
            Err(AuthFileError::NoUsers)
        );
        assert_eq!(
            Credentials::parse(b"ok:x\na b:c\n"),
            Err(AuthFileError::BadUser(2))
        );
        assert!(!format!("{c:?}").contains("s3cret"));
    }

    #[test]
    fn a_login_request_is_a_set_the_check_accepts() {
        let c = Credentials::parse(b"alice:pass:with:colons and spaces\n").unwrap();
        let request = login_request(b"alice", b"pass:with:colons and spaces").unwrap();
        let (parsed, used) = parse(&request, &ParserConfig::default()).unwrap();
        assert_eq!(used, request.len());
        assert_eq!(c.attempt(&parsed), Attempt::Accepted);
        let wrong = login_request(b"alice", b"nope").unwrap();
        let (parsed, _) = parse(&wrong, &ParserConfig::default()).unwrap();
        assert_eq!(c.attempt(&parsed), Attempt::Refused);
        let (get, _) = parse(b"get k\r\n", &ParserConfig::default()).unwrap();
        assert_eq!(c.attempt(&get).reply(), UNAUTHENTICATED);
        assert_eq!(login_request(b"a b", b"x"), Err(LoginError::BadUser));
        assert_eq!(login_request(b"", b"x"), Err(LoginError::BadUser));
        assert_eq!(login_request(b"a", b"x\r\n"), Err(LoginError::BadPassword));
    }
}
