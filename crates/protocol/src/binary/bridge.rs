//! Binary requests carried over the text protocol, for a proxy whose servers speak text and
//! meta (the router): [`to_text`] writes the meta (or text) request that does what a binary
//! request asks, and [`Pending::reply`] turns the text reply back into the binary response
//! memcached would have sent (see the table in [`super`]).
//!
//! | binary | sent as | reply → response |
//! |---|---|---|
//! | get, getk, gat, gatk (and quiet) | `mg KEY v f c [T<exptime>]` | `VA` → value; `EN` → miss (nothing when quiet) |
//! | touch | `mg KEY f c T<exptime>` | `HD` → touched; `EN` → `Not found` |
//! | set, add, replace | `ms KEY LEN F<flags> T<exptime> c M<S\|E\|R>`; with a CAS, `MS C<cas>` | `HD` → success with the CAS; `NS` → add: `KeyExists`, replace: `KeyNotFound`, set: `NotStored`; `EX` → `KeyExists`; `NF` → `KeyNotFound` |
//! | append, prepend | `ms KEY LEN c M<A\|P> [C<cas>]` | `HD` → success; `NS` → `NotStored` |
//! | delete | `md KEY [C<cas>]` | `HD` → success; `NF`, `EX` |
//! | increment, decrement | `ma KEY M<I\|D> D<delta> v c [N<exptime> J<initial>] [C<cas>]` | `VA` → counter; `NF`; `EX`; non-numeric → `NonNumeric` |
//! | flush | `flush_all [exptime]` | `OK` → success |
//! | stat | `stats [group]` | `STAT name value` → one stat each; `END` → the end |
//!
//! A key that is not printable ASCII without spaces goes base64 with the `b` flag. The
//! quiet forms' successes (and quiet gets' misses) become no bytes at all; errors are
//! always sent. A text error reply becomes an error packet: `ERROR` "Unknown command",
//! `CLIENT_ERROR msg` "Invalid arguments" with the message, `SERVER_ERROR out of memory…`
//! "Out of memory", `SERVER_ERROR object too large…` "Too large.", any other
//! `SERVER_ERROR msg` (a server down or timed out) "Temporary failure" with the message.
//!
//! Noop, version and quit are not carried: the proxy answers them itself ([`Carried::Local`]).

use super::request::{BinCommand, BinRequest, ConcatOp, SetOp};
use super::response::{self, ReplyTo, Status};
use super::NO_AUTO_CREATE;
use crate::ArithOp;

/// What a binary request becomes.
#[derive(Debug, PartialEq, Eq)]
pub enum Carried {
    /// Send this text request; build the client's response with the [`Pending`].
    Text(Vec<u8>, Pending),
    /// The proxy answers it itself.
    Local(LocalRequest),
}

/// The requests a proxy answers without its servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalRequest {
    /// `Noop`: an empty success.
    Noop(ReplyTo),
    /// `Version`.
    Version(ReplyTo),
    /// `Quit` (a success first) or `QuitQ` (none): then close.
    Quit(ReplyTo, bool),
}

/// What a carried request's response needs of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    to: ReplyTo,
    quiet: bool,
    kind: Kind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Kind {
    /// A get or get-and-touch; the key when the response carries it (the `k` forms).
    Get(Option<Vec<u8>>),
    Touch,
    /// A store; `None` with a CAS (then every mode is compare-and-swap).
    Store(Option<SetOp>),
    Concat,
    Delete,
    Arith,
    Flush,
    Stat,
}

/// Writes `key` as a meta key: as is when it is printable ASCII without spaces, else
/// base64 (and true: the request needs the `b` flag).
fn push_key(out: &mut Vec<u8>, key: &[u8]) -> bool {
    if key.iter().all(|b| b.is_ascii_graphic()) {
        out.extend_from_slice(key);
        false
    } else {
        crate::base64::encode_into(out, key);
        true
    }
}

