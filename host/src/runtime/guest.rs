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
//! most (`super::call::CallMeter`), and an attestor whose calls move or fail has its calls
//! start on its own thread for a while ([`DEMOTION`]), so a hostile one gets no more than that
//! of the host's threads now and then, not on every call.

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
    /// When the thread started: the origin of `demoted_until`.
    born: Instant,
    /// Until when (milliseconds after `born`) calls start on this thread.
    demoted_until: AtomicU64,
}

/// How long an attestor's calls start on its own thread after one of them moved there or
/// failed. Honest calls neither move nor fail, so never pay for the hand-off.
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
            born: Instant::now(),
            demoted_until: AtomicU64::new(0),
        })
    }

    /// Calls start on this thread for the next [`DEMOTION`]: one of them kept the CPU for a
    /// tick, or failed (trapped, timed out, ran out of memory, broke the ABI's rules).
    pub(super) fn demote(&self) {
        let until = self.since_born() + DEMOTION.as_millis() as u64;
        self.demoted_until.fetch_max(until, Ordering::Relaxed);
    }

    fn demoted(&self) -> bool {
        self.since_born() < self.demoted_until.load(Ordering::Relaxed)
    }

    fn since_born(&self) -> u64 {
        u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX)
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
            return self.spawn_timed(Box::pin(call)).await;
        }
        let mut here = Here {
            call: Some(Box::pin(call)),
            yielded,
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
        self.demote();
        self.spawn_timed(call).await
    }

    /// Runs `call` on this thread, timing its wait for the thread.
    async fn spawn_timed<T: Send + 'static>(
        &self,
        call: BoxedCall<T>,
    ) -> Result<Ran<T>, tokio::task::JoinError> {
        let handed = Instant::now();
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

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_demoted_attestors_calls_start_on_its_thread_for_a_while() {
        let guests = GuestThread::start("failed").unwrap();
        assert!(!guests.demoted());
        guests.demote();
        assert!(guests.demoted());
        assert_eq!(run_ticking(&guests, 0).await.1, ["gh-failed"]);
        // Its demotion ends.
        guests.demoted_until.store(0, Ordering::Relaxed);
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
