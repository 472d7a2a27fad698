//! A look-aside cache in front of PostgreSQL, the way Facebook's web servers use memcache
//! (*Scaling Memcache at Facebook*, §2): read from the cache; on a miss read the database
//! and fill the cache; on a write, update the database and then **delete** the cached key
//! (deletes are idempotent, updates are not).
//!
//! `get_or_fill` takes a lease on a miss, so however many requests miss the same key at
//! once, one of them queries the database and the others wait a few milliseconds for its
//! fill (the thundering herd of §3.2.1); a fill that raced a delete is refused (stale sets).
//!
//! ```sh
//! memfleet server &                               # or: memfleet fleet up, and the router
//! DATABASE_URL='host=127.0.0.1 user=postgres' \
//! MEMFLEET_SERVERS=127.0.0.1:11211 cargo run --example lookaside_postgres
//! ```
//!
//! With `memfleet invalidator` tailing PostgreSQL's commit log, the delete after the write
//! moves out of the application (the paper's mcsqueal); until then the application does it.

use memfleet_client::Client;
use tokio_postgres::NoTls;

/// A user's name, from the cache or (once per lease interval per key) the database.
async fn user_name(cache: &Client, db: &tokio_postgres::Client, id: i64) -> anyhow::Result<String> {
    let key = format!("user:{id}:name");
    let bytes = cache
        .get_or_fill(&key, 3600, || async {
            let row = db
                .query_one("SELECT name FROM users WHERE id = $1", &[&id])
                .await?;
            Ok::<_, anyhow::Error>(row.get::<_, String>(0).into_bytes())
        })
        .await?;
    Ok(String::from_utf8(bytes)?)
}

/// Renames a user: the database first, then invalidate the cached copy.
async fn rename(
    cache: &Client,
    db: &tokio_postgres::Client,
    id: i64,
    name: &str,
) -> anyhow::Result<()> {
    db.execute("UPDATE users SET name = $2 WHERE id = $1", &[&id, &name])
        .await?;
    // If the cache is unreachable the delete fails: the entry then lives until its TTL, so
    // keep TTLs as short as staleness allows (or let the invalidator deliver deletes).
    cache.delete(format!("user:{id}:name")).await?;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "host=127.0.0.1 user=postgres".to_string());
    let servers = std::env::var("MEMFLEET_SERVERS").unwrap_or_else(|_| "127.0.0.1:11211".into());
    let (db, connection) = tokio_postgres::connect(&url, NoTls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("database connection: {e}");
        }
    });
    let servers: Vec<&str> = servers.split(',').collect();
    let cache = Client::with_servers(&servers)?;

    db.batch_execute(
        "CREATE TABLE IF NOT EXISTS users (id BIGINT PRIMARY KEY, name TEXT NOT NULL);
         INSERT INTO users VALUES (1, 'Ada') ON CONFLICT (id) DO UPDATE SET name = 'Ada';",
    )
    .await?;
    cache.delete("user:1:name").await?;

    println!(
        "first read (database): {}",
        user_name(&cache, &db, 1).await?
    );
    println!(
        "second read (cache):   {}",
        user_name(&cache, &db, 1).await?
    );
    rename(&cache, &db, 1, "Ada Lovelace").await?;
    println!(
        "after the rename:      {}",
        user_name(&cache, &db, 1).await?
    );
    Ok(())
}
