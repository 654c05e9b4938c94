//! What a pop does while the queue is empty (spin, then sleep on the futex
//! of the file), and the wake-ups of pushes.
//!
//! # Blocking without lost wake-ups
//! A consumer that finds the queue empty announces itself (`waiters += 1`,
//! SeqCst), reads the futex word, checks again that no producer has claimed
//! a position (`tail == head`, SeqCst loads), and sleeps only if the word is
//! unchanged. A producer claims its position (a SeqCst CAS of `tail`),
//! publishes, then reads `waiters` (SeqCst): if it is 0, the consumer's
//! re-check must have seen the claim (and waits for the record instead of
//! sleeping), so the wake-up system call is skipped; otherwise it bumps the
//! word and wakes.
//! Sleeps are cut into slices of [`SLEEP_SLICE`] so that a producer killed
//! between publishing and waking delays a sleeper, never strands it. The
//! slice's timer costs a woken sleeper a few tenths of a microsecond
//! (`bench/experiments/wake_latency.c`, modes `mix` and `mix-nt`; the
//! figures: docs/measurements.md).

use super::{Queue, Strategy, Wait};
use crate::clock::{mono_ns, now_ns};
use crate::error::*;
use crate::wait;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The longest the short spin of a blocking pop lasts: the time after which
/// it sleeps on an empty queue (after a `Strategy::Spin` spin, too). It
/// looks at the queue after rounds of 8, 16, 32, then 64 `pause`s, and reads
/// the clock after each. It does not yield: on a loaded machine a thread that
/// yields waits for the others' time slices (milliseconds) before it looks
/// again, while one that sleeps is woken, and run, as soon as a push comes.
const SPIN_BOUND: Duration = Duration::from_micros(5);

/// Pauses in the first and the longest rounds of the short spin, as powers
/// of two. Polling an empty queue reads `tail`, which producers are moving:
/// the first round's pauses are long enough not to slow them down.
const SPIN_FIRST_ROUND: u32 = 3;
const SPIN_LAST_ROUND: u32 = 6;

/// The short spin is adaptive: a process spins on a queue only while
/// spinning pays. Its credit (per queue, per process) loses one for every
/// short spin that ended in a sleep, and gains [`SPIN_CREDIT_GAIN`] for every
/// sleep that ended within [`SPIN_BOUND`] (a spin would have caught the
/// record without the two system calls); at 0 a pop sleeps at once. So with
/// records a few microseconds apart a consumer spins and makes no system
/// call, and with records 10 us or more apart it sleeps as soon as it finds
/// the queue empty, using no CPU to wait (a spin before every sleep would
/// cost it up to half a CPU at 10 us gaps, and catch nothing).
pub(super) const SPIN_CREDIT_MAX: u32 = 4;
const SPIN_CREDIT_GAIN: u32 = 2;

/// Where a pop is in its short spin.
#[derive(Clone, Copy)]
enum Short {
    /// Not begun.
    Ahead,
    /// Spinning until then, with rounds of 2^round pauses.
    Until(Instant, u32),
    /// Over (or skipped): the pop sleeps.
    Over,
}

/// Longest single futex sleep; a sleeper re-checks the queue at least this often.
const SLEEP_SLICE: Duration = Duration::from_millis(200);

/// A pop's state while it finds nothing to take (see [`Queue::idle`]).
pub(super) struct Idle {
    wait: Wait,
    short: Short,
    spin_until: Option<Instant>,
}

impl Idle {
    pub(super) fn new(wait: Wait) -> Idle {
        Idle { wait, short: Short::Ahead, spin_until: None }
    }
}

