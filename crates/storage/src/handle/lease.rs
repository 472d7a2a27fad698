//! The lease operations of a handle: lease reads (`mg N`/`R`, `lease-get`), invalidation
//! (`md I`), stale sets, deletes that keep a stale value, and [`Handle::amend`], which
//! replaces a key's item by a changed copy. The rules they apply are in `crate::lease`.

use super::read::ItemRef;
use super::status::StoreError;
use super::store::{check_key, existing, ChainAttempt};
use super::Handle;
use crate::clock::{Expiry, NEVER};
use crate::hashtable::hash;
use crate::item::{
    Extras, Lease, MARK_DELETED, MARK_EMPTY, MARK_STALE, MARK_TOKEN, MARK_TOMBSTONE,
};
use crate::lease::LeaseRead;

/// What a lease read found.
#[derive(Debug)]
pub enum LeaseOutcome<'a> {
    /// An item: a value, a stale value or a placeholder (see its marks). `won` says this
    /// caller was handed its token (the item's [`ItemRef::cas`]); otherwise a token held
    /// by someone else is outstanding if the item has one ([`ItemRef::lease`]).
    Found {
        /// The item.
        item: ItemRef<'a>,
        /// This caller was handed the token.
        won: bool,
    },
    /// Nothing, and nothing was created.
    Miss,
    /// A delete hold-off is in force: no value and no token until it ends.
    HeldOff,
}

/// What [`Handle::amend`] should do with the item it was shown.
pub(crate) enum Amend<T> {
    /// Nothing; return this.
    Keep(T),
    /// Remove it, then return this.
    Unlink(T),
    /// Replace it by a copy with these extras and deadline (and the replacement value, if
    /// one was given), then return this.
    Copy {
        extras: Extras,
        deadline: u32,
        bump_cas: bool,
        /// `(unique, token)`: publish only while the key's chain still has this CAS unique,
        /// then give it the token (the copy's lease token, drawn as the chain's next unique:
        /// see [`Handle::next_lease_token`]); else look again.
        chain_token: Option<(u64, u64)>,
        result: T,
    },
}

/// Whether a reader of `item` is handed a new token: none is outstanding (or the last one
/// is older than the lease interval), and the item is stale, a placeholder, or (meta `R`) a
/// value close to expiring. A hold-off never hands one out.
fn wins_token(item: &ItemRef<'_>, now: u32, interval: u32, ask: LeaseRead) -> bool {
    let marks = item.marks();
    if ask.read_only || marks & MARK_TOMBSTONE != 0 {
        return false;
    }
    if item
        .lease()
        .is_some_and(|l| now < l.issued.saturating_add(interval))
    {
        return false;
    }
    if marks & (MARK_STALE | MARK_EMPTY) != 0 {
        return true;
    }
    ask.recache_below
        .is_some_and(|below| item.ttl_remaining(now).is_some_and(|left| left < below))
}

impl Handle {
    /// The CAS unique of the chain a key of hash `h` is in (lock-free).
    fn chain_cas(&self, h: u64) -> u64 {
        let table = self.table();
        table.cas(table.head_of(h), self.engine.cas_sequence())
    }

