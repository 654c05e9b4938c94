//! `tvmq`: create, drop, list, inspect and repair tvmq queues; serve them
//! over the network; measure them.
//!
//! Queues live in `$TVMDBD` (default `/dev/shm/tvmq-<uid>`), like the library's.

// The doc comments of the clap definitions are the help texts, written for a terminal.
#![allow(rustdoc::invalid_html_tags)]

mod create;
mod def;
mod inspect;
mod interrupt;
mod leases;
mod man;
mod metrics;
mod records;
mod top;
mod transfer;

use clap::error::{ContextKind, ContextValue};
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tvm::Error;

#[derive(Parser)]
#[command(name = "tvmq", version, about = "Administer tvmq shared-memory queues (the STVM queue API)")]
#[command(after_help = "Queues live in $TVMDBD, or /dev/shm/tvmq-<uid> when it is unset; --dir overrides both.\n\
    Errors are one line on stderr and a non-zero exit status (2 for a usage error).\n\n\
    Example:\n  tvmq create 21 --rows 4000000 --size 304 && tvmq stat 21")]
struct Cli {
    /// Queue directory (default: $TVMDBD, else /dev/shm/tvmq-<uid>)
    #[arg(long, global = true, value_name = "DIR")]
    dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create a queue holding exactly --rows records of up to --size bytes, or the queues of a definition file
    Create(create::CreateArgs),
    /// Remove a queue; processes blocked on it wake with SHM_ERR_EIDRM
    #[command(after_help = "Example:\n  tvmq drop 21")]
    Drop {
        /// Queue id
        id: u32,
    },
    /// List the queues: id, name, record size, capacity, depth, file
    #[command(after_help = "Examples:\n  tvmq list\n  tvmq list --json | python3 -m json.tool")]
    List {
        /// One JSON document: {"dir", "queues": [{"id", "name", "record_size", "capacity", "depth", "file"} or {"id", "error"}]}
        #[arg(long)]
        json: bool,
    },
    /// Show a queue's header, counters, waiters, processes and fields (tvmq top: all of them, live)
    #[command(
        after_help = "Examples:\n  tvmq stat 21\n  tvmq stat 21 --json\n  tvmq top        # every queue, live, with rates"
    )]
    Stat {
        /// Queue id
        id: u32,
        /// One JSON document (keys in docs/cli-json.md)
        #[arg(long)]
        json: bool,
    },
    /// Print the records at the head of a queue without removing them, decoded by its field list (hex without one)
    #[command(
        after_help = "Examples:\n  tvmq peek 21\n  tvmq peek 21 --count 100 --json\n  tvmq peek 21 --leases   # records leased, waiting for another delivery, bound for the dead-letter queue"
    )]
    Peek {
        /// Queue id
        id: u32,
        /// How many records, from the oldest
        #[arg(long, value_name = "N", default_value_t = 10)]
        count: usize,
        /// One JSON document: {"id", "depth", "records": [{"position", "state", "length", "fields" or "hex"}]}
        #[arg(long)]
        json: bool,
        /// Show the records of the queue's lease table instead (leased, waiting to be delivered again, bound for the dead-letter queue)
        #[arg(long)]
        leases: bool,
    },
    /// A live view of every queue: depth, rates, waiters, processes, leases, syncs (q or Ctrl-C quits)
    #[command(
        after_help = "Keys: Up/Down PgUp/PgDn Home/End move, Enter one queue's detail with sparklines (Esc back),\n\
        s the next sort key, r reverse, / a filter on id or name, q or Ctrl-C quit.\n\n\
        Examples:\n  tvmq top\n  tvmq top --interval 0.5"
    )]
    Top(top::TopArgs),
    /// Print every queue's counters in the Prometheus text format, or serve them with a web dashboard
    Metrics(metrics::MetricsArgs),
    /// Push records to a queue: the arguments, or the lines of stdin (text or --hex)
    Push(records::PushArgs),
    /// Pop records from a queue and print them, a line each (text or --hex)
    Pop(records::PopArgs),
    /// Make everything pushed and popped on a queue so far durable (on
    /// stable storage) before returning
    #[command(after_help = "Example:\n  tvmq sync 21")]
    Sync {
        /// Queue id
        id: u32,
    },
    /// Recover what killed processes left in a queue: records they had taken
    /// (delivered again), pushes they had begun (skipped), their sleepers;
    /// and remove the live parts (in /dev/shm/tvmq-<uid>) of durable queues
    /// whose files were removed otherwise than by `tvmq drop`
    #[command(after_help = "Example:\n  tvmq repair 21")]
    Repair {
        /// Queue id
        id: u32,
    },
    /// Write a copy of a queue's records, at one instant, to a file (text
    /// lines or binary), consuming none
    Export(transfer::ExportArgs),
    /// Append the records of an export (text or binary) to a queue
    Import(transfer::ImportArgs),
    /// Measure tvmq against crossbeam, the bare ring, redis-server (and, given
    /// by `make bench`, the seed programs, the C driver, Boost.Interprocess,
    /// DPDK's rte_ring and a pipe)
    #[command(
        after_help = "Its queues go in a directory of its own, tvmq-bench-<pid>, under --dir or $TVMDBD when given, \
        else under /dev/shm; it is removed at the end, also when SIGINT (Ctrl-C) or SIGTERM stops the run \
        (which also kills its child processes and removes its peers' files).\n\n\
        Examples:\n  tvmq bench --only threads --runs 3\n  make bench   # the whole matrix with every peer"
    )]
    Bench(tvmq_bench::BenchArgs),
    /// Serve the queues over the network, speaking the Redis protocol
    #[command(after_help = "Examples:\n  tvmq serve                                  # 127.0.0.1:5050\n  \
        tvmq serve --port 6380 --auto-create 100000x304\n  redis-cli -p 5050 RPUSH 21 hello")]
    Serve(tvmq_server::ServeArgs),
    /// Print a shell completion script
    #[command(after_help = "Examples:\n  tvmq completions bash > /etc/bash_completion.d/tvmq\n  \
        tvmq completions zsh > ~/.zfunc/_tvmq\n  tvmq completions fish > ~/.config/fish/completions/tvmq.fish")]
    Completions {
        /// The shell
        shell: Shell,
    },
    /// Print the manual page of tvmq or of one subcommand (roff), made from
    /// the same definitions as --help; --out writes them all
    #[command(
        after_help = "Examples:\n  tvmq man | man -l -\n  tvmq man create | man -l -        # tvmq-create(1)\n  \
        tvmq man --out /usr/local/share/man/man1   # tvmq.1, tvmq-create.1, ... (make install does this)"
    )]
    Man {
        /// The subcommand whose page to print (create: tvmq-create(1)); none: tvmq(1)
        #[arg(value_name = "SUBCOMMAND")]
        command: Option<String>,
        /// Write every page (tvmq.1 and tvmq-<subcommand>.1) into this directory and list them
        #[arg(long, value_name = "DIR", conflicts_with = "command")]
        out: Option<PathBuf>,
    },
}

