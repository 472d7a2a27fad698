//! Writing a [`Request`] back to the wire, as the router and client library need to forward
//! or issue requests.
//!
//! Not here: responses (`response.rs`). The output is canonical (single spaces, `\r\n`,
//! numbers in plain decimal), so it is not byte-identical to what a client sent, but parsing
//! it yields an equal `Request`; the property tests check that round trip.

use crate::number::{push_i64, push_u64};
use crate::request::{GetKind, Request};
use crate::tokens::Tokens;
use crate::MetaFlags;

fn tokens(out: &mut Vec<u8>, toks: Tokens<'_>) {
    for t in toks {
        out.push(b' ');
        out.extend_from_slice(t);
    }
}

fn meta_flags(out: &mut Vec<u8>, flags: &MetaFlags<'_>) {
    for f in flags.iter() {
        out.push(b' ');
        out.push(f.letter);
        out.extend_from_slice(f.token);
    }
}

fn noreply(out: &mut Vec<u8>, noreply: bool) {
    if noreply {
        out.extend_from_slice(b" noreply");
    }
}

impl Request<'_> {
    /// Appends this request in wire form (command line, and data block for storage).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Request::Get(g) => {
                out.extend_from_slice(g.kind.name());
                if matches!(g.kind, GetKind::Gat | GetKind::Gats) {
                    out.push(b' ');
                    push_i64(out, g.exptime);
                }
                tokens(out, g.keys);
            }
            Request::Store(s) => {
                out.extend_from_slice(s.command.name());
                out.push(b' ');
                out.extend_from_slice(s.key);
                if s.command == crate::StoreCommand::LeaseSet {
                    out.push(b' ');
                    push_u64(out, s.cas);
                }
                out.push(b' ');
                push_u64(out, u64::from(s.flags));
                out.push(b' ');
                push_i64(out, s.exptime);
                out.push(b' ');
                push_u64(out, s.data.len() as u64);
                if s.command == crate::StoreCommand::Cas {
                    out.push(b' ');
                    push_u64(out, s.cas);
                }
                noreply(out, s.noreply);
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(s.data);
            }
            Request::Delete {
                key,
                holdoff,
                noreply: nr,
            } => {
                out.extend_from_slice(b"delete ");
                out.extend_from_slice(key);
                // memcached takes a last token `noreply` as the flag, even when it is the
                // key: a key named so, with replies, carries an explicit zero hold-off.
                if *holdoff != 0 || (!*nr && key == b"noreply") {
                    out.push(b' ');
                    push_u64(out, u64::from(*holdoff));
                }
                noreply(out, *nr);
            }
            Request::Arith {
                op,
                key,
                delta,
                noreply: nr,
            } => {
                out.extend_from_slice(match op {
                    crate::ArithOp::Incr => b"incr ",
                    crate::ArithOp::Decr => b"decr ",
                });
                out.extend_from_slice(key);
                out.push(b' ');
                push_u64(out, *delta);
                noreply(out, *nr);
            }
            Request::Touch {
                key,
                exptime,
                noreply: nr,
            } => {
                out.extend_from_slice(b"touch ");
                out.extend_from_slice(key);
                out.push(b' ');
                push_i64(out, *exptime);
                noreply(out, *nr);
            }
            Request::FlushAll { delay, noreply: nr } => {
                out.extend_from_slice(b"flush_all");
                if *delay != 0 {
                    out.push(b' ');
                    push_i64(out, *delay);
                }
                noreply(out, *nr);
            }
            Request::Version => out.extend_from_slice(b"version"),
            Request::Verbosity { level, noreply: nr } => {
                out.extend_from_slice(b"verbosity ");
                push_u64(out, u64::from(*level));
                noreply(out, *nr);
            }
            Request::Stats { args } => {
                out.extend_from_slice(b"stats");
                tokens(out, *args);
            }
            Request::Quit => out.extend_from_slice(b"quit"),
            Request::MetaGet(m) | Request::MetaDelete(m) => {
                out.extend_from_slice(if matches!(self, Request::MetaGet(_)) {
                    b"mg "
                } else {
                    b"md "
                });
                out.extend_from_slice(m.key.raw());
                meta_flags(out, &m.flags);
            }
            Request::MetaSet(m) => {
                out.extend_from_slice(b"ms ");
                out.extend_from_slice(m.key.raw());
                out.push(b' ');
                push_u64(out, m.data.len() as u64);
                meta_flags(out, &m.flags);
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(m.data);
            }
            Request::MetaArithmetic(m) => {
                out.extend_from_slice(b"ma ");
                out.extend_from_slice(m.key.raw());
                meta_flags(out, &m.flags);
            }
            Request::MetaNoop => out.extend_from_slice(b"mn"),
            Request::MetaDebug { key } => {
                out.extend_from_slice(b"me ");
                out.extend_from_slice(key.raw());
                if key.is_base64() {
                    out.extend_from_slice(b" b");
                }
            }
            Request::Other { command, args } => {
                out.extend_from_slice(command);
                tokens(out, *args);
            }
        }
        out.extend_from_slice(b"\r\n");
    }
}
