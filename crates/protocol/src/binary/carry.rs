//! Text and meta requests carried to a server that speaks only the binary protocol
//! (memcached with `-S`), and its binary responses turned back into the text reply: for a
//! proxy whose clients speak text (the router's pools with `auth_mechanism = "sasl"`).
//! The reverse of [`super::bridge`].
//!
//! [`carry`] appends the packets that do what one parsed request asks and returns the
//! [`Awaited`] reply; [`Awaited::take`] is fed the response packets in order and writes the
//! text reply once the last has come. Responses come in request order, so nothing is matched
//! by opaque: a multi-key get is `GetKQ` per key then a `Noop` (misses are silent; the noop
//! ends it), `stats` ends at the empty stat.
//!
//! | text | binary | reply |
//! |---|---|---|
//! | `get`, `gets`, `gat`, `gats` | `GetKQ`/`GatKQ` per key, `Noop` | `VALUE` per hit, `END` |
//! | `set`, `add`, `replace`, `append`, `prepend`, `cas` | the same command (`cas`: `Set` with the CAS) | `STORED`, `NOT_STORED`, `EXISTS`, `NOT_FOUND` |
//! | `delete KEY` (no hold-off), `incr`, `decr`, `touch` | `Delete`, `Increment`/`Decrement` (no auto-create), `Touch` | as memcached's text replies |
//! | `flush_all`, `version`, `stats [group]`, `verbosity` | `Flush`, `Version`, `Stat`, `Noop` | `OK`, `VERSION`, `STAT`… `END`, `OK` |
//! | `mg KEY` with `v f c k s O b T q` | `GetK` (`GatK` with `T`) | `VA`/`HD` with the flags asked, `EN` |
//! | `ms KEY LEN` with `F T C M c k O b q` | `Set`, `Add`, `Replace`, `Append`, `Prepend` | `HD`, `NS`, `EX`, `NF` |
//! | `md KEY` with `C k O b q` | `Delete` | `HD`, `NF`, `EX` |
//! | `ma KEY` with `N J D M v c k O b q` | `Increment`/`Decrement` (`N`: auto-create) | `HD`, `VA`, `NF`, `EX` |
//! | `mn` | `Noop` | `MN` |
//!
//! What the binary protocol cannot express (leases and stale reads, `mg t`/`h`/`l`, `md I`,
//! delete hold-offs, `lease-get`, `me`, admin commands) is not sent: a `Noop` keeps the
//! order, and the client hears `CLIENT_ERROR not carried over the binary protocol: …`.

use super::request::{BinCommand, BinRequest, ConcatOp, SetOp};
use super::NO_AUTO_CREATE;
use crate::flags::MetaFlags;
use crate::request::{Get, GetKind, Request, StoreCommand};

/// memcached's binary `exptime` for a text one: negative (expired at once) becomes a Unix
/// time long past; beyond 32 bits is capped.
fn exptime(t: i64) -> u32 {
    /// Past 30 days memcached reads an exptime as a Unix time: this one is in 1970.
    const LONG_AGO: u32 = 60 * 60 * 24 * 30 + 1;
    if t < 0 {
        LONG_AGO
    } else {
        u32::try_from(t).unwrap_or(u32::MAX)
    }
}

/// A reply being put together from response packets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Awaited {
    shape: Shape,
    /// Text gathered so far (a multi-packet reply's).
    text: Vec<u8>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Shape {
    /// `VALUE` lines until the noop; whether they carry the CAS.
    Values {
        cas: bool,
    },
    /// `STAT` lines until the empty stat.
    Stats,
    /// One response to a text storage command.
    Stored(StoreCommand),
    Deleted,
    Counter,
    Touched,
    /// `OK` (flush, verbosity).
    Ok,
    Version,
    /// The noop sent in place of a request not carried: this reply.
    Refused(Vec<u8>),
    Meta(MetaShape),
    /// `MN`.
    MetaNoop,
}

