//! Leases, stale values and what every mark means (Facebook §3.2.1, memcached's meta `N`,
//! `R`, `I` flags).
//!
//! A key's single hash slot can point at more than a plain value. The item's marks
//! (`item.rs`) say which; [`Visibility`] is the one table of what each command sees:
//!
//! | item                         | get / mg | lease read (lease-get, mg N) | add     | replace, incr, touch |
//! |------------------------------|----------|------------------------------|---------|----------------------|
//! | value                        | hit      | hit (R may win a token)      | refused | yes                  |
//! | STALE (meta `md I`)          | hit, X   | stale + token (or hot miss)  | refused | yes (fresh again)    |
//! | EMPTY (lease placeholder)    | miss¹    | hot miss (or token if old)   | refused | no                   |
//! | STALE+DELETED (after delete) | miss     | stale + token (or hot miss)  | stored  | no                   |
//! | TOMBSTONE (delete hold-off)  | miss     | hot miss, no token           | refused | no                   |
//!
//! ¹ `mg` without `N` sees a placeholder as memcached does (an empty hit flagged `Z`); a
//! plain `get` misses, where memcached would return an empty value nobody stored.
//!
//! **Tokens.** A lease is a token stored *in the item* (with its issue time), not a bucket
//! CAS: another key of the same hash bucket being written must not void it. Whoever holds
//! the item's token may store over it (`lease-set`, or `ms` with `C<token>`: the item's CAS
//! *is* its token while it has one). A delete replaces the item with a copy that has no
//! token, so a set racing with the delete is refused — the stale-set prevention — and so is
//! a `lease-set` whose token is not the item's, even over a value someone else has filled
//! since (that value may be newer than the late one). One token
//! per key per [`crate::Config::lease_interval`]: misses meanwhile are hot misses, told to
//! wait (and given the stale value if there is one); after the interval the next miss gets a
//! new token, so a client that died holding one blocks its key for at most the interval.
//! memcached hands a key's token out once per item lifetime; the rate limit is memfleet's.
//!
//! This file holds the rules as data (what a mark means, what a lease read asks for); the
//! operations that apply them are the handle's (`handle/lease.rs`).

use crate::clock::Expiry;
use crate::item::{MARK_DELETED, MARK_EMPTY, MARK_TOMBSTONE};

/// What the commands may do with an item, from its marks (see the module table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Visibility {
    /// A value a client stored, fresh or invalidated (`md I`): plain reads (`get`, `gets`,
    /// `gat`, `me`, binary gets) return it, and replace, incr/decr, append, touch and a
    /// bucket-CAS compare apply to it (the rewritten copy is fresh), as in memcached.
    pub value: bool,
    /// `add` is refused while it is there.
    pub blocks_add: bool,
}

impl Visibility {
    pub(crate) fn of(marks: u8) -> Visibility {
        Visibility {
            value: marks & (MARK_TOMBSTONE | MARK_EMPTY | MARK_DELETED) == 0,
            blocks_add: marks & MARK_DELETED == 0,
        }
    }
}

/// What a lease read asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaseRead {
    /// On a miss, create an empty placeholder with this expiry and hand its token to this
    /// caller (`lease-get`, meta `N`).
    pub vivify: Option<Expiry>,
    /// Win the token on a value whose remaining TTL is below this many seconds (meta `R`).
    pub recache_below: Option<u32>,
    /// See values kept after a delete (lease reads do; a plain `mg` does not).
    pub see_deleted: bool,
    /// Only look: never hand out a token or create a placeholder (reads over UDP, whose
    /// source address may be forged, must not take a key's lease from its real readers).
    pub read_only: bool,
    /// Leave the item's access state alone: no fetched mark, last-access time or frequency
    /// count (meta `u`).
    pub no_update: bool,
    /// A placeholder this read creates takes this as its token, hence its CAS (meta `E`).
    pub vivify_cas: Option<u64>,
}
