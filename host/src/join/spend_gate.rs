//! Spends of one token queue in the host, not on the token's row in PostgreSQL.
//!
//! A many-use token's uses are one row, and PostgreSQL holds a spend's row lock from its
//! `UPDATE` to its commit (the token join's whole write is one statement, `store::admission`).
//! So the spends of one token run one at a time whatever the write pool's size, and the others
//! wait in the server: with 64 agents on one token and a pool of 10, up to 10 backends sleep on
//! the row, and each one woken re-checks the row it finds, then sleeps on the next holder's
//! transaction again. On a server sharing the host's cores that waiting cost a third more of
//! the server's CPU a join than on distinct tokens, and a write pool of 4 took most of it back
//! (`docs/benchmarks.md`, "PostgreSQL's write pool"), at the price of capping every other join.
//!
//! [`SpendGate`] caps the spends of one token in flight at once instead: a join takes a pass for
//! each token its attestor spent before it leases a write connection, and holds it until its
//! locked phase ends. Two passes a token keep one spend running and the next one waiting on the
//! row, ready the moment the first commits (a single pass would add a round trip to the host
//! between two spends); the rest wait here, in order, holding no connection. Joins on other
//! tokens never wait for a pass. SQLite needs none: its one writer already takes transactions in
//! turn, in the host. Measured with 1, 2 and 3 passes against none, on 64 agents sharing a token
//! at the default pool: two halved the server's CPU a join and did best on rate and p99; one
//! left the server as idle but the rate lower (`docs/benchmarks.md`, "A token's spends queue in
//! the host").
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

    /// Waits for a pass of each of `tokens`, in sorted order (so two joins spending the same
    /// two tokens cannot each hold one and wait for the other), once each however often a
    /// token is named.
    pub(super) async fn enter(&self, tokens: &[String]) -> Vec<Pass> {
        let mut ids: Vec<&String> = tokens.iter().collect();
        ids.sort_unstable();
        ids.dedup();
        let mut passes = Vec::with_capacity(ids.len());
        for id in ids {
            passes.push(self.pass(id).await);
        }
        passes
    }

    async fn pass(&self, token: &str) -> Pass {
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

    fn ids(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    /// Not yet through after a moment: it waits.
    async fn waits<F: std::future::Future>(f: F) -> bool {
        tokio::time::timeout(Duration::from_millis(50), f)
            .await
            .is_err()
    }

    #[tokio::test]
    async fn a_third_spend_of_one_token_waits_until_a_pass_comes_back() {
        let gate = SpendGate::new(2);
        let first = gate.enter(&ids(&["tok_a"])).await;
        let _second = gate.enter(&ids(&["tok_a"])).await;
        assert!(waits(gate.enter(&ids(&["tok_a"]))).await);
        // Another token is not held up by this one's queue.
        let other = gate.enter(&ids(&["tok_b"])).await;
        assert_eq!(other.len(), 1);
        drop(first);
        let third = tokio::time::timeout(Duration::from_secs(5), gate.enter(&ids(&["tok_a"])))
            .await
            .expect("a pass came back");
        assert_eq!(third.len(), 1);
    }

    #[tokio::test]
    async fn the_map_holds_only_tokens_in_flight() {
        let gate = SpendGate::new(1);
        let held = gate.enter(&ids(&["tok_a", "tok_b", "tok_a"])).await;
        assert_eq!(held.len(), 2, "a token named twice takes one pass");
        assert_eq!(gate.tokens_in_flight(), 2);
        // A join cancelled while it waits leaves nothing behind once the holder is done.
        assert!(waits(gate.enter(&ids(&["tok_a"]))).await);
        assert_eq!(gate.tokens_in_flight(), 2);
        drop(held);
        assert_eq!(gate.tokens_in_flight(), 0);
        drop(gate.enter(&[]).await);
        assert_eq!(gate.tokens_in_flight(), 0);
    }

    #[tokio::test]
    async fn joins_spending_the_same_tokens_in_either_order_do_not_deadlock() {
        let gate = Arc::new(SpendGate::new(1));
        let mut joins = Vec::new();
        for i in 0..64 {
            let gate = gate.clone();
            let names = if i % 2 == 0 {
                ids(&["tok_a", "tok_b"])
            } else {
                ids(&["tok_b", "tok_a"])
            };
            joins.push(tokio::spawn(async move {
                let passes = gate.enter(&names).await;
                tokio::task::yield_now().await;
                drop(passes);
            }));
        }
        tokio::time::timeout(Duration::from_secs(10), futures::future::join_all(joins))
            .await
            .expect("every join got through");
        assert_eq!(gate.tokens_in_flight(), 0);
    }
}
