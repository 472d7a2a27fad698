//! Remote markers for replica regions (paper §5). A web server in a replica region that
//! writes to the master database (1) sets the key's remote marker in its region, (2) writes,
//! invalidating both the key and the marker in the same transaction, (3) deletes the key in
//! its local cluster. A later miss on the key finds the marker while the region's database
//! has not replayed the write yet (the invalidation, decoded from that database, has not
//! deleted the marker), and reads the master instead of the stale replica.
//!
//! **One marker per write, not per key.** The paper's marker is a flag per key: a key
//! written twice within the replication lag loses its marker to the first write's
//! invalidation while the second is still on its way, and so does a late or repeated
//! delivery of an old invalidation (an invalidator restarting delivers again what it had not
//! confirmed). Here each write gets its own marker, `<prefix><key>:<token>`, which its
//! transaction invalidates, and the key's marker *index*, `<prefix><key>`, lists the tokens
//! of the key's marked writes (`add`, else `append`: concurrent writers from several web
//! servers all get listed), each with the time its marker expires. A miss reads the index,
//! then the markers of its unexpired tokens: the key is marked while any is there. An old
//! write's invalidation, however late or repeated, clears only its own marker.

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

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Distinguishes the writes of one process (with the time and the process id: of all).
static WRITES: AtomicU64 = AtomicU64::new(0);

/// A token no other write of any web server is likely to have: 64 bits of time, process
/// and sequence, mixed.
fn write_token() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut x = nanos
        ^ (u64::from(std::process::id()) << 40)
        ^ WRITES
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15);
    // splitmix64's finaliser.
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    format!("{:016x}", x ^ (x >> 31))
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
        let index = self.marker_key(key);
        let token = write_token();
        let marker = format!("{index}:{token}");
        // The marker before the index: a reader that finds a token finds its marker.
        self.set(&marker, b"1", ttl).await?;
        let expires = unix_now() + u64::from(ttl);
        let entry = format!("{token}@{expires}");
        let mut listed = false;
        for _ in 0..4 {
            if self.add(&index, entry.as_bytes(), ttl).await? {
                listed = true;
                break;
            }
            if self.append(&index, format!(" {entry}").as_bytes()).await? {
                // The index lives as long as its newest marker.
                self.touch(&index, ttl).await?;
                listed = true;
                break;
            }
            // It expired between the two: add it again.
        }
        if !listed {
            return Err(Error::Protocol(format!(
                "the remote marker index {index} could be neither added nor appended to"
            )));
        }
        self.regional.markers_set.fetch_add(1, Ordering::Relaxed);
        Ok(marker)
    }

    /// Whether a marked write of `key` has not reached this region's replica yet (its
    /// marker is still there). A cache error counts as marked: the master is always right.
    async fn marked(&self, key: &str) -> bool {
        let index = self.marker_key(key);
        let listed = match self.get(&index).await {
            Ok(None) => return false,
            Ok(Some(v)) => String::from_utf8_lossy(&v.data).into_owned(),
            Err(_) => return true,
        };
        let now = unix_now();
        let markers: Vec<String> = listed
            .split_ascii_whitespace()
            .filter_map(|entry| {
                let (token, expires) = entry.split_once('@')?;
                // An expired token's marker has expired too: nothing to ask.
                (expires.parse::<u64>().ok()? >= now).then(|| format!("{index}:{token}"))
            })
            .collect();
        let found = futures_util::future::join_all(markers.iter().map(|m| self.get(m))).await;
        found.iter().any(|f| !matches!(f, Ok(None)))
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