    /// A lease-aware read: `mg` (with or without `N`/`R`) and `lease-get`. Hands this
    /// caller the key's token when the rules in the module docs say it wins one, then calls
    /// `f` with what it found (a callback, so the common case, no token to hand out, costs
    /// one lookup and no copy).
    pub fn lease_read<R>(
        &mut self,
        key: &[u8],
        ask: LeaseRead,
        f: impl FnOnce(LeaseOutcome<'_>) -> R,
    ) -> Result<R, StoreError> {
        check_key(key)?;
        let h = hash(key);
        let interval = self.engine.config().lease_interval;
        // Whether this call has tried to take a token, and the token it took if it did.
        let mut tried = false;
        let mut mine: Option<u64> = None;
        enum Act {
            /// Claim the item's token; a CAS the client chose (meta `E`) becomes the token.
            Claim(Option<u64>),
            Create(u32),
        }
        loop {
            let now = self.engine.clock().now();
            let act = match self.find(key, h, now, !ask.no_update) {
                None => match ask
                    .vivify
                    .and_then(|e| self.engine.clock().deadline(e, now))
                {
                    Some(deadline) if !tried && !ask.read_only => Act::Create(deadline),
                    _ => return Ok(f(LeaseOutcome::Miss)),
                },
                Some(item) => {
                    let marks = item.marks();
                    if marks & MARK_TOMBSTONE != 0 {
                        return Ok(f(LeaseOutcome::HeldOff));
                    }
                    if marks & MARK_DELETED != 0 && !ask.see_deleted {
                        return Ok(f(LeaseOutcome::Miss));
                    }
                    // After one attempt, whoever's token is there now is the winner.
                    if tried || !wins_token(&item, now, interval, ask) {
                        let won = mine.is_some() && item.lease().map(|l| l.token) == mine;
                        return Ok(f(LeaseOutcome::Found { item, won }));
                    }
                    Act::Claim(item.explicit_cas())
                }
            };
            // A token the client chose (meta `E`) is its own; any other is the key's chain's
            // next CAS unique (`Handle::next_lease_token`), published only while the chain's
            // unique has not moved, and then given to the chain.
            match act {
                Act::Claim(chosen) => {
                    // What this handle would propose (its block's next value), taken before
                    // `amend` borrows the handle; the chain's unique raises it in `decide`.
                    let proposal = self.next_lease_token(0);
                    // Decided again on the item the chain lock protects: whoever claims first
                    // keeps the token.
                    let claimed = self.amend(key, None, |item, now| {
                        if !wins_token(item, now, interval, ask) {
                            return Amend::Keep(None);
                        }
                        let (token, chain_token) = match chosen {
                            Some(cas) => (cas, None),
                            None => {
                                let token = proposal.max(item.chain_cas() + 1);
                                (token, Some((item.chain_cas(), token)))
                            }
                        };
                        Amend::Copy {
                            extras: Extras {
                                own_deadline: item.own_deadline(),
                                lease: Some(Lease { token, issued: now }),
                                marks: item.marks() & !MARK_TOKEN,
                            },
                            deadline: item.deadline(),
                            bump_cas: false,
                            chain_token,
                            result: Some(token),
                        }
                    })?;
                    // Taken or not (someone else won it, or the key went): read it again.
                    mine = claimed.flatten();
                    tried = true;
                }
                Act::Create(deadline) => {
                    let chain_cas = self.chain_cas(h);
                    let (token, chain_cas_was) = match ask.vivify_cas {
                        Some(cas) => (cas, None),
                        None => (self.next_lease_token(chain_cas), Some(chain_cas)),
                    };
                    let extras = Extras {
                        own_deadline: None,
                        lease: Some(Lease { token, issued: now }),
                        marks: MARK_EMPTY,
                    };
                    let written = self.append(key, &[], 0, deadline, extras)?;
                    let published = self.locked(h, |this, table, chain| {
                        let old = existing(&this.engine, chain, key, h, now);
                        if old.as_ref().is_some_and(|o| o.live) {
                            // Someone stored or vivified the key meanwhile: read theirs.
                            return ChainAttempt::Done(Some(false));
                        }
                        let seq = this.engine.cas_sequence();
                        if chain_cas_was.is_some_and(|was| chain.cas(seq) != was) {
                            // The counter moved past the token: draw another.
                            return ChainAttempt::Done(None);
                        }
                        match this.publish(table, chain, old.as_ref(), &written, h, false) {
                            Ok(()) => {
                                if chain_cas_was.is_some() {
                                    this.bump_chain_cas(chain, token);
                                }
                                ChainAttempt::Done(Some(true))
                            }
                            Err(_) => ChainAttempt::GrowTable(table.power()),
                        }
                    });
                    self.finish(Some(written));
                    match published.flatten() {
                        Some(true) => (mine, tried) = (Some(token), true),
                        Some(false) => tried = true,
                        None => {}
                    }
                }
            }
        }
    }

    /// Meta `md <key> I [T]`: keeps the value but marks it stale (reads see it flagged `X`,
    /// the next reader wins a token to refresh it) and voids any outstanding token. `ttl`
    /// gives it a new expiry. False when the key holds no value.
    pub fn invalidate(&mut self, key: &[u8], ttl: Option<Expiry>) -> Result<bool, StoreError> {
        self.invalidate_as(key, ttl, None)
    }

    /// [`Handle::invalidate`], the stale copy taking `new_cas` as its CAS unique (meta `E`).
    pub fn invalidate_as(
        &mut self,
        key: &[u8],
        ttl: Option<Expiry>,
        new_cas: Option<u64>,
    ) -> Result<bool, StoreError> {
        check_key(key)?;
        let clock = self.engine.clock().clone();
        let done = self.amend(key, None, |item, now| {
            if item.marks() & (MARK_TOMBSTONE | MARK_DELETED) != 0 {
                return Amend::Keep(false);
            }
            let (deadline, own) = match ttl.map(|e| clock.deadline(e, now)) {
                Some(Some(d)) => (d, None),
                Some(None) => return Amend::Unlink(true),
                None => (item.deadline(), item.own_deadline()),
            };
            Amend::Copy {
                extras: Extras {
                    own_deadline: own,
                    lease: new_cas.map(Lease::explicit_cas),
                    marks: (item.marks() & MARK_EMPTY) | MARK_STALE,
                },
                deadline,
                bump_cas: true,
                chain_token: None,
                result: true,
            }
        });
        match done {
            Ok(found) => Ok(found.unwrap_or(false)),
            // No room for the stale copy: a miss is as good as stale for freshness.
            Err(StoreError::OutOfMemory) => Ok(self.remove_outright(key)),
            Err(e) => Err(e),
        }
    }

    /// Meta `ms <key> I C<cas>` when `cas` did not match: memcached stores the value anyway
    /// if the client's CAS is *older* than the item's, marked stale and keeping the item's
    /// expiry and token, so a slow writer's data can be served as stale but never as fresh.
    /// `None` when the key holds no item (or the CAS is not older).
    pub fn set_stale_if_older(
        &mut self,
        key: &[u8],
        value: &[u8],
        flags: u32,
        cas: u64,
    ) -> Result<Option<()>, StoreError> {
        check_key(key)?;
        let done = self.amend(key, Some((value, flags)), |item, _| {
            // "Older" compares numbers. A key's CAS uniques and lease tokens are one sequence,
            // its chain's counter, so a CAS the client read before the current token is
            // smaller, as in memcached; a made-up CAS may be judged older, and then only
            // stores stale.
            if item.marks() & (MARK_TOMBSTONE | MARK_DELETED) != 0 || cas >= item.cas() {
                return Amend::Keep(None);
            }
            Amend::Copy {
                extras: Extras {
                    own_deadline: item.own_deadline(),
                    lease: item.lease(),
                    marks: MARK_STALE,
                },
                deadline: item.deadline(),
                bump_cas: true,
                chain_token: None,
                result: Some(()),
            }
        })?;
        Ok(done.flatten())
    }

    /// `delete` when deleted values are kept for lease reads: the value becomes a stale copy
    /// no plain read sees, for [`crate::Config::stale_after_delete`] seconds (or less if it
    /// was to expire sooner), and any outstanding token is voided. True when a value was
    /// deleted. A delete hold-off stays in force.
    pub(crate) fn delete_keeping_stale(&mut self, key: &[u8]) -> bool {
        let keep = self.engine.config().stale_after_delete;
        let done = self.amend(key, None, |item, now| {
            let marks = item.marks();
            if marks & MARK_TOMBSTONE != 0 {
                return Amend::Keep(false);
            }
            if marks & MARK_EMPTY != 0 {
                // A placeholder: nothing to keep; dropping it voids its token. memcached
                // counts deleting its vivified item as a delete.
                return Amend::Unlink(true);
            }
            let deleted = marks & MARK_DELETED == 0;
            if !deleted && item.lease().is_none() {
                return Amend::Keep(false);
            }
            let deadline = if deleted {
                item.deadline().min(now.saturating_add(keep))
            } else {
                item.deadline()
            };
            Amend::Copy {
                extras: Extras {
                    own_deadline: None,
                    lease: None,
                    marks: MARK_STALE | MARK_DELETED,
                },
                deadline,
                bump_cas: true,
                chain_token: None,
                result: deleted,
            }
        });
        match done {
            Ok(found) => found.unwrap_or(false),
            // No room for the stale copy: delete outright (a delete must never fail).
            Err(_) => self.remove_outright(key),
        }
    }

    /// Changes the key's current item as `decide` says, provided it is still the item
    /// `decide` was shown when the chain is locked (else looks again). `replacement` replaces
    /// the value and flags of a copy. `None` when the key holds no live item.
    pub(crate) fn amend<T>(
        &mut self,
        key: &[u8],
        replacement: Option<(&[u8], u32)>,
        mut decide: impl FnMut(&ItemRef<'_>, u32) -> Amend<T>,
    ) -> Result<Option<T>, StoreError> {
        let h = hash(key);
        let mut buf = std::mem::take(&mut self.scratch);
        let result = loop {
            let now = self.engine.clock().now();
            let Some(item) = self.find(key, h, now, false) else {
                break Ok(None);
            };
            let expected = item.slot;
            let epoch = self.engine.segment(expected.seg()).epoch();
            let (extras, deadline, bump_cas, chain_token, result) = match decide(&item, now) {
                Amend::Keep(result) => break Ok(Some(result)),
                Amend::Unlink(result) => (Extras::default(), now, true, None, result),
                Amend::Copy {
                    extras,
                    deadline,
                    bump_cas,
                    chain_token,
                    result,
                } => (extras, deadline, bump_cas, chain_token, result),
            };
            let keep = deadline > now || deadline == NEVER;
            let mut flags = item.flags();
            buf.clear();
            match replacement {
                Some((_, new_flags)) => flags = new_flags,
                // The copy's value, taken before the reference (which pins the old bytes)
                // goes; nothing to copy for an unlink.
                None if keep => buf.extend_from_slice(item.value()),
                None => {}
            }
            drop(item);
            let value = replacement.map_or(&buf[..], |(v, _)| v);
            let written = if keep {
                match self.append(key, &[value], flags, deadline, extras) {
                    Ok(w) => Some(w),
                    Err(e) => break Err(e),
                }
            } else {
                None
            };
            let new_cas = match chain_token {
                Some((_, token)) => Some(token),
                None => bump_cas.then_some(0),
            };
            let done = self.swap(key, h, now, written.as_ref(), new_cas, |e, chain_cas| {
                e.live
                    && e.is(&self.engine, expected, epoch)
                    && chain_token.is_none_or(|(was, _)| chain_cas == was)
            });
            self.finish(written);
            if done.is_some() {
                break Ok(Some(result));
            }
        };
        self.scratch = buf;
        result
    }
}
