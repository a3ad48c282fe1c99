//! The refusal sink: a copy of every refused join and renewal, delivered to an HTTP webhook
//! or appended to a JSON-lines file, as the seed's `onRefusal(refusal)` hook receives them.
//!
//! The audit row and the `security.*.refused` event in the database are the source of truth;
//! the sink is a copy that must never delay or fail a round. JoinService hands each refusal to
//! [`RefusalSink::offer`], which only tries to put it on a bounded in-memory queue: when the
//! queue is full (the target is slow or down), the refusal is dropped from the sink, counted
//! ([`RefusalSink::dropped`]) and warned about. One background task takes refusals off the
//! queue in order and delivers each with the target's timeout; a failed delivery is logged and
//! not retried. [`SinkWorker::shutdown`] stops the task after delivering what is queued, for at
//! most a deadline.
//!
//! Configured in `gatehouse.toml`:
//!
//! ```toml
//! [audit.sink]
//! kind = "webhook"
//! url = "https://hooks.example.com/gatehouse"   # http:// only to a loopback address
//! timeout_ms = 2000                              # per delivery (default 2000)
//! # ca_file = "hooks-ca.pem"                     # trust only this CA (default: the system's)
//!
//! # or
//! [audit.sink]
//! kind = "jsonl"
//! path = "refusals.jsonl"                        # created 0600, relative to data_dir
//! ```

mod jsonl;
mod webhook;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

/// Refusals waiting for delivery, at most. A refusal offered beyond this is dropped from the
/// sink (never from the database).
pub const QUEUE_CAPACITY: usize = 1024;

/// One refusal, as the sink receives it: one JSON object (one POST body, or one line).
///
/// `{"kind":"security.join.refused","attestor":"join-token","reason":"bad-secret",
/// "tokenId":"tok_…","round":1,"at":1790000000000}`; `tokenId`, `nodeId` and `tenantId` are
/// left out when unknown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Refusal {
    /// The event it copies: `security.join.refused` or `security.renew.refused`.
    pub kind: &'static str,
    /// The attestor that ran (`renew` for a renewal).
    pub attestor: String,
    /// The reason code, as in the audit row and the event's `reason`.
    pub reason: String,
    /// The token presented, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_id: Option<String>,
    /// The node concerned, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// The tenant concerned, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    /// The join round (0 for a renewal).
    pub round: u8,
    /// When it was refused: the audit row's time, in ms since the Unix epoch (database time).
    pub at: i64,
}

/// Where refusals go, resolved from `[audit.sink]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkConfig {
    /// POST each refusal as JSON to `url`.
    Webhook {
        /// `https://…`, or `http://` to a loopback address.
        url: String,
        /// The limit of one delivery: connect, send and the answer.
        timeout: Duration,
        /// Trust only the CA certificates in this PEM file; the system's CA bundle when absent.
        ca_file: Option<PathBuf>,
    },
    /// Append each refusal as one JSON line to `path` (created with mode 0600).
    Jsonl {
        /// The file.
        path: PathBuf,
    },
}

/// Why a sink could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SinkError {
    /// The webhook's client could not be set up (its URL, its CA file).
    #[error("webhook {0}")]
    Outbound(#[from] crate::outbound::OutboundError),
    /// The JSON-lines file cannot be opened for appending.
    #[error("cannot open {path}: {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// What the filesystem said.
        source: std::io::Error,
    },
}

/// Why one delivery failed (logged, never returned to a round).
#[derive(Debug, thiserror::Error)]
enum DeliveryError {
    /// The webhook could not be reached, timed out, or did not answer 2xx.
    #[error("webhook: {0}")]
    Http(String),
    /// The file could not be appended to.
    #[error("append: {0}")]
    Io(#[from] std::io::Error),
}

/// A configured target.
enum Target {
    Webhook(webhook::Webhook),
    Jsonl(jsonl::Jsonl),
}

impl Target {
    async fn deliver(&self, refusal: &Refusal) -> Result<(), DeliveryError> {
        match self {
            Target::Webhook(w) => w.deliver(refusal).await,
            Target::Jsonl(j) => j.deliver(refusal).await,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Target::Webhook(_) => "webhook",
            Target::Jsonl(_) => "jsonl",
        }
    }
}

/// JoinService's end of the queue: cheap to clone, never blocks.
#[derive(Debug, Clone)]
pub struct RefusalSink {
    queue: mpsc::Sender<Refusal>,
    dropped: Arc<AtomicU64>,
}

/// The background task's handle, to stop it.
#[derive(Debug)]
pub struct SinkWorker {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl RefusalSink {
    /// Sets up the target (checks the URL and CA, or opens the file) and starts the delivery
    /// task on the current tokio runtime.
    pub fn start(config: &SinkConfig) -> Result<(RefusalSink, SinkWorker), SinkError> {
        Self::start_with_capacity(config, QUEUE_CAPACITY)
    }

