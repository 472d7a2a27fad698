//! Key dumps in memcached's formats: `stats cachedump`, `lru_crawler metadump`, `lru_crawler
//! mgdump`, and the rest of `lru_crawler` answered as memcached 1.6 answers it.
//!
//! A dump is a producer the connection runs like a paused multi-get: each call walks a
//! bounded number of hash chains ([`memfleet_storage::Handle::dump_step`]), appends lines to
//! the worker's output buffer, and returns [`AfterRequest::Resume`] once the buffer reaches its
//! budget or the call has done its share of work. The connection then writes (waiting for
//! the client if it reads slowly) and calls again; the cursor between calls is a few words
//! in the connection's [`Dump`]. Nothing grows with the cache, no lock is held between
//! calls, and a dump of a large, sparse table still yields to the worker's other
//! connections.
//!
//! Differences from memcached, all deliberate: every live item is dumped once (memcached's
//! `cachedump` shows only the COLD LRU, and its crawler can miss items that move), expired,
//! flushed and deleted items are left out (as the crawler does; `cachedump` shows them),
//! several dumps may run at once (memcached's one crawler answers `BUSY`), and requests
//! pipelined around a `metadump` are served normally (memcached refuses or drops them).
//! memfleet has one slab class, `1` (see `admin_stats`): other classes dump nothing.
//!
//! **Flash** (`--flash`): the keys of items on flash are only there, so after the table
//! walk a dump reads each flash segment whole (one sequential read, `Flow::FlashRead`: the
//! worker serves its other connections meanwhile) and lists the records in it that a `get`
//! would find. A dumping connection holds at most one flash segment's bytes (the segment
//! size) while it does. memcached keeps an extstore item's key in RAM and dumps it from there.
//!
//! Not here: the hash table walk itself (`memfleet-storage`'s `dump` module).

use crate::execute::{AfterRequest, Executor};
use crate::flash::FlashReads;
use crate::state::Crawler;
use memfleet_protocol::number::push_u64;
use memfleet_protocol::response::{self, Status};
use memfleet_protocol::{base64, ErrorKind, Request, Tokens};
use memfleet_storage::{DumpCursor, DumpItem, FlashDumpSegment, FlashFetch};

/// Hash chains visited per engine call (about 7 items each when the table is well filled).
const CHAINS_PER_STEP: usize = 16;

/// Flash records checked per engine call.
const RECORDS_PER_STEP: usize = 64;

/// Hash chains one call visits at most before handing the connection back, so a sparse
/// table does not keep the worker from its other connections.
const CHAINS_PER_CALL: usize = 8 * 1024;

/// memcached's limit on a `stats cachedump` reply, `END\r\n` included.
const CACHEDUMP_MAX_BYTES: usize = 2 * 1024 * 1024;

/// memcached's `MAX_NUMBER_OF_SLAB_CLASSES`: class ids at or above it are refused.
const MAX_SLAB_CLASSES: u32 = 64;

/// memfleet's one pseudo slab class.
const CLASS: u32 = 1;

/// What a dump prints per item.
#[derive(Clone, Copy, Debug)]
enum Format {
    /// `ITEM <key> [<len> b; <exptime> s]`, at most `limit` items (0: no limit) and
    /// [`CACHEDUMP_MAX_BYTES`].
    Items {
        limit: u32,
        shown: u32,
        bytes: usize,
    },
    /// `key=<url-encoded> exp= la= cas= fetch= cls= size= flags=`.
    Meta,
    /// `mg <key>` (base64 and ` b` for a key that is not printable).
    Mg,
}

/// A dump in progress on one connection.
#[derive(Debug)]
pub struct Dump {
    cursor: DumpCursor,
    format: Format,
    /// `cachedump` stopped early: the limit or the byte cap was reached.
    full: bool,
    /// After the table: the flash segment being listed (its bytes, and the next record's
    /// offset), one whose read is awaited, and whether every flash segment was visited.
    segment: Option<(FlashDumpSegment, Vec<u8>, usize)>,
    awaited: Option<FlashDumpSegment>,
    flash_done: bool,
}

