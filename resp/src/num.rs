//! Integer parsing (the rules of Redis's `string2ll`) and formatting without allocation.

/// Two ASCII digits for every number 0..100, for formatting two digits per division.
const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Parses a signed decimal integer exactly as Redis's `string2ll` does: an optional `-`, then
/// digits, no leading zero (except "0" itself), no `+`, no spaces, fewer than 21 bytes, and no
/// overflow of `i64`. Returns `None` for anything else (including "-0" and the empty string).
pub(crate) fn parse_i64(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() >= 21 {
        return None;
    }
    if s == b"0" {
        return Some(0);
    }
    let (negative, digits) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, s),
    };
    let (&first, rest) = digits.split_first()?;
    if !(b'1'..=b'9').contains(&first) {
        return None;
    }
    let mut v = u64::from(first - b'0');
    for &b in rest {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    if negative { i64::try_from(-i128::from(v)).ok() } else { i64::try_from(v).ok() }
}

/// The fast path of reading a number line: the type byte at `start`, then an optional `-`,
/// 1 to 18 digits without a leading zero (or "0" alone), then CRLF, the CR at most `max_line`
/// bytes after `start`. Returns the number and the position after the CRLF, or `None` when the
/// line is anything else (incomplete, longer, invalid), left to the general path, which gives
/// the same value for every line this accepts.
#[inline(always)]
pub(crate) fn fast_number_line(buf: &[u8], start: usize, max_line: usize) -> Option<(i64, usize)> {
    let mut i = start + 1;
    let negative = buf.get(i) == Some(&b'-');
    if negative {
        i += 1;
    }
    let digits = i;
    let d0 = *buf.get(i)?;
    if !d0.is_ascii_digit() || (negative && d0 == b'0') {
        return None;
    }
    let mut v = i64::from(d0 - b'0');
    i += 1;
    if d0 != b'0' {
        while let Some(&d) = buf.get(i) {
            if !d.is_ascii_digit() || i - digits >= 18 {
                break;
            }
            v = v * 10 + i64::from(d - b'0');
            i += 1;
        }
    }
    if buf.get(i) == Some(&b'\r') && buf.get(i + 1) == Some(&b'\n') && i - start <= max_line {
        Some((if negative { -v } else { v }, i + 2))
    } else {
        None
    }
}

/// Appends `prefix`, the decimal digits of `v` (with a `-` when `negative`), and CRLF, with a
/// single copy into `out`.
#[inline]
fn put_line(out: &mut Vec<u8>, prefix: u8, negative: bool, mut v: u64) {
    // prefix + '-' + 20 digits + CRLF = 24 bytes at most.
    let mut buf = [0u8; 24];
    let mut i = 22;
    buf[22] = b'\r';
    buf[23] = b'\n';
    while v >= 100 {
        let d = (v % 100) as usize * 2;
        v /= 100;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&PAIRS[d..d + 2]);
    }
    if v >= 10 {
        let d = v as usize * 2;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&PAIRS[d..d + 2]);
    } else {
        i -= 1;
        buf[i] = b'0' + v as u8;
    }
    if negative {
        i -= 1;
        buf[i] = b'-';
    }
    i -= 1;
    buf[i] = prefix;
    out.extend_from_slice(&buf[i..]);
}

/// Appends `prefix`, the decimal form of the signed `v`, and CRLF.
#[inline]
pub(crate) fn put_i64_line(out: &mut Vec<u8>, prefix: u8, v: i64) {
    put_line(out, prefix, v < 0, v.unsigned_abs());
}

/// Appends `prefix`, the decimal form of the length `n`, and CRLF.
#[inline]
pub(crate) fn put_len_line(out: &mut Vec<u8>, prefix: u8, n: usize) {
    if n < 10 {
        out.extend_from_slice(&[prefix, b'0' + n as u8, b'\r', b'\n']);
    } else {
        put_line(out, prefix, false, n as u64);
    }
}

/// Position of the first `x` in `hay`, eight bytes at a time.
#[inline]
pub(crate) fn find_byte(hay: &[u8], x: u8) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let pattern = LO * u64::from(x);
    let mut chunks = hay.chunks_exact(8);
    let mut offset = 0;
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let w = u64::from_le_bytes(word) ^ pattern;
        // The lowest set bit marks the first zero byte of `w` exactly (borrows only propagate upwards).
        let zero = w.wrapping_sub(LO) & !w & HI;
        if zero != 0 {
            return Some(offset + (zero.trailing_zeros() / 8) as usize);
        }
        offset += 8;
    }
    chunks.remainder().iter().position(|&b| b == x).map(|i| offset + i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_i64_follows_string2ll() {
        let ok: &[(&[u8], i64)] = &[
            (b"0", 0),
            (b"1", 1),
            (b"-1", -1),
            (b"1234567890", 1_234_567_890),
            (b"9223372036854775807", i64::MAX),
            (b"-9223372036854775808", i64::MIN),
        ];
        for &(s, v) in ok {
            assert_eq!(parse_i64(s), Some(v), "{:?}", String::from_utf8_lossy(s));
        }
        let bad: &[&[u8]] = &[
            b"",
            b"-",
            b"-0",
            b"00",
            b"01",
            b"+1",
            b" 1",
            b"1 ",
            b"1a",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"99999999999999999999",
            b"18446744073709551616",
            b"000000000000000000001",
            b"--1",
            b"1-",
        ];
        for &s in bad {
            assert_eq!(parse_i64(s), None, "{:?}", String::from_utf8_lossy(s));
        }
    }

    #[test]
    fn formats_integers() {
        for v in [0, 1, -1, 9, 10, 99, 100, 101, -100, 12345, i64::MAX, i64::MIN, i64::MIN + 1] {
            let mut out = Vec::new();
            put_i64_line(&mut out, b':', v);
            assert_eq!(out, format!(":{v}\r\n").into_bytes());
        }
        for n in [0usize, 9, 10, 11, 99, 100, 304, 65536, usize::MAX] {
            let mut out = Vec::new();
            put_len_line(&mut out, b'$', n);
            assert_eq!(out, format!("${n}\r\n").into_bytes());
        }
    }

    #[test]
    fn find_byte_matches_naive() {
        let mut hay = [0u8; 40];
        for len in 0..hay.len() {
            for at in 0..=len {
                hay.iter_mut().for_each(|b| *b = 0x8d);
                if at < len {
                    hay[at] = b'\r';
                }
                // A second match after the first one must not change the answer.
                if at + 3 < len {
                    hay[at + 3] = b'\r';
                }
                let naive = hay[..len].iter().position(|&b| b == b'\r');
                assert_eq!(find_byte(&hay[..len], b'\r'), naive, "len {len} at {at}");
            }
        }
        // Bytes one above and below the searched one must not be taken for it.
        assert_eq!(find_byte(b"\x0c\x0e\x0c\x0e\x0c\x0e\x0c\x0e\x0c\r", b'\r'), Some(9));
        assert_eq!(find_byte(b"\x01\x00\x01\x01\x01\x01\x01\x01", 1), Some(0));
        assert_eq!(find_byte(b"\x00\x01\x00\x00\x00\x00\x00\x00", 1), Some(1));
    }
}
