//! A connection's input buffer: the bytes read and not yet parsed, in a
//! buffer of the worker's pool while the connection is served, given back
//! (or a short partial command moved to a buffer of its own size) while it
//! waits for the client, so that an idle connection holds (almost) nothing.

use crate::local::{Pool, READ_SIZE};

/// An input buffer grows by at most this much ahead of the bytes received.
const GROW_STEP: usize = 1 << 20;

/// Where the bytes of an input buffer are.
enum Buf {
    /// On the heap: a pooled [`READ_SIZE`] buffer (or one grown for a long
    /// command), or a short partial command's buffer of its own size.
    Heap(Vec<u8>),
    /// An anonymous mapping of its own: the partial command of a client
    /// that has not authenticated, given back to the kernel the moment it
    /// is dropped. (Freed to the allocator instead, thousands of them came
    /// back from the worker threads' arenas in part only, if at all: 2,000
    /// connections' buffers left 450 MB behind them.)
    Mapped(memmap2::MmapMut),
}

impl std::ops::Deref for Buf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Buf::Heap(v) => v,
            Buf::Mapped(m) => m,
        }
    }
}

impl std::ops::DerefMut for Buf {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            Buf::Heap(v) => v,
            Buf::Mapped(m) => m,
        }
    }
}

/// The input buffer: `data[start..end]` is read and not yet consumed;
/// `data` is initialised up to its length, reads go to `data[end..]`.
pub(crate) struct Input {
    data: Buf,
    start: usize,
    end: usize,
}

/// A partial command this short is moved out of the pooled buffer into one
/// of its own size while the connection waits for the rest.
const SMALL_PENDING: usize = 4096;

impl Input {
    pub(crate) fn new() -> Input {
        Input { data: Buf::Heap(Vec::new()), start: 0, end: 0 }
    }

    pub(crate) fn pending(&self) -> &[u8] {
        &self.data[self.start..self.end]
    }

    pub(crate) fn len(&self) -> usize {
        self.end - self.start
    }

    /// Is it a buffer to read into (pooled, or grown), not a partial
    /// command's own?
    pub(crate) fn is_pooled(&self) -> bool {
        matches!(&self.data, Buf::Heap(v) if v.len() >= READ_SIZE)
    }

    /// Lets go of the pooled buffer before waiting for the client: given
    /// back (or freed, if it grew) when nothing is pending, and a short
    /// partial command is moved to a buffer of its size, so that an idle
    /// connection holds (almost) nothing. A client that has not
    /// authenticated has its partial command, at most
    /// [`PREAUTH_QUERY_LIMIT`](crate::preauth::PREAUTH_QUERY_LIMIT), moved to a mapping of its own whatever its
    /// size.
    pub(crate) fn release(&mut self, pool: &Pool, authed: bool) {
        if !self.is_pooled() {
            return;
        }
        let pending = &self.data[self.start..self.end];
        let kept = if pending.len() <= SMALL_PENDING {
            Buf::Heap(pending.to_vec())
        } else if !authed {
            match memmap2::MmapMut::map_anon(pending.len()) {
                Ok(mut m) => {
                    m.copy_from_slice(pending);
                    Buf::Mapped(m)
                }
                Err(_) => return,
            }
        } else {
            return;
        };
        if let Buf::Heap(big) = std::mem::replace(&mut self.data, kept) {
            pool.give_input(big);
        }
        self.start = 0;
        self.end = self.data.len();
    }

    /// Makes room for a read of at least `READ_SIZE / 4` bytes (and of the
    /// `needed` bytes of a command being received, up to `GROW_STEP` ahead).
    pub(crate) fn make_room(&mut self, pool: &Pool, needed: usize) {
        if !self.is_pooled() {
            let mut big = pool.take_input();
            let n = self.len();
            if n > big.len() {
                big.resize(n, 0);
            }
            big[..n].copy_from_slice(&self.data[self.start..self.end]);
            self.data = Buf::Heap(big);
            self.start = 0;
            self.end = n;
        }
        let Buf::Heap(data) = &mut self.data else { return };
        if self.start > 0 && (self.start == self.end || data.len() - self.end < READ_SIZE / 4) {
            data.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let want = self.end + needed.clamp(READ_SIZE / 4, GROW_STEP);
        if want > data.len() {
            let len = want.max(data.len() * 2).min(self.end + GROW_STEP + READ_SIZE);
            data.resize(len.max(want), 0);
        }
    }

    /// `n` bytes were read into [`Self::space`].
    pub(crate) fn filled(&mut self, n: usize) {
        self.end += n;
    }

    /// The first `n` pending bytes were parsed.
    pub(crate) fn consume(&mut self, n: usize) {
        self.start += n;
    }

    pub(crate) fn space(&mut self) -> &mut [u8] {
        &mut self.data[self.end..]
    }
}
