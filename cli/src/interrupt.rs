//! SIGINT and SIGTERM during a command that works record by record (`tvmq
//! import`): caught, so that the command stops between records and says
//! what it did, instead of dying silently halfway.

use std::io::Read;
use std::sync::atomic::{AtomicI32, Ordering};

/// The signal caught, 0 for none.
static CAUGHT: AtomicI32 = AtomicI32::new(0);

extern "C" fn note(sig: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    CAUGHT.store(sig, Ordering::SeqCst);
}

/// From now on SIGINT and SIGTERM are noted rather than fatal (a read
/// waiting on a terminal or pipe returns, as they are caught without
/// SA_RESTART). Call before starting threads.
pub fn catch() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a sigaction struct zeroed then filled; the handler only
        // stores into an atomic, which is async-signal-safe.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = note as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut act.sa_mask);
            libc::sigaction(sig, &act, std::ptr::null_mut());
        }
    }
}

/// The signal caught since [`catch`], if any.
pub fn caught() -> Option<i32> {
    match CAUGHT.load(Ordering::SeqCst) {
        0 => None,
        sig => Some(sig),
    }
}

/// The signal's name, for messages.
pub fn name(sig: i32) -> &'static str {
    match sig {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        _ => "a signal",
    }
}

/// A reader that fails (`Interrupted by ...`) once a signal was caught, so
/// that whoever reads from it stops at its next read.
pub struct Interruptible<R>(pub R);

impl<R: Read> Read for Interruptible<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            if let Some(sig) = caught() {
                return Err(std::io::Error::other(format!("interrupted by {}", name(sig))));
            }
            match self.0.read(buf) {
                // A read cut short by the signal: the loop looks at it.
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                r => return r,
            }
        }
    }
}
