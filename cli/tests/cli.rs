//! The `tvmq` command line: create, list, stat and drop print what they
//! should, and every error is a non-zero exit with exactly one line on stderr.

#[path = "../../tests/common/mod.rs"]
mod common;
use common::TempDir;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};
use tvm::error::SHM_ERR_EIDRM;
use tvm::queue_path;
use tvm::{Field, FieldKind, Queue, Spec, Wait};

struct Run {
    status: std::process::ExitStatus,
    stdout: String,
    stderr: String,
}

impl From<Output> for Run {
    fn from(o: Output) -> Run {
        Run {
            status: o.status,
            stdout: String::from_utf8(o.stdout).expect("stdout is UTF-8"),
            stderr: String::from_utf8(o.stderr).expect("stderr is UTF-8"),
        }
    }
}

/// `tvmq --dir <dir> args...`, with TVMDBD pointing elsewhere (a directory
/// that does not exist) so that only --dir can be used.
fn tvmq(dir: &Path, args: &[&str]) -> Run {
    Command::new(env!("CARGO_BIN_EXE_tvmq"))
        .arg("--dir")
        .arg(dir)
        .args(args)
        .env("TVMDBD", dir.join("not-this-one"))
        .output()
        .expect("run tvmq")
        .into()
}

#[track_caller]
fn ok(r: &Run) -> &str {
    assert!(r.status.success(), "tvmq failed ({}): stdout:\n{}stderr:\n{}", r.status, r.stdout, r.stderr);
    assert_eq!(r.stderr, "", "tvmq succeeded but wrote to stderr");
    &r.stdout
}

/// A failed run: non-zero status, nothing on stdout, exactly one line on
/// stderr, which contains every one of `words` (case-insensitive).
#[track_caller]
fn fails(r: &Run, words: &[&str]) {
    assert!(!r.status.success(), "tvmq succeeded; stdout:\n{}", r.stdout);
    assert!(r.status.code().is_some(), "tvmq died of a signal: {}", r.status);
    assert_eq!(r.stdout, "", "tvmq failed but wrote to stdout");
    assert!(
        r.stderr.ends_with('\n') && r.stderr.lines().count() == 1 && !r.stderr.trim().is_empty(),
        "stderr must be exactly one line, got {} lines:\n{}",
        r.stderr.lines().count(),
        r.stderr
    );
    let lower = r.stderr.to_lowercase();
    for w in words {
        assert!(lower.contains(&w.to_lowercase()), "stderr does not mention {w:?}: {}", r.stderr);
    }
}

/// A failed run whose one line of stderr says what happened first, in the
/// command's terms (`first`), and ends with the code's name.
#[track_caller]
fn fails_with(r: &Run, first: &str, code: &str) {
    fails(r, &[]);
    let line = r.stderr.trim_end();
    assert!(line.starts_with(&format!("tvmq: {first}")), "expected {first:?} first: {line}");
    assert!(line.ends_with(&format!("({code})")), "expected ({code}) last: {line}");
}

/// `tvmq args...` with $TVMDBD = `env_dir` and no --dir.
fn tvmq_env(env_dir: &Path, args: &[&str]) -> Run {
    Command::new(env!("CARGO_BIN_EXE_tvmq")).args(args).env("TVMDBD", env_dir).output().expect("run tvmq").into()
}

/// The value of a `stat` line `key   value`.
#[track_caller]
fn stat_value<'a>(stat: &'a str, key: &str) -> &'a str {
    stat.lines()
        .find_map(|l| l.strip_prefix(key).filter(|rest| rest.starts_with("  ") || rest.starts_with(' ')).map(str::trim))
        .unwrap_or_else(|| panic!("no {key:?} line in stat output:\n{stat}"))
}

/// The rows of `list`, split on whitespace, header excluded (and checked).
#[track_caller]
fn list_rows(out: &str) -> Vec<Vec<String>> {
    let mut lines = out.lines();
    let header: Vec<&str> = lines.next().expect("list prints a header").split_whitespace().collect();
    assert_eq!(header, ["ID", "NAME", "RECORD", "CAPACITY", "DEPTH", "FILE"], "list header");
    lines.map(|l| l.split_whitespace().map(String::from).collect()).collect()
}

