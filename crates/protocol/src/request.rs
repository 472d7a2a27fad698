//! The parsed request types: every text and meta command memfleet understands, borrowing
//! keys, tokens and data blocks from the caller's read buffer.
//!
//! Not here: parsing (`text.rs`, `meta.rs`), the meta flag set (`flags.rs`), or encoding
//! requests back to bytes (`encode.rs`). The numbers hold what memcached 1.6 would use,
//! including its truncations (see `number.rs`): an `exptime` is the 32-bit value memcached
//! keeps, widened to `i64` for `memfleet_storage::Expiry::from_memcached`.

use crate::base64::{decode_key, KeyBuf};
use crate::flags::MetaFlags;
use crate::tokens::Tokens;
use core::ops::Deref;

/// One parsed request. Borrowed slices point into the buffer given to [`crate::parse`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    /// `get`/`gets`/`gat`/`gats`: one or more keys (each at most 250 bytes, checked).
    /// The reply is a `VALUE` block per hit and `END`.
    Get(Get<'a>),
    /// `set`/`add`/`replace`/`append`/`prepend`/`cas` with its data block.
    Store(Store<'a>),
    /// `delete <key> [<seconds>] [noreply]`. memcached 1.6 accepts only `0` for the time;
    /// memfleet takes any number of seconds as a delete hold-off (Facebook §4.3), as
    /// mcrouter sends it.
    Delete {
        /// The key.
        key: &'a [u8],
        /// Seconds during which `add` is refused and gets miss (0: a plain delete).
        holdoff: u32,
        /// Suppress the reply.
        noreply: bool,
    },
    /// `incr`/`decr <key> <delta> [noreply]`.
    Arith {
        /// Increment or decrement.
        op: ArithOp,
        /// The key.
        key: &'a [u8],
        /// The unsigned 64-bit delta.
        delta: u64,
        /// Suppress the reply.
        noreply: bool,
    },
    /// `touch <key> <exptime> [noreply]`.
    Touch {
        /// The key.
        key: &'a [u8],
        /// New expiration time, memcached's convention.
        exptime: i64,
        /// Suppress the reply.
        noreply: bool,
    },
    /// `flush_all [delay] [noreply]`: memcached treats a delay <= 0 as "now".
    FlushAll {
        /// Delay in seconds (or a Unix time past 30 days), 0 when absent.
        delay: i64,
        /// Suppress the reply.
        noreply: bool,
    },
    /// `version`: reply `VERSION <version>`.
    Version,
    /// `verbosity <level> [noreply]`: reply `OK`.
    Verbosity {
        /// The requested level (memcached clamps it to its maximum).
        level: u32,
        /// Suppress the reply.
        noreply: bool,
    },
    /// `stats [args...]`: general statistics when `args` is empty.
    Stats {
        /// The arguments, e.g. `items`, `slabs`, `settings`, `reset`, `detail on`.
        args: Tokens<'a>,
    },
    /// `quit`: close the connection without a reply.
    Quit,
    /// `mg <key> <flags>*`.
    MetaGet(Meta<'a>),
    /// `ms <key> <datalen> <flags>*` with its data block.
    MetaSet(MetaSet<'a>),
    /// `md <key> <flags>*`.
    MetaDelete(Meta<'a>),
    /// `ma <key> <flags>*`.
    MetaArithmetic(MetaArith<'a>),
    /// `mn`: reply `MN` (flush point for pipelined quiet requests).
    MetaNoop,
    /// `me <key> [b]`: reply `ME <key> <k>=<v>*` or `EN` (see `response::meta_debug`).
    MetaDebug {
        /// The key; base64 when the second token was exactly `b`.
        key: MetaKey<'a>,
    },
    /// A memcached administrative command this crate does not model (`shutdown`, `slabs`,
    /// `cache_memlimit`, `lru_crawler`, `watch`, `lru`, `extstore`, `refresh_certs`), with the
    /// token-count checks memcached makes before dispatching already applied. A server that
    /// does not implement it can reply `ERROR\r\n`, which is what memcached says for most of
    /// them when disabled (but `shutdown` says `SERVER_ERROR: shutdown not enabled`, as
    /// memcached 1.6.45 does).
    Other {
        /// The command name.
        command: &'a [u8],
        /// Its arguments.
        args: Tokens<'a>,
    },
}

/// Which retrieval command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GetKind {
    /// `get`.
    Get,
    /// `gets`: also return CAS.
    Gets,
    /// `gat`: get and touch.
    Gat,
    /// `gats`: get and touch, return CAS.
    Gats,
    /// mcrouter's `lease-get`: a hit is a `VALUE` line; a miss is an `LVALUE` line carrying a
    /// lease token (1: a hot miss, retry shortly) and any stale value.
    LeaseGet,
}

impl GetKind {
    /// Whether `VALUE` lines carry the CAS unique.
    pub fn returns_cas(self) -> bool {
        matches!(self, GetKind::Gets | GetKind::Gats)
    }

    /// Whether hits get a new expiration time.
    pub fn touches(self) -> bool {
        matches!(self, GetKind::Gat | GetKind::Gats)
    }

    /// The command name.
    pub fn name(self) -> &'static [u8] {
        match self {
            GetKind::Get => b"get",
            GetKind::Gets => b"gets",
            GetKind::Gat => b"gat",
            GetKind::Gats => b"gats",
            GetKind::LeaseGet => b"lease-get",
        }
    }
}

/// A retrieval request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Get<'a> {
    /// Which command.
    pub kind: GetKind,
    /// For `gat`/`gats`, the new expiration time; 0 otherwise.
    pub exptime: i64,
    /// The keys, in order (memcached answers in that order, repeats included). May be empty
    /// for `gat <exptime>` alone, which memcached answers with just `END`.
    pub keys: Tokens<'a>,
}

/// Which storage command (`ms` modes map onto the first five).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StoreCommand {
    /// Store unconditionally.
    Set,
    /// Store only if absent.
    Add,
    /// Store only if present.
    Replace,
    /// Append to an existing value.
    Append,
    /// Prepend to an existing value.
    Prepend,
    /// Store only if the CAS unique matches.
    Cas,
    /// mcrouter's `lease-set <key> <token> <flags> <exptime> <bytes>`: store if the token is
    /// the key's outstanding lease (the token travels in [`Store::cas`]).
    LeaseSet,
}

impl StoreCommand {
    /// The text-protocol command name.
    pub fn name(self) -> &'static [u8] {
        match self {
            StoreCommand::Set => b"set",
            StoreCommand::Add => b"add",
            StoreCommand::Replace => b"replace",
            StoreCommand::Append => b"append",
            StoreCommand::Prepend => b"prepend",
            StoreCommand::Cas => b"cas",
            StoreCommand::LeaseSet => b"lease-set",
        }
    }

    /// The `ms` mode letter (`M` flag); `Cas` has none (it is `C` on a set).
    pub fn meta_mode(self) -> Option<u8> {
        match self {
            StoreCommand::Set => Some(b'S'),
            StoreCommand::Add => Some(b'E'),
            StoreCommand::Replace => Some(b'R'),
            StoreCommand::Append => Some(b'A'),
            StoreCommand::Prepend => Some(b'P'),
            StoreCommand::Cas | StoreCommand::LeaseSet => None,
        }
    }
}

