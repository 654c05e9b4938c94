//! Seeing the queues from the command line: `tvmq top` driven in a real
//! terminal (tmux: keys in, the screen captured, the terminal as it was
//! after `q` and after Ctrl-C), `tvmq metrics` against `tvmq stat --json`
//! (promtool finds nothing to fix), `tvmq push` and `tvmq pop`.

#[path = "../../tests/common/mod.rs"]
mod common;
use common::TempDir;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use tvm::{LeaseSpec, Queue, Spec, Wait};

fn tvmq(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tvmq")).arg("--dir").arg(dir).args(args).output().expect("run tvmq")
}

#[track_caller]
fn ok(o: &Output) -> String {
    assert!(o.status.success(), "tvmq failed: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn make(dir: &Path, id: u32, name: &str, rows: u64, size: u64, leases: Option<LeaseSpec>) {
    let mut spec = Spec::new(rows, size);
    spec.name = name.into();
    spec.leases = leases;
    Queue::create(dir, id, &spec).unwrap();
}

/// A tmux server of its own (its socket in the test's directory), killed at the end.
struct Tmux {
    socket: std::path::PathBuf,
}

impl Tmux {
    fn new(dir: &Path) -> Tmux {
        Tmux { socket: dir.join("tmux.sock") }
    }

    fn run(&self, args: &[&str]) -> String {
        let o = Command::new("tmux").arg("-S").arg(&self.socket).args(args).output().expect("tmux runs");
        assert!(o.status.success(), "tmux {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "t"])
    }

    /// Waits until the screen holds every one of `words`; the screen.
    #[track_caller]
    fn wait_for(&self, words: &[&str]) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let s = self.screen();
            if words.iter().all(|w| s.contains(w)) {
                return s;
            }
            assert!(Instant::now() < deadline, "the screen never showed {words:?}:\n{s}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "t"];
        args.extend_from_slice(keys);
        self.run(&args);
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux").arg("-S").arg(&self.socket).arg("kill-server").output();
    }
}

#[test]
fn top_in_a_terminal_shows_the_queues_and_leaves_the_terminal_as_it_was() {
    if !common::have_tool("tmux") {
        eprintln!("SKIP tvmq top in a terminal: tmux is not installed (Debian: tmux)");
        return;
    }
    let dir = TempDir::new("cli", "top");
    make(dir.path(), 21, "ORDERS", 1000, 16, None);
    make(dir.path(), 22, "JOBS", 100, 16, Some(LeaseSpec::default()));
    let q = Queue::open(dir.path(), 21).unwrap();
    for i in 0..437u32 {
        q.push(&i.to_le_bytes()).unwrap();
    }
    drop(q);
    let tmux = Tmux::new(dir.path());
    let top = format!("{} --dir {} top --interval 0.2", env!("CARGO_BIN_EXE_tvmq"), dir.path().display());
    // The shell notes the terminal's settings before and after, and the exit status.
    let script = format!(
        "stty -g > {0}/before; echo READY; {top}; echo \"EXIT=$?\"; stty -g > {0}/after; echo DONE; read x; {top}; echo \"EXIT2=$?\"; sleep 60",
        dir.path().display()
    );
    tmux.run(&["new-session", "-d", "-s", "t", "-x", "150", "-y", "40", "sh", "-c", &script]);
    let screen = tmux.wait_for(&["tvmq top", "ORDERS", "JOBS", "437"]);
    assert!(screen.contains("2 queues"), "{screen}");
    assert_eq!(
        tmux.run(&["display", "-p", "-t", "t", "#{alternate_on}"]).trim(),
        "1",
        "top is on the alternate screen"
    );
    // The detail of the selected queue (sorted by depth: ORDERS first).
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for(&["queue 21", "capacity 1000", "pushed 437", "depth, last"]);
    assert!(screen.contains("depth 437"), "{screen}");
    tmux.keys(&["Escape"]);
    // Back to the table (a key right after Escape would read as Alt and that key).
    tmux.wait_for(&["DEPTH / CAPACITY"]);
    // A filter that leaves JOBS alone.
    tmux.keys(&["/"]);
    tmux.wait_for(&["filter: _"]);
    tmux.keys(&["J", "O", "B", "Enter"]);
    let screen = tmux.wait_for(&["filter: JOB", "(1 shown)"]);
    assert!(!screen.contains("ORDERS"), "{screen}");
    tmux.keys(&["q"]);
    let screen = tmux.wait_for(&["EXIT=0", "DONE"]);
    assert!(screen.contains("READY"), "the screen before top is back:\n{screen}");
    assert!(!screen.contains("ORDERS"), "top's screen is gone:\n{screen}");
    let before = std::fs::read_to_string(dir.path().join("before")).unwrap();
    let after = std::fs::read_to_string(dir.path().join("after")).unwrap();
    assert_eq!(before, after, "the terminal's settings (stty -g) are as they were");
    // Ctrl-C too, the second time.
    tmux.keys(&["go", "Enter"]);
    tmux.wait_for(&["tvmq top", "ORDERS"]);
    tmux.keys(&["C-c"]);
    tmux.wait_for(&["EXIT2=0"]);
    assert_eq!(tmux.run(&["display", "-p", "-t", "t", "#{alternate_on}"]).trim(), "0", "off the alternate screen");
    assert_eq!(tmux.run(&["display", "-p", "-t", "t", "#{cursor_flag}"]).trim(), "1", "the cursor shown");
}

#[test]
fn top_needs_a_terminal() {
    let dir = TempDir::new("cli", "top-tty");
    let o = tvmq(dir.path(), &["top"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("needs a terminal"));
}

/// The value of `series` in an exposition.
fn value(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no {series} in:\n{text}"))
        .parse()
        .unwrap()
}

#[test]
fn metrics_match_stat_json_and_promtool_finds_nothing_to_fix() {
    let dir = TempDir::new("cli", "metrics");
    let d = dir.path();
    make(d, 21, "ORDERS", 100, 16, None);
    make(d, 23, "DEAD", 100, 16, None);
    make(d, 22, "JOBS", 100, 16, Some(LeaseSpec { dead_letter: Some(23), ..LeaseSpec::default() }));
    let orders = Queue::open(d, 21).unwrap();
    for i in 0..9u8 {
        orders.push(&[i]).unwrap();
    }
    let mut out = [0u8; 16];
    orders.pop(&mut out, Wait::NoWait).unwrap();
    let jobs = Queue::open(d, 22).unwrap();
    for i in 0..4u8 {
        jobs.push(&[i]).unwrap();
    }
    let (_, a) = jobs.pop_lease(&mut out, Wait::NoWait, Duration::from_secs(60)).unwrap();
    let (_, _b) = jobs.pop_lease(&mut out, Wait::NoWait, Duration::from_secs(60)).unwrap();
    jobs.reject(&a).unwrap();
    // A consumer asleep in another thread: a waiter.
    let dead = std::sync::Arc::new(Queue::open(d, 23).unwrap());
    let empty = {
        let mut spec = Spec::new(10, 8);
        spec.name = "EMPTY".into();
        Queue::create(d, 24, &spec).unwrap();
        std::sync::Arc::new(Queue::open(d, 24).unwrap())
    };
    let sleeper = {
        let e = empty.clone();
        std::thread::spawn(move || {
            let mut b = [0u8; 8];
            e.pop(&mut b, Wait::Forever).unwrap()
        })
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while empty.stats().waiters == 0 {
        assert!(Instant::now() < deadline, "the sleeper never slept");
        std::thread::sleep(Duration::from_millis(2));
    }
    // Nothing moves from here until the comparison is done: one instant.
    let text = ok(&tvmq(d, &["metrics"]));
    for id in [21u32, 22, 23, 24] {
        let stat: serde_json::Value =
            serde_json::from_str(&ok(&tvmq(d, &["stat", &id.to_string(), "--json"]))).unwrap();
        let name = stat["name"].as_str().unwrap();
        let l = format!("{{queue=\"{id}\",name=\"{name}\"}}");
        let n = |v: &serde_json::Value| v.as_u64().unwrap();
        assert_eq!(value(&text, &format!("tvmq_queue_depth{l}")), n(&stat["depth"]), "{id} depth");
        assert_eq!(value(&text, &format!("tvmq_queue_capacity{l}")), n(&stat["capacity"]), "{id} capacity");
        assert_eq!(value(&text, &format!("tvmq_queue_pushed_total{l}")), n(&stat["pushed"]), "{id} pushed");
        assert_eq!(value(&text, &format!("tvmq_queue_popped_total{l}")), n(&stat["popped"]), "{id} popped");
        assert_eq!(value(&text, &format!("tvmq_queue_waiters{l}")), n(&stat["waiters"]), "{id} waiters");
        let procs = stat["processes"].as_array().unwrap().len() as u64;
        assert_eq!(value(&text, &format!("tvmq_queue_processes{l}")), procs, "{id} processes");
        if stat["leases"].is_null() {
            assert!(!text.contains(&format!("tvmq_queue_leases_in_flight{l}")), "{id}: no lease series");
        } else {
            let s = &stat["leases"];
            assert_eq!(value(&text, &format!("tvmq_queue_leases_in_flight{l}")), n(&s["in_flight"]), "{id} in flight");
            assert_eq!(value(&text, &format!("tvmq_queue_redelivered_total{l}")), n(&s["redelivered"]));
            assert_eq!(value(&text, &format!("tvmq_queue_expired_total{l}")), n(&s["expired"]));
            assert_eq!(value(&text, &format!("tvmq_queue_dead_lettered_total{l}")), n(&s["dead_lettered"]));
        }
    }
    // What was done, as numbers.
    assert_eq!(value(&text, "tvmq_queue_depth{queue=\"21\",name=\"ORDERS\"}"), 8);
    assert_eq!(value(&text, "tvmq_queue_leases_in_flight{queue=\"22\",name=\"JOBS\"}"), 1);
    assert_eq!(value(&text, "tvmq_queue_dead_lettered_total{queue=\"22\",name=\"JOBS\"}"), 1);
    assert_eq!(value(&text, "tvmq_queue_depth{queue=\"23\",name=\"DEAD\"}"), 1);
    assert_eq!(value(&text, "tvmq_queue_waiters{queue=\"24\",name=\"EMPTY\"}"), 1);
    assert_eq!(value(&text, "tvmq_queue_processes{queue=\"21\",name=\"ORDERS\"}"), 1, "this test's process");
    assert_eq!(value(&text, "tvmq_queues"), 4);
    match common::promtool_complaints(&text) {
        Some(said) => assert_eq!(said, "", "promtool check metrics"),
        None => eprintln!("SKIP promtool check: promtool is not installed (Debian: prometheus)"),
    }
    // The bound: two listed, the rest summed.
    let text = ok(&tvmq(d, &["metrics", "--max-queues", "2"]));
    assert_eq!(value(&text, "tvmq_queue_depth{queue=\"other\",name=\"\"}"), 1, "23 and 24 summed");
    assert_eq!(value(&text, "tvmq_queue_capacity{queue=\"other\",name=\"\"}"), 110);
    assert_eq!(value(&text, "tvmq_queues_summed"), 2);
    empty.push(b"wake").unwrap();
    assert_eq!(sleeper.join().unwrap(), 4);
    drop((orders, jobs, dead, empty));
}

#[test]
fn push_and_pop_by_hand() {
    let dir = TempDir::new("cli", "push-pop");
    let d = dir.path();
    make(d, 21, "Q", 4, 8, None);
    assert_eq!(ok(&tvmq(d, &["push", "21", "one", "two"])), "pushed 2 record(s) to queue 21\n");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tvmq"))
        .args(["--dir", &d.display().to_string(), "push", "21"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"three\r\n").unwrap();
    assert!(child.wait_with_output().unwrap().status.success());
    assert_eq!(ok(&tvmq(d, &["push", "21", "--hex", "00ff"])), "pushed 1 record(s) to queue 21\n");
    // Full: the count pushed before it.
    let o = tvmq(d, &["push", "21", "x"]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("DATA_SPC_FULL")
            && String::from_utf8_lossy(&o.stderr).contains("after 0")
    );
    let o = tvmq(d, &["push", "21", "123456789"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("RECD_TOO_LONG"));
    assert!(!tvmq(d, &["push", "21", "--hex", "0g"]).status.success());
    assert_eq!(ok(&tvmq(d, &["pop", "21", "--count", "3"])), "one\ntwo\nthree\n");
    assert_eq!(ok(&tvmq(d, &["pop", "21", "--hex"])), "00ff\n");
    let o = tvmq(d, &["pop", "21"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("queue 21 is empty"));
    let o = tvmq(d, &["pop", "21", "--wait", "0.2"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("nothing came to queue 21 within 0.2 s"));
    // --wait: a record pushed meanwhile comes.
    let q = Queue::open(d, 21).unwrap();
    let pusher = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        q.push(b"late").unwrap();
    });
    assert_eq!(ok(&tvmq(d, &["pop", "21", "--wait", "20"])), "late\n");
    pusher.join().unwrap();
    // --lease: acknowledged once written; nothing left leased.
    make(d, 22, "L", 4, 8, Some(LeaseSpec::default()));
    ok(&tvmq(d, &["push", "22", "a", "b"]));
    assert_eq!(ok(&tvmq(d, &["pop", "22", "--lease", "30000", "--count", "5"])), "a\nb\n");
    let l = Queue::inspect(d, 22).unwrap().lease_stats().unwrap();
    assert_eq!((l.in_flight, l.waiting), (0, 0));
    assert!(!tvmq(d, &["pop", "21", "--lease", "1000"]).status.success(), "no leases on queue 21");
}

/// `tvmq` under `prlimit --nofile=N:N` (it cannot raise its soft limit).
fn limited(dir: &Path, nofile: u64, args: &[&str]) -> Command {
    let mut c = Command::new("prlimit");
    c.arg(format!("--nofile={nofile}:{nofile}")).arg("--").arg(env!("CARGO_BIN_EXE_tvmq")).arg("--dir").arg(dir);
    c.args(args);
    c
}

/// `tvmq metrics` at an open-file limit of 16, soft and hard, reads 2,000
/// queues all the same (a view holds no descriptor); `--listen` at a limit
/// that leaves it fewer connections than its 64 says so and serves, and at
/// one that leaves it none refuses to start, saying why.
#[test]
fn metrics_read_more_queues_than_the_open_file_limit_and_say_what_it_leaves() {
    let dir = TempDir::new("cli", "metrics-nofile");
    let d = dir.path();
    let n = 2000;
    for id in 1..=n {
        make(d, id, &format!("Q{id}"), 4, 8, None);
    }
    Queue::open(d, 7).unwrap().push(b"x").unwrap();
    let o = limited(d, 16, &["metrics"]).output().unwrap();
    let text = ok(&o);
    assert_eq!(value(&text, "tvmq_queues"), u64::from(n));
    assert_eq!(value(&text, "tvmq_queues_unreadable"), 0);
    assert_eq!(value(&text, "tvmq_queue_depth{queue=\"7\",name=\"Q7\"}"), 1);
    assert_eq!(value(&text, &format!("tvmq_queue_capacity{{queue=\"{n}\",name=\"Q{n}\"}}")), 4);

    let o = limited(d, 16, &["metrics", "--listen", "127.0.0.1:0"]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("the open-file limit is 16") && err.contains("too low to serve metrics"), "{err}");

    let mut child = limited(d, 48, &["metrics", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
    let addr = line.split("http://").nth(1).and_then(|a| a.split('/').next()).expect("its address").to_string();
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    std::io::Write::write_all(&mut s, b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut s, &mut answer).unwrap();
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:.200}");
    assert_eq!(value(&answer, "tvmq_queues_unreadable"), 0);
    assert!(err.contains("warning: the open-file limit is 48") && err.contains("connections at once, not 64"), "{err}");
}
