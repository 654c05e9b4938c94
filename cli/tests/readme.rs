//! The README's synopsis of the `tvmq` command stays in step with `--help`:
//! every subcommand has a synopsis line, and every option its `--help` lists
//! appears in that subcommand's synopsis.

use std::process::Command;

fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_tvmq")).args(args).arg("--help").output().expect("run tvmq");
    assert!(out.status.success(), "tvmq {args:?} --help failed");
    String::from_utf8(out.stdout).expect("UTF-8")
}

mod help_text;

/// The long options of a `--help` text's "Options:" section, but `--help`.
fn options(help: &str) -> Vec<String> {
    help_text::options(help).into_iter().filter(|o| o != "--help").collect()
}

/// The subcommands `tvmq --help` lists (but `help`).
fn subcommands() -> Vec<String> {
    help(&[])
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|s| *s != "help")
        .map(String::from)
        .collect()
}

/// The README's synopsis: the first text block of "## The `tvmq` command".
fn synopsis() -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).expect("README.md");
    let section = readme.split("## The `tvmq` command").nth(1).expect("a section \"The `tvmq` command\"");
    let block = section.split("```text\n").nth(1).expect("a text block in it");
    block.split("```").next().unwrap_or_default().to_string()
}

/// The synopsis of `tvmq <sub>`: its lines, with the indented lines that
/// continue them, without comments.
fn entry(synopsis: &str, sub: &str) -> String {
    let mut text = String::new();
    let mut inside = false;
    for line in synopsis.lines() {
        if line.starts_with("tvmq ") {
            inside = line.split_whitespace().nth(1) == Some(sub);
        } else if !line.starts_with(' ') {
            inside = false;
        }
        if inside {
            text.push_str(line.split("  #").next().unwrap_or_default());
            text.push('\n');
        }
    }
    text
}

/// Does `text` contain `option` as a whole word (not `--runs` in `--runsx`)?
fn mentions(text: &str, option: &str) -> bool {
    text.match_indices(option)
        .any(|(at, _)| !text[at + option.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '-'))
}

#[test]
fn every_option_of_help_is_in_the_readme_synopsis() {
    let synopsis = synopsis();
    let subs = subcommands();
    assert!(subs.len() >= 11 && subs.iter().any(|s| s == "create"), "subcommands: {subs:?}");
    let global = options(&help(&[]));
    assert!(global.contains(&"--dir".to_string()), "{global:?}");
    let mut missing = Vec::new();
    for option in &global {
        if !mentions(&synopsis, option) {
            missing.push(format!("tvmq {option}"));
        }
    }
    for sub in &subs {
        let text = entry(&synopsis, sub);
        if text.is_empty() {
            missing.push(format!("tvmq {sub} (no synopsis line)"));
            continue;
        }
        for option in options(&help(&[sub])).iter().filter(|o| !global.contains(o)) {
            if !mentions(&text, option) {
                missing.push(format!("tvmq {sub} {option}"));
            }
        }
    }
    assert!(missing.is_empty(), "README.md's synopsis lacks: {}\n{synopsis}", missing.join(", "));
}
