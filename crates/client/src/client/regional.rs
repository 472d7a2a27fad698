//! Remote markers for replica regions (paper §5) from the client library: the scheme is
//! `crate::remote_markers`' (shared with the router), over this client's commands.

use super::values::Error;
use super::Client;
use crate::remote_markers::{self, MarkError, MarkerStore};
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

/// The client as a marker store.
impl MarkerStore for Client {
    type Error = Error;
    async fn set(&self, key: &str, value: &[u8], ttl: u32) -> Result<(), Error> {
        Client::set(self, key, value, ttl).await
    }
    async fn add(&self, key: &str, value: &[u8], ttl: u32) -> Result<bool, Error> {
        Client::add(self, key, value, ttl).await
    }
    async fn append(&self, key: &str, value: &[u8]) -> Result<bool, Error> {
        Client::append(self, key, value).await
    }
    async fn touch(&self, key: &str, ttl: u32) -> Result<bool, Error> {
        Client::touch(self, key, ttl).await
    }
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, Error> {
        Ok(Client::get(self, key).await?.map(|v| v.data))
    }
}

impl Client {
    /// The remote marker index of `key`: it lists the tokens of its marked writes.
    pub fn marker_key(&self, key: &str) -> String {
        format!("{}{key}", self.options.marker_prefix)
    }

    /// Before writing data behind `key` to the master database from a replica region:
    /// sets this write's remote marker and lists it in `key`'s marker index (both for at
    /// most `ttl` seconds, so a lost invalidation cannot pin reads to the master forever),
    /// and returns the marker's key (`remote-marker:user:42:<token>`), which the write's
    /// transaction must invalidate together with `key`
    /// (`memfleet_invalidate('user:42', marker)`): the marker goes away when the replica
    /// has the write. Then delete `key` in the local cluster. The marker's key is 17 bytes
    /// longer than the index's: it must stay within memcached's 250.
    pub async fn mark_remote_write(&self, key: &str, ttl: u32) -> Result<String, Error> {
        let marker = remote_markers::mark_remote_write(self, &self.marker_key(key), ttl)
            .await
            .map_err(|e| match e {
                MarkError::Store(e) => e,
                MarkError::IndexBusy(index) => Error::Protocol(format!(
                    "the remote marker index {index} could be neither added nor appended to"
                )),
            })?;
        self.regional.markers_set.fetch_add(1, Ordering::Relaxed);
        Ok(marker)
    }

    /// Whether a marked write of `key` has not reached this region's replica yet (its
    /// marker is still there). A cache error counts as marked: the master is always right.
    async fn marked(&self, key: &str) -> bool {
        remote_markers::marked(self, &self.marker_key(key)).await
    }

    /// Look-aside for a replica region: on a miss, a present remote marker (of the key's
    /// latest marked write) means a write this region made has not reached its replica
    /// yet, so `master` is read; otherwise `replica`. Filled as [`Client::get_or_fill`]
    /// fills.
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
            let (replica, master) = (replica.take(), master.take());
            async move {
                let to_master = self.marked(key).await;
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
