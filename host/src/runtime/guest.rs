//! Where an attestor call's guest code runs: on the thread of the join that made the call while
//! the call is quick, and on its attestor's own thread once it has run a whole epoch tick.
//!
//! An honest call is tens of microseconds of guest code. Handing every call to the attestor's
//! thread and its result back cost two thread wake-ups, about as much again as the call itself
//! (issue 14). Running every call on the host's threads instead let hostile guests take the
//! host's cores by turns (rule 13's ratios were 1.9× to 11×). So a call starts where its join
//! runs, and the first time its epoch callback yields (the guest kept the CPU for a tick, by
//! the polling threads' CPU clocks: it is not a quick call) it moves, as it stands, to its
//! attestor's thread and ends there. A call costs the host's threads about two ticks of CPU at
//! most (`super::call::CallMeter`), and an attestor whose calls keep the CPU on its own thread
//! too, or fail, has its calls start there for a while ([`DEMOTION`]), so a hostile one gets no
//! more than that of the host's threads now and then, not on every call. One move alone does
//! not demote: a thread's CPU clock also counts kernel work the thread ran for others (this
//! project's VM counts interrupts' and softirqs' time to whatever thread they interrupted), so
//! an honest call may now and then be charged a tick it did not use; it then ends on its
//! attestor's thread without yielding again, and costs that one call a hand-off, not every call
//! of the next [`DEMOTION`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::runtime::Handle;

use super::RuntimeError;

/// The thread one attestor's calls move to once they have run a whole epoch tick: a runtime of
/// its own with one worker, so the operating system's scheduler shares the cores between
/// attestors (and with the host's own threads: TLS, the database, policy, signing) rather than
/// between calls. A looping or memory-hungry attestor, however many of its calls are in flight,
/// then takes at most one thread's share of the CPU (and one tick of a host thread per call),
/// and the calls of every other attestor never queue behind its turns (each call yields every
/// epoch tick, to the other calls of its own attestor).
pub(super) struct GuestThread {
    runtime: Option<tokio::runtime::Runtime>,
    demotion: Demotion,
}

/// Until when an attestor's calls start on its thread; shared with its calls there, which
/// demote it when they yield again.
#[derive(Clone)]
struct Demotion {
    /// When the thread started: the origin of `until`.
    born: Instant,
    /// Milliseconds after `born`.
    until: Arc<AtomicU64>,
}

impl Demotion {
    fn demote(&self) {
        let until = self.since_born() + DEMOTION.as_millis() as u64;
        self.until.fetch_max(until, Ordering::Relaxed);
    }

    fn active(&self) -> bool {
        self.since_born() < self.until.load(Ordering::Relaxed)
    }

