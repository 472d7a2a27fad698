//! The commit log, behind [`CommitLog`] so the invalidator does not depend on how it is
//! read: [`PgLogical`] reads PostgreSQL's logical replication stream (`pgoutput` with
//! `messages 'true'`, through the `pgwire-replication` crate) and yields, per committed
//! transaction, the keys of its invalidation messages.

use crate::config::Database;
use pgwire_replication::{Lsn, ReplicationClient, ReplicationConfig, ReplicationEvent};

/// PostgreSQL's timestamps count from 2000-01-01; this is that instant in Unix µs.
const POSTGRES_EPOCH_US: i64 = 946_684_800 * 1_000_000;

/// One committed transaction's invalidations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommittedTransaction {
    /// The keys its messages named, in order.
    pub keys: Vec<String>,
    /// Its position: acknowledging it releases it and everything before.
    pub end: u64,
    /// When it committed, µs since the Unix epoch (the database's clock).
    pub committed_at_us: i64,
}

/// A source of committed invalidations.
#[allow(async_fn_in_trait)]
pub trait CommitLog {
    /// The next committed transaction with invalidations; `None` when nothing came for a
    /// while (the caller may flush) or the log ended ([`CommitLog::ended`]).
    async fn next(&mut self) -> anyhow::Result<Option<CommittedTransaction>>;
    /// Everything up to `end` is done: the log may forget it (a restart resumes after it).
    fn ack(&mut self, end: u64);
    /// No more transactions will come.
    fn ended(&self) -> bool;
}

/// PostgreSQL's logical replication stream.
pub struct PgLogical {
    client: ReplicationClient,
    prefix: String,
    /// Keys of the transaction being read.
    keys: Vec<String>,
    ended: bool,
}

impl PgLogical {
    /// Connects to the slot and starts streaming from its confirmed position (what the last
    /// run acknowledged).
    pub async fn connect(db: &Database) -> anyhow::Result<PgLogical> {
        let config = ReplicationConfig::new(
            db.host.clone(),
            db.user.clone(),
            db.password(),
            db.dbname.clone(),
            db.slot.clone(),
            db.publication.clone(),
        )
        .with_port(db.port)
        .with_start_lsn(Lsn::ZERO)
        .with_status_interval(std::time::Duration::from_millis(500))
        .with_wakeup_interval(std::time::Duration::from_millis(500));
        let cannot = |e| {
            anyhow::anyhow!(
                "cannot stream slot {:?} of {}:{}/{}: {e}",
                db.slot,
                db.host,
                db.port,
                db.dbname
            )
        };
        let mut client = ReplicationClient::connect(config).await.map_err(cannot)?;
        // `connect` returns before the server accepted START_REPLICATION (it runs in the
        // client's worker): streaming, and holding the slot, start only here.
        client.wait_started().await.map_err(cannot)?;
        Ok(PgLogical {
            client,
            prefix: db.prefix.clone(),
            keys: Vec::new(),
            ended: false,
        })
    }
}

impl CommitLog for PgLogical {
    async fn next(&mut self) -> anyhow::Result<Option<CommittedTransaction>> {
        loop {
            let Some(event) = self.client.recv().await? else {
                self.ended = true;
                return Ok(None);
            };
            match event {
                ReplicationEvent::Begin { .. } => self.keys.clear(),
                ReplicationEvent::Message {
                    transactional: true,
                    prefix,
                    content,
                    ..
                } if prefix == self.prefix => {
                    let text = String::from_utf8_lossy(&content);
                    self.keys
                        .extend(text.split_ascii_whitespace().map(str::to_string));
                }
                ReplicationEvent::Commit {
                    end_lsn,
                    commit_time_micros,
                    ..
                } => {
                    if self.keys.is_empty() {
                        // A transaction without invalidations: nothing to wait for, so
                        // its position can go at once.
                        self.client.update_applied_lsn(end_lsn);
                        continue;
                    }
                    return Ok(Some(CommittedTransaction {
                        keys: std::mem::take(&mut self.keys),
                        end: end_lsn.as_u64(),
                        committed_at_us: commit_time_micros + POSTGRES_EPOCH_US,
                    }));
                }
                ReplicationEvent::KeepAlive { .. } => return Ok(None),
                ReplicationEvent::StoppedAt { .. } => {
                    self.ended = true;
                    return Ok(None);
                }
                _ => {}
            }
        }
    }

    fn ack(&mut self, end: u64) {
        self.client.update_applied_lsn(Lsn::from_u64(end));
    }

    fn ended(&self) -> bool {
        self.ended
    }
}
