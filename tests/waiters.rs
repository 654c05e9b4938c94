//! A process killed while blocked in a pop leaves no trace: the waiter count
//! it raised comes back down (at the next push that finds nobody to wake, or
//! by repair), and a live sleeper still gets its records.

mod common;
use common::{child_env, child_test};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};
use tvm::{Queue, Spec, Wait};

/// Child process entry: blocks in `pop(Wait::Forever)` on the queue it is
/// given, until killed.
#[test]
#[ignore = "child process of the other tests: started by them"]
fn waiters_child() {
    let (dir, id) = (child_env("TVMQ_WAITERS_DIR"), child_env("TVMQ_WAITERS_ID"));
    let q = Queue::open(Path::new(&dir), id.parse().unwrap()).unwrap();
    let mut out = vec![0u8; q.record_size()];
    let _ = q.pop(&mut out, Wait::Forever);
    // Only reached if a record arrives: the parent never pushes before killing us.
    std::process::exit(3);
}

fn sleeper(dir: &Path, id: u32) -> Child {
    child_test("waiters_child")
        .env("TVMQ_WAITERS_DIR", dir)
        .env("TVMQ_WAITERS_ID", id.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(format!("/dev/shm/tvmq-waiters-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn killed_sleeper_is_uncounted_at_the_next_push() {
    let dir = temp_dir("push");
    Queue::create(&dir, 1, &Spec::new(16, 8)).unwrap();
    let q = Queue::open(&dir, 1).unwrap();
    let mut child = sleeper(&dir, 1);
    wait_until("the child sleeps in the queue", || q.stats().waiters == 1);
    child.kill().unwrap();
    child.wait().unwrap();
    // The dead sleeper is still counted...
    assert_eq!(q.stats().waiters, 1);
    // ...until a push finds nobody to wake and looks for dead sleepers.
    q.push(b"record").unwrap();
    assert_eq!(q.stats().waiters, 0, "the count was not reconciled at the push");
    assert_eq!(q.stats().reconciled_waiters, 1);
    // Pushes no longer make wake-up calls, and the record is there.
    let mut out = [0u8; 8];
    assert_eq!(q.pop(&mut out, Wait::NoWait).unwrap(), 6);
    drop(q);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn killed_sleepers_are_uncounted_by_repair_and_live_ones_still_woken() {
    let dir = temp_dir("repair");
    Queue::create(&dir, 2, &Spec::new(16, 8)).unwrap();
    let q = std::sync::Arc::new(Queue::open(&dir, 2).unwrap());
    let mut dead: Vec<Child> = (0..3).map(|_| sleeper(&dir, 2)).collect();
    wait_until("three children sleep in the queue", || q.stats().waiters == 3);
    for c in dead.iter_mut() {
        c.kill().unwrap();
        c.wait().unwrap();
    }
    // A live sleeper in this process joins them.
    let live = {
        let q = q.clone();
        std::thread::spawn(move || {
            let mut out = [0u8; 8];
            q.pop(&mut out, Wait::Forever).map(|n| out[..n].to_vec())
        })
    };
    wait_until("the live thread sleeps too", || q.stats().waiters == 4);
    let r = q.repair();
    assert_eq!(r.reconciled_waiters, 3, "{r:?}");
    assert_eq!(q.stats().waiters, 1, "only the live sleeper is left");
    q.push(b"wake").unwrap();
    assert_eq!(live.join().unwrap().unwrap(), b"wake");
    assert_eq!(q.stats().waiters, 0);
    drop(q);
    std::fs::remove_dir_all(&dir).unwrap();
}
