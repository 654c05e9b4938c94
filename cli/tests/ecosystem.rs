//! The command's ecosystem: STVM definition files laid out as gcc lays out
//! the same structs, peek and the JSON documents, completions, the manual
//! page, --version, and output into a closed pipe.

#[path = "../../tests/common/mod.rs"]
mod common;
mod help_text;
use common::TempDir;
use help_text::options;
use serde_json::Value;
use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use tvm::{Queue, Wait};

fn tvmq(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tvmq")).arg("--dir").arg(dir).args(args).output().expect("run tvmq")
}

#[track_caller]
fn ok(out: &std::process::Output) -> String {
    assert!(out.status.success(), "tvmq failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout.clone()).expect("UTF-8")
}

#[track_caller]
fn json(out: &std::process::Output) -> Value {
    let text = ok(out);
    assert_eq!(text.lines().count(), 1, "one JSON document on one line: {text}");
    serde_json::from_str(&text).expect("valid JSON")
}

/// Varied definitions: types, orders that need padding, char(n) and char[n].
const DEFS: &[(&str, &[(&str, &str)])] = &[
    (
        "QUEUE_USER_FIELD",
        &[
            ("acct_id", "long"),
            ("user_no", "char(21)"),
            ("user_type", "char[2]"),
            ("user_nm", "char[81]"),
            ("user_addr", "char[161]"),
            ("user_phone", "char[31]"),
        ],
    ),
    ("PADDED", &[("c", "char"), ("l", "long"), ("s", "short"), ("d", "double"), ("i", "int"), ("t", "char(3)")]),
    ("SMALL", &[("a", "short"), ("b", "char(1)")]),
    ("INTS", &[("x", "int"), ("y", "char(5)"), ("z", "int"), ("w", "short")]),
    ("TAIL", &[("d", "double"), ("c", "char[9]")]),
    ("CHARS", &[("only", "char(7)")]),
];

fn c_type(member: &str, t: &str) -> String {
    let n = t.trim_start_matches("char").trim_matches(|c| "()[]".contains(c));
    if t.starts_with("char") && !n.is_empty() { format!("char {member}[{n}]") } else { format!("{t} {member}") }
}

#[test]
fn definition_files_give_the_layout_gcc_gives() {
    let tmp = TempDir::new("cli-eco", "def");
    let dir = tmp.path().join("queues");
    // The definition file, and the same structs in C printing sizeof and offsetof.
    let (mut def, mut c) =
        (String::from("-- varied queues\n"), String::from("#include <stdio.h>\n#include <stddef.h>\n"));
    for (n, (name, fields)) in DEFS.iter().enumerate() {
        writeln!(def, "set TABLE={}\nset TABLESPACE={}\ncreate queue {name}\n(", 30 + n, 10 + n).unwrap();
        let list: Vec<String> = fields.iter().map(|(m, t)| format!("    {m} {t}")).collect();
        writeln!(def, "{}\n);\n", list.join(",\n")).unwrap();
        let members: Vec<String> = fields.iter().map(|(m, t)| format!("{};", c_type(m, t))).collect();
        writeln!(c, "struct {name} {{ {} }};", members.join(" ")).unwrap();
    }
    c.push_str("int main(void) {\n");
    for (name, fields) in DEFS {
        write!(c, "  printf(\"{name} %zu",).unwrap();
        fields.iter().for_each(|_| c.push_str(" %zu"));
        write!(c, "\\n\", sizeof(struct {name})").unwrap();
        for (m, _) in *fields {
            write!(c, ", offsetof(struct {name}, {m})").unwrap();
        }
        c.push_str(");\n");
    }
    c.push_str("  return 0;\n}\n");
    let (def_path, c_path, exe) = (tmp.path().join("q.def"), tmp.path().join("layout.c"), tmp.path().join("layout"));
    std::fs::write(&def_path, def).unwrap();
    std::fs::write(&c_path, c).unwrap();
    let cc = Command::new("gcc").arg("-o").arg(&exe).arg(&c_path).status().expect("gcc");
    assert!(cc.success());
    let gcc = String::from_utf8(Command::new(&exe).output().unwrap().stdout).unwrap();

    ok(&tvmq(&dir, &["create", "--def", def_path.to_str().unwrap()]));
    for (n, line) in gcc.lines().enumerate() {
        let want: Vec<&str> = line.split(' ').collect();
        let stat = json(&tvmq(&dir, &["stat", &(30 + n).to_string(), "--json"]));
        assert_eq!(stat["name"], want[0]);
        assert_eq!(stat["capacity"], 10 + n as u64);
        assert_eq!(stat["record_size"].to_string(), want[1], "sizeof(struct {})", want[0]);
        let offsets: Vec<String> = stat["fields"].as_array().unwrap().iter().map(|f| f["offset"].to_string()).collect();
        assert_eq!(offsets, want[2..], "offsets of struct {}", want[0]);
    }
}

#[test]
fn definition_errors_name_file_line_and_column_and_create_nothing_after() {
    let tmp = TempDir::new("cli-eco", "deferr");
    let dir = tmp.path().join("queues");
    let def = tmp.path().join("bad.def");
    std::fs::write(&def, "set TABLE=40\nset TABLESPACE=5\ncreate queue A ( a long,\n  b float );\n").unwrap();
    let out = tvmq(&dir, &["create", "--def", def.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("bad.def:4:5:") && err.contains("unknown type \"float\""), "{err}");
    assert_eq!(err.lines().count(), 1);
    assert!(tvm::queue_ids(&dir).unwrap().is_empty(), "nothing created");
}

#[test]
fn peek_decodes_records_by_their_fields_and_shows_raw_bytes_without() {
    let tmp = TempDir::new("cli-eco", "peek");
    let dir = tmp.path().join("queues");
    let def = tmp.path().join("q.def");
    std::fs::write(
        &def,
        "set TABLE=21\nset TABLESPACE=8\ncreate queue U (id long, name char(8), score double, n int);",
    )
    .unwrap();
    ok(&tvmq(&dir, &["create", "--def", def.to_str().unwrap()]));
    ok(&tvmq(&dir, &["create", "22", "--rows", "8", "--size", "16"]));
    let mut rec = Vec::new();
    rec.extend_from_slice(&(-42i64).to_le_bytes());
    rec.extend_from_slice(b"alice\0\0\0");
    rec.extend_from_slice(&2.5f64.to_le_bytes());
    rec.extend_from_slice(&7i32.to_le_bytes());
    let (u, raw) = (Queue::open(&dir, 21).unwrap(), Queue::open(&dir, 22).unwrap());
    u.push(&rec).unwrap();
    u.push(&rec[..12]).unwrap(); // a short record: the rest reads as zeros
    raw.push(b"\x01\xab").unwrap();

    let p = json(&tvmq(&dir, &["peek", "21", "--json"]));
    assert_eq!(p["depth"], 2);
    let r = &p["records"][0];
    assert_eq!(
        (r["position"].as_u64(), r["state"].as_str(), r["length"].as_u64()),
        (Some(0), Some("record"), Some(28))
    );
    assert_eq!(r["fields"]["id"], -42);
    assert_eq!(r["fields"]["name"], "alice");
    assert_eq!(r["fields"]["score"], 2.5);
    assert_eq!(r["fields"]["n"], 7);
    assert_eq!(p["records"][1]["fields"]["name"], "alic", "a record cut after 12 bytes");
    assert_eq!(p["records"][1]["fields"]["score"], 0.0);
    let text = ok(&tvmq(&dir, &["peek", "21", "--count", "1"]));
    assert!(text.contains("id=-42 name=\"alice\" score=2.5 n=7"), "fields in layout order: {text}");
    assert_eq!(text.lines().count(), 2, "--count 1: a heading and one record\n{text}");

    let p = json(&tvmq(&dir, &["peek", "22", "--json"]));
    assert_eq!(p["records"][0]["hex"], "01ab");
    assert!(ok(&tvmq(&dir, &["peek", "22"])).contains("(2 bytes) 01ab"));
    // Nothing was taken.
    let mut out = [0u8; 32];
    assert_eq!(u.pop(&mut out, Wait::NoWait).unwrap(), 28);
    assert_eq!(raw.depth(), 1);
}

#[test]
fn list_and_stat_json_have_their_keys() {
    let tmp = TempDir::new("cli-eco", "json");
    let dir = tmp.path().join("queues");
    ok(&tvmq(&dir, &["create", "5", "--rows", "3", "--size", "8", "--name", "five"]));
    let l = json(&tvmq(&dir, &["list", "--json"]));
    let q = &l["queues"][0];
    assert_eq!((q["id"].as_u64(), q["name"].as_str(), q["capacity"].as_u64()), (Some(5), Some("five"), Some(3)));
    assert_eq!((q["record_size"].as_u64(), q["depth"].as_u64()), (Some(8), Some(0)));
    let s = json(&tvmq(&dir, &["stat", "5", "--json"]));
    for key in
        ["id", "name", "mode", "capacity", "depth", "pushed", "popped", "waiters", "dropped", "processes", "fields"]
    {
        assert!(s.get(key).is_some(), "stat --json has no {key:?}: {s}");
    }
    assert_eq!(s["mode"], "0600");
    // An empty directory lists no queues; a missing one is an error (a mistyped --dir).
    std::fs::create_dir(tmp.path().join("empty")).unwrap();
    let empty = json(&tvmq(&tmp.path().join("empty"), &["list", "--json"]));
    assert_eq!(empty["queues"], Value::Array(vec![]));
    assert!(!tvmq(&tmp.path().join("none"), &["list", "--json"]).status.success());
}

#[test]
fn completions_man_page_and_version() {
    let tmp = TempDir::new("cli-eco", "misc");
    for (shell, mark) in [("bash", "complete -F"), ("zsh", "#compdef tvmq"), ("fish", "complete -c tvmq")] {
        let text = ok(&tvmq(tmp.path(), &["completions", shell]));
        assert!(text.contains(mark) && text.contains("peek"), "{shell} completion");
    }
    let man = ok(&tvmq(tmp.path(), &["man"]));
    assert!(man.contains(".TH tvmq 1") && man.contains("peek"), "{man}");
    let v = ok(&tvmq(tmp.path(), &["--version"]));
    assert_eq!(v.trim(), format!("tvmq {}", env!("CARGO_PKG_VERSION")));
    // Every subcommand's help has an example.
    for sub in ["create", "drop", "list", "stat", "peek", "repair", "bench", "serve", "completions", "man"] {
        let help = ok(&tvmq(tmp.path(), &[sub, "--help"]));
        assert!(help.contains("Example"), "tvmq {sub} --help has no example:\n{help}");
    }
}

#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    let tmp = TempDir::new("cli-eco", "pipe");
    let dir = tmp.path().join("queues");
    for id in 0..300 {
        ok(&tvmq(&dir, &["create", &id.to_string(), "--rows", "1", "--size", "1"]));
    }
    // `tvmq list | head -1`: the reader goes away after one line.
    let mut child = Command::new(env!("CARGO_BIN_EXE_tvmq"))
        .arg("--dir")
        .arg(&dir)
        .arg("list")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 16];
    std::io::Read::read_exact(&mut stdout, &mut first).unwrap();
    drop(stdout);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.is_empty(), "no message, no backtrace: {err}");
    assert!(!err.contains("panicked"));
}

