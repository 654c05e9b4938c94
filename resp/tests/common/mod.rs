//! Shared by the tests: a small deterministic PRNG (no dependencies).
#![allow(dead_code)]

/// SplitMix64: deterministic, good enough for generating test inputs.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`), with a negligible bias.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// True with probability `1 / n`.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    pub fn byte(&mut self) -> u8 {
        self.next_u64() as u8
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// `len` random bytes, often protocol characters.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        const SPECIAL: &[u8] = b"\r\n*$+-:_,#(=!%~>|?0123456789 \t\"'\\x\0";
        (0..len).map(|_| if self.one_in(2) { *self.pick(SPECIAL) } else { self.byte() }).collect()
    }

    /// A length for a random argument or string: mostly short, sometimes empty, rarely up to
    /// 100 KB.
    pub fn len(&mut self) -> usize {
        match self.below(20) {
            0 => 0,
            1 => self.below(100 * 1024),
            2..=4 => self.below(1024),
            _ => self.below(24),
        }
    }

    /// Random bytes of a random [`len`](Self::len).
    pub fn string(&mut self) -> Vec<u8> {
        let len = self.len();
        self.bytes(len)
    }
}
