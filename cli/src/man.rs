//! The manual pages (`tvmq man`, `make install`): tvmq(1) and
//! tvmq-<subcommand>(1), made from the same clap definitions as `--help`,
//! with a synopsis naming every option's value, the `--help` text after
//! the options as NOTES and EXAMPLES (examples set as written, never
//! wrapped mid-command), and the ENVIRONMENT and EXIT STATUS of the command.

use clap::{Arg, ArgAction, Command};
use std::io::Write;

/// The environment variables tvmq (and the library it is built on) reads,
/// with what they do. A test checks that every variable the code reads is
/// here.
pub const ENVIRONMENT: &[(&str, &str)] = &[
    ("TVMDBD", "The queue directory, as in STVM (default /dev/shm/tvmq-<uid>); --dir overrides it."),
    (
        "TVMQ_POPULATE",
        "0: a process attaching a queue does not map every page at once (the first touches fault them in).",
    ),
    (
        "TVMQ_UNBLOCK_TIMEOUT_MS",
        "Overrides the queues' unblock timeout for this process: how long a stalled slot whose holder \
         cannot be identified is waited for before it is recovered.",
    ),
    (
        "TVMQ_SPIN_US",
        "How long a blocking pop of this process spins on an empty queue before it sleeps, in \
         microseconds (-1: never sleeps); overrides the queue's --spin-us.",
    ),
    ("TVMQ_REQUIREPASS", "tvmq serve: the password, when neither --requirepass nor --requirepass-file gives one."),
    (
        "TVMQ_SERVE_SYNC",
        "tvmq serve: how durable (always) queues are synced for the replies waiting on them: hybrid (the \
         default: each worker syncs inline when it is idle and its disk's recent syncs were fast, on its \
         own io_uring otherwise), ring (always the io_uring), threads (the sync threads), or inline (a \
         measurement aid: the worker always waits for the disk); any other value is hybrid.",
    ),
    (
        "TVMQ_SERVE_SYNC_LINGER_US",
        "tvmq serve: how long a thread syncing durable queues waits for more work before it sleeps, in \
         microseconds (default 400; 0: never).",
    ),
    (
        "SSL_CERT_FILE",
        "libtvm's network client (lTvmConnectTls) without a CA file: the CA bundle to trust instead of \
         the system's.",
    ),
    ("TVMQ_TEST_SYNC_DELAY_MS", "For the project's tests only (leave unset): delays every sync of a durable queue."),
    ("TVMQ_SERVE_TEST_SYNC_DELAY_MS", "For the project's tests only (leave unset): delays tvmq serve's syncs."),
    (
        "TVMQ_SERVE_TEST_CREATE_DELAY_MS",
        "For the project's tests only (leave unset): delays tvmq serve's creation of queues.",
    ),
];

