//! The stop signal of the whole server: a flag every thread can poll, and a
//! notification for the tasks that sleep until it.

use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::Notify;

/// The stop signal: a flag, and a notification for whoever sleeps.
#[derive(Default)]
pub(crate) struct Shutdown {
    flag: AtomicBool,
    notify: Notify,
}

impl Shutdown {
    /// Has the stop begun?
    #[inline]
    pub(crate) fn is_set(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }

    /// Begins the stop and wakes everyone waiting for it.
    pub(crate) fn set(&self) {
        self.flag.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    /// Completes once the stop has begun.
    pub(crate) async fn wait(&self) {
        let notified = self.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.is_set() {
            return;
        }
        notified.await;
    }
}
