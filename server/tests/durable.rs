//! Durable (`always`) queues served: replies held until a sync covers
//! them, syncs shared by connections, never run on a worker thread.

mod common;

use common::{ChildServer, Conn, DiskDir, Spawn, V};
use std::collections::HashSet;
use std::time::{Duration, Instant};
use tvm::{Durability, Queue, Spec, Wait};

const SIZE: usize = 304;

fn always_queue(dir: &DiskDir, id: u32, name: &str, rows: u64) {
    let mut spec = Spec::new(rows, SIZE as u64);
    spec.name = name.into();
    spec.durability = Some(Durability::Always);
    Queue::create(dir.path(), id, &spec).expect("create the durable queue");
}

/// A server with one worker in `dir`, whose syncs the test aid `var`
/// (the server's `TVMQ_SERVE_TEST_SYNC_DELAY_MS` or the library's
/// `TVMQ_TEST_SYNC_DELAY_MS`) makes `ms` milliseconds slower.
fn one_worker_with_slow_syncs(dir: &DiskDir, var: &str, ms: u64) -> ChildServer {
    let delay = ms.to_string();
    let how = Spawn { env: &[(var, &delay)], ..Spawn::default() };
    ChildServer::spawn_in(dir.path(), &["--threads", "1"], &how)
}

/// Can this process use io_uring? Then a server's workers sync on rings
/// of their own (unless `TVMQ_SERVE_SYNC=threads`).
fn rings_here() -> bool {
    // On a thread of its own: closing a ring notifies its thread, whose
    // blocking socket reads with a timeout would return EINTR.
    std::thread::spawn(|| tvm::SyncRing::new().is_ok()).join().unwrap()
}

/// A value of `SIZE` bytes naming connection `c`, push `i`.
fn value(c: usize, i: usize) -> Vec<u8> {
    let mut v = format!("c{c}-i{i}-").into_bytes();
    v.resize(SIZE, b'.');
    v
}

/// The `name:value` fields of INFO's text.
fn info_field(conn: &mut Conn, section: &str, field: &str) -> String {
    let text = match conn.cmd(&[b"INFO", section.as_bytes()]) {
        V::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
        V::Other(s) | V::Simple(s) => s,
        other => panic!("INFO replied {other:?}"),
    };
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")).map(str::to_string))
        .unwrap_or_else(|| panic!("no {field} in {text}"))
}

