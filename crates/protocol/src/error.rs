//! What the parser returns for input it cannot turn into a request: either "read more bytes"
//! or a rejection that says exactly what memcached 1.6 replies, whether the reply is
//! suppressed (`noreply`), how many bytes to discard, and whether to close the connection.
//!
//! Not here: errors that depend on the cache's state (`NOT_FOUND`, `SERVER_ERROR out of
//! memory`, ...), which the server produces; see `response.rs` for their bytes.

use core::fmt;

/// Why [`crate::parse`] produced no request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParseError {
    /// The buffer holds only part of a request: read more and call `parse` again with the
    /// longer buffer (nothing was consumed). This is not an error in the input.
    Incomplete,
    /// The input is invalid; [`Rejection`] says what memcached does about it.
    Invalid(Rejection),
}

/// An invalid request, and memcached's exact reaction to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// The error, which fixes the reply bytes.
    pub kind: ErrorKind,
    /// Bytes to discard from the start of the buffer before parsing the next request. This
    /// can exceed the bytes buffered: memcached "swallows" the data block of a storage
    /// command it refused (e.g. too large), so the server must keep discarding arriving bytes
    /// until this many are gone. (memcached sends the reply to such a request only once the
    /// swallowed bytes have arrived; replying at once differs only in timing.)
    pub skip: usize,
    /// The request carried `noreply`, and memcached sends nothing for this error.
    pub noreply: bool,
}

impl Rejection {
    /// The bytes to send: empty when `noreply` suppresses the error or the connection is
    /// closed without a reply.
    pub fn reply(&self) -> &'static [u8] {
        if self.noreply {
            b""
        } else {
            self.kind.reply()
        }
    }

    /// Whether memcached closes the connection (after sending [`Rejection::reply`]).
    pub fn close(&self) -> bool {
        self.kind.closes()
    }
}

/// Every rejection memcached 1.6 makes while reading a request. The reply strings are
/// memcached's (1.6.45's where it differs from 1.6.18), byte for byte (including the two
/// spaces in the `delete` usage line and the two different "options flags" messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// Unknown command or wrong number of tokens: `ERROR`.
    UnknownCommand,
    /// `CLIENT_ERROR bad command line format`: key too long, bad number, bad length, ...
    BadCommandLineFormat,
    /// A retrieval command (`get`, `gets`, `gat`, `gats`) with a key over 250 bytes:
    /// `CLIENT_ERROR bad command line format` and an empty line. memcached 1.6.45 discards
    /// the replies it has not sent yet and re-sends this error line through `out_string`,
    /// which ends it a second time. (memfleet keeps the replies to earlier requests.)
    GetKeyTooLong,
    /// The same under `noreply` (`get` and `gets` only): the error line is suppressed but
    /// memcached 1.6.45 still sends the empty line.
    GetKeyTooLongNoreply,
    /// The data block was not followed by `\r\n`: `CLIENT_ERROR bad data chunk`.
    BadDataChunk,
    /// The value cannot fit in an item: `SERVER_ERROR object too large for cache`.
    TooLarge,
    /// `CLIENT_ERROR invalid exptime argument` (touch, gat, flush_all).
    InvalidExptime,
    /// `CLIENT_ERROR invalid numeric delta argument` (incr, decr).
    InvalidDelta,
    /// `delete <key> <non-zero>`: memcached 1.6 no longer supports a hold time.
    DeleteUsage,
    /// Meta: a numeric flag token (`T`, `N`, `R`, `C`) did not parse.
    BadToken,
    /// Meta: a flag letter repeated, or a flag byte >= 127.
    DuplicateFlag,
    /// Meta: unknown flag letter.
    InvalidFlag,
    /// `md`/`ma`: any flag error (memcached does not say which).
    InvalidOrDuplicateFlag,
    /// `mg`: more than 17 flags.
    MgOptionsTooLong,
    /// `ms`/`md`/`ma`: too many flags (note: no "are", unlike `mg`).
    OptionsTooLong,
    /// Meta: `O` token longer than 32 bytes (the `O` included).
    OpaqueTooLong,
    /// Meta: the `b` flag's key is not valid base64.
    KeyDecode,
    /// Meta: `M` token not exactly one character.
    ModeLength,
    /// `ms`: `M` is not one of `E A P R S`.
    InvalidSetMode,
    /// `ma`: `M` is not one of `I + D -`.
    InvalidArithMode,
    /// Meta: `J` token not a number (only reported by `mg`/`ms`).
    InvalidInitial,
    /// Meta: `D` token not a number (only reported by `mg`/`ms`).
    InvalidDeltaFlag,
    /// More than 2048 bytes without a newline (and not a `get`/`gets`): memcached closes the
    /// connection without replying.
    LineTooLong,
    /// A line whose last token starts with `HTTP/` (a stray HTTP request): memcached closes
    /// the connection without replying.
    Http,
}

