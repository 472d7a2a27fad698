//! `bigvalue` (mcrouter's `BigValueRoute`): a value above `threshold` bytes is stored on the
//! child as chunks of `threshold` bytes, each under a key of its own made of the key's hash,
//! a random suffix drawn for this write and the chunk's number, then an index item under the
//! key itself that names the suffix, the chunk count, the length and a checksum (xxh3) of
//! the whole value, with the client's flags and exptime. A read of an index fetches the
//! chunks and answers the reassembled value only if every chunk is there and the checksum
//! matches: a lost, stale or damaged chunk is a miss, never wrong bytes. A delete or an
//! overwrite replaces the index, so the old chunks (another suffix) are never read again;
//! they are left to expire or be evicted.
//!
//! Values that are small and do not look like an index pass through unchanged. `append`
//! and `prepend` are refused (they would change an index's bytes), and so is a meta set of
//! a value that would need chunks.

use super::request::{ReplyFuture, RequestClass, RequestForm, RouteContext, RouteRequest};
use super::{Build, Route, RouteNode, Step};
use memfleet_protocol::reply::{self, ReplyKind, ServerReply};
use memfleet_protocol::{response, StoreCommand};
use memfleet_routing::BigValue;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The first bytes of an index item's value.
const MAGIC: &[u8] = b"\x00memfleet-bigvalue-1 ";

/// A `bigvalue` route, ready to run.
pub(super) struct BigValueRoute {
    /// Where index items and chunks go.
    child: Arc<Route>,
    /// Values above this are chunked, in chunks of this size.
    threshold: usize,
    /// The largest value taken.
    item_size_max: usize,
}

/// What an index item says.
#[derive(Debug, PartialEq, Eq)]
struct Index {
    suffix: u64,
    chunks: usize,
    len: usize,
    sum: u64,
}

impl Index {
    fn encode(&self) -> Vec<u8> {
        let mut v = MAGIC.to_vec();
        v.extend_from_slice(
            format!(
                "{:016x} {} {} {:016x}",
                self.suffix, self.chunks, self.len, self.sum
            )
            .as_bytes(),
        );
        v
    }

    /// The index a value holds; `None` for anything that is not exactly one.
    fn decode(value: &[u8]) -> Option<Index> {
        let text = std::str::from_utf8(value.strip_prefix(MAGIC)?).ok()?;
        let mut f = text.split(' ');
        let index = Index {
            suffix: u64::from_str_radix(f.next()?, 16).ok()?,
            chunks: f.next()?.parse().ok()?,
            len: f.next()?.parse().ok()?,
            sum: u64::from_str_radix(f.next()?, 16).ok()?,
        };
        f.next().is_none().then_some(index)
    }
}

/// The key of chunk `i` of a write of `key` with `suffix`.
fn chunk_key(key: &[u8], suffix: u64, i: usize) -> Vec<u8> {
    format!(
        "__memfleet_bv:{:016x}:{suffix:016x}:{i}",
        xxhash_rust::xxh3::xxh3_64(key)
    )
    .into_bytes()
}

/// A suffix no earlier write of this process drew (a counter under a per-process seed).
fn fresh_suffix(key: &[u8]) -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let seed = *SEED.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        nanos ^ (u64::from(std::process::id()) << 32)
    });
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    xxhash_rust::xxh3::xxh3_64_with_seed(&[&n.to_le_bytes()[..], key].concat(), seed)
}

fn refuse(message: &str) -> ReplyFuture {
    let line = format!("SERVER_ERROR {message}\r\n").into_bytes();
    Box::pin(std::future::ready(Ok(line)))
}

impl BigValueRoute {
    pub(super) fn build(s: &BigValue, b: &mut Build<'_, '_>) -> BigValueRoute {
        BigValueRoute {
            child: b.route(&s.child),
            threshold: s.threshold,
            item_size_max: s.item_size_max,
        }
    }