#[test]
fn create_list_stat_drop() {
    let tmp = TempDir::new("cli", "cycle");
    let dir = tmp.path();
    let path = queue_path(dir, 21);

    let out = tvmq(dir, &["create", "21", "--rows", "100", "--size", "304", "--name", "orders"]);
    let out = ok(&out);
    assert_eq!(out.lines().count(), 1, "create prints one line: {out}");
    assert!(out.starts_with("created queue 21 "), "{out}");
    for part in ["100 rows x 304 bytes", "mode 0600", path.to_str().unwrap()] {
        assert!(out.contains(part), "create output lacks {part:?}: {out}");
    }
    assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o7777, 0o600);

    // A few pushes and pops through the library.
    let q = Queue::open(dir, 21).unwrap();
    for i in 0..5u8 {
        q.push(&[i; 10]).unwrap();
    }
    let mut buf = [0u8; 304];
    q.pop(&mut buf, Wait::NoWait).unwrap();
    q.pop(&mut buf, Wait::NoWait).unwrap();

    let list = tvmq(dir, &["list"]);
    let rows = list_rows(ok(&list));
    assert_eq!(rows, [["21", "orders", "304", "100", "3", path.to_str().unwrap()]], "list:\n{}", list.stdout);

    let stat = tvmq(dir, &["stat", "21"]);
    let stat = ok(&stat);
    for (key, want) in [
        ("queue", "21".to_string()),
        ("name", "orders".into()),
        ("file", path.display().to_string()),
        ("layout version", "2".into()),
        ("mode", "0600".into()),
        ("record size", "304 bytes (slot 320 bytes)".into()),
        ("capacity", "100 records".into()),
        ("file size", format!("{} bytes", Spec::new(100, 304).file_size().unwrap())),
        ("depth", "3".into()),
        ("pushed", "5".into()),
        ("popped", "2".into()),
        ("waiters", "0".into()),
        ("dropped", "no".into()),
        ("processes", "1".into()),
        ("fields", "0".into()),
    ] {
        assert_eq!(stat_value(stat, key), want, "stat {key}:\n{stat}");
    }
    assert!(stat_value(stat, "created").ends_with("UTC"), "{stat}");
    // The process table lists this test process, which holds the queue open.
    let me = format!("pid {:>8}", std::process::id());
    assert!(stat.lines().any(|l| l.contains(&me)), "stat does not list this process ({me}):\n{stat}");

    let dropped = tvmq(dir, &["drop", "21"]);
    assert_eq!(ok(&dropped).trim_end(), "dropped queue 21");
    assert!(!path.exists());
    assert_eq!(q.push(b"late").unwrap_err().code(), SHM_ERR_EIDRM, "the open handle sees the drop");
    assert!(list_rows(ok(&tvmq(dir, &["list"]))).is_empty());
}

#[test]
fn create_with_mode_and_default_name() {
    let tmp = TempDir::new("cli", "mode");
    let dir = tmp.path();
    let r = tvmq(dir, &["create", "22", "--rows", "3", "--size", "1", "--mode", "0660"]);
    assert!(ok(&r).contains("mode 0660"), "{}", r.stdout);
    assert_eq!(fs::metadata(queue_path(dir, 22)).unwrap().permissions().mode() & 0o7777, 0o660);
    let stat = tvmq(dir, &["stat", "22"]);
    assert_eq!(stat_value(ok(&stat), "mode"), "0660");
    assert_eq!(stat_value(&stat.stdout, "name"), "22", "the default name is the id");
    assert_eq!(stat_value(&stat.stdout, "capacity"), "3 records");
    assert_eq!(stat_value(&stat.stdout, "record size"), "1 bytes (slot 24 bytes)");
}

