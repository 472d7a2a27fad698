//! Decoding a server's reply into what it says: values, a status, a meta reply or an
//! error. The one decoder the router, the client library and the load generator share, so
//! none of them reads reply bytes by hand.
//!
//! [`decode`] takes one whole reply (as [`frame`](super::frame) delimits it) and the shape
//! the request expects ([`ReplyKind`]); it borrows from the bytes and allocates only the
//! list of values of a multi-key get. [`verdict`] and [`is_hit`] answer the two questions
//! a router asks of a reply it only forwards (how bad is it? is it a hit?) from its first
//! bytes, without decoding the rest.

use super::{Malformed, ReplyKind};
use crate::response::Status;

/// One `VALUE` (or mcrouter's `LVALUE`) block of a retrieval reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValueBlock<'a> {
    /// The key, as the server wrote it.
    pub key: &'a [u8],
    /// The client flags.
    pub flags: u32,
    /// The CAS unique (`gets`, `gats`).
    pub cas: Option<u64>,
    /// The lease token of an `LVALUE` (a lease-get miss, with the stale value if any).
    pub lease: Option<u64>,
    /// The data block, without its `\r\n`.
    pub data: &'a [u8],
}

/// The status code of a meta reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaCode {
    /// `HD`: success without a value.
    Hd,
    /// `VA`: a value follows.
    Va,
    /// `EN`: miss.
    En,
    /// `NF`: not found.
    Nf,
    /// `NS`: not stored.
    Ns,
    /// `EX`: CAS mismatch (or exists).
    Ex,
    /// `MN`: the meta no-op.
    Mn,
    /// `ME`: a meta debug line.
    Me,
}

/// A meta reply: its code, return flags and value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetaReply<'a> {
    /// The status code.
    pub code: MetaCode,
    /// The rest of the line after the code (and a `VA`'s length): the return flags.
    pub flags: &'a [u8],
    /// The value of a `VA`.
    pub data: Option<&'a [u8]>,
}

impl<'a> MetaReply<'a> {
    /// The return flags as `(letter, token)`: `t30` is `(b't', b"30")`, `W` is `(b'W', b"")`.
    pub fn flag_tokens(&self) -> impl Iterator<Item = (u8, &'a [u8])> {
        self.flags
            .split(|&b| b == b' ')
            .filter(|w| !w.is_empty())
            .map(|w| (w[0], &w[1..]))
    }

    /// The token of flag `letter`, if the reply has it.
    pub fn flag(&self, letter: u8) -> Option<&'a [u8]> {
        self.flag_tokens()
            .find(|(l, _)| *l == letter)
            .map(|(_, t)| t)
    }

    /// The token of flag `letter` as a number (`None` if absent or not a number).
    pub fn flag_number<T: std::str::FromStr>(&self, letter: u8) -> Option<T> {
        std::str::from_utf8(self.flag(letter)?).ok()?.parse().ok()
    }
}

/// Which error line a server sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    /// `ERROR`: an unknown command (or memcached's generic failure).
    Error,
    /// `CLIENT_ERROR <message>`: the request was wrong.
    Client,
    /// `SERVER_ERROR <message>`: the server could not do it.
    Server,
}

