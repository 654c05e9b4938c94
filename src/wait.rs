//! Sleeping on a word of shared memory and waking sleepers: Linux futexes
//! on a file-backed shared mapping (not `FUTEX_PRIVATE_FLAG`), so that the
//! sleeper and the waker may be different processes.
//!
//! The protocol that makes a wake-up impossible to miss belongs to the
//! queue layer above: a sleeper announces itself in a waiter count, reads the
//! futex word, re-checks its condition, then sleeps only if the word is
//! unchanged; a waker changes its condition, then (only if the waiter count
//! is non-zero) bumps the word and wakes.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// How a sleep ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woken {
    /// Woken, or the word had already changed, or a signal: re-check.
    Maybe,
    /// The timeout passed.
    TimedOut,
}

/// Sleeps while `*word == expected`, at most `timeout` (`None`: no limit).
pub(crate) fn wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> Woken {
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: d.as_secs().min(libc::time_t::MAX as u64) as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a live AtomicU32 (4-byte aligned) and `ts_ptr` is null
    // or points to a timespec that outlives the call. FUTEX_WAIT only reads them.
    let rc = unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT, expected, ts_ptr, 0usize, 0u32) };
    if rc == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ETIMEDOUT) {
        Woken::TimedOut
    } else {
        Woken::Maybe
    }
}

/// Wakes up to `n` sleepers on `word`; returns how many were woken.
pub(crate) fn wake(word: &AtomicU32, n: u32) -> u32 {
    let n = n.min(i32::MAX as u32);
    // SAFETY: `word` is a live AtomicU32; FUTEX_WAKE does not access memory.
    let rc = unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, n, 0usize, 0usize, 0u32) };
    u32::try_from(rc).unwrap_or(0)
}

/// The most words one `wait_any` call sleeps on: the kernel's limit for
/// `futex_waitv`.
pub const WAIT_ANY_MAX: usize = 128;

/// One word of a `futex_waitv` call, as the kernel reads it.
#[repr(C)]
struct FutexWaitv {
    val: u64,
    uaddr: u64,
    flags: u32,
    reserved: u32,
}

/// `FUTEX2_SIZE_U32`: the word is 32 bits (and, without `FUTEX2_PRIVATE`,
/// may be shared between processes).
const FUTEX2_SIZE_U32: u32 = 0x02;

/// How a [`wait_any`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WokenAny {
    /// Woken, or a word had already changed, or a signal: re-check.
    Maybe,
    /// The timeout passed.
    TimedOut,
    /// The kernel has no `futex_waitv` (before Linux 5.16): nothing slept.
    Unsupported,
}

/// Sleeps while every `*word == expected` of `words` (at most
/// [`WAIT_ANY_MAX`] of them), at most `timeout`: one `futex_waitv` call,
/// woken by a `FUTEX_WAKE` on any of the words.
pub(crate) fn wait_any(words: &[(&AtomicU32, u32)], timeout: Duration) -> WokenAny {
    debug_assert!(!words.is_empty() && words.len() <= WAIT_ANY_MAX);
    let words = &words[..words.len().min(WAIT_ANY_MAX)];
    let waitv: Vec<FutexWaitv> = words
        .iter()
        .map(|(w, v)| FutexWaitv { val: u64::from(*v), uaddr: w.as_ptr() as u64, flags: FUTEX2_SIZE_U32, reserved: 0 })
        .collect();
    // futex_waitv takes an absolute time on the clock it is given.
    // SAFETY: timespec is plain data; all-zero is a valid value for the call to fill.
    let mut now: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: a valid clock id and out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    let total_ns = (now.tv_nsec as u64).saturating_add(u64::from(timeout.subsec_nanos()));
    let secs = (now.tv_sec as u64).saturating_add(timeout.as_secs()).saturating_add(total_ns / 1_000_000_000);
    let until = libc::timespec {
        tv_sec: secs.min(libc::time_t::MAX as u64) as libc::time_t,
        tv_nsec: (total_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `waitv` holds `waitv.len()` initialised entries, each naming a
    // live, 4-byte aligned AtomicU32 borrowed for the whole call; `until`
    // outlives the call. futex_waitv only reads them.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex_waitv,
            waitv.as_ptr(),
            waitv.len() as libc::c_uint,
            0u32,
            &until as *const libc::timespec,
            libc::CLOCK_MONOTONIC,
        )
    };
    if rc >= 0 {
        return WokenAny::Maybe;
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::ETIMEDOUT) => WokenAny::TimedOut,
        Some(libc::ENOSYS) => WokenAny::Unsupported,
        _ => WokenAny::Maybe,
    }
}