#[test]
fn list_shows_every_queue_sorted_and_stat_shows_fields() {
    let tmp = TempDir::new("cli", "list");
    let dir = tmp.path();
    assert!(list_rows(ok(&tvmq(dir, &["list"]))).is_empty(), "empty directory");
    let mut spec = Spec::new(50, 16);
    spec.name = "users".into();
    spec.fields = vec![
        Field { name: "acct_id".into(), offset: 0, len: 8, kind: FieldKind::Long },
        Field { name: "user_no".into(), offset: 8, len: 8, kind: FieldKind::Char },
    ];
    Queue::create(dir, 300, &spec).unwrap();
    ok(&tvmq(dir, &["create", "7", "--rows", "10", "--size", "8", "--name", "seven"]));
    ok(&tvmq(dir, &["create", "41", "--rows", "20", "--size", "9"]));
    // Not queue files: ignored by list.
    fs::write(dir.join("notes.txt"), "x").unwrap();
    fs::write(dir.join(".queue-5.tmp.1.2"), "x").unwrap();
    let list = tvmq(dir, &["list"]);
    let rows = list_rows(ok(&list));
    let ids: Vec<&str> = rows.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(ids, ["7", "41", "300"], "list:\n{}", list.stdout);
    assert_eq!(rows[0][1..5], ["seven", "8", "10", "0"]);
    assert_eq!(rows[1][1..5], ["41", "9", "20", "0"]);
    assert_eq!(rows[2][1..5], ["users", "16", "50", "0"]);

    let stat = tvmq(dir, &["stat", "300"]);
    let stat = ok(&stat);
    assert_eq!(stat_value(stat, "fields"), "2");
    let field_lines: Vec<Vec<&str>> =
        stat.lines().skip_while(|l| !l.starts_with("fields")).skip(1).map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(
        field_lines,
        [vec!["acct_id", "offset", "0", "length", "8", "long"], vec!["user_no", "offset", "8", "length", "8", "char"]],
        "stat:\n{stat}"
    );
    assert_eq!(stat_value(stat, "processes"), "0", "nobody holds the queue open");
}

#[test]
fn tvmdbd_is_the_default_directory_and_dir_overrides_it() {
    let env_dir = TempDir::new("cli", "env");
    let flag_dir = TempDir::new("cli", "flag");
    let run = |args: &[&str]| -> Run {
        Command::new(env!("CARGO_BIN_EXE_tvmq")).args(args).env("TVMDBD", env_dir.path()).output().unwrap().into()
    };
    ok(&run(&["create", "1", "--rows", "4", "--size", "8"]));
    assert!(queue_path(env_dir.path(), 1).exists(), "create without --dir uses $TVMDBD");
    let flag = flag_dir.path().to_str().unwrap();
    ok(&run(&["--dir", flag, "create", "2", "--rows", "4", "--size", "8"]));
    assert!(
        queue_path(flag_dir.path(), 2).exists() && !queue_path(env_dir.path(), 2).exists(),
        "--dir overrides $TVMDBD"
    );
    let ids: Vec<String> = list_rows(ok(&run(&["list"]))).into_iter().map(|r| r[0].clone()).collect();
    assert_eq!(ids, ["1"]);
    ok(&run(&["drop", "1"]));
    ok(&run(&["--dir", flag, "drop", "2"]));
    assert!(!queue_path(env_dir.path(), 1).exists() && !queue_path(flag_dir.path(), 2).exists());
}

#[test]
fn missing_queue_is_one_line_error() {
    let tmp = TempDir::new("cli", "missing");
    let dir = tmp.path();
    fails_with(&tvmq(dir, &["stat", "99"]), "queue 99 does not exist (no file ", "TBL_NOT_FOUND");
    fails_with(&tvmq(dir, &["drop", "99"]), "queue 99 does not exist (no file ", "TBL_NOT_FOUND");
    let nowhere = dir.join("no-such-dir");
    let first = format!("queue directory {} (given with --dir) does not exist", nowhere.display());
    fails_with(&tvmq(&nowhere, &["stat", "1"]), &first, "TBL_NOT_FOUND");
}

#[test]
fn existing_queue_is_one_line_error() {
    let tmp = TempDir::new("cli", "exists");
    let dir = tmp.path();
    ok(&tvmq(dir, &["create", "21", "--rows", "10", "--size", "8"]));
    fails_with(
        &tvmq(dir, &["create", "21", "--rows", "10", "--size", "8"]),
        "queue 21 already exists",
        "TBL_ARD_EXIST",
    );
    fails_with(
        &tvmq(dir, &["create", "21", "--rows", "99", "--size", "99"]),
        "queue 21 already exists",
        "TBL_ARD_EXIST",
    );
    let stat = tvmq(dir, &["stat", "21"]);
    assert_eq!(stat_value(ok(&stat), "capacity"), "10 records", "the existing queue is untouched");
}

#[test]
fn zero_rows_or_size_is_one_line_error() {
    let tmp = TempDir::new("cli", "zero");
    let dir = tmp.path();
    fails_with(
        &tvmq(dir, &["create", "21", "--rows", "0", "--size", "8"]),
        "--rows and --size must be",
        "CONDIT_IS_NIL",
    );
    fails_with(
        &tvmq(dir, &["create", "21", "--rows", "8", "--size", "0"]),
        "--rows and --size must be",
        "CONDIT_IS_NIL",
    );
    fails_with(
        &tvmq(dir, &["create", "21", "--rows", "18446744073709551615", "--size", "8"]),
        "18446744073709551615 rows are more than a queue holds",
        "MQUE_CRTE_BIG",
    );
    assert_eq!(fs::read_dir(dir).unwrap().count(), 0, "a failed create left files");
}

