//! CPU time as Linux counts it (`/proc`), for the figures per join: this process and its named
//! threads, a PostgreSQL server on this machine, and the machine as a whole.
//!
//! On a machine the agents and the database share with the host, joins/s is at most the cores
//! over the CPU a join costs all of them together; these say what each part costs, so a run
//! short of a target says which part to look at (and whether the machine was busy at all).
//! Every figure is in clock ticks of 10 ms (Linux's `USER_HZ` on every architecture it runs
//! this benchmark on), read before and after a run of a couple of thousand joins.

use std::time::Duration;

/// The process's user and system CPU time so far, its threads' that have ended included
/// (`/proc/self/stat`), or zero where that is not readable.
pub(crate) fn process() -> Duration {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| Stat::parse(&stat))
        .map_or(Duration::ZERO, |s| s.own)
}

/// The CPU time so far of this process's live threads named `name` (`/proc/self/task/*/stat`).
pub(crate) fn threads(name: &str) -> Duration {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Duration::ZERO;
    };
    tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("stat")).ok())
        .filter_map(|stat| Stat::parse(&stat))
        .filter(|s| s.comm == name)
        .map(|s| s.own)
        .sum()
}

/// The CPU time so far of every process on this machine named `name`, with what each has
/// counted of its children that ended: for PostgreSQL (`postgres`), the server's whole CPU,
/// since a backend that ends is counted in the postmaster's children's figure once reaped.
/// `None` when no such process is visible (a server elsewhere, or `/proc` unreadable).
pub(crate) fn processes(name: &str) -> Option<Duration> {
    let mut seen = false;
    let mut total = Duration::ZERO;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        if !entry
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            continue;
        }
        // A process may end between the listing and the read: skipped, its figure then in its
        // parent's children's figure (read either before or after, never both).
        let Some(stat) = std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|stat| Stat::parse(&stat))
        else {
            continue;
        };
        if stat.comm == name {
            seen = true;
            total += stat.own + stat.children;
        }
    }
    seen.then_some(total)
}

/// This machine's CPUs, as `/proc/stat` counts them, and the time they have all spent busy so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Machine {
    /// User, nice, system and interrupt time; not idle, waiting on I/O, or stolen by a
    /// hypervisor.
    pub busy: Duration,
    /// The CPUs online, each a `cpuN` line: what `busy` is the time of (a process's allowed
    /// CPUs may be fewer).
    pub cpus: u32,
}

