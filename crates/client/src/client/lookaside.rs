//! Look-aside caching on a [`Client`] (paper §3.2.1): leases, `get_or_fill`, typed (JSON)
//! values. Remote markers for replica regions (§5) are in `regional`.

use super::replies::{check_key, decode, parse_retrieval, stored, Retrieved};
use super::values::{Error, Lease, UdpGet};
use super::Client;
use crate::route::{RequestClass, RequestForm, RouteRequest};
use memfleet_protocol::StoreCommand;
use std::future::Future;

impl Client {
    // ---- leases and look-aside ----

    /// mcrouter's `lease-get` (served by memfleet's server).
    pub async fn lease_get(&self, key: impl AsRef<[u8]>) -> Result<Lease, Error> {
        let key = key.as_ref();
        check_key(key)?;
        let op = RouteRequest {
            class: RequestClass::Get,
            key: key.to_vec(),
            form: RequestForm::Get {
                head: b"lease-get".to_vec(),
            },
        };
        let reply = self.call(op).await?;
        match parse_retrieval(&reply)? {
            Retrieved::Value(v) => Ok(Lease::Hit(decode(v)?)),
            Retrieved::Miss => Ok(Lease::HotMiss { stale: None }),
            Retrieved::Lease { token, stale } => {
                let stale = match stale {
                    Some(v) if !v.data.is_empty() => Some(decode(v)?),
                    _ => None,
                };
                Ok(if token == 1 {
                    Lease::HotMiss { stale }
                } else {
                    Lease::Token { token, stale }
                })
            }
        }
    }

    /// `lease-set`: stores only while `token` is the key's lease (no delete came since the
    /// `lease-get`); true if stored.
    pub async fn lease_set(
        &self,
        key: impl AsRef<[u8]>,
        token: u64,
        value: &[u8],
        ttl: u32,
    ) -> Result<bool, Error> {
        let line = self
            .store(StoreCommand::LeaseSet, key.as_ref(), value, 0, ttl, token)
            .await?;
        stored(&line)
    }

    /// Look-aside caching with leases (paper §3.2.1): the cached value; on a miss, the
    /// caller that gets the lease runs `loader` (the database read) and fills the cache with
    /// its token, while the others wait briefly and ask again (or take a stale value, when
    /// `accept_stale`), so one key's miss costs the database one query per lease interval,
    /// not one per caller. When the cache fails (error, timeout, down) the loader's value is
    /// returned but not stored: the paper skips the fill to spare a struggling server.
    pub async fn get_or_fill<F, Fut, E>(
        &self,
        key: impl AsRef<[u8]>,
        ttl: u32,
        mut loader: F,
    ) -> Result<Vec<u8>, E>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Vec<u8>, E>>,
    {
        let key = key.as_ref();
        if self.udp.is_some() {
            // The cheap way first; a lost reply means a struggling server or network:
            // load, but do not add a fill to its load.
            match self.get_udp(key).await {
                Ok(UdpGet::Hit(v)) => return Ok(v.data),
                Ok(UdpGet::Lost) => return loader().await,
                Ok(UdpGet::Miss) | Err(_) => {}
            }
        }
        let mut pause = self.options.lease_retry;
        let started = tokio::time::Instant::now();
        loop {
            match self.lease_get(key).await {
                Ok(Lease::Hit(v)) => return Ok(v.data),
                Ok(Lease::Token { token, .. }) => {
                    let value = loader().await?;
                    let _ = self.lease_set(key, token, &value, ttl).await;
                    return Ok(value);
                }
                Ok(Lease::HotMiss { stale }) => {
                    if let (true, Some(v)) = (self.options.accept_stale, stale) {
                        return Ok(v.data);
                    }
                    if started.elapsed() >= self.options.lease_wait {
                        return loader().await;
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(self.options.lease_retry_max);
                }
                Err(_) => return loader().await,
            }
        }
    }

    // ---- typed values ----

    /// Stores `value` as JSON.
    pub async fn set_json<T: serde::Serialize>(
        &self,
        key: impl AsRef<[u8]>,
        value: &T,
        ttl: u32,
    ) -> Result<(), Error> {
        self.set(key, &serde_json::to_vec(value)?, ttl).await
    }

    /// Reads a JSON value stored by [`Client::set_json`].
    pub async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        key: impl AsRef<[u8]>,
    ) -> Result<Option<T>, Error> {
        match self.get(key).await? {
            Some(v) => Ok(Some(serde_json::from_slice(&v.data)?)),
            None => Ok(None),
        }
    }
}
