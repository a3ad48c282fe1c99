//! Spends of one token queue in the host, not on the token's row in PostgreSQL.
//!
//! A many-use token's uses are one row, and PostgreSQL holds a spend's row lock from its
//! `UPDATE` to its commit (the token join's whole write is one statement, `store::admission`).
//! So the spends of one token run one at a time whatever the write pool's size, and the others
//! wait in the server: with 64 agents on one token and a pool of 10, up to 10 backends sleep on
//! the row, and each one woken re-checks the row it finds, then sleeps on the next holder's
//! transaction again. On a server sharing the host's cores that waiting cost a third more of
//! the server's CPU a join than on distinct tokens, and a write pool of 4 took part of it back
//! (`docs/benchmarks.md`, "PostgreSQL's write pool"), at the price of capping every other join.
//!
//! [`SpendGate`] caps the spends of one token in flight at once instead: a join takes a pass for
//! the token it would spend before it leases a write connection, and holds it until its locked
//! phase ends. Two passes a token keep one spend running and the next one waiting on the row,
//! ready the moment the first commits (a single pass would add a round trip to the host between
//! two spends); the rest wait here, in order, holding no connection. Joins on other tokens never
//! wait for a pass. SQLite needs none: its one writer already takes transactions in turn, in the
//! host. Measured with 1, 2 and 3 passes against none, on 64 agents sharing a token at the
//! default pool: two halved the server's CPU a join and did best on rate and p99; one left the
//! server as idle but the rate lower (`docs/benchmarks.md`, "A token's spends queue in the
//! host").
//!
//! The token is the request's own, opened by the request's secret, and the one token its
//! attestor spent (`super::policy::token_to_spend`). Any other round is refused without a spend,
//! so it takes no pass: neither an attestor nor a request without the secret can put a join in
//! another token's queue.
//!
//! The gate is per process; each replica of a deployment keeps its own, so a token shared by
//! replicas has at most that many spends waiting on its row per replica.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Spends of one token that may be in flight at once (see the module documentation).
pub(super) const PASSES_PER_TOKEN: usize = 2;

/// A token's queue: its semaphore and how many joins hold or wait for a pass of it.
#[derive(Debug)]
struct Queue {
    passes: Arc<Semaphore>,
    joins: usize,
}

type Queues = Arc<Mutex<HashMap<String, Queue>>>;

/// Each token's queue of spends, while one is in flight or waiting.
#[derive(Debug)]
pub(super) struct SpendGate {
    passes: usize,
    /// A token's queue while a join holds or waits for a pass of it; removed by the last join
    /// out, so the map holds only the tokens being spent now.
    queues: Queues,
}

/// Leave to spend one token, until dropped.
#[derive(Debug)]
pub(super) struct Pass {
    token: String,
    permit: Option<OwnedSemaphorePermit>,
    queues: Queues,
}

impl SpendGate {
    /// A gate letting `passes` spends of one token through at once (at least one).
    pub(super) fn new(passes: usize) -> Self {
        Self {
            passes: passes.max(1),
            queues: Arc::default(),
        }
    }

    /// Waits for a pass to spend `token`, in the order the joins asked.
    pub(super) async fn enter(&self, token: &str) -> Pass {
        let (mut pass, semaphore) = {
            let mut queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
            let queue = queues.entry(token.to_owned()).or_insert_with(|| Queue {
                passes: Arc::new(Semaphore::new(self.passes)),
                joins: 0,
            });
            queue.joins += 1;
            // Counted and made under the lock: a join cancelled while it waits (its client
            // hung up) drops its pass, which counts it out again.
            let pass = Pass {
                token: token.to_owned(),
                permit: None,
                queues: self.queues.clone(),
            };
            (pass, queue.passes.clone())
        };
        // Never closed, so the permit always comes.
        pass.permit = semaphore.acquire_owned().await.ok();
        pass
    }

    /// Tokens with a pass held or waited for now.
    #[cfg(test)]
    fn tokens_in_flight(&self) -> usize {
        self.queues
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        drop(self.permit.take());
        let mut queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(queue) = queues.get_mut(&self.token) {
            queue.joins = queue.joins.saturating_sub(1);
            if queue.joins == 0 {
                queues.remove(&self.token);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Not yet through after a moment: it waits.
    async fn waits<F: std::future::Future>(f: F) -> bool {
        tokio::time::timeout(Duration::from_millis(50), f)
            .await
            .is_err()
    }

    #[tokio::test]
    async fn a_third_spend_of_one_token_waits_until_a_pass_comes_back() {
        let gate = SpendGate::new(2);
        let first = gate.enter("tok_a").await;
        let _second = gate.enter("tok_a").await;
        assert!(waits(gate.enter("tok_a")).await);
        // Another token is not held up by this one's queue.
        let _other = gate.enter("tok_b").await;
        drop(first);
        tokio::time::timeout(Duration::from_secs(5), gate.enter("tok_a"))
            .await
            .expect("a pass came back");
    }

    #[tokio::test]
    async fn the_map_holds_only_tokens_in_flight() {
        let gate = SpendGate::new(1);
        let a = gate.enter("tok_a").await;
        let b = gate.enter("tok_b").await;
        assert_eq!(gate.tokens_in_flight(), 2);
        // A join cancelled while it waits leaves nothing behind once the holder is done.
        assert!(waits(gate.enter("tok_a")).await);
        assert_eq!(gate.tokens_in_flight(), 2);
        drop(a);
        drop(b);
        assert_eq!(gate.tokens_in_flight(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_joins_on_one_token_all_get_through_at_most_two_at_once() {
        let gate = Arc::new(SpendGate::new(2));
        let inside = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut joins = tokio::task::JoinSet::new();
        for _ in 0..64 {
            let (gate, inside, most) = (gate.clone(), inside.clone(), most.clone());
            joins.spawn(async move {
                let pass = gate.enter("tok_a").await;
                let now = inside.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                most.fetch_max(now, std::sync::atomic::Ordering::SeqCst);
                tokio::task::yield_now().await;
                inside.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                drop(pass);
            });
        }
        tokio::time::timeout(Duration::from_secs(10), async {
            while let Some(joined) = joins.join_next().await {
                joined.expect("a join panicked");
            }
        })
        .await
        .expect("every join got through");
        assert!((1..=2).contains(&most.load(std::sync::atomic::Ordering::SeqCst)));
        assert_eq!(gate.tokens_in_flight(), 0);
    }
}
