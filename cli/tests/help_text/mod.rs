//! Reading `tvmq --help` texts, shared by the tests that hold the manual
//! pages and the README's synopses to them.

/// The long options of a `--help` text's "Options:" section.
pub fn options(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Options:"))
        .map(str::trim_start)
        .filter(|l| l.starts_with("--") || (l.starts_with('-') && l.get(2..4) == Some(", ")))
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with("--")))
        .map(|w| w.trim_end_matches(',').to_string())
        .collect()
}
