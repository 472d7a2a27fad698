//! How far a replica region's database is behind (paper §5): when `[database]` is a
//! standby, its replay position and last replayed commit are read every second (and, with
//! `[database.primary]`, the primary's WAL position), so that the replication lag stands in
//! the log and the metrics next to the invalidation lag it bounds from below: a delete is
//! decoded from the standby only once the standby replayed the transaction.

use crate::config::Database;
use crate::Counters;
use std::sync::Arc;
use std::time::Duration;

/// Where the database stands against its primary.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReplicationLag {
    /// The database is a standby (in recovery); when not, the rest is zero.
    pub standby: bool,
    /// WAL not replayed yet, bytes: the primary's position minus the replay position when
    /// `[database.primary]` is given, else what the standby received and has not replayed.
    pub bytes: u64,
    /// Whether `bytes` was measured against the primary.
    pub against_primary: bool,
    /// How far the replay is behind, seconds: 0 when `bytes` is 0, else
    /// the time since the commit of the last replayed transaction (PostgreSQL's usual
    /// measure, `now() - pg_last_xact_replay_timestamp()`).
    pub seconds: f64,
}

/// How often the lag is read.
pub const EVERY: Duration = Duration::from_secs(1);

/// Reads the lag every [`EVERY`] into `counters.replication`, reconnecting after errors
/// (logged once per outage; the reading is cleared meanwhile, so the metrics do not show
/// a frozen one), until aborted.
pub async fn watch(db: Database, counters: Arc<Counters>) {
    let primary = db.primary_database();
    let mut failing = false;
    loop {
        let Err(e) = measure_loop(&db, primary.as_ref(), &counters, &mut failing).await;
        *counters
            .replication
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
        if !failing {
            tracing::warn!(error = %format!("{e:#}"), "cannot read the replication lag; retrying");
        }
        failing = true;
        tokio::time::sleep(EVERY).await;
    }
}

/// Reads until an error; `failing` goes false at the first good reading.
async fn measure_loop(
    db: &Database,
    primary: Option<&Database>,
    counters: &Counters,
    failing: &mut bool,
) -> anyhow::Result<std::convert::Infallible> {
    let here = crate::setup::connect(db).await?;
    let there = match primary {
        Some(p) => Some(crate::setup::connect(p).await?),
        None => None,
    };
    let mut tick = tokio::time::interval(EVERY);
    loop {
        tick.tick().await;
        let lag = measure(&here, there.as_ref()).await?;
        if *failing {
            tracing::info!("reading the replication lag again");
            *failing = false;
        }
        *counters
            .replication
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(lag);
    }
}

/// One reading.
pub async fn measure(
    standby: &tokio_postgres::Client,
    primary: Option<&tokio_postgres::Client>,
) -> anyhow::Result<ReplicationLag> {
    let row = standby
        .query_one(
            "SELECT pg_is_in_recovery(), \
                    (pg_last_wal_receive_lsn() - '0/0')::float8, \
                    (pg_last_wal_replay_lsn() - '0/0')::float8, \
                    extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8",
            &[],
        )
        .await?;
    let standby_now: bool = row.get(0);
    if !standby_now {
        return Ok(ReplicationLag::default());
    }
    let received: Option<f64> = row.get(1);
    let replayed: Option<f64> = row.get(2);
    let since_last: Option<f64> = row.get(3);
    let replayed = replayed.unwrap_or(0.0);
    let (bytes, against_primary) = match primary {
        Some(p) => {
            let at: f64 = p
                .query_one("SELECT (pg_current_wal_lsn() - '0/0')::float8", &[])
                .await?
                .get(0);
            ((at - replayed).max(0.0), true)
        }
        None => ((received.unwrap_or(replayed) - replayed).max(0.0), false),
    };
    let seconds = if bytes == 0.0 {
        0.0
    } else {
        since_last.unwrap_or(0.0).max(0.0)
    };
    Ok(ReplicationLag {
        standby: true,
        bytes: bytes as u64,
        against_primary,
        seconds,
    })
}
