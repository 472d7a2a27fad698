//! Binary response writers: each appends one packet, byte-identical to memcached 1.6.18's,
//! to a caller's `Vec<u8>` (reuse one buffer per connection and nothing is allocated once
//! it has grown).
//!
//! Every packet echoes the request's opcode and opaque ([`ReplyTo`]); data type and
//! status field follow memcached (data type always 0). Not here: which reply a request
//! gets (see the table in [`super`]), and whether a quiet request gets one at all.

use super::{Header, HEADER_LEN, RESPONSE_MAGIC};
use crate::number::push_u64;

/// The request fields a reply echoes: its opcode byte (the quiet variant stays quiet) and
/// opaque. Small and `Copy`, so it can be kept after the read buffer is drained.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReplyTo {
    /// The request's opcode byte.
    pub opcode: u8,
    /// The request's opaque.
    pub opaque: u32,
}

/// Response status codes memcached sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum Status {
    /// `0x0000`
    Success = 0x0000,
    /// `0x0001` "Not found"
    KeyNotFound = 0x0001,
    /// `0x0002` "Data exists for key."
    KeyExists = 0x0002,
    /// `0x0003` "Too large."
    TooLarge = 0x0003,
    /// `0x0004` "Invalid arguments"
    InvalidArguments = 0x0004,
    /// `0x0005` "Not stored."
    NotStored = 0x0005,
    /// `0x0006` "Non-numeric server-side value for incr or decr"
    NonNumeric = 0x0006,
    /// `0x0020` "Auth failure." (also a refused flush when flushing is disabled)
    AuthError = 0x0020,
    /// `0x0081` "Unknown command"
    UnknownCommand = 0x0081,
    /// `0x0082` "Out of memory"
    OutOfMemory = 0x0082,
    /// `0x0086` "Temporary failure": memcached never sends it; a proxy does, for a server
    /// that did not answer (the body then says which and why).
    TemporaryFailure = 0x0086,
}

impl Status {
    /// The wire code.
    pub fn code(self) -> u16 {
        self as u16
    }

    /// The body memcached sends with this status when it has nothing more specific.
    pub fn message(self) -> &'static [u8] {
        match self {
            Status::Success => b"",
            Status::KeyNotFound => b"Not found",
            Status::KeyExists => b"Data exists for key.",
            Status::TooLarge => b"Too large.",
            Status::InvalidArguments => b"Invalid arguments",
            Status::NotStored => b"Not stored.",
            Status::NonNumeric => b"Non-numeric server-side value for incr or decr",
            Status::AuthError => b"Auth failure.",
            Status::UnknownCommand => b"Unknown command",
            Status::OutOfMemory => b"Out of memory",
            Status::TemporaryFailure => b"Temporary failure",
        }
    }
}

fn len32(n: usize) -> u32 {
    u32::try_from(n).expect("binary response body over 4 GiB")
}

/// Appends a response header. The other writers are built on it; use it directly to send
/// a body from elsewhere (e.g. a value straight from the cache).
pub fn header(
    out: &mut Vec<u8>,
    to: ReplyTo,
    status: Status,
    extras_len: u8,
    key_len: u16,
    body_len: u32,
    cas: u64,
) {
    Header {
        magic: RESPONSE_MAGIC,
        opcode: to.opcode,
        key_len,
        extras_len,
        data_type: 0,
        vbucket_or_status: status.code(),
        body_len,
        opaque: to.opaque,
        cas,
    }
    .write(out);
}

/// Appends an empty success packet: set/add/replace/append/prepend (with the new CAS),
/// delete, flush, noop, quit (CAS 0).
pub fn success(out: &mut Vec<u8>, to: ReplyTo, cas: u64) {
    header(out, to, Status::Success, 0, 0, 0, cas);
}