/// Where the queue directory comes from, for what errors say about it.
#[derive(Clone, Copy, PartialEq)]
enum DirFrom {
    Flag,
    Env,
    Default,
}

/// The queue directory must be a directory, and exist unless `missing_ok`
/// (create makes it; the default one is made by the first create, so
/// until then it holds no queues). A mistyped $TVMDBD or --dir is an error,
/// never an empty list or a server that knows no queue.
fn require_dir(dir: &Path, from: DirFrom, missing_ok: bool) -> Result<(), Error> {
    let origin = match from {
        DirFrom::Flag => " (given with --dir)",
        DirFrom::Env => " (named by $TVMDBD)",
        DirFrom::Default => "",
    };
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(Error::new(
            tvm::error::SHM_ERR_INVAL,
            format!("queue directory {}{origin} is not a directory", dir.display()),
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if missing_ok || from == DirFrom::Default {
                Ok(())
            } else {
                Err(Error::new(
                    tvm::error::TBL_NOT_FOUND,
                    format!("queue directory {}{origin} does not exist", dir.display()),
                ))
            }
        }
        Err(e) => Err(Error::new(
            tvm::error::SHM_ERR_ACCES,
            format!("cannot reach queue directory {}{origin}: {e}", dir.display()),
        )),
    }
}

