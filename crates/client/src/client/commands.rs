//! memcached's commands on a [`Client`]: retrieval (over UDP where it can), storage, delete,
//! arithmetic, touch, meta commands, `flush_all` and `version`.

use super::replies::{check_key, decode, expect, parse_retrieval, stored, Retrieved};
use super::values::{CasOutcome, Error, UdpGet, Value};
use super::Client;
use crate::route::{RequestClass, RequestForm, RouteRequest};
use crate::udp::{UdpGets, UdpReply};
use crate::window::RequestOutcome;
use memfleet_protocol::reply::{self, ReplyKind, Verdict};
use memfleet_protocol::StoreCommand;
use std::collections::HashMap;

impl Client {
    // ---- retrieval ----

    /// `get`: the value, or `None` on a miss. Over UDP when the client has it on (a lost
    /// datagram is a miss too; [`Client::get_udp`] tells them apart).
    pub async fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Value>, Error> {
        match self.get_udp(key).await? {
            UdpGet::Hit(v) => Ok(Some(v)),
            UdpGet::Miss | UdpGet::Lost => Ok(None),
        }
    }

    /// A get over UDP straight to the key's server (TCP when UDP is off, the route sends
    /// gets elsewhere than one server, or the reply is too large for UDP).
    pub async fn get_udp(&self, key: impl AsRef<[u8]>) -> Result<UdpGet, Error> {
        let key = key.as_ref();
        check_key(key)?;
        let target = self
            .udp
            .as_ref()
            .and_then(|u| Some((u, self.root().get_target(key, self.ctx())?)));
        if let Some((udp, server)) = target {
            let mut request = b"get ".to_vec();
            request.extend_from_slice(key);
            request.extend_from_slice(b"\r\n");
            let slot = self.window.acquire().await;
            let reply = udp.request(server, &request).await;
            slot.done(match reply {
                Ok(UdpReply::Reply(_)) => RequestOutcome::Replied,
                Ok(UdpReply::Lost) => RequestOutcome::TimedOut,
                Err(_) => RequestOutcome::Failed,
            });
            match reply {
                Ok(UdpReply::Lost) => return Ok(UdpGet::Lost),
                // An error (too large for UDP, say): TCP below.
                Ok(UdpReply::Reply(r)) if reply::verdict(&r) != Verdict::Failed => {
                    return match parse_retrieval(&r)? {
                        Retrieved::Value(v) => Ok(UdpGet::Hit(decode(v)?)),
                        Retrieved::Miss => Ok(UdpGet::Miss),
                        Retrieved::Lease { .. } => Err(Error::Protocol("LVALUE to a get".into())),
                    };
                }
                // Too large for UDP, or the socket failed: TCP below.
                _ => {}
            }
        }
        Ok(match self.retrieve(key, b"get").await? {
            Some(v) => UdpGet::Hit(v),
            None => UdpGet::Miss,
        })
    }

    /// The UDP side's counters, when UDP is on.
    pub fn udp_counters(&self) -> Option<&crate::udp::UdpCounters> {
        self.udp.as_deref().map(UdpGets::counters)
    }

    /// `gets`: the value with its CAS unique.
    pub async fn gets(&self, key: impl AsRef<[u8]>) -> Result<Option<Value>, Error> {
        self.retrieve(key.as_ref(), b"gets").await
    }

    /// `gat`: get and set a new TTL.
    pub async fn gat(&self, key: impl AsRef<[u8]>, ttl: u32) -> Result<Option<Value>, Error> {
        self.retrieve(key.as_ref(), format!("gat {ttl}").as_bytes())
            .await
    }

    async fn retrieve(&self, key: &[u8], head: &[u8]) -> Result<Option<Value>, Error> {
        check_key(key)?;
        let op = RouteRequest {
            class: RequestClass::Get,
            key: key.to_vec(),
            form: RequestForm::Get {
                head: head.to_vec(),
            },
        };
        let reply = self.call(op).await?;
        match parse_retrieval(&reply)? {
            Retrieved::Value(v) => Ok(Some(decode(v)?)),
            Retrieved::Miss => Ok(None),
            Retrieved::Lease { .. } => Err(Error::Protocol("LVALUE to a get".into())),
        }
    }

