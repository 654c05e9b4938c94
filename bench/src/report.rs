//! The benchmark's outputs: a table on the terminal (also saved as
//! table.txt), results.csv, results.json and chart.png.

use crate::args::BenchArgs;
use crate::cell::{self, Cell, IdleCell, LatencyCell, find};
use crate::ctx::Ctx;
use crate::latency::{GAPS, PIPE_IN_TURN, TVMQ_IN_TURN};
use crate::{chart, durable};
use std::fmt::Write as _;
use tvm::error::{Error, SHM_ERR_ACCES};

/// STVM's figures on this machine type (docs/stvm.md),
/// milliseconds for 4,000,000 records of 304 bytes. STVM is not rebuilt here.
const STVM_MS: &[(&str, &str, &str, f64)] = &[
    ("threads", "push", "1", 2200.0),
    ("threads", "push", "2", 2400.0),
    ("threads", "push", "4", 2250.0),
    ("threads", "push", "10", 2250.0),
    ("threads", "pop", "1", 2500.0),
    ("threads", "pop", "2", 2550.0),
    ("threads", "pop", "4", 2300.0),
    ("threads", "pop", "10", 2100.0),
    // 8,000,000 operations (4 M pushed and popped) by one push and one pop process.
    ("push+pop", "processes", "1+1", 2650.0),
    ("push+pop", "processes", "2+1", 3240.0),
];
const STVM_RECORDS: f64 = 4_000_000.0;

/// STVM's rate for a row, in records per second.
fn stvm_rate(section: &str, test: &str, param: &str) -> Option<f64> {
    let ops = if section == "push+pop" { 2.0 * STVM_RECORDS } else { STVM_RECORDS };
    STVM_MS.iter().find(|r| r.0 == section && r.1 == test && r.2 == param).map(|r| ops / (r.3 / 1000.0))
}

const SECTIONS: &[(&str, &str)] = &[
    ("setup", "Setup costs (milliseconds; not part of the seed programs' cost_time, except faults)"),
    ("threads", "Seed programs, push then pop (records/s)"),
    ("processes", "Processes instead of threads, started together, whole-process wall time (records/s)"),
    ("push+pop", "Push and pop at the same time, pushers+poppers (operations/s)"),
    ("record size", "Record size sweep, one thread (records/s and MB/s)"),
    ("batch", "Batch calls, 64 records a call, one thread (records/s)"),
    (
        "durable",
        "Durable queues on the disk (--disk-dir), 304-byte records, Rust API, threads or processes (records/s)",
    ),
    ("leases", "Leases: lPopLease + lAck per record beside plain lPop, one run, C ABI threads (records/s)"),
];

fn mega(rate: f64) -> String {
    if rate >= 1e6 { format!("{:.2} M", rate / 1e6) } else { format!("{:.1} K", rate / 1e3) }
}

/// Why cells have no figure, said once each below the table: a cell shows
/// "skipped [1]", never a text cut to its width.
#[derive(Default)]
struct Notes(Vec<String>);

impl Notes {
    /// `why`'s number, given the first time it is seen.
    fn number(&mut self, why: &str) -> usize {
        match self.0.iter().position(|n| n == why) {
            Some(i) => i + 1,
            None => {
                self.0.push(why.to_string());
                self.0.len()
            }
        }
    }

    /// A cell without a figure: its first word and the note's number.
    fn cell(&mut self, why: &str) -> String {
        let word = if why.starts_with("skipped") {
            "skipped"
        } else if why.starts_with("not installed") {
            "not installed"
        } else {
            "error"
        };
        format!("{word} [{}]", self.number(why))
    }

    fn write(&self, t: &mut String) {
        if !self.0.is_empty() {
            t.push('\n');
        }
        for (i, why) in self.0.iter().enumerate() {
            writeln!(t, "[{}] {why}", i + 1).unwrap();
        }
    }
}

