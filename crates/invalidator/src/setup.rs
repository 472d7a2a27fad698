//! Before streaming: the database must be able to decode (`wal_level = logical`), the user
//! must get in, and the slot and publication must exist (created when `create = true`).
//! Each failure says what to change.

use crate::config::Database;
use anyhow::{bail, Context};

/// How long making a slot on a standby may wait for the primary's running-transactions
/// record.
const SLOT_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// Connects to `db` (its connection task runs until the client is dropped).
pub async fn connect(db: &Database) -> anyhow::Result<tokio_postgres::Client> {
    let (client, connection) = db
        .connect_config()
        .connect(tokio_postgres::NoTls)
        .await
        .with_context(|| {
            format!(
                "cannot connect to PostgreSQL at {}:{} as {:?} (database {:?}): check the \
                 address, the credentials and pg_hba.conf",
                db.host, db.port, db.user, db.dbname
            )
        })?;
    tokio::spawn(connection);
    Ok(client)
}

/// Checks (and with `create`, prepares) the database for the invalidator. A standby (a
/// replica region's database, paper §5) must be PostgreSQL 16 or later; what a standby
/// cannot do itself (create the publication, log the running-transactions record a new
/// slot waits for) is asked of `[database.primary]`.
pub async fn prepare(db: &Database) -> anyhow::Result<()> {
    let client = connect(db).await?;
    let wal_level: String = client.query_one("SHOW wal_level", &[]).await?.get(0);
    if wal_level != "logical" {
        bail!(
            "PostgreSQL has wal_level = {wal_level}; logical decoding needs wal_level = logical \
             (ALTER SYSTEM SET wal_level = logical, then restart PostgreSQL; on a standby too)"
        );
    }
    let standby: bool = client
        .query_one("SELECT pg_is_in_recovery()", &[])
        .await?
        .get(0);
    if standby {
        check_standby(db, &client).await?;
    }
    let publication = client
        .query_opt(
            "SELECT 1 FROM pg_publication WHERE pubname = $1",
            &[&db.publication],
        )
        .await?;
    if publication.is_none() {
        if !db.create {
            bail!(
                "no publication {:?}: CREATE PUBLICATION {} (empty is enough{}), or set \
                 create = true",
                db.publication,
                db.publication,
                if standby { ", on the primary" } else { "" }
            );
        }
        let create = format!("CREATE PUBLICATION {}", quote_ident(&db.publication));
        if standby {
            // Read-only here: made on the primary, then waited for until replayed.
            let Some(primary) = db.primary_database() else {
                bail!(
                    "no publication {:?}, and {}:{} is a standby (read-only): {create} on its \
                     primary, or name the primary in [database.primary]",
                    db.publication,
                    db.host,
                    db.port
                );
            };
            let made = connect(&primary).await?.batch_execute(&create).await;
            already_exists_is_fine(made).context("creating the publication on the primary")?;
            tracing::info!(publication = %db.publication, primary = %primary.host, "publication created on the primary");
            wait_for_publication(db, &client).await?;
        } else {
            already_exists_is_fine(client.batch_execute(&create).await)
                .context("creating the publication")?;
            tracing::info!(publication = %db.publication, "publication created");
        }
    }
    // `conflicting` (PostgreSQL 16+): the slot was invalidated, e.g. a standby's slot whose
    // rows the primary removed; it will never stream again.
    let slot = client
        .query_opt(
            "SELECT plugin, to_jsonb(s) ->> 'conflicting' FROM pg_replication_slots s \
             WHERE slot_name = $1 AND database = $2",
            &[&db.slot, &db.dbname],
        )
        .await?;
    match slot {
        Some(row) => {
            let plugin: Option<String> = row.get(0);
            if plugin.as_deref() != Some("pgoutput") {
                bail!(
                    "slot {:?} uses plugin {plugin:?}; the invalidator needs a pgoutput slot",
                    db.slot
                );
            }
            let conflicting: Option<String> = row.get(1);
            if conflicting.as_deref() == Some("true") {
                bail!(
                    "slot {:?} was invalidated (conflicting with recovery: the primary removed \
                     rows it needed; give the standby a physical slot, primary_slot_name, \
                     with hot_standby_feedback = on): its transactions since are lost to it. \
                     Drop it (SELECT pg_drop_replication_slot('{}')) and let the invalidator \
                     make a new one, then flush this region's caches",
                    db.slot,
                    db.slot
                );
            }
        }
        None if db.create => {
            // On a standby, creating a slot waits for the primary's next running-transactions
            // record (PostgreSQL logs one every 15 s while the primary writes, none while it
            // is idle): asked for every second while it waits.
            let nudge = match (standby, db.primary_database()) {
                (true, Some(primary)) => Some(tokio::spawn(nudge_primary(primary))),
                (true, None) => {
                    tracing::info!(
                        "creating the slot on a standby waits for the primary's next \
                         running-transactions record (SELECT pg_log_standby_snapshot() on the \
                         primary makes one; [database.primary] makes the invalidator ask)"
                    );
                    None
                }
                (false, _) => None,
            };
            let slot_name: &(dyn tokio_postgres::types::ToSql + Sync) = &db.slot;
            let params = [slot_name];
            let create = client.query_one(
                "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
                &params,
            );
            let created = tokio::time::timeout(SLOT_WAIT, create).await;
            if let Some(n) = nudge {
                n.abort();
            }
            let Ok(created) = created else {
                bail!(
                    "creating slot {:?} on the standby {}:{} waited {} s for a \
                     running-transactions record from the primary: run SELECT \
                     pg_log_standby_snapshot() on the primary (or name it in \
                     [database.primary], as a user allowed to)",
                    db.slot,
                    db.host,
                    db.port,
                    SLOT_WAIT.as_secs()
                );
            };
            created.context("creating the replication slot (the user needs REPLICATION)")?;
            tracing::info!(slot = %db.slot, standby, "replication slot created");
        }
        None => bail!(
            "no logical replication slot {:?} in database {:?}: \
             SELECT pg_create_logical_replication_slot('{}', 'pgoutput'), or set create = true",
            db.slot,
            db.dbname,
            db.slot
        ),
    }
    Ok(())
}

