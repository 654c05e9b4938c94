//! The sweeps: leases that ran out, and entries of holders that died,
//! become records waiting for another delivery (or bound for the
//! dead-letter queue). One process sweeps at a time, under a lock word
//! that a dead sweeper's successor takes over.

use super::LeaseTable;
use crate::lease::state::{EntryState, Owner};
use std::sync::atomic::{AtomicU64, Ordering};

/// What a sweep found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Swept {
    /// Records made ready for another delivery now (sleepers may want them).
    pub(crate) ready: u64,
    /// Entries bound for the dead-letter queue (the caller moves them).
    pub(crate) doomed: u64,
}

impl LeaseTable {
    /// Sweeps the table as `me`, if no other live process is sweeping:
    /// leases that ran out at `now`, and entries whose owner is dead
    /// (`alive` says, for any owner), are settled: a record becomes `Ready`
    /// for another delivery (at once) or `Doomed` (delivered
    /// `max_deliveries` times: bound for the dead-letter queue); a claim
    /// without a record is freed. A dead consumer's committed record whose
    /// ring slot it still holds has that slot released first (`holds` and
    /// `release_held`, the ring's). With `force`, sweeps even if the
    /// schedule says it is not due. `None`: another process is sweeping.
    // The three closures are the caller's view of liveness and of the ring.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn sweep(
        &self,
        now: u64,
        me: Owner,
        max_deliveries: u32,
        force: bool,
        mut alive: impl FnMut(Owner) -> bool,
        holds: impl Fn(u64) -> bool,
        release_held: impl Fn(u64) -> bool,
    ) -> Option<Swept> {
        let h = &self.control.hints.0;
        // The hint value this sweep set when it took its turn (a sweeper that
        // dies leaves the next turn one period later).
        let later = now.saturating_add(self.period());
        if !force {
            // One caller takes this turn: the one that moves the schedule.
            let (sweep, deadline) =
                (h.next_sweep_ns.load(Ordering::Acquire), h.next_deadline_ns.load(Ordering::Acquire));
            let took = if now >= deadline {
                h.next_deadline_ns.compare_exchange(deadline, later, Ordering::AcqRel, Ordering::Relaxed).is_ok()
            } else {
                now >= sweep
                    && h.next_sweep_ns.compare_exchange(sweep, later, Ordering::AcqRel, Ordering::Relaxed).is_ok()
            };
            if !took {
                return None;
            }
        }
        let lock = &self.control.sweeping.0.sweeper;
        let mut holder = lock.load(Ordering::Acquire);
        loop {
            if holder != 0 && alive(Owner(holder as u32)) {
                return None;
            }
            match lock.compare_exchange(holder, u64::from(me.0), Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(now_holder) => holder = now_holder,
            }
        }
        let swept = self.sweep_locked(now, later, max_deliveries, &mut alive, holds, release_held);
        self.control.sweeping.0.last_ns.store(now, Ordering::Relaxed);
        let _ = lock.compare_exchange(u64::from(me.0), 0, Ordering::AcqRel, Ordering::Relaxed);
        Some(swept)
    }

    fn sweep_locked(
        &self,
        now: u64,
        later: u64,
        max_deliveries: u32,
        alive: &mut impl FnMut(Owner) -> bool,
        holds: impl Fn(u64) -> bool,
        release_held: impl Fn(u64) -> bool,
    ) -> Swept {
        let counters = &self.control.counters.0;
        let (mut next_deadline, mut next_ready, mut in_use) = (u64::MAX, u64::MAX, false);
        let mut swept = Swept::default();
        // HolderIs per owner, asked once per sweep.
        let mut known: Vec<(Owner, bool)> = Vec::new();
        let mut is_alive = |o: Owner| match known.iter().find(|k| k.0 == o) {
            Some(k) => k.1,
            None => {
                let a = alive(o);
                known.push((o, a));
                a
            }
        };
        // Leases that run out within this much of one another are ended by
        // one sweep (big tables: a scan per lease deadline would cost a
        // scan per lease).
        let batch = self.batch_ns();
        for i in 0..self.count {
            let e = self.entry(i);
            let w = e.word();
            in_use |= w.state() != EntryState::Free;
            let owner_dead = match w.state() {
                EntryState::Free => {
                    // Repairs the index (an entry hidden by a process killed
                    // between its change and its bit's); a load if it is fine.
                    self.free.insert(i);
                    continue;
                }
                EntryState::Ready => {
                    next_ready = next_ready.min(e.deadline_ns.load(Ordering::Relaxed));
                    self.ready.insert(i);
                    continue;
                }
                EntryState::Doomed => {
                    swept.doomed += 1;
                    continue;
                }
                EntryState::Leased => {
                    let dead = !is_alive(w.owner());
                    let deadline = e.deadline_ns.load(Ordering::Relaxed);
                    let pos = e.pos.load(Ordering::Relaxed);
                    if dead {
                        // It died holding the record, maybe before releasing
                        // its slot: the record is here, so the slot is only
                        // released (never published again).
                        if holds(pos) {
                            release_held(pos);
                        }
                    } else if now < deadline || holds(pos) {
                        // Running, or its live holder is between saving the
                        // record and releasing its slot (still in the call).
                        next_deadline = next_deadline.min(deadline.max(now + 1).saturating_add(batch));
                        continue;
                    }
                    dead
                }
                EntryState::Filling | EntryState::Taking | EntryState::Busy | EntryState::Dead => {
                    if is_alive(w.owner()) {
                        continue;
                    }
                    true
                }
            };
            let to = match w.state() {
                EntryState::Leased => w.undelivered(max_deliveries),
                _ => match w.orphaned(max_deliveries) {
                    Some(to) => to,
                    None => continue,
                },
            };
            if owner_dead && to.state() == EntryState::Ready {
                // Due now. Its owner is dead and the sweep lock is ours, so
                // nobody else writes the entry. (A lease that ran out is due
                // already, and its live holder may be extending it: not written.)
                e.deadline_ns.store(now, Ordering::Relaxed);
            }
            if e.change(w, to).is_err() {
                continue;
            }
            if w.state() != EntryState::Filling {
                let c = if owner_dead { &counters.orphaned } else { &counters.expired };
                c.fetch_add(1, Ordering::Relaxed);
            }
            match to.state() {
                EntryState::Ready => {
                    self.ready.insert(i);
                    swept.ready += 1;
                    next_ready = next_ready.min(now);
                }
                EntryState::Doomed => swept.doomed += 1,
                EntryState::Free => self.free.insert(i),
                _ => {}
            }
        }
        self.free.repair_summaries();
        self.ready.repair_summaries();
        let h = &self.control.hints.0;
        // A hint at or before now made this sweep due, and `later` is what
        // the sweep set when it took its turn: both are replaced. A value
        // below ours set meanwhile (a new lease) is kept.
        let settle = |hint: &AtomicU64, ours: u64| {
            let _ = hint.fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| {
                Some(if cur <= now || cur == later { ours } else { cur.min(ours) })
            });
        };
        settle(&h.next_deadline_ns, next_deadline);
        settle(&h.next_sweep_ns, if in_use { now.saturating_add(self.period()) } else { u64::MAX });
        if next_ready != u64::MAX {
            self.ready_at(next_ready);
        }
        swept
    }
}
