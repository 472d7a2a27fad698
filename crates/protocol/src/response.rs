//! Response encoders: each appends one reply, byte-identical to memcached 1.6's, to a caller's
//! `Vec<u8>` (reuse one buffer per connection and nothing is allocated once it has grown).
//!
//! Not here: deciding which reply a request gets (the server's job), or the rejections of
//! malformed requests, whose bytes come from [`crate::ErrorKind::reply`]. For value replies
//! the data is copied into the buffer; a server that wants zero-copy writes can encode the
//! header with [`value_header`] and send the data from the cache separately.

use crate::base64;
use crate::number::{push_i64, push_u64};
use crate::MetaFlags;
use crate::MetaKey;

const CRLF: &[u8] = b"\r\n";

/// Fixed one-line replies of the text protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// `STORED`
    Stored,
    /// `NOT_STORED`
    NotStored,
    /// `EXISTS`
    Exists,
    /// `NOT_FOUND`
    NotFound,
    /// `DELETED`
    Deleted,
    /// `TOUCHED`
    Touched,
    /// `OK` (flush_all, verbosity, ...)
    Ok,
    /// `END` (end of a retrieval or of stats)
    End,
    /// `RESET` (stats reset)
    Reset,
    /// `ERROR`
    Error,
}

impl Status {
    /// The reply line, `\r\n` included.
    pub fn as_bytes(self) -> &'static [u8] {
        match self {
            Status::Stored => b"STORED\r\n",
            Status::NotStored => b"NOT_STORED\r\n",
            Status::Exists => b"EXISTS\r\n",
            Status::NotFound => b"NOT_FOUND\r\n",
            Status::Deleted => b"DELETED\r\n",
            Status::Touched => b"TOUCHED\r\n",
            Status::Ok => b"OK\r\n",
            Status::End => b"END\r\n",
            Status::Reset => b"RESET\r\n",
            Status::Error => b"ERROR\r\n",
        }
    }
}

/// Appends a fixed reply line.
pub fn status(out: &mut Vec<u8>, s: Status) {
    out.extend_from_slice(s.as_bytes());
}

/// Appends `END\r\n`.
pub fn end(out: &mut Vec<u8>) {
    status(out, Status::End);
}

/// `incr`, `decr` or `ma` on a value that is not a decimal number.
pub const NON_NUMERIC: &[u8] = b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n";
/// A write the cache has no memory for.
pub const OUT_OF_MEMORY: &[u8] = b"SERVER_ERROR out of memory storing object\r\n";
/// A write larger than the largest item the cache holds.
pub const TOO_LARGE: &[u8] = b"SERVER_ERROR object too large for cache\r\n";
/// `flush_all` on a server started with flushing disabled (memcached's `-F`).
pub const FLUSH_DISABLED: &[u8] = b"CLIENT_ERROR flush_all not allowed\r\n";
/// `shutdown` on a server that does not allow it (memcached without `-A`; the colon is
/// memcached's).
pub const SHUTDOWN_DISABLED: &[u8] = b"SERVER_ERROR: shutdown not enabled\r\n";
/// A connection over the server's connection limit, before it is closed.
pub const TOO_MANY_CONNECTIONS: &[u8] = b"ERROR Too many open connections\r\n";

/// `stats cachedump` without a class and a limit.
pub const BAD_COMMAND_LINE: &[u8] = b"CLIENT_ERROR bad command line\r\n";
/// `stats cachedump` of a class id at or above memcached's number of slab classes.
pub const ILLEGAL_SLAB_ID: &[u8] = b"CLIENT_ERROR Illegal slab id\r\n";
/// The line that ends an `lru_crawler mgdump` (other dumps end with `END`).
pub const MGDUMP_END: &[u8] = b"EN\r\n";
/// `lru_crawler crawl|metadump|mgdump` after `lru_crawler disable`.
pub const CRAWLER_DISABLED: &[u8] = b"CLIENT_ERROR lru crawler disabled\r\n";
/// `lru_crawler crawl hash`, which memcached's crawler refuses this way.
pub const CRAWLER_UNKNOWN_ERROR: &[u8] = b"ERROR an unknown error happened\r\n";
/// An `lru_crawler` run over no class that holds items.
pub const CRAWLER_NOTHING_TO_CRAWL: &[u8] = b"NOTSTARTED no items to crawl\r\n";
/// An `lru_crawler` class list that does not parse.
pub const CRAWLER_BAD_CLASS: &[u8] = b"BADCLASS invalid class id\r\n";
/// `lru_crawler sleep` beyond a second.
pub const CRAWLER_SLEEP_TOO_LONG: &[u8] = b"CLIENT_ERROR sleep must be one second or less\r\n";
/// `lru_crawler enable` while it is enabled already.
pub const CRAWLER_START_FAILED: &[u8] = b"ERROR failed to start lru crawler thread\r\n";

