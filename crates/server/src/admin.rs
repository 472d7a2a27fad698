//! The optional admin port: Prometheus metrics over plain HTTP (`GET /metrics`), served by
//! `memfleet_http`'s accept loop until the shutdown signal.

use crate::admin_stats::StatsReport;
use crate::state::ServerState;
use std::sync::Arc;
use tokio::net::TcpListener;

/// Serves `/metrics` until the shutdown signal.
pub async fn serve(listener: TcpListener, server: Arc<ServerState>) {
    let mut shutdown = server.shutdown.clone();
    let stop = async move {
        let _ = shutdown.changed().await;
    };
    let render = move || StatsReport::new(&server).prometheus();
    memfleet_http::serve(listener, "/metrics", render, stop).await;
}
