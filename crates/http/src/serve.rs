//! The accept loop of a one-page admin port (feature `serve`): one request per connection,
//! answered with what `render` says now. A peer gets 10 s and [`crate::MAX_REQUEST`] bytes of
//! request head (plus one read) at most. Shared by the server's admin port and the client
//! library's metrics server (router, invalidator); the wire format is the rest of the crate.

use std::future::Future;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Serves `page` (the text `render` returns) on `listener` until `stop` completes.
pub async fn serve<F>(listener: TcpListener, page: &'static str, render: F, stop: impl Future)
where
    F: Fn() -> String + Clone + Send + Sync + 'static,
{
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = &mut stop => return,
        };
        let Ok((stream, _)) = accepted else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let render = render.clone();
        tokio::spawn(async move {
            let answer = answer(stream, page, &render);
            let _ = tokio::time::timeout(Duration::from_secs(10), answer).await;
        });
    }
}

async fn answer(
    mut stream: TcpStream,
    page: &str,
    render: &impl Fn() -> String,
) -> std::io::Result<()> {
    let mut request = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    let reply = loop {
        match crate::head(&request) {
            crate::Head::Incomplete => {}
            crate::Head::Refused => return Ok(()),
            crate::Head::Request { method, target } => {
                break crate::answer(method, target, page, render)
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