impl Queue {
    /// Nothing to take: spins or sleeps as `idle`'s wait and this process's
    /// strategy say, then returns for another look; or returns the error
    /// that ends the pop (`NO_DATA_FOUND`, `MQUE_WAIT_TMO`).
    #[inline]
    pub(super) fn idle(&self, idle: &mut Idle) -> Result<()> {
        let deadline = match idle.wait {
            Wait::NoWait => return Err(Error::code_only(NO_DATA_FOUND)),
            Wait::Forever => None,
            Wait::Until(t) => Some(t),
        };
        if deadline.is_some_and(|t| Instant::now() >= t) {
            return Err(Error::code_only(MQUE_WAIT_TMO));
        }
        match self.strategy {
            Strategy::Default => {}
            Strategy::Spin(d) => {
                if Instant::now() < *idle.spin_until.get_or_insert_with(|| Instant::now() + d) {
                    std::hint::spin_loop();
                    return Ok(());
                }
            }
            Strategy::NeverSleep => {
                std::hint::spin_loop();
                return Ok(());
            }
        }
        if self.short_spin(idle) {
            return Ok(());
        }
        self.sleep_and_learn(deadline);
        Ok(())
    }

    /// One round of the short spin (true: look again), or false when it is
    /// over or skipped (see [`SPIN_CREDIT_MAX`]).
    fn short_spin(&self, idle: &mut Idle) -> bool {
        let round = match idle.short {
            Short::Ahead => {
                if self.spin_credit.load(Ordering::Relaxed) == 0 {
                    idle.short = Short::Over;
                    return false;
                }
                idle.short = Short::Until(Instant::now() + SPIN_BOUND, SPIN_FIRST_ROUND);
                SPIN_FIRST_ROUND
            }
            Short::Until(until, round) => {
                if Instant::now() >= until {
                    // The spin did not pay: one credit less.
                    let credit = self.spin_credit.load(Ordering::Relaxed);
                    if credit > 0 {
                        self.spin_credit.store(credit - 1, Ordering::Relaxed);
                    }
                    idle.short = Short::Over;
                    return false;
                }
                let next = (round + 1).min(SPIN_LAST_ROUND);
                idle.short = Short::Until(until, next);
                next
            }
            Short::Over => return false,
        };
        for _ in 0..1u32 << round {
            std::hint::spin_loop();
        }
        true
    }

    /// [`sleep`](Self::sleep) for a pop, which gives the short spin credit
    /// when the sleep was short enough for a spin to have caught the record.
    fn sleep_and_learn(&self, deadline: Option<Instant>) {
        // Credit is written only when it changes: the field shares a cache
        // line with those every pop reads.
        let credit = self.spin_credit.load(Ordering::Relaxed);
        if credit >= SPIN_CREDIT_MAX {
            self.sleep(deadline, || self.nothing_to_take());
            return;
        }
        let t = Instant::now();
        self.sleep(deadline, || self.nothing_to_take());
        if t.elapsed() < SPIN_BOUND {
            self.spin_credit.store((credit + SPIN_CREDIT_GAIN).min(SPIN_CREDIT_MAX), Ordering::Relaxed);
        }
    }

    /// True when a pop would find nothing: no record queued (and, with
    /// leases, none due for another delivery), read with the sequential
    /// consistency a sleeper needs after announcing itself.
    fn nothing_to_take(&self) -> bool {
        self.ring.is_empty_seqcst() && self.leases.as_ref().is_none_or(|l| !l.table.ready_due(mono_ns()))
    }

    /// Sleeps until a push may have happened, the deadline, or one slice
    /// (shorter when a lease runs out or a waiting record comes due before).
    /// `still` is the condition to sleep on, made of SeqCst loads of the
    /// cursors (a push moves `tail` by a SeqCst CAS before it reads the waiter
    /// count).
    fn sleep(&self, deadline: Option<Instant>, still: impl Fn() -> bool) {
        let wake = &self.control().wake.0;
        self.registry.enter_wait(&wake.waiters);
        let seen = wake.futex.load(Ordering::SeqCst);
        // Re-check after announcing ourselves: a push that the check misses
        // comes after our announcement, so it will see `waiters > 0`.
        if still() && !self.is_dropped() {
            let mut slice =
                deadline.map_or(SLEEP_SLICE, |t| t.saturating_duration_since(Instant::now()).min(SLEEP_SLICE));
            if let Some(l) = &self.leases {
                let alarm = l.table.next_event_ns().saturating_sub(mono_ns());
                slice = slice.min(Duration::from_nanos(alarm.max(100_000)));
            }
            if !slice.is_zero() {
                wait::wait(&wake.futex, seen, Some(slice));
            }
        }
        self.registry.leave_wait(&wake.waiters);
    }

