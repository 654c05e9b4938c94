//! Sleeping on a word of shared memory and waking sleepers: Linux futexes
//! on a file-backed shared mapping (not `FUTEX_PRIVATE_FLAG`), so that the
//! sleeper and the waker may be different processes.
//!
//! The protocol that makes a wake-up impossible to miss belongs to the
//! queue layer above: a sleeper announces itself in a waiter count, reads the
//! futex word, re-checks its condition, then sleeps only if the word is
//! unchanged; a waker changes its condition, then (only if the waiter count
//! is non-zero) bumps the word and wakes.

use std::sync::atomic::AtomicU32;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::Ordering;
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
}
