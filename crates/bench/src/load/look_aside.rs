//! One look-aside read as the paper's web servers do it (§2): get the key from the cache;
//! on a miss (or an error), ask the database and set the value. The experiments that run
//! look-aside clients (gutter, discovery) count what happened, each in its own windows,
//! from the [`Event`]s this reports in the order they happen.

use super::workload::{Workload, WorkloadOp};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// What a look-aside read did, step by step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The get was answered: a hit or a miss, and the reply line when it was neither.
    Get {
        /// A value came back.
        hit: bool,
        /// The reply, when it was neither a value nor `END`.
        error: Option<String>,
    },
    /// The database was asked (after a miss or an error).
    Database,
    /// The fill's `set` was not `STORED`: its reply.
    SetFailed(String),
}

/// A connection's buffers, reused from one read to the next.
#[derive(Default)]
pub struct Buffers {
    request: Vec<u8>,
    line: String,
    value: Vec<u8>,
}

/// Reads `key` look-aside through `conn` (see the module doc), the database taking
/// `db_latency`; `event` hears each step. An I/O error (the connection closing included)
/// ends the read.
pub async fn read(
    conn: &mut BufReader<TcpStream>,
    workload: &Workload,
    key: u64,
    db_latency: Duration,
    b: &mut Buffers,
    mut event: impl FnMut(Event),
) -> std::io::Result<()> {
    b.request.clear();
    workload.encode(WorkloadOp::Get(key), &mut b.request);
    conn.get_mut().write_all(&b.request).await?;
    read_line(conn, &mut b.line).await?;
    let hit = if let Some(rest) = b.line.strip_prefix("VALUE ") {
        let len: usize = rest
            .trim_end()
            .rsplit(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("bad VALUE line {:?}", b.line)))?;
        b.value.resize(len + 2, 0);
        conn.read_exact(&mut b.value).await?;
        read_line(conn, &mut b.line).await?;
        true
    } else {
        false
    };
    let error = (!hit && b.line != "END\r\n").then(|| b.line.trim_end().to_string());
    event(Event::Get { hit, error });
    if hit {
        return Ok(());
    }
    event(Event::Database);
    if !db_latency.is_zero() {
        tokio::time::sleep(db_latency).await;
    }
    b.request.clear();
    workload.encode(WorkloadOp::Set(key), &mut b.request);
    conn.get_mut().write_all(&b.request).await?;
    read_line(conn, &mut b.line).await?;
    if b.line != "STORED\r\n" {
        event(Event::SetFailed(b.line.trim_end().to_string()));
    }
    Ok(())
}

/// A reply line in `line` (cleared first); the connection closing is an error.
async fn read_line(conn: &mut BufReader<TcpStream>, line: &mut String) -> std::io::Result<()> {
    line.clear();
    if conn.read_line(line).await? == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}