    /// Pushes so far on this queue, by every process: a count that only grows
    /// (the positions producers have claimed, recoveries included). A cursor
    /// for [`wait_for_push`](Self::wait_for_push).
    pub fn push_count(&self) -> u64 {
        self.ring.pushed()
    }

    /// Sleeps until the queue's push count differs from `seen` (a value of
    /// [`push_count`](Self::push_count)), the queue is dropped, or `timeout`
    /// passes, whichever comes first, and returns the push count then. It
    /// takes nothing: it is for a watcher that tells others (a server's
    /// blocked clients, say) that records may have arrived. It sleeps as a
    /// blocking pop does, on the futex that producers of every process wake,
    /// with no busy loop; a producer's wake-up can go to another sleeper of
    /// the queue (which then takes the record), so a watcher may also wake
    /// only at the end of a sleep slice (200 ms).
    pub fn wait_for_push(&self, seen: u64, timeout: Duration) -> u64 {
        let deadline = Instant::now().checked_add(timeout);
        loop {
            let now = self.ring.pushed();
            if now != seen || self.is_dropped() || deadline.is_some_and(|t| Instant::now() >= t) {
                return now;
            }
            self.sleep(deadline, || self.ring.pushed_seqcst() == seen);
        }
    }

    /// Sleeps until the push count of any of `watch`'s queues differs from
    /// the value given with it (of [`push_count`](Self::push_count)), one of
    /// them is dropped, `bell` (with the value it had when read) rings, or
    /// `timeout` passes: [`wait_for_push`](Self::wait_for_push) on many
    /// queues at once, in one `futex_waitv` call (Linux 5.16 and later).
    /// It takes nothing and returns nothing: look at the queues again.
    ///
    /// At most [`crate::WAIT_ANY_MAX`] words are slept on, the bell's
    /// included.
    ///
    /// Errors: `CONDIT_IS_NIL` (no queue and no bell, or more words than
    /// that), `NOT_SUPPT_OPT` (a kernel without `futex_waitv`: at once,
    /// having slept on nothing; the caller falls back to polling or one
    /// queue at a time).
    ///
    /// The protocol is the module's, on every queue at once: announce as a
    /// waiter of each (SeqCst), read each futex word, then re-check every
    /// push count with SeqCst loads, and sleep only if none moved; a push
    /// that the re-check misses comes after the announcement, so its
    /// producer sees `waiters > 0` and bumps and wakes that queue's word,
    /// which ends the sleep (the word differs from the value read, or the
    /// wake-up reaches the sleeping call). As with one queue, a producer's
    /// wake-up may go to another sleeper of that queue instead, so a
    /// caller must not sleep longer than it can afford to notice late.
    pub fn wait_for_any_push(
        watch: &[(&Queue, u64)],
        bell: Option<(&wait::Bell, u32)>,
        timeout: Duration,
    ) -> Result<()> {
        let n = watch.len() + usize::from(bell.is_some());
        if n == 0 || n > wait::WAIT_ANY_MAX {
            return Err(Error::new(
                CONDIT_IS_NIL,
                format!("{n} words to wait on: from 1 to {}, the bell included", wait::WAIT_ANY_MAX),
            ));
        }
        for (q, _) in watch {
            q.registry.enter_wait(&q.control().wake.0.waiters);
        }
        let mut words: Vec<(&std::sync::atomic::AtomicU32, u32)> = Vec::with_capacity(n);
        for (q, _) in watch {
            let futex = &q.control().wake.0.futex;
            words.push((futex, futex.load(Ordering::SeqCst)));
        }
        if let Some((b, v)) = bell {
            words.push((b.word(), v));
        }
        // Re-check after announcing ourselves (see above).
        let moved = watch.iter().any(|(q, seen)| q.ring.pushed_seqcst() != *seen || q.is_dropped())
            || bell.is_some_and(|(b, v)| b.value() != v);
        let result = if moved || timeout.is_zero() {
            Ok(())
        } else {
            match wait::wait_any(&words, timeout) {
                wait::WokenAny::Maybe | wait::WokenAny::TimedOut => Ok(()),
                wait::WokenAny::Unsupported => {
                    Err(Error::new(NOT_SUPPT_OPT, "this kernel has no futex_waitv (Linux 5.16 and later have it)"))
                }
            }
        };
        for (q, _) in watch {
            q.registry.leave_wait(&q.control().wake.0.waiters);
        }
        result
    }

