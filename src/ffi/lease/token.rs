//! The TvmLease token: a local lease's words or a network lease's, with a
//! check that a zeroed or altered token fails; and the lease times from C.

use crate::client::NetLease;
use crate::error::*;
use crate::queue::Lease;
use crate::spec::MAX_LEASE_MS;
use std::ffi::{c_long, c_uint, c_ulonglong};
use std::time::Duration;

/// A leased delivery: allocated by the caller, filled by lPopLease, passed
/// to lAck, lRelease, lReject or lExtendLease (which updates it). Plain
/// data: it may be copied, and used by any thread or process, one call at a
/// time. Only `deliveries` is public.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct TvmLease {
    /// How many times the record has been delivered, this delivery included
    /// (1 on its first delivery).
    pub deliveries: c_uint,
    /// Private: a check of m_llPriv (a zeroed or garbage token fails it).
    pub m_uCheck: c_uint,
    /// Private: the queue, the lease entry, the delivery.
    pub m_llPriv: [c_ulonglong; 7],
}

const _: () = assert!(size_of::<TvmLease>() == 64);

/// Seed of the token's check: a zeroed token fails it.
const CHECK_SEED: u32 = 0x7e45_e1a5;

/// A 32-bit check of the first five private words (the last two hold fixed
/// values, which each kind of token compares exactly): each word multiplied
/// by its own odd constant (independent multiplies, done in parallel),
/// summed, and the sum mixed (a bijection) before it is cut to 32 bits: any
/// change of the words changes the result but with odds of about 2^-32. A
/// few cycles: it is on every call (a byte-wise FNV and a chained word mix
/// were slower: docs/measurements.md).
#[inline]
fn check(words: &[c_ulonglong; 7]) -> c_uint {
    const K: [u64; 5] = [
        0x9e37_79b9_7f4a_7c15,
        0xbf58_476d_1ce4_e5b9,
        0x94d0_49bb_1331_11eb,
        0xd6e8_feb8_6659_fd93,
        0xa076_1d64_78bd_642f,
    ];
    let mut h = u64::from(CHECK_SEED);
    for (w, k) in words.iter().zip(K) {
        h = h.wrapping_add(w.wrapping_mul(k));
    }
    h ^= h >> 32;
    h = h.wrapping_mul(0xd6e8_feb8_6659_fd93);
    (h ^ (h >> 29)) as c_uint
}

impl TvmLease {
    pub(super) fn from_lease(l: &Lease) -> TvmLease {
        let w = l.to_words();
        let mut words = [0; 7];
        words[..5].copy_from_slice(&w);
        TvmLease { deliveries: l.deliveries(), m_uCheck: check(&words), m_llPriv: words }
    }

    pub(super) fn to_lease(self) -> Result<Lease> {
        if self.m_uCheck != check(&self.m_llPriv) || self.m_llPriv[5..] != [0, 0] {
            return Err(Error::new(LEASE_INVALID, "not a lease token (zeroed, garbage or altered)"));
        }
        let mut w = [0; 5];
        w.copy_from_slice(&self.m_llPriv[..5]);
        Ok(Lease::from_words(w))
    }

    pub(in crate::ffi) const ZERO: TvmLease = TvmLease { deliveries: 0, m_uCheck: 0, m_llPriv: [0; 7] };

    pub(super) fn from_net(l: &NetLease) -> TvmLease {
        let words = [u64::from(l.queue), l.pos, l.tag, u64::from(l.deliveries), u64::from(l.shard), NET_MARK, 0];
        TvmLease { deliveries: l.deliveries, m_uCheck: check(&words), m_llPriv: words }
    }

    pub(super) fn to_net(self) -> Result<NetLease> {
        let w = self.m_llPriv;
        if self.m_uCheck != check(&w) || w[5] != NET_MARK || w[6] != 0 || w[4] > u64::from(u32::MAX) {
            return Err(Error::new(
                LEASE_INVALID,
                "not a network lease token (a local one, zeroed, garbage or altered)",
            ));
        }
        let queue = u32::try_from(w[0]).map_err(|_| Error::new(LEASE_INVALID, "not a network lease token"))?;
        Ok(NetLease { queue, shard: w[4] as u32, pos: w[1], tag: w[2], deliveries: w[3] as u32 })
    }
}

/// The sixth private word of a network token (local tokens have 0 there).
const NET_MARK: u64 = 0x6e65_746c_6561_7365;

