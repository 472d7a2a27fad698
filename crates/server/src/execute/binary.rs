//! memcached's binary protocol on the same engine calls as the text commands. What each
//! opcode replies is tabled in `memfleet_protocol::binary`'s docs (checked against memcached
//! 1.6.18); this file follows that table.

use super::{AfterRequest, Executor};
use crate::admin_stats::StatsReport;
use crate::version::VERSION;
use memfleet_protocol::binary::{
    response, BinCommand, BinRequest, ConcatOp, ReplyTo, SetOp, Status, NO_AUTO_CREATE,
};
use memfleet_storage::{DeltaError, Expiry, StoreError, StoreMode, StoreStatus};

impl Executor<'_> {
    /// Runs one binary request, appending its reply packets to `out`.
    pub fn run_binary(&mut self, req: &BinRequest<'_>, out: &mut Vec<u8>) -> AfterRequest {
        let to = req.reply_to();
        match req.command {
            BinCommand::Get {
                key,
                quiet,
                with_key,
            } => self.binary_get(to, key, None, quiet, with_key, out),
            BinCommand::GetAndTouch {
                key,
                exptime,
                quiet,
                with_key,
            } => {
                let expiry = Expiry::from_memcached(i64::from(exptime));
                self.binary_get(to, key, Some(expiry), quiet, with_key, out)
            }
            BinCommand::Touch { key, exptime } => {
                let expiry = Expiry::from_memcached(i64::from(exptime));
                let found = self.fetch(key, Some(expiry), |item, _| {
                    response::touched(out, to, item.flags(), item.cas());
                });
                if !found {
                    response::miss(out, to, None);
                }
            }
            BinCommand::Store {
                op,
                key,
                flags,
                exptime,
                value,
                quiet,
            } => {
                let mode = match (op, req.cas) {
                    (_, cas) if cas != 0 => StoreMode::Cas(cas),
                    (SetOp::Set, _) => StoreMode::Set,
                    (SetOp::Add, _) => StoreMode::Add,
                    (SetOp::Replace, _) => StoreMode::Replace,
                };
                let result = self.store(mode, key, value, flags, i64::from(exptime), None);
                let status = match result {
                    Ok(StoreStatus::Stored) => Status::Success,
                    Ok(StoreStatus::NotStored) if op == SetOp::Add => Status::KeyExists,
                    Ok(StoreStatus::NotStored) => Status::KeyNotFound,
                    Ok(StoreStatus::Exists) => Status::KeyExists,
                    Ok(StoreStatus::NotFound) => Status::KeyNotFound,
                    Err(e) => store_error(e),
                };
                self.binary_store_reply(to, key, status, quiet, out);
            }
            BinCommand::Concat {
                op,
                key,
                value,
                quiet,
            } => {
                let status = if !self.cas_allows(key, req.cas) {
                    Status::KeyExists
                } else {
                    let mode = match op {
                        ConcatOp::Append => StoreMode::Append,
                        ConcatOp::Prepend => StoreMode::Prepend,
                    };
                    match self.store(mode, key, value, 0, 0, None) {
                        Ok(StoreStatus::Stored) => Status::Success,
                        Ok(_) => Status::NotStored,
                        Err(e) => store_error(e),
                    }
                };
                self.binary_store_reply(to, key, status, quiet, out);
            }
            BinCommand::Delete { key, quiet } => {
                let status = if !self.cas_allows(key, req.cas) {
                    Status::KeyExists
                } else if self.delete(key) {
                    Status::Success
                } else {
                    Status::KeyNotFound
                };
                match status {
                    Status::Success if quiet => {}
                    Status::Success => response::success(out, to, 0),
                    s => response::error(out, to, s),
                }
            }
            BinCommand::Arith {
                op,
                key,
                delta,
                initial,
                exptime,
                quiet,
            } => {
                if !self.cas_allows(key, req.cas) {
                    response::error(out, to, Status::KeyExists);
                    return AfterRequest::Continue;
                }
                let mut result = self.arith(op, key, delta);
                if let (Ok(None), true) = (result, exptime != NO_AUTO_CREATE) {
                    // A missing counter is created holding `initial`, which is returned.
                    let text = initial.to_string();
                    result = match self.store(
                        StoreMode::Add,
                        key,
                        text.as_bytes(),
                        0,
                        i64::from(exptime),
                        None,
                    ) {
                        Ok(StoreStatus::Stored) => Ok(Some(initial)),
                        // Created by someone else meanwhile: count on theirs.
                        Ok(_) => self.arith(op, key, delta),
                        Err(e) => Err(DeltaError::Store(e)),
                    };
                }
                match result {
                    Ok(Some(value)) => {
                        if !quiet {
                            let cas = self.handle.get(key).map_or(0, |i| i.cas());
                            response::counter(out, to, value, cas);
                        }
                    }
                    Ok(None) => response::error(out, to, Status::KeyNotFound),
                    Err(DeltaError::NonNumeric) => response::error(out, to, Status::NonNumeric),
                    Err(DeltaError::Store(e)) => response::error(out, to, store_error(e)),
                }
            }
            BinCommand::Flush { .. } if self.server.settings.flush_disabled => {
                // memcached -F: refused even when quiet.
                response::error(out, to, Status::AuthError);
            }
            BinCommand::Flush { exptime, quiet } => {
                self.counters.cmd_flush.incr();
                self.flush_all(exptime.map_or(0, i64::from));
                if !quiet {
                    response::success(out, to, 0);
                }
            }
            BinCommand::Noop => response::success(out, to, 0),
            BinCommand::Version => response::version(out, to, VERSION),
            BinCommand::Stat { key } => self.binary_stats(to, key, out),
            BinCommand::Quit { quiet } => {
                if !quiet {
                    response::success(out, to, 0);
                }
                return AfterRequest::Close;
            }
        }
        AfterRequest::Continue
    }

    fn binary_get(
        &mut self,
        to: ReplyTo,
        key: &[u8],
        touch: Option<Expiry>,
        quiet: bool,
        with_key: bool,
        out: &mut Vec<u8>,
    ) {
        let echoed = with_key.then_some(key);
        let found = self.fetch(key, touch, |item, _| {
            response::value(out, to, item.flags(), echoed, item.value(), item.cas());
        });
        if !found && !quiet {
            response::miss(out, to, echoed);
        }
    }

    /// The reply to a store: success carries the item's new CAS.
    fn binary_store_reply(
        &mut self,
        to: ReplyTo,
        key: &[u8],
        status: Status,
        quiet: bool,
        out: &mut Vec<u8>,
    ) {
        match status {
            Status::Success if quiet => {}
            Status::Success => {
                let cas = self.handle.get(key).map_or(0, |i| i.cas());
                response::success(out, to, cas);
            }
            s => response::error(out, to, s),
        }
    }

    /// A binary request's CAS (0: none) allows the operation on `key`: memcached fails it
    /// with `KeyExists` when the item's CAS differs (a missing item is left to the
    /// operation, which reports it in its own way).
    fn cas_allows(&self, key: &[u8], cas: u64) -> bool {
        cas == 0 || self.handle.get(key).is_none_or(|i| i.cas() == cas)
    }

    fn binary_stats(&mut self, to: ReplyTo, group: &[u8], out: &mut Vec<u8>) {
        let report = StatsReport::new(self.server);
        // memcached matches these by prefix.
        if group.starts_with(b"reset") {
            report.reset();
            response::stat_end(out, to);
            return;
        }
        if group.starts_with(b"detail") {
            response::stat_end(out, to);
            return;
        }
        let group = if group.starts_with(b"settings") {
            &b"settings"[..]
        } else {
            group
        };
        match report.group(group) {
            Some(pairs) => {
                for (name, value) in &pairs {
                    response::stat(out, to, name.as_bytes(), value.as_bytes());
                }
                response::stat_end(out, to);
            }
            None => response::error(out, to, Status::KeyNotFound),
        }
    }
}

fn store_error(e: StoreError) -> Status {
    match e {
        StoreError::TooLarge => Status::TooLarge,
        StoreError::OutOfMemory => Status::OutOfMemory,
        StoreError::BadKey => Status::InvalidArguments,
    }
}
