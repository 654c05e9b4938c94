//! The checksum a durable queue keeps in each slot's header (`check`), so
//! that recovery after a machine crash can tell a record that reached the
//! disk whole from a torn one, or from a slot that still holds a record of
//! another lap.
//!
//! It covers the queue's identity (a key made from its id and creation
//! time), the record's position (lap included), its length and its bytes.
//! It is not cryptographic: it detects accidents (pages and sectors of
//! different ages), not forgery. The hash is a folded 64x64->128-bit
//! multiply over 16 bytes at a time in two independent lanes (the
//! construction of wyhash), a few times faster than a table-driven CRC
//! (docs/measurements.md), while a hardware CRC32C
//! needs `unsafe` intrinsics for no gain in what it detects.

const P0: u64 = 0xa076_1d64_78bd_642f;
const P1: u64 = 0xe703_7ed1_a0b4_28db;
const P2: u64 = 0x8ebc_6af0_9c88_c6e3;
const P3: u64 = 0x5899_65cc_7537_4cc3;

/// The 128-bit product of `a` and `b`, folded to 64 bits.
#[inline(always)]
fn fold(a: u64, b: u64) -> u64 {
    let r = u128::from(a) * u128::from(b);
    (r as u64) ^ ((r >> 64) as u64)
}

/// Little-endian word from up to 8 bytes (missing ones are zero).
#[inline(always)]
fn word(b: &[u8]) -> u64 {
    match <[u8; 8]>::try_from(b) {
        Ok(w) => u64::from_le_bytes(w),
        Err(_) => {
            let mut w = [0u8; 8];
            let n = b.len().min(8);
            w[..n].copy_from_slice(&b[..n]);
            u64::from_le_bytes(w)
        }
    }
}

/// The identity key of a queue: a hash of its id and creation time, so that
/// a slot copied from another queue (or an older queue of the same id) does
/// not pass.
pub(crate) fn queue_key(id: u32, created_ns: u64) -> u64 {
    fold(u64::from(id) ^ P2, created_ns ^ P3) ^ P0
}

/// The checksum of a record `data` published at position `pos` (`lap +
/// index`) in the queue of `key`. Never 0, so that a zeroed header is never
/// a valid one.
#[inline]
pub(crate) fn seal(key: u64, pos: u64, data: &[u8]) -> u32 {
    let len = data.len() as u64;
    let mut a = key ^ P0;
    let mut b = pos.rotate_left(17) ^ len ^ P1;
    let mut chunks = data.chunks_exact(32);
    for c in &mut chunks {
        a = fold(word(&c[0..8]) ^ P1, word(&c[8..16]) ^ a);
        b = fold(word(&c[16..24]) ^ P2, word(&c[24..32]) ^ b);
    }
    let rest = chunks.remainder();
    let (r0, r1) = rest.split_at(rest.len().min(16));
    a = fold(word(&r0[..r0.len().min(8)]) ^ P1, word(&r0[r0.len().min(8)..]) ^ a);
    b = fold(word(&r1[..r1.len().min(8)]) ^ P2, word(&r1[r1.len().min(8)..]) ^ b);
    let h = fold(a ^ P3 ^ pos, b ^ len ^ P0);
    let h = (h ^ (h >> 32)) as u32;
    if h == 0 { 1 } else { h }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_covered_part_changes_the_seal() {
        let key = queue_key(21, 1_700_000_000_000_000_000);
        let rec: Vec<u8> = (0..304u32).map(|i| (i * 7) as u8).collect();
        let s = seal(key, 5, &rec);
        assert_eq!(s, seal(key, 5, &rec), "deterministic");
        assert_ne!(s, seal(queue_key(22, 1_700_000_000_000_000_000), 5, &rec), "queue id");
        assert_ne!(s, seal(queue_key(21, 1_700_000_000_000_000_001), 5, &rec), "creation time");
        assert_ne!(s, seal(key, 5 + 512, &rec), "lap");
        assert_ne!(s, seal(key, 6, &rec), "index");
        assert_ne!(s, seal(key, 5, &rec[..303]), "length");
        for at in [0, 7, 8, 31, 32, 100, 255, 288, 295, 296, 303] {
            let mut r = rec.clone();
            r[at] ^= 1;
            assert_ne!(s, seal(key, 5, &r), "byte {at}");
        }
        // Trailing zeros are not the same as a shorter record.
        assert_ne!(seal(key, 1, b"ab"), seal(key, 1, b"ab\0"));
        for n in 0..70 {
            assert_ne!(seal(key, 1, &rec[..n]), 0);
        }
    }
}
