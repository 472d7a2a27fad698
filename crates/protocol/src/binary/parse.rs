//! The binary request parser: memcached 1.6.18's checks, in its order (`try_read_command_binary`
//! then `dispatch_bin_command` in proto_bin.c), on a borrowed buffer.
//!
//! memcached decides about a request as soon as its header, extras and key are buffered;
//! the value is read afterwards. So errors (including "too large") never wait for the
//! value, and a command whose validation ignores the body length (stat, touch, gat) uses
//! only header, extras and key: any further "body" bytes are parsed as the next request,
//! exactly as memcached does.

use super::error::{BinError, BinErrorKind, BinRejection};
use super::request::{BinCommand, BinRequest, ConcatOp, SetOp};
use super::response::ReplyTo;
use super::{Header, Opcode, HEADER_LEN, MAX_HEAD_LEN, REQUEST_MAGIC};
use crate::{ArithOp, ParserConfig, MAX_KEY_LEN};

/// memcached's SASL opcodes: without SASL they are answered "Unknown command".
const SASL_LIST_MECHS: u8 = 0x20;
const SASL_AUTH: u8 = 0x21;
const SASL_STEP: u8 = 0x22;

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    (u64::from(u32_at(b, i)) << 32) | u64::from(u32_at(b, i + 4))
}

/// memcached passes swallow lengths as a C `int`: a length of 2^31 or more turns negative
/// and nothing is swallowed.
fn swallow(len: u32) -> usize {
    if len > i32::MAX as u32 {
        0
    } else {
        len as usize
    }
}