/// "12.30 M (11.9–12.8)", or why there is no figure (a note).
fn rate_text(c: &Cell, notes: &mut Notes) -> String {
    match (c.rates(), &c.error) {
        (_, Some(e)) => notes.cell(e),
        // Slow cells (durable queues) give their range in K/s.
        (Some((med, lo, hi)), None) if med < 1e5 => format!("{} ({:.1}–{:.1} K)", mega(med), lo / 1e3, hi / 1e3),
        (Some((med, lo, hi)), None) => format!("{} ({:.1}–{:.1})", mega(med), lo / 1e6, hi / 1e6),
        (None, None) => "-".into(),
    }
}

fn ms_text(c: &Cell, notes: &mut Notes) -> String {
    match (c.median_ms(), &c.error) {
        (_, Some(e)) => notes.cell(e),
        (Some(m), None) => {
            let lo = c.ms.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = c.ms.iter().copied().fold(0.0, f64::max);
            format!("{m:.0} ms ({lo:.0}–{hi:.0})")
        }
        (None, None) => "-".into(),
    }
}

pub(crate) fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| s.lines().next().and_then(|l| l.split_whitespace().nth(1)).and_then(|k| k.parse::<u64>().ok()))
        .map_or("? GiB".into(), |kb| format!("{} GiB", kb / 1024 / 1024));
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{cpu}, {cores} cores, {mem} RAM, Linux {}", kernel.trim())
}

/// Rows of a section: `(test, param)` in first-seen order, and its subjects.
fn pivot(cells: &[Cell], section: &str) -> (Vec<(String, String)>, Vec<&'static str>) {
    let mut rows: Vec<(String, String)> = Vec::new();
    let mut subjects: Vec<&'static str> = Vec::new();
    for c in cells.iter().filter(|c| c.section == section) {
        let row = (c.test.clone(), c.param.clone());
        if !rows.contains(&row) {
            rows.push(row);
        }
        if !subjects.contains(&c.subject) {
            subjects.push(c.subject);
        }
    }
    (rows, subjects)
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
        _ => "-".into(),
    }
}

fn table(ctx: &Ctx, seconds: f64) -> String {
    let (cells, args) = (&ctx.cells, &ctx.args);
    let mut t = String::new();
    let mut notes = Notes::default();
    writeln!(t, "tvmq bench on {}; queues in {}", machine(), ctx.dir.parent().unwrap_or(&ctx.dir).display()).unwrap();
    let smoke = if args.smoke { " (SMOKE RUN: small counts, figures not meaningful)" } else { "" };
    if cells.is_empty() {
        // Only parts with tables of their own ran (latency, many).
        writeln!(t, "{seconds:.0} s in all{smoke}").unwrap();
    } else {
        let runs = match ctx.runs() {
            1 => "one run".to_string(),
            n => format!("median of {n} runs (min-max in M/s)"),
        };
        writeln!(t, "{runs}, {} records of 304 bytes unless told; {seconds:.0} s in all{smoke}", ctx.records())
            .unwrap();
    }
    for &(section, title) in SECTIONS {
        let (rows, subjects) = pivot(cells, section);
        if rows.is_empty() {
            continue;
        }
        writeln!(t, "\n{title}").unwrap();
        let mut header = format!("{:<22}", "");
        for s in &subjects {
            write!(header, " | {s:<24}").unwrap();
        }
        let comparable = matches!(section, "threads" | "processes" | "push+pop");
        if comparable {
            write!(
                header,
                " | {:<24} | tvmq/crossbeam | tvmq/Boost | tvmq/DPDK RTS | tvmq/bare | tvmq/STVM",
                "STVM (docs/stvm.md)"
            )
            .unwrap();
        }
        writeln!(t, "{header}").unwrap();
        for (test, param) in rows {
            let mut line = format!("{:<22}", format!("{test} {param}"));
            for s in &subjects {
                let text = find(cells, section, &test, &param, s).map_or("-".into(), |c| match section {
                    "setup" => ms_text(c, &mut notes),
                    "record size" => match c.rates() {
                        Some((med, _, _)) if c.error.is_none() => {
                            format!("{} {:.0} MB/s", mega(med), med * c.record_bytes as f64 / 1e6)
                        }
                        _ => rate_text(c, &mut notes),
                    },
                    _ => rate_text(c, &mut notes),
                });
                write!(line, " | {text:<24}").unwrap();
            }
            if comparable {
                let rate = |s| cell::rate(cells, section, &test, &param, s);
                let tvmq = rate("tvmq");
                let stvm = stvm_rate(section, &test, &param);
                let stvm_text = match (stvm, section, test.as_str(), param.as_str()) {
                    (Some(r), ..) => mega(r),
                    (None, "push+pop", "processes", "2+2") => "fails (no space)".into(),
                    _ => "-".into(),
                };
                write!(
                    line,
                    " | {stvm_text:<24} | {:<14} | {:<10} | {:<13} | {:<9} | {}",
                    ratio(tvmq, rate("crossbeam")),
                    ratio(tvmq, rate("Boost mq")),
                    ratio(tvmq, rate("DPDK RTS")),
                    ratio(tvmq, rate("bare ring")),
                    ratio(tvmq, stvm)
                )
                .unwrap();
            }
            if section == "leases" {
                let rate = |s| find(cells, section, &test, &param, s).and_then(|c| c.rates()).map(|r| r.0);
                write!(line, " | lease/plain {}", ratio(rate("lease queue"), rate("plain queue"))).unwrap();
                if let Some(combined) = rate("lease queue, lAckPopLease") {
                    write!(line, ", lAckPopLease/plain {}", ratio(Some(combined), rate("plain queue"))).unwrap();
                }
            }
            writeln!(t, "{line}").unwrap();
        }
    }
    notes.write(&mut t);
    t
}

