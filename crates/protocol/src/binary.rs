//! memcached's binary protocol, parsed and encoded the way memcached 1.6.18 does it: no I/O,
//! no allocation per request. (memcached deprecated the protocol in 1.6 but still serves it;
//! old clients and `-B binary` deployments use it.)
//!
//! A packet is a 24-byte header (magic `0x80` for requests, `0x81` for responses, opcode,
//! key length, extras length, data type, vbucket or status, total body length, opaque, CAS;
//! numbers big-endian) followed by the body: extras, then key, then value.
//!
//! - [`parse`] takes the bytes buffered so far and returns one [`BinRequest`] borrowing from
//!   them plus how many bytes it used, [`BinError::Incomplete`] ("read more"), or a
//!   [`BinRejection`] that writes memcached's error packet, says how many bytes to discard
//!   and whether memcached closes the connection.
//! - [`response`] appends reply packets to a `Vec<u8>`; [`BinRequest::encode`] writes a
//!   request (for clients, the router and tests); [`Header`] reads and writes raw headers.
//!
//! What memcached replies, for the server that executes the requests (`response` has the
//! writers; every reply echoes the request's opcode and opaque):
//!
//! | request | success | failure |
//! |---|---|---|
//! | get, getk, gat, gatk | [`response::value`] (flags extras; key for the `k` forms; item CAS) | [`response::miss`] (`Not found` text, or the key for the `k` forms) |
//! | getq, getkq, gatq, gatkq | same hit packet | nothing |
//! | touch | [`response::touched`] (flags, no value) | `Not found` |
//! | set, add, replace | [`response::success`] with the new CAS | add: `KeyExists`; replace: `KeyNotFound`; CAS given: `KeyExists` or `KeyNotFound` |
//! | append, prepend | success with the new CAS | `NotStored`; CAS given and different: `KeyExists` |
//! | delete | success, CAS 0 | `KeyNotFound`; CAS given and different: `KeyExists` |
//! | increment, decrement | [`response::counter`] with the new CAS | `KeyNotFound` if missing and exptime is [`NO_AUTO_CREATE`] (else the key is created holding `initial`, which is returned); `NonNumeric`; CAS mismatch: `KeyExists` |
//! | flush, noop, quit | success (noop: write out everything queued; quit: then close) | |
//! | version | [`response::version`] | |
//! | stat | one [`response::stat`] per statistic, then [`response::stat_end`] | `KeyNotFound` for an unknown group |
//!
//! The quiet opcodes (`SetQ`, `AddQ`, ..., `QuitQ`, `FlushQ`) send nothing on success, but
//! errors are always sent. The quiet gets suppress misses, never hits. With a non-zero CAS
//! in the request, set/add/replace become compare-and-swap (a missing key is
//! `KeyNotFound`, even for add) and append/prepend/delete/incr/decr fail with `KeyExists`
//! when the item's CAS differs. memcached matches stat group names by prefix (`reset`,
//! `settings`, `detail on|off|dump`), then by exact name (`items`, `slabs`, `sizes`, ...).
//!
//! A connection is binary if its first byte is [`REQUEST_MAGIC`] (memcached's `-B auto`),
//! and stays binary: a later packet with another magic closes it.

pub mod bridge;
pub mod carry;
mod error;
mod parse;
mod request;
pub mod response;
pub mod sasl;

pub use error::{BinError, BinErrorKind, BinRejection};
pub use parse::parse;
pub use request::{BinCommand, BinRequest, ConcatOp, SetOp};
pub use response::{ReplyTo, Status};

/// Length of every packet header.
pub const HEADER_LEN: usize = 24;
/// First byte of a request packet (and of a binary connection).
pub const REQUEST_MAGIC: u8 = 0x80;
/// First byte of a response packet.
pub const RESPONSE_MAGIC: u8 = 0x81;
/// An increment/decrement `exptime` meaning "do not create a missing key".
pub const NO_AUTO_CREATE: u32 = 0xffff_ffff;
/// memcached's read buffer: a request whose header, extras and key together exceed this
/// can never be read, and memcached closes the connection without a reply.
pub const MAX_HEAD_LEN: usize = 16384;

/// A packet header, fields in host order. The same layout serves requests and responses
/// (where the vbucket field carries the status).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Header {
    /// [`REQUEST_MAGIC`] or [`RESPONSE_MAGIC`].
    pub magic: u8,
    /// The command, see [`Opcode`] (a response repeats its request's).
    pub opcode: u8,
    /// Key length.
    pub key_len: u16,
    /// Extras length.
    pub extras_len: u8,
    /// Data type (memcached ignores it and sends 0).
    pub data_type: u8,
    /// A request's vbucket id (ignored by memcached) or a response's status.
    pub vbucket_or_status: u16,
    /// Extras, key and value lengths together.
    pub body_len: u32,
    /// Copied from request to response unchanged.
    pub opaque: u32,
    /// CAS unique (0: none).
    pub cas: u64,
}

impl Header {
    /// Reads the header at the start of `buf`, if 24 bytes are there. Checks nothing.
    pub fn read(buf: &[u8]) -> Option<Header> {
        let b: &[u8; HEADER_LEN] = buf.get(..HEADER_LEN)?.try_into().ok()?;
        let u16_at = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Some(Header {
            magic: b[0],
            opcode: b[1],
            key_len: u16_at(2),
            extras_len: b[4],
            data_type: b[5],
            vbucket_or_status: u16_at(6),
            body_len: u32_at(8),
            opaque: u32_at(12),
            cas: (u64::from(u32_at(16)) << 32) | u64::from(u32_at(20)),
        })
    }

