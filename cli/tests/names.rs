//! Queue names are printed escaped: a name holding terminal escapes (a C
//! program may give any bytes) shows as text in `tvmq list` and `tvmq stat`,
//! never as control characters.

#[path = "../../tests/common/mod.rs"]
mod common;
use common::TempDir;
use std::process::Command;

#[test]
fn list_and_stat_escape_control_characters_in_names() {
    let dir = TempDir::new("cli", "names");
    let mut spec = tvm::Spec::new(10, 16);
    spec.name = "evil\x1b[2J\x1b]0;owned\x07\r\nname\u{9b}31m".into();
    tvm::Queue::create(dir.path(), 7, &spec).expect("create");
    for args in [&["list"][..], &["stat", "7"]] {
        let out = Command::new(env!("CARGO_BIN_EXE_tvmq")).arg("--dir").arg(dir.path()).args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}");
        let text = String::from_utf8(out.stdout).expect("UTF-8");
        assert!(!text.chars().any(|c| c.is_control() && c != '\n'), "{args:?}: control characters in {text:?}");
        assert!(text.contains("evil\\x1b[2J\\x1b]0;owned\\x07\\x0d\\x0aname\\u{9b}31m"), "{args:?}: {text}");
    }
}

/// A name (or a partition text) holding blanks cannot pass for columns or
/// rows of `tvmq list` or lines of `tvmq stat`: blanks are escaped, an
/// empty name is `-`, so every row has one word per column.
#[test]
fn names_with_blanks_cannot_forge_columns_or_rows() {
    let dir = TempDir::new("cli", "blank-names");
    let forged = format!("x{}16{}10{}0  /fake\u{a0}path\u{2003}", " ".repeat(16), " ".repeat(10), " ".repeat(12));
    for (id, name, part) in [(7, forged.as_str(), "a part\twith blanks"), (8, "", ""), (9, "-", "")] {
        let mut spec = tvm::Spec::new(10, 16);
        spec.name = name.into();
        spec.part = part.into();
        tvm::Queue::create(dir.path(), id, &spec).expect("create");
    }
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_tvmq")).arg("--dir").arg(dir.path()).args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}");
        String::from_utf8(out.stdout).expect("UTF-8")
    };
    let list = run(&["list"]);
    let rows: Vec<Vec<&str>> = list.lines().skip(1).map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows.len(), 3, "{list}");
    for row in &rows {
        assert_eq!(row.len(), 6, "one word per column: {list}");
    }
    assert_eq!(
        rows[0][1],
        "x\\x20\\x20\\x20\\x20\\x20\\x20\\x20\\x20\\x20\\x20\\x20\\x20\\x20\\x20\\x20\\x2016\\x20\\x20\\x20\\x20\\x20\\x20\\x20\\x20\\x20\\x2010\\x20\\x20\\x20\\x20\\x20\\x20\\x20\\x20\\x20\\x20\\x20\\x200\\x20\\x20/fake\\u{a0}path\\u{2003}"
    );
    assert_eq!((rows[1][1], rows[2][1]), ("-", "\\x2d"), "an empty name, and one that is a dash");
    let stat = run(&["stat", "7"]);
    let line = |key: &str| stat.lines().find(|l| l.starts_with(key)).unwrap_or_default().split_whitespace().count();
    assert_eq!((line("name "), line("partition ")), (2, 2), "{stat}");
    assert!(stat.contains("partition        a\\x20part\\x09with\\x20blanks\n"), "{stat}");
}