#[test]
fn a_manual_page_per_subcommand_with_its_options_all_installed() {
    let tmp = TempDir::new("cli-eco", "man");
    let out = tmp.path().join("man1");
    std::fs::create_dir(&out).unwrap();
    let listed = ok(&tvmq(tmp.path(), &["man", "--out", out.to_str().unwrap()]));
    let mut files: Vec<String> =
        listed.lines().map(|l| Path::new(l).file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(files[0], "tvmq.1");
    // make install installs (and make uninstall removes) exactly these.
    let makefile = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Makefile")).unwrap();
    let at = makefile.find("\nMANPAGES").expect("MANPAGES in the Makefile");
    let mut listed_in_make = Vec::new();
    for line in makefile[at + 1..].lines() {
        let words = line.trim_start_matches("MANPAGES").trim_start().trim_start_matches(":=");
        listed_in_make.extend(words.split_whitespace().filter(|w| *w != "\\").map(|w| format!("{w}.1")));
        if !line.ends_with('\\') {
            break;
        }
    }
    files.sort();
    listed_in_make.sort();
    assert_eq!(files, listed_in_make, "the Makefile's MANPAGES and `tvmq man --out`");
    for file in &files {
        let page = std::fs::read_to_string(out.join(file)).unwrap().replace("\\-", "-");
        let sub = file.strip_suffix(".1").unwrap().strip_prefix("tvmq-");
        let args: Vec<&str> = sub.into_iter().collect();
        let help = {
            let o = Command::new(env!("CARGO_BIN_EXE_tvmq")).args(&args).arg("--help").output().unwrap();
            String::from_utf8(o.stdout).unwrap()
        };
        let opts = options(&help);
        assert!(opts.len() >= 2, "{file}: {help}");
        for o in opts {
            assert!(page.contains(&o), "{file} lacks {o}");
        }
        if let Some(sub) = sub {
            assert!(page.contains(&format!(".TH tvmq-{sub} 1")), "{file}");
            assert_eq!(ok(&tvmq(tmp.path(), &["man", sub])), std::fs::read_to_string(out.join(file)).unwrap());
        }
    }
    assert!(!tvmq(tmp.path(), &["man", "nothing"]).status.success());
}

/// A roff page as text: font changes and escapes removed.
fn plain_roff(page: &str) -> String {
    page.replace("\\fB", "")
        .replace("\\fI", "")
        .replace("\\fR", "")
        .replace("\\-", "-")
        .replace("\\ ", " ")
        .replace("\\e", "\\")
        .replace("\\&", "")
}

/// The lines of section `name` of a roff page (up to the next `.SH`).
fn section<'a>(page: &'a str, name: &str) -> Vec<&'a str> {
    page.lines().skip_while(|l| *l != format!(".SH {name}")).skip(1).take_while(|l| !l.starts_with(".SH ")).collect()
}

