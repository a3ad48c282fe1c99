//! What one client on the network may hold: connections (in total and per source address) and
//! join rounds per second per source address. Both are keyed by [`SourceKey`], so a client
//! with a whole IPv6 /64 counts once.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The limits and timeouts the server applies in front of the handlers.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Connections open at once (handshaking ones included); more are closed at accept.
    pub max_connections: usize,
    /// Connections open at once from one source address (an IPv6 /64 counts as one).
    pub max_connections_per_source: usize,
    /// A TLS handshake that takes longer is dropped.
    pub handshake_timeout: Duration,
    /// An HTTP/1 request head that takes longer to arrive closes the connection.
    pub header_timeout: Duration,
    /// A request (its body read, its handler run) that takes longer is answered 408.
    pub request_timeout: Duration,
    /// A connection with no request in flight for this long is closed (covers headers that
    /// never complete, on HTTP/2 too, and TLS connections that never send a request).
    pub idle_timeout: Duration,
    /// Largest request body; a larger one is answered 413.
    pub max_body: usize,
    /// How long shutdown lets in-flight requests finish before it closes their connections.
    pub shutdown_grace: Duration,
    /// Join rounds per second per source address (`None`: unlimited).
    pub join_rate: Option<Rate>,
}

/// A token bucket's refill rate and size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Tokens added per second.
    pub per_second: f64,
    /// The most tokens a bucket holds (the burst a quiet client may send at once).
    pub burst: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            max_connections_per_source: 64,
            handshake_timeout: Duration::from_secs(10),
            header_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            max_body: 256 * 1024,
            shutdown_grace: Duration::from_secs(10),
            join_rate: Some(Rate {
                per_second: 20.0,
                burst: 100,
            }),
        }
    }
}

/// Who a limit counts: an IPv4 address, or the /64 an IPv6 address is in (one host usually
/// holds a whole /64). IPv4-mapped IPv6 addresses count as their IPv4 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SourceKey(IpAddr);

impl SourceKey {
    /// The key of a remote address.
    pub fn of(ip: IpAddr) -> Self {
        match ip.to_canonical() {
            IpAddr::V4(v4) => SourceKey(IpAddr::V4(v4)),
            IpAddr::V6(v6) => {
                let bits = u128::from(v6) & !((1u128 << 64) - 1);
                SourceKey(IpAddr::V6(Ipv6Addr::from(bits)))
            }
        }
    }
}

/// Counts open connections; [`ConnectionLimiter::admit`] hands out a permit per connection.
#[derive(Debug)]
pub struct ConnectionLimiter {
    total: usize,
    per_source: usize,
    open: Mutex<Open>,
}

#[derive(Debug, Default)]
struct Open {
    total: usize,
    by_source: HashMap<SourceKey, usize>,
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The host holds as many connections as it may.
    Total,
    /// This source holds as many connections as it may.
    PerSource,
}

/// One admitted connection; dropping it frees its place.
#[derive(Debug)]
pub struct ConnectionPermit {
    limiter: Arc<ConnectionLimiter>,
    key: SourceKey,
}

impl ConnectionLimiter {
    /// A limiter with these bounds.
    pub fn new(total: usize, per_source: usize) -> Arc<Self> {
        Arc::new(Self {
            total,
            per_source,
            open: Mutex::new(Open::default()),
        })
    }

    /// A permit for a connection from `ip`, unless that would exceed a bound.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<ConnectionPermit, Refused> {
        let key = SourceKey::of(ip);
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if open.total >= self.total {
            return Err(Refused::Total);
        }
        let from_source = open.by_source.entry(key).or_insert(0);
        if *from_source >= self.per_source {
            return Err(Refused::PerSource);
        }
        *from_source += 1;
        open.total += 1;
        Ok(ConnectionPermit {
            limiter: self.clone(),
            key,
        })
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .total
    }
}

