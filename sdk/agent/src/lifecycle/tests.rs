//! The schedule without a network, and the loop against local TLS servers: renewing,
//! re-joining with x509pop, backing off, stopping.

use std::sync::Mutex;

use gatehouse_proto::x509pop::X509popEvidence;
use gatehouse_proto::{JoinRequest, RenewRequest, Role};
use tokio::sync::{mpsc, oneshot};

use super::*;
use crate::Joined;
use crate::identity::{KEY_FILE, NEXT_KEY_FILE, load_identity, write_identity};
use crate::testutil::{
    Pki, TlsCa, csr_key, joined_body, proof, request_body, serve_https_with, sha256, tls_ca,
};

const S: i64 = 1000;

fn policy() -> RenewPolicy {
    RenewPolicy {
        renew_when_left: 0.5,
        backoff_min: Duration::from_secs(2),
        backoff_max: Duration::from_secs(10),
        jitter: 0.0,
        min_interval: Duration::ZERO,
        ..RenewPolicy::default()
    }
}

/// The host's back-dating of notBefore, in seconds.
const BACKDATE: i64 = gatehouse_proto::ISSUANCE_BACKDATE_MS / 1000;

/// A 100 s certificate issued at t = 1000 s (its notBefore back-dated as the host does).
fn validity() -> Validity {
    Validity {
        not_before_ms: (1000 - BACKDATE) * S,
        not_after_ms: 1100 * S,
    }
}

#[test]
fn the_lifetime_counts_from_the_issuance_not_the_backdated_not_before() {
    // A 60 s certificate as the host issues it: notBefore a minute before the issuance.
    let short = Validity {
        not_before_ms: (1000 - BACKDATE) * S,
        not_after_ms: 1060 * S,
    };
    assert_eq!(short.issued_at_ms(), 1000 * S);
    // Counting the back-dated minute, half of its "lifetime" would be gone at issuance and
    // a renewal due at once, again after every renewal: the runaway of issue 15.
    assert_eq!(short.renew_at_ms(0.5), 1030 * S);
    let s = Schedule::new(policy());
    assert_eq!(
        s.step(1000 * S, short),
        Step::Sleep(Duration::from_secs(30))
    );
    // A certificate whose notBefore is later than notAfter minus the back-dating (not the
    // host's) is taken as issued at its notAfter: due at once, never before it was valid.
    let odd = Validity {
        not_before_ms: 1050 * S,
        not_after_ms: 1060 * S,
    };
    assert_eq!(odd.issued_at_ms(), 1060 * S);
    assert_eq!(odd.renew_at_ms(0.5), 1060 * S);
}

#[test]
fn no_renewal_comes_sooner_than_the_minimum_interval() {
    let p = RenewPolicy {
        renew_when_left: 1.0,
        min_interval: Duration::from_secs(60),
        ..policy()
    };
    // Renew at once by the fraction, but not within 60 s of the issuance.
    let long = Validity {
        not_before_ms: (1000 - BACKDATE) * S,
        not_after_ms: 4600 * S,
    };
    assert_eq!(long.renew_due_ms(&p), 1060 * S);
    let s = Schedule::new(p.clone());
    assert_eq!(s.step(1000 * S, long), Step::Sleep(Duration::from_secs(60)));
    assert_eq!(s.step(1060 * S, long), Step::Act(Action::Renew));
    // A certificate shorter than the interval renews a few seconds before it expires.
    let short = Validity {
        not_before_ms: (1000 - BACKDATE) * S,
        not_after_ms: 1030 * S,
    };
    assert_eq!(short.renew_due_ms(&p), 1025 * S);
    // The fraction, when later, wins.
    let half = RenewPolicy {
        renew_when_left: 0.5,
        ..p
    };
    assert_eq!(long.renew_due_ms(&half), 2800 * S);
    assert_eq!(RenewPolicy::default().min_interval, Duration::from_secs(60));
}

#[test]
fn the_default_policy_is_a_third_and_30s_to_10min() {
    let p = RenewPolicy::default();
    p.validate().unwrap();
    assert!((p.renew_when_left - 1.0 / 3.0).abs() < 1e-12);
    let waits: Vec<u64> = (1..=8).map(|n| p.backoff(n).as_secs()).collect();
    assert_eq!(waits, [30, 60, 120, 240, 480, 600, 600, 600]);
    assert_eq!(p.backoff(u32::MAX), Duration::from_secs(600));
}

