//! `GET /metrics` for a process built on the client library (the router, the invalidator):
//! the accept loop and one request per connection, each answered with what `render` says
//! now. The wire format is `memfleet_http`; a peer gets 10 s and 64 KiB of
//! request head at most.

use memfleet_http as http;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The most request head a peer may send before it is dropped.
const MAX_HEAD: usize = 64 * 1024;

/// Serves `/metrics` (the text `render` returns) on `listener` until aborted.
pub async fn serve<F>(listener: TcpListener, render: F)
where
    F: Fn() -> String + Clone + Send + Sync + 'static,
{
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let render = render.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(Duration::from_secs(10), answer(stream, &render)).await;
        });
    }
}

async fn answer(mut stream: TcpStream, render: &impl Fn() -> String) -> std::io::Result<()> {
    let mut request = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    let reply = loop {
        match http::head(&request) {
            http::Head::Incomplete => {}
            http::Head::Refused => return Ok(()),
            http::Head::Request { method, target } => {
                break http::answer(method, target, "/metrics", render)
            }
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 || request.len() > MAX_HEAD {
            return Ok(());
        }
        request.extend_from_slice(&chunk[..n]);
    };
    stream.write_all(&reply).await?;
    stream.shutdown().await
}
