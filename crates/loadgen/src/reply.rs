//! Replies of memcached-protocol servers to the load generator's requests: where a reply
//! ends in the received bytes (incomplete, complete, or impossible to delimit) and whether
//! it is the right one. A get hit must carry the asked key, flags 0 and exactly the value
//! the workload stores for it; a set must get `STORED`. Anything else is a [`CheckedReply::Wrong`],
//! counted by kind. Not here: sockets and buffers (`conn`), which requests (`workload`).

use memfleet_protocol::reply::{self, Frame, MetaCode, ReplyKind, ServerReply};
use memfleet_protocol::response::Status;

use super::workload::{Protocol, Workload, WorkloadOp};

/// Longest reply line accepted before the stream is declared garbage.
const MAX_LINE: usize = 4096;
/// Largest value a reply may announce; beyond it the length field is garbage.
const MAX_VALUE: usize = 64 << 20;
/// What a well-formed reply said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckedReply {
    /// A get returned the expected value.
    Hit,
    /// A get returned `END` alone (meta: `EN`).
    Miss,
    /// A set returned `STORED` (meta: `HD`).
    Stored,
    /// A delete removed the key (`DELETED`, meta: `HD`).
    Deleted,
    /// A delete found no key (`NOT_FOUND`, meta: `NF`): not an error, since keys are
    /// deleted, expire and are evicted during a run.
    NotFound,
    /// A complete reply that is wrong for its request: (kind, example).
    Wrong(&'static str, String),
}

/// The outcome of parsing the start of a receive buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// More bytes are needed.
    Incomplete,
    /// One reply, `consumed` bytes long.
    CheckedReply {
        /// Bytes the reply took.
        consumed: usize,
        /// What it said.
        reply: CheckedReply,
    },
    /// The stream cannot be followed any more (no way to find the next reply).
    Desync(String),
}

pub(super) fn show(bytes: &[u8]) -> String {
    let cut = &bytes[..bytes.len().min(120)];
    let mut s = String::from_utf8_lossy(cut).escape_debug().to_string();
    if bytes.len() > cut.len() {
        s.push('…');
    }
    s
}

/// The first line of `buf` without its `\r\n`, or why there is none yet.
fn line(buf: &[u8]) -> Result<Option<&[u8]>, String> {
    match buf.iter().position(|&b| b == b'\n') {
        Some(i) if i > 0 && buf[i - 1] == b'\r' => Ok(Some(&buf[..i - 1])),
        Some(i) => Err(format!(
            "reply line not ended by \\r\\n: {}",
            show(&buf[..i])
        )),
        None if buf.len() > MAX_LINE => Err(format!(
            "no end of line in {} bytes: {}",
            buf.len(),
            show(buf)
        )),
        None => Ok(None),
    }
}

/// How one protocol answers the workload's operations: its verbs and the kinds of
/// [`CheckedReply::Wrong`], which name the protocol's own command (`get` or `mg`) so that a
/// report tells the two apart.
struct Dialect {
    /// The verbs of a get, a set and a delete.
    get: &'static str,
    set: &'static str,
    delete: &'static str,
    /// How a hit starts, and how it is framed.
    hit: &'static [u8],
    hit_kind: ReplyKind,
    /// The kinds of wrong reply.
    not_stored: &'static str,
    not_deleted: &'static str,
    unexpected_get: &'static str,
    other_key: &'static str,
    wrong_flags: &'static str,
    wrong_value: &'static str,
}

const TEXT: Dialect = Dialect {
    get: "get",
    set: "set",
    delete: "delete",
    hit: b"VALUE ",
    hit_kind: ReplyKind::Retrieval,
    not_stored: "set: reply is not STORED",
    not_deleted: "delete: reply is not DELETED or NOT_FOUND",
    unexpected_get: "get: unexpected reply line",
    other_key: "get: reply for another key",
    wrong_flags: "get: wrong flags",
    wrong_value: "get: wrong value",
};

const META: Dialect = Dialect {
    get: "mg",
    set: "ms",
    delete: "md",
    hit: b"VA ",
    hit_kind: ReplyKind::Meta,
    not_stored: "ms: reply is not HD",
    not_deleted: "md: reply is not HD or NF",
    unexpected_get: "mg: unexpected reply line",
    other_key: "mg: reply for another key",
    wrong_flags: "mg: wrong flags",
    wrong_value: "mg: wrong value",
};