impl ErrorKind {
    /// The exact reply line, `\r\n` included; empty for the kinds that close silently.
    pub fn reply(self) -> &'static [u8] {
        match self {
            ErrorKind::UnknownCommand => b"ERROR\r\n",
            ErrorKind::BadCommandLineFormat => b"CLIENT_ERROR bad command line format\r\n",
            ErrorKind::GetKeyTooLong => b"CLIENT_ERROR bad command line format\r\n\r\n",
            ErrorKind::GetKeyTooLongNoreply => b"\r\n",
            ErrorKind::BadDataChunk => b"CLIENT_ERROR bad data chunk\r\n",
            ErrorKind::TooLarge => b"SERVER_ERROR object too large for cache\r\n",
            ErrorKind::InvalidExptime => b"CLIENT_ERROR invalid exptime argument\r\n",
            ErrorKind::InvalidDelta => b"CLIENT_ERROR invalid numeric delta argument\r\n",
            ErrorKind::DeleteUsage => {
                b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n"
            }
            ErrorKind::BadToken => b"CLIENT_ERROR bad token in command line format\r\n",
            ErrorKind::DuplicateFlag => b"CLIENT_ERROR duplicate flag\r\n",
            ErrorKind::InvalidFlag => b"CLIENT_ERROR invalid flag\r\n",
            ErrorKind::InvalidOrDuplicateFlag => b"CLIENT_ERROR invalid or duplicate flag\r\n",
            ErrorKind::MgOptionsTooLong => b"CLIENT_ERROR options flags are too long\r\n",
            ErrorKind::OptionsTooLong => b"CLIENT_ERROR options flags too long\r\n",
            ErrorKind::OpaqueTooLong => b"CLIENT_ERROR opaque token too long\r\n",
            ErrorKind::KeyDecode => b"CLIENT_ERROR error decoding key\r\n",
            ErrorKind::ModeLength => b"CLIENT_ERROR incorrect length for M token\r\n",
            ErrorKind::InvalidSetMode => b"CLIENT_ERROR invalid mode for ms M token\r\n",
            ErrorKind::InvalidArithMode => b"CLIENT_ERROR invalid mode for ma M token\r\n",
            ErrorKind::InvalidInitial => b"CLIENT_ERROR invalid numeric initial value\r\n",
            ErrorKind::InvalidDeltaFlag => b"CLIENT_ERROR invalid numeric delta value\r\n",
            ErrorKind::LineTooLong | ErrorKind::Http => b"",
        }
    }

    /// Whether memcached closes the connection on this error.
    pub fn closes(self) -> bool {
        matches!(self, ErrorKind::LineTooLong | ErrorKind::Http)
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorKind::LineTooLong => f.write_str("command line too long (connection closed)"),
            ErrorKind::Http => f.write_str("HTTP request (connection closed)"),
            ErrorKind::GetKeyTooLongNoreply => f.write_str("key too long (noreply)"),
            k => f.write_str(String::from_utf8_lossy(k.reply()).trim_end()),
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Incomplete => f.write_str("incomplete request"),
            ParseError::Invalid(r) => write!(f, "{}", r.kind),
        }
    }
}

impl std::error::Error for ParseError {}

/// Shorthand for the parsers: a rejection as a `ParseError`.
pub(crate) fn reject(kind: ErrorKind, skip: usize, noreply: bool) -> ParseError {
    ParseError::Invalid(Rejection {
        kind,
        skip,
        noreply,
    })
}
