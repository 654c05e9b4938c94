//! How a recovery judges a ring slot held by a lease consumer that looks
//! dead: by the lease entry that names its position ([`LeaseSlot`]).

use crate::lease::state::{EntryState, Owner, SlotAction, slot_action};
use crate::queue::Queue;
use std::sync::atomic::Ordering;

/// How a recovery treats a ring slot held by a lease consumer that looks
/// dead (see [`Queue::lease_slot_verdict`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseSlot {
    /// Its consumer, alive, is saving the record: wait.
    Wait,
    /// The record is saved in the lease table: the slot was released.
    Released,
}

impl Queue {
    /// Is the process a lease entry names still attached? (Unknown counts
    /// as alive: its leases then run out at their deadline.)
    pub(super) fn owner_alive(&self, o: Owner) -> bool {
        o.entry().is_some_and(|(index, low8)| self.registry.registration_alive(index, low8) != Some(false))
    }

    /// A recovery found the ring slot of position number `at` held by a
    /// consumer that looks dead (nobody alive announces it): if a lease
    /// entry names that position, the slot is its consumer's, judged by the
    /// entry: waited for while its owner (alive) saves the record, released
    /// once the record is saved (the record then lives in the table). `None`
    /// when no entry names it (a plain pop's slot, or a lease consumer that
    /// died before saving the record): the ring publishes the record again.
    pub(in crate::queue) fn lease_slot_verdict(&self, at: u64) -> Option<LeaseSlot> {
        let l = self.leases.as_ref()?;
        let found = (0..l.table.len()).find_map(|i| {
            let e = l.table.entry(i);
            let w = e.word();
            let named = w.state() != EntryState::Free && e.pos.load(Ordering::Acquire) == at && e.word() == w;
            named.then(|| (w, self.owner_alive(w.owner())))
        });
        match slot_action(found) {
            SlotAction::Wait => Some(LeaseSlot::Wait),
            SlotAction::Release => {
                self.ring.release_held(at);
                Some(LeaseSlot::Released)
            }
            SlotAction::Republish => None,
        }
    }
}
