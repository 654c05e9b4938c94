//! Test aids: the hooks that unit tests put in place of a sync's system
//! calls, and the sync delay a program built on the library sets for its
//! own tests.

#[cfg(test)]
use std::cell::Cell;
use std::time::Duration;

/// What a test's sync hook is told.
#[cfg(test)]
pub(crate) enum SyncEvent<'a> {
    /// A sync begins (before `started` is counted).
    Begin,
    /// In place of the sync's system calls: the mapping's first byte and
    /// length, whether the control page is synced too (the slots always
    /// are), and for a queue with an image the writes into it (mapping
    /// offset, bytes, file offset). The hook may copy what "reaches the disk".
    Synced { base: *const u8, len: usize, control: bool, writes: &'a [(u64, u64, u64)] },
    /// (`interval` queues with leases.) After `Synced`, before the image
    /// writes: the lease table is persisted in place (the mapping's first
    /// byte and length; the hook may copy what reaches the disk).
    LeaseTable { base: *const u8, len: usize },
}

/// A test's replacement for the sync system calls (see [`SyncEvent`]).
#[cfg(test)]
pub(crate) type SyncHook = std::sync::Arc<dyn Fn(&SyncEvent) + Send + Sync>;

/// Hooks by queue file path, installed by tests before the queue is opened.
#[cfg(test)]
pub(crate) fn hooks() -> &'static std::sync::Mutex<Vec<(std::path::PathBuf, SyncHook)>> {
    static HOOKS: std::sync::Mutex<Vec<(std::path::PathBuf, SyncHook)>> = std::sync::Mutex::new(Vec::new());
    &HOOKS
}

/// Are the syncs of the queue file at `path` replaced by a test's hook
/// (then its filesystem does not matter)?
pub(crate) fn hooked(path: &std::path::Path) -> bool {
    #[cfg(test)]
    return hooks().lock().is_ok_and(|h| h.iter().any(|(p, _)| p == path));
    #[cfg(not(test))]
    {
        let _ = path;
        false
    }
}

/// A test aid: each sync is made this much slower
/// (`TVMQ_TEST_SYNC_DELAY_MS`, read once), so that the tests of a program
/// built on the library (the server's) see which threads wait for syncs.
pub(super) fn test_sync_delay() -> Option<Duration> {
    static DELAY: std::sync::OnceLock<Option<Duration>> = std::sync::OnceLock::new();
    *DELAY.get_or_init(|| {
        let ms = std::env::var("TVMQ_TEST_SYNC_DELAY_MS").ok()?.parse::<u64>().ok()?;
        (ms > 0).then(|| Duration::from_millis(ms))
    })
}

#[cfg(test)]
thread_local! {
    /// The next sync this thread runs fails before it writes anything,
    /// as one whose process is killed before its writes leaves the
    /// queue (its marks moved, nothing written).
    pub(crate) static FAIL_NEXT_SYNC: Cell<bool> = const { Cell::new(false) };
}
