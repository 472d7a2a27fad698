//! memcached's ASCII authentication (`-Y authfile`, memcached 1.5.15+), both sides of it,
//! without I/O: the exchange a server (or a router's listener) runs, judging requests with
//! the auth file's check (the file itself is `memfleet-authfile`'s), and the request a
//! client (the router towards its servers) sends.
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

/// Judges `request`, sent before the connection authenticated, given whether a `set`'s data
/// names a known `<user> <password>` pair (`accepts`, the auth file's check; `quit` is the
/// caller's: memcached honours it).
pub fn attempt(request: &Request<'_>, accepts: impl FnOnce(&[u8]) -> bool) -> Attempt {
    match request {
        Request::Store(s) if s.command == StoreCommand::Set => {
            if accepts(s.data) {
                Attempt::Accepted
            } else {
                Attempt::Refused
            }
        }
        _ => Attempt::NotAnAttempt,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{parse, ParserConfig};

    #[test]
    fn a_login_request_is_a_set_the_check_accepts() {
        let accepts = |data: &[u8]| data == b"alice pass:with:colons and spaces";
        let request = login_request(b"alice", b"pass:with:colons and spaces").unwrap();
        let (parsed, used) = parse(&request, &ParserConfig::default()).unwrap();
        assert_eq!(used, request.len());
        assert_eq!(attempt(&parsed, accepts), Attempt::Accepted);
        let wrong = login_request(b"alice", b"nope").unwrap();
        let (parsed, _) = parse(&wrong, &ParserConfig::default()).unwrap();
        assert_eq!(attempt(&parsed, accepts), Attempt::Refused);
        let (get, _) = parse(b"get k\r\n", &ParserConfig::default()).unwrap();
        assert_eq!(attempt(&get, accepts).reply(), UNAUTHENTICATED);
        assert_eq!(login_request(b"a b", b"x"), Err(LoginError::BadUser));
        assert_eq!(login_request(b"", b"x"), Err(LoginError::BadUser));
        assert_eq!(login_request(b"a", b"x\r\n"), Err(LoginError::BadPassword));
    }
}
