//! Tests of the process table: registration, announcements, waiters, deaths.

use super::*;
use crate::ring::{Holder, intent_word};
use crate::test_support::TempDir;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

/// A file holding only a process table, and its mapping.
fn table(dir: &TempDir) -> (SharedMap, std::path::PathBuf) {
    let path = dir.path().join("table");
    let f = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path).unwrap();
    f.set_len(TABLE_BYTES as u64).unwrap();
    (SharedMap::map(&f, TABLE_BYTES, true).unwrap(), path)
}

/// A new open file description of the file: the registry of another "process".
fn process(map: &SharedMap, path: &Path, layout: TableLayout) -> Registry {
    let f = Arc::new(std::fs::OpenOptions::new().read(true).write(true).open(path).unwrap());
    Registry::new(map, 0, LockFile::Open(f), layout).unwrap()
}

const LAYOUTS: [TableLayout; 2] = [TableLayout::Interleaved, TableLayout::Split];

#[test]
fn a_table_that_does_not_fit_is_refused() {
    let dir = TempDir::new("registry", "fit");
    let (map, path) = table(&dir);
    let f = Arc::new(std::fs::File::open(&path).unwrap());
    let open = || LockFile::Open(f.clone());
    for layout in LAYOUTS {
        assert!(Registry::new(&map, 0, open(), layout).is_some());
        assert!(Registry::new(&map, 8, open(), layout).is_none());
        assert!(Registry::new(&map, 4, open(), layout).is_none());
    }
    assert!(Registry::new(&map, 4096, open(), TableLayout::Interleaved).is_none());
    assert!(Registry::new(&map, 4096, open(), TableLayout::Split).is_some(), "the split table needs 1,040 KiB");
}

#[test]
fn a_live_process_announcing_a_position_is_alive_and_nobody_else_is() {
    LAYOUTS.iter().for_each(|&l| a_live_process_announcing_a_position_is_alive_and_nobody_else_is_in(l));
}

fn a_live_process_announcing_a_position_is_alive_and_nobody_else_is_in(layout: TableLayout) {
    let dir = TempDir::new(&format!("registry-{layout:?}"), "alive");
    let (map, path) = table(&dir);
    let waiters = AtomicU32::new(0);
    let (mut me, mut other) = (process(&map, &path, layout), process(&map, &path, layout));
    assert_eq!(me.register(&waiters), (true, 0));
    assert_eq!(other.register(&waiters), (true, 0));
    assert_ne!(me.mine.unwrap().index, other.mine.unwrap().index);
    assert_eq!(me.live().len(), 2);
    assert_eq!(me.others_alive(), 1);

    other.intent_word(0).unwrap().store(intent_word(Holder::Producer, 100), Ordering::SeqCst);
    assert_eq!(me.holder(Holder::Producer, 100, false), HolderIs::Alive);
    assert_eq!(me.holder(Holder::Producer, 163, false), HolderIs::Alive, "a claim covers 64 positions");
    assert_eq!(me.holder(Holder::Producer, 164, false), HolderIs::Dead);
    assert_eq!(me.holder(Holder::Producer, 99, false), HolderIs::Dead);
    assert_eq!(me.holder(Holder::Consumer, 100, false), HolderIs::Dead, "the role counts");
    assert_eq!(me.holder(Holder::Producer, 200, true), HolderIs::Unknown, "unregistered processes");
    other.add_anonymous();
    assert_eq!(me.holder(Holder::Producer, 200, false), HolderIs::Unknown, "threads without a word");
    // Our own announcements count too.
    me.intent_word(3).unwrap().store(intent_word(Holder::Consumer, 7), Ordering::SeqCst);
    assert_eq!(other.holder(Holder::Consumer, 7, false), HolderIs::Alive);
}

#[test]
fn a_dead_process_is_proven_dead_and_its_sleepers_uncounted() {
    LAYOUTS.iter().for_each(|&l| a_dead_process_is_proven_dead_and_its_sleepers_uncounted_in(l));
}

