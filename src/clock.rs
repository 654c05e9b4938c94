//! Wall-clock time as the queue files store it.

/// Nanoseconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn now_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// Nanoseconds of `CLOCK_MONOTONIC`: the same clock for every process of
/// the machine, never set back, unaffected by changes of the wall clock.
/// Lease deadlines are kept in it (it restarts with the machine, as do the
/// processes that hold leases).
pub(crate) fn mono_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec we pass; CLOCK_MONOTONIC
    // always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}