    /// Fetches many keys at once: all are sent together (each server's connection writes
    /// everything queued in one go, so a server gets its keys in one round trip, as far as
    /// the flow-control window allows).
    /// Keys whose server fails are left out, like misses.
    pub async fn get_many<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
    ) -> Result<HashMap<Vec<u8>, Value>, Error> {
        for k in keys {
            check_key(k.as_ref())?;
        }
        // Polled together: every get takes its window slot and queues its request in the
        // same pass, so each server's connection writes them all at once.
        let replies =
            futures_util::future::join_all(keys.iter().map(|k| self.get(k.as_ref()))).await;
        let mut out = HashMap::new();
        for (k, r) in keys.iter().zip(replies) {
            match r {
                Ok(Some(v)) => {
                    out.insert(k.as_ref().to_vec(), v);
                }
                Ok(None) | Err(Error::Unreachable(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    // ---- storage ----

    pub(super) async fn store(
        &self,
        command: StoreCommand,
        key: &[u8],
        value: &[u8],
        flags: u32,
        ttl: u32,
        cas: u64,
    ) -> Result<String, Error> {
        check_key(key)?;
        let (data, flags) = self.encode(value, flags);
        let op = RouteRequest {
            class: RequestClass::Set,
            key: key.to_vec(),
            form: RequestForm::Store {
                command,
                flags,
                exptime: i64::from(ttl),
                cas,
                data: data.into(),
            },
        };
        self.line(op).await
    }

    /// `set`.
    pub async fn set(&self, key: impl AsRef<[u8]>, value: &[u8], ttl: u32) -> Result<(), Error> {
        self.set_with_flags(key, value, 0, ttl).await
    }

    /// `set` with client flags.
    pub async fn set_with_flags(
        &self,
        key: impl AsRef<[u8]>,
        value: &[u8],
        flags: u32,
        ttl: u32,
    ) -> Result<(), Error> {
        let line = self
            .store(StoreCommand::Set, key.as_ref(), value, flags, ttl, 0)
            .await?;
        expect(&line, "STORED")
    }

    /// `add`: true if stored (the key was absent).
    pub async fn add(&self, key: impl AsRef<[u8]>, value: &[u8], ttl: u32) -> Result<bool, Error> {
        let line = self
            .store(StoreCommand::Add, key.as_ref(), value, 0, ttl, 0)
            .await?;
        stored(&line)
    }

    /// `replace`: true if stored (the key was present).
    pub async fn replace(
        &self,
        key: impl AsRef<[u8]>,
        value: &[u8],
        ttl: u32,
    ) -> Result<bool, Error> {
        let line = self
            .store(StoreCommand::Replace, key.as_ref(), value, 0, ttl, 0)
            .await?;
        stored(&line)
    }

    /// `append` (never compressed: the bytes are joined on the server).
    pub async fn append(&self, key: impl AsRef<[u8]>, value: &[u8]) -> Result<bool, Error> {
        self.concat(StoreCommand::Append, key.as_ref(), value).await
    }

    /// `prepend` (never compressed).
    pub async fn prepend(&self, key: impl AsRef<[u8]>, value: &[u8]) -> Result<bool, Error> {
        self.concat(StoreCommand::Prepend, key.as_ref(), value)
            .await
    }

    async fn concat(&self, command: StoreCommand, key: &[u8], value: &[u8]) -> Result<bool, Error> {
        check_key(key)?;
        let op = RouteRequest {
            class: RequestClass::Set,
            key: key.to_vec(),
            form: RequestForm::Store {
                command,
                flags: 0,
                exptime: 0,
                cas: 0,
                data: value.into(),
            },
        };
        stored(&self.line(op).await?)
    }

    /// `cas`: store only if the value is still the one read with `cas`.
    pub async fn cas(
        &self,
        key: impl AsRef<[u8]>,
        value: &[u8],
        ttl: u32,
        cas: u64,
    ) -> Result<CasOutcome, Error> {
        let line = self
            .store(StoreCommand::Cas, key.as_ref(), value, 0, ttl, cas)
            .await?;
        match line.as_str() {
            "STORED" => Ok(CasOutcome::Stored),
            "EXISTS" => Ok(CasOutcome::Exists),
            "NOT_FOUND" => Ok(CasOutcome::NotFound),
            _ => Err(Error::Protocol(line)),
        }
    }

    /// `delete`: true if the key was there. This is how caches are invalidated after a
    /// database write: deletes are idempotent, updates are not (paper §3.1).
    pub async fn delete(&self, key: impl AsRef<[u8]>) -> Result<bool, Error> {
        self.delete_holding_off(key, 0).await
    }

    /// `delete <key> <seconds>`: delete, and refuse `add`s for the hold-off.
    pub async fn delete_holding_off(
        &self,
        key: impl AsRef<[u8]>,
        holdoff: u32,
    ) -> Result<bool, Error> {
        let key = key.as_ref();
        check_key(key)?;
        let op = RouteRequest {
            class: RequestClass::Delete,
            key: key.to_vec(),
            form: RequestForm::Delete { holdoff },
        };
        match self.line(op).await?.as_str() {
            "DELETED" => Ok(true),
            "NOT_FOUND" => Ok(false),
            other => Err(Error::Protocol(other.into())),
        }
    }

    /// `incr`: the new value, or `None` if the key is absent.
    pub async fn incr(&self, key: impl AsRef<[u8]>, delta: u64) -> Result<Option<u64>, Error> {
        self.arith(b"incr ", key.as_ref(), delta).await
    }

    /// `decr` (stops at 0).
    pub async fn decr(&self, key: impl AsRef<[u8]>, delta: u64) -> Result<Option<u64>, Error> {
        self.arith(b"decr ", key.as_ref(), delta).await
    }

    async fn arith(&self, head: &[u8], key: &[u8], delta: u64) -> Result<Option<u64>, Error> {
        check_key(key)?;
        let line = self
            .line(RouteRequest::raw(
                RequestClass::Set,
                key,
                head,
                format!(" {delta}\r\n").into_bytes(),
                ReplyKind::Line,
            ))
            .await?;
        if line == "NOT_FOUND" {
            return Ok(None);
        }
        line.parse().map(Some).map_err(|_| Error::Protocol(line))
    }

    /// `touch`: true if the key was there.
    pub async fn touch(&self, key: impl AsRef<[u8]>, ttl: u32) -> Result<bool, Error> {
        let key = key.as_ref();
        check_key(key)?;
        let line = self
            .line(RouteRequest::raw(
                RequestClass::Set,
                key,
                b"touch ",
                format!(" {ttl}\r\n").into_bytes(),
                ReplyKind::Line,
            ))
            .await?;
        match line.as_str() {
            "TOUCHED" => Ok(true),
            "NOT_FOUND" => Ok(false),
            _ => Err(Error::Protocol(line)),
        }
    }

    /// A meta command (`mg`, `ms`, `md`, `ma`) with its flags as memcached's protocol writes
    /// them, and for `ms` the data; returns the reply (status line, and data for `VA`).
    /// Routed by `key` like every other command.
    pub async fn meta(
        &self,
        command: &str,
        key: impl AsRef<[u8]>,
        flags: &str,
        data: Option<&[u8]>,
    ) -> Result<Vec<u8>, Error> {
        let key = key.as_ref();
        check_key(key)?;
        let class = match command {
            "mg" => RequestClass::Get,
            "ms" | "ma" => RequestClass::Set,
            "md" => RequestClass::Delete,
            _ => return Err(Error::Protocol(format!("not a meta command: {command}"))),
        };
        let mut tail = Vec::new();
        if command == "ms" {
            let data = data.unwrap_or_default();
            tail.extend_from_slice(format!(" {}", data.len()).as_bytes());
        }
        if !flags.is_empty() {
            tail.push(b' ');
            tail.extend_from_slice(flags.as_bytes());
        }
        tail.extend_from_slice(b"\r\n");
        if command == "ms" {
            tail.extend_from_slice(data.unwrap_or_default());
            tail.extend_from_slice(b"\r\n");
        }
        let head = format!("{command} ");
        let op = RouteRequest::raw(class, key, head.as_bytes(), tail, ReplyKind::Meta);
        Ok(self.call(op).await?)
    }

    /// `flush_all` on every server the client's route reaches; the first failure wins.
    pub async fn flush_all(&self) -> Result<(), Error> {
        let mut pools = Vec::new();
        self.root().pools(&mut pools);
        let calls: Vec<_> = pools
            .iter()
            .flat_map(|p| p.backends().iter())
            .map(|b| b.call(self.lane, b"flush_all\r\n".to_vec(), ReplyKind::Line))
            .collect();
        for c in calls {
            let reply = c.await?;
            if reply != b"OK\r\n" {
                return Err(Error::Server(
                    String::from_utf8_lossy(&reply).trim_end().into(),
                ));
            }
        }
        Ok(())
    }

    /// `version` of every server the route reaches: (server, version).
    pub async fn versions(&self) -> Vec<(String, Result<String, Error>)> {
        let mut pools = Vec::new();
        self.root().pools(&mut pools);
        let mut out = Vec::new();
        for b in pools.iter().flat_map(|p| p.backends().iter()) {
            let reply = b
                .call(self.lane, b"version\r\n".to_vec(), ReplyKind::Line)
                .await;
            let version = match reply {
                Ok(r) => match String::from_utf8_lossy(&r)
                    .trim_end()
                    .strip_prefix("VERSION ")
                {
                    Some(v) => Ok(v.to_string()),
                    None => Err(Error::Protocol(String::from_utf8_lossy(&r).into_owned())),
                },
                Err(e) => Err(e.into()),
            };
            out.push((b.name().to_string(), version));
        }
        out
    }
}
