//! One commit on the disk, timed alone: what a durable server must wait for
//! before it may answer a push, so what bounds the durable cells of
//! `tvmq bench --net` from below whatever the server does around it.
//!
//! Three ways to make one record durable, each timed `samples` times in a
//! directory of the disk under test (`--disk-dir`), after a few untimed
//! warm-up commits, each in its own file, removed afterwards:
//! - [`Way::Msync`], what a tvmq `always` sync does for one record: a store
//!   of 304 bytes into a `MAP_SHARED` mapping of a file written in full
//!   beforehand, then `msync(MS_SYNC)` of the page(s) it touched;
//! - [`Way::Direct`], what a blocking sync of an image does (a local
//!   program's, and `tvmq serve`'s inline syncs): a 4 KiB `pwrite` with
//!   `O_DIRECT | O_DSYNC` into a file written in full beforehand (a sync
//!   on a worker's io_uring writes with `O_DIRECT` alone, then
//!   `fdatasync`s: not timed here);
//! - [`Way::Append`], what redis-server's `appendfsync always` does: a
//!   330-byte `write` to an `O_APPEND` file (which grows), then `fdatasync`.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::Instant;

/// A way to commit one record.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Way {
    Msync,
    Direct,
    Append,
}

impl Way {
    pub(crate) const ALL: [Way; 3] = [Way::Msync, Way::Direct, Way::Append];

    /// Its letter in the notes, (a) to (c).
    pub(crate) fn letter(self) -> char {
        match self {
            Way::Msync => 'a',
            Way::Direct => 'b',
            Way::Append => 'c',
        }
    }

    /// What it stands for and what it does, for the table.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Way::Msync => {
                "in place (always files of earlier versions): store 304 B in a MAP_SHARED mapping, msync its page"
            }
            Way::Direct => {
                "tvmq always and interval, the image, a blocking sync (tvmq serve inline): pwrite 4 KiB with O_DIRECT|O_DSYNC (on a worker's ring: O_DIRECT write, then fdatasync)"
            }
            Way::Append => "redis always: write() 330 B to an O_APPEND file, then fdatasync",
        }
    }

    /// Its test name in results.csv (no commas).
    pub(crate) fn test(self) -> &'static str {
        match self {
            Way::Msync => "msync 304 B of a MAP_SHARED mapping (in place: always files of earlier versions)",
            Way::Direct => "pwrite 4 KiB O_DIRECT|O_DSYNC (the image: tvmq always and interval)",
            Way::Append => "append 330 B + fdatasync (redis appendfsync always)",
        }
    }

    /// Bytes it makes durable.
    pub(crate) fn bytes(self) -> usize {
        match self {
            Way::Msync => 304,
            Way::Direct => 4096,
            Way::Append => 330,
        }
    }
}

/// The timings of one way, in microseconds, sorted.
#[derive(Clone, Debug)]
pub(crate) struct Timings {
    pub(crate) us: Vec<f64>,
}

impl Timings {
    /// The `q` quantile (0 to 1) of the samples.
    pub(crate) fn quantile(&self, q: f64) -> f64 {
        let i = ((self.us.len() as f64 * q) as usize).min(self.us.len().saturating_sub(1));
        self.us.get(i).copied().unwrap_or(f64::NAN)
    }

    pub(crate) fn p50(&self) -> f64 {
        self.quantile(0.5)
    }

    pub(crate) fn p90(&self) -> f64 {
        self.quantile(0.9)
    }

    pub(crate) fn min(&self) -> f64 {
        self.us.first().copied().unwrap_or(f64::NAN)
    }

    pub(crate) fn max(&self) -> f64 {
        self.us.last().copied().unwrap_or(f64::NAN)
    }
}

/// One way's result: its timings, or why it could not be timed.
#[derive(Clone, Debug)]
pub(crate) struct Commit {
    pub(crate) way: Way,
    pub(crate) timings: Result<Timings, String>,
}

/// Untimed commits before the samples (the first faults and block lookups).
const WARM_UP: usize = 10;

/// Times each way `samples` times in `dir` (which must exist); files named
/// after this process, removed afterwards whatever happened.
pub(crate) fn measure(dir: &Path, samples: usize) -> Vec<Commit> {
    let samples = samples.max(1);
    Way::ALL
        .iter()
        .map(|&way| {
            let path = dir.join(format!("tvmq-bench-commit-{}-{}", std::process::id(), way.letter()));
            let timings = time(way, &path, samples).map(|mut us| {
                us.sort_by(f64::total_cmp);
                Timings { us }
            });
            let _ = std::fs::remove_file(&path);
            Commit { way, timings }
        })
        .collect()
}

