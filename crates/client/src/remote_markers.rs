//! Remote markers for replica regions (paper §5), over any store that can set, add, append,
//! touch and get: the client library's [`crate::Client`] (`client/regional.rs`) and the
//! router's pools (`memfleet router`, `remote_markers = true`) run this one scheme.
//!
//! A web server in a replica region that writes to the master database (1) sets the key's
//! remote marker in its region, (2) writes, invalidating both the key and the marker in the
//! same transaction, (3) deletes the key in its local cluster. A later miss on the key finds
//! the marker while the region's database has not replayed the write yet, and reads the
//! master instead of the stale replica.
//!
//! **One marker per write, not per key.** The paper's marker is a flag per key: a key
//! written twice within the replication lag loses its marker to the first write's
//! invalidation while the second is still on its way, and so does a late or repeated
//! delivery of an old invalidation. Here each write gets its own marker,
//! `<index>:<token>`, which its transaction invalidates, and the key's marker *index*,
//! `<prefix><key>`, lists the tokens of the key's marked writes (`add`, else `append`:
//! concurrent writers all get listed), each with the time its marker expires. A miss reads
//! the index, then the markers of its unexpired tokens: the key is marked while any is
//! there. An old write's invalidation, however late or repeated, clears only its own marker.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

/// Where markers live: the five commands the scheme uses, with memcached's meaning. An error
/// is the store's (a server that did not answer).
pub trait MarkerStore {
    /// The store's error.
    type Error;
    /// `set`.
    fn set(
        &self,
        key: &str,
        value: &[u8],
        ttl: u32,
    ) -> impl Future<Output = Result<(), Self::Error>>;
    /// `add`: true when stored.
    fn add(
        &self,
        key: &str,
        value: &[u8],
        ttl: u32,
    ) -> impl Future<Output = Result<bool, Self::Error>>;
    /// `append`: true when stored.
    fn append(&self, key: &str, value: &[u8]) -> impl Future<Output = Result<bool, Self::Error>>;
    /// `touch`.
    fn touch(&self, key: &str, ttl: u32) -> impl Future<Output = Result<bool, Self::Error>>;
    /// `get`: the value, or `None` on a miss.
    fn get(&self, key: &str) -> impl Future<Output = Result<Option<Vec<u8>>, Self::Error>>;
}