fn man(command: Option<&str>, out: Option<&Path>) -> Result<(), Error> {
    let failed = |what: String| Error::new(tvm::error::SVR_EXCEPTION, what);
    let pages = man::pages(Cli::command());
    if let Some(dir) = out {
        for (i, (file, page)) in pages.iter().enumerate() {
            let path = dir.join(file);
            let mut bytes = Vec::new();
            man::render(page, i > 0, &mut bytes).map_err(|e| failed(format!("cannot render {file}: {e}")))?;
            std::fs::write(&path, bytes).map_err(|e| failed(format!("cannot write {}: {e}", path.display())))?;
            println!("{}", path.display());
        }
        return Ok(());
    }
    let file = match command {
        Some(name) => man_page_named(name)?,
        None => "tvmq.1".to_string(),
    };
    let Some(i) = pages.iter().position(|(f, _)| *f == file) else {
        return Err(failed(format!("no manual page {file}")));
    };
    man::render(&pages[i].1, i > 0, &mut std::io::stdout())
        .map_err(|e| failed(format!("cannot write the manual page: {e}")))
}

/// The file name of subcommand `name`'s manual page (`tvmq-create.1`), if
/// tvmq has that subcommand.
fn man_page_named(name: &str) -> Result<String, Error> {
    let file = format!("tvmq-{name}.1");
    let pages = man::pages(Cli::command());
    if pages.iter().any(|(f, _)| *f == file) {
        return Ok(file);
    }
    let names: Vec<&str> =
        pages.iter().skip(1).filter_map(|(f, _)| f.strip_prefix("tvmq-")?.strip_suffix(".1")).collect();
    Err(Error::new(
        tvm::error::NOT_SUPPT_OPT,
        format!("tvmq has no subcommand {name:?}: its pages are those of {}", names.join(", ")),
    ))
}

/// Raises this process's soft limit of open files to its hard limit (what
/// any process may do, as Go's runtime does at start); nothing on failure.
fn raise_open_files_limit() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit with a valid rlimit pointer.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

#[derive(ValueEnum, Clone, Copy)]
enum Shell {
    Bash,
    Zsh,
    Fish,
}

/// The help a usage error points to: `tvmq create --help` when the command
/// line names a subcommand (its first word that is not `--dir DIR`), else
/// `tvmq --help`.
fn help_named(args: &[String]) -> String {
    let mut words = args.iter().skip(1);
    let mut sub = None;
    while let Some(w) = words.next() {
        if w == "--dir" {
            words.next();
        } else if !w.starts_with('-') {
            sub = Some(w.as_str());
            break;
        }
    }
    match sub.filter(|s| Cli::command().get_subcommands().any(|c| c.get_name() == *s)) {
        Some(s) => format!("tvmq {s} --help"),
        None => "tvmq --help".to_string(),
    }
}

/// A usage error: one line on stderr naming the help to read, exit status 2.
fn usage_error(line: &str, help: &str) -> ExitCode {
    eprintln!("tvmq: {line} (see {help})");
    ExitCode::from(2)
}