/// A decoded reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerReply<'a> {
    /// A retrieval: the values found (none: every key missed).
    Values(Vec<ValueBlock<'a>>),
    /// A meta reply.
    Meta(MetaReply<'a>),
    /// A fixed status line (`STORED`, `NOT_FOUND`, `DELETED`, `OK`, ...).
    Status(Status),
    /// The new value of an `incr`/`decr`.
    Number(u64),
    /// `VERSION <version>`.
    Version(&'a [u8]),
    /// `STAT`/`ITEM` lines up to and including `END`, as sent.
    Stats(&'a [u8]),
    /// An error line, with its message (empty for `ERROR`).
    Error(ErrorClass, &'a [u8]),
}

/// How a reply turned out, worst last: what a router answers when it must choose one of
/// several replies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    /// Done (or a miss, which is an answer too).
    Success,
    /// Refused on the item's account: not found, not stored, exists.
    Refused,
    /// An error line: the request was not carried out.
    Failed,
}

/// An error message without the space that separates it from the error's name.
fn message(rest: &[u8]) -> &[u8] {
    rest.strip_prefix(b" ").unwrap_or(rest)
}

pub(super) fn error_of(line: &[u8]) -> Option<(ErrorClass, &[u8])> {
    if line == b"ERROR" {
        Some((ErrorClass::Error, b""))
    } else if let Some(rest) = line.strip_prefix(b"ERROR ") {
        Some((ErrorClass::Error, rest))
    } else if let Some(rest) = line.strip_prefix(b"CLIENT_ERROR") {
        Some((ErrorClass::Client, message(rest)))
    } else if let Some(rest) = line.strip_prefix(b"SERVER_ERROR") {
        Some((ErrorClass::Server, message(rest)))
    } else {
        None
    }
}

/// What a reply amounts to, from its first line alone.
pub fn verdict(reply: &[u8]) -> Verdict {
    let line = reply.split(|&b| b == b'\r').next().unwrap_or(reply);
    if error_of(line).is_some() {
        return Verdict::Failed;
    }
    let code = line.split(|&b| b == b' ').next().unwrap_or(line);
    match code {
        b"NOT_FOUND" | b"NOT_STORED" | b"EXISTS" | b"NF" | b"NS" | b"EX" => Verdict::Refused,
        _ => Verdict::Success,
    }
}

/// Whether a reply is a hit: a `VALUE` block or a meta `VA` (an `LVALUE`, a lease-get's
/// miss, is not).
pub fn is_hit(reply: &[u8]) -> bool {
    reply.starts_with(b"VALUE ") || reply.starts_with(b"VA ")
}

/// Splits off the first line (without `\r\n`) and the rest: [`super::line`]'s rules on a
/// whole reply, where a missing end of line is an error rather than a wait.
fn split_line(buf: &[u8]) -> Result<(&[u8], &[u8]), Malformed> {
    match super::line(buf, 0)? {
        Some((line, next)) => Ok((line, &buf[next..])),
        None => Err(Malformed("no end of line".into())),
    }
}

/// Splits a data block of `len` bytes and its `\r\n` off `buf` ([`super::data`]'s rules).
fn split_data(buf: &[u8], len: usize) -> Result<(&[u8], &[u8]), Malformed> {
    match super::data(buf, 0, len)? {
        Some(end) => Ok((&buf[..len], &buf[end..])),
        None => Err(Malformed(format!("a {len}-byte data block cut short"))),
    }
}

fn number<T: std::str::FromStr>(token: Option<&[u8]>, line: &[u8]) -> Result<T, Malformed> {
    token
        .and_then(|t| std::str::from_utf8(t).ok())
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| {
            Malformed(format!(
                "a bad number in {:?}",
                String::from_utf8_lossy(line)
            ))
        })
}

fn status_of(line: &[u8]) -> Option<Status> {
    Some(match line {
        b"STORED" => Status::Stored,
        b"NOT_STORED" => Status::NotStored,
        b"EXISTS" => Status::Exists,
        b"NOT_FOUND" => Status::NotFound,
        b"DELETED" => Status::Deleted,
        b"TOUCHED" => Status::Touched,
        b"OK" => Status::Ok,
        b"END" => Status::End,
        b"RESET" => Status::Reset,
        _ => return None,
    })
}

fn meta_code(code: &[u8]) -> Option<MetaCode> {
    Some(match code {
        b"HD" => MetaCode::Hd,
        b"VA" => MetaCode::Va,
        b"EN" => MetaCode::En,
        b"NF" => MetaCode::Nf,
        b"NS" => MetaCode::Ns,
        b"EX" => MetaCode::Ex,
        b"MN" => MetaCode::Mn,
        b"ME" => MetaCode::Me,
        _ => return None,
    })
}

/// Decodes one whole reply of shape `kind` (trailing bytes after it are an error: frame
/// first). An error line decodes as [`ServerReply::Error`] whatever the shape.
pub fn decode(reply: &[u8], kind: ReplyKind) -> Result<ServerReply<'_>, Malformed> {
    let (first, mut rest) = split_line(reply)?;
    if let Some((class, message)) = error_of(first) {
        return Ok(ServerReply::Error(class, message));
    }
    let decoded = match kind {
        ReplyKind::Retrieval => {
            let mut values = Vec::new();
            let mut line = first;
            loop {
                if line == b"END" {
                    break;
                }
                if let Some((class, message)) = error_of(line) {
                    // memcached ends a get with an error line when it fails half-way.
                    return Ok(ServerReply::Error(class, message));
                }
                let mut words = line.split(|&b| b == b' ').filter(|w| !w.is_empty());
                let lease = match words.next() {
                    Some(b"VALUE") => false,
                    Some(b"LVALUE") => true,
                    _ => {
                        return Err(Malformed(format!(
                            "{:?} in a get reply",
                            String::from_utf8_lossy(line)
                        )))
                    }
                };
                let key = words
                    .next()
                    .ok_or_else(|| Malformed("a value line without a key".into()))?;
                let lease = if lease {
                    Some(number(words.next(), line)?)
                } else {
                    None
                };
                let flags = number(words.next(), line)?;
                let len: usize = number(words.next(), line)?;
                let cas = words.next().map(|t| number(Some(t), line)).transpose()?;
                let (data, after) = split_data(rest, len)?;
                values.push(ValueBlock {
                    key,
                    flags,
                    cas,
                    lease,
                    data,
                });
                (line, rest) = split_line(after)?;
            }
            ServerReply::Values(values)
        }
        ReplyKind::Meta => {
            let (code, flags) = match first.iter().position(|&b| b == b' ') {
                Some(sp) => (&first[..sp], &first[sp + 1..]),
                None => (first, &b""[..]),
            };
            let code = meta_code(code).ok_or_else(|| {
                Malformed(format!(
                    "{:?} is not a meta reply",
                    String::from_utf8_lossy(first)
                ))
            })?;
            let (flags, data) = if code == MetaCode::Va {
                let (len, flags) = match flags.iter().position(|&b| b == b' ') {
                    Some(sp) => (&flags[..sp], &flags[sp + 1..]),
                    None => (flags, &b""[..]),
                };
                let (data, after) = split_data(rest, number(Some(len), first)?)?;
                rest = after;
                (flags, Some(data))
            } else {
                (flags, None)
            };
            ServerReply::Meta(MetaReply { code, flags, data })
        }
        ReplyKind::Stats => {
            if first.starts_with(b"STAT ") || first.starts_with(b"ITEM ") || first == b"END" {
                let mut line = first;
                while line != b"END" {
                    (line, rest) = split_line(rest)?;
                }
                ServerReply::Stats(&reply[..reply.len() - rest.len()])
            } else {
                status_of(first).map(ServerReply::Status).ok_or_else(|| {
                    Malformed(format!(
                        "{:?} in a stats reply",
                        String::from_utf8_lossy(first)
                    ))
                })?
            }
        }
        ReplyKind::Line => {
            if let Some(status) = status_of(first) {
                ServerReply::Status(status)
            } else if let Some(version) = first.strip_prefix(b"VERSION ") {
                ServerReply::Version(version)
            } else if !first.is_empty() && first.iter().all(u8::is_ascii_digit) {
                ServerReply::Number(number(Some(first), first)?)
            } else {
                return Err(Malformed(format!(
                    "{:?} is not a reply line",
                    String::from_utf8_lossy(first)
                )));
            }
        }
    };
    if !rest.is_empty() {
        return Err(Malformed(format!("{} bytes after the reply", rest.len())));
    }
    Ok(decoded)
}

#[cfg(test)]
mod tests;