#[test]
fn unusable_policies_are_refused() {
    for bad in [
        RenewPolicy {
            renew_when_left: 0.0,
            ..policy()
        },
        RenewPolicy {
            renew_when_left: 1.5,
            ..policy()
        },
        RenewPolicy {
            renew_when_left: f64::NAN,
            ..policy()
        },
        RenewPolicy {
            backoff_min: Duration::ZERO,
            ..policy()
        },
        RenewPolicy {
            backoff_min: Duration::from_secs(11),
            ..policy()
        },
    ] {
        assert!(
            matches!(bad.validate(), Err(LifecycleError::Policy(_))),
            "{bad:?}"
        );
    }
}

#[test]
fn renews_once_the_fraction_is_reached() {
    let s = Schedule::new(policy());
    assert_eq!(validity().renew_at_ms(0.5), 1050 * S);
    assert_eq!(validity().renew_at_ms(1.0 / 3.0), 1100 * S - 33_333);
    assert_eq!(
        s.step(1000 * S, validity()),
        Step::Sleep(Duration::from_secs(50))
    );
    assert_eq!(
        s.step(1049 * S, validity()),
        Step::Sleep(Duration::from_secs(1))
    );
    assert_eq!(s.step(1050 * S, validity()), Step::Act(Action::Renew));
    assert_eq!(s.step(1099 * S, validity()), Step::Act(Action::Renew));
    // Expired: re-join at once.
    assert_eq!(s.step(1100 * S, validity()), Step::Act(Action::Rejoin));
    assert_eq!(s.step(9999 * S, validity()), Step::Act(Action::Rejoin));
}

#[test]
fn failures_back_off_exponentially_up_to_the_cap() {
    let mut s = Schedule::new(RenewPolicy {
        backoff_max: Duration::from_secs(5),
        ..policy()
    });
    let long = Validity {
        not_before_ms: -BACKDATE * S,
        not_after_ms: 10_000 * S,
    };
    let mut now = 5000 * S;
    let mut waits = vec![];
    for expected_attempt in 1..=4 {
        assert_eq!(s.step(now, long), Step::Act(Action::Renew));
        let (attempt, wait) = s.failed(Action::Renew, now);
        assert_eq!(attempt, expected_attempt);
        waits.push(wait.as_secs());
        assert_eq!(s.step(now, long), Step::Sleep(wait));
        now += i64::try_from(wait.as_millis()).unwrap();
    }
    assert_eq!(waits, [2, 4, 5, 5]);
    // A success starts over: the next renewal is due by the fraction again.
    s.succeeded();
    let renewed = Validity {
        not_before_ms: now - BACKDATE * S,
        not_after_ms: now + 100 * S,
    };
    assert_eq!(s.step(now, renewed), Step::Sleep(Duration::from_secs(50)));
    assert_eq!(s.failed(Action::Renew, now).0, 1, "counting starts over");
}

#[test]
fn a_backoff_never_outlasts_the_certificate() {
    let mut s = Schedule::new(RenewPolicy {
        backoff_min: Duration::from_secs(30),
        backoff_max: Duration::from_secs(30),
        ..policy()
    });
    // Ten seconds left, a 30 s backoff: wake at the expiry, and re-join then.
    s.failed(Action::Renew, 1090 * S);
    assert_eq!(
        s.step(1090 * S, validity()),
        Step::Sleep(Duration::from_secs(10))
    );
    assert_eq!(s.step(1100 * S, validity()), Step::Act(Action::Rejoin));
    // A failed re-join backs off from the minimum again.
    assert_eq!(
        s.failed(Action::Rejoin, 1100 * S),
        (1, Duration::from_secs(30))
    );
    assert_eq!(
        s.step(1101 * S, validity()),
        Step::Sleep(Duration::from_secs(29))
    );
    assert_eq!(s.step(1130 * S, validity()), Step::Act(Action::Rejoin));
    assert_eq!(s.failed(Action::Rejoin, 1130 * S).0, 2);
}

#[test]
fn expires_in_reads_well() {
    assert_eq!(expires_in(3_723_400), "1h 2m 3s");
    assert_eq!(expires_in(-5_000), "-5s");
    assert_eq!(expires_in(0), "0s");
    assert_eq!(expires_in(-400), "0s");
}

