//! The host's Prometheus metrics (`GET /metrics`, OpenMetrics text): what an operator watches
//! a running host by.
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `gatehouse_joins_total` | `attestor`, `result` | join rounds by how they ended: `admitted`, `deferred` (approval or challenge) or `refused` |
//! | `gatehouse_renewals_total` | `result` | renewals: `admitted` or `refused` |
//! | `gatehouse_refusals_total` | `op`, `attestor`, `reason` | refused rounds (`op` is `join` or `renew`) by their audit reason |
//! | `gatehouse_join_duration_seconds` | `attestor` | one join round, CSR to answer (histogram) |
//! | `gatehouse_renew_duration_seconds` | | one renewal (histogram) |
//! | `gatehouse_attestor_call_seconds` | `attestor` | one call of an attestor's `verify` (histogram) |
//! | `gatehouse_attestor_calls_on_own_thread_total` | `attestor` | calls that ran on the attestor's own thread: they kept the CPU for an epoch tick and moved there, or started there while the attestor was demoted (`runtime::guest`); an honest attestor's stay near zero |
//! | `gatehouse_db_begin_wait_seconds` | | how long JoinService waited for a write transaction: the pool, on PostgreSQL a many-use token's queue of spends (`join::spend_gate`), on SQLite the write lock (histogram) |
//! | `gatehouse_sink_dropped_total` | | refusals the `[audit.sink]` dropped because its queue was full |
//!
//! Labels are bounded: an attestor id a client names that is not loaded counts as
//! `attestor="unknown"`, and past [`MAX_REASONS`] distinct `(attestor, reason)` pairs (an
//! attestor's reason codes are its own) further reasons count as `reason="other"`, so no client
//! and no attestor can grow the exposition without bound.
//!
//! Counters live in one [`Metrics`] per host (not in a process-wide registry), so two hosts in
//! one process (the tests) count apart.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Most distinct `(attestor, reason)` pairs counted by name; further reasons are `other`.
pub const MAX_REASONS: usize = 512;

/// The content type of [`Metrics::encode`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JoinLabels {
    attestor: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusalLabels {
    op: String,
    attestor: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AttestorLabels {
    attestor: String,
}

/// Buckets from 0.5 ms doubling to about 16 s: a join is a few ms on a quiet host, an
/// attestor call tens of µs to its deadline, a database wait up to its 5 s limit.
fn seconds_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

/// Which operation a round was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `POST /v1/join`.
    Join,
    /// `POST /v1/renew`.
    Renew,
}

impl Op {
    fn as_str(self) -> &'static str {
        match self {
            Op::Join => "join",
            Op::Renew => "renew",
        }
    }
}