/// memfleet's UDP refusals (memcached serves every command over UDP; memfleet serves reads
/// only unless `--udp-writes`): a write.
pub const UDP_NOT_A_READ: &[u8] =
    b"CLIENT_ERROR UDP serves only get, gets and mg (writes need --udp-writes)\r\n";
/// A datagram holding more than one command.
pub const UDP_NOT_ONE_REQUEST: &[u8] =
    b"CLIENT_ERROR a UDP request must be one complete command\r\n";
/// A binary-protocol datagram without `--udp-writes`.
pub const UDP_BINARY: &[u8] =
    b"CLIENT_ERROR UDP serves the binary protocol only with --udp-writes\r\n";
/// A datagram whose last command is cut short (memcached drops it without a word).
pub const UDP_INCOMPLETE: &[u8] =
    b"CLIENT_ERROR a UDP request must end with a complete command\r\n";
/// memcached's words for a request spread over several datagrams.
pub const UDP_MULTI_PACKET: &[u8] = b"SERVER_ERROR multi-packet request not supported\r\n";
/// A UDP `mg` with a flag that has side effects.
pub const UDP_NO_SIDE_EFFECTS: &[u8] = b"CLIENT_ERROR UDP mg takes no N, R, T or E flag\r\n";
/// A reply over the UDP size cap.
pub const UDP_TOO_LARGE: &[u8] = b"SERVER_ERROR reply too large for UDP; use TCP\r\n";

/// Appends `VALUE <key> <flags> <bytes>[ <cas>]\r\n`, the header of one retrieval hit.
pub fn value_header(out: &mut Vec<u8>, key: &[u8], flags: u32, len: usize, cas: Option<u64>) {
    value_line(out, key, flags, len, cas, 0);
}

/// The `VALUE` line, with room reserved for `then` more bytes after it: one growth check
/// for the whole hit (this is the reply of nearly every get).
#[inline]
fn value_line(
    out: &mut Vec<u8>,
    key: &[u8],
    flags: u32,
    len: usize,
    cas: Option<u64>,
    then: usize,
) {
    let mut flags_text = itoa::Buffer::new();
    let flags = flags_text.format(flags).as_bytes();
    let mut len_text = itoa::Buffer::new();
    let len = len_text.format(len).as_bytes();
    let mut cas_text = itoa::Buffer::new();
    let cas = cas.map(|c| cas_text.format(c).as_bytes());
    let cas_len = cas.map_or(0, |c| 1 + c.len());
    out.reserve(b"VALUE ".len() + key.len() + 1 + flags.len() + 1 + len.len() + cas_len + 2 + then);
    out.extend_from_slice(b"VALUE ");
    out.extend_from_slice(key);
    out.push(b' ');
    out.extend_from_slice(flags);
    out.push(b' ');
    out.extend_from_slice(len);
    if let Some(cas) = cas {
        out.push(b' ');
        out.extend_from_slice(cas);
    }
    out.extend_from_slice(CRLF);
}

/// Appends one retrieval hit: the `VALUE` line, the data and `\r\n` (`cas` for gets/gats).
pub fn value(out: &mut Vec<u8>, key: &[u8], flags: u32, data: &[u8], cas: Option<u64>) {
    value_line(out, key, flags, data.len(), cas, data.len() + 2);
    out.extend_from_slice(data);
    out.extend_from_slice(CRLF);
}

/// The lease token of a `lease-get` hot miss: someone else holds the key's lease; retry
/// shortly (mcrouter's ASCII protocol; 0 would mean a hit).
pub const HOT_MISS_TOKEN: u64 = 1;

/// Appends one `lease-get` miss: `LVALUE <key> <token> <flags> <bytes>`, the data (a stale
/// value, or empty) and `\r\n`; the reply ends with `END` like a get's.
pub fn lease_value(out: &mut Vec<u8>, key: &[u8], token: u64, flags: u32, data: &[u8]) {
    out.extend_from_slice(b"LVALUE ");
    out.extend_from_slice(key);
    out.push(b' ');
    push_u64(out, token);
    out.push(b' ');
    push_u64(out, u64::from(flags));
    out.push(b' ');
    push_u64(out, data.len() as u64);
    out.extend_from_slice(CRLF);
    out.extend_from_slice(data);
    out.extend_from_slice(CRLF);
}

