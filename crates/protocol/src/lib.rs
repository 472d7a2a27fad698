//! memcached's text and meta protocols, parsed and encoded the way memcached 1.6 does it,
//! without I/O and without allocating per request.
//!
//! This crate is shared by the server and the router. It is not a connection handler: it
//! never reads or writes a socket, keeps no state between requests, and does not execute
//! anything. The binary protocol lives in [`binary`], with the same shape.
//!
//! - [`parse`] takes the bytes buffered so far and returns one [`Request`] borrowing from
//!   them, plus how many bytes it used; [`ParseError::Incomplete`] means "read more";
//!   [`ParseError::Invalid`] carries a [`Rejection`] with memcached's exact reply, whether
//!   `noreply` silences it, how many bytes to discard (a refused data block is swallowed) and
//!   whether memcached would close the connection.
//! - [`Request::answerer`], [`Request::class`], [`Request::keys`] and [`Request::noreply`]
//!   say what each command is, once (`command.rs`): who answers it (the key's server, the
//!   receiver, every server), its [`RequestClass`] and its keys. The server, the router and
//!   the client library read requests through them.
//! - [`reply`] finds where a server's reply ends, for the router and clients.
//! - [`auth`] is memcached's ASCII authentication (`-Y`): which requests are attempts,
//!   memcached's replies, and the request a client sends. The auth file's format is
//!   `memfleet-authfile`'s and the admin port's HTTP `memfleet-http`'s: neither is
//!   memcached's protocol.
//! - [`udp`] is memcached's UDP frame header: parse, cut a reply into datagrams, rebuild it.
//! - [`response`] appends replies (`VALUE`, `STORED`, meta `VA`/`HD`/`EN`, `STAT`, ...) to a
//!   `Vec<u8>`; [`Request::encode`] writes a request back out (for the router and clients).
//!
//! Every error string and edge case was checked against memcached 1.6.18 (Debian's build)
//! and, where the two differ, follows 1.6.45; the tests name the exact bytes. The deliberate difference: this parser validates a whole
//! request before anything runs, where memcached sometimes notices a problem halfway (a bad
//! key in the middle of a multi-get, an over-long opaque after an `ma` applied its delta).
//! The reply is the same; only those half-done side effects are absent.
//!
//! ```
//! use memfleet_protocol::{parse, response, ParserConfig, Request};
//!
//! let cfg = ParserConfig::default();
//! let buf = b"set greeting 0 0 5\r\nhello\r\nget greeting\r\n";
//! let (req, used) = parse(buf, &cfg).unwrap();
//! let Request::Store(store) = req else { panic!() };
//! assert_eq!((store.key, store.data, used), (&b"greeting"[..], &b"hello"[..], 27));
//!
//! let mut out = Vec::new();
//! response::value(&mut out, b"greeting", 0, b"hello", None);
//! response::end(&mut out);
//! assert_eq!(out, b"VALUE greeting 0 5\r\nhello\r\nEND\r\n");
//! ```

pub mod auth;
pub mod base64;
pub mod binary;
mod command;
mod encode;
mod error;
mod flags;
mod line;
mod meta;
pub mod number;
pub mod reply;
mod request;
pub mod response;
mod text;
mod tokens;
pub mod udp;

pub use command::{Answerer, Keys, RequestClass};
pub use error::{ErrorKind, ParseError, Rejection};
pub use flags::{MetaFlag, MetaFlagIter, MetaFlags};
pub use meta::MAX_OPAQUE_TOKEN;
pub use request::{
    ArithOp, Get, GetKind, KeyBytes, Meta, MetaArith, MetaKey, MetaSet, Request, Store,
    StoreCommand,
};
pub use tokens::{Tokens, MAX_PARTIAL_LINE};

/// memcached's `KEY_MAX_LENGTH`: longer keys are `CLIENT_ERROR bad command line format`.
pub const MAX_KEY_LEN: usize = 250;

/// What the parser needs to know about the cache behind it: how big an item may be, so that
/// a too-large value is refused (and its data block swallowed) as soon as the command line
/// arrives, the way memcached does it.
///
/// memcached refuses a value when `overhead + key + value + (flags != 0 ? flags_overhead :
/// 0) > max_item_size`; the defaults are memcached 1.6's with `-I 1m` and CAS enabled (48
/// bytes of item header, the key's NUL, 8 bytes of CAS, the value's `\r\n`: 59; non-zero
/// client flags take 4 more), which makes 1048516 the largest value for a 1-byte key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParserConfig {
    /// Largest item, in bytes, counting the overheads below.
    pub max_item_size: usize,
    /// Per-item bytes besides the key and value.
    pub item_overhead: usize,
    /// Extra bytes when the client flags are non-zero.
    pub flags_overhead: usize,
}

impl Default for ParserConfig {
    fn default() -> Self {
        ParserConfig {
            max_item_size: 1 << 20,
            item_overhead: 59,
            flags_overhead: 4,
        }
    }
}

impl ParserConfig {
    /// A configuration with the given item size limit and memcached's overheads.
    pub fn with_max_item_size(max_item_size: usize) -> Self {
        ParserConfig {
            max_item_size,
            ..ParserConfig::default()
        }
    }

    /// Whether an item with this key length, client flags and value length fits.
    pub fn fits(&self, key_len: usize, flags: u32, value_len: usize) -> bool {
        let flags_bytes = if flags != 0 { self.flags_overhead } else { 0 };
        self.item_overhead
            .saturating_add(key_len)
            .saturating_add(value_len)
            .saturating_add(flags_bytes)
            <= self.max_item_size
    }
}

/// Parses the request at the start of `buf`.
///
/// On success, returns the request (borrowing from `buf`) and the number of bytes it
/// occupies, data block included: drop that many bytes and call again for the next
/// pipelined request. `Err(ParseError::Incomplete)` means more bytes are needed (a storage
/// command is incomplete until its whole data block is buffered). `Err(ParseError::Invalid)`
/// tells what memcached would reply and how many bytes to skip.
///
/// Runs in time linear in the command line (plus a scan for `\n`), and allocates nothing.
pub fn parse<'a>(buf: &'a [u8], config: &ParserConfig) -> Result<(Request<'a>, usize), ParseError> {
    match tokens::frame(buf) {
        tokens::Framing::Incomplete => Err(ParseError::Incomplete),
        tokens::Framing::TooLong => Err(error::reject(ErrorKind::LineTooLong, buf.len(), false)),
        tokens::Framing::Line(line) => text::parse_line(buf, &line, config),
    }
}
