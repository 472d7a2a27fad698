//! The classic text protocol: command dispatch and argument checks in the order memcached
//! 1.6's `process_command_ascii` and its `process_*_command` helpers make them, so that each
//! malformed line gets memcached's reply (and its `noreply` suppression) byte for byte.
//!
//! Not here: framing and tokenizing (`tokens.rs`), meta commands (`meta.rs`), executing
//! anything. Where memcached would have partly executed a bad request before noticing (a
//! multi-get with a too-long key after some hits), this parser rejects the whole request up
//! front: the reply is the same, only the side effects (LRU bumps, touches) differ.

use crate::error::{reject, ErrorKind, ParseError};
use crate::line::{data_block, not_found, value_len};
use crate::number::{safe_strtol, safe_strtoul, safe_strtoull};
use crate::request::{ArithOp, Get, GetKind, Request, Store, StoreCommand};
use crate::tokens::{after_tokens, Line, Tokenized, Tokens};
use crate::{ParserConfig, MAX_KEY_LEN};

type Parsed<'a> = Result<(Request<'a>, usize), ParseError>;

/// Parses the request whose command line is `line` (at the start of `buf`).
///
/// memcached 1.6.45's `process_request` names the command by the bytes before the line's
/// first space. A line starting with a space, or with a one-byte command, names none: only
/// the administrative commands, which memcached looks up by their first token instead
/// (`flush_all`, `verbosity`, ...), still run; anything else is unknown.
pub(crate) fn parse_line<'a>(buf: &'a [u8], line: &Line<'a>, cfg: &ParserConfig) -> Parsed<'a> {
    // The common case first: a `get` or `gets` with at least one key needs no token array
    // (what the general path below concludes for such a line, without splitting it).
    if let Some(parsed) = plain_get(line) {
        return parsed;
    }
    parse_tokenized(buf, line, cfg)
}

/// [`parse_line`] for any line, by its tokens.
fn parse_tokenized<'a>(buf: &'a [u8], line: &Line<'a>, cfg: &ParserConfig) -> Parsed<'a> {
    let t = Tokenized::new(line.text);
    let consumed = line.consumed;
    // memcached 1.6.45: a line under four bytes, its `\n` included, is a format error (so
    // `mn\n` is one, `mn\r\n` is not).
    if consumed < 4 {
        return Err(reject(ErrorKind::BadCommandLineFormat, consumed, false));
    }
    let cmd = t.get(0);
    // Not a command `process_request` names: maybe one memcached finds by its first token.
    let unknown = || admin(line, &t).unwrap_or_else(|| not_found(line, &t));
    if line.text.first() == Some(&b' ') || cmd.len() < 2 {
        return unknown();
    }
    let n = t.n;
    let ok = |r: Request<'a>| Ok((r, consumed));
    let other = || {
        ok(Request::Other {
            command: cmd,
            args: Tokens::new(after_tokens(line.text, 1)),
        })
    };
    match cmd[0] {
        b'm' if cmd.len() == 2 => crate::meta::parse_meta(buf, line, &t, cfg),
        b'g' => {
            // memcached 1.6.45: a retrieval command without a key is a format error.
            let min = if matches!(cmd, b"gat" | b"gats") {
                3
            } else {
                2
            };
            let kind = match cmd {
                b"get" => GetKind::Get,
                b"gets" => GetKind::Gets,
                b"gat" => GetKind::Gat,
                b"gats" => GetKind::Gats,
                _ => return unknown(),
            };
            if n < min {
                return Err(reject(ErrorKind::BadCommandLineFormat, consumed, false));
            }
            get(line, &t, kind)
        }
        b's' => match cmd {
            b"set" => store(buf, consumed, &t, StoreCommand::Set, cfg),
            b"stats" => ok(Request::Stats {
                args: Tokens::new(after_tokens(line.text, 1)),
            }),
            _ => unknown(),
        },
        b'a' => match cmd {
            b"add" => store(buf, consumed, &t, StoreCommand::Add, cfg),
            b"append" => store(buf, consumed, &t, StoreCommand::Append, cfg),
            _ => unknown(),
        },
        b'c' => match cmd {
            b"cas" => store(buf, consumed, &t, StoreCommand::Cas, cfg),
            _ => unknown(),
        },
        b'i' if cmd == b"incr" => arith(consumed, &t, ArithOp::Incr),
        b'd' => match cmd {
            b"delete" => delete(consumed, &t),
            b"decr" => arith(consumed, &t, ArithOp::Decr),
            _ => unknown(),
        },
        b't' if cmd == b"touch" => touch(consumed, &t),
        b'i' | b't' => unknown(),
        _ => match cmd {
            b"replace" => store(buf, consumed, &t, StoreCommand::Replace, cfg),
            b"prepend" => store(buf, consumed, &t, StoreCommand::Prepend, cfg),
            b"version" => ok(Request::Version),
            b"quit" => ok(Request::Quit),
            b"watch" => other(),
            b"lease-get" if n >= 2 => get(line, &t, GetKind::LeaseGet),
            b"lease-set" => store(buf, consumed, &t, StoreCommand::LeaseSet, cfg),
            // `bget` is gone from memcached 1.6.45 (1.6.18 took it for `get`).
            _ => unknown(),
        },
    }
}

