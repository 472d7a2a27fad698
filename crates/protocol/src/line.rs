//! What the text and meta parsers share below the command dispatch: the reply to a line
//! naming no known command, and a storage command's data block and its length check.
//!
//! Not here: dispatching a command word (`text.rs`, `meta.rs`), tokenizing (`tokens.rs`).

use crate::error::{reject, ErrorKind, ParseError};
use crate::request::Request;
use crate::tokens::{Line, Tokenized};

type Parsed<'a> = Result<(Request<'a>, usize), ParseError>;

/// A line naming no command memcached knows: `ERROR`, or, when it has more than one token
/// and the last starts with `HTTP/` (a stray HTTP request), a silent close.
pub(crate) fn not_found<'a>(line: &Line<'a>, t: &Tokenized<'a>) -> Parsed<'a> {
    let kind = if t.n > 1 && t.last().starts_with(b"HTTP/") {
        ErrorKind::Http
    } else {
        ErrorKind::UnknownCommand
    };
    Err(reject(kind, line.consumed, false))
}

/// The data block of a storage command: `len` bytes and `\r\n` after the command line.
/// memcached reads exactly `len + 2` bytes whatever they are; if the last two are not
/// `\r\n` it replies `CLIENT_ERROR bad data chunk` (suppressed by a classic `noreply`, never
/// for `ms`) and goes on parsing right after them, so a longer block usually yields a second
/// error (`ERROR`) for its tail.
pub(crate) fn data_block(
    buf: &[u8],
    line_end: usize,
    len: usize,
    noreply: bool,
) -> Result<(&[u8], usize), ParseError> {
    let total = line_end + len + 2;
    if buf.len() < total {
        return Err(ParseError::Incomplete);
    }
    if &buf[total - 2..total] != b"\r\n" {
        return Err(reject(ErrorKind::BadDataChunk, total, noreply));
    }
    Ok((&buf[line_end..line_end + len], total))
}

/// memcached's value-length check: a negative length, or one too close to `INT_MAX` to add
/// the `\r\n`, is a format error (and, unlike "too large", nothing is swallowed).
pub(crate) fn value_len(v: i32) -> Option<usize> {
    if !(0..=i32::MAX - 2).contains(&v) {
        return None;
    }
    usize::try_from(v).ok()
}
