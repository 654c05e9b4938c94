//! The keyspace commands: `SCAN` (how redis-cli `--scan` and client
//! libraries list keys), `KEYS`, `DBSIZE` and `TYPE`. A queue's key here is
//! its id in decimal, the canonical spelling (its name reaches it too, but
//! is not listed: each queue is listed once). They read the server's index
//! of the directory (kept current by inotify), never the disk: `SCAN`
//! examines at most [`MAX_COUNT`] queues a call and `KEYS` runs off the
//! worker, so that listing ten thousand queues stalls no other client.

use super::context::{Ctx, parse_int};
use super::off_worker::Job;
use crate::pool::Kind;
use crate::reply;
use resp::Request;

/// The most queues one SCAN call examines (its COUNT is cut to this).
pub(crate) const MAX_COUNT: usize = 1000;
/// SCAN's default COUNT, Redis's.
const DEFAULT_COUNT: usize = 10;
/// The longest MATCH pattern (a key is at most 63 bytes): it bounds the
/// work of matching.
pub(crate) const MAX_PATTERN: usize = 128;

/// Does `key` match the glob `pattern` (Redis's: `*`, `?`, `[abc]`,
/// `[^a]`, `[a-z]`, `\x`)? Iterative: a later `*` retries from the last
/// one's position, so the work is at most the product of the lengths.
pub(crate) fn glob(pattern: &[u8], key: &[u8]) -> bool {
    let (mut p, mut k) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while k < key.len() {
        let step = match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, k));
                p += 1;
                continue;
            }
            Some(b'?') => Some(p + 1),
            Some(b'[') => class(pattern, p, key[k]),
            Some(b'\\') if p + 1 < pattern.len() => (pattern[p + 1] == key[k]).then_some(p + 2),
            Some(&c) => (c == key[k]).then_some(p + 1),
            None => None,
        };
        match (step, star) {
            (Some(next), _) => {
                p = next;
                k += 1;
            }
            (None, Some((sp, sk))) => {
                p = sp + 1;
                k = sk + 1;
                star = Some((sp, sk + 1));
            }
            (None, None) => return false,
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// Matches `c` against the class opening at `pattern[at]` (`[`): the
/// position after its `]` when it matches. An unclosed class ends at the
/// pattern's end, as in Redis.
fn class(pattern: &[u8], at: usize, c: u8) -> Option<usize> {
    let mut i = at + 1;
    let negate = pattern.get(i) == Some(&b'^');
    if negate {
        i += 1;
    }
    let mut hit = false;
    while i < pattern.len() && pattern[i] != b']' {
        if pattern[i] == b'\\' && i + 1 < pattern.len() {
            hit |= pattern[i + 1] == c;
            i += 2;
        } else if i + 2 < pattern.len() && pattern[i + 1] == b'-' && pattern[i + 2] != b']' {
            let (lo, hi) = (pattern[i].min(pattern[i + 2]), pattern[i].max(pattern[i + 2]));
            hit |= (lo..=hi).contains(&c);
            i += 3;
        } else {
            hit |= pattern[i] == c;
            i += 1;
        }
    }
    (hit != negate).then_some((i + 1).min(pattern.len()))
}

/// `SCAN cursor [MATCH pattern] [COUNT n] [TYPE type]`: the next queues
/// from the cursor (a queue id; 0 starts), at most COUNT of them examined,
/// and the cursor to go on from ("0": the end). A queue present from the
/// first call to the last is listed once; every queue is a `list`.
pub(crate) fn scan(ctx: &mut Ctx<'_>, buf: &[u8], req: &Request, out: &mut Vec<u8>) {
    let Some(cursor) = std::str::from_utf8(req.arg(buf, 1)).ok().and_then(|c| c.parse::<u64>().ok()) else {
        resp::error(out, b"ERR invalid cursor");
        return;
    };
    let mut count = DEFAULT_COUNT;
    let mut pattern: Option<&[u8]> = None;
    let mut lists = true;
    let mut i = 2;
    while i < req.len() {
        let (opt, value) = (req.arg(buf, i), (i + 1 < req.len()).then(|| req.arg(buf, i + 1)));
        let Some(value) = value else {
            resp::error(out, b"ERR syntax error");
            return;
        };
        if opt.eq_ignore_ascii_case(b"COUNT") {
            match parse_int(value) {
                Some(n) if n >= 1 => count = usize::try_from(n).unwrap_or(MAX_COUNT).min(MAX_COUNT),
                Some(_) => {
                    resp::error(out, b"ERR syntax error");
                    return;
                }
                None => {
                    resp::error(out, b"ERR value is not an integer or out of range");
                    return;
                }
            }
        } else if opt.eq_ignore_ascii_case(b"MATCH") {
            if value.len() > MAX_PATTERN {
                reply::error_fmt(out, format_args!("ERR pattern longer than {MAX_PATTERN} bytes"));
                return;
            }
            pattern = Some(value);
        } else if opt.eq_ignore_ascii_case(b"TYPE") {
            lists = value.eq_ignore_ascii_case(b"list");
        } else {
            resp::error(out, b"ERR syntax error");
            return;
        }
        i += 2;
    }
    let index = &ctx.shared.index;
    // What the kernel has queued about the directory (one read when nothing).
    index.refresh();
    let (ids, next) = match u32::try_from(cursor) {
        Ok(from) if lists => index.ids_from(from, count),
        _ => (Vec::new(), None),
    };
    let keys: Vec<String> =
        ids.into_iter().map(|id| id.to_string()).filter(|k| pattern.is_none_or(|p| glob(p, k.as_bytes()))).collect();
    resp::array_header(out, 2);
    resp::bulk(out, next.map_or(0, u64::from).to_string().as_bytes());
    resp::array_header(out, keys.len());
    for k in &keys {
        resp::bulk(out, k.as_bytes());
    }
}

/// `KEYS pattern`: every queue whose key matches, made off the worker (a
/// walk of the whole index).
pub(crate) fn keys(ctx: &mut Ctx<'_>, buf: &[u8], req: &Request, out: &mut Vec<u8>) -> Option<Job> {
    let pattern = req.arg(buf, 1);
    if pattern.len() > MAX_PATTERN {
        reply::error_fmt(out, format_args!("ERR pattern longer than {MAX_PATTERN} bytes"));
        return None;
    }
    let pattern = pattern.to_vec();
    let index = ctx.shared.index.clone();
    Some(Job::new(Kind::Heavy, move |out| {
        index.refresh();
        let (ids, _) = index.ids_from(0, usize::MAX);
        let keys: Vec<String> =
            ids.into_iter().map(|id| id.to_string()).filter(|k| glob(&pattern, k.as_bytes())).collect();
        resp::array_header(out, keys.len());
        for k in &keys {
            resp::bulk(out, k.as_bytes());
        }
    }))
}

/// `DBSIZE`: how many queues the directory holds.
pub(crate) fn dbsize(ctx: &mut Ctx<'_>, out: &mut Vec<u8>) {
    ctx.shared.index.refresh();
    resp::integer(out, ctx.shared.index.len() as i64);
}

/// `TYPE key`: `list` for a queue, `none` for a key no queue has.
pub(crate) fn key_type(ctx: &mut Ctx<'_>, buf: &[u8], req: &Request, out: &mut Vec<u8>) {
    let found = ctx.client.last.resolve(ctx.shared, ctx.keys, req.arg(buf, 1)).is_ok();
    resp::simple(out, if found { b"list" } else { b"none" });
}

#[cfg(test)]
mod tests {
    use super::glob;

    #[test]
    fn globs_as_redis() {
        let yes = |p: &str, k: &str| assert!(glob(p.as_bytes(), k.as_bytes()), "{p} should match {k}");
        let no = |p: &str, k: &str| assert!(!glob(p.as_bytes(), k.as_bytes()), "{p} should not match {k}");
        yes("*", "21");
        yes("*", "");
        yes("2*", "21");
        yes("2?", "21");
        no("2?", "2");
        yes("*1", "21");
        yes("*2*", "1234");
        yes("1*3*5", "12345");
        no("1*3*6", "12345");
        yes("[12]1", "21");
        no("[^2]1", "21");
        yes("[0-3]?", "21");
        yes("[3-0]?", "21");
        no("[3-9]?", "21");
        yes("\\*", "*");
        no("\\*", "2");
        yes("2[1", "21");
        no("", "21");
        yes("**1", "1");
        no("?", "");
    }
}