/// One host's metrics.
pub struct Metrics {
    registry: Registry,
    joins: Family<JoinLabels, Counter>,
    renewals: Family<ResultLabels, Counter>,
    refusals: Family<RefusalLabels, Counter>,
    join_seconds: Family<AttestorLabels, Histogram, fn() -> Histogram>,
    renew_seconds: Histogram,
    attestor_call_seconds: Family<AttestorLabels, Histogram, fn() -> Histogram>,
    attestor_calls_on_own_thread: Family<AttestorLabels, Counter>,
    db_begin_wait_seconds: Histogram,
    sink_dropped: Counter,
    /// The `(attestor, reason)` pairs counted by name so far.
    reasons: Mutex<HashSet<(String, String)>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Every metric at zero.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let joins = Family::<JoinLabels, Counter>::default();
        let renewals = Family::<ResultLabels, Counter>::default();
        let refusals = Family::<RefusalLabels, Counter>::default();
        let join_seconds =
            Family::<AttestorLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                seconds_histogram,
            );
        let renew_seconds = seconds_histogram();
        let attestor_call_seconds =
            Family::<AttestorLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                seconds_histogram,
            );
        let attestor_calls_on_own_thread = Family::<AttestorLabels, Counter>::default();
        let db_begin_wait_seconds = seconds_histogram();
        let sink_dropped = Counter::default();
        registry.register(
            "gatehouse_joins",
            "Join rounds by attestor and result (admitted, deferred, refused)",
            joins.clone(),
        );
        registry.register(
            "gatehouse_renewals",
            "Renewals by result (admitted, refused)",
            renewals.clone(),
        );
        registry.register(
            "gatehouse_refusals",
            "Refused join rounds and renewals by attestor and reason",
            refusals.clone(),
        );
        registry.register(
            "gatehouse_join_duration_seconds",
            "One join round, from its request to its answer",
            join_seconds.clone(),
        );
        registry.register(
            "gatehouse_renew_duration_seconds",
            "One renewal, from its request to its answer",
            renew_seconds.clone(),
        );
        registry.register(
            "gatehouse_attestor_call_seconds",
            "One call of an attestor's verify",
            attestor_call_seconds.clone(),
        );
        registry.register(
            "gatehouse_attestor_calls_on_own_thread",
            "Attestor calls that ran on the attestor's own thread (moved after keeping the CPU \
             for an epoch tick, or started there while the attestor was demoted)",
            attestor_calls_on_own_thread.clone(),
        );
        registry.register(
            "gatehouse_db_begin_wait_seconds",
            "Time JoinService waited for a write transaction (the pool, a token's queue of spends, SQLite's write lock)",
            db_begin_wait_seconds.clone(),
        );
        registry.register(
            "gatehouse_sink_dropped",
            "Refusals the audit sink dropped because its queue was full",
            sink_dropped.clone(),
        );
        Self {
            registry,
            joins,
            renewals,
            refusals,
            join_seconds,
            renew_seconds,
            attestor_call_seconds,
            attestor_calls_on_own_thread,
            db_begin_wait_seconds,
            sink_dropped,
            reasons: Mutex::new(HashSet::new()),
        }
    }

    /// Counts a round that ended `result` (`admitted`, `deferred` or `refused`, the audit
    /// row's result) with `reason` when refused. `attestor` must already be bounded (a loaded
    /// attestor's id, `renew`, or `unknown`).
    pub fn round(&self, op: Op, attestor: &str, result: &str, reason: Option<&str>) {
        match op {
            Op::Join => self
                .joins
                .get_or_create(&JoinLabels {
                    attestor: attestor.to_owned(),
                    result: result.to_owned(),
                })
                .inc(),
            Op::Renew => self
                .renewals
                .get_or_create(&ResultLabels {
                    result: result.to_owned(),
                })
                .inc(),
        };
        if let Some(reason) = reason {
            let reason = self.bounded_reason(attestor, reason);
            self.refusals
                .get_or_create(&RefusalLabels {
                    op: op.as_str().to_owned(),
                    attestor: attestor.to_owned(),
                    reason,
                })
                .inc();
        }
    }

    /// `reason`, or `other` once [`MAX_REASONS`] pairs are counted and this one is new.
    fn bounded_reason(&self, attestor: &str, reason: &str) -> String {
        let Ok(mut seen) = self.reasons.lock() else {
            return "other".to_owned();
        };
        let key = (attestor.to_owned(), reason.to_owned());
        if seen.contains(&key) {
            return reason.to_owned();
        }
        if seen.len() >= MAX_REASONS {
            return "other".to_owned();
        }
        seen.insert(key);
        reason.to_owned()
    }

    /// Observes one round's duration.
    pub fn round_duration(&self, op: Op, attestor: &str, elapsed: Duration) {
        match op {
            Op::Join => self
                .join_seconds
                .get_or_create(&AttestorLabels {
                    attestor: attestor.to_owned(),
                })
                .observe(elapsed.as_secs_f64()),
            Op::Renew => self.renew_seconds.observe(elapsed.as_secs_f64()),
        }
    }

    /// Observes one call of an attestor, and counts it if it ran on the attestor's own thread
    /// (the count is shown from the attestor's first call, at zero until one does).
    pub fn attestor_call(&self, attestor: &str, elapsed: Duration, on_own_thread: bool) {
        let labels = AttestorLabels {
            attestor: attestor.to_owned(),
        };
        self.attestor_call_seconds
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
        let own = self.attestor_calls_on_own_thread.get_or_create(&labels);
        if on_own_thread {
            own.inc();
        }
    }

    /// Observes one wait for a write transaction.
    pub fn db_begin_wait(&self, elapsed: Duration) {
        self.db_begin_wait_seconds.observe(elapsed.as_secs_f64());
    }

    /// The metrics as OpenMetrics text, the audit sink's drop count brought up to
    /// `sink_dropped` first (the sink counts by itself; this counter follows it).
    pub fn encode(&self, sink_dropped: u64) -> String {
        let counted = self.sink_dropped.get();
        if sink_dropped > counted {
            self.sink_dropped.inc_by(sink_dropped - counted);
        }
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_labels_and_bounds_reasons() {
        let m = Metrics::new();
        m.round(Op::Join, "join-token", "admitted", None);
        m.round(Op::Join, "join-token", "refused", Some("bad-secret"));
        m.round(Op::Join, "join-token", "refused", Some("bad-secret"));
        m.round(Op::Renew, "renew", "refused", Some("rate-limited"));
        let text = m.encode(3);
        assert!(
            text.contains(r#"gatehouse_joins_total{attestor="join-token",result="admitted"} 1"#),
            "{text}"
        );
        assert!(text.contains(
            r#"gatehouse_refusals_total{op="join",attestor="join-token",reason="bad-secret"} 2"#
        ));
        assert!(text.contains(r#"gatehouse_renewals_total{result="refused"} 1"#));
        assert!(text.contains("gatehouse_sink_dropped_total 3"));
        // The sink's count only ever moves the counter up.
        assert!(m.encode(1).contains("gatehouse_sink_dropped_total 3"));

        for i in 0..MAX_REASONS + 10 {
            m.round(Op::Join, "hostile", "refused", Some(&format!("r{i}")));
        }
        let text = m.encode(0);
        let named = text
            .lines()
            .filter(|l| l.starts_with("gatehouse_refusals_total{") && l.contains("hostile"))
            .count();
        // The first pairs (bad-secret, rate-limited) took two places.
        assert_eq!(named, MAX_REASONS - 2 + 1, "the rest count as other");
        assert!(text.contains(r#"attestor="hostile",reason="other"} 12"#));
    }

    #[test]
    fn histograms_observe() {
        let m = Metrics::new();
        m.round_duration(Op::Join, "tpm", Duration::from_millis(3));
        m.attestor_call("tpm", Duration::from_micros(50), false);
        m.attestor_call("join-token", Duration::from_micros(9), false);
        m.attestor_call("tpm", Duration::from_millis(4), true);
        m.db_begin_wait(Duration::from_millis(1));
        let text = m.encode(0);
        assert!(text.contains(r#"gatehouse_join_duration_seconds_count{attestor="tpm"} 1"#));
        assert!(text.contains(r#"gatehouse_attestor_call_seconds_count{attestor="tpm"} 2"#));
        // Shown at zero from an attestor's first call.
        assert!(text.contains(r#"gatehouse_attestor_calls_on_own_thread_total{attestor="tpm"} 1"#));
        assert!(
            text.contains(
                r#"gatehouse_attestor_calls_on_own_thread_total{attestor="join-token"} 0"#
            )
        );
        assert!(text.contains("gatehouse_db_begin_wait_seconds_count 1"));
    }
}
