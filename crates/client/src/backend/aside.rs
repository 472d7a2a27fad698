//! What runs beside a backend's connection tasks, each on a connection of its own: the
//! probe that brings a down server back (`version` with a growing pause), and
//! [`Backend::ask_aside`], a request asked outside the request path.

use super::connect::connect;
use super::{Backend, HEALTH_EPOCH, MAX_VALUE};
use memfleet_protocol::reply::{frame, Frame, ReplyKind};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Asks a down server for its version until it answers, then marks it up.
pub(super) async fn probe(backend: Arc<Backend>) {
    let mut pause = backend.options.retry;
    loop {
        tokio::time::sleep(backend.retry_pause(pause)).await;
        if backend.probe_once().await {
            return;
        }
        pause = (pause * 2).min(Duration::from_secs(60));
    }
}

impl Backend {
    /// One probe of a down server: asks for its version (on a new connection, with the
    /// pool's TLS and login) and marks the server up if it answers. True when it is up.
    pub async fn probe_once(self: &Arc<Self>) -> bool {
        if !self.health.down.load(Ordering::Acquire) {
            return true;
        }
        if !self.reachable {
            return false;
        }
        let options = &self.options;
        let alive = tokio::time::timeout(options.timeout, async {
            let (mut rd, mut wr) = connect(
                self.addr,
                options.tls.as_ref(),
                options.auth.as_ref(),
                options.timeout,
            )
            .await
            .ok()?;
            wr.write_all(b"version\r\n").await.ok()?;
            wr.flush().await.ok()?;
            let mut buf = [0u8; 128];
            let n = rd.read(&mut buf).await.ok()?;
            buf[..n].starts_with(b"VERSION ").then_some(())
        })
        .await;
        if !matches!(alive, Ok(Some(()))) {
            return false;
        }
        self.health.failures.store(0, Ordering::Relaxed);
        if self.health.down.swap(false, Ordering::AcqRel) {
            if let Some(b) = self.budget.load_full() {
                b.give_back();
            }
            HEALTH_EPOCH.fetch_add(1, Ordering::Release);
            tracing::info!(server = %self.name, "server back up");
        }
        true
    }
}

impl Backend {
    /// Asks the server `request` on a connection of its own (with the pool's TLS and login),
    /// within the pool's timeout or `at_most` if shorter, and returns its whole reply (framed
    /// as `kind`); `None` when the server is marked down, unreachable or slow. Outside the request path: not counted
    /// in the server's requests, errors or `max_outstanding`, and never marks it down. For
    /// what an operator asks of every server now and then (the router's fleet `stats`).
    pub async fn ask_aside(
        &self,
        request: &[u8],
        kind: ReplyKind,
        at_most: Duration,
    ) -> Option<Vec<u8>> {
        if self.health.down.load(Ordering::Acquire) || !self.reachable {
            return None;
        }
        let options = &self.options;
        let timeout = options.timeout.min(at_most);
        tokio::time::timeout(timeout, async {
            let (mut rd, mut wr) = connect(
                self.addr,
                options.tls.as_ref(),
                options.auth.as_ref(),
                timeout,
            )
            .await
            .ok()?;
            wr.write_all(request).await.ok()?;
            wr.flush().await.ok()?;
            let mut reply = Vec::with_capacity(4096);
            loop {
                if let Ok(Frame::Complete(n)) = frame(&reply, kind, MAX_VALUE) {
                    reply.truncate(n);
                    return Some(reply);
                }
                if reply.len() > 16 << 20 || rd.read_buf(&mut reply).await.ok()? == 0 {
                    return None;
                }
            }
        })
        .await
        .ok()
        .flatten()
    }
}
