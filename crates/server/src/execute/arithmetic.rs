//! Arithmetic: `incr` and `decr`, and the delta the meta and binary forms share: in place,
//! or as a new item while a reply of the batch still holds the old one (`pins.rs`).

use super::storage::store_error;
use super::Executor;
use memfleet_protocol::response::{self, Status};
use memfleet_protocol::ArithOp;
use memfleet_storage::DeltaError;

impl Executor<'_> {
    /// `incr`/`decr <key> <delta> [noreply]`.
    pub(super) fn arith_command(
        &mut self,
        op: ArithOp,
        key: &[u8],
        delta: u64,
        noreply: bool,
        out: &mut Vec<u8>,
    ) {
        let result = self.arith(op, key, delta);
        if !noreply {
            match result {
                Ok(Some(v)) => response::number(out, v),
                Ok(None) => response::status(out, Status::NotFound),
                Err(DeltaError::NonNumeric) => out.extend_from_slice(response::NON_NUMERIC),
                Err(DeltaError::Store(e)) => out.extend_from_slice(store_error(e)),
            }
        }
    }

    /// Adds `delta` to (or takes it from) the number `key` holds, counted.
    pub(super) fn arith(
        &mut self,
        op: ArithOp,
        key: &[u8],
        delta: u64,
    ) -> Result<Option<u64>, DeltaError> {
        let result = if self.pins.holds(self.handle, key) {
            // A reply of this batch holds the item: memcached writes a new one (`pins.rs`).
            self.handle.delta_new_item(key, delta, op == ArithOp::Incr)
        } else {
            match op {
                ArithOp::Incr => self.handle.incr(key, delta),
                ArithOp::Decr => self.handle.decr(key, delta),
            }
        };
        let c = self.counters;
        let hit = matches!(result, Ok(Some(_)));
        match (op, hit) {
            (ArithOp::Incr, true) => c.incr_hits.incr(),
            (ArithOp::Incr, false) => c.incr_misses.incr(),
            (ArithOp::Decr, true) => c.decr_hits.incr(),
            (ArithOp::Decr, false) => c.decr_misses.incr(),
        }
        result
    }
}