impl Dump {
    fn finished(&self) -> bool {
        self.full
            || (self.cursor.is_done()
                && self.flash_done
                && self.segment.is_none()
                && self.awaited.is_none())
    }
}

/// Whether this module answers `request`.
pub fn handles(request: &Request<'_>) -> bool {
    match request {
        Request::Stats { args } => {
            let mut words = *args;
            words.next() == Some(b"cachedump")
        }
        Request::Other { command, .. } => *command == b"lru_crawler",
        _ => false,
    }
}

/// Runs (or resumes, when `state` holds one) a request [`handles`] accepts, appending to
/// `out`. Returns [`AfterRequest::Resume`] when the dump paused; the connection writes, then runs
/// the same request again with the same `state`.
pub fn run(
    exec: &mut Executor<'_>,
    request: &Request<'_>,
    state: &mut Option<Box<Dump>>,
    reads: &mut FlashReads,
    out: &mut Vec<u8>,
    budget: usize,
) -> AfterRequest {
    let dump = match state {
        Some(dump) => dump,
        None => match start(exec, request, out) {
            Some(dump) => state.insert(Box::new(dump)),
            None => return AfterRequest::Continue,
        },
    };
    let epoch = exec.server.cache.clock().start_unix();
    let mut visited = 0;
    loop {
        if dump.finished() {
            out.extend_from_slice(trailer(dump.format));
            *state = None;
            return AfterRequest::Continue;
        }
        if out.len() >= budget || visited >= CHAINS_PER_CALL {
            return AfterRequest::Resume(0);
        }
        let Dump {
            cursor,
            format,
            full,
            segment,
            awaited,
            flash_done,
        } = &mut **dump;
        let write = |item: &DumpItem<'_>| {
            if !*full {
                *full = !write_item(format, item, epoch, out);
            }
        };
        if !cursor.is_done() {
            exec.handle.dump_step(cursor, CHAINS_PER_STEP, write);
            visited += CHAINS_PER_STEP;
        } else if let Some((seg, bytes, at)) = segment {
            if exec
                .handle
                .flash_dump_step(seg, bytes, at, RECORDS_PER_STEP, write)
            {
                *segment = None;
            }
            visited += RECORDS_PER_STEP;
        } else if let Some(seg) = awaited.take() {
            match reads.take_segment() {
                Some(Some(bytes)) => *segment = Some((seg, bytes, 0)),
                // The read failed (logged): its items are not listed.
                Some(None) => {}
                None => {
                    *awaited = Some(seg);
                    return AfterRequest::FlashRead;
                }
            }
        } else {
            match exec.handle.flash_dump_next(cursor) {
                None => *flash_done = true,
                Some((seg, FlashFetch::Local(bytes))) => *segment = Some((seg, bytes, 0)),
                Some((seg, FlashFetch::Device { place, offset, len })) => {
                    debug_assert_eq!(offset, 0, "a dump reads whole segments");
                    reads.read_segment(place, len);
                    *awaited = Some(seg);
                    return AfterRequest::FlashRead;
                }
                Some((_, FlashFetch::Gone)) => {}
            }
        }
    }
}

/// Checks the request and writes what precedes the items; `None` when the reply is already
/// complete (an error, an empty dump, or a subcommand that is not a dump).
fn start(exec: &Executor<'_>, request: &Request<'_>, out: &mut Vec<u8>) -> Option<Dump> {
    let new = |format| {
        Some(Dump {
            cursor: DumpCursor::new(),
            format,
            full: false,
            segment: None,
            awaited: None,
            flash_done: false,
        })
    };
    match request {
        Request::Stats { args } => {
            let (class, limit) = match cachedump_args(*args) {
                Ok(parsed) => parsed,
                Err(reply) => {
                    out.extend_from_slice(reply);
                    return None;
                }
            };
            if class != CLASS {
                response::end(out);
                return None;
            }
            new(Format::Items {
                limit,
                shown: 0,
                bytes: 0,
            })
        }
        Request::Other { args, .. } => {
            let (format, ours) = lru_crawler(&exec.server.crawler, *args, out)?;
            response::status(out, Status::Ok);
            if ours {
                return new(format);
            }
            // Only other classes were asked for: an empty dump.
            out.extend_from_slice(trailer(format));
            None
        }
        _ => unreachable!("dump::run is only called for requests dump::handles accepts"),
    }
}