    /// The chunks, then (once every chunk is stored) the index with the client's command.
    #[allow(clippy::too_many_arguments)]
    fn store_chunked(
        &self,
        op: &RouteRequest,
        command: StoreCommand,
        flags: u32,
        exptime: i64,
        cas: u64,
        data: Arc<[u8]>,
        ctx: RouteContext,
    ) -> ReplyFuture {
        let suffix = fresh_suffix(&op.key);
        let pieces: Vec<&[u8]> = data.chunks(self.threshold).collect();
        let index = Index {
            suffix,
            chunks: pieces.len(),
            len: data.len(),
            sum: xxhash_rust::xxh3::xxh3_64(&data),
        };
        let chunk_calls: Vec<ReplyFuture> = pieces
            .iter()
            .enumerate()
            .map(|(i, piece)| {
                let chunk = RouteRequest {
                    class: RequestClass::Set,
                    key: chunk_key(&op.key, suffix, i),
                    form: RequestForm::Store {
                        command: StoreCommand::Set,
                        flags: 0,
                        exptime,
                        cas: 0,
                        data: Arc::from(*piece),
                    },
                };
                self.child.call(chunk, ctx)
            })
            .collect();
        let index_op = RouteRequest {
            class: RequestClass::Set,
            key: op.key.clone(),
            form: RequestForm::Store {
                command,
                flags,
                exptime,
                cas,
                data: Arc::from(index.encode()),
            },
        };
        let child = self.child.clone();
        Box::pin(async move {
            for reply in futures_util::future::join_all(chunk_calls).await {
                match reply {
                    Ok(r) if r.as_slice() == b"STORED\r\n" => {}
                    // A chunk that did not store: no index points at the others.
                    other => return other,
                }
            }
            child.call(index_op, ctx).await
        })
    }

    /// A read: the child's reply, with an index's chunks fetched and reassembled.
    fn get(&self, op: RouteRequest, ctx: RouteContext) -> ReplyFuture {
        let call = self.child.call(op.clone(), ctx);
        let child = self.child.clone();
        Box::pin(async move {
            let reply = call.await?;
            let kind = op.reply_kind();
            let (flags, cas, index) = match reply::decode(&reply, kind) {
                Ok(ServerReply::Values(v)) if v.len() == 1 && v[0].data.starts_with(MAGIC) => {
                    (v[0].flags, v[0].cas, Index::decode(v[0].data))
                }
                Ok(ServerReply::Meta(m)) if m.data.is_some_and(|d| d.starts_with(MAGIC)) => {
                    (0, None, m.data.and_then(Index::decode))
                }
                _ => return Ok(reply),
            };
            let miss: &[u8] = if kind == ReplyKind::Meta {
                b"EN\r\n"
            } else {
                b"END\r\n"
            };
            let Some(index) = index else {
                return Ok(miss.to_vec());
            };
            // Chunks are read with a plain get, or a gat that extends them with the index.
            let head = match &op.form {
                RequestForm::Get { head } if head.starts_with(b"gat") => {
                    let exptime = head.split(|&b| b == b' ').nth(1).unwrap_or(b"0");
                    [&b"gat "[..], exptime].concat()
                }
                _ => b"get".to_vec(),
            };
            let calls: Vec<ReplyFuture> = (0..index.chunks)
                .map(|i| {
                    let chunk = RouteRequest {
                        class: RequestClass::Get,
                        key: chunk_key(&op.key, index.suffix, i),
                        form: RequestForm::Get { head: head.clone() },
                    };
                    child.call(chunk, ctx)
                })
                .collect();
            let mut value = Vec::with_capacity(index.len);
            for reply in futures_util::future::join_all(calls).await {
                let Ok(reply) = reply else {
                    return Ok(miss.to_vec());
                };
                match reply::decode(&reply, ReplyKind::Retrieval) {
                    Ok(ServerReply::Values(v)) if v.len() == 1 && v[0].lease.is_none() => {
                        value.extend_from_slice(v[0].data)
                    }
                    _ => return Ok(miss.to_vec()),
                }
            }
            if value.len() != index.len || xxhash_rust::xxh3::xxh3_64(&value) != index.sum {
                return Ok(miss.to_vec());
            }
            let mut out = Vec::with_capacity(value.len() + 64);
            if kind == ReplyKind::Meta {
                meta_value(&mut out, &reply, &value);
            } else {
                response::value(&mut out, &op.key, flags, &value, cas);
                response::end(&mut out);
            }
            Ok(out)
        })
    }
}

