//! The accept loop: connection limits, the TLS handshake's deadline, hyper's limits, closing
//! idle connections, and a shutdown that stops accepting at once and is over within
//! [`Limits::shutdown_grace`] whatever clients do.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt as _;

use super::Peer;
use super::limits::{ConnectionLimiter, ConnectionPermit, Limits};

/// HTTP/2 streams one connection may have open at once.
const MAX_STREAMS: u32 = 32;
/// Largest request head (HTTP/1 read buffer, HTTP/2 header list).
const MAX_HEAD: usize = 64 * 1024;

/// A running server; dropping the handle does not stop it, [`ServerHandle::shutdown`] does.
pub struct ServerHandle {
    /// The address it listens on.
    pub addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    connections: Arc<ConnectionLimiter>,
}

impl ServerHandle {
    /// Stops accepting at once (the listening socket is closed), lets open connections finish
    /// their current requests for at most the shutdown grace, then closes what is left, and
    /// waits for all of it.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }

    /// Connections open now (handshaking ones included).
    pub fn open_connections(&self) -> usize {
        self.connections.open()
    }
}

/// Serves `router` over TLS on `listener` within `limits`.
pub fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    router: Router,
    limits: Limits,
) -> std::io::Result<ServerHandle> {
    let addr = listener.local_addr()?;
    let (stop, stopped) = watch::channel(false);
    let connections =
        ConnectionLimiter::new(limits.max_connections, limits.max_connections_per_source);
    let limiter = connections.clone();
    let task = tokio::spawn(accept_loop(
        listener,
        TlsAcceptor::from(tls),
        router,
        Arc::new(limits),
        limiter,
        stopped,
    ));
    Ok(ServerHandle {
        addr,
        stop,
        task,
        connections,
    })
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    router: Router,
    limits: Arc<Limits>,
    limiter: Arc<ConnectionLimiter>,
    mut stopped: watch::Receiver<bool>,
) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let (tcp, peer_addr) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // Out of file descriptors, mostly: back off rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop_requested(&mut stopped) => break,
        };
        let permit = match limiter.admit(peer_addr.ip()) {
            Ok(permit) => permit,
            Err(refused) => {
                tracing::debug!(peer = %peer_addr, ?refused, "connection refused: limit reached");
                drop(tcp);
                continue;
            }
        };
        connections.spawn(connection(
            tcp,
            peer_addr,
            permit,
            acceptor.clone(),
            router.clone(),
            limits.clone(),
            stopped.clone(),
        ));
        // Reap finished connections so the set does not grow without bound.
        while connections.try_join_next().is_some() {}
    }
    // Stop accepting at once: new connections are refused by the kernel from here on.
    drop(listener);
    let drained = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(limits.shutdown_grace, drained)
        .await
        .is_err()
    {
        tracing::warn!(
            left = connections.len(),
            "shutdown grace over: closing connections with requests still in flight"
        );
        connections.abort_all();
        while connections.join_next().await.is_some() {}
    }
}

/// Resolves once shutdown was asked for (or the handle is gone).
async fn stop_requested(stopped: &mut watch::Receiver<bool>) {
    let _ = stopped.wait_for(|stop| *stop).await;
}

/// Requests in flight on one connection, and since when there has been none.
struct Activity {
    in_flight: AtomicUsize,
    idle_since: std::sync::Mutex<Instant>,
}

/// Marks a request in flight until dropped.
struct InFlight(Arc<Activity>);

impl Activity {
    fn start(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(self.clone())
    }

    /// When the connection becomes idle-expired if nothing changes (`None`: a request is in
    /// flight, and the request timeout bounds it).
    fn idle_deadline(&self, idle: Duration) -> Option<Instant> {
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            return None;
        }
        let since = *self
            .idle_since
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Some(since + idle)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        *self
            .0
            .idle_since
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn connection(
    tcp: TcpStream,
    peer_addr: SocketAddr,
    _permit: ConnectionPermit,
    acceptor: TlsAcceptor,
    router: Router,
    limits: Arc<Limits>,
    mut stopped: watch::Receiver<bool>,
) {
    let _ = tcp.set_nodelay(true);
    let tls = tokio::select! {
        handshake = tokio::time::timeout(limits.handshake_timeout, acceptor.accept(tcp)) => match handshake {
            Ok(Ok(tls)) => tls,
            Ok(Err(e)) => {
                tracing::debug!(peer = %peer_addr, error = %e, "TLS handshake failed");
                return;
            }
            Err(_) => {
                tracing::debug!(peer = %peer_addr, "TLS handshake timed out");
                return;
            }
        },
        _ = stop_requested(&mut stopped) => return,
    };
    let client_cert = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .map(|leaf| Arc::new(leaf.to_vec()));
    let peer = Peer {
        addr: peer_addr,
        client_cert,
    };
    let activity = Arc::new(Activity {
        in_flight: AtomicUsize::new(0),
        idle_since: std::sync::Mutex::new(Instant::now()),
    });
    let tracked = activity.clone();
    let service = tower::service_fn(
        move |mut req: axum::extract::Request<hyper::body::Incoming>| {
            let in_flight = tracked.start();
            req.extensions_mut().insert(peer.clone());
            let router = router.clone();
            async move {
                let response = router.oneshot(req).await;
                drop(in_flight);
                response
            }
        },
    );
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(MAX_HEAD)
        .max_headers(100);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(MAX_STREAMS)
        .max_header_list_size(u32::try_from(MAX_HEAD).unwrap_or(u32::MAX))
        .keep_alive_interval(limits.idle_timeout)
        .keep_alive_timeout(limits.header_timeout);
    let conn = builder
        .serve_connection_with_upgrades(TokioIo::new(tls), TowerToHyperService::new(service));
    tokio::pin!(conn);
    loop {
        let idle_deadline = activity.idle_deadline(limits.idle_timeout);
        let watchdog = async {
            match idle_deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                // Look again later: the request in flight may end.
                None => tokio::time::sleep(limits.idle_timeout.min(Duration::from_secs(1))).await,
            }
        };
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(peer = %peer_addr, error = %e, "connection ended with an error");
                }
                return;
            }
            _ = stop_requested(&mut stopped) => {
                conn.as_mut().graceful_shutdown();
                // The accept loop's grace bounds this; it aborts the task when over.
                let _ = conn.await;
                return;
            }
            _ = watchdog => {
                if activity
                    .idle_deadline(limits.idle_timeout)
                    .is_some_and(|at| at <= Instant::now())
                {
                    tracing::debug!(peer = %peer_addr, "closing an idle connection");
                    return;
                }
            }
        }
    }
}
