//! The flusher of `interval` queues: one thread per process, started by the
//! first `interval` queue the process attaches.
//!
//! Every attached process runs one. At each tick it looks for changes no
//! sync covers (pushes and pops mark nothing: see
//! `Durable::changed_since_sync`) and dates the first it finds by its last
//! look that found none; it syncs any of its queues whose
//! oldest unsynced change (by whichever process) is nearly the interval old:
//! the interval less two ticks and twice the last sync's duration (at least
//! a quarter of the interval); the sync lock makes one process do it at a
//! time, so nobody has to be elected and a dead process leaves no gap. It
//! wakes every sixteenth of the shortest interval among its queues (250 us
//! to 250 ms; attaching a queue wakes it), so a change reaches the disk
//! within the interval unless a sync takes much longer than the one before
//! it. A process exiting normally syncs what it left dirty (`atexit`), and so
//! does a `Queue` dropped; a killed process's last changes are synced by the
//! flushers of the other attached processes, or by the next process that
//! attaches if none is left (the kernel's own writeback of the live pages
//! does not reach the image that recovery reads: see `super::image`).

use super::Durable;
use crate::spec::Durability;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

/// The `interval` queues this process has attached.
static QUEUES: Mutex<Vec<Weak<Durable>>> = Mutex::new(Vec::new());
/// Set by `register`: the flusher takes a new queue's tick at once instead
/// of finishing a sleep sized for the queues it knew (up to `MAX_TICK`,
/// longer than a short interval).
static WOKEN: Mutex<bool> = Mutex::new(false);
/// Signalled with `WOKEN`.
static WAKE: Condvar = Condvar::new();
/// The process whose flusher thread runs (a forked child starts its own).
static RUNNING_IN: AtomicU32 = AtomicU32::new(0);
/// The `atexit` handler is registered.
static AT_EXIT: std::sync::Once = std::sync::Once::new();

/// Longest sleep between two looks at the queues.
const MAX_TICK: Duration = Duration::from_millis(250);

/// (Tests.) A longer `MAX_TICK` in milliseconds (0: none), so that a
/// flusher that sleeps on is seen by what it does not do, not by how late
/// it does it.
#[cfg(test)]
pub(super) static TEST_MAX_TICK_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// (Tests.) Sleeps begun with no wake pending, counted with `WOKEN` held:
/// once it has moved, the flusher waits on `WAKE` until a `register`
/// wakes it (or its tick ends).
#[cfg(test)]
pub(super) static SLEEPS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// `MAX_TICK` (in tests, perhaps `TEST_MAX_TICK_MS`).
fn max_tick() -> Duration {
    #[cfg(test)]
    if let ms @ 1.. = TEST_MAX_TICK_MS.load(Ordering::SeqCst) {
        return Duration::from_millis(ms);
    }
    MAX_TICK
}

/// Adds an `interval` queue to this process's flusher, starting it if needed.
pub(crate) fn register(d: &Arc<Durable>) {
    if let Ok(mut q) = QUEUES.lock() {
        q.retain(|w| w.strong_count() > 0);
        q.push(Arc::downgrade(d));
    }
    if let Ok(mut woken) = WOKEN.lock() {
        *woken = true;
        WAKE.notify_all();
    }
    let me = std::process::id();
    if RUNNING_IN.swap(me, Ordering::SeqCst) != me {
        let spawned = std::thread::Builder::new().name("tvmq-flusher".into()).spawn(run);
        if spawned.is_err() {
            RUNNING_IN.store(0, Ordering::SeqCst);
        }
    }
    AT_EXIT.call_once(|| {
        // SAFETY: registers a function that catches its own panics.
        unsafe { libc::atexit(flush_at_exit) };
    });
}

/// The live `interval` queues, and the tick for the shortest interval.
fn live() -> (Vec<Arc<Durable>>, Duration) {
    let list: Vec<Arc<Durable>> =
        QUEUES.lock().map(|q| q.iter().filter_map(Weak::upgrade).collect()).unwrap_or_default();
    let tick = list
        .iter()
        .map(|d| match d.policy() {
            Durability::Interval(ms) => Duration::from_millis(u64::from(ms)) / 16,
            Durability::Always => max_tick(),
        })
        .min()
        .unwrap_or(max_tick())
        .clamp(Duration::from_micros(250), max_tick());
    (list, tick)
}

fn run() {
    let me = std::process::id();
    loop {
        let (list, tick) = live();
        for d in &list {
            if let Durability::Interval(ms) = d.policy() {
                // An error is counted in the file (`tvmq stat`); the flag
                // stays set, so the next tick tries again.
                let _ = d.flush_if_due(Duration::from_millis(u64::from(ms)), tick);
            }
        }
        drop(list);
        if RUNNING_IN.load(Ordering::Relaxed) != me {
            return; // a forked child's copy of this thread does not exist; never here
        }
        sleep(tick);
    }
}

/// Sleeps for `tick`, or less if `register` adds a queue meanwhile.
fn sleep(tick: Duration) {
    let Ok(woken) = WOKEN.lock() else {
        return std::thread::sleep(tick);
    };
    #[cfg(test)]
    if !*woken {
        SLEEPS.fetch_add(1, Ordering::SeqCst);
    }
    if let Ok((mut woken, _)) = WAKE.wait_timeout_while(woken, tick, |w| !*w) {
        *woken = false;
    }
}

/// Syncs every dirty `interval` queue of this process (at exit).
pub(crate) fn flush_all() {
    let list: Vec<Arc<Durable>> = match QUEUES.try_lock() {
        Ok(q) => q.iter().filter_map(Weak::upgrade).collect(),
        Err(_) => return,
    };
    for d in list {
        if d.is_dirty() {
            let _ = d.sync();
        }
    }
}

extern "C" fn flush_at_exit() {
    let _ = std::panic::catch_unwind(flush_all);
}
