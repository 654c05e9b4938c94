//! `tvmq`: create, drop, list and inspect tvmq queues.
//!
//! Queues live in `$TVMDBD` (default `/dev/shm/tvmq-<uid>`), like the library's.

mod create;
mod inspect;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use tvm::error::Error;

#[derive(Parser)]
#[command(name = "tvmq", version, about = "Administer tvmq shared-memory queues (the STVM queue API)")]
#[command(after_help = "Queues live in $TVMDBD, or /dev/shm/tvmq-<uid> when it is unset; --dir overrides both.")]
struct Cli {
    /// Queue directory (default: $TVMDBD, else /dev/shm/tvmq-<uid>)
    #[arg(long, global = true, value_name = "DIR")]
    dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create a queue holding exactly --rows records of up to --size bytes
    Create(create::CreateArgs),
    /// Remove a queue; processes blocked on it wake with SHM_ERR_EIDRM
    Drop {
        /// Queue id
        id: u32,
    },
    /// List the queues: id, name, record size, capacity, depth, file
    List,
    /// Show a queue's header, counters, waiters, processes and fields
    Stat {
        /// Queue id
        id: u32,
    },
    /// Recover what killed processes left in a queue: records they had taken
    /// (delivered again), pushes they had begun (skipped), their sleepers
    Repair {
        /// Queue id
        id: u32,
    },
    /// Measure tvmq against crossbeam, the bare ring (and, given by `make
    /// bench`, the seed programs, the C driver and Boost.Interprocess)
    Bench(tvmq_bench::BenchArgs),
    /// Serve the queues over the network, speaking the Redis protocol
    Serve(tvmq_server::ServeArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // --help and --version are not errors: print them as clap does.
        Err(e) if !e.use_stderr() => e.exit(),
        // A usage error: one line, like every other error (`tvmq --help` has the rest).
        Err(e) => {
            let text = e.to_string();
            let line = text.lines().next().unwrap_or("invalid arguments").trim_start_matches("error: ");
            eprintln!("tvmq: {line} (see tvmq --help)");
            return ExitCode::from(2);
        }
    };
    let dir = cli.dir.unwrap_or_else(tvm::queue_dir);
    let result: Result<(), Error> = match cli.command {
        Command::Create(args) => create::run(&dir, &args),
        Command::Drop { id } => tvm::Queue::drop_queue(&dir, id).map(|()| println!("dropped queue {id}")),
        Command::List => inspect::list(&dir),
        Command::Stat { id } => inspect::stat(&dir, id),
        Command::Bench(args) => tvmq_bench::run(&args),
        Command::Repair { id } => inspect::repair(&dir, id),
        Command::Serve(args) => tvmq_server::run(&dir, &args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tvmq: {e}");
            ExitCode::FAILURE
        }
    }
}