/// Appends an incr/decr result: the new value alone on a line.
pub fn number(out: &mut Vec<u8>, v: u64) {
    push_u64(out, v);
    out.extend_from_slice(CRLF);
}

/// Appends `VERSION <version>\r\n`.
pub fn version(out: &mut Vec<u8>, version: &[u8]) {
    out.extend_from_slice(b"VERSION ");
    out.extend_from_slice(version);
    out.extend_from_slice(CRLF);
}

/// Appends `STAT <name> <value>\r\n` (a stats reply is a run of these and `END`).
pub fn stat(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(b"STAT ");
    out.extend_from_slice(name);
    out.push(b' ');
    out.extend_from_slice(value);
    out.extend_from_slice(CRLF);
}

/// Appends a numeric `STAT` line.
pub fn stat_u64(out: &mut Vec<u8>, name: &[u8], value: u64) {
    out.extend_from_slice(b"STAT ");
    out.extend_from_slice(name);
    out.push(b' ');
    push_u64(out, value);
    out.extend_from_slice(CRLF);
}

/// Appends `CLIENT_ERROR <message>\r\n` (e.g. `cannot increment or decrement non-numeric
/// value`).
pub fn client_error(out: &mut Vec<u8>, message: &[u8]) {
    out.extend_from_slice(b"CLIENT_ERROR ");
    out.extend_from_slice(message);
    out.extend_from_slice(CRLF);
}

/// Appends `SERVER_ERROR <message>\r\n` (e.g. `out of memory storing object`).
pub fn server_error(out: &mut Vec<u8>, message: &[u8]) {
    out.extend_from_slice(b"SERVER_ERROR ");
    out.extend_from_slice(message);
    out.extend_from_slice(CRLF);
}

/// Appends `MN\r\n`, the reply to `mn`.
pub fn meta_noop(out: &mut Vec<u8>) {
    out.extend_from_slice(b"MN\r\n");
}

/// The status code that starts a meta reply line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MetaStatus {
    /// `HD`: success, no value.
    Hd,
    /// `VA <len>`: success with a value block (end it with [`MetaWriter::finish_with_value`]).
    Va(usize),
    /// `EN`: miss (mg).
    En,
    /// `NF`: not found.
    Nf,
    /// `NS`: not stored.
    Ns,
    /// `EX`: CAS mismatch.
    Ex,
}

/// Builds one meta reply line: a status code, then return flags in the order the caller
/// adds them (memcached's order is the request's, see [`MetaFlags::iter`]), then `\r\n` and
/// for `VA` the value block.
///
/// ```
/// # use memfleet_protocol::response::{MetaWriter, MetaStatus};
/// let mut out = Vec::new();
/// let mut w = MetaWriter::new(&mut out, MetaStatus::Va(2));
/// w.flag_u64(b'c', 12);
/// w.opaque(b"abc");
/// w.finish_with_value(b"hi");
/// assert_eq!(out, b"VA 2 c12 Oabc\r\nhi\r\n");
/// ```
#[must_use = "finish the line with finish() or finish_with_value()"]
pub struct MetaWriter<'o> {
    out: &'o mut Vec<u8>,
}

impl<'o> MetaWriter<'o> {
    /// Starts a reply with `status`.
    pub fn new(out: &'o mut Vec<u8>, status: MetaStatus) -> Self {
        match status {
            MetaStatus::Hd => out.extend_from_slice(b"HD"),
            MetaStatus::Va(len) => {
                out.extend_from_slice(b"VA ");
                push_u64(out, len as u64);
            }
            MetaStatus::En => out.extend_from_slice(b"EN"),
            MetaStatus::Nf => out.extend_from_slice(b"NF"),
            MetaStatus::Ns => out.extend_from_slice(b"NS"),
            MetaStatus::Ex => out.extend_from_slice(b"EX"),
        }
        MetaWriter { out }
    }

    /// A flag without a token (`W`, `X`, `Z`).
    pub fn flag(&mut self, letter: u8) -> &mut Self {
        self.out.extend_from_slice(&[b' ', letter]);
        self
    }

    /// A flag with an unsigned number (`c` cas, `s` size, `f` flags, `l`, `h`).
    pub fn flag_u64(&mut self, letter: u8, v: u64) -> &mut Self {
        self.flag(letter);
        push_u64(self.out, v);
        self
    }

    /// A flag with a signed number (`t` TTL, which is `-1` for "never expires").
    pub fn flag_i64(&mut self, letter: u8, v: i64) -> &mut Self {
        self.flag(letter);
        push_i64(self.out, v);
        self
    }

