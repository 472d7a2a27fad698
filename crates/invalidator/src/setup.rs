//! Before streaming: the database must be able to decode (`wal_level = logical`), the user
//! must get in, and the slot and publication must exist (created when `create = true`).
//! Each failure says what to change.

use crate::config::Database;
use anyhow::{bail, Context};

/// Checks (and with `create`, prepares) the database for the invalidator.
pub async fn prepare(db: &Database) -> anyhow::Result<()> {
    let mut cfg = tokio_postgres::Config::new();
    cfg.host(&db.host)
        .port(db.port)
        .user(&db.user)
        .password(db.password())
        .dbname(&db.dbname)
        .connect_timeout(std::time::Duration::from_secs(10));
    let (client, connection) = cfg.connect(tokio_postgres::NoTls).await.with_context(|| {
        format!(
            "cannot connect to PostgreSQL at {}:{} as {:?} (database {:?}): check the address, \
             the credentials and pg_hba.conf",
            db.host, db.port, db.user, db.dbname
        )
    })?;
    let connection = tokio::spawn(connection);
    let wal_level: String = client.query_one("SHOW wal_level", &[]).await?.get(0);
    if wal_level != "logical" {
        bail!(
            "PostgreSQL has wal_level = {wal_level}; logical decoding needs wal_level = logical \
             (ALTER SYSTEM SET wal_level = logical, then restart PostgreSQL)"
        );
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
                "no publication {:?}: CREATE PUBLICATION {} (empty is enough), or set \
                 create = true",
                db.publication,
                db.publication
            );
        }
        // Identifiers cannot be parameters; the name is quoted.
        client
            .batch_execute(&format!(
                "CREATE PUBLICATION {}",
                quote_ident(&db.publication)
            ))
            .await
            .context("creating the publication")?;
        tracing::info!(publication = %db.publication, "publication created");
    }
    let slot = client
        .query_opt(
            "SELECT plugin FROM pg_replication_slots WHERE slot_name = $1 AND database = $2",
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
        }
        None if db.create => {
            client
                .query_one(
                    "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
                    &[&db.slot],
                )
                .await
                .context("creating the replication slot (the user needs REPLICATION)")?;
            tracing::info!(slot = %db.slot, "replication slot created");
        }
        None => bail!(
            "no logical replication slot {:?} in database {:?}: \
             SELECT pg_create_logical_replication_slot('{}', 'pgoutput'), or set create = true",
            db.slot,
            db.dbname,
            db.slot
        ),
    }
    drop(client);
    let _ = connection.await;
    Ok(())
}

/// `name` as a quoted SQL identifier.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}
