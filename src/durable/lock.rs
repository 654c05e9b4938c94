//! The sync lock of a durable queue: a word of its control block naming
//! the syncer, so that one sync runs at a time across processes; those who
//! find it held sleep on the control block's futex until it is released.
//!
//! The syncer is named as lease entries name their holder ([`Syncer`]): by
//! its process-table entry and its registration there, and judged as every
//! holder is, by the registry's file locks, which the kernel drops when a
//! process ends however it ends, and which every pid namespace sees alike.
//! So a syncer that died holding the lock is proven dead at once (its pid
//! may belong to another process by then), and a live one is never taken
//! for dead (its pid may mean nothing in this namespace). A syncer that
//! could not register (the table was full) cannot be told: its lock is
//! taken after the queue's unblock timeout, as the ring treats a holder it
//! cannot tell.

use super::Durable;
use crate::clock::now_ns;
use crate::registry::MAX_PROCS;
use crate::wait;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How this process names itself in the lock word: its process-table entry
/// plus one, shifted by 8, and the low 8 bits of its registration there
/// (as a lease entry names its holder); [`Syncer::UNREGISTERED`] without
/// an entry. Never 0 (the word's "nobody").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Syncer(u32);

impl Syncer {
    const UNREGISTERED: u32 = u32::MAX;

    /// The process registered in entry `index` as registration number
    /// `registration` (`None`: not registered).
    pub(crate) fn new(me: Option<(usize, u32)>) -> Syncer {
        match me {
            Some((index, registration)) if index < MAX_PROCS => Syncer((index as u32 + 1) << 8 | (registration & 0xff)),
            _ => Syncer(Self::UNREGISTERED),
        }
    }

    /// The entry and the registration's low 8 bits a lock word names
    /// (`None`: an unregistered syncer, or no entry at all).
    fn entry(word: u32) -> Option<(usize, u32)> {
        if word == Self::UNREGISTERED {
            return None;
        }
        ((word >> 8) as usize).checked_sub(1).map(|index| (index, word & 0xff))
    }
}

impl Durable {
    /// Takes the sync lock if nobody holds it (never waits).
    pub(super) fn try_lock(&self) -> bool {
        let w = self.words();
        if w.lock.load(Ordering::Relaxed) != 0 {
            return false;
        }
        if w.lock.compare_exchange(0, self.syncer.0, Ordering::SeqCst, Ordering::Relaxed).is_ok() {
            w.locked_ns.store(now_ns(), Ordering::Relaxed);
            return true;
        }
        false
    }

    /// Releases the sync lock, waking those who wait for it.
    pub(super) fn unlock(&self) {
        let w = self.words();
        w.lock.store(0, Ordering::SeqCst);
        w.futex.fetch_add(1, Ordering::SeqCst);
        if w.waiters.load(Ordering::SeqCst) != 0 {
            wait::wake(&w.futex, u32::MAX);
        }
    }

