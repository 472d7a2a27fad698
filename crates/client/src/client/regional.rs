//! Remote markers for replica regions (paper §5). A web server in a replica region that
//! writes to the master database (1) sets the key's remote marker in its region, (2) writes,
//! invalidating both the key and the marker in the same transaction, (3) deletes the key in
//! its local cluster. A later miss on the key finds the marker while the region's database
//! has not replayed the write yet (the invalidation, decoded from that database, has not
//! deleted the marker), and reads the master instead of the stale replica.

use super::values::Error;
use super::Client;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

/// What a client's regional look-aside did (shared by its clones).
#[derive(Debug, Default)]
pub(crate) struct RegionalCounters {
    markers_set: AtomicU64,
    master_reads: AtomicU64,
    replica_reads: AtomicU64,
}

/// A snapshot of [`Client::regional_stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegionalStats {
    /// Remote markers set ([`Client::mark_remote_write`]).
    pub markers_set: u64,
    /// Misses of [`Client::get_or_fill_regional`] that found a marker (or could not tell)
    /// and read the master database.
    pub master_reads: u64,
    /// Misses that found no marker and read the region's own database.
    pub replica_reads: u64,
}

impl Client {
    /// The remote marker of `key`.
    pub fn marker_key(&self, key: &str) -> String {
        format!("{}{key}", self.options.marker_prefix)
    }

    /// Before writing data behind `key` to the master database from a replica region:
    /// sets `key`'s remote marker (for at most `ttl` seconds, so a lost invalidation cannot
    /// pin reads to the master forever) and returns the marker's key, which the write's
    /// transaction must invalidate together with `key`
    /// (`memfleet_invalidate('user:42', 'remote-marker:user:42')`): the marker goes away
    /// when the replica has the write. Then delete `key` in the local cluster.
    pub async fn mark_remote_write(&self, key: &str, ttl: u32) -> Result<String, Error> {
        let marker = self.marker_key(key);
        self.set(&marker, b"1", ttl).await?;
        self.regional.markers_set.fetch_add(1, Ordering::Relaxed);
        Ok(marker)
    }

    /// Look-aside for a replica region: on a miss, a present remote marker means a write
    /// this region made has not reached its replica yet, so `master` is read; otherwise
    /// `replica`. Filled as [`Client::get_or_fill`] fills.
    pub async fn get_or_fill_regional<R, RF, M, MF, E>(
        &self,
        key: &str,
        ttl: u32,
        replica: R,
        master: M,
    ) -> Result<Vec<u8>, E>
    where
        R: FnOnce() -> RF,
        RF: Future<Output = Result<Vec<u8>, E>>,
        M: FnOnce() -> MF,
        MF: Future<Output = Result<Vec<u8>, E>>,
    {
        let mut replica = Some(replica);
        let mut master = Some(master);
        self.get_or_fill(key, ttl, || {
            let marked = self.get(self.marker_key(key));
            let (replica, master) = (replica.take(), master.take());
            async move {
                // A cache error counts as marked: the master is always right.
                let to_master = !matches!(marked.await, Ok(None));
                let counter = if to_master {
                    &self.regional.master_reads
                } else {
                    &self.regional.replica_reads
                };
                counter.fetch_add(1, Ordering::Relaxed);
                match (to_master, master, replica) {
                    (true, Some(m), _) => m().await,
                    (false, _, Some(r)) => r().await,
                    (_, Some(m), None) => m().await,
                    (_, None, Some(r)) => r().await,
                    (_, None, None) => unreachable!("the loader runs once"),
                }
            }
        })
        .await
    }

    /// What this client (and its clones) did with remote markers so far.
    pub fn regional_stats(&self) -> RegionalStats {
        let c = &self.regional;
        RegionalStats {
            markers_set: c.markers_set.load(Ordering::Relaxed),
            master_reads: c.master_reads.load(Ordering::Relaxed),
            replica_reads: c.replica_reads.load(Ordering::Relaxed),
        }
    }
}
