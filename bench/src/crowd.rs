//! The benchmark's agents at work: each does one item of work untimed, all wait for each
//! other, then each takes items off one shared queue until it is empty, every item timed. The
//! joins and the renewals both run so: the figures are the steady state of agents already
//! started (their first TLS handshakes, the host's first use of each instance slot and
//! database page left out), as issue 14's targets are stated.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::FutureExt as _;
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

/// Agents past their warm-up, working through the queue: [`Warmed::finish`] starts the clock.
pub(super) struct Warmed<O> {
    tasks: Vec<JoinHandle<anyhow::Result<Vec<Timed<O>>>>>,
}

/// One item an agent did in the timed window: how long it took, and its output.
type Timed<O> = (Duration, O);

/// What the agents did in the timed window.
pub(super) struct Crowd<O> {
    /// From [`Warmed::finish`] until the last agent ended (at least a millisecond).
    pub elapsed: Duration,
    /// Each timed item's latency, shortest first.
    pub latencies: Vec<Duration>,
    /// Each timed item's output, in no particular order.
    pub outputs: Vec<O>,
}

/// Starts one agent on `on` for each item of `warm_up`, and returns once each has done its own
/// untimed. Each then takes items of `queue` and does them with `work`, timing each. Every
/// agent waits for the others whatever its warm-up did, so the run never hangs on one that
/// failed or panicked; a failure of any item fails the run ([`Warmed::finish`]).
pub(super) async fn warm_up<T, O, F>(
    on: &Handle,
    warm_up: Vec<T>,
    queue: Vec<T>,
    work: impl Fn(T) -> F + Clone + Send + 'static,
) -> Warmed<O>
where
    T: Send + 'static,
    O: Send + 'static,
    F: Future<Output = anyhow::Result<O>> + Send + 'static,
{
    let queue = Arc::new(Mutex::new(queue));
    let warmed = Arc::new(tokio::sync::Barrier::new(warm_up.len() + 1));
    let mut tasks = Vec::with_capacity(warm_up.len());
    for first in warm_up {
        let (queue, warmed, work) = (queue.clone(), warmed.clone(), work.clone());
        tasks.push(on.spawn(async move {
            let ready = AssertUnwindSafe(work(first)).catch_unwind().await;
            warmed.wait().await;
            ready.map_err(|_| anyhow::anyhow!("an agent's warm-up panicked"))??;
            let mut done = Vec::new();
            loop {
                let Some(item) = queue.lock().ok().and_then(|mut q| q.pop()) else {
                    return Ok(done);
                };
                let began = Instant::now();
                let output = work(item).await?;
                done.push((began.elapsed(), output));
            }
        }));
    }
    warmed.wait().await;
    Warmed { tasks }
}

impl<O> Warmed<O> {
    /// Starts the clock and waits for every agent to end.
    pub(super) async fn finish(self) -> anyhow::Result<Crowd<O>> {
        let started = Instant::now();
        let mut ended = Vec::with_capacity(self.tasks.len());
        for task in self.tasks {
            ended.push(task.await);
        }
        let elapsed = started.elapsed().max(Duration::from_millis(1));
        let (mut latencies, mut outputs) = (Vec::new(), Vec::new());
        for result in ended {
            for (took, output) in result.context("an agent's task panicked")?? {
                latencies.push(took);
                outputs.push(output);
            }
        }
        latencies.sort();
        Ok(Crowd {
            elapsed,
            latencies,
            outputs,
        })
    }
}

impl<O> Crowd<O> {
    /// The `q` quantile of the latencies; zero for none.
    pub(super) fn latency(&self, q: f64) -> Duration {
        let sorted = &self.latencies;
        let at = ((sorted.len() as f64 * q) as usize).min(sorted.len().saturating_sub(1));
        sorted.get(at).copied().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Items 0 and 1 panic and fail; any other is its own output.
    async fn work(item: u32) -> anyhow::Result<u32> {
        match item {
            0 => panic!("a warm-up panicked"),
            1 => anyhow::bail!("item 1 failed"),
            other => Ok(other),
        }
    }

    /// Every queued item is done once and timed; a warm-up that panics or fails fails the run
    /// once every agent ended, rather than leave the others waiting for it.
    #[tokio::test]
    async fn every_item_is_done_once_and_a_failed_warm_up_fails_the_run() -> anyhow::Result<()> {
        let on = Handle::current();
        let crowd = warm_up(&on, vec![7, 8], (10..40).collect(), work)
            .await
            .finish()
            .await?;
        let mut outputs = crowd.outputs.clone();
        outputs.sort();
        anyhow::ensure!(outputs == (10..40).collect::<Vec<_>>(), "{outputs:?}");
        anyhow::ensure!(crowd.latencies.len() == 30 && crowd.latency(0.99) >= crowd.latency(0.5));

        for (first, says) in [(0, "panicked"), (1, "item 1 failed")] {
            let error = warm_up(&on, vec![first, 7], (10..20).collect(), work)
                .await
                .finish()
                .await
                .err()
                .context("a run with a failed warm-up succeeded")?;
            anyhow::ensure!(format!("{error:#}").contains(says), "{error:#}");
        }
        Ok(())
    }
}
