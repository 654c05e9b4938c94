//! Server-side Lua scripts of a Redis: each is sent by its SHA-1 (EVALSHA),
//! and with its body (EVAL, which also loads it) when the server answers
//! NOSCRIPT (a node that never saw it, a restarted or failed-over server,
//! SCRIPT FLUSH). A NOSCRIPT answer means the script did not run, so
//! sending it again is safe.

use super::reply::Answer;
use super::{Client, Key};
use crate::client::conn::ReplyWait;
use crate::error::*;
use std::sync::OnceLock;

/// A script and its SHA-1 in hex (computed once).
pub(crate) struct Script {
    body: &'static str,
    sha: OnceLock<String>,
}

impl Script {
    pub(crate) const fn new(body: &'static str) -> Script {
        Script { body, sha: OnceLock::new() }
    }

    pub(crate) fn sha(&self) -> &str {
        self.sha.get_or_init(|| sha1(self.body.as_bytes()).iter().map(|b| format!("{b:02x}")).collect())
    }
}

/// SHA-1 (FIPS 180-4) of `data`: the name Redis gives a script.
pub(crate) fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476, 0xc3d2_e1f0];
    let mut msg = data.to_vec();
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&((data.len() as u64).wrapping_mul(8)).to_be_bytes());
    for block in msg.chunks_exact(64) {
        let mut w = [0u32; 80];
        for (i, word) in block.chunks_exact(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, &wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5a82_7999),
                20..=39 => (b ^ c ^ d, 0x6ed9_eba1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8f1b_bcdc),
                _ => (b ^ c ^ d, 0xca62_c1d6),
            };
            let t = a.rotate_left(5).wrapping_add(f).wrapping_add(e).wrapping_add(k).wrapping_add(wi);
            (e, d, c, b, a) = (d, c, b.rotate_left(30), a, t);
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 20];
    for (i, x) in h.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&x.to_be_bytes());
    }
    out
}

impl Client {
    /// Runs `script` with `keys` (every one in the slot of `route`) and
    /// `args`: EVALSHA, then EVAL with the body after NOSCRIPT.
    /// With `replicate`, the run waits for the replicas lTvmRequireReplicas
    /// asked for ([`Client::exec_replicated`]).
    pub(crate) fn eval(
        &mut self,
        script: &Script,
        route: Key,
        keys: &[&[u8]],
        args: &[&[u8]],
        replicate: bool,
    ) -> Result<Answer> {
        let n = keys.len().to_string();
        let run = |this: &mut Client, verb: &[u8], first: &[u8]| {
            let mut parts: Vec<&[u8]> = Vec::with_capacity(3 + keys.len() + args.len());
            parts.extend_from_slice(&[verb, first, n.as_bytes()]);
            parts.extend_from_slice(keys);
            parts.extend_from_slice(args);
            let encode = |w: &mut Vec<u8>| resp::command(w, &parts);
            if replicate {
                this.exec_replicated(route, ReplyWait::Normal, encode)
            } else {
                this.exec(route, ReplyWait::Normal, encode)
            }
        };
        match run(self, b"EVALSHA", script.sha().as_bytes()) {
            Err(e) if e.code() == SVR_EXCEPTION && e.detail().contains("NOSCRIPT") => {
                run(self, b"EVAL", script.body.as_bytes())
            }
            r => r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn sha1_vectors() {
        assert_eq!(hex(&sha1(b"")), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
        assert_eq!(hex(&sha1(b"abc")), "a9993e364706816aba3e25717850c26c9cd0d89d");
        let two = b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
        assert_eq!(hex(&sha1(two)), "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
        assert_eq!(hex(&sha1(&[b'a'; 1000])), "291e9a6c66994949b57ba5e650361e98fc36b1ba");
        // Redis's name of `return 1` (SCRIPT LOAD "return 1").
        assert_eq!(Script::new("return 1").sha(), "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
    }
}
