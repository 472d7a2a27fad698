//! `GET /metrics` for a process built on the client library (the router, the invalidator):
//! `memfleet_http`'s accept loop, run until aborted.

use tokio::net::TcpListener;

/// Serves `/metrics` (the text `render` returns) on `listener` until aborted.
pub async fn serve<F>(listener: TcpListener, render: F)
where
    F: Fn() -> String + Clone + Send + Sync + 'static,
{
    memfleet_http::serve(listener, "/metrics", render, std::future::pending::<()>()).await;
}
