//! What a [`Client`](super::Client) command answers: values, lease outcomes, UDP get
//! outcomes, `cas` outcomes and errors.

use crate::BackendError;

/// The client-flags bit that marks a value this client compressed (lz4). Clear in the flags
/// an application sees and sets.
pub const FLAG_COMPRESSED: u32 = 1 << 30;

/// What went wrong with a request.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No reply: the server is down, timed out or the connection failed.
    #[error(transparent)]
    Unreachable(#[from] BackendError),
    /// The server answered with an error line (`SERVER_ERROR ...`, `CLIENT_ERROR ...`).
    #[error("the server said: {0}")]
    Server(String),
    /// A reply that does not parse.
    #[error("unexpected reply: {0:?}")]
    Protocol(String),
    /// A key memcached cannot take (empty, over 250 bytes, spaces or control characters).
    #[error("invalid key")]
    InvalidKey,
    /// A compressed value that does not decompress.
    #[error("corrupt compressed value: {0}")]
    Corrupt(String),
    /// serde could not encode or decode a typed value.
    #[error("serialization: {0}")]
    Serde(#[from] serde_json::Error),
}

/// A value as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Value {
    /// The bytes (decompressed).
    pub data: Vec<u8>,
    /// Client flags (without [`FLAG_COMPRESSED`]).
    pub flags: u32,
    /// The CAS unique, when asked for (`gets`).
    pub cas: Option<u64>,
}

/// What `lease-get` answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lease {
    /// The value.
    Hit(Value),
    /// A miss, and this caller holds the key's lease: fill with [`Client::lease_set`](super::Client::lease_set) and
    /// this token. `stale` is the recently deleted value, if the server kept one.
    Token {
        /// The lease token.
        token: u64,
        /// The stale value, if any.
        stale: Option<Value>,
    },
    /// A miss while another caller holds the lease: wait and ask again (or use `stale`).
    HotMiss {
        /// The stale value, if any.
        stale: Option<Value>,
    },
}

/// What a get over UDP found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UdpGet {
    /// The value.
    Hit(Value),
    /// Not in the cache.
    Miss,
    /// A datagram was dropped or reordered: a miss that must not be filled.
    Lost,
}

/// How `cas` went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CasOutcome {
    /// Stored.
    Stored,
    /// Someone changed the value since it was read.
    Exists,
    /// The key is gone.
    NotFound,
}