pub(crate) fn csv(cells: &[Cell]) -> String {
    let mut s = String::from(
        "section,test,param,subject,records,record_bytes,runs,median_ms,min_ms,max_ms,median_per_s,error\n",
    );
    for c in cells {
        let (med, lo, hi) = (
            c.median_ms().unwrap_or(f64::NAN),
            c.ms.iter().copied().fold(f64::INFINITY, f64::min),
            c.ms.iter().copied().fold(0.0, f64::max),
        );
        let rate = c.rates().map_or(String::new(), |r| format!("{:.0}", r.0));
        writeln!(
            s,
            "{},{},{},{},{},{},{},{med:.3},{lo:.3},{hi:.3},{rate},{}",
            c.section,
            c.test,
            c.param,
            c.subject,
            c.records,
            c.record_bytes,
            c.ms.len(),
            c.error.as_deref().unwrap_or("").replace([',', '\n'], ";")
        )
        .unwrap();
    }
    s
}

fn json_str(s: &str) -> String {
    let mut o = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => write!(o, "\\u{:04x}", c as u32).unwrap(),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn json(cells: &[Cell], args: &BenchArgs) -> String {
    let mut s = format!(
        "{{\n  \"machine\": {},\n  \"records\": {},\n  \"smoke\": {},\n  \"cells\": [\n",
        json_str(&machine()),
        args.records,
        args.smoke
    );
    for (i, c) in cells.iter().enumerate() {
        let ms: Vec<String> = c.ms.iter().map(|m| format!("{m:.3}")).collect();
        write!(
            s,
            "    {{\"section\": {}, \"test\": {}, \"param\": {}, \"subject\": {}, \"records\": {}, \"record_bytes\": {}, \"ms\": [{}], \"median_per_s\": {}, \"error\": {}}}",
            json_str(c.section),
            json_str(&c.test),
            json_str(&c.param),
            json_str(c.subject),
            c.records,
            c.record_bytes,
            ms.join(", "),
            c.rates().map_or("null".into(), |r| format!("{:.0}", r.0)),
            c.error.as_deref().map_or("null".into(), json_str)
        )
        .unwrap();
        s.push_str(if i + 1 < cells.len() { ",\n" } else { "\n" });
    }
    s.push_str("  ]\n}\n");
    s
}

/// The latency section of the table, and latency.csv.
fn latency_table(lat: &[LatencyCell], idle: &[IdleCell]) -> (String, String) {
    let mut s = String::new();
    let mut csv = String::from("gap_us,subject,p50_us,p99_us,p999_us,max_us,records,error\n");
    if lat.is_empty() && idle.is_empty() {
        return (s, csv);
    }
    s.push_str("\n== Latency: push in one process to the return of a blocking pop in another (microseconds)\n");
    s.push_str("   304-byte records, one every 10 us / 100 us / 1 ms; p50, p99, p99.9, max\n");
    for gap in GAPS {
        let _ =
            writeln!(s, "\n  {:<40}|      p50 |      p99 |    p99.9 |      max", format!("a record every {gap} us"));
        for c in lat.iter().filter(|c| c.gap_us == gap) {
            match (c.percentiles(), &c.error) {
                (Some(p), _) => {
                    let _ = writeln!(
                        s,
                        "  {:<40}| {:>8.2} | {:>8.2} | {:>8.1} | {:>8.1}",
                        c.subject, p[0], p[1], p[2], p[3]
                    );
                    let n = c.hist.as_ref().map_or(0, |h| h.len());
                    let _ = writeln!(csv, "{gap},{},{:.3},{:.3},{:.3},{:.3},{n},", c.subject, p[0], p[1], p[2], p[3]);
                }
                (None, e) => {
                    let e = e.clone().unwrap_or_default();
                    let _ = writeln!(s, "  {:<40}| error: {}", c.subject, e.chars().take(60).collect::<String>());
                    let _ = writeln!(csv, "{gap},{},,,,,0,{}", c.subject, e.replace([',', '\n'], " "));
                }
            }
        }
        // The target: tvmq's default blocking pop no slower than a pipe, in the same run.
        let p = |subject: &str| lat.iter().find(|c| c.gap_us == gap && c.subject == subject)?.percentiles();
        for (tvmq, pipe, what) in
            [("tvmq", "pipe", "tvmq / pipe (below 1: tvmq faster)"), (TVMQ_IN_TURN, PIPE_IN_TURN, "the same, in turn")]
        {
            if let (Some(t), Some(pipe)) = (p(tvmq), p(pipe)) {
                let _ = writeln!(
                    s,
                    "  {:<40}| {:>7.2}x | {:>7.2}x |",
                    what,
                    t[0] / pipe[0].max(1e-3),
                    t[1] / pipe[1].max(1e-3)
                );
            }
        }
    }
    if !idle.is_empty() {
        s.push_str("\n  a consumer blocked on an empty queue     | CPU (% of one core)\n");
        for c in idle {
            match (c.cpu_pct, &c.error) {
                (Some(p), _) => {
                    let _ = writeln!(s, "  {:<40}| {p:>6.2}", c.subject);
                }
                (None, e) => {
                    let _ = writeln!(s, "  {:<40}| error: {}", c.subject, e.clone().unwrap_or_default());
                }
            }
        }
    }
    (s, csv)
}

pub(crate) fn write(ctx: &Ctx, seconds: f64) -> Result<(), Error> {
    let (cells, args) = (&ctx.cells, &ctx.args);
    let out = &args.out;
    let io = |e: std::io::Error| Error::new(SHM_ERR_ACCES, format!("cannot write to {}: {e}", out.display()));
    std::fs::create_dir_all(out).map_err(io)?;
    let (lat_text, lat_csv) = latency_table(&ctx.latency, &ctx.idle);
    let text = table(ctx, seconds) + &durable::summary(cells) + &lat_text + &ctx.many;
    print!("{text}");
    std::fs::write(out.join("table.txt"), &text).map_err(io)?;
    std::fs::write(out.join("results.csv"), csv(cells)).map_err(io)?;
    std::fs::write(out.join("results.json"), json(cells, args)).map_err(io)?;
    let mut wrote = format!("{0}/table.txt, {0}/results.csv, {0}/results.json", out.display());
    if !ctx.latency.is_empty() {
        std::fs::write(out.join("latency.csv"), lat_csv).map_err(io)?;
        wrote += &format!(", {}/latency.csv", out.display());
        match chart::draw_latency(&ctx.latency, &out.join("latency.png")) {
            Ok(()) => wrote += &format!(", {}/latency.png", out.display()),
            Err(e) => wrote += &format!(" (no latency chart: {e})"),
        }
    }
    if cells.is_empty() {
        println!("\nwrote {wrote}");
        return Ok(());
    }
    match chart::draw(cells, &out.join("chart.png"), &stvm_series()) {
        Ok(()) => println!("\nwrote {wrote}, {}/chart.png", out.display()),
        Err(e) => println!("\nwrote {wrote}; no chart: {e}"),
    }
    Ok(())
}

/// STVM's push and pop rates at 1, 2, 4, 10 threads, for the chart.
fn stvm_series() -> [Vec<(f64, f64)>; 2] {
    let series = |test| {
        [1, 2, 4, 10]
            .iter()
            .filter_map(|&n| stvm_rate("threads", test, &n.to_string()).map(|r| (n as f64, r)))
            .collect::<Vec<_>>()
    };
    [series("push"), series("pop")]
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: BenchArgs,
    }

    fn ctx(args: &[&str], cells: Vec<Cell>) -> Ctx {
        let args = Cli::parse_from([&["bench"], args].concat()).args;
        Ctx {
            args,
            dir: "/dev/shm/tvmq-bench-1".into(),
            cells,
            latency: Vec::new(),
            idle: Vec::new(),
            many: String::new(),
            started: std::time::Instant::now(),
        }
    }

    fn cell(subject: &'static str, ms: Vec<f64>, error: Option<&str>) -> Cell {
        Cell {
            section: "threads",
            test: "push".into(),
            param: "4".into(),
            subject,
            records: 4_000_000,
            record_bytes: 304,
            ms,
            error: error.map(String::from),
        }
    }

    #[test]
    fn a_cell_without_a_figure_shows_a_note_number_and_the_whole_reason_below() {
        let why = "skipped: 4 workers > 2 cores: a default MP/MC rte_ring makes each thread or process wait, \
                   spinning, for a preempted one (minutes a run; DPDK's RTS mode is for this)";
        let cells = vec![
            cell("tvmq", vec![100.0, 110.0, 90.0], None),
            cell("DPDK MP/MC", Vec::new(), Some(why)),
            cell("Boost mq", Vec::new(), Some(why)),
        ];
        let t = table(&ctx(&["--runs", "3"], cells), 12.0);
        assert!(t.contains("| skipped [1] "), "{t}");
        assert_eq!(t.matches(why).count(), 1, "the reason, whole, once:\n{t}");
        assert!(t.contains(&format!("\n[1] {why}\n")), "{t}");
        assert!(t.contains("median of 3 runs (min-max in M/s), 4000000 records"), "{t}");
    }

    #[test]
    fn the_header_speaks_of_runs_and_records_only_when_cells_were_measured() {
        // --only many or latency: no throughput cell.
        let t = table(&ctx(&["--only", "many"], Vec::new()), 20.0);
        assert!(!t.contains("median of"), "{t}");
        assert!(!t.contains("records of 304 bytes"), "{t}");
        assert!(t.contains("queues in /dev/shm\n20 s in all\n"), "{t}");
        let t = table(&ctx(&["--runs", "1"], vec![cell("tvmq", vec![100.0], None)]), 1.0);
        assert!(t.contains("\none run, 4000000 records of 304 bytes"), "{t}");
    }
}