/// A node with a certificate valid from `from_s` to `to_s` (seconds relative to now), its
/// identity written to a fresh directory.
struct Fixture {
    pki: Arc<Pki>,
    ca: TlsCa,
    dir: tempfile::TempDir,
    serial: String,
}

fn now_s() -> i64 {
    now_ms() / 1000
}

fn fixture(from_s: i64, to_s: i64) -> Fixture {
    let ca = tls_ca();
    let mut pki = Pki::new();
    pki.trust.tls_ca_pem = ca.pem.clone();
    let key = NodeKey::generate().unwrap();
    let leaf = pki.node_cert(
        key.key_pair(),
        "node_a",
        "node",
        now_s() + from_s,
        now_s() + to_s,
    );
    let cert = NodeCert::parse(&leaf).unwrap();
    let joined = Joined {
        node_id: "node_a".into(),
        trust_domain: "td.test".into(),
        spiffe_id: "spiffe://td.test/node/node_a".into(),
        chain: vec![leaf, pki.ca_der()],
        not_after_ms: cert.not_after_ms,
        attestor: "join-token".into(),
        rounds: 1,
        trust: None,
    };
    let dir = tempfile::tempdir().unwrap();
    write_identity(dir.path(), &key, &joined).unwrap();
    Fixture {
        pki: Arc::new(pki),
        ca,
        dir,
        serial: cert.serial,
    }
}

fn fast() -> RenewPolicy {
    RenewPolicy {
        renew_when_left: 0.5,
        backoff_min: Duration::from_millis(20),
        backoff_max: Duration::from_millis(80),
        jitter: 0.0,
        min_interval: Duration::ZERO,
        ..RenewPolicy::default()
    }
}

/// A P-256 public key by its point, as a CSR carries it.
struct P256Point(Vec<u8>);

impl rcgen::PublicKeyData for P256Point {
    fn der_bytes(&self) -> &[u8] {
        &self.0
    }
    fn algorithm(&self) -> &'static rcgen::SignatureAlgorithm {
        &rcgen::PKCS_ECDSA_P256_SHA256
    }
}

/// The host's answer for `csr`: node_a, valid for an hour.
fn issue(pki: &Pki, csr: &[u8]) -> Vec<u8> {
    let subject = P256Point(csr_key(csr).1);
    let leaf = pki.node_cert(&subject, "node_a", "node", now_s() - 1, now_s() + 3600);
    serde_json::to_vec(&pki.respond(&joined_body(
        &sha256(csr),
        "node_a",
        vec![leaf, pki.ca_der()],
    )))
    .unwrap()
}

async fn run_until(
    lifecycle: Lifecycle,
    mut until: impl FnMut(&LifecycleEvent) -> bool,
) -> Vec<LifecycleEvent> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let lifecycle = lifecycle.with_events(tx);
    let task = tokio::spawn(async move {
        lifecycle
            .run(async {
                let _ = stop_rx.await;
            })
            .await
    });
    let mut seen = vec![];
    let deadline = tokio::time::sleep(Duration::from_secs(20));
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            e = rx.recv() => {
                let e = e.expect("the loop ended early");
                let done = until(&e);
                seen.push(e);
                if done { break; }
            }
            () = &mut deadline => panic!("no such event: {seen:?}"),
        }
    }
    stop_tx.send(()).unwrap();
    task.await.unwrap().unwrap();
    seen
}

/// The lifecycle tests run one at a time. They log from the same callsites on their own
/// threads, and tracing caches each callsite's interest process-wide when it is first hit: a
/// sibling test hitting `renewal failed` first, with no subscriber on its thread, while
/// [`failures_are_logged_and_retried_with_backoff`] installs its capturing one, could leave
/// that callsite cached as "never" and the capture empty (seen under load).
async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    SERIAL.lock().await
}

