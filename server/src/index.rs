//! The names of the queue directory, kept current: queue name -> ids, so
//! that resolving a name (or finding that no queue has it) costs a hash
//! lookup whether the directory holds 10 queues or 100,000; and the queues
//! of the directory that `--auto-create` made, with the bytes of their
//! files, for `--max-queues` and `--max-memory`.
//!
//! # The budget counts what exists
//! A queue `--auto-create` makes carries [`AUTO_MARK`] as its partition
//! text (`Spec::part`, in its header: `tvmq stat` shows it). The budget
//! counts every queue of the directory with that mark, read from the
//! headers as they come and go, whoever made it: this server, an earlier
//! run of it, another server serving the same directory. So a restart, or
//! a second server, starts from what is there, not from nothing. (Two
//! servers creating at the same instant may each pass the other's last
//! creations unseen: the budget may be passed by what one command creates,
//! at most 8 queues, per server creating at that instant.)
//!
//! # How it stays current
//! At start, before the server listens, an inotify watch is put on the
//! directory, then every queue file's header is read once. After that the
//! kernel queues an event for every queue file that appears (a creation
//! renames a complete temporary file into place: `IN_MOVED_TO`; `IN_CREATE`
//! is watched too) or goes (`IN_DELETE`, `IN_MOVED_FROM`), whoever made the
//! change: this server, `tvmq create`, a C program. The event is queued
//! when the creating (or removing) system call returns, so a lookup that
//! misses first applies the events queued so far (one non-blocking `read`
//! when there are none, and one header read per new queue file): a queue
//! created before a request arrives is found by it, and one dropped before
//! is not. A background thread applies them every [`DRAIN_EVERY`] as well,
//! so that drops free this server's budget without a miss.
//!
//! If the kernel's event queue overflows (`IN_Q_OVERFLOW`, more than
//! `fs.inotify.max_queued_events` changes between two drains), the
//! background thread rescans the directory and swaps the new table in;
//! meanwhile lookups answer from the table as it was (a queue created
//! during those moments may be reported missing). If inotify cannot be
//! used at all (`fs.inotify.max_user_instances` reached), the background
//! thread rescans every [`RESCAN_EVERY`] instead, and lookups never scan.
//! No scan ever runs on a worker thread.
//!
//! When a queue file goes, the background thread also removes the live
//! parts (in `/dev/shm/tvmq-<uid>`) of durable queues whose files are gone
//! ([`tvm::Queue::remove_orphaned_live_parts`]): a queue removed with
//! `rm`, not dropped, would otherwise hold that memory until a reboot.

use crate::shutdown::Shutdown;
use inotify::{EventMask, Inotify, WatchMask};
use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tvm::error::TBL_NOT_FOUND;

/// How often the background thread applies the events the kernel queued.
const DRAIN_EVERY: Duration = Duration::from_millis(100);
/// Without inotify: how often the background thread rescans the directory.
const RESCAN_EVERY: Duration = Duration::from_secs(1);
/// New queue files whose header could not be read yet (a file created in
/// place, still being written), re-read by the background thread; beyond
/// this many, the next rescan finds them.
const UNREADABLE_MAX: usize = 1024;
/// Bytes of one read of events (each event is 16 bytes + a name).
const EVENT_BUFFER: usize = 64 * 1024;

/// What a name resolves to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Found {
    /// No queue has that name.
    None,
    /// One queue has it.
    One(u32),
    /// Several have it (address them by id).
    Many(Vec<u32>),
}

#[derive(Default)]
struct Maps {
    by_name: HashMap<String, Vec<u32>>,
    /// Ordered, so that SCAN walks it from a cursor.
    by_id: BTreeMap<u32, String>,
}

impl Maps {
    fn insert(&mut self, id: u32, name: String) {
        self.remove(id);
        if !name.is_empty() {
            self.by_name.entry(name.clone()).or_default().push(id);
        }
        self.by_id.insert(id, name);
    }

    fn remove(&mut self, id: u32) {
        if let Some(name) = self.by_id.remove(&id) {
            if let Some(ids) = self.by_name.get_mut(&name) {
                ids.retain(|&i| i != id);
                if ids.is_empty() {
                    self.by_name.remove(&name);
                }
            }
        }
    }
}

/// The inotify side, one user at a time.
struct Watch {
    inotify: Option<Inotify>,
    buf: Vec<u8>,
    unreadable: HashSet<u32>,
    /// Events were lost: a rescan is due.
    overflowed: bool,
}