/// Several connections pipelining pushes into an `always` queue on disk:
/// every push answered, syncs shared (more than one record a sync), and
/// after a kill -9 of the server every answered push is in the queue.
#[test]
fn pipelined_pushes_of_many_connections_share_syncs_and_survive_a_kill() {
    let dir = DiskDir::new("serve-always");
    always_queue(&dir, 1, "jobs", 100_000);
    let mut server = ChildServer::spawn_in(dir.path(), &["--threads", "2"], &Spawn::default());
    const CONNS: usize = 6;
    const ROUNDS: usize = 15;
    const PIPE: usize = 16;
    let answered: Vec<Vec<Vec<u8>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..CONNS)
            .map(|c| {
                let addr = server.addr;
                s.spawn(move || {
                    let mut conn = Conn::connect(addr);
                    let mut done = Vec::new();
                    for r in 0..ROUNDS {
                        let batch: Vec<Vec<u8>> = (0..PIPE).map(|k| value(c, r * PIPE + k)).collect();
                        let mut bytes = Vec::new();
                        for v in &batch {
                            resp::command(&mut bytes, &[b"RPUSH", b"jobs", v]);
                        }
                        conn.send_raw(&bytes);
                        for v in batch {
                            match conn.read() {
                                V::Int(n) => assert!(n >= 1),
                                other => panic!("RPUSH replied {other:?}"),
                            }
                            done.push(v);
                        }
                    }
                    done
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut conn = Conn::connect(server.addr);
    let syncs: u64 = info_field(&mut conn, "durability", "durable_syncs").parse().unwrap();
    let per_sync: f64 = info_field(&mut conn, "durability", "durable_records_per_sync").parse().unwrap();
    let held: u64 = info_field(&mut conn, "durability", "durable_records_held").parse().unwrap();
    eprintln!("{held} records held, {syncs} syncs, {per_sync} records per sync");
    assert_eq!(held, (CONNS * ROUNDS * PIPE) as u64);
    assert!(syncs >= 1 && syncs < held, "{syncs} syncs for {held} records");
    assert!(per_sync > 1.0, "{per_sync} records per sync");
    // The hand-over starts at a sync's last wait, the ask at its first.
    let ask: f64 = info_field(&mut conn, "durability", "durable_ask_to_sync_avg_us").parse().unwrap();
    let handover: f64 = info_field(&mut conn, "durability", "durable_handover_avg_us").parse().unwrap();
    assert!(handover <= ask, "hand-over {handover} us, ask to sync {ask} us");
    assert!(info_field(&mut conn, "durability", "durable_queue_1").starts_with("policy=always,"));
    // Each worker syncs on its own ring: no sync thread was started.
    let ring_workers: usize = info_field(&mut conn, "durability", "durable_ring_workers").parse().unwrap();
    let threads: usize = info_field(&mut conn, "durability", "durable_sync_threads").parse().unwrap();
    if rings_here() {
        assert_eq!((ring_workers, threads), (2, 0), "workers on rings, sync threads");
    } else {
        assert_eq!(ring_workers, 0);
    }
    assert_eq!(server.signal_and_wait(libc::SIGKILL, Duration::from_secs(10)), None);

    let q = Queue::open(dir.path(), 1).expect("reopen after the kill");
    let mut found = HashSet::new();
    let mut out = vec![0u8; SIZE];
    while let Ok(n) = q.pop(&mut out, Wait::NoWait) {
        found.insert(out[..n].to_vec());
    }
    for v in answered.iter().flatten() {
        assert!(found.contains(v), "an answered push is missing: {}", String::from_utf8_lossy(&v[..12]));
    }
}

/// A sync made slow (the server's test aid): a push to an `always` queue
/// waits for it, while a PING on another connection of the same (only)
/// worker answers at once; so does a push to a plain queue. The pushed
/// record is visible (LLEN) before its reply comes: published at once.
/// The worker's sync is in flight on its own ring (its writes wait in the
/// kernel behind the delay, the worker does not).
#[test]
fn a_worker_serves_other_connections_while_its_sync_is_in_flight() {
    serves_other_connections_while_a_sync_runs("ring");
}

/// The same where the sync threads run the syncs (no io_uring, or
/// `TVMQ_SERVE_SYNC=threads`).
#[test]
fn a_worker_serves_other_connections_while_a_sync_thread_syncs() {
    serves_other_connections_while_a_sync_runs("threads");
}

/// The default (`hybrid`: inline when the worker is idle and the disk
/// fast, on the ring otherwise) with a disk whose every sync is slow: the
/// first syncs of a worker run on its ring, and slow ones keep the next
/// ones there, so that after several pushes (each one sync) a PING on
/// another connection still answers while a push waits for its sync, and
/// no sync ran on the worker.
#[test]
fn the_hybrid_never_waits_on_the_worker_for_a_slow_disk() {
    if !rings_here() {
        eprintln!("no io_uring here: the hybrid is not used");
        return;
    }
    let dir = DiskDir::new("serve-hybrid-slow");
    always_queue(&dir, 1, "slow", 1000);
    const DELAY_MS: u64 = 400;
    let env = [("TVMQ_SERVE_TEST_SYNC_DELAY_MS", "400")];
    let how = Spawn { env: &env, ..Spawn::default() };
    let mut server = ChildServer::spawn_in(dir.path(), &["--threads", "1"], &how);
    let mut pusher = Conn::connect(server.addr);
    let mut other = Conn::connect(server.addr);
    for i in 0..8 {
        let t = Instant::now();
        pusher.send(&[b"RPUSH", b"slow", b"x"]);
        // (30 s: a hang guard. The record is seen before the push's reply.)
        common::wait_until(Duration::from_secs(30), "the record published", || {
            other.cmd(&[b"LLEN", b"slow"]) == V::Int(i + 1)
        });
        assert_eq!(other.cmd(&[b"PING"]), V::Simple("PONG".into()));
        // Answered while the sync runs: by order, not by a clock.
        assert!(pusher.try_read_within(Duration::ZERO).is_none(), "push {i}: its reply came before the PONG");
        assert_eq!(pusher.read(), V::Int(i + 1));
        assert!(t.elapsed() >= Duration::from_millis(DELAY_MS), "push {i}: the reply waited for its sync");
    }
    assert_eq!(info_field(&mut other, "durability", "durable_inline_syncs"), "0");
    assert_eq!(server.signal_and_wait(libc::SIGKILL, Duration::from_secs(10)), None);
}

/// The test of the two above, the server's syncs chosen by `mode`
/// (`TVMQ_SERVE_SYNC`). (With `inline`, the measurement aid that syncs on
/// the worker as Redis does, it fails: the PING waits for the sync.)
fn serves_other_connections_while_a_sync_runs(mode: &str) {
    let dir = DiskDir::new("serve-slow-sync");
    always_queue(&dir, 1, "slow", 1000);
    let mut plain = Spec::new(1000, SIZE as u64);
    plain.name = "plain".into();
    Queue::create(dir.path(), 2, &plain).unwrap();
    const DELAY_MS: u64 = 800;
    let env = [("TVMQ_SERVE_TEST_SYNC_DELAY_MS", "800"), ("TVMQ_SERVE_SYNC", mode)];
    let how = Spawn { env: &env, ..Spawn::default() };
    let mut server = ChildServer::spawn_in(dir.path(), &["--threads", "1"], &how);
    let mut pusher = Conn::connect(server.addr);
    let mut other = Conn::connect(server.addr);
    let on_ring = mode != "threads" && rings_here();
    assert_eq!(info_field(&mut other, "durability", "durable_ring_workers"), if on_ring { "1" } else { "0" });
    assert_eq!(other.cmd(&[b"PING"]), V::Simple("PONG".into()));
    let t0 = Instant::now();
    pusher.send(&[b"RPUSH", b"slow", b"x"]);
    // The push is published at once (and the worker is free): the record
    // is seen before the push's reply. (30 s: a hang guard.)
    common::wait_until(Duration::from_secs(30), "the record published", || other.cmd(&[b"LLEN", b"slow"]) == V::Int(1));
    assert_eq!(other.cmd(&[b"PING"]), V::Simple("PONG".into()));
    assert_eq!(other.cmd(&[b"RPUSH", b"plain", b"y"]), V::Int(1));
    // Both answered while the sync runs, shown by order (no clock, which a
    // loaded machine decides): the durable push's reply has not come yet.
    assert!(pusher.try_read_within(Duration::ZERO).is_none(), "the push's reply came before the PONG");
    assert_eq!(pusher.read(), V::Int(1));
    assert!(t0.elapsed() >= Duration::from_millis(DELAY_MS), "the push's reply waited for its sync");
    // A pop is held for its sync too.
    let t1 = Instant::now();
    assert_eq!(pusher.cmd(&[b"LPOP", b"slow"]), V::Bulk(b"x".to_vec()));
    assert!(t1.elapsed() >= Duration::from_millis(DELAY_MS), "the pop's reply waited for its sync");
    let threads = info_field(&mut other, "durability", "durable_sync_threads");
    assert_eq!(threads != "0", !on_ring, "{threads} sync threads");
    assert_eq!(server.signal_and_wait(libc::SIGKILL, Duration::from_secs(10)), None);
}

/// A local program pushing into the same `always` queue with the library's
/// blocking syncs while network clients push through both workers' rings:
/// they share the queue's sync lock (each waits for the others' syncs, or
/// runs its own), nothing hangs, and every push, answered or returned, is
/// in the queue exactly once.
#[test]
fn a_local_program_and_the_workers_rings_share_the_sync_lock() {
    let dir = DiskDir::new("serve-local-and-rings");
    always_queue(&dir, 1, "shared", 100_000);
    let mut server = ChildServer::spawn_in(dir.path(), &["--threads", "2"], &Spawn::default());
    const CONNS: usize = 4;
    const EACH: usize = 150;
    let local = Queue::open(dir.path(), 1).unwrap();
    std::thread::scope(|s| {
        for c in 0..CONNS {
            let addr = server.addr;
            s.spawn(move || {
                let mut conn = Conn::connect(addr);
                for i in 0..EACH {
                    match conn.cmd(&[b"RPUSH", b"shared", &value(c, i)]) {
                        V::Int(n) => assert!(n >= 1),
                        other => panic!("RPUSH replied {other:?}"),
                    }
                }
            });
        }
        for i in 0..EACH {
            local.push(&value(CONNS, i)).unwrap();
        }
    });
    let mut conn = Conn::connect(server.addr);
    assert_eq!(info_field(&mut conn, "durability", "durable_sync_failures"), "0");
    assert_eq!(server.signal_and_wait(libc::SIGKILL, Duration::from_secs(10)), None);
    let mut found = HashSet::new();
    let mut out = vec![0u8; SIZE];
    while let Ok(n) = local.pop(&mut out, Wait::NoWait) {
        assert!(found.insert(out[..n].to_vec()), "a record twice");
    }
    for c in 0..=CONNS {
        for i in 0..EACH {
            assert!(found.contains(&value(c, i)), "push {i} of {c} missing");
        }
    }
    assert_eq!(found.len(), (CONNS + 1) * EACH);
}

/// An `always` queue with leases.
fn always_leased_queue(dir: &DiskDir, id: u32, name: &str, rows: u64) {
    let mut spec = Spec::new(rows, SIZE as u64);
    spec.name = name.into();
    spec.durability = Some(Durability::Always);
    spec.leases = Some(tvm::LeaseSpec { lease_ms: 60_000, max_leases: 256, ..Default::default() });
    Queue::create(dir.path(), id, &spec).expect("create the durable leased queue");
}

/// The id of a TVMQ.LEASE reply's one entry `[id, deliveries, record]`.
fn lease_entry(v: &V) -> (Vec<u8>, i64, Vec<u8>) {
    match v {
        V::Arr(e) => match e.as_slice() {
            [V::Bulk(id), V::Int(d), V::Bulk(r)] => (id.clone(), *d, r.clone()),
            other => panic!("not a lease entry: {other:?}"),
        },
        other => panic!("TVMQ.LEASE replied {other:?}"),
    }
}

/// A durable + leased (`always`) queue with a slow sync: a TVMQ.ACK's reply
/// waits for its sync while a PING on another connection of the same (only)
/// worker answers at once; so does a lease delivered again (its raised
/// delivery count is synced); and the acks of several connections share
/// syncs.
#[test]
fn acks_of_a_durable_leased_queue_wait_for_shared_syncs_off_the_worker() {
    let dir = DiskDir::new("serve-slow-ack");
    always_leased_queue(&dir, 1, "jobs", 1000);
    const DELAY_MS: u64 = 800;
    let mut server = one_worker_with_slow_syncs(&dir, "TVMQ_SERVE_TEST_SYNC_DELAY_MS", DELAY_MS);
    let mut consumer = Conn::connect(server.addr);
    let mut other = Conn::connect(server.addr);
    const CONNS: usize = 6;
    let mut bytes = Vec::new();
    for i in 0..CONNS + 2 {
        resp::command(&mut bytes, &[b"RPUSH", b"jobs", &value(0, i)]);
    }
    other.send_raw(&bytes);
    for _ in 0..CONNS + 2 {
        assert!(matches!(other.read(), V::Int(_)));
    }

    let (id, d, rec) = lease_entry(&consumer.cmd(&[b"TVMQ.LEASE", b"jobs"]));
    assert_eq!((d, rec), (1, value(0, 0)));
    let t0 = Instant::now();
    consumer.send(&[b"TVMQ.ACK", b"jobs", &id]);
    // The ack is done at once (its reply waits for the sync): seen before
    // the reply. (30 s: a hang guard.)
    common::wait_until(Duration::from_secs(30), "the ack done", || {
        let V::Arr(stats) = other.cmd(&[b"TVMQ.LEASES", b"jobs"]) else { panic!("TVMQ.LEASES: not an array") };
        stats.chunks(2).any(|kv| kv == [V::bulk(b"in-flight"), V::Int(0)])
    });
    assert_eq!(other.cmd(&[b"PING"]), V::Simple("PONG".into()));
    // Answered while the sync runs, shown by order (no clock).
    assert!(consumer.try_read_within(Duration::ZERO).is_none(), "the ack's reply came before the PONG");
    assert_eq!(consumer.read(), V::Int(1));
    assert!(t0.elapsed() >= Duration::from_millis(DELAY_MS), "the ack's reply waited for its sync");

    // Released, then delivered again: that reply waits for the sync of
    // the raised delivery count.
    let (id, _, _) = lease_entry(&consumer.cmd(&[b"TVMQ.LEASE", b"jobs"]));
    assert_eq!(consumer.cmd(&[b"TVMQ.RELEASE", b"jobs", &id]), V::Simple("OK".into()));
    let t1 = Instant::now();
    let (id, d, rec) = lease_entry(&consumer.cmd(&[b"TVMQ.LEASE", b"jobs"]));
    assert_eq!((d, rec), (2, value(0, 1)));
    assert!(t1.elapsed() >= Duration::from_millis(DELAY_MS), "the redelivery's reply waited for its sync");
    assert_eq!(consumer.cmd(&[b"TVMQ.ACK", b"jobs", &id]), V::Int(1));

    // Several connections lease one record each, then acknowledge at once.
    let syncs_before: u64 = info_field(&mut other, "durability", "durable_syncs").parse().unwrap();
    let held_before: u64 = info_field(&mut other, "durability", "durable_records_held").parse().unwrap();
    let mut conns: Vec<(Conn, Vec<u8>)> = (0..CONNS)
        .map(|_| {
            let mut c = Conn::connect(server.addr);
            let (id, _, _) = lease_entry(&c.cmd(&[b"TVMQ.LEASE", b"jobs"]));
            (c, id)
        })
        .collect();
    let t2 = Instant::now();
    for (c, id) in &mut conns {
        c.send(&[b"TVMQ.ACK", b"jobs", id]);
    }
    for (c, _) in &mut conns {
        assert_eq!(c.read(), V::Int(1));
    }
    assert!(t2.elapsed() >= Duration::from_millis(DELAY_MS));
    let syncs = info_field(&mut other, "durability", "durable_syncs").parse::<u64>().unwrap() - syncs_before;
    let held = info_field(&mut other, "durability", "durable_records_held").parse::<u64>().unwrap() - held_before;
    eprintln!("{CONNS} connections' acks: {held} records held, {syncs} syncs");
    assert_eq!(held, CONNS as u64);
    assert!(syncs < CONNS as u64, "{syncs} syncs for the acks of {CONNS} connections");
    assert_eq!(server.signal_and_wait(libc::SIGKILL, Duration::from_secs(10)), None);
}

/// The PING of another connection of the same (only) worker, sent while
/// `waiting` waits for replies whose work includes syncs made slow: it is
/// answered while they still run (the syncs run off the worker), shown by
/// order, not by a clock (which a loaded machine decides): `waiting` has
/// no reply yet.
fn ping_during(other: &mut Conn, waiting: &mut Conn, what: &str) {
    assert_eq!(other.cmd(&[b"PING"]), V::Simple("PONG".into()));
    assert!(waiting.try_read_within(Duration::ZERO).is_none(), "a reply to {what} came before the PONG");
}

/// The syncs of queue `id` (the library's count, whoever ran them).
fn queue_syncs(c: &mut Conn, id: u32) -> u64 {
    let info = info_field(c, "durability", &format!("durable_queue_{id}"));
    let n = info.split(',').find_map(|kv| kv.strip_prefix("syncs="));
    n.and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("no syncs= in {info:?}"))
}

/// Once a move into the dead-letter queue (`dead`, queue 2) whose reply
/// nobody waits for has pushed its record (LLEN reaches `depth`), the PING
/// of another connection of the same (only) worker is answered while its
/// sync still runs: queue 2 counts no more syncs than `syncs` after the
/// PONG. (A move on the worker would answer the LLEN after its sync.)
fn ping_during_move(other: &mut Conn, depth: i64, syncs: u64, what: &str) {
    // (30 s: a hang guard.)
    common::wait_until(Duration::from_secs(30), what, || match other.cmd(&[b"LLEN", b"dead"]) {
        V::Int(n) => n >= depth,
        v => panic!("LLEN replied {v:?}"),
    });
    assert_eq!(other.cmd(&[b"PING"]), V::Simple("PONG".into()));
    assert_eq!(queue_syncs(other, 2), syncs, "{what}: its sync was done before the PONG");
}

/// Records moved into an `always` dead-letter queue (a push and a sync
/// each, the library's syncs made slow by its test aid; the first also
/// opens the dead-letter queue): by TVMQ.REJECT, by TVMQ.RELEASE at the
/// delivery limit, by the sweep of a lease that ran out at the limit, and
/// by the release of the leases of a connection that closed. Meanwhile a
/// PING on another connection of the same (only) worker answers at once:
/// none of it runs on the worker.
#[test]
fn dead_letter_moves_into_an_always_queue_run_off_the_worker() {
    let dir = DiskDir::new("serve-dead-letter-off-worker");
    always_queue(&dir, 2, "dead", 1000);
    let mut spec = Spec::new(1000, SIZE as u64);
    spec.name = "jobs".into();
    spec.leases = Some(tvm::LeaseSpec { lease_ms: 60_000, max_leases: 256, max_deliveries: 1, dead_letter: Some(2) });
    Queue::create(dir.path(), 1, &spec).unwrap();
    // Long enough that the checks by order below (a reply not come yet
    // after a PONG) hold on a loaded machine; the sleeps before them let
    // the work start, and assert nothing.
    const SYNC_MS: u64 = 400;
    let mut server = one_worker_with_slow_syncs(&dir, "TVMQ_TEST_SYNC_DELAY_MS", SYNC_MS);
    let mut consumer = Conn::connect(server.addr);
    let mut other = Conn::connect(server.addr);
    for i in 0..8 {
        assert_eq!(other.cmd(&[b"RPUSH", b"jobs", &value(0, i)]), V::Int(i as i64 + 1));
    }
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(lease_entry(&consumer.cmd(&[b"TVMQ.LEASE", b"jobs"])).0);
    }
    // Rejects, pipelined: the first opens the dead-letter queue.
    let t0 = Instant::now();
    let mut bytes = Vec::new();
    for id in &ids[..3] {
        resp::command(&mut bytes, &[b"TVMQ.REJECT", b"jobs", id]);
    }
    consumer.send_raw(&bytes);
    std::thread::sleep(Duration::from_millis(SYNC_MS / 4));
    ping_during(&mut other, &mut consumer, "rejects into an always dead-letter queue");
    for _ in 0..3 {
        assert_eq!(consumer.read(), V::Simple("OK".into()));
    }
    assert!(t0.elapsed() >= Duration::from_millis(SYNC_MS * 3), "each move waited for its sync");
    assert_eq!(other.cmd(&[b"LLEN", b"dead"]), V::Int(3));

    // A release at the delivery limit (1).
    consumer.send(&[b"TVMQ.RELEASE", b"jobs", &ids[3]]);
    std::thread::sleep(Duration::from_millis(SYNC_MS / 4));
    ping_during(&mut other, &mut consumer, "a release into the dead-letter queue");
    assert_eq!(consumer.read(), V::Simple("OK".into()));
    assert_eq!(other.cmd(&[b"LLEN", b"dead"]), V::Int(4));

    // A lease that runs out at the limit: the sweep of the next lease
    // dooms it, and the move runs off the worker.
    let _ = lease_entry(&consumer.cmd(&[b"TVMQ.LEASE", b"jobs", b"FOR", b"20"]));
    std::thread::sleep(Duration::from_millis(60));
    let syncs = queue_syncs(&mut other, 2);
    consumer.send(&[b"TVMQ.LEASE", b"jobs"]);
    ping_during_move(&mut other, 5, syncs, "the swept record moved");
    let _ = lease_entry(&consumer.read());
    common::wait_until(Duration::from_secs(30), "the swept record's sync", || queue_syncs(&mut other, 2) > syncs);

    // The connection closes holding leases at the limit (the one above
    // and two more): released off the worker, into the dead-letter queue.
    for _ in 0..2 {
        let _ = lease_entry(&consumer.cmd(&[b"TVMQ.LEASE", b"jobs"]));
    }
    let syncs = queue_syncs(&mut other, 2);
    drop(consumer);
    ping_during_move(&mut other, 6, syncs, "the first of a closed connection's leases moved");
    common::wait_until(Duration::from_secs(30), "the closed connection's leases moved", || {
        other.cmd(&[b"LLEN", b"dead"]) == V::Int(8)
    });
    assert_eq!(other.cmd(&[b"LLEN", b"jobs"]), V::Int(0));
    assert_eq!(server.signal_and_wait(libc::SIGKILL, Duration::from_secs(10)), None);
}

/// LTRIM of an `always` queue, both forms (drop the first N records; drop
/// them all), its syncs made slow by the library's test aid: the records
/// go in one sync, not one per record, and none of it runs on the worker
/// (a PING on another connection of the only worker answers meanwhile).
#[test]
fn ltrim_of_an_always_queue_runs_off_the_worker_in_one_sync() {
    let dir = DiskDir::new("serve-ltrim-off-worker");
    always_queue(&dir, 1, "q", 1000);
    {
        let q = Queue::open(dir.path(), 1).unwrap();
        for i in 0..300 {
            q.push(&value(0, i)).unwrap();
        }
    }
    // As in the test above: long enough for the checks by order.
    const SYNC_MS: u64 = 400;
    let mut server = one_worker_with_slow_syncs(&dir, "TVMQ_TEST_SYNC_DELAY_MS", SYNC_MS);
    let mut conn = Conn::connect(server.addr);
    let mut other = Conn::connect(server.addr);
    // The queue's own syncs (the library's count, whoever ran them).
    let syncs = |c: &mut Conn| queue_syncs(c, 1);

    let before = syncs(&mut other);
    // 200 records: more than one batch of the pops it is made of.
    conn.send(&[b"LTRIM", b"q", b"200", b"-1"]);
    std::thread::sleep(Duration::from_millis(SYNC_MS / 4));
    ping_during(&mut other, &mut conn, "an LTRIM of 200 records");
    assert_eq!(conn.read(), V::Simple("OK".into()));
    let used = syncs(&mut other) - before;
    assert!(used <= 2, "LTRIM of 200 records took {used} syncs");
    assert_eq!(other.cmd(&[b"LLEN", b"q"]), V::Int(100));
    assert_eq!(other.cmd(&[b"LPOP", b"q"]), V::Bulk(value(0, 200)));

    conn.send(&[b"LTRIM", b"q", b"1", b"0"]);
    std::thread::sleep(Duration::from_millis(SYNC_MS / 4));
    ping_during(&mut other, &mut conn, "an LTRIM of every record");
    assert_eq!(conn.read(), V::Simple("OK".into()));
    assert_eq!(other.cmd(&[b"LLEN", b"q"]), V::Int(0));
    assert_eq!(server.signal_and_wait(libc::SIGKILL, Duration::from_secs(10)), None);
    // What the trims removed stays removed across a restart.
    let q = Queue::open(dir.path(), 1).unwrap();
    assert_eq!(q.depth(), 0);
}

/// An `interval` queue's file removed with `rm` (not dropped) in the
/// directory a server serves: the server's index sees it go and removes
/// the queue's live part in tmpfs (memory nobody would free otherwise),
/// counted in INFO stats.
#[test]
fn the_live_part_of_a_queue_removed_with_rm_is_removed_by_the_index() {
    use std::os::unix::fs::MetadataExt;
    let dir = DiskDir::new("serve-orphan-live");
    let mut spec = Spec::new(1000, SIZE as u64);
    spec.durability = Some(Durability::Interval(1000));
    Queue::create(dir.path(), 7, &spec).unwrap();
    // Attached and let go: its live part exists, and nobody holds it.
    Queue::open(dir.path(), 7).unwrap().push(b"x").unwrap();
    let file = tvm::queue_path(dir.path(), 7);
    let m = std::fs::metadata(&file).unwrap();
    let mine = format!(".interval-{:x}-{}-7-", m.dev(), m.ino());
    // SAFETY: geteuid has no preconditions.
    let shm = std::path::PathBuf::from(format!("/dev/shm/tvmq-{}", unsafe { libc::geteuid() }));
    let live = std::fs::read_dir(&shm)
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with(&mine))
        .expect("the queue's live part")
        .path();
    let server = ChildServer::spawn_in(dir.path(), &[], &Spawn::default());
    let mut c = Conn::connect(server.addr);
    let sweeps = |c: &mut Conn| info_field(c, "stats", "index_orphan_sweeps").parse::<u64>().unwrap();
    common::wait_until(Duration::from_secs(20), "the index's first sweep", || sweeps(&mut c) >= 1);
    let before = sweeps(&mut c);
    let bytes = std::fs::metadata(&live).unwrap().blocks() * 512;
    std::fs::remove_file(&file).unwrap();
    // The index sweeps when it sees the file go. (Another process's create
    // or attach meanwhile may remove the live part first: the test asserts
    // the sweep and that the part is gone, and counts only what the
    // server says it removed.)
    common::wait_until(Duration::from_secs(20), "the index to sweep after the removal", || {
        sweeps(&mut c) > before && !live.exists()
    });
    let removed: u64 = info_field(&mut c, "stats", "live_parts_removed").parse().unwrap();
    let removed_bytes: u64 = info_field(&mut c, "stats", "live_parts_removed_bytes").parse().unwrap();
    assert!(removed == 0 || removed_bytes >= bytes, "{removed} part(s), {removed_bytes} bytes, of {bytes}");
}