#[tokio::test]
async fn renews_with_the_current_certificate_and_installs_the_next_key() {
    let _serial = serial().await;
    // Half of a 100 s lifetime (issued 60 s ago, notBefore a minute earlier) is gone: due now.
    let f = fixture(-60 - BACKDATE, 40);
    let before = load_identity(f.dir.path()).unwrap();
    let pki = f.pki.clone();
    let (url, server) = serve_https_with(&f.ca, Some(proof()), move |served| {
        let req: RenewRequest = serde_json::from_slice(request_body(served)).unwrap();
        ("200 OK", issue(&pki, &req.csr))
    })
    .await;
    let lifecycle = Lifecycle::new(&url, f.pki.trust.clone(), f.dir.path().into(), fast());
    let events = run_until(lifecycle, |e| matches!(e, LifecycleEvent::Renewed { .. })).await;
    let served = server.await.unwrap();
    assert!(served.request.starts_with(b"POST /v1/renew "));
    assert_eq!(
        served.peer, before.chain,
        "authenticated by the current chain"
    );

    let LifecycleEvent::Renewed {
        node_id, serial, ..
    } = &events[0]
    else {
        panic!("{events:?}")
    };
    assert_eq!(node_id, "node_a");
    assert_ne!(*serial, f.serial);
    let after = load_identity(f.dir.path()).unwrap();
    assert_eq!(after.cert.serial, *serial);
    assert_eq!(after.identity.attestor, "join-token", "a renewal keeps it");
    assert_eq!(after.key.spki_der(), after.cert.spki_der);
    assert_ne!(after.key.spki_der(), before.key.spki_der(), "a new key");
    assert!(!f.dir.path().join(NEXT_KEY_FILE).exists(), "swapped in");
    assert!(after.identity.not_after > before.identity.not_after);
}

#[tokio::test]
async fn an_expired_certificate_rejoins_with_x509pop() {
    let _serial = serial().await;
    let f = fixture(-200, -100);
    let before = load_identity(f.dir.path()).unwrap();
    let pki = f.pki.clone();
    let old_chain = before.chain.clone();
    let (url, server) = serve_https_with(&f.ca, None, move |served| {
        let req: JoinRequest = serde_json::from_slice(request_body(served)).unwrap();
        assert_eq!((req.attestor.as_str(), req.role), ("x509pop", Role::Node));
        assert!(req.sealed_token.is_none());
        let ev: X509popEvidence = serde_json::from_slice(&req.attestation).unwrap();
        assert_eq!((ev.v, ev.node_id.as_str()), (1, "node_a"));
        assert_eq!(ev.chain, old_chain);
        assert!((ev.client_time - now_ms()).abs() < 60_000);
        ("200 OK", issue(&pki, &req.csr))
    })
    .await;
    let lifecycle = Lifecycle::new(&url, f.pki.trust.clone(), f.dir.path().into(), fast());
    let events = run_until(lifecycle, |e| matches!(e, LifecycleEvent::Rejoined { .. })).await;
    let served = server.await.unwrap();
    assert!(served.request.starts_with(b"POST /v1/join "));
    assert!(matches!(&events[0], LifecycleEvent::Rejoined { node_id, .. } if node_id == "node_a"));
    let after = load_identity(f.dir.path()).unwrap();
    assert_eq!(after.identity.attestor, "x509pop");
    assert_eq!(after.identity.node_id, "node_a");
    assert_eq!(after.key.spki_der(), after.cert.spki_der);
    assert_ne!(after.key.spki_der(), before.key.spki_der());
}

/// Collects what the tracing fmt layer writes.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn failures_are_logged_and_retried_with_backoff() {
    let _serial = serial().await;
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let f = fixture(-60, 3600);
    // Nothing listens on port 1.
    let lifecycle = Lifecycle::new(
        "https://127.0.0.1:1",
        f.pki.trust.clone(),
        f.dir.path().into(),
        RenewPolicy {
            renew_when_left: 1.0,
            ..fast()
        },
    );
    let before = load_identity(f.dir.path()).unwrap();
    let events = run_until(lifecycle, |e| {
        matches!(e, LifecycleEvent::Failed { attempt: 4, .. })
    })
    .await;
    let got: Vec<(Action, u32, u128)> = events
        .iter()
        .map(|e| match e {
            LifecycleEvent::Failed {
                action,
                attempt,
                retry_in,
                ..
            } => (*action, *attempt, retry_in.as_millis()),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        got,
        [
            (Action::Renew, 1, 20),
            (Action::Renew, 2, 40),
            (Action::Renew, 3, 80),
            (Action::Renew, 4, 80)
        ]
    );
    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("renewal failed"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("attempt=1"), "{line}");
    assert!(line.contains("expiresIn=59m"), "{line}");
    assert!(
        line.contains("action=\"renew\"") || line.contains("action=renew"),
        "{line}"
    );
    // The identity is untouched; only a staged next key is left for the next attempt.
    let after = load_identity(f.dir.path()).unwrap();
    assert_eq!(after.cert.serial, before.cert.serial);
    assert_eq!(after.key.spki_der(), before.key.spki_der());
    assert!(f.dir.path().join(NEXT_KEY_FILE).exists());
}