/// The arguments' errors found after parsing (what clap cannot check: a
/// queue's settings together, a manual page's name): usage errors too.
fn check_usage(cli: &Cli) -> Result<(), (Error, &'static str)> {
    match &cli.command {
        Command::Create(args) => create::check(args).map_err(|e| (e, "create")),
        Command::Man { command: Some(name), .. } => man_page_named(name).map(|_| ()).map_err(|e| (e, "man")),
        _ => Ok(()),
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // --help and --version are not errors: print them as clap does.
        Err(e) if !e.use_stderr() => e.exit(),
        // A usage error: one line, like every other error, naming the help
        // of the subcommand it is about (`tvmq create --help`).
        Err(e) => {
            let text = e.to_string();
            let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
            let mut line = lines.next().unwrap_or("invalid arguments").trim_start_matches("error: ").to_string();
            if line.ends_with(':') {
                // "the following required arguments were not provided:" and the list below it.
                let more: Vec<&str> = lines.take_while(|l| !l.starts_with("Usage:")).collect();
                line = format!("{line} {}", more.join(", "));
            }
            if let Some(ContextValue::Strings(valid)) =
                e.get(ContextKind::ValidValue).filter(|v| !matches!(v, ContextValue::Strings(v) if v.is_empty()))
            {
                line = format!("{line}: one of {}", valid.join(", "));
            }
            return usage_error(&line, &help_named(&std::env::args().collect::<Vec<_>>()));
        }
    };
    if let Err((e, sub)) = check_usage(&cli) {
        let name = tvm::error::name(i64::from(e.code())).unwrap_or("UNKNOWN");
        eprintln!("tvmq: {}; see tvmq {sub} --help ({name})", e.what());
        return ExitCode::from(2);
    }
    if !matches!(cli.command, Command::Serve(_) | Command::Bench(_) | Command::Metrics(_)) {
        // Output into a closed pipe (`tvmq stat 21 | head -3`) ends the
        // command quietly, as Unix tools do. The servers (serve, metrics
        // --listen) and the benchmark keep SIGPIPE ignored: they write to
        // sockets and children.
        // SAFETY: restores the default action of one signal before any
        // thread is started; no handler is installed.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    if matches!(cli.command, Command::Serve(_) | Command::Top(_) | Command::Metrics(_) | Command::Bench(_)) {
        // The server keeps its queues and its clients open, `metrics
        // --listen` its connections (a watcher's view of a queue holds no
        // descriptor, but reading one takes up to 4): more descriptors than
        // a common soft limit of 1024 leaves them room.
        raise_open_files_limit();
    }
    let from = match (&cli.dir, std::env::var_os("TVMDBD")) {
        (Some(_), _) => DirFrom::Flag,
        (None, Some(d)) if !d.is_empty() => DirFrom::Env,
        _ => DirFrom::Default,
    };
    let dir = cli.dir.unwrap_or_else(tvm::queue_dir);
    let needs_dir = match &cli.command {
        Command::Create(_) => Some(true),
        Command::Drop { .. }
        | Command::List { .. }
        | Command::Stat { .. }
        | Command::Peek { .. }
        | Command::Sync { .. }
        | Command::Repair { .. }
        | Command::Export(_)
        | Command::Import(_)
        | Command::Top(_)
        | Command::Metrics(_)
        | Command::Push(_)
        | Command::Pop(_)
        | Command::Serve(_)
        | Command::Bench(_) => Some(false),
        Command::Completions { .. } | Command::Man { .. } => None,
    };
    if let Some(Err(e)) = needs_dir.map(|missing_ok| require_dir(&dir, from, missing_ok)) {
        eprintln!("tvmq: {e}");
        return ExitCode::FAILURE;
    }
    let cli_is_serve = matches!(cli.command, Command::Serve(_));
    let result: Result<(), Error> = match cli.command {
        Command::Create(args) => create::run(&dir, &args),
        Command::Drop { id } => tvm::Queue::drop_queue(&dir, id).map(|()| println!("dropped queue {id}")),
        Command::List { json } => inspect::list(&dir, json),
        Command::Stat { id, json } => inspect::stat(&dir, id, json),
        Command::Peek { id, count, json, leases } => inspect::peek(&dir, id, count, json, leases),
        // Its own directory under --dir or $TVMDBD when given, else under /dev/shm.
        Command::Bench(args) => tvmq_bench::run(&args, (from != DirFrom::Default).then_some(dir.as_path())),
        Command::Repair { id } => inspect::repair(&dir, id),
        Command::Sync { id } => inspect::sync(&dir, id),
        Command::Export(args) => transfer::export(&dir, &args),
        Command::Import(args) => transfer::import(&dir, &args),
        Command::Top(args) => top::run(&dir, &args),
        Command::Metrics(args) => metrics::run(&dir, &args),
        Command::Push(args) => records::push(&dir, &args),
        Command::Pop(args) => records::pop(&dir, &args),
        Command::Serve(args) => tvmq_server::run(&dir, &args),
        Command::Completions { shell } => {
            let shell = match shell {
                Shell::Bash => clap_complete::Shell::Bash,
                Shell::Zsh => clap_complete::Shell::Zsh,
                Shell::Fish => clap_complete::Shell::Fish,
            };
            clap_complete::generate(shell, &mut Cli::command(), "tvmq", &mut std::io::stdout());
            Ok(())
        }
        Command::Man { command, out } => man(command.as_deref(), out.as_deref()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // Options of `serve` that cannot work together or are refused (no
        // listener left, protected mode, a password too short, unusable TLS
        // files): a usage error too, found once the options are read.
        Err(e) if cli_is_serve && e.code() == tvm::error::BOOT_PARM_ERR => {
            let name = tvm::error::name(i64::from(e.code())).unwrap_or("UNKNOWN");
            eprintln!("tvmq: {}; see tvmq serve --help ({name})", e.what());
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("tvmq: {e}");
            // Stopped by a signal it caught (tvmq import): the shell's status for it.
            interrupt::caught().map_or(ExitCode::FAILURE, |sig| ExitCode::from(128 + sig as u8))
        }
    }
}