/// The network token at `lease`, checked, for queue `t`.
///
/// # Safety
/// `lease` is NULL or points to a readable TvmLease.
pub(super) unsafe fn net_token(lease: *const TvmLease, t: u32) -> Result<NetLease> {
    // SAFETY: NULL or a readable TvmLease, by the caller's contract.
    let l = match unsafe { lease.as_ref() } {
        None => return Err(Error::new(CONDIT_IS_NIL, "NULL lease")),
        Some(tok) => tok.to_net()?,
    };
    if l.queue != t {
        return Err(Error::new(LEASE_INVALID, format!("a lease of queue {}, not of queue {t}", l.queue)));
    }
    Ok(l)
}

/// The token at `lease`, checked.
///
/// # Safety
/// `lease` is NULL or points to a readable TvmLease.
pub(super) unsafe fn token(lease: *const TvmLease) -> Result<Lease> {
    // SAFETY: NULL or a readable TvmLease, by the caller's contract.
    match unsafe { lease.as_ref() } {
        None => Err(Error::new(CONDIT_IS_NIL, "NULL lease")),
        Some(t) => t.to_lease(),
    }
}

/// After an acknowledgement that succeeded: `*done` refused by every call
/// from now on, `*lease` the new token (`token`; ZERO when the lease
/// failed). They may be the same token: then only the new one is written.
///
/// # Safety
/// `done` and `lease` point to writable TvmLease values.
pub(super) unsafe fn hand_over(done: *mut TvmLease, lease: *mut TvmLease, token: TvmLease) {
    // SAFETY: the caller's contract.
    unsafe {
        if !std::ptr::eq(done, lease) {
            done.write(TvmLease::ZERO);
        }
        lease.write(token);
    }
}

/// A lease time in milliseconds from C, in nanoseconds (saturating; 0 stays
/// 0: the queue's lease time): 0 to [`MAX_LEASE_MS`] (a year), else refused.
#[inline]
pub(super) fn lease_nanos(ms: c_long) -> Result<u64> {
    match u64::try_from(ms) {
        Ok(ms) if ms <= MAX_LEASE_MS => Ok(ms * 1_000_000),
        _ => Err(out_of_range_ms(ms, "lease time")),
    }
}

#[cold]
pub(super) fn out_of_range_ms(ms: c_long, what: &str) -> Error {
    Error::new(CONDIT_IS_NIL, format!("{what} {ms} ms: 0 to {MAX_LEASE_MS} (a year)"))
}

/// Milliseconds from C: 0 to [`MAX_LEASE_MS`] (a year), else refused.
pub(super) fn millis(ms: c_long, what: &str) -> Result<Duration> {
    match u64::try_from(ms) {
        Ok(ms) if ms <= MAX_LEASE_MS => Ok(Duration::from_millis(ms)),
        _ => Err(out_of_range_ms(ms, what)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_garbage_is_refused() {
        let l = Lease::from_words([7 | 3 << 32, 99, 1234, 5 | 2 << 32, 77]);
        let t = TvmLease::from_lease(&l);
        assert_eq!(t.deliveries, 2);
        assert_eq!(t.to_lease().unwrap(), l);
        assert_eq!(TvmLease::ZERO.to_lease().unwrap_err().code(), LEASE_INVALID);
        for k in 0..7 {
            let mut bad = t;
            bad.m_llPriv[k] ^= 1;
            assert_eq!(bad.to_lease().unwrap_err().code(), LEASE_INVALID, "word {k} altered");
        }
        let mut d = t;
        d.deliveries = 100; // public: the caller may scribble on it
        assert!(d.to_lease().is_ok());
        // Network tokens: refused by the local calls, and the other way round.
        let n = NetLease { queue: 21, shard: 2, pos: 5, tag: 7 << 32 | 3, deliveries: 2 };
        let nt = TvmLease::from_net(&n);
        assert_eq!(nt.deliveries, 2);
        assert_eq!(nt.to_net().unwrap(), n);
        assert_eq!(nt.to_lease().unwrap_err().code(), LEASE_INVALID);
        assert_eq!(t.to_net().unwrap_err().code(), LEASE_INVALID);
        assert_eq!(TvmLease::ZERO.to_net().unwrap_err().code(), LEASE_INVALID);
        for k in 0..7 {
            let mut bad = nt;
            bad.m_llPriv[k] ^= 1;
            assert_eq!(bad.to_net().unwrap_err().code(), LEASE_INVALID, "word {k} altered");
        }
    }
}