#[tokio::test]
async fn an_expired_certificate_that_cannot_rejoin_keeps_trying() {
    let _serial = serial().await;
    let f = fixture(-200, -100);
    let lifecycle = Lifecycle::new(
        "https://127.0.0.1:1",
        f.pki.trust.clone(),
        f.dir.path().into(),
        fast(),
    );
    let events = run_until(lifecycle, |e| {
        matches!(e, LifecycleEvent::Failed { attempt: 2, .. })
    })
    .await;
    assert!(
        events.iter().all(|e| matches!(
            e,
            LifecycleEvent::Failed {
                action: Action::Rejoin,
                ..
            }
        )),
        "{events:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn stops_when_told_and_sleeps_until_due() {
    let _serial = serial().await;
    let f = fixture(-10, 3600);
    let lifecycle = Lifecycle::new(
        "https://127.0.0.1:1",
        f.pki.trust.clone(),
        f.dir.path().into(),
        RenewPolicy::default(),
    );
    let (tx, mut rx) = mpsc::unbounded_channel();
    let lifecycle = lifecycle.with_events(tx);
    // Not due for ~40 minutes: ten minutes of (paused) time pass without an attempt.
    let stop = tokio::time::sleep(Duration::from_secs(600));
    lifecycle.run(stop).await.unwrap();
    assert!(rx.try_recv().is_err(), "nothing attempted");
}

#[tokio::test]
async fn a_missing_identity_or_a_bad_policy_ends_the_loop() {
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let trust = Pki::new().trust;
    let l = Lifecycle::new("https://h:1", trust.clone(), dir.path().into(), fast());
    let err = l.run(std::future::pending()).await.unwrap_err();
    assert!(
        matches!(err, LifecycleError::Identity(IdentityError::Missing(_))),
        "{err}"
    );
    assert!(
        err.to_string()
            .ends_with("holds no identity; join first: gatehouse-agent join")
    );
    let bad = RenewPolicy {
        renew_when_left: 2.0,
        ..fast()
    };
    let l = Lifecycle::new("https://h:1", trust, dir.path().into(), bad);
    assert!(matches!(
        l.run(std::future::pending()).await,
        Err(LifecycleError::Policy(_))
    ));
}

#[test]
fn a_crash_between_the_renames_is_finished_at_load() {
    // The state commit_next leaves after replacing node.crt and before renaming the key:
    // node.crt certifies node.key.next.
    let f = fixture(-10, 3600);
    let dir = f.dir.path();
    let next = NodeKey::generate().unwrap();
    stage_next_key(dir, &next).unwrap();
    let leaf = f
        .pki
        .node_cert(next.key_pair(), "node_a", "node", now_s(), now_s() + 3600);
    let chain: String = [leaf, f.pki.ca_der()]
        .iter()
        .map(|c| crate::identity::pem(c))
        .collect();
    std::fs::write(dir.join(crate::identity::CERT_FILE), chain).unwrap();

    let loaded = load_identity(dir).unwrap();
    assert_eq!(loaded.key.spki_der(), next.spki_der());
    assert!(!dir.join(NEXT_KEY_FILE).exists());
    assert_eq!(
        NodeKey::load(&dir.join(KEY_FILE)).unwrap().spki_der(),
        next.spki_der()
    );

    // A key that matches neither is corruption, reported, not repaired.
    NodeKey::generate()
        .unwrap()
        .save_replacing(&dir.join(KEY_FILE))
        .unwrap();
    let err = load_identity(dir).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("is not the key the node certificate certifies"),
        "{err}"
    );
}

#[test]
fn commit_refuses_a_key_the_certificate_does_not_certify() {
    let f = fixture(-10, 3600);
    let dir = f.dir.path();
    let before = std::fs::read(dir.join(KEY_FILE)).unwrap();
    let (staged, other) = (NodeKey::generate().unwrap(), NodeKey::generate().unwrap());
    stage_next_key(dir, &staged).unwrap();
    let leaf = f
        .pki
        .node_cert(other.key_pair(), "node_a", "node", now_s(), now_s() + 3600);
    let joined = Joined {
        node_id: "node_a".into(),
        trust_domain: "td.test".into(),
        spiffe_id: "spiffe://td.test/node/node_a".into(),
        chain: vec![leaf],
        not_after_ms: 0,
        attestor: String::new(),
        rounds: 1,
        trust: None,
    };
    assert!(commit_next(dir, &staged, &joined, "join-token").is_err());
    assert!(commit_next(dir, &other, &joined, "join-token").is_err());
    assert_eq!(std::fs::read(dir.join(KEY_FILE)).unwrap(), before);
    load_identity(dir).unwrap();
}

