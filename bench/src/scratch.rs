//! What a run leaves behind if it is stopped: its queue directory, the
//! files of its peers in /dev/shm (Boost queues, DPDK rings), its
//! directories on the disk, and its child processes. SIGINT (Ctrl-C) and
//! SIGTERM are caught by a thread of their own, which kills the children,
//! removes every path remembered here and exits with the shell's status for
//! the signal (130, 143).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The paths to remove if the run is stopped (files or directories).
static PATHS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// `path` is removed if the run is stopped by a signal.
pub(crate) fn remember(path: &Path) {
    if let Ok(mut paths) = PATHS.lock() {
        paths.push(path.to_path_buf());
    }
}

/// `path` was removed by the run itself: no longer ours to remove.
pub(crate) fn forget(path: &Path) {
    if let Ok(mut paths) = PATHS.lock() {
        paths.retain(|p| p != path);
    }
}

/// From now on SIGINT and SIGTERM stop the run cleanly. Call before the run
/// starts any thread: the signals are blocked in this thread, so in every
/// thread it starts, and a thread of its own waits for them. (Child
/// processes start with no signal blocked: std's `Command` resets the mask.)
pub(crate) fn catch_signals() -> Result<(), String> {
    // SAFETY: a sigset_t filled by sigemptyset/sigaddset before use, and
    // pthread_sigmask on the calling thread with valid pointers.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return Err("cannot block SIGINT and SIGTERM".into());
        }
        set
    };
    std::thread::Builder::new()
        .name("bench-signals".into())
        .spawn(move || {
            let mut sig = 0;
            // SAFETY: sigwait with the set built above and a valid out pointer.
            while unsafe { libc::sigwait(&set, &mut sig) } != 0 {}
            stop(sig)
        })
        .map(|_| ())
        .map_err(|e| format!("cannot start the signal thread: {e}"))
}

/// Kills the children, removes the remembered paths, and exits.
fn stop(sig: i32) -> ! {
    let name = if sig == libc::SIGINT { "SIGINT" } else { "SIGTERM" };
    eprintln!("\ntvmq bench: stopped by {name}: killing its child processes and removing its files");
    for pid in descendants(std::process::id()) {
        // SAFETY: kill(2) of a process id read from /proc; the worst a
        // reused id can suffer is a signal it would not have had.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    let paths = PATHS.lock().map(|p| p.clone()).unwrap_or_default();
    for path in paths.iter().rev() {
        // A thread of the run may be creating a file in a directory being
        // removed: a few tries.
        for _ in 0..5 {
            let gone = match std::fs::symlink_metadata(path) {
                Err(_) => true,
                Ok(m) if m.is_dir() => std::fs::remove_dir_all(path).is_ok(),
                Ok(_) => std::fs::remove_file(path).is_ok(),
            };
            if gone {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        if path.exists() {
            eprintln!("tvmq bench: could not remove {}", path.display());
        }
    }
    std::process::exit(128 + sig)
}

/// Every process descending from `root`, children first (read from /proc).
fn descendants(root: u32) -> Vec<u32> {
    let mut parent_of = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for e in entries.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
            // /proc/<pid>/stat: "pid (comm) state ppid ...", comm may hold spaces and parentheses.
            let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else { continue };
            let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else { continue };
            if let Some(ppid) = after.split_whitespace().nth(1).and_then(|p| p.parse::<u32>().ok()) {
                parent_of.push((pid, ppid));
            }
        }
    }
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(parent_of.iter().filter(|&&(_, pp)| pp == parent).map(|&(p, _)| p));
        i += 1;
    }
    found.remove(0);
    found
}
