//! One bounded attestor call.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use wasmtime::component::Resource;
use wasmtime::{Store, Trap, UpdateDeadline};

use super::Pre;
use super::bindings::types::{AttestationResult, Deferral, JoinRequest, Outcome};
use super::engine::EPOCH_TICK;
use super::guest::TickYield;
use super::loader::Configured;
use crate::imports::{CallState, Prepared, Session, TxBackend, transaction_rep};

/// How long a call may take in all, host time included, before the host abandons it. The
/// guest's own deadline is far shorter; this backstop covers a database that stops answering
/// despite its own timeouts.
const WALL_BACKSTOP: Duration = Duration::from_secs(15);

/// Why a call produced no usable outcome. JoinService refuses the join with the reason
/// `join::Refusal::of_fault` gives it and logs this.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Fault {
    /// No attestor with the requested id is loaded.
    #[error("no such attestor")]
    UnknownAttestor,
    /// The guest ran past its execution deadline.
    #[error("the attestor ran past its deadline")]
    Timeout,
    /// The guest tried to grow its memory past the cap.
    #[error("the attestor ran out of memory")]
    OutOfMemory,
    /// A storage operation failed during the call.
    #[error("storage failed during the call")]
    Storage,
    /// The guest trapped (panic, unreachable, bad handle, too many host calls, ...).
    #[error("the attestor trapped: {0}")]
    Trap(String),
    /// The guest returned an outcome that breaks the ABI's rules.
    #[error("the attestor returned a malformed outcome: {0}")]
    Malformed(String),
    /// As many calls of this attestor as it may have at once are running.
    #[error("the attestor has as many calls running as it may")]
    Busy,
    /// The guest met a per-call write limit and still admitted or deferred.
    #[error("the attestor met a write limit: {0}")]
    WriteLimit(&'static str),
}

/// What a call came to.
pub struct CallOutcome<B> {
    /// The validated outcome, or why there is none.
    pub result: Result<Outcome, Fault>,
    /// The session back; none when the call had to be abandoned (its transaction was dropped
    /// and so rolled back).
    pub session: Option<Session<B>>,
    /// Wall time of the call, instantiation included.
    pub elapsed: Duration,
    /// Where a call's time went, for the benchmark's breakdown.
    pub phases: CallPhases,
}

/// The parts of a call's wall time ([`CallOutcome::elapsed`] is `instantiate` plus the rest).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallPhases {
    /// From the call's move to the attestor's guest thread until that thread first ran it:
    /// zero for a call that ended on its join's thread (see [`super::guest`]).
    pub queued: Duration,
    /// A fresh store and instance (before `verify` is entered).
    pub instantiate: Duration,
    /// The call ran on its attestor's thread: it moved there, or started there while the
    /// attestor was demoted (see [`super::guest`]).
    pub on_own_thread: bool,
}

impl<B> CallOutcome<B> {
    pub(super) fn fault(fault: Fault, session: Option<Session<B>>) -> Self {
        Self {
            result: Err(fault),
            session,
            elapsed: Duration::ZERO,
            phases: CallPhases::default(),
        }
    }
}

/// What bounds one call.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bounds {
    /// Guest execution (see [`GuestClock`]).
    pub deadline: Duration,
    /// Linear memory, in bytes.
    pub memory: usize,
}