/// Parses the binary request at the start of `buf`.
///
/// On success, returns the request (borrowing from `buf`) and the number of bytes it
/// occupies: drop that many and call again for the next pipelined request.
/// `Err(BinError::Incomplete)` means more bytes are needed (nothing is consumed; a request
/// with a value is incomplete until the whole value is buffered). `Err(BinError::Invalid)`
/// says what memcached replies and how many bytes to skip; see [`BinErrorKind`].
///
/// The value size limit is `config`'s, as for the text protocol. Runs in constant time and
/// allocates nothing.
pub fn parse<'a>(
    buf: &'a [u8],
    config: &ParserConfig,
) -> Result<(BinRequest<'a>, usize), BinError> {
    let Some(h) = Header::read(buf) else {
        return Err(BinError::Incomplete);
    };
    let to = ReplyTo {
        opcode: h.opcode,
        opaque: h.opaque,
    };
    let reject = |kind, skip: usize| {
        Err(BinError::Invalid(BinRejection {
            kind,
            reply_to: to,
            skip,
            stale_key_len: 0,
        }))
    };
    if h.magic != REQUEST_MAGIC {
        return reject(BinErrorKind::BadMagic, HEADER_LEN);
    }
    let ext = usize::from(h.extras_len);
    let key_len = usize::from(h.key_len);
    let body = h.body_len as usize;
    let head = HEADER_LEN + ext + key_len;
    if head > MAX_HEAD_LEN {
        return reject(BinErrorKind::HeadTooLong, head);
    }
    if buf.len() < head {
        return Err(BinError::Incomplete);
    }
    if ext + key_len > body {
        return reject(BinErrorKind::BodyTooShort, head);
    }
    if key_len > MAX_KEY_LEN {
        return reject(BinErrorKind::KeyTooLong, head);
    }
    let extras = &buf[HEADER_LEN..HEADER_LEN + ext];
    let key = &buf[HEADER_LEN + ext..head];
    let Some(op) = Opcode::from_u8(h.opcode) else {
        let unknown = |skip| reject(BinErrorKind::UnknownCommand, skip);
        return match h.opcode {
            SASL_LIST_MECHS if ext == 0 && key_len == 0 && body == 0 => unknown(head),
            SASL_AUTH | SASL_STEP if ext == 0 && key_len != 0 => {
                unknown(head.saturating_add(swallow(h.body_len - u32::from(h.key_len))))
            }
            SASL_LIST_MECHS | SASL_AUTH | SASL_STEP => reject(BinErrorKind::InvalidArguments, head),
            // memcached swallows the body length counted from after the key, so the
            // extras and key are discarded twice: this over-reads into the next request,
            // as memcached does.
            _ => unknown(head.saturating_add(swallow(h.body_len))),
        };
    };
    let invalid = || reject(BinErrorKind::InvalidArguments, head);
    let quiet = op.is_quiet();
    use Opcode::*;
    let command = match op {
        Get | GetQ | GetK | GetKQ => {
            if ext != 0 || body != key_len || key_len == 0 {
                return invalid();
            }
            BinCommand::Get {
                key,
                quiet,
                with_key: matches!(op, GetK | GetKQ),
            }
        }
        Touch | Gat | GatQ | GatK | GatKQ => {
            if ext != 4 || key_len == 0 {
                return invalid();
            }
            let exptime = u32_at(extras, 0);
            match op {
                Touch => BinCommand::Touch { key, exptime },
                _ => BinCommand::GetAndTouch {
                    key,
                    exptime,
                    quiet,
                    with_key: matches!(op, GatK | GatKQ),
                },
            }
        }
        Set | SetQ | Add | AddQ | Replace | ReplaceQ => {
            if ext != 8 || key_len == 0 {
                return invalid();
            }
            let flags = u32_at(extras, 0);
            let value_len = body - ext - key_len;
            if !config.fits(key_len, flags, value_len) {
                return Err(BinError::Invalid(BinRejection {
                    kind: BinErrorKind::TooLarge,
                    reply_to: to,
                    skip: HEADER_LEN.saturating_add(body),
                    stale_key_len: if matches!(op, Set | SetQ) {
                        h.key_len
                    } else {
                        0
                    },
                }));
            }
            let Some(value) = buf.get(head..head + value_len) else {
                return Err(BinError::Incomplete);
            };
            BinCommand::Store {
                op: match op {
                    Set | SetQ => SetOp::Set,
                    Add | AddQ => SetOp::Add,
                    _ => SetOp::Replace,
                },
                key,
                flags,
                exptime: u32_at(extras, 4),
                value,
                quiet,
            }
        }
        Append | AppendQ | Prepend | PrependQ => {
            if ext != 0 || key_len == 0 {
                return invalid();
            }
            let value_len = body - key_len;
            if !config.fits(key_len, 0, value_len) {
                return reject(BinErrorKind::TooLarge, HEADER_LEN.saturating_add(body));
            }
            let Some(value) = buf.get(head..head + value_len) else {
                return Err(BinError::Incomplete);
            };
            BinCommand::Concat {
                op: match op {
                    Append | AppendQ => ConcatOp::Append,
                    _ => ConcatOp::Prepend,
                },
                key,
                value,
                quiet,
            }
        }
        Delete | DeleteQ => {
            if ext != 0 || key_len == 0 || body != key_len {
                return invalid();
            }
            BinCommand::Delete { key, quiet }
        }
        Increment | IncrementQ | Decrement | DecrementQ => {
            if ext != 20 || key_len == 0 || body != head - HEADER_LEN {
                return invalid();
            }
            BinCommand::Arith {
                op: match op {
                    Increment | IncrementQ => ArithOp::Incr,
                    _ => ArithOp::Decr,
                },
                key,
                delta: u64_at(extras, 0),
                initial: u64_at(extras, 8),
                exptime: u32_at(extras, 16),
                quiet,
            }
        }
        Flush | FlushQ => {
            if key_len != 0 || body != ext || (ext != 0 && ext != 4) {
                return invalid();
            }
            BinCommand::Flush {
                exptime: (ext == 4).then(|| u32_at(extras, 0)),
                quiet,
            }
        }
        Stat => {
            if ext != 0 {
                return invalid();
            }
            BinCommand::Stat { key }
        }
        Noop | Version | Quit | QuitQ => {
            if body != 0 {
                return invalid();
            }
            match op {
                Noop => BinCommand::Noop,
                Version => BinCommand::Version,
                _ => BinCommand::Quit { quiet },
            }
        }
    };
    let used = match command {
        BinCommand::Store { value, .. } | BinCommand::Concat { value, .. } => head + value.len(),
        _ => head,
    };
    Ok((
        BinRequest {
            command,
            opaque: h.opaque,
            cas: h.cas,
        },
        used,
    ))
}
