//! The host's own wall clock, in milliseconds since the Unix epoch.
//!
//! What must agree across replicas (expiry, approvals, the journal's order) takes the
//! database's time ([`crate::store::Tx::now`]). This clock is for what has no transaction to
//! ask (which rotated keys are published, a record the database could not stamp, sealed state
//! in the benchmark), SQLite's own clock (which is this process's), and the time at the front of
//! ids and serials, where a clock stepped back costs only their order.

/// Now, in ms since the Unix epoch: 0 before it, `i64::MAX` past what an `i64` holds.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