/// Calls `verify` in a fresh store and instance. `yielded` is raised each time the call yields
/// at an epoch tick (see [`super::guest`]).
pub(super) async fn verify<B: TxBackend>(
    pre: &Pre<B>,
    id: &str,
    config: &Configured,
    session: Session<B>,
    request: &JoinRequest,
    bounds: Bounds,
    yielded: TickYield,
) -> CallOutcome<B> {
    let Bounds { deadline, memory } = bounds;
    let started = Instant::now();
    let mut state = CallState::new(Some(session), memory);
    state.prepared = Prepared::Kept(config.prepared.clone());
    let mut store = Store::new(pre.engine(), state);
    store.limiter(|s| &mut s.limiter);
    // Check the deadline every epoch tick and yield to the executor once the guest has used
    // the CPU for a tick, so a spinning guest does not hold a thread (see `GuestClock`); the
    // first yield also moves the call to its attestor's thread (`super::guest`).
    store.set_epoch_deadline(1);
    let meter = CallMeter::default();
    let mut clock = GuestClock::new(started, deadline);
    let at_tick = meter.clone();
    store.epoch_deadline_callback(move |cx| {
        let (resumed, cpu) = at_tick.at_tick();
        Ok(
            match clock.tick(Instant::now(), cx.data().host_time, resumed, cpu) {
                Tick::Resumed | Tick::Running => UpdateDeadline::Continue(1),
                Tick::Yield => {
                    at_tick.stop();
                    yielded.raise();
                    UpdateDeadline::Yield(1)
                }
                Tick::Expired => return Err(Trap::Interrupt.into()),
            },
        )
    });

    let mut instantiated = None;
    let result = {
        let call = async {
            let verify = pre.instantiate(&mut store).await?;
            instantiated = Some(started.elapsed());
            let args = (
                Resource::new_borrow(transaction_rep()),
                &*config.text,
                request,
            );
            verify
                .call_async(&mut store, args)
                .await
                .map(|(outcome,)| outcome)
        };
        // Each poll is the executor giving the call its thread; the first after a yield ends
        // the call's wait in the queue. Once the meter runs, each poll's CPU is counted.
        let mut call = std::pin::pin!(call);
        let call = std::future::poll_fn(|cx| {
            meter.poll_begins(Instant::now());
            let polled = call.as_mut().poll(cx);
            meter.poll_ends();
            polled
        });
        tokio::time::timeout(deadline + WALL_BACKSTOP, call).await
    };

    for line in store.data().stderr().lines() {
        tracing::info!(attestor = %id, "{line}");
    }
    let elapsed = started.elapsed();
    let phases = CallPhases {
        queued: Duration::ZERO,
        instantiate: instantiated.unwrap_or(elapsed),
        on_own_thread: false,
    };
    let out_of_memory = store.data().limiter.denied();
    let storage_failed = |state: &CallState<B>| {
        state
            .session
            .as_ref()
            .is_some_and(|s| s.effects.storage_failures > 0)
    };
    let write_limit =
        |state: &CallState<B>| state.session.as_ref().and_then(|s| s.effects.write_limit);
    match result {
        Err(_abandoned) => {
            tracing::warn!(attestor = %id, ?elapsed, "attestor call abandoned past the wall-clock backstop");
            CallOutcome {
                result: Err(Fault::Timeout),
                session: None,
                elapsed,
                phases,
            }
        }
        Ok(Err(error)) => {
            let fault = if out_of_memory {
                Fault::OutOfMemory
            } else if error.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
                Fault::Timeout
            } else if storage_failed(store.data()) {
                Fault::Storage
            } else {
                Fault::Trap(format!("{error:#}"))
            };
            tracing::warn!(attestor = %id, %fault, error = %format!("{error:#}"), "attestor call failed");
            CallOutcome {
                result: Err(fault),
                session: store.into_data().into_session(),
                elapsed,
                phases,
            }
        }
        Ok(Ok(outcome)) => {
            let result = match validate(&outcome) {
                Err(why) => Err(Fault::Malformed(why)),
                // A call that saw storage fail decides nothing: it cannot admit or defer on what
                // it believes it wrote, and its refusal may rest on a read that failed (the
                // join-token attestor refuses `storage-error`): the database's failure is the
                // host's "try again", never a refusal of the machine.
                Ok(()) if storage_failed(store.data()) => Err(Fault::Storage),
                // Nor on writes it was told were refused past a limit.
                Ok(()) if !matches!(outcome, Outcome::Refused(_)) => {
                    match write_limit(store.data()) {
                        Some(limit) => Err(Fault::WriteLimit(limit)),
                        None => Ok(outcome),
                    }
                }
                Ok(()) => Ok(outcome),
            };
            if let Err(fault) = &result {
                tracing::warn!(attestor = %id, %fault, "attestor outcome rejected");
            }
            CallOutcome {
                result,
                session: store.into_data().into_session(),
                elapsed,
                phases,
            }
        }
    }
}