/// The machine now (`/proc/stat`).
pub(crate) fn machine() -> Option<Machine> {
    parse_machine(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// `/proc/stat`: its first line, `cpu  user nice system idle iowait irq softirq steal …`, and
/// its `cpuN` lines.
fn parse_machine(proc_stat: &str) -> Option<Machine> {
    let mut lines = proc_stat.lines();
    let mut fields = lines.next()?.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let counts: Vec<u64> = fields
        .take(7)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    let &[user, nice, system, _idle, _iowait, irq, softirq] = counts.as_slice() else {
        return None;
    };
    let busy = [user, nice, system, irq, softirq]
        .into_iter()
        .try_fold(0u64, u64::checked_add)?;
    let cpus = lines
        .filter(|line| {
            line.strip_prefix("cpu")
                .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
        })
        .count();
    Some(Machine {
        busy: ticks(busy)?,
        cpus: u32::try_from(cpus).ok().filter(|&n| n > 0)?,
    })
}

/// `n` clock ticks: `/proc` counts CPU time in Linux's `USER_HZ`, hundredths of a second.
fn ticks(n: u64) -> Option<Duration> {
    Some(Duration::from_millis(n.checked_mul(10)?))
}

/// What a `stat` line of a process or thread says of its CPU time.
#[derive(Debug, PartialEq, Eq)]
struct Stat {
    /// Its command name.
    comm: String,
    /// Its own user and system time.
    own: Duration,
    /// Its children's that ended and were reaped (zero for a thread).
    children: Duration,
}

impl Stat {
    fn parse(stat: &str) -> Option<Stat> {
        // The command name (which may hold spaces and parentheses) is closed by the last ')'.
        let (head, rest) = stat.rsplit_once(')')?;
        let (_, comm) = head.split_once('(')?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks = |i: usize| ticks(fields.get(i)?.parse().ok()?);
        // utime, stime, cutime and cstime are fields 14 to 17 of the line, 11 to 14 after the
        // name and its closing parenthesis.
        Some(Stat {
            comm: comm.to_owned(),
            own: ticks(11)? + ticks(12)?,
            children: ticks(13)? + ticks(14)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_its_name_and_cpu_even_with_parentheses_in_the_name() {
        let line = "4242 (bench (x) agent) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 30 7 5 20 0 1";
        assert_eq!(
            Stat::parse(line),
            Some(Stat {
                comm: "bench (x) agent".into(),
                own: Duration::from_millis(2_800),
                children: Duration::from_millis(120),
            })
        );
        assert_eq!(Stat::parse("4242 (cut"), None);
        assert_eq!(Stat::parse("4242 (short) S 1 2"), None);
        assert_eq!(
            Stat::parse("4242 (neg) S 1 4242 4242 0 -1 4194560 100 0 0 0 -1 30 7 5 20 0 1"),
            None
        );
    }

    #[test]
    fn the_machine_is_busy_for_its_user_system_and_interrupt_time_only() {
        let stat = "cpu  100 2 30 5000 40 3 4 60 0 0\n\
                    cpu0 50 1 15 2500 20 1 2 30 0 0\n\
                    cpu1 50 1 15 2500 20 2 2 30 0 0\n\
                    intr 12345 0 0\n\
                    ctxt 999\n";
        assert_eq!(
            parse_machine(stat),
            Some(Machine {
                busy: Duration::from_millis(1_390),
                cpus: 2
            })
        );
        assert_eq!(parse_machine("cpu0 1 2 3 4 5 6 7\n"), None);
        assert_eq!(parse_machine("cpu  1 2 3\ncpu0 1 2 3\n"), None);
        assert_eq!(parse_machine("cpu  1 2 3 4 5 6 7\n"), None, "no CPU lines");
        assert_eq!(parse_machine(""), None);
        assert!(machine().is_some_and(|m| m.busy > Duration::ZERO && m.cpus > 0));
    }

    #[test]
    fn this_process_and_its_threads_have_cpu_figures() {
        const SPENT: Duration = Duration::from_millis(30);
        let (spent_tx, spent_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let busy = std::thread::Builder::new()
            .name("bench-cpu-test".into())
            .spawn(move || {
                // Spins until its own figure shows SPENT, then stays alive until measured.
                let own = || {
                    std::fs::read_to_string("/proc/thread-self/stat")
                        .ok()
                        .and_then(|stat| Stat::parse(&stat))
                        .map_or(Duration::ZERO, |s| s.own)
                };
                let mut x = 0u64;
                while own() < SPENT {
                    for _ in 0..100_000 {
                        x = std::hint::black_box(x.wrapping_add(1));
                    }
                }
                spent_tx.send(()).unwrap();
                let _ = done_rx.recv();
            })
            .unwrap();
        spent_rx.recv().unwrap();
        let thread = threads("bench-cpu-test");
        assert!(thread >= SPENT, "{thread:?}");
        assert!(process() >= thread);
        assert_eq!(threads("no-such-thread"), Duration::ZERO);
        // This process is visible by its own name, and no process has a name longer than the
        // 15 bytes Linux keeps.
        let own_name = std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|stat| Stat::parse(&stat))
            .map(|s| s.comm)
            .unwrap();
        assert!(processes(&own_name).is_some_and(|cpu| cpu >= thread));
        assert_eq!(processes("no-such-process-name"), None);
        done_tx.send(()).unwrap();
        busy.join().unwrap();
    }
}
