//! Delivery, not spooling: when a batch's deletes reached every destination.
//!
//! A batch is acknowledged to the commit log once every delete was either answered by its
//! destination or durably spooled for it (nothing is lost across a crash). But a spooled
//! delete has not invalidated anything yet: the paper's promise is kept only when it is
//! replayed. So a batch that left deletes in some spool queue is remembered with how many
//! deletes each of those queues had taken by then; once every such queue has delivered as
//! many, the batch's transactions are delivered and their commit-to-delivered latency is
//! recorded. Queues deliver in order, so this is exact for the batch's own deletes and
//! at worst late by what other batches queued before it.

use crate::Counters;
use memfleet_client::spool::SpoolQueueStats;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;

/// Batches waiting for spooled deletes to be replayed.
#[derive(Default)]
pub struct Deliveries {
    pending: VecDeque<OwedBatch>,
}

/// A batch whose deletes wait in spool queues.
struct OwedBatch {
    /// Its transactions' commit times, µs since the epoch.
    commits: Vec<i64>,
    /// (queue, deliveries that queue must reach).
    queues: Vec<(String, u64)>,
}

impl Deliveries {
    /// A batch was answered or spooled everywhere: its transactions are delivered now if
    /// no spool queue holds anything, else once the queues holding something have
    /// delivered what they hold now.
    pub fn settle(&mut self, commits: Vec<i64>, spool: &[SpoolQueueStats], counters: &Counters) {
        let queues: Vec<(String, u64)> = spool
            .iter()
            .filter(|q| q.depth > 0)
            .map(|q| (q.name.clone(), q.appended))
            .collect();
        if queues.is_empty() {
            record(&commits, counters);
            return;
        }
        counters.spooled_batches.fetch_add(1, Ordering::Relaxed);
        self.pending.push_back(OwedBatch { commits, queues });
        counters
            .undelivered_batches
            .store(self.pending.len() as u64, Ordering::Relaxed);
    }

    /// Records the batches whose queues have caught up.
    pub fn poll(&mut self, spool: &[SpoolQueueStats], counters: &Counters) {
        let caught_up = |(name, owed): &(String, u64)| {
            spool
                .iter()
                .find(|q| &q.name == name)
                .is_none_or(|q| q.delivered >= *owed || q.depth == 0)
        };
        self.pending.retain(|batch| {
            if !batch.queues.iter().all(caught_up) {
                return true;
            }
            record(&batch.commits, counters);
            false
        });
        counters
            .undelivered_batches
            .store(self.pending.len() as u64, Ordering::Relaxed);
    }

    /// Whether some batch still waits.
    pub fn waiting(&self) -> bool {
        !self.pending.is_empty()
    }
}

/// Commit-to-delivered latency of each transaction, now.
fn record(commits: &[i64], counters: &Counters) {
    let now = crate::unix_micros();
    let mut h = counters
        .latency_us
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    for at in commits {
        let _ = h.record((now - at).max(1) as u64);
    }
}
