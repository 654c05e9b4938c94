//! Redis Cluster routing facts: the hash slot of a key (CRC16 of the key or
//! of its hash tag, modulo 16384) and the redirections a node answers with
//! (`MOVED` and `ASK`).

/// Number of hash slots of a Redis Cluster.
pub(crate) const SLOTS: usize = 16384;

/// CRC16/XMODEM (polynomial 0x1021, initial value 0), the one Redis Cluster uses.
pub(crate) fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc
}

/// The hash slot of `key`: only the part between the first `{` and the next
/// `}` counts when that part is not empty (a hash tag), as in Redis.
pub(crate) fn key_slot(key: &[u8]) -> u16 {
    let hashed = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &key[open + 1..open + 1 + len],
            _ => key,
        },
        None => key,
    };
    crc16(hashed) % SLOTS as u16
}

/// A redirection of a Redis Cluster node.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Redirect {
    /// `MOVED <slot> <host>:<port>`: the slot lives there now (update the map).
    Moved { slot: u16, host: String, port: u16 },
    /// `ASK <slot> <host>:<port>`: ask there once, after `ASKING` (the slot is migrating).
    Ask { slot: u16, host: String, port: u16 },
}

/// Parses the text of an error reply as a redirection; `None` when it is
/// not one (or is malformed). An empty host (`MOVED 3999 :6380`, a node
/// that does not know its own address) is returned empty: the caller uses
/// the host of the node that answered.
pub(crate) fn parse_redirect(text: &[u8]) -> Option<Redirect> {
    let text = std::str::from_utf8(text).ok()?;
    let mut words = text.split(' ');
    let kind = words.next()?;
    let slot: u16 = words.next()?.parse().ok()?;
    let endpoint = words.next()?;
    if usize::from(slot) >= SLOTS || words.next().is_some() {
        return None;
    }
    let (host, port) = endpoint.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
    match kind {
        "MOVED" => Some(Redirect::Moved { slot, host, port }),
        "ASK" => Some(Redirect::Ask { slot, host, port }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_of_the_reference_string() {
        // The check value of CRC16/XMODEM, and the example of the Redis Cluster spec.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(crc16(b""), 0);
    }

    #[test]
    fn slots_of_known_keys() {
        // As `CLUSTER KEYSLOT` answers (redis 7.0).
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"21"), 1413);
        assert_eq!(key_slot(b"123456789"), 0x31C3); // below 16384: the CRC itself
    }

    #[test]
    fn hash_tags() {
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"{user1000}.followers"), key_slot(b"{user1000}.following"));
        // An empty tag hashes the whole key; only the first { and the next } count.
        assert_eq!(key_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % 16384);
        assert_eq!(key_slot(b"foo{{bar}}zap"), crc16(b"{bar") % 16384);
        assert_eq!(key_slot(b"foo{bar}{zap}"), crc16(b"bar") % 16384);
        // No closing brace: the whole key.
        assert_eq!(key_slot(b"{21"), crc16(b"{21") % 16384);
    }

    #[test]
    fn redirections() {
        assert_eq!(
            parse_redirect(b"MOVED 3999 127.0.0.1:6381"),
            Some(Redirect::Moved { slot: 3999, host: "127.0.0.1".into(), port: 6381 })
        );
        assert_eq!(
            parse_redirect(b"ASK 6146 10.0.0.5:7002"),
            Some(Redirect::Ask { slot: 6146, host: "10.0.0.5".into(), port: 7002 })
        );
        assert_eq!(
            parse_redirect(b"MOVED 1 :7000"),
            Some(Redirect::Moved { slot: 1, host: String::new(), port: 7000 })
        );
        assert_eq!(
            parse_redirect(b"MOVED 1 ::1:7000"),
            Some(Redirect::Moved { slot: 1, host: "::1".into(), port: 7000 })
        );
        for bad in [
            &b"MOVED"[..],
            b"MOVED 16384 h:1",
            b"MOVED x h:1",
            b"MOVED 1 h",
            b"MOVED 1 h:99999",
            b"MOVED 1 h:1 extra",
            b"ERR no such queue '21'",
            b"ASKING 1 h:1",
            b"\xff\xfe",
        ] {
            assert_eq!(parse_redirect(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
