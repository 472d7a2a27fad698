//! Framing a server's replies, for whoever sits on the client side of a connection (the
//! router, the client library, the load generator): where does the reply to a request end?
//!
//! A memcached reply has no length prefix; its end depends on the request: one line for a
//! store, a run of `VALUE` blocks closed by `END` for a get, `STAT` lines closed by `END` for
//! `stats`, a line plus a data block for a meta `VA`. [`ReplyKind::of`] says which shape a
//! request's reply has; [`frame`] finds its end in the bytes read so far. An error line
//! (`ERROR`, `CLIENT_ERROR ...`, `SERVER_ERROR ...`) ends a reply of any shape, as memcached
//! sends one instead of (or in the middle of) the normal reply.
//!
//! Quiet meta requests (`q`) and `noreply` have no reply on success; a caller that needs
//! to match replies to requests sends them without, and drops what it did not want.
//!
//! Once framed, [`decode`] says what a reply means (`decode.rs`).

use crate::request::{GetKind, Request};

mod decode;

pub use decode::{
    decode, is_hit, verdict, ErrorClass, MetaCode, MetaReply, ServerReply, ValueBlock, Verdict,
};

/// The shape of a reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyKind {
    /// One line: storage, delete, incr/decr, touch, flush_all, verbosity, version.
    Line,
    /// `VALUE` (and `LVALUE`) blocks until `END`: get, gets, gat, gats, lease-get.
    Retrieval,
    /// A meta line, with a data block when it is `VA <len> ...`: mg, ms, md, ma, mn, me.
    Meta,
    /// `STAT` (or `ITEM`) lines until `END`, or a single other line (`RESET`, `OK`, errors).
    Stats,
}

impl ReplyKind {
    /// The shape of the reply to `request`.
    pub fn of(request: &Request<'_>) -> ReplyKind {
        match request {
            Request::Get(g) => match g.kind {
                GetKind::Get | GetKind::Gets | GetKind::Gat | GetKind::Gats | GetKind::LeaseGet => {
                    ReplyKind::Retrieval
                }
            },
            Request::Stats { .. } => ReplyKind::Stats,
            Request::MetaGet(_)
            | Request::MetaSet(_)
            | Request::MetaDelete(_)
            | Request::MetaArithmetic(_)
            | Request::MetaNoop
            | Request::MetaDebug { .. } => ReplyKind::Meta,
            _ => ReplyKind::Line,
        }
    }
}

/// Where a reply ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame {
    /// The reply is the first this many bytes.
    Complete(usize),
    /// Read more.
    Incomplete,
}

/// Bytes that are not a reply of the expected shape: the connection cannot be trusted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed reply: {0}")]
pub struct Malformed(pub String);

/// The longest reply line accepted (a `VALUE` line has a 250-byte key and three numbers).
pub const MAX_REPLY_LINE: usize = 8 * 1024;

/// The next line at `at` (without its `\r\n`) and where the line after it starts.
fn line(buf: &[u8], at: usize) -> Result<Option<(&[u8], usize)>, Malformed> {
    let rest = &buf[at..];
    match memchr::memchr(b'\n', rest) {
        Some(nl) if nl > 0 && rest[nl - 1] == b'\r' => Ok(Some((&rest[..nl - 1], at + nl + 1))),
        Some(_) => Err(Malformed("a line ending in a bare \\n".into())),
        None if rest.len() > MAX_REPLY_LINE => Err(Malformed("a line too long".into())),
        None => Ok(None),
    }
}

fn data_len(token: Option<&[u8]>, max_value: usize, line: &[u8]) -> Result<usize, Malformed> {
    let text = || String::from_utf8_lossy(line).into_owned();
    let n = token
        .and_then(|t| std::str::from_utf8(t).ok())
        .and_then(|t| t.parse::<usize>().ok())
        .ok_or_else(|| Malformed(format!("no data length in {:?}", text())))?;
    if n > max_value {
        return Err(Malformed(format!("a {n}-byte value in {:?}", text())));
    }
    Ok(n)
}

/// Skips a data block of `len` bytes and its `\r\n` at `at`.
fn data(buf: &[u8], at: usize, len: usize) -> Result<Option<usize>, Malformed> {
    let end = at + len + 2;
    if buf.len() < end {
        return Ok(None);
    }
    if &buf[end - 2..end] != b"\r\n" {
        return Err(Malformed("a data block not followed by \\r\\n".into()));
    }
    Ok(Some(end))
}

/// Finds the end of the reply of shape `kind` at the start of `buf`. `max_value` bounds the
/// data blocks it accepts (a server claiming more is not trusted).
pub fn frame(buf: &[u8], kind: ReplyKind, max_value: usize) -> Result<Frame, Malformed> {
    let mut at = 0;
    loop {
        let Some((l, next)) = line(buf, at)? else {
            return Ok(Frame::Incomplete);
        };
        if decode::error_of(l).is_some() {
            return Ok(Frame::Complete(next));
        }
        match kind {
            ReplyKind::Line => return Ok(Frame::Complete(next)),
            ReplyKind::Meta => {
                if let Some(rest) = l.strip_prefix(b"VA ") {
                    let len = data_len(rest.split(|&b| b == b' ').next(), max_value, l)?;
                    return Ok(data(buf, next, len)?.map_or(Frame::Incomplete, Frame::Complete));
                }
                return Ok(Frame::Complete(next));
            }
            ReplyKind::Stats => {
                if l == b"END" {
                    return Ok(Frame::Complete(next));
                }
                if !(l.starts_with(b"STAT ") || l.starts_with(b"ITEM ")) {
                    // RESET, OK and the like: a one-line reply.
                    return Ok(Frame::Complete(next));
                }
                at = next;
            }
            ReplyKind::Retrieval => {
                if l == b"END" {
                    return Ok(Frame::Complete(next));
                }
                let mut words = l.split(|&b| b == b' ').filter(|w| !w.is_empty());
                let len_token = match words.next() {
                    Some(b"VALUE") => words.nth(2),
                    Some(b"LVALUE") => words.nth(3),
                    _ => {
                        return Err(Malformed(format!(
                            "{:?} in a get reply",
                            String::from_utf8_lossy(l)
                        )))
                    }
                };
                let len = data_len(len_token, max_value, l)?;
                match data(buf, next, len)? {
                    Some(end) => at = end,
                    None => return Ok(Frame::Incomplete),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
