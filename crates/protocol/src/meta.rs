//! Meta commands (`mg`, `ms`, `md`, `ma`, `mn`, `me`): the checks memcached 1.6's
//! `process_m*_command` functions make, in their order, with their (slightly different per
//! command) error messages.
//!
//! Not here: the flag grammar itself (`flags.rs`) or building responses (`response.rs`).
//! Meta errors are never suppressed by `q`. memcached notices an over-long `O` token only
//! while writing the response (for `ma`, after performing the arithmetic); this parser
//! rejects it up front, which gives the same reply without the side effect.

use crate::error::{reject, ErrorKind, ParseError};
use crate::flags::MetaFlags;
use crate::line::{data_block, not_found, value_len};
use crate::number::safe_strtol;
use crate::request::{ArithOp, Meta, MetaArith, MetaKey, MetaSet, Request, StoreCommand};
use crate::tokens::{after_tokens, Line, Tokenized};
use crate::{ParserConfig, MAX_KEY_LEN};

type Parsed<'a> = Result<(Request<'a>, usize), ParseError>;

/// memcached's `MFLAG_MAX_OPAQUE_LENGTH`, which counts the `O` itself.
pub const MAX_OPAQUE_TOKEN: usize = 32;

/// Parses a two-byte command starting with `m`.
pub(crate) fn parse_meta<'a>(
    buf: &'a [u8],
    line: &Line<'a>,
    t: &Tokenized<'a>,
    cfg: &ParserConfig,
) -> Parsed<'a> {
    let consumed = line.consumed;
    let fail = |kind| Err(reject(kind, consumed, false));
    let which = t.get(0)[1];
    match which {
        b'n' => return Ok((Request::MetaNoop, consumed)),
        b'e' => return debug(line, t),
        b'g' | b's' | b'd' | b'a' => {}
        _ => return not_found(line, t),
    }
    if t.n < 2 {
        // memcached 1.6.45 (1.6.18 said `ERROR`).
        return fail(ErrorKind::BadCommandLineFormat);
    }
    let raw_key = t.get(1);
    if which == b's' {
        return set(buf, line, t, cfg);
    }
    if raw_key.len() > MAX_KEY_LEN {
        return fail(ErrorKind::BadCommandLineFormat);
    }
    let flags = match MetaFlags::parse(after_tokens(line.text, 2), raw_key) {
        Ok(f) => f,
        // ma does not pass on the preparse's message (md does since 1.6.45).
        Err(_) if which == b'a' => return fail(ErrorKind::InvalidOrDuplicateFlag),
        Err(kind) => return fail(kind),
    };
    let key = MetaKey::new(raw_key, flags.base64_key());
    let req = match which {
        b'g' => Request::MetaGet(Meta { key, flags }),
        b'd' => Request::MetaDelete(Meta { key, flags }),
        _ => {
            let mode = match flags.mode() {
                None | Some(b'I' | b'+') => ArithOp::Incr,
                Some(b'D' | b'-') => ArithOp::Decr,
                Some(_) => return fail(ErrorKind::InvalidArithMode),
            };
            Request::MetaArithmetic(MetaArith { key, flags, mode })
        }
    };
    if opaque_too_long(&flags) {
        return fail(ErrorKind::OpaqueTooLong);
    }
    Ok((req, consumed))
}

fn opaque_too_long(flags: &MetaFlags<'_>) -> bool {
    flags
        .opaque()
        .is_some_and(|o| 1 + o.len() > MAX_OPAQUE_TOKEN)
}

/// `ms <key> <datalen> <flags>*`. Errors found before the data length is known leave the
/// data block to be parsed as a command (memcached answers it `ERROR`); later ones swallow it.
fn set<'a>(buf: &'a [u8], line: &Line<'a>, t: &Tokenized<'a>, cfg: &ParserConfig) -> Parsed<'a> {
    let consumed = line.consumed;
    let raw_key = t.get(1);
    if t.n == 2 {
        return Err(reject(ErrorKind::BadCommandLineFormat, consumed, false));
    }
    let Some(len) = safe_strtol(t.get(2)).and_then(value_len) else {
        return Err(reject(ErrorKind::BadCommandLineFormat, consumed, false));
    };
    let swallow = |kind| Err(reject(kind, consumed + len + 2, false));
    if raw_key.len() > MAX_KEY_LEN {
        return swallow(ErrorKind::BadCommandLineFormat);
    }
    let flags = match MetaFlags::parse(after_tokens(line.text, 3), raw_key) {
        Ok(f) => f,
        Err(kind) => return swallow(kind),
    };
    let mode = match flags.mode() {
        None | Some(b'S') => StoreCommand::Set,
        Some(b'E') => StoreCommand::Add,
        Some(b'A') => StoreCommand::Append,
        Some(b'P') => StoreCommand::Prepend,
        Some(b'R') => StoreCommand::Replace,
        Some(_) => return swallow(ErrorKind::InvalidSetMode),
    };
    if opaque_too_long(&flags) {
        return swallow(ErrorKind::OpaqueTooLong);
    }
    let key = MetaKey::new(raw_key, flags.base64_key());
    let key_len = key.bytes().len();
    if !cfg.fits(key_len, flags.client_flags().unwrap_or(0), len) {
        return swallow(ErrorKind::TooLarge);
    }
    let (data, total) = data_block(buf, consumed, len, false)?;
    Ok((
        Request::MetaSet(MetaSet {
            key,
            flags,
            mode,
            data,
        }),
        total,
    ))
}

/// `me <key> [b]`: every error is a format error, and only an exact `b` second token makes
/// the key base64.
fn debug<'a>(line: &Line<'a>, t: &Tokenized<'a>) -> Parsed<'a> {
    let consumed = line.consumed;
    let bad = || Err(reject(ErrorKind::BadCommandLineFormat, consumed, false));
    let raw = t.get(1);
    if t.n < 2 || raw.len() > MAX_KEY_LEN {
        return bad();
    }
    let base64 = t.n >= 3 && t.get(2) == b"b";
    Ok((
        Request::MetaDebug {
            key: MetaKey::new(raw, base64),
        },
        consumed,
    ))
}