#[test]
fn bad_mode_is_one_line_error() {
    let tmp = TempDir::new("cli", "badmode");
    let dir = tmp.path();
    for mode in ["0999", "rw-rw----", "01777", ""] {
        let r = tvmq(dir, &["create", "21", "--rows", "10", "--size", "8", "--mode", mode]);
        assert_eq!(fs::read_dir(dir).unwrap().count(), 0, "--mode {mode:?} created a file");
        fails(&r, &["mode", mode]);
    }
}

#[test]
fn damaged_queue_file_is_one_line_error_for_stat_and_a_row_for_list() {
    let tmp = TempDir::new("cli", "damaged");
    let dir = tmp.path();
    ok(&tvmq(dir, &["create", "5", "--rows", "10", "--size", "8"]));
    ok(&tvmq(dir, &["create", "6", "--rows", "10", "--size", "8"]));
    fs::OpenOptions::new().write(true).open(queue_path(dir, 5)).unwrap().set_len(100).unwrap();
    let first = format!("{} is truncated", queue_path(dir, 5).display());
    fails_with(&tvmq(dir, &["stat", "5"]), &first, "SHM_ERR_INVAL");
    let list = tvmq(dir, &["list"]);
    let out = ok(&list);
    let lines: Vec<&str> = out.lines().skip(1).collect();
    assert_eq!(lines.len(), 2, "list:\n{out}");
    assert!(lines[0].trim_start().starts_with("5 ") && lines[0].contains("unreadable"), "list:\n{out}");
    assert!(lines[1].trim_start().starts_with("6 "), "list:\n{out}");
    // A damaged queue can still be dropped.
    assert_eq!(ok(&tvmq(dir, &["drop", "5"])).trim_end(), "dropped queue 5");
}

#[test]
fn unparsable_numbers_are_one_line_error() {
    let tmp = TempDir::new("cli", "badnum");
    let dir = tmp.path();
    fails(&tvmq(dir, &["create", "21", "--rows", "abc", "--size", "8"]), &["abc"]);
    fails(&tvmq(dir, &["create", "21", "--rows", "10", "--size", "-1"]), &["-1"]);
    fails(&tvmq(dir, &["stat", "x"]), &["x"]);
    assert_eq!(fs::read_dir(dir).unwrap().count(), 0, "a failed create left files");
}

#[test]
fn bench_runs_only_the_parts_asked_for() {
    let tmp = TempDir::new("cli", "bench-only");
    let out = tmp.path().join("out");
    let out_arg = out.to_str().expect("utf-8 temp path");
    let run = tvmq(tmp.path(), &["bench", "--only", "batches", "--records", "2000", "--runs", "1", "--out", out_arg]);
    assert!(run.status.success(), "bench failed: {}", run.stderr);
    let csv = fs::read_to_string(out.join("results.csv")).expect("results.csv");
    let sections: Vec<&str> = csv.lines().skip(1).map(|l| l.split(',').next().unwrap_or("")).collect();
    // lPush, lPop, lPushs, lPopup: each measured, nothing else.
    assert_eq!(sections.len(), 4, "results.csv:\n{csv}");
    assert!(sections.iter().all(|s| *s == "batch"), "results.csv:\n{csv}");
    assert!(csv.lines().skip(1).all(|l| l.ends_with(',')), "a cell failed:\n{csv}");
    fails(&tvmq(tmp.path(), &["bench", "--only", "nothing"]), &["nothing"]);
}

/// A directory on the project's disk (durable queues refuse tmpfs), removed on drop.
struct DiskDir(std::path::PathBuf);