/// A text-protocol storage request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Store<'a> {
    /// Which command.
    pub command: StoreCommand,
    /// The key (at most 250 bytes).
    pub key: &'a [u8],
    /// Client flags (32 bits, opaque to the server).
    pub flags: u32,
    /// Expiration time, memcached's convention.
    pub exptime: i64,
    /// CAS unique to compare (`cas`), or the lease token (`lease-set`); 0 otherwise.
    pub cas: u64,
    /// Suppress the reply.
    pub noreply: bool,
    /// The value, without its trailing `\r\n`.
    pub data: &'a [u8],
}

/// `incr` or `decr` (and `ma` modes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArithOp {
    /// Add, wrapping at 2^64.
    Incr,
    /// Subtract, stopping at 0.
    Decr,
}

/// A meta key: the raw token, and whether it is base64 (`b` flag).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetaKey<'a> {
    pub(crate) raw: &'a [u8],
    pub(crate) base64: bool,
}

impl<'a> MetaKey<'a> {
    /// A key as given on the command line.
    #[inline]
    pub fn new(raw: &'a [u8], base64: bool) -> Self {
        MetaKey { raw, base64 }
    }

    /// The token as sent (base64 text when [`MetaKey::is_base64`]).
    #[inline]
    pub fn raw(&self) -> &'a [u8] {
        self.raw
    }

    /// Whether the key was sent base64-encoded (the `b` flag).
    #[inline]
    pub fn is_base64(&self) -> bool {
        self.base64
    }

    /// The key's bytes: borrowed, or decoded onto the stack for a base64 key. The parser has
    /// already checked that a base64 key decodes.
    #[inline]
    pub fn bytes(&self) -> KeyBytes<'a> {
        if self.base64 {
            if let Some(k) = decode_key(self.raw) {
                return KeyBytes::Decoded(k);
            }
        }
        KeyBytes::Borrowed(self.raw)
    }
}

/// The bytes of a [`MetaKey`], without allocating.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyBytes<'a> {
    /// A plain key, borrowed from the request.
    Borrowed(&'a [u8]),
    /// A decoded base64 key.
    Decoded(KeyBuf),
}

impl Deref for KeyBytes<'_> {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        match self {
            KeyBytes::Borrowed(b) => b,
            KeyBytes::Decoded(k) => k.as_bytes(),
        }
    }
}

/// `mg` and `md`: a key and flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta<'a> {
    /// The key.
    pub key: MetaKey<'a>,
    /// The flags, in request order.
    pub flags: MetaFlags<'a>,
}

/// `ms`: key, flags, mode and data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetaSet<'a> {
    /// The key.
    pub key: MetaKey<'a>,
    /// The flags, in request order.
    pub flags: MetaFlags<'a>,
    /// The `M` mode (default `Set`); never `Cas`, see [`MetaSet::command`].
    pub mode: StoreCommand,
    /// The value, without its trailing `\r\n`.
    pub data: &'a [u8],
}

impl MetaSet<'_> {
    /// The storage operation memcached performs: like memcached, a `C` (compare CAS) flag
    /// turns `Set` and `Replace` into `Cas`; `Add`, `Append` and `Prepend` keep their mode (the
    /// server applies the CAS check to append/prepend itself, and add ignores it).
    pub fn command(&self) -> StoreCommand {
        match (self.mode, self.flags.compare_cas()) {
            (StoreCommand::Set | StoreCommand::Replace, Some(_)) => StoreCommand::Cas,
            (mode, _) => mode,
        }
    }
}

/// `ma`: key, flags and mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetaArith<'a> {
    /// The key.
    pub key: MetaKey<'a>,
    /// The flags, in request order (`D` delta defaults to 1, `J` initial to 0).
    pub flags: MetaFlags<'a>,
    /// The `M` mode (default `Incr`).
    pub mode: ArithOp,
}