/// The partition text of the queues `--auto-create` makes: what the
/// budget counts.
pub(crate) const AUTO_MARK: &str = "tvmq serve --auto-create";

/// The queues of the directory marked [`AUTO_MARK`], and their file sizes.
#[derive(Default)]
struct CreatedQueues {
    sizes: HashMap<u32, u64>,
    bytes: u64,
}

impl CreatedQueues {
    fn insert(&mut self, id: u32, bytes: u64) {
        self.remove(id);
        self.sizes.insert(id, bytes);
        self.bytes += bytes;
    }

    fn remove(&mut self, id: u32) {
        if let Some(b) = self.sizes.remove(&id) {
            self.bytes -= b;
        }
    }
}

/// The bounds of auto-creation.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Budget {
    /// Queues marked as `--auto-create` made them that may exist.
    pub(crate) max_queues: usize,
    /// Bytes of the files of those queues.
    pub(crate) max_bytes: u64,
}

/// See the module documentation.
pub(crate) struct Index {
    dir: PathBuf,
    maps: RwLock<Maps>,
    watch: Mutex<Watch>,
    rescanning: AtomicBool,
    created_queues: Mutex<CreatedQueues>,
    /// Rescans since the start (the first included), for INFO and tests.
    pub(crate) rescans: AtomicU64,
    /// Queue headers read since the start (rescans' and new files'), for
    /// INFO and tests: a lookup of an unknown name reads none.
    pub(crate) headers_read: AtomicU64,
    /// A queue file went since the background thread last removed the
    /// live parts left by removed queues (see [`Index::run`]).
    orphans_due: AtomicBool,
    /// Those sweeps since the start (the first at start), for INFO and tests.
    pub(crate) orphan_sweeps: AtomicU64,
}

impl Index {
    /// Watches `dir` and reads every queue header in it. Without inotify
    /// (no instance left) it still works, from periodic rescans (a line on
    /// stderr says so).
    pub(crate) fn start(dir: &Path) -> Index {
        let inotify = match watch(dir) {
            Ok(i) => Some(i),
            Err(e) => {
                eprintln!(
                    "tvmq serve: cannot watch {} ({e}): queue names are rescanned every {} s instead",
                    dir.display(),
                    RESCAN_EVERY.as_secs()
                );
                None
            }
        };
        let index = Index {
            dir: dir.to_path_buf(),
            maps: RwLock::default(),
            watch: Mutex::new(Watch {
                inotify,
                buf: vec![0; EVENT_BUFFER],
                unreadable: HashSet::new(),
                overflowed: false,
            }),
            rescanning: AtomicBool::new(false),
            created_queues: Mutex::default(),
            rescans: AtomicU64::new(0),
            headers_read: AtomicU64::new(0),
            orphans_due: AtomicBool::new(true),
            orphan_sweeps: AtomicU64::new(0),
        };
        index.rescan(&mut index.watch.lock());
        index
    }

    /// The queue(s) named `name`, applying the queued changes first when the
    /// table knows none.
    pub(crate) fn find(&self, name: &str) -> Found {
        match self.get(name) {
            Found::None => {
                self.refresh();
                self.get(name)
            }
            found => found,
        }
    }

    fn get(&self, name: &str) -> Found {
        match self.maps.read().by_name.get(name).map(Vec::as_slice) {
            None | Some([]) => Found::None,
            Some([id]) => Found::One(*id),
            Some(ids) => Found::Many(ids.to_vec()),
        }
    }

    /// Queues in the directory, as the table knows them.
    pub(crate) fn len(&self) -> usize {
        self.maps.read().by_id.len()
    }

    /// The `max` lowest queue ids the table knows, in order, and how many
    /// it knows in all.
    pub(crate) fn lowest_ids(&self, max: usize) -> (Vec<u32>, usize) {
        let maps = self.maps.read();
        (maps.by_id.keys().copied().take(max).collect(), maps.by_id.len())
    }

    /// Up to `count` ids from `from` on, in order, and the id after the
    /// last of them (None: there is none). Costs what `count` ids do,
    /// whatever the size of the table (SCAN).
    pub(crate) fn ids_from(&self, from: u32, count: usize) -> (Vec<u32>, Option<u32>) {
        let maps = self.maps.read();
        let mut walk = maps.by_id.range(from..).map(|(&id, _)| id);
        let ids: Vec<u32> = walk.by_ref().take(count).collect();
        (ids, walk.next())
    }

