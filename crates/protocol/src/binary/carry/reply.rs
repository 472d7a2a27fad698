//! The response side of [`super::carry`]: response packets read off the wire, and
//! [`Awaited::take`] turning them into the text reply.

use super::{Awaited, MetaKind, MetaShape, Shape};
use crate::binary::response::Status;
use crate::binary::{Header, Opcode, HEADER_LEN, RESPONSE_MAGIC};
use crate::request::StoreCommand;

/// One response packet, borrowed.
#[derive(Clone, Copy, Debug)]
pub struct Response<'a> {
    /// The opcode it answers.
    pub opcode: u8,
    /// Its status.
    pub status: u16,
    /// Its CAS.
    pub cas: u64,
    /// Extras.
    pub extras: &'a [u8],
    /// Key.
    pub key: &'a [u8],
    /// Value (or an error's message).
    pub value: &'a [u8],
}

/// The response packet at the start of `buf` and its length; `Ok(None)` when it is not all
/// there yet; `Err` when it is not a response packet (or claims more than `max_body`).
pub fn response(
    buf: &[u8],
    max_body: usize,
) -> Result<Option<(Response<'_>, usize)>, &'static str> {
    let Some(h) = Header::read(buf) else {
        return Ok(None);
    };
    if h.magic != RESPONSE_MAGIC {
        return Err("not a binary response");
    }
    let body = h.body_len as usize;
    let (ext, key) = (usize::from(h.extras_len), usize::from(h.key_len));
    if body > max_body || ext + key > body {
        return Err("a malformed binary response");
    }
    if buf.len() < HEADER_LEN + body {
        return Ok(None);
    }
    let b = &buf[HEADER_LEN..HEADER_LEN + body];
    Ok(Some((
        Response {
            opcode: h.opcode,
            status: h.vbucket_or_status,
            cas: h.cas,
            extras: &b[..ext],
            key: &b[ext..ext + key],
            value: &b[ext + key..],
        },
        HEADER_LEN + body,
    )))
}

fn flags_of(r: &Response<'_>) -> u32 {
    r.extras
        .get(..4)
        .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

fn push_num(out: &mut Vec<u8>, n: u64) {
    crate::number::push_u64(out, n);
}

/// The text line for an error status not handled by the command itself.
fn error_line(r: &Response<'_>) -> Vec<u8> {
    let status = r.status;
    if status == Status::TooLarge.code() {
        b"SERVER_ERROR object too large for cache\r\n".to_vec()
    } else if status == Status::OutOfMemory.code() {
        b"SERVER_ERROR out of memory storing object\r\n".to_vec()
    } else if status == Status::UnknownCommand.code() {
        b"ERROR\r\n".to_vec()
    } else if status == Status::InvalidArguments.code() {
        b"CLIENT_ERROR bad command line format\r\n".to_vec()
    } else {
        let mut line = b"SERVER_ERROR ".to_vec();
        line.extend(r.value.iter().filter(|b| !matches!(b, b'\r' | b'\n')));
        if line.len() == 13 {
            line.extend_from_slice(format!("status {status:#06x}").as_bytes());
        }
        line.extend_from_slice(b"\r\n");
        line
    }
}

impl Awaited {
    /// Takes the next response packet. `Some(reply)` when the reply is complete (the text
    /// the client gets); `None` while more packets belong to it.
    pub fn take(&mut self, r: &Response<'_>) -> Option<Vec<u8>> {
        let ok = r.status == Status::Success.code();
        let st = r.status;
        let line = |s: &[u8]| Some(s.to_vec());
        match &self.shape {
            Shape::Values { cas } => {
                if r.opcode == Opcode::Noop.as_u8() {
                    self.text.extend_from_slice(b"END\r\n");
                    return Some(std::mem::take(&mut self.text));
                }
                if ok {
                    let t = &mut self.text;
                    t.extend_from_slice(b"VALUE ");
                    t.extend_from_slice(r.key);
                    t.push(b' ');
                    push_num(t, u64::from(flags_of(r)));
                    t.push(b' ');
                    push_num(t, r.value.len() as u64);
                    if *cas {
                        t.push(b' ');
                        push_num(t, r.cas);
                    }
                    t.extend_from_slice(b"\r\n");
                    t.extend_from_slice(r.value);
                    t.extend_from_slice(b"\r\n");
                }
                None
            }
            Shape::Stats => {
                if !ok {
                    return Some(error_line(r));
                }
                if r.key.is_empty() {
                    self.text.extend_from_slice(b"END\r\n");
                    return Some(std::mem::take(&mut self.text));
                }
                let t = &mut self.text;
                t.extend_from_slice(b"STAT ");
                t.extend_from_slice(r.key);
                t.push(b' ');
                t.extend_from_slice(r.value);
                t.extend_from_slice(b"\r\n");
                None
            }
            Shape::Stored(command) => {
                let exists = st == Status::KeyExists.code();
                let missing = st == Status::KeyNotFound.code();
                match command {
                    _ if ok => line(b"STORED\r\n"),
                    StoreCommand::Cas if exists => line(b"EXISTS\r\n"),
                    StoreCommand::Cas if missing => line(b"NOT_FOUND\r\n"),
                    _ if exists || missing || st == Status::NotStored.code() => {
                        line(b"NOT_STORED\r\n")
                    }
                    _ => Some(error_line(r)),
                }
            }
            Shape::Deleted if ok => line(b"DELETED\r\n"),
            Shape::Touched if ok => line(b"TOUCHED\r\n"),
            Shape::Deleted | Shape::Touched | Shape::Counter
                if st == Status::KeyNotFound.code() =>
            {
                line(b"NOT_FOUND\r\n")
            }
            Shape::Counter if ok => {
                let mut t = Vec::new();
                push_num(&mut t, counter_of(r));
                t.extend_from_slice(b"\r\n");
                Some(t)
            }
            Shape::Counter if st == Status::NonNumeric.code() => {
                line(b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n")
            }
            Shape::Ok if ok => line(b"OK\r\n"),
            Shape::Version if ok => {
                let mut t = b"VERSION ".to_vec();
                t.extend_from_slice(r.value);
                t.extend_from_slice(b"\r\n");
                Some(t)
            }
            Shape::MetaNoop => line(b"MN\r\n"),
            Shape::Refused(reply) => Some(reply.clone()),
            Shape::Meta(m) => Some(meta_reply(m, r)),
            _ => Some(error_line(r)),
        }
    }
}

fn counter_of(r: &Response<'_>) -> u64 {
    r.value
        .get(..8)
        .map_or(0, |b| u64::from_be_bytes(b.try_into().expect("8 bytes")))
}

/// A meta request's reply from its one response.
fn meta_reply(m: &MetaShape, r: &Response<'_>) -> Vec<u8> {
    let st = r.status;
    let ok = st == Status::Success.code();
    let code: &[u8] = match m.kind {
        MetaKind::Get { .. } if st == Status::KeyNotFound.code() => b"EN",
        MetaKind::Get { value: true } if ok => b"VA",
        MetaKind::Arith { value: true } if ok => b"VA",
        _ if ok => b"HD",
        MetaKind::Set { mode, cas } => {
            let exists = st == Status::KeyExists.code();
            let missing = st == Status::KeyNotFound.code();
            if cas && exists {
                b"EX"
            } else if cas && missing {
                b"NF"
            } else if exists || missing || st == Status::NotStored.code() {
                let _ = mode;
                b"NS"
            } else {
                return error_line(r);
            }
        }
        MetaKind::Delete | MetaKind::Arith { .. } if st == Status::KeyNotFound.code() => b"NF",
        MetaKind::Delete | MetaKind::Arith { .. } if st == Status::KeyExists.code() => b"EX",
        MetaKind::Arith { .. } if st == Status::NonNumeric.code() => {
            return b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n".to_vec()
        }
        _ => return error_line(r),
    };
    // The value a `VA` carries: the item's, or the counter as decimal text.
    let mut counter = Vec::new();
    let value: &[u8] = match m.kind {
        MetaKind::Arith { .. } => {
            push_num(&mut counter, counter_of(r));
            &counter
        }
        _ => r.value,
    };
    let mut t = code.to_vec();
    if code == b"VA" {
        t.push(b' ');
        push_num(&mut t, value.len() as u64);
    }
    // The return flags asked for; on a miss or refusal, only those memcached echoes then
    // (the key, the opaque, base64).
    for (flag, arg) in &m.returns {
        if !ok && !matches!(flag, b'k' | b'O' | b'b') {
            continue;
        }
        t.push(b' ');
        t.push(*flag);
        match flag {
            b'f' => push_num(&mut t, u64::from(flags_of(r))),
            b'c' => push_num(&mut t, r.cas),
            b's' => push_num(&mut t, r.value.len() as u64),
            b'k' | b'O' => t.extend_from_slice(arg),
            _ => {}
        }
    }
    t.extend_from_slice(b"\r\n");
    if code == b"VA" {
        t.extend_from_slice(value);
        t.extend_from_slice(b"\r\n");
    }
    t
}
