//! Keys to queues: a queue id in decimal (`21`) or a queue name, looked up
//! in the server's index of its directory ([`crate::index`]; a name never
//! becomes a path), attached once per server and cached per connection and
//! per worker; `--auto-create` makes missing ones, within its bounds, off
//! the workers ([`create_off_worker`]: creating a big queue writes its whole
//! file, which took a worker 1.5 s for 1.2 GB, while its other connections
//! got nothing).
//!
//! # The ids of auto-created queues
//! A numeric key creates that id. A name gets an id from a hash of the name
//! (FNV-1a) in `AUTO_ID_BASE..AUTO_ID_BASE + AUTO_ID_SPAN`, then the next
//! ones in that range if taken: creation fails with `TBL_ARD_EXIST` on a
//! taken id, and a taken id whose queue has that very name (another process
//! made it meanwhile) is that queue. Every process following the scheme
//! probes the same ids in the same order, so two of them creating the same
//! name at once end up with one queue.

/// Why `key` can be no queue's key (empty, longer than a name, a NUL,
/// not UTF-8), checked before any lookup; a decimal id always passes.
pub(crate) fn check_key_name(key: &[u8]) -> Result<(), KeyError> {
    let why = match key {
        [] => "a key is 1 to 63 bytes, this one is empty",
        k if k.len() > MAX_NAME => "a key is 1 to 63 bytes",
        k if k.contains(&0) => "a key holds no NUL byte",
        k if std::str::from_utf8(k).is_err() => "a key is UTF-8 text",
        _ => return Ok(()),
    };
    Err(KeyError::InvalidName(why))
}

use crate::index::{AUTO_MARK, Found};
use crate::open::Handle;
use crate::state::ServerState;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use tvm::error::{Error, IDX_DATA_MISM, MQUE_CRTE_BIG, TBL_ARD_EXIST, TBL_NOT_FOUND};
use tvm::{Queue, Spec};

/// First id of auto-created named queues (1 << 30).
pub const AUTO_ID_BASE: u32 = 1 << 30;
/// How many ids the scheme uses.
pub const AUTO_ID_SPAN: u32 = 1 << 30;
/// How many taken ids are stepped over before giving up.
const PROBES: u32 = 64;
/// The longest name a queue header keeps, in bytes.
pub(crate) const MAX_NAME: usize = 63;

/// Why a key names no queue.
#[derive(Debug)]
pub(crate) enum KeyError {
    /// No such queue (and no auto-creation): `-ERR no such queue '<key>'`.
    NoSuchQueue,
    /// A queue error (several queues with that name, creation failed, ...).
    Queue(Error),
    /// No queue can have this key: `-ERR invalid key '<key>': <why>`.
    InvalidName(&'static str),
}

/// FNV-1a, 32 bits.
fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, &b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193))
}

/// The id the scheme tries first for `name`.
pub fn auto_id(name: &str) -> u32 {
    AUTO_ID_BASE + fnv1a(name.as_bytes()) % AUTO_ID_SPAN
}

/// The most queues one command may create (a blocking pop naming more
/// missing keys is refused, creating nothing).
pub(crate) const MAX_CREATES_PER_COMMAND: usize = 8;

/// The refusal of a command naming `n` missing queues (`at_least`: `n` or
/// more; the rest were not looked up), more than
/// [`MAX_CREATES_PER_COMMAND`].
pub(crate) fn too_many_creates(n: usize, at_least: bool) -> KeyError {
    KeyError::Queue(Error::new(
        MQUE_CRTE_BIG,
        format!(
            "{}{n} missing queues named in one command, at most {MAX_CREATES_PER_COMMAND} are created by one: \
             nothing created",
            if at_least { "at least " } else { "" }
        ),
    ))
}

/// A key's queue id, if the key is one (`21`, not `021`).
fn numeric(key: &str) -> Option<u32> {
    key.parse::<u32>().ok().filter(|id| id.to_string() == key)
}

/// Creates the queues of `keys` as [`create_missing`] does, in the server's
/// pool ([`crate::pool`]), while the calling task waits (the worker
/// serves its other connections). Concurrent creators of one key get one
/// queue (`create_missing` creates one at a time, and finds a queue made
/// meanwhile). `Err`: the key to name in the error reply, and why.
pub(crate) async fn create_off_worker(shared: Arc<ServerState>, keys: Vec<Vec<u8>>) -> Result<(), (Vec<u8>, KeyError)> {
    let first = keys.first().cloned().unwrap_or_default();
    let pool = shared.pool.clone();
    let made = pool
        .run(crate::pool::Kind::Heavy, move || {
            let delay = test_create_delay();
            if !delay.is_zero() {
                std::thread::sleep(delay);
            }
            let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
            create_missing(&shared, &refs).map(|_| ())
        })
        .await;
    match made {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err((first, e)),
        Err(_) => Err((
            first,
            KeyError::Queue(Error::new(
                MQUE_CRTE_BIG,
                "queue creation did not complete (the server is stopping, or it failed)",
            )),
        )),
    }
}