/// The administrative commands memcached 1.6.45 finds by their first token once
/// `process_request` has named no command (its `text_cmd_entries`), with the token-count
/// checks it makes before running them; `None` for any other word.
fn admin<'a>(line: &Line<'a>, t: &Tokenized<'a>) -> Option<Parsed<'a>> {
    let consumed = line.consumed;
    let cmd = t.get(0);
    let other = Ok((
        Request::Other {
            command: cmd,
            args: Tokens::new(after_tokens(line.text, 1)),
        },
        consumed,
    ));
    let error = Err(reject(ErrorKind::UnknownCommand, consumed, false));
    Some(match cmd {
        // `debugtime` is in memcached's debug build only; a server answers `ERROR` unless it
        // offers it (memfleet: `--debug-time`).
        b"shutdown" | b"slabs" | b"lru_crawler" | b"refresh_certs" | b"debugtime" => other,
        // Not memcached's (it answers `ERROR`): AWS ElastiCache's auto discovery, `config get
        // cluster`, answered by a router pool with `auto_discovery` (and `memfleet server
        // --cluster-config`); anything else answers it `ERROR` as memcached does.
        b"config" => other,
        b"cache_memlimit" if t.n == 2 || t.n == 3 => other,
        b"lru" | b"extstore" if t.n >= 2 => other,
        b"cache_memlimit" | b"lru" | b"extstore" => error,
        b"flush_all" => flush_all(consumed, t),
        b"verbosity" => verbosity(consumed, t),
        _ => return None,
    })
}

fn key_too_long(key: &[u8]) -> bool {
    key.len() > MAX_KEY_LEN
}

/// `get <keys>` and `gets <keys>`, recognised by their first four or five bytes; `None`
/// for any other line, and for one without a key (the general path answers it).
#[inline]
fn plain_get<'a>(line: &Line<'a>) -> Option<Parsed<'a>> {
    let (kind, command_len) = match line.text {
        [b'g', b'e', b't', b' ', ..] => (GetKind::Get, 3),
        [b'g', b'e', b't', b's', b' ', ..] => (GetKind::Gets, 4),
        _ => return None,
    };
    // What `after_tokens(line.text, 1)` returns for such a line.
    let keys = Tokens::new(&line.text[command_len..]);
    if keys.is_empty() {
        return None;
    }
    Some(get_keys(line, keys, kind, 0, || {
        Tokenized::new(line.text).noreply()
    }))
}

fn get<'a>(line: &Line<'a>, t: &Tokenized<'a>, kind: GetKind) -> Parsed<'a> {
    let mut exptime = 0;
    let mut skip = 1;
    if kind.touches() {
        exptime = match safe_strtol(t.get(1)) {
            Some(v) => i64::from(v),
            None => return Err(reject(ErrorKind::InvalidExptime, line.consumed, false)),
        };
        skip = 2;
    }
    let keys = Tokens::new(after_tokens(line.text, skip));
    get_keys(line, keys, kind, exptime, || t.noreply())
}

/// A retrieval of `keys`, each checked against the key length limit (`noreply` says whether
/// the line ends in `noreply`, asked only when a key is too long).
#[inline]
fn get_keys<'a>(
    line: &Line<'a>,
    keys: Tokens<'a>,
    kind: GetKind,
    exptime: i64,
    noreply: impl Fn() -> bool,
) -> Parsed<'a> {
    let consumed = line.consumed;
    if keys.into_iter().any(key_too_long) {
        // memcached 1.6.45 ends this error with a second `\r\n`, and under `noreply`
        // (which it reads for `get` and `gets` only) sends just that (see `ErrorKind`).
        let kind = match kind {
            GetKind::LeaseGet => ErrorKind::BadCommandLineFormat,
            GetKind::Get | GetKind::Gets if noreply() => ErrorKind::GetKeyTooLongNoreply,
            _ => ErrorKind::GetKeyTooLong,
        };
        return Err(reject(kind, consumed, false));
    }
    Ok((
        Request::Get(Get {
            kind,
            exptime,
            keys,
        }),
        consumed,
    ))
}

/// A storage command's length as memcached 1.6.45 reads it: decimal digits with an optional
/// `-`, nothing else (no `+`, no whitespace), within `i32`.
fn strict_i32(token: &[u8]) -> Option<i32> {
    let digits = token.strip_prefix(b"-").unwrap_or(token);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(token).ok()?.parse().ok()
}

