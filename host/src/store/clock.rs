//! The database's clock, read without a statement where that gives the same answer.
//!
//! Times are milliseconds since the Unix epoch on the database's clock: the one clock expiry
//! is decided by, shared by every replica ([`super::Tx::now`]). Asking for it costs a round
//! trip to Postgres, and a token join asked twice (the attestor's reading and the locked
//! phase's), of about ten statements in all. So a [`Clock`] keeps its last reading of the
//! server's clock and, for [`FRESH`] after it, answers that reading advanced by this process's
//! monotonic clock, which a step of this host's wall clock (NTP, an operator) does not move.
//! The answer stays the server's time to within the round trip that read it and the two clocks'
//! drift over a second (parts per million); a step of the *server's* clock shows within
//! [`FRESH`]. SQLite's clock is this process's, and needs no reading at all.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a reading of the server's clock answers for it.
pub(super) const FRESH: Duration = Duration::from_secs(1);

/// Where a [`super::Db`]'s time comes from.
#[derive(Debug)]
pub(super) enum Clock {
    /// SQLite's: its `julianday('now')` (`sqlite_now!`, which SQL that compares with the time
    /// still uses) reads this process's real-time clock (the unix VFS's `gettimeofday`,
    /// truncated to the millisecond), so the same value needs no statement.
    Process,
    /// The Postgres server's, as last read ([`Clock::read`]).
    Server(Mutex<Option<Reading>>),
}

/// A reading of the server's clock, and when this process had it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Reading {
    ms: i64,
    at: Instant,
}

impl Clock {
    /// The clock of a database on `backend`, not read yet.
    pub(super) fn of(backend: super::Backend) -> Clock {
        match backend {
            super::Backend::Sqlite => Clock::Process,
            super::Backend::Postgres => Clock::Server(Mutex::new(None)),
        }
    }

    /// The database's time without a statement, if this clock has it: always on SQLite, on
    /// Postgres within [`FRESH`] of the last reading.
    pub(super) fn here(&self) -> Option<i64> {
        match self {
            Clock::Process => Some(crate::wall_clock::now_ms()),
            Clock::Server(last) => {
                let reading = (*last.lock().unwrap_or_else(|e| e.into_inner()))?;
                reading.at_instant(Instant::now())
            }
        }
    }

    /// Keeps `ms`, the server's clock as a statement just returned it.
    pub(super) fn read(&self, ms: i64) {
        if let Clock::Server(last) = self {
            *last.lock().unwrap_or_else(|e| e.into_inner()) = Some(Reading {
                ms,
                at: Instant::now(),
            });
        }
    }
}

impl Reading {
    /// The server's time at `now`, if the reading is fresh then. Taken when the answer arrived,
    /// it is behind the server by at most the part of the round trip after the server read
    /// its clock: never ahead of it.
    fn at_instant(&self, now: Instant) -> Option<i64> {
        let since = now.checked_duration_since(self.at)?;
        if since >= FRESH {
            return None;
        }
        // Below FRESH, so the conversion cannot fail.
        let since_ms = i64::try_from(since.as_millis()).ok()?;
        Some(self.ms.saturating_add(since_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reading_answers_for_a_second_advanced_by_the_monotonic_clock() {
        let at = Instant::now();
        let reading = Reading { ms: 1_000_000, at };
        assert_eq!(reading.at_instant(at), Some(1_000_000));
        assert_eq!(
            reading.at_instant(at + Duration::from_millis(250)),
            Some(1_000_250)
        );
        assert_eq!(
            reading.at_instant(at + FRESH - Duration::from_millis(1)),
            Some(1_000_999)
        );
        // Stale: the server is asked again.
        assert_eq!(reading.at_instant(at + FRESH), None);
        // An instant before the reading (another thread's older `now`) is not answered.
        let later = Reading {
            ms: 5,
            at: at + Duration::from_millis(10),
        };
        assert_eq!(later.at_instant(at), None);
    }

    #[test]
    fn a_server_clock_is_asked_until_it_was_read_and_sqlite_never() {
        let server = Clock::of(crate::store::Backend::Postgres);
        assert_eq!(server.here(), None);
        server.read(42);
        let here = server.here().expect("fresh");
        assert!((42..42 + 1_000).contains(&here), "{here}");
        let process = Clock::of(crate::store::Backend::Sqlite);
        process.read(42); // Ignored: SQLite's clock is this process's.
        let now = process.here().expect("always");
        assert!((now - crate::wall_clock::now_ms()).abs() < 1_000);
    }
}