/// A meta get's `VA` reply with `value` in place of the index's bytes (its return flags
/// kept, `s` the value's size).
fn meta_value(out: &mut Vec<u8>, index_reply: &[u8], value: &[u8]) {
    let line_end = index_reply
        .windows(2)
        .position(|w| w == b"\r\n")
        .unwrap_or(index_reply.len());
    let line = &index_reply[..line_end];
    out.extend_from_slice(format!("VA {}", value.len()).as_bytes());
    for token in line.split(|&b| b == b' ').skip(2).filter(|t| !t.is_empty()) {
        out.push(b' ');
        if token[0] == b's' {
            out.extend_from_slice(format!("s{}", value.len()).as_bytes());
        } else {
            out.extend_from_slice(token);
        }
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

impl RouteNode for BigValueRoute {
    fn call(&self, op: RouteRequest, ctx: RouteContext) -> ReplyFuture {
        match &op.form {
            RequestForm::Store {
                command,
                flags,
                exptime,
                cas,
                data,
            } => {
                if matches!(command, StoreCommand::Append | StoreCommand::Prepend) {
                    return refuse("append and prepend are not supported through a bigvalue route");
                }
                if data.len() > self.item_size_max {
                    return Box::pin(std::future::ready(Ok(response::TOO_LARGE.to_vec())));
                }
                if data.len() <= self.threshold && !data.starts_with(MAGIC) {
                    return self.child.call(op, ctx);
                }
                self.store_chunked(&op, *command, *flags, *exptime, *cas, data.clone(), ctx)
            }
            RequestForm::Raw { head, tail, .. } if head.as_slice() == b"ms " => {
                let large = op
                    .stored_item()
                    .is_some_and(|(_, len)| len > self.threshold);
                let data_at = tail
                    .windows(2)
                    .position(|w| w == b"\r\n")
                    .map_or(0, |i| i + 2);
                if large || tail[data_at..].starts_with(MAGIC) {
                    return refuse("ms of a value above the bigvalue threshold is not supported");
                }
                self.child.call(op, ctx)
            }
            RequestForm::Get { .. } => self.get(op, ctx),
            RequestForm::Raw { head, .. } if head.as_slice() == b"mg " => self.get(op, ctx),
            _ => self.child.call(op, ctx),
        }
    }

    fn children(&self) -> Vec<&Arc<Route>> {
        vec![&self.child]
    }

    // The index's server (chunks have keys of their own, on any server). A get needs its
    // chunks: no get target.
    fn walk<'r, 'k>(&'r self, _: RequestClass, key: &'k [u8], _: RouteContext) -> Step<'r, 'k> {
        let line = format!("bigvalue|threshold={} (the index)", self.threshold);
        Step::new(line).then(&self.child, key)
    }

    fn item_size_max(&self) -> usize {
        self.item_size_max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_reads_back_exactly_and_nothing_else_is_one() {
        let i = Index {
            suffix: 0xdead_beef,
            chunks: 3,
            len: 1_500_000,
            sum: 42,
        };
        assert_eq!(Index::decode(&i.encode()), Some(i));
        assert_eq!(Index::decode(b"plain value"), None);
        let mut longer = Index {
            suffix: 1,
            chunks: 1,
            len: 1,
            sum: 1,
        }
        .encode();
        longer.extend_from_slice(b" more");
        assert_eq!(Index::decode(&longer), None, "appended bytes: no index");
        assert_ne!(chunk_key(b"k", 1, 0), chunk_key(b"k", 2, 0));
        assert_ne!(fresh_suffix(b"k"), fresh_suffix(b"k"));
    }

    #[test]
    fn a_meta_value_keeps_its_flags_and_its_size() {
        let mut out = Vec::new();
        meta_value(&mut out, b"VA 40 s40 f5 t-1\r\n", b"hello");
        assert_eq!(out, b"VA 5 s5 f5 t-1\r\nhello\r\n");
    }
}