fn store<'a>(
    buf: &'a [u8],
    consumed: usize,
    t: &Tokenized<'a>,
    command: StoreCommand,
    cfg: &ParserConfig,
) -> Parsed<'a> {
    if command == StoreCommand::LeaseSet {
        return lease_set(buf, consumed, t, cfg);
    }
    // memcached 1.6.45: at least `<cmd> <key> <flags> <exptime> <bytes>`, more tokens are
    // ignored (`noreply` is whatever comes last). Until the length is known nothing can be
    // swallowed; after it every error swallows the data block, honouring noreply.
    let early = || Err(reject(ErrorKind::BadCommandLineFormat, consumed, false));
    if t.n < 5 {
        return early();
    }
    let Some(len) = strict_i32(t.get(4)).and_then(value_len) else {
        return early();
    };
    let noreply = t.noreply();
    let swallow = |kind| Err(reject(kind, consumed + len + 2, noreply));
    let key = t.get(1);
    if key_too_long(key) {
        return swallow(ErrorKind::BadCommandLineFormat);
    }
    let (Some(flags), Some(exptime)) = (safe_strtoul(t.get(2)), safe_strtol(t.get(3))) else {
        return swallow(ErrorKind::BadCommandLineFormat);
    };
    let mut cas = 0;
    if command == StoreCommand::Cas {
        match safe_strtoull(t.get(5)) {
            Some(v) => cas = v,
            None => return swallow(ErrorKind::BadCommandLineFormat),
        }
    }
    let store = Store {
        command,
        cas,
        ..store_line(key, flags, exptime, noreply)
    };
    with_data(buf, (consumed, len), store, cfg)
}

/// A storage command line's fields (a `set` with no CAS and no data yet; the parser sets
/// what differs).
fn store_line(key: &[u8], flags: u32, exptime: i32, noreply: bool) -> Store<'_> {
    Store {
        command: StoreCommand::Set,
        key,
        flags,
        exptime: i64::from(exptime),
        cas: 0,
        noreply,
        data: &[],
    }
}

/// The end both storage parsers share once the command line checks out: an item over the
/// size limit is refused (its data block swallowed), else the data block (`len` bytes
/// after the `consumed` of the line) is read into `store`.
fn with_data<'a>(
    buf: &'a [u8],
    (consumed, len): (usize, usize),
    store: Store<'a>,
    cfg: &ParserConfig,
) -> Parsed<'a> {
    if !cfg.fits(store.key.len(), store.flags, len) {
        return Err(reject(
            ErrorKind::TooLarge,
            consumed + len + 2,
            store.noreply,
        ));
    }
    let (data, total) = data_block(buf, consumed, len, store.noreply)?;
    Ok((Request::Store(Store { data, ..store }), total))
}

/// mcrouter's `lease-set <key> <token> <flags> <exptime> <bytes> [noreply]`.
fn lease_set<'a>(
    buf: &'a [u8],
    consumed: usize,
    t: &Tokenized<'a>,
    cfg: &ParserConfig,
) -> Parsed<'a> {
    if t.n != 6 && t.n != 7 {
        return Err(reject(ErrorKind::UnknownCommand, consumed, false));
    }
    let noreply = t.noreply();
    let bad = || Err(reject(ErrorKind::BadCommandLineFormat, consumed, noreply));
    let key = t.get(1);
    if key_too_long(key) {
        return bad();
    }
    let (Some(cas), Some(flags), Some(exptime), Some(len)) = (
        safe_strtoull(t.get(2)),
        safe_strtoul(t.get(3)),
        safe_strtol(t.get(4)),
        safe_strtol(t.get(5)),
    ) else {
        return bad();
    };
    let Some(len) = value_len(len) else {
        return bad();
    };
    let store = Store {
        command: StoreCommand::LeaseSet,
        cas,
        ..store_line(key, flags, exptime, noreply)
    };
    with_data(buf, (consumed, len), store, cfg)
}

fn delete<'a>(consumed: usize, t: &Tokenized<'a>) -> Parsed<'a> {
    token_count(consumed, t, 2, usize::MAX)?;
    // memcached 1.6.45 ignores every token after the key but a final `noreply`; memfleet
    // reads a number right after the key as a hold-off in seconds (see `Request::Delete`).
    let noreply = t.noreply();
    let holdoff = if t.n > 2 && !(t.n == 3 && noreply) {
        safe_strtoul(t.get(2)).unwrap_or(0)
    } else {
        0
    };
    let key = t.get(1);
    if key_too_long(key) {
        return Err(reject(ErrorKind::BadCommandLineFormat, consumed, noreply));
    }
    Ok((
        Request::Delete {
            key,
            holdoff,
            noreply,
        },
        consumed,
    ))
}

