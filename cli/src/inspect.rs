//! `tvmq list` and `tvmq stat`.

use std::path::Path;
use tvm::{Error, Queue};

pub fn list(dir: &Path) -> Result<(), Error> {
    let ids = tvm::queue_ids(dir)?;
    println!("{:>10}  {:<16} {:>10} {:>12} {:>12}  FILE", "ID", "NAME", "RECORD", "CAPACITY", "DEPTH");
    for id in ids {
        match Queue::inspect(dir, id) {
            Ok(q) => {
                let i = q.info();
                println!(
                    "{id:>10}  {:<16} {:>10} {:>12} {:>12}  {}",
                    i.name,
                    i.record_size,
                    i.capacity,
                    q.depth(),
                    q.path().display()
                );
            }
            Err(e) => println!("{id:>10}  (unreadable: {e})"),
        }
    }
    Ok(())
}

fn time(ns: u64) -> String {
    if ns == 0 {
        return "never".into();
    }
    let secs = (ns / 1_000_000_000) as i64;
    // SAFETY: libc::tm is plain data; all-zero is a valid value for gmtime_r to fill.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let t = secs as libc::time_t;
    // SAFETY: gmtime_r with valid pointers.
    unsafe { libc::gmtime_r(&t, &mut tm) };
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

pub fn stat(dir: &Path, id: u32) -> Result<(), Error> {
    let q = Queue::inspect(dir, id)?;
    let i = q.info();
    let s = q.stats();
    println!("queue            {id}");
    println!("name             {}", i.name);
    println!("partition        {}", i.part);
    println!("file             {}", q.path().display());
    println!("layout version   {}", i.version);
    println!("mode             {:04o}", i.mode);
    println!("created          {}", time(i.created_ns));
    println!("record size      {} bytes (slot {} bytes)", i.record_size, i.slot_stride);
    println!("capacity         {} records", i.capacity);
    println!("file size        {} bytes", i.file_size);
    println!("unblock timeout  {} ms", i.unblock_timeout_ms);
    println!("depth            {}", s.depth);
    println!("pushed           {}", s.pushed);
    println!("popped           {}", s.popped);
    println!("waiters          {}", s.waiters);
    println!("dropped          {}", if s.dropped { "yes" } else { "no" });
    println!("recovered pushes {} (claims of dead producers skipped)", s.recovered_pushes);
    println!("recovered pops   {} (records of dead consumers delivered again)", s.recovered_pops);
    println!("robbed calls     {} (stalled calls whose slot was recovered)", s.robbed);
    println!("reconciled       {} (sleepers of dead processes uncounted)", s.reconciled_waiters);
    println!("last recovery    {}", time(s.last_recovery_ns));
    let procs = q.processes();
    println!("processes        {}", procs.len());
    for p in procs {
        println!("  entry {:>4}  pid {:>8}  since {}  asleep {}", p.entry, p.pid, time(p.since_ns), p.sleepers);
    }
    println!("fields           {}", i.fields.len());
    for f in &i.fields {
        println!("  {:<31} offset {:>6}  length {:>6}  {}", f.name, f.offset, f.len, f.kind.c_name());
    }
    Ok(())
}

pub fn repair(dir: &Path, id: u32) -> Result<(), Error> {
    // Opening registers this process; that alone repairs after a death.
    let q = Queue::open_with(dir, id, false)?;
    let r = q.repair();
    let removed = Queue::remove_stale_temporaries(dir, id);
    println!(
        "queue {id}: {} record(s) of dead consumers published again, {} claim(s) of dead producers skipped, \
         {} sleeper(s) of dead processes uncounted, {removed} stale temporary file(s) removed{}",
        r.recovered_pops,
        r.recovered_pushes,
        r.reconciled_waiters,
        if r.alone {
            ""
        } else {
            "; other processes are attached: holders that could not be identified were left to the unblock timeout"
        }
    );
    Ok(())
}
