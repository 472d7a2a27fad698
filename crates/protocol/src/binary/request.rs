//! Parsed binary requests, borrowing keys and values from the read buffer, and their
//! encoding back to packets.
//!
//! Not here: validation (`parse.rs`). The opcode is not stored but derived from the
//! command and its `quiet`/`with_key` fields, so a request cannot name one command and
//! carry another's body.

use super::response::ReplyTo;
use super::{Header, Opcode, HEADER_LEN, REQUEST_MAGIC};
use crate::{ArithOp, StoreCommand};

/// One request: the command, and the header fields every command carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BinRequest<'a> {
    /// What to do.
    pub command: BinCommand<'a>,
    /// Echoed in the reply; lets a client match replies to pipelined requests.
    pub opaque: u32,
    /// CAS unique to compare (0: none). memcached honours it for set/add/replace,
    /// append/prepend, delete and incr/decr, and ignores it elsewhere.
    pub cas: u64,
}

/// The commands, one variant per family; `quiet` and `with_key` pick the opcode within it.
/// An `exptime` is memcached's 32-bit value (relative seconds, or a Unix time past 30 days);
/// widen it with `i64::from` for the storage engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinCommand<'a> {
    /// `Get`, `GetQ`, `GetK`, `GetKQ`.
    Get {
        /// The key (1 to 250 arbitrary bytes).
        key: &'a [u8],
        /// No reply on a miss.
        quiet: bool,
        /// The reply carries the key.
        with_key: bool,
    },
    /// `Gat`, `GatQ`, `GatK`, `GatKQ`: get and set a new expiration time.
    GetAndTouch {
        /// The key.
        key: &'a [u8],
        /// The new expiration time.
        exptime: u32,
        /// No reply on a miss.
        quiet: bool,
        /// The reply carries the key.
        with_key: bool,
    },
    /// `Touch`: set a new expiration time; the reply carries the flags but not the value.
    Touch {
        /// The key.
        key: &'a [u8],
        /// The new expiration time.
        exptime: u32,
    },
    /// `Set`, `Add`, `Replace` and their quiet forms.
    Store {
        /// Which one.
        op: SetOp,
        /// The key.
        key: &'a [u8],
        /// Client flags, returned with the value.
        flags: u32,
        /// Expiration time.
        exptime: u32,
        /// The value.
        value: &'a [u8],
        /// No reply on success.
        quiet: bool,
    },
    /// `Append`, `Prepend` and their quiet forms.
    Concat {
        /// Which one.
        op: ConcatOp,
        /// The key.
        key: &'a [u8],
        /// The bytes to add.
        value: &'a [u8],
        /// No reply on success.
        quiet: bool,
    },
    /// `Delete`, `DeleteQ`.
    Delete {
        /// The key.
        key: &'a [u8],
        /// No reply on success.
        quiet: bool,
    },
    /// `Increment`, `Decrement` and their quiet forms.
    Arith {
        /// Increment (wrapping at 2^64) or decrement (stopping at 0).
        op: ArithOp,
        /// The key.
        key: &'a [u8],
        /// The amount.
        delta: u64,
        /// The value a missing key is created with (and which is then returned).
        initial: u64,
        /// Expiration time of a created item; [`super::NO_AUTO_CREATE`] means a missing
        /// key is `KeyNotFound` instead.
        exptime: u32,
        /// No reply on success.
        quiet: bool,
    },
    /// `Flush`, `FlushQ`: invalidate every item, now or at `exptime`.
    Flush {
        /// The optional 4-byte extras; absent and `Some(0)` both mean now.
        exptime: Option<u32>,
        /// No reply.
        quiet: bool,
    },
    /// `Noop`: reply, and write out every reply queued so far (the end of a batch of quiet
    /// requests).
    Noop,
    /// `Version`.
    Version,
    /// `Stat`: the statistics group named by the key (empty: general statistics).
    Stat {
        /// The group, e.g. `settings`, `items`, `slabs`, `reset`, `detail on`.
        key: &'a [u8],
    },
    /// `Quit` (reply, then close) or `QuitQ` (close without reply).
    Quit {
        /// No reply.
        quiet: bool,
    },
}

/// `Set`, `Add` or `Replace`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SetOp {
    /// Store unconditionally.
    Set,
    /// Store only if the key is missing.
    Add,
    /// Store only if the key exists.
    Replace,
}

/// `Append` or `Prepend`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConcatOp {
    /// Add the bytes after the current value.
    Append,
    /// Add the bytes before the current value.
    Prepend,
}

fn pick(quiet: bool, loud: Opcode, quiet_op: Opcode) -> Opcode {
    if quiet {
        quiet_op
    } else {
        loud
    }
}

