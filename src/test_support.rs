//! Helpers for tests, shared by the library's unit tests and (through
//! `tests/common`) the integration tests, so that there is one copy of each.
//! Only std here: the file is compiled into both kinds of test binary.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// A fresh directory under /dev/shm for one test's queues, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    /// `/dev/shm/tvmq-test-<suite>-<pid>-<tag>-<n>`, empty.
    pub fn new(suite: &str, tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let p = PathBuf::from(format!("/dev/shm/tvmq-test-{suite}-{}-{tag}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir(&p).expect("create temp dir");
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// SplitMix64's output function: a well-mixed 64-bit value of `x`.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A command running test `name` (its full path in this test binary) as a
/// child process. Child entry points are `#[ignore]`d tests, so that a
/// normal run lists them as ignored instead of passing them without doing
/// anything; `--ignored --exact` selects the one asked for. A child test
/// reads its parameters with [`child_env`] and fails when run on its own.
pub fn child_test(name: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().expect("the test binary"));
    cmd.args(["--ignored", "--exact", name, "--nocapture", "--test-threads=1"]);
    cmd
}

/// A child test's parameter `key`; panics (the test fails) when the test
/// was not started by its parent test through [`child_test`].
#[track_caller]
pub fn child_env(key: &str) -> String {
    std::env::var(key)
        .unwrap_or_else(|_| panic!("{key} is not set: this test is a child process, started by its parent test"))
}