    fn since_born(&self) -> u64 {
        u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// How long an attestor's calls start on its own thread after one of them kept the CPU there
/// too (it moved, and yielded again), or failed. Honest calls do neither, so never pay for the
/// hand-off but in the rare call that moves alone.
const DEMOTION: Duration = Duration::from_secs(1);

/// Raised by a call's epoch callback when it yields: the guest kept the CPU for a tick.
#[derive(Clone, Default)]
pub(super) struct TickYield(Arc<AtomicBool>);

impl TickYield {
    pub(super) fn raise(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    fn take(&self) -> bool {
        self.0.swap(false, Ordering::Relaxed)
    }
}

/// How a call ran.
pub(super) struct Ran<T> {
    pub output: T,
    /// From the call's hand-off to the attestor's thread until that thread first ran it; zero
    /// for a call that ended where it started.
    pub queued: Duration,
    /// It ran on the attestor's thread (it moved there, or started there while demoted).
    pub on_own_thread: bool,
}

type BoxedCall<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl GuestThread {
    pub(super) fn start(attestor: &str) -> Result<Self, RuntimeError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            // Linux keeps 15 bytes of a thread's name.
            .thread_name(format!("gh-{attestor}"))
            .enable_all()
            .build()
            .map_err(RuntimeError::Threads)?;
        Ok(Self {
            runtime: Some(runtime),
            demotion: Demotion {
                born: Instant::now(),
                until: Arc::new(AtomicU64::new(0)),
            },
        })
    }

    /// Calls start on this thread for the next [`DEMOTION`]: one of them failed (trapped,
    /// timed out, ran out of memory, broke the ABI's rules). One that keeps the CPU on this
    /// thread demotes it too ([`OnOwnThread`]).
    pub(super) fn demote(&self) {
        self.demotion.demote();
    }

    fn demoted(&self) -> bool {
        self.demotion.active()
    }

    /// Runs `call` on the caller's thread until it ends or `yielded` is raised, then on this
    /// thread to its end (and on this thread from its start while [`Self::demote`]d). The call
    /// runs to its end even if the caller stops waiting for it: what it holds (its call share
    /// and instance slot) is held until then, and its deadline bounds it. `Err` only if its
    /// task on this thread panicked or was cancelled.
    pub(super) async fn run<T: Send + 'static>(
        &self,
        call: impl Future<Output = T> + Send + 'static,
        yielded: TickYield,
    ) -> Result<Ran<T>, tokio::task::JoinError> {
        if self.demoted() {
            return self.spawn_timed(Box::pin(call), yielded).await;
        }
        let mut here = Here {
            call: Some(Box::pin(call)),
            yielded: yielded.clone(),
            thread: self.handle(),
        };
        let call = match (&mut here).await {
            Step::Ended(output) => {
                return Ok(Ran {
                    output,
                    queued: Duration::ZERO,
                    on_own_thread: false,
                });
            }
            Step::Move(call) => call,
        };
        self.spawn_timed(call, yielded).await
    }

    /// Runs `call` on this thread, timing its wait for the thread; if it yields here too, its
    /// attestor is demoted.
    async fn spawn_timed<T: Send + 'static>(
        &self,
        call: BoxedCall<T>,
        yielded: TickYield,
    ) -> Result<Ran<T>, tokio::task::JoinError> {
        let handed = Instant::now();
        let call = OnOwnThread {
            call,
            yielded,
            demotion: self.demotion.clone(),
        };
        self.spawn(async move {
            let queued = handed.elapsed();
            Ran {
                output: call.await,
                queued,
                on_own_thread: true,
            }
        })
        .await
    }

    fn handle(&self) -> Option<Handle> {
        self.runtime
            .as_ref()
            .map(|runtime| runtime.handle().clone())
    }

    fn spawn<F>(&self, call: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match &self.runtime {
            Some(runtime) => runtime.spawn(call),
            // Only between `drop` taking the runtime and the end of `drop`.
            None => tokio::spawn(call),
        }
    }
}

impl Drop for GuestThread {
    fn drop(&mut self) {
        // Dropped from async code when the host shuts down: never block there.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// A call on its attestor's thread: each time it yields at a tick there (it kept the CPU for
/// another tick, on this thread's clock too), its attestor is demoted.
struct OnOwnThread<T> {
    call: BoxedCall<T>,
    yielded: TickYield,
    demotion: Demotion,
}

impl<T> Future for OnOwnThread<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let this = &mut *self;
        let polled = this.call.as_mut().poll(cx);
        if polled.is_pending() && this.yielded.take() {
            this.demotion.demote();
        }
        polled
    }
}

/// A call being polled on its caller's thread.
struct Here<T: Send + 'static> {
    /// None once it ended or moved.
    call: Option<BoxedCall<T>>,
    yielded: TickYield,
    /// Where the call goes if its caller stops waiting for it before it ends.
    thread: Option<Handle>,
}

enum Step<T> {
    Ended(T),
    /// It yielded at an epoch tick: move it.
    Move(BoxedCall<T>),
}

impl<T: Send + 'static> Future for Here<T> {
    type Output = Step<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Step<T>> {
        let this = &mut *self;
        let Some(mut call) = this.call.take() else {
            // Not polled again after it was ready; nothing left to run.
            return Poll::Pending;
        };
        match call.as_mut().poll(cx) {
            Poll::Ready(output) => Poll::Ready(Step::Ended(output)),
            // Pending because the guest yielded (not because a host import awaits the
            // database): it kept the CPU for a tick here; its next poll is on the attestor's
            // thread.
            Poll::Pending if this.yielded.take() => Poll::Ready(Step::Move(call)),
            Poll::Pending => {
                this.call = Some(call);
                Poll::Pending
            }
        }
    }
}