    /// Applies the changes the kernel has queued (none: one `read`). Does not
    /// wait for a rescan in progress: the table is answered as it is.
    pub(crate) fn refresh(&self) {
        let mut w = loop {
            if self.rescanning.load(Ordering::Acquire) {
                return;
            }
            if let Some(w) = self.watch.try_lock_for(Duration::from_millis(1)) {
                break w;
            }
        };
        self.drain(&mut w, false);
    }

    /// Records queue `id`, named `name`, which this server just created
    /// (marked [`AUTO_MARK`]) with a file of `bytes` bytes.
    pub(crate) fn created(&self, id: u32, name: &str, bytes: u64) {
        self.maps.write().insert(id, name.to_string());
        self.created_queues.lock().insert(id, bytes);
    }

    /// Queues of the directory marked as `--auto-create` made them, and
    /// their bytes.
    pub(crate) fn created_queues(&self) -> (usize, u64) {
        let created_queues = self.created_queues.lock();
        (created_queues.sizes.len(), created_queues.bytes)
    }

    /// May this server create `n` more queues of `bytes` bytes each?
    /// Else the reason, in words. Changes not applied yet are applied first.
    pub(crate) fn check_budget(&self, budget: &Budget, n: usize, bytes: u64) -> Result<(), String> {
        let fits = |(queues, used): (usize, u64)| {
            let more = bytes.saturating_mul(n as u64);
            if queues.saturating_add(n) > budget.max_queues {
                Err(format!(
                    "{queues} queues made by --auto-create exist in the directory, {n} more would pass \
                     --max-queues {}",
                    budget.max_queues
                ))
            } else if used.saturating_add(more) > budget.max_bytes {
                Err(format!(
                    "the {queues} queues made by --auto-create in the directory take {used} bytes, {more} more \
                     would pass --max-memory {}",
                    budget.max_bytes
                ))
            } else {
                Ok(())
            }
        };
        // What others made or dropped up to now counts: applied first (one
        // `read` when nothing changed; creations run in the pool).
        self.refresh();
        fits(self.created_queues())
    }

    fn forget(&self, id: u32) {
        self.maps.write().remove(id);
        self.created_queues.lock().remove(id);
    }

