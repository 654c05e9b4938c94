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