/// The environment variables the code reads (`env::var("X")`,
/// `env::var_os("X")`, `getenv("X")`, `const ..._ENV: &str = "X"`), tests
/// and test support left out.
fn variables_the_code_reads() -> Vec<String> {
    fn scan(dir: &Path, found: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if p.is_dir() {
                if name != "tests" {
                    scan(&p, found);
                }
                continue;
            }
            if !(name.ends_with(".rs") || name.ends_with(".c") || name.ends_with(".py")) || name.contains("test") {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            for pat in ["var(\"", "var_os(\"", "getenv(\"", "_ENV: &str = \"", "environ.get(\""] {
                for (at, _) in text.match_indices(pat) {
                    let rest = &text[at + pat.len()..];
                    let var: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                        .collect();
                    if rest[var.len()..].starts_with('"') && !var.is_empty() && !found.contains(&var) {
                        found.push(var);
                    }
                }
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    for dir in ["src", "server/src", "cli/src", "bench/src", "resp/src"] {
        scan(&root.join(dir), &mut found);
    }
    found
}

/// The manual pages: placeholders in SYNOPSIS, examples set whole (never
/// wrapped mid-command), no EXTRA section, and an ENVIRONMENT section
/// naming every variable the code reads.
#[test]
fn manual_pages_have_placeholders_whole_examples_and_the_environment() {
    let tmp = TempDir::new("cli-eco", "man-sections");
    let vars = variables_the_code_reads();
    for must in ["TVMDBD", "TVMQ_SPIN_US", "TVMQ_POPULATE", "TVMQ_UNBLOCK_TIMEOUT_MS", "TVMQ_REQUIREPASS"] {
        assert!(vars.iter().any(|v| v == must), "the scan of the sources missed {must}: {vars:?}");
    }
    for sub in [None, Some("create"), Some("export"), Some("bench"), Some("serve"), Some("peek"), Some("import")] {
        let args: Vec<&str> = ["man"].into_iter().chain(sub).collect();
        let page = ok(&tvmq(tmp.path(), &args));
        let what = sub.unwrap_or("tvmq");
        assert!(!page.contains(".SH EXTRA"), "{what}: an EXTRA section");
        for name in ["SYNOPSIS", "ENVIRONMENT", "EXIT STATUS"] {
            assert!(page.contains(&format!(".SH {name}\n")), "{what}: no {name} section");
        }
        // Every option that takes a value shows its placeholder in SYNOPSIS.
        let synopsis = plain_roff(&section(&page, "SYNOPSIS").join(" "));
        let help = {
            let o = Command::new(env!("CARGO_BIN_EXE_tvmq")).args(sub).arg("--help").output().unwrap();
            String::from_utf8(o.stdout).unwrap()
        };
        for line in help.lines().map(str::trim).filter(|l| l.starts_with("--") && !l.starts_with("--help")) {
            let mut words = line.split_whitespace();
            let (opt, value) = (words.next().unwrap(), words.next().filter(|v| v.starts_with('<')));
            let shown = match value {
                Some(v) => format!("{opt} {}", v.trim_start_matches('<').trim_end_matches('>')),
                None => opt.to_string(),
            };
            if opt != "--version" {
                assert!(synopsis.contains(&shown), "{what}: SYNOPSIS lacks {shown:?}: {synopsis}");
            }
        }
        // The examples of --help, each line whole, in a no-fill block.
        let examples = section(&page, "EXAMPLES");
        assert_eq!(examples.first(), Some(&".nf"), "{what}: examples not set as written");
        let shown: Vec<String> = examples.iter().map(|l| plain_roff(l)).collect();
        for example in help.lines().filter(|l| l.trim_start().starts_with("tvmq ")) {
            assert!(shown.iter().any(|l| l == example), "{what}: the example {example:?} is not whole in:\n{shown:#?}");
        }
        let env = plain_roff(&section(&page, "ENVIRONMENT").join("\n"));
        for v in &vars {
            assert!(env.lines().any(|l| l == v), "{what}: ENVIRONMENT lacks {v}:\n{env}");
        }
    }
}
