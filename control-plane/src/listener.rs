//! Serves a router on a listener (the HTTP API, the worker link) as `axum::serve`
//! does, with one thing it cannot do: a deadline for each request head. A client
//! must send a whole head (request line and headers) within it, however slowly its
//! bytes trickle, or its connection is closed, so slow clients cannot hold
//! connections (and their memory) open for ever. The deadline covers the head
//! only: a long body upload, a streamed answer (the live feed) or a gRPC stream is
//! not cut. HTTP/2 connections (gRPC) keep hyper's own handling.
//!
//! Each request carries its client's address as axum's `ConnectInfo` (what
//! `into_make_service_with_connect_info` would give), for the login form's limit.
//!
//! Shutdown is graceful like axum's: no new connection is taken, each open one is
//! asked to finish what it is doing, and serving ends when all have closed.

use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::serve::Listener;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower_layer::Layer;

/// How long a client has to send a whole request head.
pub const HEADER_DEADLINE: Duration = Duration::from_secs(60);

/// Serves `router` on `listener` until `shutdown`, then waits for its connections
/// to finish.
pub async fn serve<L>(
    mut listener: L,
    router: axum::Router,
    shutdown: CancellationToken,
    header_deadline: Duration,
) where
    L: Listener,
    L::Addr: Clone + Send + Sync + 'static,
{
    let connections = TaskTracker::new();
    loop {
        let (io, remote) = tokio::select! {
            accepted = listener.accept() => accepted,
            () = shutdown.cancelled() => break,
        };
        let service =
            TowerToHyperService::new(axum::Extension(ConnectInfo(remote)).layer(router.clone()));
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            let mut builder = Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(header_deadline);
            // As axum::serve: the CONNECT protocol for HTTP/2 upgrades.
            builder.http2().enable_connect_protocol();
            let connection = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
            tokio::pin!(connection);
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(e) = result {
                        tracing::trace!(error = %e, "connection ended with an error");
                    }
                    return;
                }
                () = shutdown.cancelled() => connection.as_mut().graceful_shutdown(),
            }
            if let Err(e) = connection.await {
                tracing::trace!(error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    connections.close();
    connections.wait().await;
}
