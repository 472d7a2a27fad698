//! memcached's binary SASL (`-S`) for the server: the password database
//! (`MEMCACHED_SASL_PWDB`, memcached's `--enable-sasl-pwdb` format) and one connection's
//! exchange. The wire rules are `memfleet_protocol::binary::sasl`'s; `connection.rs` runs
//! [`SaslDb::serve`] before every binary request of a connection with SASL on, and closes
//! text connections (memcached serves only the binary protocol with `-S`).
//!
//! memcached opens the database at every attempt, so a user added to the file can log in at
//! once; here the file is read again when its modification time or size changed since the
//! last attempt (one `stat` per attempt), and an unreadable or empty file refuses everyone
//! until it is fixed (logged once per change), as memcached's failed `fopen` does.

use crate::file_stamp::{stamp, FileStamp};
use anyhow::Context;
use memfleet_authfile::Credentials;
use memfleet_protocol::binary::sasl::{self, SaslRequest};
use memfleet_protocol::binary::ReplyTo;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The password database and what was last read of it.
pub struct SaslDb {
    path: PathBuf,
    loaded: Mutex<Loaded>,
}

struct Loaded {
    /// Modification time and size when read.
    stamp: FileStamp,
    credentials: Option<Credentials>,
}

/// What an exchange did, for the connection and its counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Mechanisms listed.
    Listed,
    /// Authenticated.
    Accepted,
    /// Refused (an auth error was counted).
    Refused,
}

fn read(path: &Path) -> anyhow::Result<Credentials> {
    let text = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Credentials::parse_sasl_pwdb(&text).with_context(|| format!("in {}", path.display()))
}

impl SaslDb {
    /// Reads the database at `path`; an error (missing, unreadable, no users) stops the
    /// start, as it would refuse every client.
    pub fn load(path: &Path) -> anyhow::Result<SaslDb> {
        let stamp = stamp(path);
        let credentials = read(path)?;
        Ok(SaslDb {
            path: path.to_path_buf(),
            loaded: Mutex::new(Loaded {
                stamp,
                credentials: Some(credentials),
            }),
        })
    }

    /// Whether `user` with `password` may log in, reading the file again if it changed.
    fn accepts(&self, user: &[u8], password: &[u8]) -> bool {
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        let now = stamp(&self.path);
        if now != loaded.stamp {
            loaded.stamp = now;
            loaded.credentials = match read(&self.path) {
                Ok(c) => Some(c),
                Err(e) => {
                    tracing::warn!("SASL password database: {e:#}; refusing every login");
                    None
                }
            };
        }
        loaded
            .credentials
            .as_ref()
            .is_some_and(|c| c.accepts_pair(user, password))
    }

    /// Answers one SASL request into `out`.
    pub fn serve(&self, request: &SaslRequest<'_>, to: ReplyTo, out: &mut Vec<u8>) -> Outcome {
        let accepted = match *request {
            SaslRequest::ListMechs => {
                sasl::mechanisms(out, to);
                return Outcome::Listed;
            }
            SaslRequest::Auth { mech, data } if mech == b"PLAIN" => sasl::plain_credentials(data)
                .is_some_and(|(user, password)| self.accepts(user, password)),
            // An unknown mechanism, or a step (PLAIN has one step only).
            SaslRequest::Auth { .. } | SaslRequest::Step { .. } => false,
        };
        if accepted {
            sasl::authenticated(out, to);
            Outcome::Accepted
        } else {
            sasl::auth_failure(out, to);
            Outcome::Refused
        }
    }
}