/// The microseconds of each of `samples` commits of `way` into `path`.
fn time(way: Way, path: &Path, samples: usize) -> Result<Vec<f64>, String> {
    let err = |what: &str, e: std::io::Error| format!("{what} {}: {e}", path.display());
    let total = WARM_UP + samples;
    let mut us = Vec::with_capacity(samples);
    let mut note = |i: usize, t: Instant| {
        if i >= WARM_UP {
            us.push(t.elapsed().as_secs_f64() * 1e6);
        }
    };
    match way {
        Way::Msync => {
            let record = [7u8; 304];
            let len = (total * record.len()).div_ceil(4096) * 4096 + 4096;
            let file = written(path, len, 0).map_err(|e| err("cannot prepare", e))?;
            // SAFETY: a file of this process's own, mapped whole; nothing
            // else opens it or changes its length while mapped.
            let mut map =
                unsafe { memmap2::MmapOptions::new().len(len).map_mut(&file) }.map_err(|e| err("cannot map", e))?;
            for i in 0..total {
                let at = i * record.len();
                let t = Instant::now();
                map[at..at + record.len()].copy_from_slice(&record);
                // msync(MS_SYNC) from the start of the record's page to its end.
                map.flush_range(at, record.len()).map_err(|e| err("msync of", e))?;
                note(i, t);
            }
        }
        Way::Direct => {
            let blocks = total.min(512);
            let file = written(path, blocks * 4096, libc::O_DIRECT | libc::O_DSYNC)
                .map_err(|e| err("cannot prepare (O_DIRECT)", e))?;
            let buf = aligned_block(8)?;
            for i in 0..total {
                let t = Instant::now();
                file.write_all_at(buf.get(), ((i % blocks) * 4096) as u64).map_err(|e| err("pwrite to", e))?;
                note(i, t);
            }
        }
        Way::Append => {
            // A new, empty file (std opens no file with both O_TRUNC and O_APPEND).
            let _ = std::fs::remove_file(path);
            let mut file =
                OpenOptions::new().create_new(true).append(true).open(path).map_err(|e| err("cannot open", e))?;
            let record = [b'x'; 330];
            for i in 0..total {
                let t = Instant::now();
                file.write_all(&record).map_err(|e| err("write to", e))?;
                file.sync_data().map_err(|e| err("fdatasync of", e))?;
                note(i, t);
            }
        }
    }
    Ok(us)
}

/// A 4 KiB block aligned to 4 KiB (as `O_DIRECT` needs) filled with `byte`.
struct Aligned {
    storage: Vec<u8>,
    at: usize,
}

impl Aligned {
    fn get(&self) -> &[u8] {
        &self.storage[self.at..self.at + 4096]
    }
}

fn aligned_block(byte: u8) -> Result<Aligned, String> {
    let storage = vec![byte; 2 * 4096];
    let at = storage.as_ptr().align_offset(4096);
    if at + 4096 > storage.len() {
        return Err("cannot align a 4 KiB buffer".into());
    }
    Ok(Aligned { storage, at })
}

/// `path` made anew with `flags` added to its open flags, `len` bytes
/// (a multiple of 4 KiB) written in 4 KiB blocks and synced, so that the
/// timed commits find every block allocated and written.
fn written(path: &Path, len: usize, flags: i32) -> std::io::Result<File> {
    let file = OpenOptions::new().create(true).truncate(true).read(true).write(true).custom_flags(flags).open(path)?;
    let block = aligned_block(0).map_err(std::io::Error::other)?;
    for at in (0..len).step_by(4096) {
        file.write_all_at(block.get(), at as u64)?;
    }
    file.sync_all()?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_every_way_and_leaves_no_file() {
        let dir = std::env::temp_dir().join(format!("tvmq-commit-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let commits = measure(&dir, 20);
        assert_eq!(commits.iter().map(|c| c.way).collect::<Vec<_>>(), Way::ALL);
        for c in &commits {
            match &c.timings {
                Ok(t) => {
                    assert_eq!(t.us.len(), 20, "{:?}", c.way);
                    assert!(t.min() > 0.0 && t.p50() <= t.p90() && t.p90() <= t.max(), "{:?}: {:?}", c.way, t.us);
                }
                // tmpfs has no O_DIRECT: that way says so, the others still run.
                Err(e) => assert!(c.way == Way::Direct && e.contains("O_DIRECT"), "{:?}: {e}", c.way),
            }
        }
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "files left behind");
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn quantiles_of_sorted_samples() {
        let t = Timings { us: (1..=10).map(f64::from).collect() };
        assert_eq!((t.p50(), t.p90(), t.min(), t.max()), (6.0, 10.0, 1.0, 10.0));
        assert!(Timings { us: Vec::new() }.p50().is_nan());
    }
}