/// Appends the header, flags and (for getk/gatk) key of a hit; the caller appends the
/// `value_len` value bytes, or sends them separately.
pub fn value_header(
    out: &mut Vec<u8>,
    to: ReplyTo,
    flags: u32,
    key: Option<&[u8]>,
    value_len: usize,
    cas: u64,
) {
    let key = key.unwrap_or_default();
    let key_len = u16::try_from(key.len()).expect("binary key over 65535 bytes");
    let body = len32(4 + key.len() + value_len);
    out.reserve(HEADER_LEN + 4 + key.len());
    header(out, to, Status::Success, 4, key_len, body, cas);
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(key);
}

/// Appends a hit for get/getq/gat/gatq (`key: None`) or getk/getkq/gatk/gatkq (`Some`):
/// flags in the extras, the item's CAS.
pub fn value(
    out: &mut Vec<u8>,
    to: ReplyTo,
    flags: u32,
    key: Option<&[u8]>,
    value: &[u8],
    cas: u64,
) {
    value_header(out, to, flags, key, value.len(), cas);
    out.extend_from_slice(value);
}

/// Appends a touch hit: the flags, no key, no value.
pub fn touched(out: &mut Vec<u8>, to: ReplyTo, flags: u32, cas: u64) {
    value_header(out, to, flags, None, 0, cas);
}

/// Appends a miss for get/gat/touch (`key: None`: the body is "Not found") or getk/gatk
/// (`Some`: the body is the key, and no message). Quiet gets send nothing on a miss.
pub fn miss(out: &mut Vec<u8>, to: ReplyTo, key: Option<&[u8]>) {
    match key {
        None => error(out, to, Status::KeyNotFound),
        Some(key) => {
            let key_len = u16::try_from(key.len()).expect("binary key over 65535 bytes");
            header(
                out,
                to,
                Status::KeyNotFound,
                0,
                key_len,
                u32::from(key_len),
                0,
            );
            out.extend_from_slice(key);
        }
    }
}

/// Appends an error packet with the status's standard message ([`Status::message`]).
pub fn error(out: &mut Vec<u8>, to: ReplyTo, status: Status) {
    error_message(out, to, status, status.message());
}

/// Appends an error packet with a custom message.
pub fn error_message(out: &mut Vec<u8>, to: ReplyTo, status: Status, message: &[u8]) {
    header(out, to, status, 0, 0, len32(message.len()), 0);
    out.extend_from_slice(message);
}

/// Appends an increment/decrement result: the new value as 8 bytes, the item's new CAS.
pub fn counter(out: &mut Vec<u8>, to: ReplyTo, value: u64, cas: u64) {
    header(out, to, Status::Success, 0, 0, 8, cas);
    out.extend_from_slice(&value.to_be_bytes());
}

/// Appends a version reply (memcached: `1.6.18`).
pub fn version(out: &mut Vec<u8>, to: ReplyTo, version: &[u8]) {
    header(out, to, Status::Success, 0, 0, len32(version.len()), 0);
    out.extend_from_slice(version);
}

/// Appends one statistic: the name as key, the value as body.
pub fn stat(out: &mut Vec<u8>, to: ReplyTo, name: &[u8], value: &[u8]) {
    let key_len = u16::try_from(name.len()).expect("stat name over 65535 bytes");
    header(
        out,
        to,
        Status::Success,
        0,
        key_len,
        len32(name.len() + value.len()),
        0,
    );
    out.extend_from_slice(name);
    out.extend_from_slice(value);
}

/// Appends one numeric statistic, formatted in decimal.
pub fn stat_u64(out: &mut Vec<u8>, to: ReplyTo, name: &[u8], value: u64) {
    let start = out.len();
    stat(out, to, name, b"");
    let value_start = out.len();
    push_u64(out, value);
    let body = len32(out.len() - value_start + name.len());
    out[start + 8..start + 12].copy_from_slice(&body.to_be_bytes());
}

/// Appends the empty packet that ends a stat reply.
pub fn stat_end(out: &mut Vec<u8>, to: ReplyTo) {
    success(out, to, 0);
}