fn push_num(out: &mut Vec<u8>, flag: &[u8], n: u64) {
    out.extend_from_slice(flag);
    crate::number::push_u64(out, n);
}

/// The text request that carries `request`, or what the proxy answers itself.
pub fn to_text(request: &BinRequest<'_>) -> Carried {
    let to = request.reply_to();
    let quiet = request.quiet();
    let cas = request.cas;
    let mut out = Vec::with_capacity(64);
    // The command and key; the `b` flag, when the key needs it, goes with the other flags.
    let mut base64 = false;
    let mut meta = |out: &mut Vec<u8>, command: &[u8], key: &[u8]| {
        out.extend_from_slice(command);
        base64 = push_key(out, key);
    };
    let with_cas = |out: &mut Vec<u8>| {
        if cas != 0 {
            push_num(out, b" C", cas);
        }
    };
    let kind = match request.command {
        BinCommand::Get {
            key,
            with_key,
            quiet: _,
        } => {
            meta(&mut out, b"mg ", key);
            out.extend_from_slice(b" v f c");
            Kind::Get(with_key.then(|| key.to_vec()))
        }
        BinCommand::GetAndTouch {
            key,
            exptime,
            with_key,
            quiet: _,
        } => {
            meta(&mut out, b"mg ", key);
            out.extend_from_slice(b" v f c");
            push_num(&mut out, b" T", u64::from(exptime));
            Kind::Get(with_key.then(|| key.to_vec()))
        }
        BinCommand::Touch { key, exptime } => {
            meta(&mut out, b"mg ", key);
            out.extend_from_slice(b" f c");
            push_num(&mut out, b" T", u64::from(exptime));
            Kind::Touch
        }
        BinCommand::Store {
            op,
            key,
            flags,
            exptime,
            value,
            quiet: _,
        } => {
            meta(&mut out, b"ms ", key);
            push_num(&mut out, b" ", value.len() as u64);
            push_num(&mut out, b" F", u64::from(flags));
            push_num(&mut out, b" T", u64::from(exptime));
            out.extend_from_slice(b" c");
            let mode: &[u8] = match op {
                _ if cas != 0 => b" MS",
                SetOp::Set => b" MS",
                SetOp::Add => b" ME",
                SetOp::Replace => b" MR",
            };
            out.extend_from_slice(mode);
            with_cas(&mut out);
            if base64 {
                out.extend_from_slice(b" b");
            }
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(value);
            Kind::Store((cas == 0).then_some(op))
        }
        BinCommand::Concat {
            op,
            key,
            value,
            quiet: _,
        } => {
            meta(&mut out, b"ms ", key);
            push_num(&mut out, b" ", value.len() as u64);
            out.extend_from_slice(match op {
                ConcatOp::Append => b" c MA",
                ConcatOp::Prepend => b" c MP",
            });
            with_cas(&mut out);
            if base64 {
                out.extend_from_slice(b" b");
            }
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(value);
            Kind::Concat
        }
        BinCommand::Delete { key, quiet: _ } => {
            meta(&mut out, b"md ", key);
            with_cas(&mut out);
            Kind::Delete
        }
        BinCommand::Arith {
            op,
            key,
            delta,
            initial,
            exptime,
            quiet: _,
        } => {
            meta(&mut out, b"ma ", key);
            out.extend_from_slice(match op {
                ArithOp::Incr => b" MI",
                ArithOp::Decr => b" MD",
            });
            push_num(&mut out, b" D", delta);
            out.extend_from_slice(b" v c");
            if exptime != NO_AUTO_CREATE {
                push_num(&mut out, b" N", u64::from(exptime));
                push_num(&mut out, b" J", initial);
            }
            with_cas(&mut out);
            Kind::Arith
        }
        BinCommand::Flush { exptime, quiet: _ } => {
            out.extend_from_slice(b"flush_all");
            if let Some(t) = exptime.filter(|t| *t != 0) {
                push_num(&mut out, b" ", u64::from(t));
            }
            Kind::Flush
        }
        BinCommand::Stat { key } => {
            out.extend_from_slice(b"stats");
            if !key.is_empty() {
                out.push(b' ');
                out.extend_from_slice(key);
            }
            Kind::Stat
        }
        BinCommand::Noop => return Carried::Local(LocalRequest::Noop(to)),
        BinCommand::Version => return Carried::Local(LocalRequest::Version(to)),
        BinCommand::Quit { quiet } => return Carried::Local(LocalRequest::Quit(to, quiet)),
    };
    if base64 && !matches!(kind, Kind::Store(_) | Kind::Concat) {
        out.extend_from_slice(b" b");
    }
    out.extend_from_slice(b"\r\n");
    Carried::Text(out, Pending { to, quiet, kind })
}