/// The deadline's bookkeeping at each epoch tick, apart from wasmtime so that it can be tested
/// with made-up times. The deadline counts guest execution only: wall time less time in host
/// imports and less time queued for the attestor's thread after a yield, so a call waiting
/// behind busy guests is not charged for their turns.
struct GuestClock {
    started: Instant,
    deadline: Duration,
    queued: Duration,
    yielded_at: Option<Instant>,
}

/// The CPU a call must have used since the first tick it crossed (or since it resumed) for a
/// later tick to yield it. Between two ticks a guest that spins gets a tick of wall time, and
/// half of it in CPU unless the machine starves it; an honest call uses tens of microseconds.
const YIELD_AFTER_CPU: Duration = Duration::from_micros(EPOCH_TICK.as_micros() as u64 / 2);

/// What a call does at an epoch tick.
#[derive(Debug, PartialEq, Eq)]
enum Tick {
    /// The call just resumed after a yield: it runs until it has used [`YIELD_AFTER_CPU`]
    /// again before it yields, or a congested executor would resume every call only to yield
    /// it at once, and none would progress.
    Resumed,
    /// The guest has not used [`YIELD_AFTER_CPU`] since its meter started (this is the first
    /// tick it crossed, or the tick came while it awaited a host import or while the operating
    /// system had its thread off the CPU): it runs on. So only a call that kept the CPU
    /// yields, and so moves to its attestor's thread (`super::guest`); an honest call a tick
    /// happens to cross, or that was preempted across one, does not.
    Running,
    /// Yield to the executor, so a spinning guest does not hold the attestor's thread.
    Yield,
    /// The guest has run past its deadline.
    Expired,
}

impl GuestClock {
    fn new(started: Instant, deadline: Duration) -> Self {
        Self {
            started,
            deadline,
            queued: Duration::ZERO,
            yielded_at: None,
        }
    }

    /// The tick at `now`, given the call's time in host imports so far, when the call was
    /// first polled since its last yield, and the CPU its polls used since its meter started
    /// (`None`: the meter starts at this tick; see [`CallMeter`]).
    fn tick(
        &mut self,
        now: Instant,
        host_time: Duration,
        resumed: Option<Instant>,
        cpu: Option<Duration>,
    ) -> Tick {
        // The first tick after a yield: the wait for the thread is not the guest's, so it is
        // counted out before the deadline is checked.
        let resuming = self.yielded_at.take();
        if let Some(at) = resuming {
            self.queued += resumed.unwrap_or(now).saturating_duration_since(at);
        }
        if self.guest(now, host_time) >= self.deadline {
            Tick::Expired
        } else if resuming.is_some() {
            Tick::Resumed
        } else if cpu.is_some_and(|cpu| cpu >= YIELD_AFTER_CPU) {
            self.yielded_at = Some(now);
            Tick::Yield
        } else {
            Tick::Running
        }
    }

    /// Guest execution so far: wall time less host imports and queueing.
    fn guest(&self, now: Instant, host_time: Duration) -> Duration {
        now.saturating_duration_since(self.started)
            .saturating_sub(host_time)
            .saturating_sub(self.queued)
    }
}

/// What a call's polls tell its epoch callback: when the call was first polled since its last
/// yield (the end of its wait for a thread), and, once a tick has started the meter, the CPU
/// its polls have used since, read from the polling thread's CPU clock at each poll's start and
/// end. Wall time cannot tell a guest that spins from one whose thread the operating system
/// took away for a while: on a busy machine an honest join-token call, tens of microseconds of
/// work, was preempted across a 2 ms tick now and then, moved, and demoted its attestor to the
/// hand-off for a second each time (issue 14). The clock is read only once a call has crossed
/// a tick (two system calls a poll), so the calls that end between ticks never pay for it.
#[derive(Clone, Default)]
struct CallMeter(Arc<Mutex<Meter>>);

#[derive(Default)]
struct Meter {
    resumed: Option<Instant>,
    /// None until a tick starts the meter, and again after a yield.
    cpu: Option<PollsCpu>,
}

struct PollsCpu {
    /// The CPU of the polls that ended since the meter started.
    ended: Duration,
    /// The polling thread's CPU clock when the current poll began (or the meter started).
    poll_from: Option<Duration>,
}

