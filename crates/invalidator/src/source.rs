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
    /// Inside a transaction (between BEGIN and COMMIT).
    in_transaction: bool,
    confirmations: Confirmations,
    ended: bool,
}

/// Which position of the log may be confirmed to PostgreSQL (the slot then forgets what
/// is before it). Every returned transaction must be acknowledged (delivered) first;
/// positions with nothing to deliver (a transaction without invalidations, a keepalive's
/// WAL end) are confirmed too, but never past a returned transaction still waiting.
/// Confirming idle positions lets PostgreSQL recycle WAL, and a walsender finish: a
/// server's fast shutdown waits until its logical clients confirmed everything sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Confirmations {
    /// The end of the last transaction returned, and of the last acknowledged.
    returned: u64,
    acked: u64,
    /// The latest position needing no delivery of its own.
    skip_to: u64,
}

impl Confirmations {
    /// A transaction ending at `end` was handed out for delivery.
    pub fn returned(&mut self, end: u64) {
        self.returned = self.returned.max(end);
    }

    /// Everything handed out up to `end` was delivered: the position to confirm.
    pub fn acked(&mut self, end: u64) -> u64 {
        self.acked = self.acked.max(end);
        self.confirmable()
    }

    /// Nothing up to `end` needs delivery but what was handed out: the position to
    /// confirm now, if it moved.
    pub fn skip(&mut self, end: u64) -> Option<u64> {
        self.skip_to = self.skip_to.max(end);
        (self.acked >= self.returned).then(|| self.confirmable())
    }

    fn confirmable(&self) -> u64 {
        if self.acked >= self.returned {
            self.acked.max(self.skip_to)
        } else {
            self.acked
        }
    }
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
            in_transaction: false,
            confirmations: Confirmations::default(),
            ended: false,
        })
    }

    /// Nothing up to `end` needs delivery of its own.
    fn skip(&mut self, end: u64) {
        if let Some(to) = self.confirmations.skip(end).filter(|to| *to > 0) {
            self.client.update_applied_lsn(Lsn::from_u64(to));
        }
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
                ReplicationEvent::Begin { .. } => {
                    self.keys.clear();
                    self.in_transaction = true;
                }
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
                    self.in_transaction = false;
                    if self.keys.is_empty() {
                        // A transaction without invalidations: nothing to wait for but
                        // the ones before it.
                        self.skip(end_lsn.as_u64());
                        continue;
                    }
                    self.confirmations.returned(end_lsn.as_u64());
                    return Ok(Some(CommittedTransaction {
                        keys: std::mem::take(&mut self.keys),
                        end: end_lsn.as_u64(),
                        committed_at_us: commit_time_micros + POSTGRES_EPOCH_US,
                    }));
                }
                ReplicationEvent::KeepAlive { wal_end, .. } => {
                    // Everything before it was read: outside a transaction, nothing up to
                    // it needs delivery but what was returned already.
                    if !self.in_transaction {
                        self.skip(wal_end.as_u64());
                    }
                    return Ok(None);
                }
                ReplicationEvent::StoppedAt { .. } => {
                    self.ended = true;
                    return Ok(None);
                }
                _ => {}
            }
        }
    }

    fn ack(&mut self, end: u64) {
        let to = self.confirmations.acked(end);
        self.client.update_applied_lsn(Lsn::from_u64(to));
    }

    fn ended(&self) -> bool {
        self.ended
    }
}

#[cfg(test)]
mod tests {
    use super::Confirmations;

    #[test]
    fn idle_positions_are_confirmed_but_never_past_a_transaction_not_yet_delivered() {
        let mut c = Confirmations::default();
        // Idle: a keepalive's position goes at once.
        assert_eq!(c.skip(50), Some(50));
        // A transaction with invalidations (ends at 100) is out for delivery; an empty one
        // after it (200) and a keepalive (250) must wait for it.
        c.returned(100);
        assert_eq!(c.skip(200), None);
        assert_eq!(c.skip(250), None);
        // Another one with invalidations (300) goes out before the first is delivered.
        c.returned(300);
        assert_eq!(c.acked(100), 100);
        assert_eq!(c.acked(300), 300);
        // All delivered: idle positions move on again.
        assert_eq!(c.skip(400), Some(400));
        c.returned(500);
        assert_eq!(c.skip(600), None);
        assert_eq!(c.acked(500), 600);
    }
}