impl DiskDir {
    fn new(tag: &str) -> DiskDir {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../target")
            .join(format!("tvmq-cli-test-{}-{tag}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).expect("create test dir");
        DiskDir(p)
    }
}

impl Drop for DiskDir {
    fn drop(&mut self) {
        // Dropped first: an interval queue's live part is a file in
        // /dev/shm/tvmq-<uid>, which the drop removes.
        for id in tvm::queue_ids(&self.0).unwrap_or_default() {
            let _ = Queue::drop_queue(&self.0, id);
        }
        let _ = fs::remove_dir_all(&self.0);
    }
}

#[test]
fn durable_create_stat_sync_and_refusals() {
    let disk = DiskDir::new("durable");
    let out = ok(&tvmq(&disk.0, &["create", "5", "--rows", "100", "--size", "304", "--durable", "always"])).to_string();
    assert!(out.contains("durable always"), "{out}");
    ok(&tvmq(&disk.0, &["create", "6", "--rows", "100", "--size", "304", "--durable", "interval=250"]));
    // Both durable and leased, with either policy.
    ok(&tvmq(
        &disk.0,
        &["create", "10", "--rows", "100", "--size", "304", "--durable", "interval=250", "--lease-ms", "500"],
    ));
    {
        let q = Queue::open(&disk.0, 10).unwrap();
        assert_eq!(q.durability(), Some(tvm::Durability::Interval(250)));
        q.push(b"leased").unwrap();
        let mut out = [0u8; 304];
        let (_, lease) = q.pop_lease(&mut out, Wait::NoWait, std::time::Duration::ZERO).unwrap();
        q.ack(&lease).unwrap();
    }
    {
        let q = Queue::open(&disk.0, 5).unwrap();
        q.push(b"one").unwrap();
    }
    let stat = ok(&tvmq(&disk.0, &["stat", "5"])).to_string();
    assert!(stat_value(&stat, "durable").starts_with("always"), "{stat}");
    assert!(stat_value(&stat, "last sync").contains("UTC"), "a push synced: {stat}");
    assert!(stat_value(&stat, "restart recovery").starts_with("never"), "{stat}");
    let stat = ok(&tvmq(&disk.0, &["stat", "6"])).to_string();
    assert!(stat_value(&stat, "durable").starts_with("interval=250"), "{stat}");
    assert!(stat_value(&stat, "last sync").starts_with("never"), "{stat}");
    let sync = ok(&tvmq(&disk.0, &["sync", "6"])).to_string();
    assert!(sync.contains("synced"), "{sync}");
    let json: serde_json::Value = serde_json::from_str(ok(&tvmq(&disk.0, &["stat", "6", "--json"]))).unwrap();
    let d = &json["durability"];
    assert_eq!(d["policy"], "interval=250");
    assert_eq!(d["window_ms"], 250);
    assert!(d["syncs"].as_u64().unwrap() >= 1 && d["last_sync_ns"].as_u64().unwrap() > 0, "{d}");
    assert!(d["last_recovery"].is_null());
    // A plain queue says it is not durable.
    ok(&tvmq(&disk.0, &["create", "7", "--rows", "10", "--size", "8"]));
    let json: serde_json::Value = serde_json::from_str(ok(&tvmq(&disk.0, &["stat", "7", "--json"]))).unwrap();
    assert!(json["durability"].is_null());
    // Refusals: tmpfs, a bad policy, a missing queue.
    let shm = TempDir::new("cli", "durable");
    fails_with(
        &tvmq(shm.path(), &["create", "5", "--rows", "10", "--size", "8", "--durable", "always"]),
        &format!("{} is on tmpfs or ramfs", shm.path().display()),
        "NOT_DURABLE",
    );
    fails(
        &tvmq(&disk.0, &["create", "8", "--rows", "10", "--size", "8", "--durable", "sometimes"]),
        &["always", "interval"],
    );
    fails(&tvmq(&disk.0, &["create", "8", "--rows", "10", "--size", "8", "--durable", "interval=0"]), &["interval"]);
    fails_with(&tvmq(&disk.0, &["sync", "9"]), "queue 9 does not exist", "TBL_NOT_FOUND");
}

#[test]
fn errors_say_what_happened_first() {
    let tmp = TempDir::new("cli", "first-words");
    let dir = tmp.path();
    // An option that cannot be honoured is not a missing argument.
    fails_with(
        &tvmq(dir, &["create", "33", "--rows", "10", "--size", "8", "--dead-letter", "33"]),
        "queue 33 cannot be its own dead-letter queue",
        "NOT_SUPPT_OPT",
    );
    // A syncing of a queue in memory says so, once.
    ok(&tvmq(dir, &["create", "74", "--rows", "10", "--size", "8"]));
    let r = tvmq(dir, &["sync", "74"]);
    fails_with(&r, "queue 74 cannot be synced to stable storage: its file ", "NOT_DURABLE");
    assert_eq!(r.stderr.matches("tmpfs").count(), 1, "{}", r.stderr);
    // A name the queue cannot keep whole is refused, not cut.
    let long = "n".repeat(tvm::MAX_NAME + 1);
    let r = tvmq(dir, &["create", "75", "--rows", "10", "--size", "8", "--name", &long]);
    assert_eq!(r.status.code(), Some(2), "a usage error");
    fails(&r, &["a queue name of 64 bytes is longer than the 63 a queue keeps"]);
    assert!(!queue_path(dir, 75).exists());
    let name = "n".repeat(tvm::MAX_NAME);
    ok(&tvmq(dir, &["create", "75", "--rows", "10", "--size", "8", "--name", &name]));
    assert_eq!(stat_value(ok(&tvmq(dir, &["stat", "75"])), "name"), name);
    let r = tvmq(dir, &["create", "76", "--rows", "10", "--size", "8", "--part", &"p".repeat(tvm::MAX_PART + 1)]);
    fails(&r, &["a partition text of 32 bytes is longer than the 31 a queue keeps"]);
    // A record longer than the queue's, through the Rust API: the sizes, then the code.
    let q = Queue::open(dir, 75).unwrap();
    let e = q.push(&[0; 9]).unwrap_err();
    assert_eq!(e.to_string(), "a record of 9 bytes is longer than queue 75's records (at most 8) (RECD_TOO_LONG)");
}

#[test]
fn a_queue_directory_that_is_missing_or_a_file_is_an_error_for_every_command() {
    let tmp = TempDir::new("cli", "bad-dir");
    let file = tmp.path().join("a-file");
    fs::write(&file, b"").unwrap();
    let missing = tmp.path().join("mistyped");
    let commands: [&[&str]; 8] = [
        &["list"],
        &["list", "--json"],
        &["stat", "1"],
        &["peek", "1"],
        &["drop", "1"],
        &["sync", "1"],
        &["repair", "1"],
        &["serve", "--port", "0"],
    ];
    for args in commands {
        let first = format!("queue directory {} (named by $TVMDBD) does not exist", missing.display());
        fails_with(&tvmq_env(&missing, args), &first, "TBL_NOT_FOUND");
        let first = format!("queue directory {} (named by $TVMDBD) is not a directory", file.display());
        fails_with(&tvmq_env(&file, args), &first, "SHM_ERR_INVAL");
    }
    let first = format!("queue directory {} (named by $TVMDBD) is not a directory", file.display());
    fails_with(&tvmq_env(&file, &["create", "1", "--rows", "1", "--size", "1"]), &first, "SHM_ERR_INVAL");
    // create makes a missing directory, as the library does.
    ok(&tvmq_env(&missing, &["create", "1", "--rows", "1", "--size", "1"]));
    assert_eq!(list_rows(ok(&tvmq_env(&missing, &["list"]))).len(), 1);
}

/// `tvmq repair` removes the live part (in /dev/shm/tvmq-<uid>) of an
/// `interval` queue whose directory was removed with `rm -rf`, and says
/// how many it removed. (Another process's create or attach meanwhile may
/// remove it first: the test asserts that it is gone and what repair says.)
#[test]
fn repair_removes_the_live_parts_of_queues_removed_with_rm() {
    use std::os::unix::fs::MetadataExt;
    let disk = DiskDir::new("repair-orphans");
    let gone = disk.0.join("gone");
    ok(&tvmq(&disk.0, &["create", "1", "--rows", "10", "--size", "8"]));
    ok(&tvmq(&gone, &["create", "6", "--rows", "1000", "--size", "304", "--durable", "interval=250"]));
    let m = fs::metadata(queue_path(&gone, 6)).unwrap();
    let mine = format!(".interval-{:x}-{}-6-", m.dev(), m.ino());
    // SAFETY: geteuid has no preconditions.
    let shm = std::path::PathBuf::from(format!("/dev/shm/tvmq-{}", unsafe { libc::geteuid() }));
    let live = fs::read_dir(&shm)
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with(&mine))
        .expect("the queue's live part")
        .path();
    fs::remove_dir_all(&gone).unwrap();
    assert!(live.exists(), "rm leaves the live part");
    let out = ok(&tvmq(&disk.0, &["repair", "1"])).to_string();
    assert!(!live.exists(), "repair removed it: {out}");
    let n: u64 = out
        .split("; ")
        .nth(1)
        .and_then(|s| s.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no count of orphaned live parts: {out}"));
    assert!(n <= 1, "{out}");
}
