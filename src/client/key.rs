//! The key of a queue on the server: its decimal id, or a shard's name.

/// The key of a queue: its id in decimal, or a shard of a spread queue
/// (`spread`: `<t>.<i>.<n>`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Key {
    buf: [u8; 32],
    len: u8,
}

impl Key {
    /// A key of at most 32 bytes (longer is cut: the callers make short ones).
    pub(crate) fn named(name: &[u8]) -> Key {
        let mut buf = [0u8; 32];
        let len = name.len().min(32);
        buf[..len].copy_from_slice(&name[..len]);
        Key { buf, len: len as u8 }
    }

    pub(crate) fn of(t: u32) -> Key {
        let mut buf = [0u8; 32];
        let mut digits = [0u8; 10];
        let (mut v, mut n) = (t, 0);
        loop {
            digits[n] = b'0' + (v % 10) as u8;
            n += 1;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        for i in 0..n {
            buf[i] = digits[n - 1 - i];
        }
        Key { buf, len: n as u8 }
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.buf[..usize::from(self.len)]
    }
}