    /// A flag with raw token bytes.
    pub fn flag_bytes(&mut self, letter: u8, token: &[u8]) -> &mut Self {
        self.flag(letter);
        self.out.extend_from_slice(token);
        self
    }

    /// The opaque echo: ` O<token>`.
    pub fn opaque(&mut self, token: &[u8]) -> &mut Self {
        self.flag_bytes(b'O', token)
    }

    /// The `k` flag: the key as memcached prints it, re-encoded with a trailing ` b` when it
    /// is binary (`key` is the decoded key bytes).
    pub fn key(&mut self, key: &[u8], binary: bool) -> &mut Self {
        self.flag(b'k');
        if binary {
            base64::encode_into(self.out, key);
            self.out.extend_from_slice(b" b");
        } else {
            self.out.extend_from_slice(key);
        }
        self
    }

    /// Echoes the flags that need no item (`O` and `k`), in request order: all memcached
    /// returns on a miss (`EN`, `NF`) or with `NS`/`EX`.
    pub fn echo(&mut self, flags: &MetaFlags<'_>, key: &MetaKey<'_>) -> &mut Self {
        for f in flags.iter() {
            match f.letter {
                b'O' => {
                    self.opaque(f.token);
                }
                b'k' => {
                    self.key(&key.bytes(), key.is_base64());
                }
                _ => {}
            }
        }
        self
    }

    /// Ends the line.
    pub fn finish(self) {
        self.out.extend_from_slice(CRLF);
    }

    /// Ends the line and appends the value block (for [`MetaStatus::Va`]).
    pub fn finish_with_value(self, data: &[u8]) {
        self.out.extend_from_slice(CRLF);
        self.out.extend_from_slice(data);
        self.out.extend_from_slice(CRLF);
    }
}

/// The item metadata `me` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetaDebug {
    /// memcached prints `-1` for an item that never expires, otherwise `now - exptime`
    /// (so a live item shows minus its remaining seconds).
    pub exp: i64,
    /// Seconds since last access.
    pub last_access: u64,
    /// CAS unique.
    pub cas: u64,
    /// Whether the item was fetched since it was stored.
    pub fetched: bool,
    /// Slab class (memfleet has none; any stable number).
    pub class: u32,
    /// Total item size in bytes.
    pub size: u64,
}

/// Appends `ME <key> exp=.. la=.. cas=.. fetch=yes|no cls=.. size=..\r\n` (a miss is
/// `EN\r\n`, via [`MetaWriter`]). `key` is the decoded key; a binary key is re-encoded.
pub fn meta_debug(out: &mut Vec<u8>, key: &[u8], binary: bool, d: &MetaDebug) {
    out.extend_from_slice(b"ME ");
    if binary {
        base64::encode_into(out, key);
    } else {
        out.extend_from_slice(key);
    }
    out.extend_from_slice(b" exp=");
    push_i64(out, d.exp);
    out.extend_from_slice(b" la=");
    push_u64(out, d.last_access);
    out.extend_from_slice(b" cas=");
    push_u64(out, d.cas);
    out.extend_from_slice(if d.fetched {
        b" fetch=yes"
    } else {
        b" fetch=no"
    });
    out.extend_from_slice(b" cls=");
    push_u64(out, u64::from(d.class));
    out.extend_from_slice(b" size=");
    push_u64(out, d.size);
    out.extend_from_slice(CRLF);
}

/// AWS ElastiCache's answer to `config get cluster` (auto discovery): `CONFIG cluster 0
/// <len>`, then `<len>` bytes (the version and the `host|ip|port` entries, space-separated,
/// each line ended by a bare `\n`), then `\r\nEND\r\n`. The AWS cluster client reads `<len>`
/// bytes, then the `\r\n`.
pub fn cluster_config(out: &mut Vec<u8>, version: u64, entries: &[u8]) {
    let mut v = itoa::Buffer::new();
    let version = v.format(version).as_bytes();
    let len = version.len() + 1 + entries.len() + 1;
    let mut n = itoa::Buffer::new();
    out.extend_from_slice(b"CONFIG cluster 0 ");
    out.extend_from_slice(n.format(len).as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(version);
    out.push(b'\n');
    out.extend_from_slice(entries);
    out.extend_from_slice(b"\n\r\nEND\r\n");
}

/// Whether `args` (after `config`) ask for the cluster's configuration: `get cluster`.
pub fn is_config_get_cluster(args: &[u8]) -> bool {
    let mut words = args.split(|&b| b == b' ').filter(|w| !w.is_empty());
    (words.next(), words.next(), words.next()) == (Some(&b"get"[..]), Some(&b"cluster"[..]), None)
}