/// Why a write could not be marked.
#[derive(Debug)]
pub enum MarkError<E> {
    /// The store failed.
    Store(E),
    /// The index could be neither added nor appended to (four tries).
    IndexBusy(String),
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

/// Marks a write of the key whose marker index is `index` (`<prefix><key>`), for at most
/// `ttl` seconds: sets the write's own marker, lists it in the index, and returns the
/// marker's key, which the write's transaction must invalidate with the key.
pub async fn mark_remote_write<S: MarkerStore>(
    store: &S,
    index: &str,
    ttl: u32,
) -> Result<String, MarkError<S::Error>> {
    let token = write_token();
    let marker = format!("{index}:{token}");
    // The marker before the index: a reader that finds a token finds its marker.
    store
        .set(&marker, b"1", ttl)
        .await
        .map_err(MarkError::Store)?;
    let expires = unix_now() + u64::from(ttl);
    let entry = format!("{token}@{expires}");
    for _ in 0..4 {
        if store
            .add(index, entry.as_bytes(), ttl)
            .await
            .map_err(MarkError::Store)?
        {
            return Ok(marker);
        }
        if store
            .append(index, format!(" {entry}").as_bytes())
            .await
            .map_err(MarkError::Store)?
        {
            // The index lives as long as its newest marker.
            store.touch(index, ttl).await.map_err(MarkError::Store)?;
            return Ok(marker);
        }
        // It expired between the two: add it again.
    }
    Err(MarkError::IndexBusy(index.to_string()))
}

/// Whether a marked write of the key whose marker index is `index` has not reached this
/// region's replica yet (its marker is still there). An error counts as marked: the master
/// is always right.
pub async fn marked<S: MarkerStore>(store: &S, index: &str) -> bool {
    let listed = match store.get(index).await {
        Ok(None) => return false,
        Ok(Some(v)) => String::from_utf8_lossy(&v).into_owned(),
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
    let found = futures_util::future::join_all(markers.iter().map(|m| store.get(m))).await;
    found.iter().any(|f| !matches!(f, Ok(None)))
}

/// A pool's servers as a marker store, each key on its server (the router's pool listeners
/// with `remote_markers`): plain text commands on connection lane `lane`.
pub struct PoolStore {
    /// The pool.
    pub pool: std::sync::Arc<crate::Pool>,
    /// The lane the requests go on (the client connection's).
    pub lane: usize,
}

/// A server's failure or an answer that is not memcached's.
#[derive(Debug)]
pub struct PoolStoreError(pub String);

impl PoolStore {
    async fn line(&self, key: &str, request: Vec<u8>) -> Result<Vec<u8>, PoolStoreError> {
        use memfleet_protocol::reply::ReplyKind;
        self.pool
            .backend_for(key.as_bytes())
            .call(self.lane, request, ReplyKind::Line)
            .await
            .map_err(|e| PoolStoreError(e.to_string()))
    }

    async fn store(
        &self,
        verb: &str,
        key: &str,
        value: &[u8],
        ttl: u32,
    ) -> Result<bool, PoolStoreError> {
        let mut request = format!("{verb} {key} 0 {ttl} {}\r\n", value.len()).into_bytes();
        request.extend_from_slice(value);
        request.extend_from_slice(b"\r\n");
        match self.line(key, request).await?.as_slice() {
            b"STORED\r\n" => Ok(true),
            b"NOT_STORED\r\n" => Ok(false),
            other => Err(PoolStoreError(
                String::from_utf8_lossy(other).trim_end().to_string(),
            )),
        }
    }
}

impl MarkerStore for PoolStore {
    type Error = PoolStoreError;
    async fn set(&self, key: &str, value: &[u8], ttl: u32) -> Result<(), PoolStoreError> {
        self.store("set", key, value, ttl).await.map(|_| ())
    }
    async fn add(&self, key: &str, value: &[u8], ttl: u32) -> Result<bool, PoolStoreError> {
        self.store("add", key, value, ttl).await
    }
    async fn append(&self, key: &str, value: &[u8]) -> Result<bool, PoolStoreError> {
        self.store("append", key, value, 0).await
    }
    async fn touch(&self, key: &str, ttl: u32) -> Result<bool, PoolStoreError> {
        match self
            .line(key, format!("touch {key} {ttl}\r\n").into_bytes())
            .await?
            .as_slice()
        {
            b"TOUCHED\r\n" => Ok(true),
            b"NOT_FOUND\r\n" => Ok(false),
            other => Err(PoolStoreError(
                String::from_utf8_lossy(other).trim_end().to_string(),
            )),
        }
    }
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, PoolStoreError> {
        use memfleet_protocol::reply::ReplyKind;
        let reply = self
            .pool
            .backend_for(key.as_bytes())
            .call(
                self.lane,
                format!("get {key}\r\n").into_bytes(),
                ReplyKind::Retrieval,
            )
            .await
            .map_err(|e| PoolStoreError(e.to_string()))?;
        if reply == b"END\r\n" {
            return Ok(None);
        }
        let bad = || PoolStoreError(String::from_utf8_lossy(&reply).trim_end().to_string());
        let head_end = reply
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(bad)?;
        let head = std::str::from_utf8(&reply[..head_end]).map_err(|_| bad())?;
        let len: usize = match head.split(' ').collect::<Vec<_>>()[..] {
            ["VALUE", _, _, len, ..] => len.parse().map_err(|_| bad())?,
            _ => return Err(bad()),
        };
        let data = reply
            .get(head_end + 2..head_end + 2 + len)
            .ok_or_else(bad)?;
        Ok(Some(data.to_vec()))
    }
}