    /// Reads the events queued and applies them, in order; and, if `retry`,
    /// reads again the headers that could not be read before (the
    /// background thread does, not a lookup: a file that never becomes a
    /// valid queue must not cost every lookup a read).
    fn drain(&self, w: &mut Watch, retry: bool) {
        let Watch { inotify, buf, unreadable, overflowed } = w;
        let Some(ino) = inotify.as_mut() else { return };
        let mut lost = false;
        loop {
            let events = match ino.read_events(buf) {
                Ok(events) => events,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    eprintln!("tvmq serve: cannot read the changes of {}: {e}", self.dir.display());
                    *overflowed = true;
                    break;
                }
            };
            let mut changes = Vec::new();
            for e in events {
                if e.mask.contains(EventMask::Q_OVERFLOW) {
                    *overflowed = true;
                } else if e.mask.intersects(EventMask::IGNORED | EventMask::DELETE_SELF | EventMask::MOVE_SELF) {
                    // The directory itself went: watch it again at the rescan.
                    lost = true;
                    *overflowed = true;
                } else if let Some(id) = e.name.and_then(tvm::queue_file_id) {
                    changes.push((id, e.mask.intersects(EventMask::CREATE | EventMask::MOVED_TO)));
                }
            }
            for (id, appeared) in changes {
                unreadable.remove(&id);
                if appeared {
                    self.read_one(id, unreadable)
                } else {
                    self.forget(id);
                    self.orphans_due.store(true, Ordering::Relaxed);
                }
            }
        }
        if lost {
            *inotify = None;
        }
        if !retry {
            return;
        }
        for id in unreadable.clone() {
            unreadable.remove(&id);
            self.read_one(id, unreadable);
        }
    }

    /// [`read_header`] of queue `id`, counted.
    fn read_counted(&self, id: u32) -> tvm::Result<(String, Option<u64>)> {
        self.headers_read.fetch_add(1, Ordering::Relaxed);
        read_header(&self.dir, id)
    }

    /// Reads the header of queue `id`, new in the directory.
    fn read_one(&self, id: u32, unreadable: &mut HashSet<u32>) {
        match self.read_counted(id) {
            Ok((name, marked)) => {
                self.maps.write().insert(id, name);
                let mut created_queues = self.created_queues.lock();
                match marked {
                    Some(bytes) => created_queues.insert(id, bytes),
                    None => created_queues.remove(id),
                }
            }
            Err(e) if e.code() == TBL_NOT_FOUND => self.forget(id),
            Err(_) => {
                if unreadable.len() < UNREADABLE_MAX {
                    unreadable.insert(id);
                }
            }
        }
    }

    /// Reads every queue header of the directory and replaces the table
    /// (watching the directory again first if the watch was lost).
    fn rescan(&self, w: &mut Watch) {
        self.rescanning.store(true, Ordering::Release);
        if w.inotify.is_none() {
            w.inotify = watch(&self.dir).ok();
        }
        // Events queued before the scan are covered by it: discard them.
        if let Some(ino) = w.inotify.as_mut() {
            while ino.read_events(&mut w.buf).is_ok_and(|e| e.count() > 0) {}
        }
        w.overflowed = false;
        w.unreadable.clear();
        let mut maps = Maps::default();
        let mut created = CreatedQueues::default();
        for id in tvm::queue_ids(&self.dir).unwrap_or_default() {
            match self.read_counted(id) {
                Ok((name, marked)) => {
                    maps.insert(id, name);
                    if let Some(bytes) = marked {
                        created.insert(id, bytes);
                    }
                }
                Err(_) => {
                    if w.unreadable.len() < UNREADABLE_MAX {
                        w.unreadable.insert(id);
                    }
                }
            }
        }
        *self.created_queues.lock() = created;
        *self.maps.write() = maps;
        self.rescans.fetch_add(1, Ordering::Relaxed);
        self.rescanning.store(false, Ordering::Release);
        // What changed during the scan.
        self.drain(w, false);
    }

    /// The background thread: see the module documentation.
    pub(crate) fn run(&self, stop: &Shutdown) {
        let mut since_rescan = Duration::ZERO;
        while !stop.is_set() {
            std::thread::sleep(DRAIN_EVERY);
            since_rescan += DRAIN_EVERY;
            let mut w = self.watch.lock();
            self.drain(&mut w, true);
            if w.overflowed || (w.inotify.is_none() && since_rescan >= RESCAN_EVERY) {
                self.rescan(&mut w);
                since_rescan = Duration::ZERO;
                // Without events, a removal is seen only at a rescan.
                self.orphans_due.store(true, Ordering::Relaxed);
            }
            drop(w);
            if self.orphans_due.swap(false, Ordering::Relaxed) {
                // A queue file went (removed by `rm`, say, not dropped):
                // the live part in tmpfs of a durable one is memory nobody
                // frees otherwise. Here, never on a worker: it stats files.
                tvm::Queue::remove_orphaned_live_parts();
                self.orphan_sweeps.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The name in the header of queue `id` of `dir`, and, if it carries
/// [`AUTO_MARK`], the bytes of its file.
fn read_header(dir: &Path, id: u32) -> tvm::Result<(String, Option<u64>)> {
    let (name, part) = tvm::queue_name_and_part(dir, id)?;
    let marked = (part == AUTO_MARK).then(|| std::fs::metadata(tvm::queue_path(dir, id)).map_or(0, |m| m.len()));
    Ok((name, marked))
}

/// An inotify instance watching `dir` for queue files that come and go.
fn watch(dir: &Path) -> std::io::Result<Inotify> {
    let ino = Inotify::init()?;
    ino.watches().add(
        dir,
        WatchMask::CREATE
            | WatchMask::MOVED_TO
            | WatchMask::DELETE
            | WatchMask::MOVED_FROM
            | WatchMask::DELETE_SELF
            | WatchMask::MOVE_SELF
            | WatchMask::ONLYDIR,
    )?;
    Ok(ino)
}

/// Starts the background thread of `index`.
pub(crate) fn spawn(index: Arc<Index>, stop: Arc<Shutdown>) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new().name("tvmq-index".into()).spawn(move || index.run(&stop))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_ids_and_back() {
        let mut m = Maps::default();
        m.insert(1, "a".into());
        m.insert(2, "a".into());
        m.insert(3, String::new());
        assert_eq!(m.by_name["a"], vec![1, 2]);
        m.insert(1, "b".into());
        assert_eq!(m.by_name["a"], vec![2]);
        m.remove(2);
        assert!(!m.by_name.contains_key("a"));
        m.remove(3);
        assert_eq!(m.by_id.len(), 1);
    }
}
