//! SCAN, KEYS, DBSIZE and TYPE: redis-cli `--scan` lists every queue once
//! (its id), with a pattern too; SCAN's cursor walks the queues in pieces
//! of at most COUNT (and at most 1000); queues made and dropped meanwhile
//! are seen by the next walk; bad arguments get Redis's errors.

mod common;

use common::*;
use std::collections::BTreeSet;

fn lines(s: &str) -> Vec<String> {
    s.lines().filter(|l| !l.is_empty()).map(str::to_string).collect()
}

#[test]
fn redis_cli_scan_keys_dbsize_type() {
    let dir = TempDir::new("server", "keyspace");
    let ids: Vec<u32> = (1..=2500).map(|i| i * 7).collect();
    for &id in &ids {
        create(&dir, id, &format!("Q{id}"), 2, 8);
    }
    let server = start(&dir, &[]);
    let addr = server.tcp_addr().unwrap();
    let want: BTreeSet<String> = ids.iter().map(u32::to_string).collect();

    assert_eq!(cli(addr, &["DBSIZE"]), "2500");
    // redis-cli --scan: SCAN with its cursor until 0; every queue exactly once.
    let scanned = lines(&cli(addr, &["--scan"]));
    assert_eq!(scanned.len(), 2500, "each queue once");
    assert_eq!(scanned.iter().cloned().collect::<BTreeSet<_>>(), want);
    let scanned = lines(&cli(addr, &["--scan", "--pattern", "7?"]));
    assert_eq!(scanned, ["70", "77"]);
    let scanned = lines(&cli(addr, &["--scan", "--pattern", "*00"]));
    let expect: Vec<String> = want.iter().filter(|k| k.ends_with("00")).cloned().collect();
    assert_eq!(scanned.iter().cloned().collect::<BTreeSet<_>>(), expect.into_iter().collect());

    // KEYS: the same, in one reply (made off the worker).
    let keys = lines(&cli(addr, &["KEYS", "*"]));
    assert_eq!(keys.iter().cloned().collect::<BTreeSet<_>>(), want);
    assert_eq!(lines(&cli(addr, &["KEYS", "1[0-4]"])), ["14"]);
    assert_eq!(cli(addr, &["KEYS", "nothing*"]), "");

    assert_eq!(cli(addr, &["TYPE", "7"]), "list");
    assert_eq!(cli(addr, &["TYPE", "Q14"]), "list", "a name reaches its queue");
    assert_eq!(cli(addr, &["TYPE", "8"]), "none");
    assert_eq!(cli(addr, &["TYPE", "no-such-queue"]), "none");

    // One SCAN call by hand: at most COUNT queues, the cursor to go on from.
    let mut c = Conn::connect(addr);
    let step = |c: &mut Conn, cursor: &str, count: &str| -> (String, Vec<String>) {
        let text = |v: &V| match v {
            V::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
            other => panic!("a bulk string: {other:?}"),
        };
        match c.cmd(&[b"SCAN", cursor.as_bytes(), b"COUNT", count.as_bytes()]) {
            V::Arr(v) => match &v[..] {
                [cur, V::Arr(keys)] => (text(cur), keys.iter().map(text).collect()),
                other => panic!("SCAN's reply: {other:?}"),
            },
            other => panic!("SCAN's reply: {other:?}"),
        }
    };
    let (cursor, keys) = step(&mut c, "0", "3");
    assert_eq!(keys, ["7", "14", "21"]);
    assert_eq!(cursor, "28", "the cursor is the next id");
    let (_, keys) = step(&mut c, &cursor, "2");
    assert_eq!(keys, ["28", "35"]);
    let (_, keys) = step(&mut c, "0", "100000");
    assert_eq!(keys.len(), 1000, "COUNT is cut to 1000");
    // A queue made and one dropped during a walk: the rest are seen once.
    let (cursor, first) = step(&mut c, "0", "10");
    create(&dir, 3, "new-low", 2, 8);
    create(&dir, 17501, "new-high", 2, 8);
    tvm::Queue::drop_queue(dir.path(), 17500).unwrap();
    let mut seen = first;
    let mut cursor = cursor;
    while cursor != "0" {
        let (next, keys) = step(&mut c, &cursor, "500");
        seen.extend(keys);
        cursor = next;
    }
    assert!(seen.contains(&"17501".to_string()), "made ahead of the cursor: seen");
    assert!(!seen.contains(&"3".to_string()), "made behind the cursor: left to the next walk");
    assert!(!seen.contains(&"17500".to_string()), "dropped before the cursor reached it");
    assert_eq!(seen.len(), 2500, "{} keys", seen.len());
    assert_eq!(cli(addr, &["DBSIZE"]), "2501");

    // TYPE filters: every queue is a list.
    assert_eq!(step(&mut c, "0", "10").1.len(), 10);
    assert_eq!(c.cmd(&[b"SCAN", b"0", b"TYPE", b"string"]), V::Arr(vec![V::bulk(b"0"), V::Arr(vec![])]));
    // Errors in Redis's words.
    assert_eq!(c.cmd(&[b"SCAN", b"x"]).err_text(), "ERR invalid cursor");
    assert_eq!(c.cmd(&[b"SCAN", b"0", b"COUNT", b"0"]).err_text(), "ERR syntax error");
    assert_eq!(c.cmd(&[b"SCAN", b"0", b"COUNT"]).err_text(), "ERR syntax error");
    assert_eq!(c.cmd(&[b"SCAN", b"0", b"FOO", b"1"]).err_text(), "ERR syntax error");
    assert!(c.cmd(&[b"KEYS", "*".repeat(200).as_bytes()]).err_text().contains("pattern longer than 128 bytes"));
    assert!(c.cmd(&[b"DBSIZE", b"x"]).err_text().contains("wrong number of arguments"));
    server.stop();
}
