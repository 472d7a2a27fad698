//! Storage: `set`, `add`, `replace`, `append`, `prepend`, `cas` and mcrouter's
//! `lease-set`; `delete` (with a hold-off, `delete <key> <seconds>`); `touch`. The writes
//! the meta and binary commands share, counted as memcached counts them.

use super::{reply_status, Executor};
use memfleet_protocol::response::{self, Status};
use memfleet_protocol::{ErrorKind, Store, StoreCommand};
use memfleet_storage::{Expiry, StoreError, StoreMode, StoreStatus};

impl Executor<'_> {
    /// A classic storage command.
    pub(super) fn store_command(&mut self, s: &Store<'_>, out: &mut Vec<u8>) {
        let mode = match s.command {
            StoreCommand::Set => StoreMode::Set,
            StoreCommand::Add => StoreMode::Add,
            StoreCommand::Replace => StoreMode::Replace,
            StoreCommand::Append => StoreMode::Append,
            StoreCommand::Prepend => StoreMode::Prepend,
            StoreCommand::Cas => StoreMode::Cas(s.cas),
            StoreCommand::LeaseSet => StoreMode::Lease(s.cas),
        };
        let reply = self.store(mode, s.key, s.data, s.flags, s.exptime, None);
        if !s.noreply {
            out.extend_from_slice(match reply {
                Ok(status) => text_status(status).as_bytes(),
                Err(e) => store_error(e),
            });
        }
    }

    /// `delete <key> [<seconds>] [noreply]`.
    pub(super) fn delete_command(
        &mut self,
        key: &[u8],
        holdoff: u32,
        noreply: bool,
        out: &mut Vec<u8>,
    ) {
        let deleted = if holdoff > 0 {
            self.delete_holding_off(key, holdoff)
        } else {
            Ok(self.delete(key))
        };
        match deleted {
            Ok(true) => reply_status(out, Status::Deleted, noreply),
            Ok(false) => reply_status(out, Status::NotFound, noreply),
            Err(e) if !noreply => out.extend_from_slice(store_error(e)),
            Err(_) => {}
        }
    }

    /// `touch <key> <exptime> [noreply]`.
    pub(super) fn touch_command(
        &mut self,
        key: &[u8],
        exptime: i64,
        noreply: bool,
        out: &mut Vec<u8>,
    ) {
        let reply = self.touch(key, exptime);
        if !noreply {
            match reply {
                Ok(true) => response::status(out, Status::Touched),
                Ok(false) => response::status(out, Status::NotFound),
                Err(e) => out.extend_from_slice(store_error(e)),
            }
        }
    }

    /// `delete <key> <seconds>`: deletes and refuses `add` for the hold-off.
    pub(super) fn delete_holding_off(&mut self, key: &[u8], secs: u32) -> Result<bool, StoreError> {
        self.counters.holdoff_deletes.incr();
        let deleted = self.handle.delete_with_holdoff(key, secs)?;
        if deleted {
            self.counters.delete_hits.incr();
        } else {
            self.counters.delete_misses.incr();
        }
        Ok(deleted)
    }

    /// A write, counted as memcached counts it; the new item takes `new_cas` as its CAS
    /// unique when given (meta `E`).
    pub(super) fn store(
        &mut self,
        mode: StoreMode,
        key: &[u8],
        data: &[u8],
        flags: u32,
        exptime: i64,
        new_cas: Option<u64>,
    ) -> Result<StoreStatus, StoreError> {
        let c = self.counters;
        c.cmd_set.incr();
        if matches!(mode, StoreMode::Append | StoreMode::Prepend) {
            // memcached refuses a concatenation whose result would exceed the item size
            // limit with NOT_STORED (its allocation fails), not with an error.
            let too_large = self.handle.get(key).is_some_and(|old| {
                !self
                    .server
                    .parser
                    .fits(key.len(), old.flags(), old.value().len() + data.len())
            });
            if too_large {
                return Ok(StoreStatus::NotStored);
            }
        }
        let result = self.handle.store_with_cas(
            mode,
            key,
            data,
            flags,
            Expiry::from_memcached(exptime),
            new_cas,
        );
        let result = match (result, mode) {
            (Err(StoreError::TooLarge), StoreMode::Append | StoreMode::Prepend) => {
                Ok(StoreStatus::NotStored)
            }
            (result, _) => result,
        };
        match (&result, mode) {
            (Ok(StoreStatus::Stored), StoreMode::Cas(_)) => c.cas_hits.incr(),
            (Ok(StoreStatus::Exists), _) => c.cas_badval.incr(),
            (Ok(StoreStatus::NotFound), _) => c.cas_misses.incr(),
            (Err(StoreError::TooLarge), _) => c.store_too_large.incr(),
            (Err(StoreError::OutOfMemory), _) => c.store_no_memory.incr(),
            _ => {}
        }
        if let (Ok(StoreStatus::NotStored), StoreMode::Lease(_)) = (&result, mode) {
            c.lease_sets_refused.incr();
        }
        result
    }

    /// A delete without a hold-off, counted.
    pub(super) fn delete(&mut self, key: &[u8]) -> bool {
        let deleted = self.handle.delete(key);
        if deleted {
            self.counters.delete_hits.incr();
        } else {
            self.counters.delete_misses.incr();
        }
        deleted
    }

    /// A new expiry for `key`, counted.
    pub(super) fn touch(&mut self, key: &[u8], exptime: i64) -> Result<bool, StoreError> {
        self.counters.cmd_touch.incr();
        let found = self.handle.touch(key, Expiry::from_memcached(exptime))?;
        if found {
            self.counters.touch_hits.incr();
        } else {
            self.counters.touch_misses.incr();
        }
        Ok(found)
    }
}

/// The classic reply to a write the cache took or refused by its rules.
fn text_status(status: StoreStatus) -> Status {
    match status {
        StoreStatus::Stored => Status::Stored,
        StoreStatus::NotStored => Status::NotStored,
        StoreStatus::Exists => Status::Exists,
        StoreStatus::NotFound => Status::NotFound,
    }
}

/// The reply to a write the cache refused.
pub(super) fn store_error(e: StoreError) -> &'static [u8] {
    match e {
        StoreError::TooLarge => response::TOO_LARGE,
        StoreError::OutOfMemory => response::OUT_OF_MEMORY,
        StoreError::BadKey => ErrorKind::BadCommandLineFormat.reply(),
    }
}