    /// Appends the 24 header bytes.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.push(self.magic);
        out.push(self.opcode);
        out.extend_from_slice(&self.key_len.to_be_bytes());
        out.push(self.extras_len);
        out.push(self.data_type);
        out.extend_from_slice(&self.vbucket_or_status.to_be_bytes());
        out.extend_from_slice(&self.body_len.to_be_bytes());
        out.extend_from_slice(&self.opaque.to_be_bytes());
        out.extend_from_slice(&self.cas.to_be_bytes());
    }

    /// Header plus body: the whole packet's length.
    pub fn packet_len(&self) -> usize {
        HEADER_LEN.saturating_add(self.body_len as usize)
    }
}

/// The opcodes memcached 1.6.18 executes. (It also knows the SASL opcodes `0x20`-`0x22`,
/// answered "Unknown command" without SASL support, which [`parse`] reproduces.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Opcode {
    /// `0x00`
    Get = 0x00,
    /// `0x01`
    Set = 0x01,
    /// `0x02`
    Add = 0x02,
    /// `0x03`
    Replace = 0x03,
    /// `0x04`
    Delete = 0x04,
    /// `0x05`
    Increment = 0x05,
    /// `0x06`
    Decrement = 0x06,
    /// `0x07`
    Quit = 0x07,
    /// `0x08`
    Flush = 0x08,
    /// `0x09`: get, no reply on a miss.
    GetQ = 0x09,
    /// `0x0a`
    Noop = 0x0a,
    /// `0x0b`
    Version = 0x0b,
    /// `0x0c`: get, the reply carries the key.
    GetK = 0x0c,
    /// `0x0d`
    GetKQ = 0x0d,
    /// `0x0e`
    Append = 0x0e,
    /// `0x0f`
    Prepend = 0x0f,
    /// `0x10`
    Stat = 0x10,
    /// `0x11`
    SetQ = 0x11,
    /// `0x12`
    AddQ = 0x12,
    /// `0x13`
    ReplaceQ = 0x13,
    /// `0x14`
    DeleteQ = 0x14,
    /// `0x15`
    IncrementQ = 0x15,
    /// `0x16`
    DecrementQ = 0x16,
    /// `0x17`
    QuitQ = 0x17,
    /// `0x18`
    FlushQ = 0x18,
    /// `0x19`
    AppendQ = 0x19,
    /// `0x1a`
    PrependQ = 0x1a,
    /// `0x1c`
    Touch = 0x1c,
    /// `0x1d`: get and touch.
    Gat = 0x1d,
    /// `0x1e`
    GatQ = 0x1e,
    /// `0x23`: get and touch, the reply carries the key.
    GatK = 0x23,
    /// `0x24`
    GatKQ = 0x24,
}

impl Opcode {
    /// Every opcode, in numeric order.
    pub const ALL: [Opcode; 32] = {
        use Opcode::*;
        [
            Get, Set, Add, Replace, Delete, Increment, Decrement, Quit, Flush, GetQ, Noop, Version,
            GetK, GetKQ, Append, Prepend, Stat, SetQ, AddQ, ReplaceQ, DeleteQ, IncrementQ,
            DecrementQ, QuitQ, FlushQ, AppendQ, PrependQ, Touch, Gat, GatQ, GatK, GatKQ,
        ]
    };

    /// The opcode with this number, if memcached executes it.
    pub fn from_u8(byte: u8) -> Option<Opcode> {
        use Opcode::*;
        Some(match byte {
            0x00 => Get,
            0x01 => Set,
            0x02 => Add,
            0x03 => Replace,
            0x04 => Delete,
            0x05 => Increment,
            0x06 => Decrement,
            0x07 => Quit,
            0x08 => Flush,
            0x09 => GetQ,
            0x0a => Noop,
            0x0b => Version,
            0x0c => GetK,
            0x0d => GetKQ,
            0x0e => Append,
            0x0f => Prepend,
            0x10 => Stat,
            0x11 => SetQ,
            0x12 => AddQ,
            0x13 => ReplaceQ,
            0x14 => DeleteQ,
            0x15 => IncrementQ,
            0x16 => DecrementQ,
            0x17 => QuitQ,
            0x18 => FlushQ,
            0x19 => AppendQ,
            0x1a => PrependQ,
            0x1c => Touch,
            0x1d => Gat,
            0x1e => GatQ,
            0x23 => GatK,
            0x24 => GatKQ,
            _ => return None,
        })
    }

    /// The wire byte.
    pub fn as_u8(self) -> u8 {
        self as u8
    }

    /// Whether this is a quiet variant: no reply on success (gets: no reply on a miss).
    pub fn is_quiet(self) -> bool {
        use Opcode::*;
        matches!(
            self,
            GetQ | GetKQ
                | SetQ
                | AddQ
                | ReplaceQ
                | DeleteQ
                | IncrementQ
                | DecrementQ
                | QuitQ
                | FlushQ
                | AppendQ
                | PrependQ
                | GatQ
                | GatKQ
        )
    }
}

/// Whether a connection whose first byte is `first` speaks the binary protocol (memcached's
/// `-B auto` rule; the text and meta protocols never start with this byte).
pub fn is_binary(first: u8) -> bool {
    first == REQUEST_MAGIC
}