/// Parses the reply to `op` at the start of `buf`, in the workload's protocol: its first
/// line here (to tell a wrong reply, which keeps the stream, from garbage), the rest with
/// the protocol crate's framing and decoder.
pub fn parse_reply(buf: &[u8], op: WorkloadOp, w: &Workload) -> Parsed {
    let first = match line(buf) {
        Ok(Some(l)) => l,
        Ok(None) => return Parsed::Incomplete,
        Err(e) => return Parsed::Desync(e),
    };
    let line_len = first.len() + 2;
    let reply = |reply| Parsed::CheckedReply {
        consumed: line_len,
        reply,
    };
    let d = match w.protocol() {
        Protocol::Text => &TEXT,
        Protocol::Meta => &META,
    };
    // A reply that keeps the stream but is not what `verb` of key `n` should get.
    let wrong = |what: &'static str, verb: &str, n: u64| {
        let mut k = Vec::new();
        w.push_key_bytes(n, &mut k);
        let detail = format!("{verb} {} -> {}", String::from_utf8_lossy(&k), show(first));
        reply(CheckedReply::Wrong(what, detail))
    };
    // What a one-line reply says: `STORED` and `HD` to a set are both `Stored`, and so on.
    let said = || match w.protocol() {
        Protocol::Text => match reply::decode(&buf[..line_len], ReplyKind::Line) {
            Ok(ServerReply::Status(Status::Stored)) => Some(CheckedReply::Stored),
            Ok(ServerReply::Status(Status::Deleted)) => Some(CheckedReply::Deleted),
            Ok(ServerReply::Status(Status::NotFound)) => Some(CheckedReply::NotFound),
            _ if first == b"END" => Some(CheckedReply::Miss),
            _ => None,
        },
        Protocol::Meta => match reply::decode(&buf[..line_len], ReplyKind::Meta) {
            Ok(ServerReply::Meta(m)) if m.data.is_none() => match m.code {
                MetaCode::Hd if matches!(op, WorkloadOp::Set(_)) => Some(CheckedReply::Stored),
                MetaCode::Hd => Some(CheckedReply::Deleted),
                MetaCode::Nf => Some(CheckedReply::NotFound),
                // A miss echoes the requested return flags (`EN k<key>`) in memcached and
                // memfleet alike; the key is not checked: a miss is a miss.
                MetaCode::En => Some(CheckedReply::Miss),
                _ => None,
            },
            _ => None,
        },
    };
    match op {
        WorkloadOp::Set(n) => match said() {
            Some(CheckedReply::Stored) => reply(CheckedReply::Stored),
            _ => wrong(d.not_stored, d.set, n),
        },
        WorkloadOp::Delete(n) => match said() {
            Some(r @ (CheckedReply::Deleted | CheckedReply::NotFound)) => reply(r),
            _ => wrong(d.not_deleted, d.delete, n),
        },
        WorkloadOp::Get(n) => {
            if said() == Some(CheckedReply::Miss) {
                return reply(CheckedReply::Miss);
            }
            if !first.starts_with(d.hit) {
                return wrong(d.unexpected_get, d.get, n);
            }
            check_value(buf, d, n, w)
        }
    }
}

/// A hit for key `n` at the start of `buf` (`VALUE ... END` or a meta `VA`, asked with `k f
/// v`): it must be key `n`'s (`k` must echo it), with flags 0 and exactly its value.
fn check_value(buf: &[u8], d: &Dialect, n: u64, w: &Workload) -> Parsed {
    let consumed = match reply::frame(buf, d.hit_kind, MAX_VALUE) {
        Ok(Frame::Complete(len)) => len,
        Ok(Frame::Incomplete) => return Parsed::Incomplete,
        Err(e) => return Parsed::Desync(format!("get key {n}: {e}: {}", show(buf))),
    };
    let header = || show(buf.split(|&b| b == b'\r').next().unwrap_or(buf));
    let wrong = |kind, shown| Parsed::CheckedReply {
        consumed,
        reply: CheckedReply::Wrong(kind, format!("{} key {n} -> {shown}", d.get)),
    };
    let (key, flags, data) = match reply::decode(&buf[..consumed], d.hit_kind) {
        Ok(ServerReply::Values(v)) if v.len() == 1 => (Some(v[0].key), Some(v[0].flags), v[0].data),
        Ok(ServerReply::Meta(m)) if m.code == MetaCode::Va => (
            m.flag(b'k'),
            m.flag_number::<u32>(b'f'),
            m.data.unwrap_or_default(),
        ),
        Ok(_) => {
            let detail = format!("get key {n} -> {}", header());
            let reply = CheckedReply::Wrong("get: not one value", detail);
            return Parsed::CheckedReply { consumed, reply };
        }
        Err(e) => return Parsed::Desync(format!("get key {n}: {e}: {}", show(buf))),
    };
    if !key.is_some_and(|k| w.key_matches(n, k)) {
        return wrong(d.other_key, header());
    }
    if flags != Some(0) {
        return wrong(d.wrong_flags, header());
    }
    if data != w.value(n) {
        return wrong(d.wrong_value, show(data));
    }
    Parsed::CheckedReply {
        consumed,
        reply: CheckedReply::Hit,
    }
}

#[cfg(test)]
mod tests;