/// The line that ends a dump.
fn trailer(format: Format) -> &'static [u8] {
    match format {
        Format::Mg => response::MGDUMP_END,
        _ => Status::End.as_bytes(),
    }
}

/// `stats cachedump <class> <limit>`: the class and the limit, or memcached's error.
fn cachedump_args(mut words: Tokens<'_>) -> Result<(u32, u32), &'static [u8]> {
    words.next(); // "cachedump"
    let (Some(class), Some(limit)) = (words.next(), words.next()) else {
        return Err(response::BAD_COMMAND_LINE);
    };
    let (Some(class), Some(limit)) = (token_u32(class), token_u32(limit)) else {
        return Err(ErrorKind::BadCommandLineFormat.reply());
    };
    if class >= MAX_SLAB_CLASSES {
        return Err(response::ILLEGAL_SLAB_ID);
    }
    Ok((class, limit))
}

/// `lru_crawler <subcommand> ...`. Writes the whole reply and returns `None`, or returns
/// the dump to run and whether it includes memfleet's class (false: it dumps nothing).
fn lru_crawler(
    crawler: &Crawler,
    mut args: Tokens<'_>,
    out: &mut Vec<u8>,
) -> Option<(Format, bool)> {
    let words: [Option<&[u8]>; 3] = [args.next(), args.next(), args.next()];
    let reply: &[u8] = match words {
        [Some(sub), Some(arg), None] => {
            let disabled = !crawler.enabled();
            if is(sub, b"crawl") {
                match classes(arg) {
                    _ if disabled => response::CRAWLER_DISABLED,
                    // memcached's crawler walks LRUs only; memfleet's expirer already
                    // reclaims expired segments on its own, so a crawl has nothing to add.
                    Classes::All | Classes::Some(_) => Status::Ok.as_bytes(),
                    Classes::Hash => response::CRAWLER_UNKNOWN_ERROR,
                    Classes::None => response::CRAWLER_NOTHING_TO_CRAWL,
                    Classes::Bad => response::CRAWLER_BAD_CLASS,
                }
            } else if is(sub, b"metadump") || is(sub, b"mgdump") {
                let format = if is(sub, b"metadump") {
                    Format::Meta
                } else {
                    Format::Mg
                };
                match classes(arg) {
                    _ if disabled => response::CRAWLER_DISABLED,
                    Classes::All | Classes::Hash => return Some((format, true)),
                    Classes::Some(ours) => return Some((format, ours)),
                    Classes::None => response::CRAWLER_NOTHING_TO_CRAWL,
                    Classes::Bad => response::CRAWLER_BAD_CLASS,
                }
            } else if is(sub, b"tocrawl") {
                // Accepted and unused: dumps and the expirer have no per-class budget.
                match token_u32(arg) {
                    Some(_) => Status::Ok.as_bytes(),
                    None => ErrorKind::BadCommandLineFormat.reply(),
                }
            } else if is(sub, b"sleep") {
                match token_u32(arg) {
                    Some(us) if us > 1_000_000 => response::CRAWLER_SLEEP_TOO_LONG,
                    Some(_) => Status::Ok.as_bytes(),
                    None => ErrorKind::BadCommandLineFormat.reply(),
                }
            } else {
                Status::Error.as_bytes()
            }
        }
        [Some(sub), None, None] if is(sub, b"enable") => {
            // memcached refuses to start a crawler that is already running.
            if crawler.enable() {
                Status::Ok.as_bytes()
            } else {
                response::CRAWLER_START_FAILED
            }
        }
        [Some(sub), None, None] if is(sub, b"disable") => {
            crawler.disable();
            Status::Ok.as_bytes()
        }
        _ => Status::Error.as_bytes(),
    };
    out.extend_from_slice(reply);
    None
}

/// memcached matches `lru_crawler` subcommands by prefix (`strncmp` over the word's length).
fn is(word: &[u8], name: &[u8]) -> bool {
    !word.is_empty() && name.starts_with(word)
}

/// Which classes a crawl or dump argument names.
enum Classes {
    /// `all`.
    All,
    /// `hash`: walk the hash table (what memfleet always does).
    Hash,
    /// A comma-separated list of valid ids; whether it includes memfleet's class.
    Some(bool),
    /// A list with no id in it (`,`).
    None,
    /// An id that is not a number or not below [`MAX_SLAB_CLASSES`], or 0.
    Bad,
}

fn classes(arg: &[u8]) -> Classes {
    match arg {
        b"all" => return Classes::All,
        b"hash" => return Classes::Hash,
        _ => {}
    }
    let mut ours = false;
    let mut any = false;
    for id in arg.split(|&b| b == b',').filter(|t| !t.is_empty()) {
        match token_u32(id) {
            Some(id) if (1..MAX_SLAB_CLASSES).contains(&id) => {
                any = true;
                ours |= id == CLASS;
            }
            _ => return Classes::Bad,
        }
    }
    if any {
        Classes::Some(ours)
    } else {
        Classes::None
    }
}

/// memcached's `mcmc_toktou32`: decimal digits only, no sign, within `u32`.
fn token_u32(tok: &[u8]) -> Option<u32> {
    if tok.is_empty() || tok.len() > 11 || !tok.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(tok).ok()?.parse().ok()
}

/// Whether memcached could have been given `key` as a text key (a binary key, stored
/// through meta's base64, is skipped by `cachedump` and base64-encoded by `mgdump`).
fn printable(key: &[u8]) -> bool {
    key.iter().all(|&b| b > b' ' && b != 0x7f)
}

/// Appends one item's line; false when `cachedump` has reached its limit or byte cap (the
/// line is then not written). `epoch` is the Unix time of the cache clock's zero.
fn write_item(format: &mut Format, item: &DumpItem<'_>, epoch: u64, out: &mut Vec<u8>) -> bool {
    let key = item.key();
    let unix = |second: u32| epoch + u64::from(second);
    match format {
        Format::Items {
            limit,
            shown,
            bytes,
        } => {
            if *limit != 0 && *shown >= *limit {
                return false;
            }
            if !printable(key) {
                return true;
            }
            let start = out.len();
            out.extend_from_slice(b"ITEM ");
            out.extend_from_slice(key);
            out.extend_from_slice(b" [");
            push_u64(out, item.value_len() as u64);
            out.extend_from_slice(b" b; ");
            push_u64(out, item.deadline().map_or(0, unix));
            out.extend_from_slice(b" s]\r\n");
            let len = out.len() - start;
            // memcached: a line is shown only if it and `END\r\n\0` still fit.
            if *bytes + len + 6 > CACHEDUMP_MAX_BYTES {
                out.truncate(start);
                return false;
            }
            *bytes += len;
            *shown += 1;
        }
        Format::Meta => {
            out.extend_from_slice(b"key=");
            uri_encode(key, out);
            out.extend_from_slice(b" exp=");
            match item.deadline() {
                Some(d) => push_u64(out, unix(d)),
                None => out.extend_from_slice(b"-1"),
            }
            out.extend_from_slice(b" la=");
            push_u64(out, unix(item.written_at()));
            out.extend_from_slice(b" cas=");
            push_u64(out, item.cas());
            out.extend_from_slice(if item.fetched() {
                b" fetch=yes cls="
            } else {
                b" fetch=no cls="
            });
            push_u64(out, u64::from(CLASS));
            out.extend_from_slice(b" size=");
            push_u64(out, item.stored_len() as u64);
            out.extend_from_slice(b" flags=");
            push_u64(out, u64::from(item.flags()));
            out.extend_from_slice(b" \n");
        }
        Format::Mg => {
            out.extend_from_slice(b"mg ");
            if printable(key) {
                out.extend_from_slice(key);
                out.extend_from_slice(b"\r\n");
            } else {
                base64::encode_into(out, key);
                out.extend_from_slice(b" b\r\n");
            }
        }
    }
    true
}

/// memcached's `uriencode`: letters, digits and `-._~` as they are, every other byte `%XX`.
fn uri_encode(key: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in key {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xf)]]);
        }
    }
}

#[cfg(test)]
mod tests;