/// A word of this process's memory that one thread sleeps on (with
/// [`crate::Queue::wait_for_any_push`], beside queues) and others ring to
/// wake it: say, to tell a watcher thread that its set of queues changed.
#[derive(Debug, Default)]
pub struct Bell(AtomicU32);

impl Bell {
    /// A new bell.
    pub fn new() -> Bell {
        Bell::default()
    }

    /// Its value now: give it to the sleep, which returns at once if the
    /// bell rang since.
    pub fn value(&self) -> u32 {
        self.0.load(Ordering::SeqCst)
    }

    /// Rings it: every sleep given an older value returns.
    pub fn ring(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
        wake(&self.0, u32::MAX);
    }

    pub(crate) fn word(&self) -> &AtomicU32 {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn wait_returns_at_once_when_the_word_changed() {
        let w = AtomicU32::new(5);
        assert_eq!(wait(&w, 4, Some(Duration::from_secs(10))), Woken::Maybe);
    }

    #[test]
    fn wait_times_out() {
        let w = AtomicU32::new(5);
        let t = Instant::now();
        assert_eq!(wait(&w, 5, Some(Duration::from_millis(30))), Woken::TimedOut);
        assert!(t.elapsed() >= Duration::from_millis(25));
    }

    #[test]
    fn wake_reaches_a_sleeper() {
        // The word never changes: only a wake-up (or the 20 s timeout) ends the sleep.
        let w = Arc::new(AtomicU32::new(0));
        let w2 = w.clone();
        let sleeper = std::thread::spawn(move || {
            let t = Instant::now();
            let r = wait(&w2, 0, Some(Duration::from_secs(20)));
            (r, t.elapsed())
        });
        // Until the sleeper is asleep, there is nobody to wake: wake reports 0.
        let deadline = Instant::now() + Duration::from_secs(10);
        let woken = loop {
            let n = wake(&w, 1);
            if n > 0 || Instant::now() > deadline {
                break n;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        assert_eq!(woken, 1, "wake reports the one sleeper it woke");
        let (r, slept) = sleeper.join().unwrap();
        assert_eq!(r, Woken::Maybe);
        assert!(slept < Duration::from_secs(10), "the wake ended the sleep, not its 20 s timeout: slept {slept:?}");
        assert_eq!(w.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn wait_any_returns_at_once_when_a_word_changed() {
        let (a, b) = (AtomicU32::new(1), AtomicU32::new(2));
        let t = Instant::now();
        assert_eq!(wait_any(&[(&a, 1), (&b, 3)], Duration::from_secs(10)), WokenAny::Maybe);
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn wait_any_times_out() {
        let (a, b) = (AtomicU32::new(1), AtomicU32::new(2));
        let t = Instant::now();
        assert_eq!(wait_any(&[(&a, 1), (&b, 2)], Duration::from_millis(30)), WokenAny::TimedOut);
        assert!(t.elapsed() >= Duration::from_millis(25));
    }

    #[test]
    fn a_wake_on_any_word_ends_wait_any() {
        // 100 words; only the 77th is woken, and none changes: only that
        // wake-up (or the 20 s timeout) ends the sleep.
        let words: Arc<Vec<AtomicU32>> = Arc::new((0..100).map(|_| AtomicU32::new(0)).collect());
        let w2 = words.clone();
        let sleeper = std::thread::spawn(move || {
            let list: Vec<(&AtomicU32, u32)> = w2.iter().map(|w| (w, 0)).collect();
            let t = Instant::now();
            (wait_any(&list, Duration::from_secs(20)), t.elapsed())
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        while wake(&words[77], 1) == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        let (r, slept) = sleeper.join().unwrap();
        assert_eq!(r, WokenAny::Maybe);
        assert!(slept < Duration::from_secs(10), "woken by the wake of one word: slept {slept:?}");
    }

    #[test]
    fn a_bell_wakes_its_sleeper() {
        let bell = Arc::new(Bell::new());
        let b2 = bell.clone();
        let seen = bell.value();
        let sleeper = std::thread::spawn(move || {
            let t = Instant::now();
            (wait_any(&[(b2.word(), seen)], Duration::from_secs(20)), t.elapsed())
        });
        std::thread::sleep(Duration::from_millis(20));
        bell.ring();
        let (r, slept) = sleeper.join().unwrap();
        assert_eq!(r, WokenAny::Maybe);
        assert!(slept < Duration::from_secs(10), "slept {slept:?}");
        assert_ne!(bell.value(), seen);
    }
}
