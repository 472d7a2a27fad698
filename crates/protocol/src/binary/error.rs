//! What the binary parser (`binary::parse`) returns for input it cannot turn into a request: "read more", or
//! a rejection carrying memcached 1.6.18's exact reaction (error packet or silent close,
//! bytes to discard).
//!
//! Not here: errors that depend on the cache (`KeyNotFound`, `KeyExists`, `NotStored`,
//! `NonNumeric`, `OutOfMemory`), which the server sends with [`super::response::error`].

use super::response::{self, ReplyTo, Status};
use super::HEADER_LEN;
use core::fmt;

/// Why the binary parser produced no request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinError {
    /// The buffer holds only part of a request: read more and call `parse` again with the
    /// longer buffer (nothing was consumed).
    Incomplete,
    /// The input is invalid; [`BinRejection`] says what memcached does about it.
    Invalid(BinRejection),
}

/// An invalid request and memcached's reaction to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BinRejection {
    /// The error, which fixes the reply and whether the connection closes.
    pub kind: BinErrorKind,
    /// The offending request's opcode and opaque, which the error packet echoes.
    pub reply_to: ReplyTo,
    /// Bytes to discard from the start of the buffer before parsing the next request. Can
    /// exceed the bytes buffered (a refused value is swallowed as it arrives). memcached
    /// sends the error only once the swallowed bytes have arrived; replying at once differs
    /// only in timing. Meaningless when the connection closes.
    pub skip: usize,
    /// Key length of a too-large `Set`/`SetQ`, whose key follows the 8 bytes of extras
    /// (0: none).
    pub(crate) stale_key_len: u16,
}

/// Where a set request's key starts: after the header and the 8 bytes of flags and exptime.
const SET_KEY_OFFSET: usize = HEADER_LEN + 8;

impl BinRejection {
    /// Appends memcached's error packet (nothing for the kinds that close silently).
    pub fn reply(&self, out: &mut Vec<u8>) {
        if let Some(status) = self.kind.status() {
            response::error(out, self.reply_to, status);
        }
    }

    /// Whether memcached closes the connection (after sending [`BinRejection::reply`]).
    pub fn close(&self) -> bool {
        self.kind.closes()
    }

    /// For a `Set`/`SetQ` refused as too large: its key, whose current value memcached
    /// deletes ("avoid stale data persisting in cache because we failed alloc"). `buf` must
    /// be the buffer given to `parse`, not yet drained.
    pub fn stale_key<'b>(&self, buf: &'b [u8]) -> Option<&'b [u8]> {
        if self.stale_key_len == 0 {
            return None;
        }
        buf.get(SET_KEY_OFFSET..SET_KEY_OFFSET + usize::from(self.stale_key_len))
    }
}

/// Every rejection memcached 1.6.18 makes while reading a binary request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinErrorKind {
    /// The first byte is not `0x80`: close without a reply.
    BadMagic,
    /// Header, extras and key exceed [`super::MAX_HEAD_LEN`]: memcached's read buffer
    /// fills before the request is readable, and it closes without a reply.
    HeadTooLong,
    /// Key and extras are longer than the body: "Unknown command", then close.
    BodyTooShort,
    /// A key over 250 bytes: "Invalid arguments", then close.
    KeyTooLong,
    /// Lengths that do not fit the opcode (a get with extras, a noop with a body, a set
    /// without its 8 bytes of extras, ...): "Invalid arguments", then close.
    InvalidArguments,
    /// An opcode memcached does not execute (or SASL, not enabled): "Unknown command", its
    /// body swallowed, the connection stays open.
    UnknownCommand,
    /// The value cannot fit in an item ([`crate::ParserConfig`]): "Too large.", the value
    /// swallowed, the connection stays open.
    TooLarge,
    /// A SASL mechanism name over 32 bytes, or SASL data over
    /// `sasl::MAX_SASL_DATA` (with SASL on): "Invalid arguments", the body
    /// swallowed, the connection stays open.
    SaslTooLong,
}

impl BinErrorKind {
    /// The status of the error packet; `None` when memcached closes without one.
    pub fn status(self) -> Option<Status> {
        match self {
            BinErrorKind::BadMagic | BinErrorKind::HeadTooLong => None,
            BinErrorKind::BodyTooShort | BinErrorKind::UnknownCommand => {
                Some(Status::UnknownCommand)
            }
            BinErrorKind::KeyTooLong
            | BinErrorKind::InvalidArguments
            | BinErrorKind::SaslTooLong => Some(Status::InvalidArguments),
            BinErrorKind::TooLarge => Some(Status::TooLarge),
        }
    }

    /// Whether memcached closes the connection.
    pub fn closes(self) -> bool {
        !matches!(
            self,
            BinErrorKind::UnknownCommand | BinErrorKind::TooLarge | BinErrorKind::SaslTooLong
        )
    }
}

impl fmt::Display for BinErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self {
            BinErrorKind::BadMagic => "bad magic byte",
            BinErrorKind::HeadTooLong => "header, extras and key over 16384 bytes",
            BinErrorKind::BodyTooShort => "body shorter than extras and key",
            BinErrorKind::KeyTooLong => "key over 250 bytes",
            BinErrorKind::InvalidArguments => "lengths invalid for the opcode",
            BinErrorKind::UnknownCommand => "unknown opcode",
            BinErrorKind::TooLarge => "value too large",
            BinErrorKind::SaslTooLong => "SASL mechanism or data too long",
        };
        f.write_str(what)?;
        if self.closes() {
            f.write_str(" (connection closed)")?;
        }
        Ok(())
    }
}

impl fmt::Display for BinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BinError::Incomplete => f.write_str("incomplete binary request"),
            BinError::Invalid(r) => write!(f, "opcode {:#04x}: {}", r.reply_to.opcode, r.kind),
        }
    }
}

impl std::error::Error for BinError {}
