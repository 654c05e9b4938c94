//! `tvmq export` and `tvmq import`: a queue's records to and from a file,
//! in the formats of `Queue::export` (README, "Export and import").

use crate::create::count;
use crate::interrupt::{self, Interruptible};
use clap::{Args, ValueEnum};
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use tvm::error::{DATA_SPC_FULL, SVR_EXCEPTION};
use tvm::{Error, ExportFormat, Queue};

#[derive(ValueEnum, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One line per record, its fields as text separated by --sep (STVM's
    /// lExportFile; only for a queue with a field list)
    Text,
    /// Every record byte for byte, after a header naming the queue's geometry
    Binary,
}

#[derive(Args)]
#[command(after_help = "Examples:\n  \
    tvmq export 21 q21.txt                 # text when queue 21 has a field list, else binary\n  \
    tvmq export 21 q21.bin --format binary\n  \
    tvmq export 21 - --sep ',' | head      # to stdout\n\n\
    The copy is that of one instant, taken while producers and consumers go on; nothing is consumed.")]
pub struct ExportArgs {
    /// Queue id
    id: u32,
    /// File to write (created, or emptied; mode 0600); - for stdout
    file: PathBuf,
    /// Form of the file (default: text for a queue with a field list, binary otherwise)
    #[arg(long, value_enum, value_name = "text|binary")]
    format: Option<Format>,
    /// Separator between the fields of a text line
    #[arg(long, default_value = "|")]
    sep: String,
}

#[derive(Args)]
#[command(after_help = "Examples:\n  \
    tvmq import 21 q21.txt\n  \
    tvmq import 21 q21.bin                 # a binary export is recognised by its header\n\n\
    Records are appended after those queued; a full queue stops the import (DATA_SPC_FULL) with the count.")]
pub struct ImportArgs {
    /// Queue id
    id: u32,
    /// Export to read (binary, or text lines); - for stdin
    file: PathBuf,
    /// Separator between the fields of a text line
    #[arg(long, default_value = "|")]
    sep: String,
}

fn io(path: &Path, e: &std::io::Error) -> Error {
    Error::new(SVR_EXCEPTION, format!("{}: {e}", path.display()))
}

pub fn export(dir: &Path, args: &ExportArgs) -> Result<(), Error> {
    let q = Queue::open(dir, args.id)?;
    let text = match args.format {
        Some(f) => f == Format::Text,
        None => !q.info().fields.is_empty(),
    };
    let format = if text { ExportFormat::Text(args.sep.clone()) } else { ExportFormat::Binary };
    let to_stdout = args.file.as_os_str() == "-";
    let n = if to_stdout {
        let mut w = BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
        q.export(&mut w, &format)?
    } else {
        use std::os::unix::fs::OpenOptionsExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&args.file)
            .map_err(|e| io(&args.file, &e))?;
        let mut w = BufWriter::with_capacity(1 << 16, f);
        q.export(&mut w, &format)?
    };
    let what = if text { "text" } else { "binary" };
    let to = if to_stdout { "stdout".to_string() } else { args.file.display().to_string() };
    let msg = format!("exported {} of queue {} to {to} ({what})", count(n, "record"), args.id);
    if to_stdout {
        eprintln!("{msg}");
    } else {
        println!("{msg}");
    }
    std::io::stdout().flush().map_err(|e| io(Path::new("stdout"), &e))
}

pub fn import(dir: &Path, args: &ImportArgs) -> Result<(), Error> {
    let q = Queue::open(dir, args.id)?;
    let from = if args.file.as_os_str() == "-" { "stdin".to_string() } else { args.file.display().to_string() };
    // Ctrl-C stops the import between records, and says how far it got.
    interrupt::catch();
    let (n, stop) = if args.file.as_os_str() == "-" {
        q.import(&mut BufReader::with_capacity(1 << 16, Interruptible(std::io::stdin().lock())), &args.sep)
    } else {
        let f = std::fs::File::open(&args.file).map_err(|e| io(&args.file, &e))?;
        q.import(&mut BufReader::with_capacity(1 << 16, Interruptible(f)), &args.sep)
    };
    let id = args.id;
    let imported = match n {
        0 => "nothing was imported".to_string(),
        n => format!("{} were imported before it and stay in queue {id}", count(n, "record")),
    };
    match stop {
        None => {
            println!("imported {} into queue {id} from {from}", count(n, "record"));
            Ok(())
        }
        Some(e) if interrupt::caught().is_some() => Err(Error::new(
            e.code(),
            format!(
                "import of {from} into queue {id} {}: {imported}",
                e.what().trim_start_matches("reading the export: ")
            ),
        )),
        Some(e) if e.code() == DATA_SPC_FULL => Err(Error::new(
            DATA_SPC_FULL,
            format!("queue {id} is full: {} of {from} imported, which stay in it; the rest not", count(n, "record")),
        )),
        Some(e) => Err(Error::new(e.code(), format!("cannot import {from} into queue {id}: {}; {imported}", e.what()))),
    }
}