/// The first line of `text` (without its `\r\n`) and what follows it.
fn first_line(text: &[u8]) -> (&[u8], &[u8]) {
    match text.windows(2).position(|w| w == b"\r\n") {
        Some(i) => (&text[..i], &text[i + 2..]),
        None => (text, &[]),
    }
}

/// The number after `flag` among a meta reply's tokens (0 when absent or malformed).
fn meta_number(tokens: &[&[u8]], flag: u8) -> u64 {
    tokens
        .iter()
        .find(|t| t.first() == Some(&flag))
        .and_then(|t| std::str::from_utf8(&t[1..]).ok()?.parse().ok())
        .unwrap_or(0)
}

impl Pending {
    /// Appends to `out` the binary response for the text `reply` (one whole reply, as the
    /// proxy's server connection frames it); nothing for a quiet success.
    pub fn reply(&self, reply: &[u8], out: &mut Vec<u8>) {
        let to = self.to;
        let (line, rest) = first_line(reply);
        let tokens: Vec<&[u8]> = line
            .split(|&b| b == b' ')
            .filter(|t| !t.is_empty())
            .collect();
        let head = tokens.first().copied().unwrap_or_default();
        let error = |out: &mut Vec<u8>, status: Status| response::error(out, to, status);
        let success = |out: &mut Vec<u8>, cas: u64| {
            if !self.quiet {
                response::success(out, to, cas);
            }
        };
        match (&self.kind, head) {
            (Kind::Get(key), b"VA") => {
                let len = tokens
                    .get(1)
                    .and_then(|n| std::str::from_utf8(n).ok()?.parse::<usize>().ok())
                    .unwrap_or(0)
                    .min(rest.len());
                let flags = meta_number(&tokens[2..], b'f') as u32;
                let cas = meta_number(&tokens[2..], b'c');
                response::value(out, to, flags, key.as_deref(), &rest[..len], cas);
            }
            (Kind::Get(key), b"EN") => {
                if !self.quiet {
                    response::miss(out, to, key.as_deref());
                }
            }
            (Kind::Touch, b"HD") => {
                let flags = meta_number(&tokens[1..], b'f') as u32;
                response::touched(out, to, flags, meta_number(&tokens[1..], b'c'));
            }
            (Kind::Touch, b"EN") => error(out, Status::KeyNotFound),
            (Kind::Store(_) | Kind::Concat | Kind::Delete, b"HD") => {
                success(out, meta_number(&tokens[1..], b'c'))
            }
            (Kind::Store(Some(SetOp::Add)), b"NS") => error(out, Status::KeyExists),
            (Kind::Store(Some(SetOp::Replace)), b"NS") => error(out, Status::KeyNotFound),
            (Kind::Store(_) | Kind::Concat | Kind::Arith, b"NS") => error(out, Status::NotStored),
            (Kind::Store(_) | Kind::Concat | Kind::Delete | Kind::Arith, b"EX") => {
                error(out, Status::KeyExists)
            }
            (Kind::Store(_) | Kind::Concat | Kind::Delete | Kind::Arith, b"NF") => {
                error(out, Status::KeyNotFound)
            }
            (Kind::Arith, b"VA") => {
                let (number, _) = first_line(rest);
                let value = std::str::from_utf8(number)
                    .ok()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                if !self.quiet {
                    response::counter(out, to, value, meta_number(&tokens[2..], b'c'));
                }
            }
            (Kind::Flush, b"OK") => success(out, 0),
            (Kind::Stat, b"STAT" | b"END") => {
                let mut text = reply;
                while !text.is_empty() {
                    let (line, rest) = first_line(text);
                    text = rest;
                    if line == b"END" {
                        break;
                    }
                    if let Some(stat) = line.strip_prefix(b"STAT ") {
                        let (name, value) = match stat.iter().position(|&b| b == b' ') {
                            Some(i) => (&stat[..i], &stat[i + 1..]),
                            None => (stat, &[][..]),
                        };
                        response::stat(out, to, name, value);
                    }
                }
                response::stat_end(out, to);
            }
            (Kind::Arith, b"CLIENT_ERROR") if line.ends_with(b"non-numeric value") => {
                error(out, Status::NonNumeric)
            }
            (_, b"CLIENT_ERROR") => response::error_message(
                out,
                to,
                Status::InvalidArguments,
                line.strip_prefix(b"CLIENT_ERROR ").unwrap_or_default(),
            ),
            (_, b"SERVER_ERROR") => {
                let message = line.strip_prefix(b"SERVER_ERROR ").unwrap_or_default();
                if message.starts_with(b"out of memory") {
                    error(out, Status::OutOfMemory)
                } else if message.starts_with(b"object too large") {
                    error(out, Status::TooLarge)
                } else {
                    response::error_message(out, to, Status::TemporaryFailure, message)
                }
            }
            // `ERROR`, or a reply this request cannot have.
            _ => error(out, Status::UnknownCommand),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binary::{parse, Header, Opcode, HEADER_LEN, REQUEST_MAGIC};
    use crate::ParserConfig;

    fn request(opcode: Opcode, extras: &[u8], key: &[u8], value: &[u8], cas: u64) -> Vec<u8> {
        let mut out = Vec::new();
        Header {
            magic: REQUEST_MAGIC,
            opcode: opcode.as_u8(),
            key_len: key.len() as u16,
            extras_len: extras.len() as u8,
            data_type: 0,
            vbucket_or_status: 0,
            body_len: (extras.len() + key.len() + value.len()) as u32,
            opaque: 0xabcd,
            cas,
        }
        .write(&mut out);
        out.extend_from_slice(extras);
        out.extend_from_slice(key);
        out.extend_from_slice(value);
        out
    }

    fn carried(packet: &[u8]) -> (String, Pending) {
        let (req, used) = parse(packet, &ParserConfig::default()).unwrap();
        assert_eq!(used, packet.len());
        match to_text(&req) {
            Carried::Text(text, pending) => (String::from_utf8(text).unwrap(), pending),
            other => panic!("{other:?}"),
        }
    }

    /// A response's status, key, extras, value and CAS.
    type Answer = (u16, Vec<u8>, Vec<u8>, Vec<u8>, u64);

    /// The response `pending` makes of `reply`; `None` when it is no bytes at all.
    fn answer(pending: &Pending, reply: &[u8]) -> Option<Answer> {
        let mut out = Vec::new();
        pending.reply(reply, &mut out);
        if out.is_empty() {
            return None;
        }
        let h = Header::read(&out).unwrap();
        assert_eq!(h.opaque, 0xabcd);
        assert_eq!(out.len(), HEADER_LEN + h.body_len as usize, "one packet");
        let body = &out[HEADER_LEN..];
        let (extras, rest) = body.split_at(h.extras_len as usize);
        let (key, value) = rest.split_at(h.key_len as usize);
        Some((
            h.vbucket_or_status,
            key.to_vec(),
            extras.to_vec(),
            value.to_vec(),
            h.cas,
        ))
    }

    #[test]
    fn gets_carry_flags_cas_and_the_key_of_the_k_forms() {
        let (text, p) = carried(&request(Opcode::GetK, b"", b"k1", b"", 0));
        assert_eq!(text, "mg k1 v f c\r\n");
        assert_eq!(
            answer(&p, b"VA 3 f7 c42\r\nabc\r\n"),
            Some((
                0,
                b"k1".to_vec(),
                7u32.to_be_bytes().to_vec(),
                b"abc".to_vec(),
                42
            ))
        );
        assert_eq!(
            answer(&p, b"EN\r\n"),
            Some((1, b"k1".to_vec(), vec![], vec![], 0))
        );
        let (_, quiet) = carried(&request(Opcode::GetQ, b"", b"k1", b"", 0));
        assert_eq!(answer(&quiet, b"EN\r\n"), None);
        let gat = [0, 0, 0, 60];
        let (text, _) = carried(&request(Opcode::Gat, &gat, b"k", b"", 0));
        assert_eq!(text, "mg k v f c T60\r\n");
        let (text, p) = carried(&request(Opcode::Touch, &gat, b"k", b"", 0));
        assert_eq!(text, "mg k f c T60\r\n");
        assert_eq!(
            answer(&p, b"HD f9 c3\r\n"),
            Some((0, vec![], 9u32.to_be_bytes().to_vec(), vec![], 3))
        );
    }

    #[test]
    fn a_key_that_is_not_plain_text_goes_base64() {
        let (text, _) = carried(&request(Opcode::Get, b"", b"a b\n", b"", 0));
        assert_eq!(text, "mg YSBiCg== v f c b\r\n");
        let packet = request(Opcode::Set, &[0; 8], b"a b", b"v", 0);
        let (text, _) = carried(&packet);
        assert_eq!(text, "ms YSBi 1 F0 T0 c MS b\r\nv\r\n");
    }

    #[test]
    fn stores_map_each_refusal_to_memcached_s_status() {
        let extras = [0, 0, 0, 5, 0, 0, 1, 0];
        let (text, p) = carried(&request(Opcode::Add, &extras, b"k", b"val", 0));
        assert_eq!(text, "ms k 3 F5 T256 c ME\r\nval\r\n");
        assert_eq!(answer(&p, b"NS\r\n").unwrap().0, Status::KeyExists.code());
        assert_eq!(answer(&p, b"HD c9\r\n").unwrap().4, 9);
        let (text, p) = carried(&request(Opcode::Replace, &extras, b"k", b"v", 0));
        assert_eq!(text, "ms k 1 F5 T256 c MR\r\nv\r\n");
        assert_eq!(answer(&p, b"NS\r\n").unwrap().0, Status::KeyNotFound.code());
        // With a CAS every mode is compare-and-swap.
        let (text, p) = carried(&request(Opcode::Add, &extras, b"k", b"v", 77));
        assert_eq!(text, "ms k 1 F5 T256 c MS C77\r\nv\r\n");
        assert_eq!(answer(&p, b"EX\r\n").unwrap().0, Status::KeyExists.code());
        assert_eq!(answer(&p, b"NF\r\n").unwrap().0, Status::KeyNotFound.code());
        let (_, quiet) = carried(&request(Opcode::SetQ, &extras, b"k", b"v", 0));
        assert_eq!(answer(&quiet, b"HD c1\r\n"), None);
        assert_eq!(
            answer(&quiet, b"SERVER_ERROR out of memory storing object\r\n")
                .unwrap()
                .0,
            Status::OutOfMemory.code()
        );
        let (text, p) = carried(&request(Opcode::Prepend, b"", b"k", b"xy", 0));
        assert_eq!(text, "ms k 2 c MP\r\nxy\r\n");
        assert_eq!(answer(&p, b"NS\r\n").unwrap().0, Status::NotStored.code());
    }

    #[test]
    fn deletes_counters_flush_and_stats() {
        let (text, p) = carried(&request(Opcode::Delete, b"", b"k", b"", 5));
        assert_eq!(text, "md k C5\r\n");
        assert_eq!(answer(&p, b"NF\r\n").unwrap().0, 1);
        let mut extras = Vec::new();
        extras.extend_from_slice(&3u64.to_be_bytes());
        extras.extend_from_slice(&10u64.to_be_bytes());
        extras.extend_from_slice(&0u32.to_be_bytes());
        let (text, p) = carried(&request(Opcode::Increment, &extras, b"n", b"", 0));
        assert_eq!(text, "ma n MI D3 v c N0 J10\r\n");
        assert_eq!(
            answer(&p, b"VA 2 c8\r\n13\r\n"),
            Some((0, vec![], vec![], 13u64.to_be_bytes().to_vec(), 8))
        );
        assert_eq!(
            answer(
                &p,
                b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
            )
            .unwrap()
            .0,
            Status::NonNumeric.code()
        );
        extras[16..].copy_from_slice(&NO_AUTO_CREATE.to_be_bytes());
        let (text, _) = carried(&request(Opcode::Decrement, &extras, b"n", b"", 0));
        assert_eq!(text, "ma n MD D3 v c\r\n");
        let (text, p) = carried(&request(Opcode::Flush, b"", b"", b"", 0));
        assert_eq!(text, "flush_all\r\n");
        assert_eq!(answer(&p, b"OK\r\n").unwrap().0, 0);
        let (text, p) = carried(&request(Opcode::Stat, b"", b"", b"", 0));
        assert_eq!(text, "stats\r\n");
        let mut out = Vec::new();
        p.reply(b"STAT pid 12\r\nSTAT version 1.6\r\nEND\r\n", &mut out);
        let first = Header::read(&out).unwrap();
        assert_eq!(first.key_len, 3);
        assert_eq!(&out[HEADER_LEN..HEADER_LEN + 5], b"pid12");
        assert_eq!(out.len(), 3 * HEADER_LEN + 5 + 10);
    }

    #[test]
    fn errors_become_error_packets_with_their_message() {
        let (_, p) = carried(&request(Opcode::Get, b"", b"k", b"", 0));
        let (status, _, _, body, _) =
            answer(&p, b"SERVER_ERROR server 127.0.0.1:1 timed out\r\n").unwrap();
        assert_eq!(status, Status::TemporaryFailure.code());
        assert_eq!(body, b"server 127.0.0.1:1 timed out");
        assert_eq!(
            answer(&p, b"ERROR\r\n").unwrap().0,
            Status::UnknownCommand.code()
        );
        let (_, quiet) = carried(&request(Opcode::GetQ, b"", b"k", b"", 0));
        assert!(answer(&quiet, b"SERVER_ERROR busy\r\n").is_some());
    }

    #[test]
    fn noop_version_and_quit_are_answered_by_the_proxy() {
        for (op, local) in [
            (
                Opcode::Noop,
                LocalRequest::Noop as fn(ReplyTo) -> LocalRequest,
            ),
            (Opcode::Version, LocalRequest::Version),
        ] {
            let packet = request(op, b"", b"", b"", 0);
            let (req, _) = parse(&packet, &ParserConfig::default()).unwrap();
            assert_eq!(to_text(&req), Carried::Local(local(req.reply_to())));
        }
        let packet = request(Opcode::QuitQ, b"", b"", b"", 0);
        let (req, _) = parse(&packet, &ParserConfig::default()).unwrap();
        assert_eq!(
            to_text(&req),
            Carried::Local(LocalRequest::Quit(req.reply_to(), true))
        );
    }
}