impl<T: Send + 'static> Drop for Here<T> {
    fn drop(&mut self) {
        // The join stopped waiting mid-call: the call still runs to its end, as one that had
        // moved would. With no thread left (the host is shutting down) it is dropped.
        if let (Some(call), Some(thread)) = (self.call.take(), &self.thread) {
            drop(thread.spawn(call));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A call that yields at "ticks" `ticks` times, then ends, noting the threads it ran on.
    struct Ticking {
        ticks: usize,
        yielded: TickYield,
        threads: Arc<std::sync::Mutex<Vec<String>>>,
    }

    impl Future for Ticking {
        type Output = usize;

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<usize> {
            let name = std::thread::current().name().unwrap_or("").to_owned();
            self.threads.lock().unwrap().push(name);
            if self.ticks == 0 {
                return Poll::Ready(7);
            }
            self.ticks -= 1;
            self.yielded.raise();
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    /// Runs a call that yields at `ticks` ticks through `guests`: how it ran, and the threads
    /// it was polled on.
    async fn run_ticking(guests: &GuestThread, ticks: usize) -> (Ran<usize>, Vec<String>) {
        let yielded = TickYield::default();
        let threads = Arc::<std::sync::Mutex<Vec<String>>>::default();
        let call = Ticking {
            ticks,
            yielded: yielded.clone(),
            threads: Arc::clone(&threads),
        };
        let ran = guests.run(call, yielded).await.unwrap();
        let threads = threads.lock().unwrap().clone();
        (ran, threads)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_quick_call_ends_on_its_callers_thread() {
        let guests = GuestThread::start("quick").unwrap();
        let (ran, threads) = run_ticking(&guests, 0).await;
        assert_eq!(ran.output, 7);
        assert_eq!(ran.queued, Duration::ZERO);
        assert!(!ran.on_own_thread);
        assert!(threads.iter().all(|t| t != "gh-quick"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_call_that_yields_at_a_tick_moves_and_ends_on_the_attestors_thread() {
        let guests = GuestThread::start("slow").unwrap();
        let (ran, threads) = run_ticking(&guests, 3).await;
        assert_eq!(ran.output, 7);
        assert!(ran.on_own_thread);
        // One poll here (the first tick), every later one on the attestor's thread.
        assert_eq!(threads.len(), 4);
        assert_ne!(threads[0], "gh-slow");
        assert!(threads[1..].iter().all(|t| t == "gh-slow"), "{threads:?}");

        // The attestor is demoted: its next call, quick as it is, starts on its thread.
        let (ran, threads) = run_ticking(&guests, 0).await;
        assert_eq!(threads, ["gh-slow"]);
        assert!(ran.on_own_thread);
    }

    /// A call charged a tick once (a thread's CPU clock counts kernel work it ran for others)
    /// moves, and ends on the attestor's thread without yielding there: the attestor's next
    /// calls start where their joins run.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn one_move_alone_does_not_demote_the_attestor() {
        let guests = GuestThread::start("once").unwrap();
        let (ran, threads) = run_ticking(&guests, 1).await;
        assert!(ran.on_own_thread);
        assert_eq!(threads.last().map(String::as_str), Some("gh-once"));
        assert!(!guests.demoted());
        let (ran, threads) = run_ticking(&guests, 0).await;
        assert!(!ran.on_own_thread);
        assert!(threads.iter().all(|t| t != "gh-once"), "{threads:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_demoted_attestors_calls_start_on_its_thread_for_a_while() {
        let guests = GuestThread::start("failed").unwrap();
        assert!(!guests.demoted());
        guests.demote();
        assert!(guests.demoted());
        assert_eq!(run_ticking(&guests, 0).await.1, ["gh-failed"]);
        // Its demotion ends.
        guests.demotion.until.store(0, Ordering::Relaxed);
        assert_ne!(run_ticking(&guests, 0).await.1, ["gh-failed"]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_call_its_join_abandons_still_runs_to_its_end() {
        let guests = GuestThread::start("abandoned").unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let (ended_tx, ended_rx) = tokio::sync::oneshot::channel();
        // Waits on `rx` (pending, not a tick), then reports that it ended.
        let call = async move {
            let _ = rx.await;
            let _ = ended_tx.send(std::thread::current().name().map(str::to_owned));
        };
        let run = guests.run(call, TickYield::default());
        // Abandon the join while the call waits.
        assert!(
            tokio::time::timeout(Duration::from_millis(20), run)
                .await
                .is_err()
        );
        tx.send(()).unwrap();
        let thread = ended_rx.await.expect("the abandoned call was dropped");
        assert_eq!(thread.as_deref(), Some("gh-abandoned"));
    }
}