/// Text made safe for roff: backslashes and hyphens escaped, and a line
/// that would start with a control character protected.
fn esc(s: &str) -> String {
    let s = s.replace('\\', "\\e").replace('-', "\\-");
    s.lines()
        .map(|l| if l.starts_with(['.', '\'']) { format!("\\&{l}") } else { l.to_string() })
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_builtin(a: &Arg) -> bool {
    matches!(a.get_id().as_str(), "help" | "version")
}

/// `--rows N`, `--json`, or `<ID>`, in roff (bold option, italic value),
/// bracketed when optional.
fn synopsis_item(a: &Arg) -> String {
    let value = a
        .get_value_names()
        .map(|v| v.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| a.get_id().as_str().to_uppercase());
    let takes_value = matches!(a.get_action(), ArgAction::Set | ArgAction::Append);
    let text = match a.get_long() {
        Some(long) if takes_value => format!("\\fB\\-\\-{}\\fR\\ \\fI{}\\fR", esc(long), esc(&value)),
        Some(long) => format!("\\fB\\-\\-{}\\fR", esc(long)),
        None => format!("\\fI{}\\fR", esc(&value)),
    };
    if a.is_required_set() { text } else { format!("[{text}]") }
}

/// SYNOPSIS: the command, then every option and argument with its value's
/// name (`tvmq [--dir DIR] create [--rows N] ...`).
fn synopsis(cmd: &Command, sub: bool, w: &mut dyn Write) -> std::io::Result<()> {
    let mut line = String::from("\\fBtvmq\\fR [\\fB\\-\\-dir\\fR\\ \\fIDIR\\fR]");
    if sub {
        line += &format!(" \\fB{}\\fR", esc(cmd.get_name()));
    }
    let args: Vec<&Arg> =
        cmd.get_arguments().filter(|a| !a.is_hide_set() && !is_builtin(a) && !a.is_global_set()).collect();
    let (positional, options): (Vec<&Arg>, Vec<&Arg>) = args.into_iter().partition(|a| a.is_positional());
    for a in options.iter().chain(&positional) {
        line += " ";
        line += &synopsis_item(a);
    }
    if !sub {
        line += " \\fISUBCOMMAND\\fR ...";
    }
    // Left-aligned, never hyphenated: an option is never cut in two.
    writeln!(w, ".SH SYNOPSIS\n.nh\n.ad l\n{line}\n.ad\n.hy")
}

/// The `--help` text after the options: what comes before its first
/// "Example" line as NOTES, the rest as EXAMPLES, set line for line.
fn after_help(cmd: &Command, w: &mut dyn Write) -> std::io::Result<()> {
    let Some(text) = cmd.get_after_help().map(|t| t.to_string()) else { return Ok(()) };
    let at = text.lines().position(|l| l.starts_with("Example")).unwrap_or(usize::MAX);
    let lines: Vec<&str> = text.lines().collect();
    let (notes, examples) = lines.split_at(at.min(lines.len()));
    let notes = notes.join("\n");
    if !notes.trim().is_empty() {
        writeln!(w, ".SH NOTES")?;
        for para in notes.split("\n\n").filter(|p| !p.trim().is_empty()) {
            writeln!(w, ".PP\n{}", esc(para.trim()))?;
        }
    }
    if let Some((_, body)) = examples.split_first() {
        writeln!(w, ".SH EXAMPLES\n.nf")?;
        for l in body {
            writeln!(w, "{}", if l.trim().is_empty() { String::new() } else { esc(l) })?;
        }
        writeln!(w, ".fi")?;
    }
    Ok(())
}

fn environment(w: &mut dyn Write) -> std::io::Result<()> {
    writeln!(w, ".SH ENVIRONMENT")?;
    for (name, what) in ENVIRONMENT {
        writeln!(w, ".TP\n\\fB{}\\fR\n{}", esc(name), esc(what))?;
    }
    Ok(())
}

fn exit_status(w: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        w,
        ".SH EXIT STATUS\n.TP\n0\nSuccess.\n.TP\n1\nThe command failed: one line on standard error says what \
         happened first and ends with the code's name, e.g. (TBL_NOT_FOUND).\n.TP\n2\nA usage error: the line \
         names the help to read (tvmq create \\-\\-help).\n.TP\n130, 143\nStopped by SIGINT or SIGTERM (tvmq \
         import, tvmq bench), after saying what it had done or removing what it had made."
    )
}

/// The pages: tvmq(1), then tvmq-<subcommand>(1) for each subcommand of
/// `cli` (built), with their file names.
pub fn pages(cli: Command) -> Vec<(String, Command)> {
    let mut cmd = cli.disable_help_subcommand(true);
    cmd.build();
    let mut pages: Vec<Command> = vec![cmd.clone()];
    pages.extend(cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
    pages
        .into_iter()
        .map(|c| {
            let file = clap_mangen::Man::new(c.clone()).get_filename();
            (file, c)
        })
        .collect()
}

/// Writes page `cmd` (a subcommand's when `sub`).
pub fn render(cmd: &Command, sub: bool, w: &mut dyn Write) -> std::io::Result<()> {
    let man =
        clap_mangen::Man::new(cmd.clone()).source(format!("tvmq {}", env!("CARGO_PKG_VERSION"))).manual("tvmq manual");
    man.render_title(w)?;
    man.render_name_section(w)?;
    synopsis(cmd, sub, w)?;
    man.render_description_section(w)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(w)?;
    }
    if cmd.has_subcommands() {
        man.render_subcommands_section(w)?;
    }
    after_help(cmd, w)?;
    environment(w)?;
    exit_status(w)?;
    if cmd.get_version().is_some() {
        man.render_version_section(w)?;
    }
    Ok(())
}