#[test]
fn jitter_shortens_each_wait_by_a_random_part_of_it() {
    let p = RenewPolicy {
        jitter: 0.5,
        ..policy()
    };
    assert_eq!(
        p.jittered(Duration::from_secs(10), 0.0),
        Duration::from_secs(10)
    );
    assert_eq!(
        p.jittered(Duration::from_secs(10), 0.5),
        Duration::from_millis(7500)
    );
    assert!(p.jittered(Duration::from_secs(10), 0.999_999) > Duration::from_secs(5));
    let mut s = Schedule::new(p.clone());
    assert_eq!(
        s.failed_with(Action::Renew, 0, 0.5),
        (1, Duration::from_millis(1500))
    );
    // Drawn from the system's generator: within [half, all] of the backoff, and not all equal.
    let waits: Vec<Duration> = (0..16)
        .map(|_| Schedule::new(p.clone()).failed(Action::Renew, 0).1)
        .collect();
    assert!(
        waits
            .iter()
            .all(|w| *w >= Duration::from_secs(1) && *w <= Duration::from_secs(2)),
        "{waits:?}"
    );
    assert!(waits.iter().any(|w| *w != waits[0]), "{waits:?}");
    for bad in [-0.1, 1.0, f64::NAN] {
        assert!(
            RenewPolicy {
                jitter: bad,
                ..policy()
            }
            .validate()
            .is_err(),
            "{bad}"
        );
    }
}

#[test]
fn a_refused_renewal_is_followed_by_a_rejoin_at_once() {
    let mut s = Schedule::new(policy());
    assert_eq!(s.step(1060 * S, validity()), Step::Act(Action::Renew));
    s.renewal_refused();
    assert_eq!(s.step(1060 * S, validity()), Step::Act(Action::Rejoin));
    // A failed re-join backs off as any failure does.
    let (attempt, wait) = s.failed_with(Action::Rejoin, 1060 * S, 0.0);
    assert_eq!((attempt, wait), (1, Duration::from_secs(2)));
    assert_eq!(
        s.step(1060 * S, validity()),
        Step::Sleep(Duration::from_secs(2))
    );
    assert_eq!(s.step(1062 * S, validity()), Step::Act(Action::Rejoin));
    // Until one succeeds.
    s.succeeded();
    assert_eq!(
        s.step(1000 * S, validity()),
        Step::Sleep(Duration::from_secs(50))
    );
}

#[tokio::test]
async fn a_certificate_past_the_grace_stops_the_loop_with_the_recovery_command() {
    let _serial = serial().await;
    // Expired two hours ago; a grace of one hour.
    let f = fixture(-4 * 3600, -2 * 3600);
    let lifecycle = Lifecycle::new(
        "https://127.0.0.1:1",
        f.pki.trust.clone(),
        f.dir.path().into(),
        RenewPolicy {
            rejoin_grace: Duration::from_secs(3600),
            ..fast()
        },
    )
    .with_trust_file("/etc/gatehouse-agent/trust.json".into());
    let err = tokio::time::timeout(
        Duration::from_secs(5),
        lifecycle.run(std::future::pending()),
    )
    .await
    .expect("it stops by itself, sending nothing")
    .unwrap_err();
    let LifecycleError::CannotRejoin {
        node_id,
        reason,
        recovery,
    } = &err
    else {
        panic!("{err}")
    };
    assert_eq!(node_id, "node_a");
    assert_eq!(
        reason,
        "the certificate expired more than 1h ago, past x509pop's grace"
    );
    assert_eq!(
        recovery,
        &format!(
            "gatehouse-agent join --reset --yes --server https://127.0.0.1:1 --ca \
             /etc/gatehouse-agent/trust.json --out {} --token-file NEW-TOKEN",
            f.dir.path().display()
        )
    );
    assert!(
        err.to_string()
            .contains("; recover with: gatehouse-agent join")
    );
}
