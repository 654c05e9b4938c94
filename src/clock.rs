//! Wall-clock time as the queue files store it, the monotonic clock of
//! lease deadlines, and this boot's id (which tells a durable queue that
//! the machine restarted).

/// Nanoseconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn now_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// Nanoseconds of `CLOCK_MONOTONIC_COARSE`: the same clock for every
/// process of the machine, never set back, unaffected by changes of the
/// wall clock, read without a system call in a few nanoseconds (the precise
/// `CLOCK_MONOTONIC` costs several times more, and a lease and its
/// acknowledgement read the clock three times: docs/measurements.md). It advances by ticks ([`mono_res_ns`], 1 to
/// 4 ms): deadlines are computed by [`mono_after`], so that they never come
/// early. Lease deadlines are kept in it (it restarts with the machine, as
/// do the processes that hold leases).
#[inline]
pub(crate) fn mono_ns() -> u64 {
    read_clock(libc::CLOCK_MONOTONIC_COARSE)
}

#[inline]
fn read_clock(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec we pass; both clocks used
    // here exist on every Linux since 2.6.32.
    unsafe { libc::clock_gettime(id, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

/// The step of [`mono_ns`] (its tick), read once per process.
pub(crate) fn mono_res_ns() -> u64 {
    static RES: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *RES.get_or_init(|| {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: clock_getres writes the timespec we pass.
        let ok = unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut ts) } == 0;
        let res = (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64);
        // A tick is at most 10 ms (HZ=100); assume that when it cannot be read.
        if ok && res > 0 { res.min(10_000_000) } else { 10_000_000 }
    })
}

/// The instant `dur_ns` after `now` (read from [`mono_ns`]) on that clock,
/// never early: one tick more, since `now` may lag the true time by up to a
/// tick. Zero stays `now` (at once).
#[inline]
pub(crate) fn mono_after(now: u64, dur_ns: u64) -> u64 {
    mono_after_res(now, dur_ns, mono_res_ns())
}

/// [`mono_after`] with the tick given (`res_ns`, read from [`mono_res_ns`]
/// once by the caller).
#[inline]
pub(crate) fn mono_after_res(now: u64, dur_ns: u64, res_ns: u64) -> u64 {
    if dur_ns == 0 { now } else { now.saturating_add(res_ns).saturating_add(dur_ns) }
}

/// This boot's id as two words (`None` if it cannot be read).
pub(crate) fn boot_id() -> Option<[u64; 2]> {
    let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let hex: String = text.trim().chars().filter(|c| *c != '-').collect();
    if hex.len() != 32 {
        return None;
    }
    let hi = u64::from_str_radix(&hex[..16], 16).ok()?;
    let lo = u64::from_str_radix(&hex[16..], 16).ok()?;
    Some([hi, lo])
}