/// A test aid: each auto-creation is made this much slower
/// (`TVMQ_SERVE_TEST_CREATE_DELAY_MS`), so that tests can see what runs
/// while one is in progress.
fn test_create_delay() -> std::time::Duration {
    static DELAY: std::sync::OnceLock<std::time::Duration> = std::sync::OnceLock::new();
    *DELAY.get_or_init(|| {
        let ms = std::env::var("TVMQ_SERVE_TEST_CREATE_DELAY_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
        std::time::Duration::from_millis(ms)
    })
}

/// The queue `key` names, `None` if there is none: a numeric key is opened
/// (one failed open when it does not exist), a name is looked up in the
/// server's index, which never scans the directory.
pub(crate) fn find(shared: &ServerState, key: &[u8]) -> Result<Option<Arc<Queue>>, KeyError> {
    find_handle(shared, key).map(|found| found.map(|(q, _)| q))
}

/// [`find`], with the queue's [`Handle`] for a cache.
fn find_handle(shared: &ServerState, key: &[u8]) -> Result<Option<(Arc<Queue>, Handle)>, KeyError> {
    check_key_name(key)?;
    let Ok(key) = std::str::from_utf8(key) else { return Ok(None) };
    if let Some(id) = numeric(key) {
        return match shared.attachments.handle(id) {
            Ok(found) => Ok(Some(found)),
            Err(e) if e.code() == TBL_NOT_FOUND => Ok(None),
            Err(e) => Err(KeyError::Queue(e)),
        };
    }
    // Twice: the table may lag behind a queue dropped or re-created under
    // another name (its change not applied yet): the second look applies it.
    for _ in 0..2 {
        match shared.index.find(key) {
            Found::None => return Ok(None),
            Found::One(id) => match shared.attachments.handle(id) {
                Ok(found) if found.0.name() == key => return Ok(Some(found)),
                Ok(_) => {}
                Err(e) if e.code() == TBL_NOT_FOUND => {}
                Err(e) => return Err(KeyError::Queue(e)),
            },
            Found::Many(ids) => {
                return Err(KeyError::Queue(Error::new(
                    IDX_DATA_MISM,
                    format!("{} queues are named {key:?} ({ids:?}): use the queue id", ids.len()),
                )));
            }
        }
        shared.index.refresh();
    }
    Ok(None)
}

/// Creates the queues of `keys` (missing ones, distinct), all or none as
/// far as the bounds go: more than [`MAX_CREATES_PER_COMMAND`], or past
/// `--max-queues` or `--max-memory`, is refused before any is created.
pub(crate) fn create_missing(shared: &ServerState, keys: &[&[u8]]) -> Result<Vec<Arc<Queue>>, KeyError> {
    let Some(a) = shared.args.auto_create else { return Err(KeyError::NoSuchQueue) };
    let quoted = || {
        let shown: Vec<String> = keys.iter().take(3).map(|k| crate::reply::quoted_key(k)).collect();
        format!("{}{}", shown.join(", "), if keys.len() > 3 { ", ..." } else { "" })
    };
    if keys.len() > MAX_CREATES_PER_COMMAND {
        return Err(too_many_creates(keys.len(), false));
    }
    let _one_at_a_time = shared.create_lock.lock();
    shared.index.check_budget(&shared.budget, keys.len(), shared.auto_bytes).map_err(|why| {
        KeyError::Queue(Error::new(MQUE_CRTE_BIG, format!("cannot create {}: {why}: nothing created", quoted())))
    })?;
    let mut queues = Vec::with_capacity(keys.len());
    for key in keys {
        let Ok(key) = std::str::from_utf8(key) else { return Err(KeyError::NoSuchQueue) };
        let q = match numeric(key) {
            Some(id) => create_id(shared, id, a.rows, a.size)?,
            None => create_named(shared, key, a.rows, a.size)?,
        };
        queues.push(q);
    }
    Ok(queues)
}

/// A queue as `--auto-create` makes it: marked, for the budget.
fn auto_spec(rows: u64, size: u64) -> Spec {
    let mut spec = Spec::new(rows, size);
    spec.part = AUTO_MARK.to_string();
    spec
}

fn create_id(shared: &ServerState, id: u32, rows: u64, size: u64) -> Result<Arc<Queue>, KeyError> {
    match Queue::create(shared.dir(), id, &auto_spec(rows, size)) {
        Ok(()) => shared.index.created(id, "", shared.auto_bytes),
        Err(e) if e.code() == TBL_ARD_EXIST => {}
        Err(e) => return Err(KeyError::Queue(e)),
    }
    shared.attachments.get(id).map_err(KeyError::Queue)
}

fn create_named(shared: &ServerState, name: &str, rows: u64, size: u64) -> Result<Arc<Queue>, KeyError> {
    if name.is_empty() || name.len() > MAX_NAME || name.contains('\0') {
        return Err(KeyError::Queue(Error::new(
            MQUE_CRTE_BIG,
            format!("cannot create a queue named {name:?}: names are 1 to {MAX_NAME} bytes, without NUL"),
        )));
    }
    // Another worker may have made it while we waited for the lock.
    if let Some(q) = find(shared, name.as_bytes())? {
        return Ok(q);
    }
    let mut spec = auto_spec(rows, size);
    spec.name = name.to_string();
    let first = auto_id(name);
    for i in 0..PROBES {
        let id = AUTO_ID_BASE + (first - AUTO_ID_BASE).wrapping_add(i) % AUTO_ID_SPAN;
        match Queue::create(shared.dir(), id, &spec) {
            Ok(()) => {
                shared.index.created(id, name, shared.auto_bytes);
                return shared.attachments.get(id).map_err(KeyError::Queue);
            }
            Err(e) if e.code() == TBL_ARD_EXIST => match shared.attachments.get(id) {
                Ok(q) if q.name() == name => return Ok(q),
                _ => continue,
            },
            Err(e) => return Err(KeyError::Queue(e)),
        }
    }
    Err(KeyError::Queue(Error::new(
        IDX_DATA_MISM,
        format!("cannot create a queue named {name:?}: {PROBES} ids from {first} are taken"),
    )))
}

/// The queues a worker thread has resolved, by key bytes: handles, which do
/// not hold the queues open (see [`crate::open`]).
#[derive(Default)]
pub(crate) struct WorkerKeys {
    map: RefCell<HashMap<Box<[u8]>, Handle>>,
}

/// Entries a worker keeps at most (a client sending random keys cannot grow it further).
const WORKER_CACHE_MAX: usize = 4096;

impl WorkerKeys {
    fn get(&self, shared: &ServerState, key: &[u8]) -> Option<Arc<Queue>> {
        self.map.borrow().get(key)?.get(&shared.attachments)
    }

    /// Forgets the queues closed or dropped since they were cached, and
    /// lets go of the dropped ones in the server's table, so that their
    /// mappings are given back (a connection that uses one keeps it until
    /// its batch of commands is done).
    pub(crate) fn purge_dropped(&self, shared: &ServerState) {
        self.map.borrow_mut().retain(|_, h| !h.is_gone());
        shared.attachments.purge_dropped();
    }

    fn put(&self, key: &[u8], h: Handle) {
        let mut map = self.map.borrow_mut();
        if map.len() >= WORKER_CACHE_MAX {
            map.retain(|_, h| !h.is_gone());
            if map.len() >= WORKER_CACHE_MAX {
                map.clear();
            }
        }
        map.insert(key.into(), h);
    }
}

/// The queue a connection used last, and its key: held open while the
/// connection runs a batch of commands, let go of ([`forget`](Self::forget))
/// when it waits for the next, so that an idle connection holds no queue
/// open.
#[derive(Default)]
pub(crate) struct LastKey {
    key: Vec<u8>,
    queue: Option<Arc<Queue>>,
}

impl LastKey {
    /// The queue `key` names: the connection's last one when the key is the
    /// same and the queue was not dropped (the hot path: a comparison and
    /// an atomic load), else the worker's cache, else a lookup.
    #[inline]
    pub(crate) fn resolve(
        &mut self,
        shared: &ServerState,
        worker: &WorkerKeys,
        key: &[u8],
    ) -> Result<&Arc<Queue>, KeyError> {
        let hit = matches!(&self.queue, Some(q) if self.key == key && !q.is_dropped());
        if !hit {
            self.miss(shared, worker, key)?;
        }
        // A hit or a successful miss leaves a queue here.
        self.queue.as_ref().ok_or(KeyError::NoSuchQueue)
    }

    /// Lets go of the queue (the key stays, for the next look-up's cache).
    #[inline]
    pub(crate) fn forget(&mut self) {
        self.queue = None;
    }

    #[cold]
    fn miss(&mut self, shared: &ServerState, worker: &WorkerKeys, key: &[u8]) -> Result<(), KeyError> {
        self.queue = None;
        let q = match worker.get(shared, key) {
            Some(q) => q,
            None => {
                let (q, handle) = find_handle(shared, key)?.ok_or(KeyError::NoSuchQueue)?;
                worker.put(key, handle);
                q
            }
        };
        self.key.clear();
        self.key.extend_from_slice(key);
        self.queue = Some(q);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_ids_stay_in_their_range() {
        for name in ["mylist", "a", "QUEUE_USER_INFO", "x".repeat(63).as_str()] {
            let id = auto_id(name);
            assert!(
                (AUTO_ID_BASE..AUTO_ID_BASE.wrapping_add(AUTO_ID_SPAN).wrapping_sub(1)).contains(&id) || id == u32::MAX
            );
        }
        assert_eq!(auto_id("mylist"), auto_id("mylist"));
        assert_ne!(auto_id("mylist"), auto_id("mylist2"));
    }
}