impl<'a> BinCommand<'a> {
    /// The opcode this command is sent with.
    pub fn opcode(&self) -> Opcode {
        use Opcode::*;
        match *self {
            BinCommand::Get {
                quiet, with_key, ..
            } => match (with_key, quiet) {
                (false, false) => Get,
                (false, true) => GetQ,
                (true, false) => GetK,
                (true, true) => GetKQ,
            },
            BinCommand::GetAndTouch {
                quiet, with_key, ..
            } => match (with_key, quiet) {
                (false, false) => Gat,
                (false, true) => GatQ,
                (true, false) => GatK,
                (true, true) => GatKQ,
            },
            BinCommand::Touch { .. } => Touch,
            BinCommand::Store { op, quiet, .. } => match op {
                SetOp::Set => pick(quiet, Set, SetQ),
                SetOp::Add => pick(quiet, Add, AddQ),
                SetOp::Replace => pick(quiet, Replace, ReplaceQ),
            },
            BinCommand::Concat { op, quiet, .. } => match op {
                ConcatOp::Append => pick(quiet, Append, AppendQ),
                ConcatOp::Prepend => pick(quiet, Prepend, PrependQ),
            },
            BinCommand::Delete { quiet, .. } => pick(quiet, Delete, DeleteQ),
            BinCommand::Arith { op, quiet, .. } => match op {
                ArithOp::Incr => pick(quiet, Increment, IncrementQ),
                ArithOp::Decr => pick(quiet, Decrement, DecrementQ),
            },
            BinCommand::Flush { quiet, .. } => pick(quiet, Flush, FlushQ),
            BinCommand::Noop => Noop,
            BinCommand::Version => Version,
            BinCommand::Stat { .. } => Stat,
            BinCommand::Quit { quiet } => pick(quiet, Quit, QuitQ),
        }
    }

    /// The key, for the commands that address an item.
    pub fn key(&self) -> Option<&'a [u8]> {
        match *self {
            BinCommand::Get { key, .. }
            | BinCommand::GetAndTouch { key, .. }
            | BinCommand::Touch { key, .. }
            | BinCommand::Store { key, .. }
            | BinCommand::Concat { key, .. }
            | BinCommand::Delete { key, .. }
            | BinCommand::Arith { key, .. } => Some(key),
            _ => None,
        }
    }
}

impl<'a> BinRequest<'a> {
    /// The opcode (see [`BinCommand::opcode`]).
    pub fn opcode(&self) -> Opcode {
        self.command.opcode()
    }

    /// What every reply to this request echoes. `Copy`, so it outlives the read buffer.
    pub fn reply_to(&self) -> ReplyTo {
        ReplyTo {
            opcode: self.opcode().as_u8(),
            opaque: self.opaque,
        }
    }

    /// Whether the opcode is a quiet variant (see [`Opcode::is_quiet`]).
    pub fn quiet(&self) -> bool {
        self.opcode().is_quiet()
    }

    /// The text-protocol store command with memcached's binary semantics: set, add and
    /// replace with a non-zero CAS are a `Cas` (a missing key is "not found", even for add).
    /// Append and prepend keep their command; with a non-zero CAS the server must also
    /// compare it (mismatch: `KeyExists`). `None` for non-storage commands.
    pub fn store_command(&self) -> Option<StoreCommand> {
        match self.command {
            BinCommand::Store { .. } if self.cas != 0 => Some(StoreCommand::Cas),
            BinCommand::Store { op, .. } => Some(match op {
                SetOp::Set => StoreCommand::Set,
                SetOp::Add => StoreCommand::Add,
                SetOp::Replace => StoreCommand::Replace,
            }),
            BinCommand::Concat { op, .. } => Some(match op {
                ConcatOp::Append => StoreCommand::Append,
                ConcatOp::Prepend => StoreCommand::Prepend,
            }),
            _ => None,
        }
    }

    /// Appends this request as a packet: data type and vbucket 0, body length exactly
    /// extras + key + value. Parsing the output gives this request back.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut extras = [0u8; 20];
        let (extras_len, key, value): (usize, &[u8], &[u8]) = match self.command {
            BinCommand::Get { key, .. } => (0, key, b""),
            BinCommand::GetAndTouch { key, exptime, .. } | BinCommand::Touch { key, exptime } => {
                extras[..4].copy_from_slice(&exptime.to_be_bytes());
                (4, key, b"")
            }
            BinCommand::Store {
                key,
                flags,
                exptime,
                value,
                ..
            } => {
                extras[..4].copy_from_slice(&flags.to_be_bytes());
                extras[4..8].copy_from_slice(&exptime.to_be_bytes());
                (8, key, value)
            }
            BinCommand::Concat { key, value, .. } => (0, key, value),
            BinCommand::Delete { key, .. } => (0, key, b""),
            BinCommand::Arith {
                key,
                delta,
                initial,
                exptime,
                ..
            } => {
                extras[..8].copy_from_slice(&delta.to_be_bytes());
                extras[8..16].copy_from_slice(&initial.to_be_bytes());
                extras[16..].copy_from_slice(&exptime.to_be_bytes());
                (20, key, b"")
            }
            BinCommand::Flush { exptime, .. } => match exptime {
                Some(t) => {
                    extras[..4].copy_from_slice(&t.to_be_bytes());
                    (4, b"", b"")
                }
                None => (0, b"", b""),
            },
            BinCommand::Stat { key } => (0, key, b""),
            BinCommand::Noop | BinCommand::Version | BinCommand::Quit { .. } => (0, b"", b""),
        };
        let key_len = u16::try_from(key.len()).expect("binary key over 65535 bytes");
        let body_len = u32::try_from(extras_len + key.len() + value.len())
            .expect("binary request body over 4 GiB");
        out.reserve(HEADER_LEN + body_len as usize);
        Header {
            magic: REQUEST_MAGIC,
            opcode: self.opcode().as_u8(),
            key_len,
            extras_len: extras_len as u8,
            data_type: 0,
            vbucket_or_status: 0,
            body_len,
            opaque: self.opaque,
            cas: self.cas,
        }
        .write(out);
        out.extend_from_slice(&extras[..extras_len]);
        out.extend_from_slice(key);
        out.extend_from_slice(value);
    }
}