    /// For a watcher of a queue with leases (a server whose clients wait to
    /// lease from it, say): how long until a lease call may find a record
    /// that no push brought: a lease running out, or a released record
    /// coming due; zero when one may be due now (a lease call then settles
    /// it, or finds nothing: the hints this reads err early). `None` for a
    /// queue without leases, or with nothing in flight or waiting: then
    /// only a push or a release brings a record, and both wake the queue's
    /// sleepers (the futex that [`wait_for_any_push`](Self::wait_for_any_push)
    /// sleeps on). Two loads. (A lease whose holder died is found sooner by
    /// the periodic sweep: [`lease_sweep_due_in`](Self::lease_sweep_due_in).)
    pub fn lease_due_in(&self) -> Option<Duration> {
        let l = self.leases.as_ref()?;
        Self::due_in(l.table.next_event_ns())
    }

    /// For a watcher as [`lease_due_in`](Self::lease_due_in): how long until
    /// the periodic sweep, which finds the leases of holders that died
    /// (zero: due now; a lease call runs it), `None` when no lease is in
    /// flight (or the queue has no leases). One load.
    pub fn lease_sweep_due_in(&self) -> Option<Duration> {
        let l = self.leases.as_ref()?;
        Self::due_in(l.table.control().hints.0.next_sweep_ns.load(Ordering::Relaxed))
    }

    fn due_in(at_ns: u64) -> Option<Duration> {
        (at_ns != u64::MAX).then(|| Duration::from_nanos(at_ns.saturating_sub(mono_ns())))
    }

    /// Wakes one sleeper, if any announced itself (see the module doc for
    /// why a SeqCst load after the claim suffices).
    #[inline]
    pub(super) fn wake_one(&self) {
        self.wake(1)
    }

    /// Wakes up to `n` sleepers, if any announced themselves.
    #[inline]
    pub(super) fn wake(&self, n: u32) {
        // SeqCst: ordered after our claiming CAS of `tail` (module doc).
        if self.control().wake.0.waiters.load(Ordering::SeqCst) != 0 {
            self.wake_slow(n);
        }
    }

    #[cold]
    fn wake_slow(&self, n: u32) {
        let wake = &self.control().wake.0;
        wake.futex.fetch_add(1, Ordering::SeqCst);
        if wait::wake(&wake.futex, n) == 0 {
            // Nobody was asleep although `waiters > 0`: a sleeper may have
            // been killed. Look for dead ones, at most every 100 ms.
            let now = now_ns();
            let last = self.last_reconcile_ns.load(Ordering::Relaxed);
            if now.saturating_sub(last) > 100_000_000
                && self.last_reconcile_ns.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
            {
                self.count_reconciled(self.registry.reconcile(&wake.waiters));
            }
        }
    }

    pub(super) fn count_reconciled(&self, n: u32) {
        if n > 0 {
            self.control().counters.0.reconciled_waiters.fetch_add(u64::from(n), Ordering::Relaxed);
        }
    }
}
