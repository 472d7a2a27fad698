//! The optional admin port: Prometheus metrics over plain HTTP (`GET /metrics`), with the
//! wire format from `memfleet_http`.

use crate::admin_stats::StatsReport;
use crate::state::ServerState;
use memfleet_http as http;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Serves `/metrics` until the shutdown signal.
pub async fn serve(listener: TcpListener, server: Arc<ServerState>) {
    let mut shutdown = server.shutdown.clone();
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = shutdown.changed() => return,
        };
        let Ok((stream, _)) = accepted else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let server = server.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(Duration::from_secs(10), answer(stream, &server)).await;
        });
    }
}

async fn answer(mut stream: TcpStream, server: &ServerState) -> std::io::Result<()> {
    let mut request = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    let reply = loop {
        match http::head(&request) {
            http::Head::Incomplete => {}
            http::Head::Refused => return Ok(()),
            http::Head::Request { method, target } => {
                break http::answer(method, target, "/metrics", || {
                    StatsReport::new(server).prometheus()
                })
            }
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        request.extend_from_slice(&chunk[..n]);
    };
    stream.write_all(&reply).await?;
    stream.shutdown().await
}