/// A meta request's reply: its kind and the return flags asked for, in request order.
#[derive(Clone, Debug, PartialEq, Eq)]
struct MetaShape {
    kind: MetaKind,
    /// The return flags (`f c k s O b`), with `k`'s key and `O`'s token.
    returns: Vec<(u8, Vec<u8>)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MetaKind {
    /// `mg`; whether the value was asked for.
    Get {
        value: bool,
    },
    /// `ms`, with its mode and whether a CAS was given.
    Set {
        mode: StoreCommand,
        cas: bool,
    },
    Delete,
    /// `ma`; whether the value was asked for.
    Arith {
        value: bool,
    },
}

/// The return flags of a meta request (those the binary responses can fill in), or the
/// first flag that cannot be carried. `allowed` are the flags this command may have.
fn meta_returns(
    flags: &MetaFlags<'_>,
    key: &[u8],
    allowed: &[u8],
) -> Result<Vec<(u8, Vec<u8>)>, u8> {
    let mut returns = Vec::new();
    for flag in flags.iter() {
        if !allowed.contains(&flag.letter) {
            return Err(flag.letter);
        }
        match flag.letter {
            b'f' | b'c' | b's' | b'b' => returns.push((flag.letter, Vec::new())),
            b'k' => returns.push((b'k', key.to_vec())),
            b'O' => returns.push((b'O', flag.token.to_vec())),
            _ => {}
        }
    }
    Ok(returns)
}

/// Appends the packets that carry `request` to `out`; the reply to expect.
pub fn carry(request: &Request<'_>, out: &mut Vec<u8>) -> Awaited {
    let shape = match encode(request, out) {
        Ok(shape) => shape,
        Err(what) => {
            packet(out, BinCommand::Noop, 0);
            Shape::Refused(
                format!("CLIENT_ERROR not carried over the binary protocol: {what}\r\n")
                    .into_bytes(),
            )
        }
    };
    Awaited {
        shape,
        text: Vec::new(),
    }
}

fn packet(out: &mut Vec<u8>, command: BinCommand<'_>, cas: u64) {
    BinRequest {
        command,
        opaque: 0,
        cas,
    }
    .encode(out);
}

/// The packets for `request`, or what of it cannot be carried.
fn encode(request: &Request<'_>, out: &mut Vec<u8>) -> Result<Shape, String> {
    Ok(match *request {
        Request::Get(Get {
            kind,
            exptime: t,
            keys,
        }) => {
            if kind == GetKind::LeaseGet {
                return Err("lease-get".into());
            }
            for key in keys {
                let command = if kind.touches() {
                    BinCommand::GetAndTouch {
                        key,
                        exptime: exptime(t),
                        quiet: true,
                        with_key: true,
                    }
                } else {
                    BinCommand::Get {
                        key,
                        quiet: true,
                        with_key: true,
                    }
                };
                packet(out, command, 0);
            }
            packet(out, BinCommand::Noop, 0);
            Shape::Values {
                cas: kind.returns_cas(),
            }
        }
        Request::Store(s) => {
            let (command, cas) = match s.command {
                StoreCommand::Set
                | StoreCommand::Add
                | StoreCommand::Replace
                | StoreCommand::Cas => {
                    let op = match s.command {
                        StoreCommand::Add => SetOp::Add,
                        StoreCommand::Replace => SetOp::Replace,
                        _ => SetOp::Set,
                    };
                    let command = BinCommand::Store {
                        op,
                        key: s.key,
                        flags: s.flags,
                        exptime: exptime(s.exptime),
                        value: s.data,
                        quiet: false,
                    };
                    (
                        command,
                        if s.command == StoreCommand::Cas {
                            s.cas
                        } else {
                            0
                        },
                    )
                }
                StoreCommand::Append | StoreCommand::Prepend => {
                    let op = if s.command == StoreCommand::Append {
                        ConcatOp::Append
                    } else {
                        ConcatOp::Prepend
                    };
                    let command = BinCommand::Concat {
                        op,
                        key: s.key,
                        value: s.data,
                        quiet: false,
                    };
                    (command, 0)
                }
                StoreCommand::LeaseSet => return Err("lease-set".into()),
            };
            packet(out, command, cas);
            Shape::Stored(s.command)
        }
        Request::Delete {
            holdoff: 0, key, ..
        } => {
            packet(out, BinCommand::Delete { key, quiet: false }, 0);
            Shape::Deleted
        }
        Request::Delete { .. } => return Err("a delete hold-off".into()),
        Request::Arith { op, key, delta, .. } => {
            let command = BinCommand::Arith {
                op,
                key,
                delta,
                initial: 0,
                exptime: NO_AUTO_CREATE,
                quiet: false,
            };
            packet(out, command, 0);
            Shape::Counter
        }
        Request::Touch {
            key, exptime: t, ..
        } => {
            packet(
                out,
                BinCommand::Touch {
                    key,
                    exptime: exptime(t),
                },
                0,
            );
            Shape::Touched
        }
        Request::FlushAll { delay, .. } => {
            let exptime = (delay > 0).then(|| exptime(delay));
            packet(
                out,
                BinCommand::Flush {
                    exptime,
                    quiet: false,
                },
                0,
            );
            Shape::Ok
        }
        Request::Verbosity { .. } => {
            packet(out, BinCommand::Noop, 0);
            Shape::Ok
        }
        Request::Version => {
            packet(out, BinCommand::Version, 0);
            Shape::Version
        }
        Request::Stats { args } => {
            packet(
                out,
                BinCommand::Stat {
                    key: args.as_bytes().trim_ascii(),
                },
                0,
            );
            Shape::Stats
        }
        Request::MetaNoop => {
            packet(out, BinCommand::Noop, 0);
            Shape::MetaNoop
        }
        Request::MetaGet(m) => {
            let key = m.key.bytes();
            let returns = meta_returns(&m.flags, m.key.raw(), b"vfcksObTq")
                .map_err(|f| format!("mg flag {}", f as char))?;
            let command = match m.flags.ttl() {
                Some(t) => BinCommand::GetAndTouch {
                    key: &key,
                    exptime: exptime(t),
                    quiet: false,
                    with_key: true,
                },
                None => BinCommand::Get {
                    key: &key,
                    quiet: false,
                    with_key: true,
                },
            };
            packet(out, command, 0);
            Shape::Meta(MetaShape {
                kind: MetaKind::Get {
                    value: m.flags.has(b'v'),
                },
                returns,
            })
        }
        Request::MetaSet(m) => {
            let key = m.key.bytes();
            let returns = meta_returns(&m.flags, m.key.raw(), b"FTCMckObq")
                .map_err(|f| format!("ms flag {}", f as char))?;
            let cas = m.flags.compare_cas().unwrap_or(0);
            let command = match m.mode {
                StoreCommand::Append | StoreCommand::Prepend => BinCommand::Concat {
                    op: if m.mode == StoreCommand::Append {
                        ConcatOp::Append
                    } else {
                        ConcatOp::Prepend
                    },
                    key: &key,
                    value: m.data,
                    quiet: false,
                },
                mode => BinCommand::Store {
                    op: match mode {
                        StoreCommand::Add => SetOp::Add,
                        StoreCommand::Replace => SetOp::Replace,
                        _ => SetOp::Set,
                    },
                    key: &key,
                    flags: m.flags.client_flags().unwrap_or(0),
                    exptime: exptime(m.flags.ttl().unwrap_or(0)),
                    value: m.data,
                    quiet: false,
                },
            };
            packet(out, command, cas);
            Shape::Meta(MetaShape {
                kind: MetaKind::Set {
                    mode: m.mode,
                    cas: cas != 0,
                },
                returns,
            })
        }
        Request::MetaDelete(m) => {
            let key = m.key.bytes();
            let returns = meta_returns(&m.flags, m.key.raw(), b"CkObq")
                .map_err(|f| format!("md flag {}", f as char))?;
            let cas = m.flags.compare_cas().unwrap_or(0);
            packet(
                out,
                BinCommand::Delete {
                    key: &key,
                    quiet: false,
                },
                cas,
            );
            Shape::Meta(MetaShape {
                kind: MetaKind::Delete,
                returns,
            })
        }
        Request::MetaArithmetic(m) => {
            let key = m.key.bytes();
            let returns = meta_returns(&m.flags, m.key.raw(), b"NJDMvckObq")
                .map_err(|f| format!("ma flag {}", f as char))?;
            let cas = m.flags.compare_cas().unwrap_or(0);
            let command = BinCommand::Arith {
                op: m.mode,
                key: &key,
                delta: m.flags.delta().unwrap_or(1),
                initial: m.flags.initial().unwrap_or(0),
                exptime: m
                    .flags
                    .vivify_ttl()
                    .map_or(NO_AUTO_CREATE, |t| exptime(t).min(NO_AUTO_CREATE - 1)),
                quiet: false,
            };
            packet(out, command, cas);
            Shape::Meta(MetaShape {
                kind: MetaKind::Arith {
                    value: m.flags.has(b'v'),
                },
                returns,
            })
        }
        Request::Quit => return Err("quit".into()),
        Request::MetaDebug { .. } => return Err("me".into()),
        Request::Other { command, .. } => return Err(String::from_utf8_lossy(command).into()),
    })
}

mod reply;
pub use reply::{response, Response};

#[cfg(test)]
mod tests;