/// A standby can decode only from PostgreSQL 16 on; without `hot_standby_feedback` the
/// primary may vacuum rows the slot still needs, which invalidates the slot.
async fn check_standby(db: &Database, client: &tokio_postgres::Client) -> anyhow::Result<()> {
    let version: String = client
        .query_one("SHOW server_version_num", &[])
        .await?
        .get(0);
    let version: u32 = version.parse().unwrap_or(0);
    if version < 160000 {
        bail!(
            "{}:{} is a standby running PostgreSQL {}.{}: logical decoding on a standby needs \
             PostgreSQL 16 or later (or point [database] at the primary, and accept that deletes \
             may then reach this region before its data does)",
            db.host,
            db.port,
            version / 10000,
            version % 10000
        );
    }
    let feedback: String = client
        .query_one("SHOW hot_standby_feedback", &[])
        .await?
        .get(0);
    if feedback != "on" {
        tracing::warn!(
            "the standby has hot_standby_feedback = {feedback}: the primary may remove rows \
             the slot still needs, which invalidates the slot (set it on)"
        );
    }
    tracing::info!(
        host = %db.host,
        "reading a standby: deletes reach this region only after its data did (paper §5)"
    );
    Ok(())
}

/// Waits (a minute at most) until a publication made on the primary is replayed here.
async fn wait_for_publication(
    db: &Database,
    client: &tokio_postgres::Client,
) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let row = client
            .query_opt(
                "SELECT 1 FROM pg_publication WHERE pubname = $1",
                &[&db.publication],
            )
            .await?;
        if row.is_some() {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            bail!(
                "the publication {:?} made on the primary has not reached the standby in a \
                 minute: is it replaying?",
                db.publication
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Asks the primary for a running-transactions record every second (until aborted).
async fn nudge_primary(primary: Database) {
    let client = match connect(&primary).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "cannot reach the primary to speed up creating the slot");
            return;
        }
    };
    loop {
        if let Err(e) = client
            .batch_execute("SELECT pg_log_standby_snapshot()")
            .await
        {
            tracing::warn!(error = %e, "pg_log_standby_snapshot() on the primary failed");
            return;
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

/// Another invalidator (another region's, started at the same time) may have made it first:
/// `duplicate_object`, or `unique_violation` when both were creating it at once.
fn already_exists_is_fine(
    made: Result<(), tokio_postgres::Error>,
) -> Result<(), tokio_postgres::Error> {
    use tokio_postgres::error::SqlState;
    match made {
        Err(e)
            if e.code() == Some(&SqlState::DUPLICATE_OBJECT)
                || e.code() == Some(&SqlState::UNIQUE_VIOLATION) =>
        {
            Ok(())
        }
        other => other,
    }
}

/// `name` as a quoted SQL identifier.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}