fn a_dead_process_is_proven_dead_and_its_sleepers_uncounted_in(layout: TableLayout) {
    let dir = TempDir::new(&format!("registry-{layout:?}"), "dead");
    let (map, path) = table(&dir);
    let waiters = AtomicU32::new(0);
    let mut me = process(&map, &path, layout);
    me.register(&waiters);
    let mut other = process(&map, &path, layout);
    other.register(&waiters);
    other.enter_wait(&waiters);
    other.enter_wait(&waiters);
    other.intent_word(0).unwrap().store(intent_word(Holder::Producer, 5), Ordering::SeqCst);
    assert_eq!(waiters.load(Ordering::SeqCst), 2);
    assert_eq!(me.holder(Holder::Producer, 5, false), HolderIs::Alive);
    assert_eq!(me.reconcile(&waiters), 0, "a live process's sleepers stay counted");

    // It dies: its lock goes with its file description; its entry stays as it was.
    let index = other.mine.unwrap().index;
    drop(other);
    me.entry(index).pid.store(4_000_000, Ordering::SeqCst);
    assert_eq!(me.holder(Holder::Producer, 5, false), HolderIs::Dead);
    let deaths = me.unclean_deaths();
    assert_eq!(deaths, vec![(index, 4_000_000)]);
    assert_eq!(me.reconcile(&waiters), 2);
    assert_eq!(waiters.load(Ordering::SeqCst), 0);
    me.forget(&deaths);
    assert!(me.unclean_deaths().is_empty());
    assert_eq!(me.others_alive(), 0);

    // A newcomer takes the free entry and finds nothing of the dead one's.
    let mut next = process(&map, &path, layout);
    assert_eq!(next.register(&waiters), (true, 0));
    assert_eq!(next.mine.unwrap().index, index);
    assert!(next.intents(index).iter().all(|w| w.0.load(Ordering::SeqCst) == IDLE));
}

#[test]
fn leaving_cleanly_clears_the_pid() {
    LAYOUTS.iter().for_each(|&l| leaving_cleanly_clears_the_pid_in(l));
}

fn leaving_cleanly_clears_the_pid_in(layout: TableLayout) {
    let dir = TempDir::new(&format!("registry-{layout:?}"), "leave");
    let (map, path) = table(&dir);
    let waiters = AtomicU32::new(0);
    let me = process(&map, &path, layout);
    let mut other = process(&map, &path, layout);
    other.register(&waiters);
    let index = other.mine.unwrap().index;
    assert_eq!(me.entry(index).pid.load(Ordering::SeqCst), std::process::id());
    drop(other);
    assert_eq!(me.entry(index).pid.load(Ordering::SeqCst), 0);
    assert!(me.unclean_deaths().is_empty(), "a clean leave is no death");
}

#[test]
fn a_full_table_refuses_the_next_process() {
    LAYOUTS.iter().for_each(|&l| a_full_table_refuses_the_next_process_in(l));
}

fn a_full_table_refuses_the_next_process_in(layout: TableLayout) {
    let dir = TempDir::new(&format!("registry-{layout:?}"), "full");
    let (map, path) = table(&dir);
    let waiters = AtomicU32::new(0);
    let mut all: Vec<Registry> = (0..MAX_PROCS).map(|_| process(&map, &path, layout)).collect();
    for r in &mut all {
        assert_eq!(r.register(&waiters), (true, 0));
    }
    let mut late = process(&map, &path, layout);
    assert_eq!(late.register(&waiters), (false, 0));
    assert!(late.intent_word(0).is_none(), "no entry, no intent words");
    all.pop();
    assert_eq!(late.register(&waiters), (true, 0), "an entry freed by a leaving process is taken");
}

#[test]
fn the_split_table_touches_only_the_heads_and_the_pages_of_taken_entries() {
    let dir = TempDir::new("registry", "sparse");
    let (map, path) = table(&dir);
    let waiters = AtomicU32::new(0);
    let (mut a, mut b) = (process(&map, &path, TableLayout::Split), process(&map, &path, TableLayout::Split));
    assert_eq!(a.register(&waiters), (true, 0));
    assert_eq!(b.register(&waiters), (true, 0));
    b.intent_word(31).unwrap().store(intent_word(Holder::Consumer, 9), Ordering::SeqCst);
    assert_eq!(a.holder(Holder::Consumer, 9, false), HolderIs::Alive);
    assert_eq!(a.holder(Holder::Producer, 9, false), HolderIs::Dead);
    assert!(a.unclean_deaths().is_empty());
    assert_eq!(a.reconcile(&waiters), 0);
    assert_eq!((a.others_alive(), a.live().len()), (1, 2));
    a.reset_all();
    let used = std::fs::metadata(&path).unwrap().blocks() * 512;
    assert!(used <= (HEADS_BYTES + 2 * 4096) as u64, "{used} bytes allocated (the heads and two intent pages)");
    assert_eq!(a.layout().intents_at(1), HEADS_BYTES + 4096);
}

#[test]
fn intent_words_are_handed_out_once_each() {
    let slots = IntentSlots::default();
    let mut got: Vec<usize> = (0..INTENTS).map(|_| slots.acquire().unwrap()).collect();
    assert_eq!(slots.acquire(), None);
    got.sort_unstable();
    assert_eq!(got, (0..INTENTS).collect::<Vec<_>>());
    slots.release(5);
    assert_eq!(slots.acquire(), Some(5));
    assert_eq!(slots.acquire(), None);
}