impl CallMeter {
    fn lock(&self) -> std::sync::MutexGuard<'_, Meter> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn poll_begins(&self, now: Instant) {
        let mut meter = self.lock();
        meter.resumed.get_or_insert(now);
        if let Some(cpu) = &mut meter.cpu {
            cpu.poll_from = Some(thread_cpu());
        }
    }

    fn poll_ends(&self) {
        if let Some(cpu) = &mut self.lock().cpu
            && let Some(from) = cpu.poll_from.take()
        {
            cpu.ended += thread_cpu().saturating_sub(from);
        }
    }

    /// At an epoch tick (inside a poll): when the call resumed, if it did since the last
    /// tick, and the CPU used since the meter started, or `None` having started it now.
    fn at_tick(&self) -> (Option<Instant>, Option<Duration>) {
        let mut meter = self.lock();
        let now = thread_cpu();
        let used = match &mut meter.cpu {
            Some(cpu) => Some(cpu.ended + now.saturating_sub(cpu.poll_from.unwrap_or(now))),
            None => {
                meter.cpu = Some(PollsCpu {
                    ended: Duration::ZERO,
                    poll_from: Some(now),
                });
                None
            }
        };
        (meter.resumed.take(), used)
    }

    /// The call yielded: its meter starts again at the first tick after it resumes.
    fn stop(&self) {
        self.lock().cpu = None;
    }
}

/// The CPU time the calling thread has used.
fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