    /// Sleeps until the running sync ends (or a slice passes); takes the
    /// lock from a syncer that died holding it.
    #[cold]
    pub(super) fn wait_for_syncer(&self, target: u64) {
        let w = self.words();
        let seen = w.futex.load(Ordering::SeqCst);
        w.waiters.fetch_add(1, Ordering::SeqCst);
        let holder = w.lock.load(Ordering::SeqCst);
        if holder != 0 && w.done.load(Ordering::SeqCst) < target {
            wait::wait(&w.futex, seen, Some(Duration::from_millis(20)));
        }
        let _ = w.waiters.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| Some(n.saturating_sub(1)));
        self.free_if_dead(holder);
    }

    /// Frees the sync lock if `holder` (0: nobody) still holds it and is
    /// proven dead (or, not registered or not to be told, has held it
    /// longer than the unblock timeout), waking those who wait for it.
    pub(super) fn free_if_dead(&self, holder: u32) {
        if holder == 0 || (holder == self.syncer.0 && holder != Syncer::UNREGISTERED) {
            // Nobody, or this queue's own (another thread of this process
            // syncs through it).
            return;
        }
        let w = self.words();
        let held_for = || Duration::from_nanos(now_ns().saturating_sub(w.locked_ns.load(Ordering::Relaxed)));
        let dead = match Syncer::entry(holder) {
            Some((index, low8)) => match self.registry.registration_alive(index, low8) {
                Some(alive) => !alive,
                None => held_for() > self.unknown_after,
            },
            None => held_for() > self.unknown_after,
        };
        if dead && w.lock.compare_exchange(holder, 0, Ordering::SeqCst, Ordering::Relaxed).is_ok() {
            w.futex.fetch_add(1, Ordering::SeqCst);
            wait::wake(&w.futex, u32::MAX);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::queue::Queue;
    use crate::spec::{Durability, Spec};
    use crate::test_support::{DiskDir, child_env, child_test};
    use std::os::unix::process::CommandExt;
    use std::path::{Path, PathBuf};
    use std::process::Command;
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};

    const DIR: &str = "TVMQ_TEST_LOCK_DIR";
    const MODE: &str = "TVMQ_TEST_LOCK_MODE";
    const CHILD: &str = "durable::lock::tests::child_holds_the_sync_lock";

    fn always_queue(dir: &Path) {
        let mut spec = Spec::new(64, 16);
        spec.durability = Some(Durability::Always);
        Queue::create(dir, 1, &spec).unwrap();
    }

    /// Waits until `done` (at most a minute: a guard against a hang, not a
    /// measure of anything).
    fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
        let give_up = Instant::now() + Duration::from_secs(60);
        while !done() {
            assert!(Instant::now() < give_up, "never happened: {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A push on queue 1 of `dir` (an `always` queue: it syncs), on a
    /// thread of its own; its outcome, or `None` if it has not returned
    /// after a minute (wedged behind the sync lock).
    fn push_in_a_thread(dir: &Path) -> Option<crate::Result<()>> {
        let (tx, rx) = std::sync::mpsc::channel();
        let dir = dir.to_path_buf();
        std::thread::spawn(move || {
            let r = Queue::open(&dir, 1).and_then(|q| q.push(b"after"));
            let _ = tx.send(r);
        });
        rx.recv_timeout(Duration::from_secs(60)).ok()
    }

    /// The sync lock word of queue 1 of `dir`.
    fn lock_word(dir: &Path) -> u32 {
        let q = Queue::open(dir, 1).unwrap();
        q.durable_in_test().unwrap().words().lock.load(Ordering::SeqCst)
    }

    /// A syncer killed holding the lock whose pid then belongs to a live
    /// process that is no tvmq user (the child execs `sleep`: the same pid,
    /// the queue file closed): writers take the lock from it at once. (By
    /// the pid, `kill(pid, 0)` found it alive, and they waited as long as
    /// that process lived.)
    #[test]
    fn a_dead_syncer_whose_pid_lives_on_does_not_wedge_writers() {
        let dir = DiskDir::new("lock-pid-reused");
        always_queue(dir.path());
        let mut child = child_test(CHILD).env(DIR, dir.path()).env(MODE, "exec").spawn().unwrap();
        let held = dir.path().join("held");
        wait_for("the child to hold the sync lock", || held.exists());
        let pid = child.id();
        wait_for("the child's registration to end (its exec closed the file)", || {
            Queue::inspect(dir.path(), 1).unwrap().processes().iter().all(|p| p.pid != pid)
        });
        assert!(Path::new(&format!("/proc/{pid}")).exists(), "its pid lives on (sleep)");
        assert_ne!(lock_word(dir.path()), 0, "the lock is still the dead syncer's");
        let pushed = push_in_a_thread(dir.path());
        let _ = child.kill();
        let _ = child.wait();
        assert!(matches!(pushed, Some(Ok(()))), "the push waited behind a dead syncer's lock: {pushed:?}");
        assert_eq!(lock_word(dir.path()), 0);
        Queue::drop_queue(dir.path(), 1).unwrap();
    }

    /// A live syncer in another pid namespace (a container sharing the
    /// queue directory), whose pid means nothing here, keeps the lock for
    /// as long as its sync lasts (3 s): a writer waits for it, and no two
    /// syncs run at once. (By the pid, `kill(pid, 0)` found no such process
    /// and the lock was taken from it after 1 s.) Needs `unshare` and the
    /// right to make a pid namespace and set its next pid: where they are
    /// refused (a container without CAP_SYS_ADMIN), it says so and checks
    /// nothing.
    #[test]
    fn a_live_syncer_in_another_pid_namespace_keeps_the_lock() {
        let probe = Command::new("unshare")
            .args(["--pid", "--fork", "sh", "-c", "echo 20000 > /proc/sys/kernel/ns_last_pid"])
            .stderr(std::process::Stdio::null())
            .status();
        if !probe.as_ref().is_ok_and(|s| s.success()) {
            eprintln!("skipped: `unshare --pid` (or setting ns_last_pid in it) is refused here: {probe:?}");
            return;
        }
        let dir = DiskDir::new("lock-pid-namespace");
        always_queue(dir.path());
        // A pid number unused here, given to the child in its namespace.
        let absent = |p: u32| !Path::new(&format!("/proc/{p}")).exists();
        let n = (2000..30000u32).rev().find(|&p| absent(p) && absent(p + 1)).unwrap();
        let exe = std::env::current_exe().unwrap();
        // The test binary a process of its own (not the namespace's first).
        let script = format!("echo {n} > /proc/sys/kernel/ns_last_pid && \"$0\" \"$@\"");
        let mut child = Command::new("unshare")
            .args(["--pid", "--fork", "sh", "-c", &script])
            .arg(&exe)
            .args(["--ignored", "--exact", CHILD, "--nocapture", "--test-threads=1"])
            .env(DIR, dir.path())
            .env(MODE, "sync")
            .spawn()
            .expect("run unshare (util-linux)");
        let held = dir.path().join("held");
        wait_for("the child in its pid namespace to hold the sync lock", || {
            let ended = child.try_wait().unwrap();
            assert!(ended.is_none(), "the child ended before it held the lock ({ended:?}): no pid namespace here?");
            held.exists()
        });
        let its_pid: u32 = std::fs::read_to_string(&held).unwrap().trim().parse().unwrap();
        assert_eq!(its_pid, n + 1, "the child's pid in its namespace");
        assert!(absent(its_pid), "its pid means no process here");
        let pushed = push_in_a_thread(dir.path());
        let released_first = dir.path().join("released").exists();
        let status = child.wait().unwrap();
        assert!(matches!(pushed, Some(Ok(()))), "{pushed:?}");
        assert!(released_first, "the push synced while the live syncer held the lock");
        assert!(status.success(), "the child saw its lock taken while it synced ({status})");
        Queue::drop_queue(dir.path(), 1).unwrap();
    }

    /// The child of the tests above: opens queue 1, takes its sync lock
    /// and says so (`held`, its pid), then `exec`: execs `sleep 60` (a
    /// syncer that died, its pid alive); `sync`: holds the lock for 3 s (a
    /// long sync), failing if the lock is taken from it meanwhile, then
    /// says `released` and releases it.
    #[test]
    #[ignore = "child process: started by the sync lock's tests"]
    fn child_holds_the_sync_lock() {
        let dir = PathBuf::from(child_env(DIR));
        let mode = child_env(MODE);
        let q = Queue::open(&dir, 1).unwrap();
        let d = q.durable_in_test().unwrap();
        assert!(d.try_lock(), "the lock was free");
        let mine = d.words().lock.load(Ordering::SeqCst);
        std::fs::write(dir.join("held"), std::process::id().to_string()).unwrap();
        if mode == "exec" {
            let e = Command::new("sleep").arg("60").exec();
            panic!("exec sleep: {e}");
        }
        let end = Instant::now() + Duration::from_secs(3);
        while Instant::now() < end {
            assert_eq!(d.words().lock.load(Ordering::SeqCst), mine, "the sync lock was taken from a live syncer");
            std::thread::sleep(Duration::from_millis(1));
        }
        std::fs::write(dir.join("released"), b"").unwrap();
        d.unlock();
    }
}