impl Drop for ConnectionPermit {
    fn drop(&mut self) {
        let mut open = self
            .limiter
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        open.total = open.total.saturating_sub(1);
        if let Some(n) = open.by_source.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.by_source.remove(&self.key);
            }
        }
    }
}

/// Per-source token buckets for the unauthenticated join rounds.
#[derive(Debug)]
pub struct RateLimiter {
    rate: Rate,
    buckets: Mutex<HashMap<SourceKey, Bucket>>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Buckets kept before full ones (sources quiet long enough) are forgotten.
const BUCKETS_BEFORE_SWEEP: usize = 4096;
/// Buckets kept at most: past this, every bucket is forgotten, which lets a flood from very
/// many sources through once rather than letting the map grow without bound.
const MAX_BUCKETS: usize = 65_536;

impl RateLimiter {
    /// A limiter refilling at `rate`.
    pub fn new(rate: Rate) -> Self {
        Self {
            rate,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes a token for `ip`, or says how long until one is available.
    pub fn check(&self, ip: IpAddr, now: Instant) -> Result<(), Duration> {
        let key = SourceKey::of(ip);
        let burst = f64::from(self.rate.burst.max(1));
        let per_second = self.rate.per_second.max(f64::MIN_POSITIVE);
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        if buckets.len() >= BUCKETS_BEFORE_SWEEP && !buckets.contains_key(&key) {
            buckets.retain(|_, b| {
                b.tokens + now.saturating_duration_since(b.at).as_secs_f64() * per_second < burst
            });
            if buckets.len() >= MAX_BUCKETS {
                buckets.clear();
            }
        }
        let bucket = buckets.entry(key).or_insert(Bucket {
            tokens: burst,
            at: now,
        });
        let refilled =
            bucket.tokens + now.saturating_duration_since(bucket.at).as_secs_f64() * per_second;
        bucket.tokens = refilled.min(burst);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - bucket.tokens) / per_second))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_are_counted_in_total_and_per_source() {
        let limiter = ConnectionLimiter::new(3, 2);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let a1 = limiter.admit(a).unwrap();
        let _a2 = limiter.admit(a).unwrap();
        assert_eq!(limiter.admit(a).unwrap_err(), Refused::PerSource);
        let _b1 = limiter.admit(b).unwrap();
        assert_eq!(limiter.admit(b).unwrap_err(), Refused::Total);
        drop(a1);
        assert_eq!(limiter.open(), 2);
        let _a3 = limiter.admit(a).unwrap();
    }

    #[test]
    fn an_ipv6_slash_64_is_one_source_and_mapped_v4_is_v4() {
        let limiter = ConnectionLimiter::new(10, 1);
        let _x = limiter.admit("2001:db8::1".parse().unwrap()).unwrap();
        assert!(limiter.admit("2001:db8::ffff:1".parse().unwrap()).is_err());
        assert!(limiter.admit("2001:db8:0:1::1".parse().unwrap()).is_ok());
        let _v4 = limiter.admit("192.0.2.9".parse().unwrap()).unwrap();
        assert!(limiter.admit("::ffff:192.0.2.9".parse().unwrap()).is_err());
    }

    #[test]
    fn the_bucket_refills_at_the_rate() {
        let limiter = RateLimiter::new(Rate {
            per_second: 2.0,
            burst: 2,
        });
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let t0 = Instant::now();
        assert!(limiter.check(ip, t0).is_ok());
        assert!(limiter.check(ip, t0).is_ok());
        let wait = limiter.check(ip, t0).unwrap_err();
        assert!(wait > Duration::from_millis(400) && wait <= Duration::from_millis(500));
        assert!(limiter.check("192.0.2.2".parse().unwrap(), t0).is_ok());
        assert!(limiter.check(ip, t0 + Duration::from_millis(500)).is_ok());
        assert!(limiter.check(ip, t0 + Duration::from_millis(500)).is_err());
    }
}
