//! Wall-clock time as the queue files store it.

/// Nanoseconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn now_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}