    /// [`RefusalSink::start`] with a queue of `capacity` (at least 1).
    pub fn start_with_capacity(
        config: &SinkConfig,
        capacity: usize,
    ) -> Result<(RefusalSink, SinkWorker), SinkError> {
        let target = match config {
            SinkConfig::Webhook {
                url,
                timeout,
                ca_file,
            } => Target::Webhook(webhook::Webhook::new(url, *timeout, ca_file.as_deref())?),
            SinkConfig::Jsonl { path } => Target::Jsonl(jsonl::Jsonl::open(path)?),
        };
        let (queue, rx) = mpsc::channel(capacity.max(1));
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(run(rx, target, stopped));
        Ok((
            RefusalSink {
                queue,
                dropped: Arc::new(AtomicU64::new(0)),
            },
            SinkWorker { stop, task },
        ))
    }

    /// Queues a refusal for delivery, or drops it (counted, with a warning at the 1st, 2nd,
    /// 4th, 8th… drop) when the queue is full or the task has stopped. Never waits.
    pub fn offer(&self, refusal: Refusal) {
        let (refusal, why) = match self.queue.try_send(refusal) {
            Ok(()) => return,
            Err(mpsc::error::TrySendError::Full(r)) => (r, "queue full"),
            Err(mpsc::error::TrySendError::Closed(r)) => (r, "sink stopped"),
        };
        let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
        if dropped.is_power_of_two() {
            tracing::warn!(
                attestor = %refusal.attestor,
                reason = %refusal.reason,
                dropped_total = dropped,
                "refusal sink {why}: refusal not copied to the sink (its audit row and event are kept)"
            );
        }
    }

    /// Refusals dropped from the sink since it started.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl SinkWorker {
    /// Stops taking new refusals, delivers the queued ones, and waits for that at most
    /// `deadline`; whatever is still undelivered then is dropped with a warning.
    pub async fn shutdown(self, deadline: Duration) {
        let SinkWorker { stop, mut task } = self;
        let _ = stop.send(());
        if tokio::time::timeout(deadline, &mut task).await.is_err() {
            task.abort();
            tracing::warn!(
                deadline_ms = deadline.as_millis() as u64,
                "refusal sink: queued refusals not delivered before the shutdown deadline"
            );
        }
    }
}

/// The delivery task: in order, one at a time, until stopped (then drains the queue) or until
/// every [`RefusalSink`] is gone.
async fn run(mut rx: mpsc::Receiver<Refusal>, target: Target, mut stop: oneshot::Receiver<()>) {
    // A worker handle dropped without `shutdown` does not stop delivery.
    let mut stoppable = true;
    loop {
        tokio::select! {
            biased;
            next = rx.recv() => match next {
                Some(refusal) => deliver(&target, &refusal).await,
                None => return,
            },
            asked = &mut stop, if stoppable => match asked {
                Ok(()) => break,
                Err(_) => stoppable = false,
            },
        }
    }
    rx.close();
    while let Some(refusal) = rx.recv().await {
        deliver(&target, &refusal).await;
    }
}

async fn deliver(target: &Target, refusal: &Refusal) {
    if let Err(e) = target.deliver(refusal).await {
        tracing::warn!(
            sink = target.kind(),
            attestor = %refusal.attestor,
            reason = %refusal.reason,
            error = %e,
            "refusal sink: delivery failed"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(reason: &str) -> Refusal {
        Refusal {
            kind: "security.join.refused",
            attestor: "join-token".into(),
            reason: reason.into(),
            token_id: Some("tok_1".into()),
            node_id: None,
            tenant_id: None,
            round: 1,
            at: 1_790_000_000_000,
        }
    }

    #[test]
    fn the_json_leaves_out_what_is_unknown() {
        let json = serde_json::to_value(refusal("bad-secret")).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "kind": "security.join.refused",
                "attestor": "join-token",
                "reason": "bad-secret",
                "tokenId": "tok_1",
                "round": 1,
                "at": 1_790_000_000_000_i64,
            })
        );
    }

    #[tokio::test]
    async fn a_full_queue_drops_and_counts_and_shutdown_drains() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        let (sink, worker) =
            RefusalSink::start_with_capacity(&SinkConfig::Jsonl { path: path.clone() }, 2).unwrap();
        // The task has not run yet on this single-threaded runtime: the third offer finds
        // the queue full.
        for r in ["a", "b", "c"] {
            sink.offer(refusal(r));
        }
        assert_eq!(sink.dropped(), 1);
        worker.shutdown(Duration::from_secs(5)).await;
        let text = std::fs::read_to_string(&path).unwrap();
        let reasons: Vec<String> = text
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["reason"].to_string())
            .collect();
        assert_eq!(reasons, ["\"a\"", "\"b\""]);
        // After shutdown, offers are dropped and counted, never block.
        sink.offer(refusal("d"));
        assert_eq!(sink.dropped(), 2);
    }
}