/// memcached 1.6.45's token-count check: too few tokens is a format error, too many an
/// unknown command (neither honours `noreply`).
fn token_count(
    consumed: usize,
    t: &Tokenized<'_>,
    min: usize,
    max: usize,
) -> Result<(), ParseError> {
    if t.n < min {
        return Err(reject(ErrorKind::BadCommandLineFormat, consumed, false));
    }
    if t.n > max {
        return Err(reject(ErrorKind::UnknownCommand, consumed, false));
    }
    Ok(())
}

/// The checks memcached 1.6.45 makes on `<cmd> <key> <number> [noreply]` (`incr`, `decr`,
/// `touch`) before reading the number: the token count, then the key's length (a format
/// error that honours `noreply`). Gives the key and whether the line ends in `noreply`.
fn key_and_number<'a>(consumed: usize, t: &Tokenized<'a>) -> Result<(&'a [u8], bool), ParseError> {
    token_count(consumed, t, 3, 4)?;
    let noreply = t.noreply();
    let key = t.get(1);
    if key_too_long(key) {
        return Err(reject(ErrorKind::BadCommandLineFormat, consumed, noreply));
    }
    Ok((key, noreply))
}

fn arith<'a>(consumed: usize, t: &Tokenized<'a>, op: ArithOp) -> Parsed<'a> {
    let (key, noreply) = key_and_number(consumed, t)?;
    let Some(delta) = safe_strtoull(t.get(2)) else {
        return Err(reject(ErrorKind::InvalidDelta, consumed, noreply));
    };
    Ok((
        Request::Arith {
            op,
            key,
            delta,
            noreply,
        },
        consumed,
    ))
}

fn touch<'a>(consumed: usize, t: &Tokenized<'a>) -> Parsed<'a> {
    let (key, noreply) = key_and_number(consumed, t)?;
    let Some(exptime) = safe_strtol(t.get(2)) else {
        return Err(reject(ErrorKind::InvalidExptime, consumed, noreply));
    };
    Ok((
        Request::Touch {
            key,
            exptime: i64::from(exptime),
            noreply,
        },
        consumed,
    ))
}

fn flush_all<'a>(consumed: usize, t: &Tokenized<'a>) -> Parsed<'a> {
    let noreply = t.noreply();
    let mut delay = 0;
    // memcached parses the first argument unless the line is exactly `flush_all [noreply]`
    // (so `flush_all 10 20` is a 10-second delay and the 20 is ignored).
    if t.n != if noreply { 2 } else { 1 } {
        match safe_strtol(t.get(1)) {
            Some(v) => delay = i64::from(v),
            None => return Err(reject(ErrorKind::InvalidExptime, consumed, noreply)),
        }
    }
    Ok((Request::FlushAll { delay, noreply }, consumed))
}

fn verbosity<'a>(consumed: usize, t: &Tokenized<'a>) -> Parsed<'a> {
    token_count(consumed, t, 2, 3)?;
    let noreply = t.noreply();
    let Some(level) = safe_strtoul(t.get(1)) else {
        return Err(reject(ErrorKind::BadCommandLineFormat, consumed, noreply));
    };
    Ok((Request::Verbosity { level, noreply }, consumed))
}

#[cfg(test)]
mod plain_get_tests {
    use super::*;
    use crate::tokens::Framing;
    use proptest::prelude::*;

    proptest! {
        /// The `get`/`gets` shortcut answers every line it takes exactly as the general
        /// path does (keys of any length, runs of spaces, `noreply`, a trailing `\r`).
        #[test]
        fn the_shortcut_agrees_with_the_tokenized_path(
            command in prop::sample::select(vec!["get", "gets"]),
            words in prop::collection::vec(
                prop_oneof![
                    "[a-z:0-9]{1,12}",
                    Just("noreply".to_string()),
                    Just(String::new()),
                    "x{240,260}",
                ],
                0..30,
            ),
            spaces in 1usize..3,
            cr in any::<bool>(),
        ) {
            let sep = " ".repeat(spaces);
            let mut text = format!("{command} {}", words.join(&sep)).into_bytes();
            if cr {
                text.push(b'\r');
            }
            text.push(b'\n');
            let Framing::Line(line) = crate::tokens::frame(&text) else {
                panic!("a line ending in \\n frames");
            };
            let cfg = ParserConfig::default();
            if let Some(shortcut) = plain_get(&line) {
                prop_assert_eq!(shortcut, parse_tokenized(&text, &line, &cfg));
            } else {
                // Declined only for a line with no key, which the general path refuses.
                prop_assert!(parse_tokenized(&text, &line, &cfg).is_err());
            }
        }
    }
}