/// Whether `s` is a stable code: 1 to 64 bytes of lowercase ASCII letters, digits and single
/// hyphens, starting with a letter (attestor ids and refusal reasons).
pub(crate) fn is_code(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && b[0].is_ascii_lowercase()
        && !b.ends_with(b"-")
        && !s.contains("--")
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

/// A binding kind: a code (`tpm-ek`), or `<attestor-id>:<code>` for an attestor's own kinds
/// (which JoinService's policy then checks the attestor owns).
fn is_binding_kind(s: &str) -> bool {
    match s.split_once(':') {
        Some((owner, kind)) => is_code(owner) && is_code(kind),
        None => is_code(s),
    }
}

/// An id-like string from a guest: 1 to 128 bytes of ASCII graphic characters.
fn is_id(s: &str) -> bool {
    !s.is_empty() && s.len() <= 128 && s.bytes().all(|c| c.is_ascii_graphic())
}

fn check_id(what: &str, v: &Option<String>) -> Result<(), String> {
    match v {
        Some(s) if !is_id(s) => Err(format!("{what} is not an id")),
        _ => Ok(()),
    }
}

/// The ABI's rules for an outcome, beyond what the types say.
fn validate(outcome: &Outcome) -> Result<(), String> {
    match outcome {
        Outcome::Refused(r) => {
            if !is_code(&r.reason) {
                return Err(format!(
                    "refusal reason {:?} is not a code",
                    truncate(&r.reason)
                ));
            }
            check_id("token-id", &r.token_id)?;
            check_id("node-id", &r.node_id)?;
            check_id("tenant-id", &r.tenant_id)
        }
        Outcome::Deferred(Deferral::Approval(a)) => {
            if !is_id(&a.request_id) {
                return Err("approval request-id is not an id".into());
            }
            Ok(())
        }
        Outcome::Deferred(Deferral::Challenge(c)) => {
            if c.payload.is_empty() || c.payload.len() > 64 * 1024 {
                return Err("challenge payload must be 1 byte to 64 KiB".into());
            }
            Ok(())
        }
        Outcome::Admitted(a) => validate_result(a),
    }
}

fn validate_result(a: &AttestationResult) -> Result<(), String> {
    check_id("node-id", &a.node_id)?;
    check_id("tenant-id", &a.tenant_id)?;
    check_id("pool-id", &a.pool_id)?;
    check_id("site-id", &a.site_id)?;
    check_id("token-id", &a.token_id)?;
    if a.bindings.len() > 8 {
        return Err("more than 8 bindings".into());
    }
    for b in &a.bindings {
        if !is_binding_kind(&b.kind) || !is_id(&b.value) {
            return Err("a binding is not a kind and an id".into());
        }
    }
    if let Some(uri) = &a.node_key_uri
        && (uri.len() > 512 || !uri.is_ascii())
    {
        return Err("node-key-uri is too long or not ASCII".into());
    }
    if let Some(kinds) = &a.allowed_kinds
        && (kinds.len() > 64
            || kinds
                .iter()
                .any(|k| k.is_empty() || k.len() > 64 || !k.is_ascii()))
    {
        return Err("allowed-kinds must be at most 64 ASCII kinds".into());
    }
    if a.subject.as_ref().is_some_and(|s| s.len() > 512) {
        return Err("subject longer than 512 bytes".into());
    }
    Ok(())
}

fn truncate(s: &str) -> String {
    s.chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes() {
        for ok in ["join-token", "no-uses-left", "x509pop", "a"] {
            assert!(is_code(ok), "{ok}");
        }
        for bad in [
            "",
            "Not A Code",
            "-a",
            "a-",
            "a--b",
            "1abc",
            &"a".repeat(65),
            "a_b",
        ] {
            assert!(!is_code(bad), "{bad}");
        }
    }

    #[test]
    fn binding_kinds_are_codes_or_namespaced_codes() {
        for ok in ["tpm-ek", "mine:serial", "foreign-binding-kind:serial"] {
            assert!(is_binding_kind(ok), "{ok}");
        }
        for bad in [
            "",
            ":",
            "mine:",
            ":serial",
            "a:b:c",
            "Mine:serial",
            "mine:Serial",
        ] {
            assert!(!is_binding_kind(bad), "{bad}");
        }
    }

    /// One epoch tick of a made-up call, its times from the call's start: when it comes, the
    /// call's time in host imports by then, when the call resumed (if it did since the last
    /// tick), the CPU used since its meter started (`None`: the meter starts here), and what
    /// the clock must say: the tick, and the guest time it counts after it.
    type Step = (
        Duration,
        Duration,
        Option<Duration>,
        Option<Duration>,
        Tick,
        Duration,
    );

    /// Runs `steps` through a clock with a 250 ms deadline.
    fn step_through(steps: impl IntoIterator<Item = Step>) {
        let t0 = Instant::now();
        let mut clock = GuestClock::new(t0, Duration::from_millis(250));
        for (step, (at, host, resumed, cpu, tick, guest)) in steps.into_iter().enumerate() {
            let resumed = resumed.map(|r| t0 + r);
            assert_eq!(clock.tick(t0 + at, host, resumed, cpu), tick, "step {step}");
            assert_eq!(clock.guest(t0 + at, host), guest, "step {step}");
        }
    }

    #[test]
    fn the_deadline_counts_guest_time_only() {
        let ms = Duration::from_millis;
        step_through([
            // The guest crosses a tick (its meter starts), spins 2 ms of CPU and yields, waits
            // 1 s for its thread, runs 2 ms: the wait is not charged.
            (ms(1), ms(0), Some(ms(0)), None, Tick::Running, ms(1)),
            (ms(3), ms(0), None, Some(ms(2)), Tick::Yield, ms(3)),
            (ms(1005), ms(0), Some(ms(1003)), None, Tick::Resumed, ms(5)),
            // It runs 2 ms more, yields; 600 ms in host imports is not charged either.
            (ms(1007), ms(0), None, Some(ms(2)), Tick::Yield, ms(7)),
            (
                ms(1609),
                ms(600),
                Some(ms(1007)),
                None,
                Tick::Resumed,
                ms(9),
            ),
            // Spinning on with no wait, it expires once 250 ms of its own have passed.
            (ms(1611), ms(600), None, Some(ms(2)), Tick::Yield, ms(11)),
            (
                ms(1613),
                ms(600),
                Some(ms(1611)),
                None,
                Tick::Resumed,
                ms(13),
            ),
            (ms(1849), ms(600), None, Some(ms(236)), Tick::Yield, ms(249)),
            // The tick that resumes it finds its 250 ms spent: it expires there.
            (
                ms(1851),
                ms(600),
                Some(ms(1849)),
                None,
                Tick::Expired,
                ms(251),
            ),
        ]);
    }

    #[test]
    fn only_a_call_that_kept_the_cpu_yields() {
        let (ms, us) = (Duration::from_millis, Duration::from_micros);
        step_through([
            // The first tick a call crosses starts its meter and lets it run on, though 3 ms
            // of wall time passed without a host import: its thread was preempted.
            (ms(3), ms(0), Some(ms(0)), None, Tick::Running, ms(3)),
            // Preempted across another tick, having used 30 µs of CPU since: it runs on.
            (ms(8), ms(0), None, Some(us(30)), Tick::Running, ms(8)),
            // A tick while it awaited the database: it runs on.
            (ms(12), ms(4), None, Some(us(40)), Tick::Running, ms(8)),
            // Once it has kept the CPU for half a tick since its meter started, it yields.
            (ms(14), ms(4), None, Some(ms(1)), Tick::Yield, ms(10)),
            // Resumed at once, it runs on until it has used half a tick again.
            (
                ms(14) + us(10),
                ms(4),
                Some(ms(14)),
                None,
                Tick::Resumed,
                ms(10) + us(10),
            ),
            (ms(15), ms(4), None, Some(us(900)), Tick::Running, ms(11)),
            (ms(16), ms(4), None, Some(us(1_900)), Tick::Yield, ms(12)),
        ]);
    }

    #[test]
    fn a_guest_spinning_alone_expires_at_its_deadline_not_later() {
        // Uncontended, each resume is immediate: every tick of running counts, the ticks
        // after a resume included.
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        let mut clock = GuestClock::new(t0, ms(250));
        let mut now = t0;
        let mut metered = false;
        loop {
            let yielded = now;
            now += ms(2);
            let cpu = std::mem::replace(&mut metered, true).then_some(ms(2));
            match clock.tick(now, ms(0), Some(yielded), cpu) {
                Tick::Expired => break,
                Tick::Yield => metered = false,
                Tick::Resumed | Tick::Running => {}
            }
            assert!(now - t0 < ms(300), "still running at {:?}", now - t0);
        }
        assert_eq!(now - t0, ms(250));
    }

    /// Spins until the calling thread has used `cpu` more of the CPU.
    fn spin(cpu: Duration) {
        let from = thread_cpu();
        while thread_cpu() - from < cpu {
            std::hint::spin_loop();
        }
    }

    #[test]
    fn the_meter_counts_the_polls_cpu_not_the_time_off_it() {
        let ms = Duration::from_millis;
        let meter = CallMeter::default();
        meter.poll_begins(Instant::now());
        // Not metered until a tick starts it.
        assert_eq!(meter.at_tick().1, None);
        // Off the CPU (as a preempted thread is) for 30 ms: not counted.
        std::thread::sleep(ms(30));
        let (_, slept) = meter.at_tick();
        assert!(slept.unwrap() < ms(5), "{slept:?}");
        spin(ms(3));
        let (_, spun) = meter.at_tick();
        assert!(spun.unwrap() >= ms(3), "{spun:?}");
        meter.poll_ends();
        // Between polls the thread's other work is not the call's; the next poll, on another
        // thread, adds to what the earlier ones used.
        spin(ms(20));
        let on = meter.clone();
        let used = std::thread::spawn(move || {
            on.poll_begins(Instant::now());
            spin(ms(2));
            let (_, used) = on.at_tick();
            on.poll_ends();
            used
        })
        .join()
        .unwrap()
        .unwrap();
        assert!(used >= ms(5) && used < ms(15), "{used:?}");
        // A yield stops it; the first tick after the resume starts it again.
        meter.stop();
        meter.poll_begins(Instant::now());
        assert_eq!(meter.at_tick().1, None);
    }

    #[test]
    fn the_meter_keeps_the_first_poll_after_a_yield() {
        let t0 = Instant::now();
        let meter = CallMeter::default();
        meter.poll_begins(t0);
        meter.poll_ends();
        meter.poll_begins(t0 + Duration::from_millis(5));
        assert_eq!(meter.at_tick().0, Some(t0));
        assert_eq!(meter.at_tick().0, None);
    }

    #[test]
    fn fault_display() {
        assert_eq!(
            Fault::Malformed("x".into()).to_string(),
            "the attestor returned a malformed outcome: x"
        );
    }
}
