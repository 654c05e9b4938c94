//! Server side: parsing requests.

mod common;

use common::Rng;
use resp::{Limits, ProtocolError, Request, Status, parse_request};

type Args = Vec<Vec<u8>>;

/// Parses one command with a fresh `Request`.
fn parse_one(buf: &[u8]) -> Result<(Args, Status), ProtocolError> {
    parse_one_with(buf, &Limits::default())
}

fn parse_one_with(buf: &[u8], limits: &Limits) -> Result<(Args, Status), ProtocolError> {
    let mut req = Request::new();
    let status = parse_request(buf, limits, &mut req)?;
    let args = match status {
        Status::Complete { .. } => req.iter(buf).map(<[u8]>::to_vec).collect(),
        Status::Incomplete { .. } => Vec::new(),
    };
    Ok((args, status))
}

fn complete(buf: &[u8]) -> (Args, usize) {
    match parse_one(buf) {
        Ok((args, Status::Complete { consumed })) => (args, consumed),
        other => panic!("{:?}: {other:?}", String::from_utf8_lossy(buf)),
    }
}

fn error_text(buf: &[u8]) -> String {
    error_text_with(buf, &Limits::default())
}

fn error_text_with(buf: &[u8], limits: &Limits) -> String {
    match parse_one_with(buf, limits) {
        Err(e) => e.to_string(),
        Ok(ok) => panic!("{:?} parsed: {ok:?}", String::from_utf8_lossy(buf)),
    }
}

fn is_incomplete(buf: &[u8]) -> bool {
    matches!(parse_one(buf), Ok((_, Status::Incomplete { .. })))
}

fn args(list: &[&str]) -> Args {
    list.iter().map(|a| a.as_bytes().to_vec()).collect()
}

/// Everything a buffer holds: every command's args and consumed bytes, then the final
/// outcome (Incomplete, or the error). Parsed the way a server does, consuming as it goes.
#[derive(Debug, PartialEq)]
struct Parsed {
    commands: Vec<(Args, usize)>,
    end: Result<(), ProtocolError>,
}

/// Parses all of `buf` with `req` (which may hold a pending command, then resumed).
fn parse_all(
    buf: &[u8],
    limits: &Limits,
    req: &mut Request,
    commands: &mut Vec<(Args, usize)>,
) -> Result<usize, ProtocolError> {
    let mut pos = 0;
    loop {
        let rest = &buf[pos..];
        match parse_request(rest, limits, req)? {
            Status::Complete { consumed } => {
                assert!(consumed > 0 && consumed <= rest.len(), "consumed {consumed} of {}", rest.len());
                commands.push((req.iter(rest).map(<[u8]>::to_vec).collect(), consumed));
                pos += consumed;
            }
            Status::Incomplete { needed } => {
                assert!(needed >= 1);
                return Ok(pos);
            }
        }
    }
}

fn parse_whole(buf: &[u8], limits: &Limits) -> Parsed {
    let mut commands = Vec::new();
    let end = parse_all(buf, limits, &mut Request::new(), &mut commands).map(|_| ());
    Parsed { commands, end }
}

#[test]
fn multibulk() {
    let (a, n) = complete(b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n*1\r\n");
    assert_eq!((a, n), (args(&["SET", "key", "value"]), 33));
    // Binary arguments, CR and LF inside, empty ones.
    let buf = b"*3\r\n$0\r\n\r\n$4\r\n\r\n\r\n\r\n$2\r\n\0\xff\r\n";
    let (a, n) = complete(buf);
    assert_eq!((a, n), (vec![b"".to_vec(), b"\r\n\r\n".to_vec(), b"\0\xff".to_vec()], buf.len()));
    let mut req = Request::new();
    let buf = b"*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\n";
    assert_eq!(parse_request(buf, &Limits::default(), &mut req), Ok(Status::Complete { consumed: buf.len() }));
    assert!(!req.is_inline());
    assert_eq!(req.len(), 2);
    assert_eq!(req.arg(buf, 1), b"hi");
    assert_eq!(req.get(buf, 1), Some(&b"hi"[..]));
    assert_eq!(req.get(buf, 2), None);
    assert_eq!(req.iter(buf).rev().collect::<Vec<_>>(), [&b"hi"[..], b"ECHO"]);
    assert_eq!(req.iter(buf).len(), 2);
}

#[test]
fn commands_without_arguments_are_reported_empty() {
    for (buf, consumed) in [
        (&b"*0\r\n"[..], 4),
        (b"*-1\r\n", 5),
        (b"*-5\r\n*1\r\n", 5),
        (b"\r\n", 2),
        (b"\n", 1),
        (b"  \t \r\n", 6),
        (b"\x0b\x0c\n", 3),
        (b"\0 ping\n", 7),
    ] {
        let (a, n) = complete(buf);
        assert!(a.is_empty(), "{buf:?}");
        assert_eq!(n, consumed, "{buf:?}");
    }
}

#[test]
fn incomplete_multibulk() {
    let full = b"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n";
    for end in 0..full.len() {
        assert!(is_incomplete(&full[..end]), "{end}");
    }
    // The bytes still missing of a large argument are known.
    let mut req = Request::new();
    let head = b"*2\r\n$3\r\nSET\r\n$100000\r\nabc";
    assert_eq!(parse_request(head, &Limits::default(), &mut req), Ok(Status::Incomplete { needed: 100_000 - 3 + 2 }));
    let max = Limits::default().max_bulk_len;
    let head = format!("*1\r\n${max}\r\n");
    let status = parse_one(head.as_bytes()).unwrap().1;
    assert_eq!(status, Status::Incomplete { needed: max + 2 });
    // At the limit of the number of arguments.
    assert!(is_incomplete(b"*1048576\r\n"));
}

#[test]
fn error_texts() {
    let invalid_mbulk = "Protocol error: invalid multibulk length";
    for buf in [
        &b"*abc\r\n"[..],
        b"*\r\n",
        b"* 1\r\n",
        b"*+1\r\n",
        b"*01\r\n",
        b"*-0\r\n",
        b"*1 \r\n",
        b"*1048577\r\n",
        b"*3000000000\r\n",
        b"*99999999999999999999\r\n",
        b"*9223372036854775808\r\n",
        b"*1\rx",
    ] {
        assert_eq!(error_text(buf), invalid_mbulk, "{:?}", String::from_utf8_lossy(buf));
    }
    let invalid_bulk = "Protocol error: invalid bulk length";
    for buf in [
        &b"*1\r\n$abc\r\n"[..],
        b"*1\r\n$\r\n",
        b"*1\r\n$-1\r\n",
        b"*1\r\n$-5\r\n",
        b"*1\r\n$+5\r\n",
        b"*1\r\n$05\r\n",
        b"*1\r\n$536870913\r\n",
        b"*1\r\n$2000000000\r\n",
        b"*1\r\n$99999999999999999999\r\n",
        b"*1\r\n$-99999999999999999999\r\n",
        b"*1\r\n$3\rxfoo\r\n",
        b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$-10\r\n",
    ] {
        assert_eq!(error_text(buf), invalid_bulk, "{:?}", String::from_utf8_lossy(buf));
    }
    assert_eq!(error_text(b"*1\r\nfoo\r\n"), "Protocol error: expected '$', got 'f'");
    assert_eq!(error_text(b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n"), "Protocol error: expected '$', got 'f'");
    assert_eq!(error_text(b"*2\r\n$1\r\na\r\n:1\r\n"), "Protocol error: expected '$', got ':'");
    assert_eq!(error_text(b"*1\r\n\x01"), "Protocol error: expected '$', got '\\x01'");
    for buf in [&b"*1\r\n$3\r\nfooX"[..], b"*1\r\n$3\r\nfoo\rX", b"*1\r\n$3\r\nfoo\n\r", b"*1\r\n$0\r\nX"] {
        assert_eq!(error_text(buf), "Protocol error: bulk data not followed by CRLF", "{buf:?}");
    }

    let max = Limits::default().max_inline_len;
    assert_eq!(max, 64 * 1024);
    let mut line = vec![b'a'; max];
    assert!(is_incomplete(&line));
    line.push(b'\n');
    assert_eq!(complete(&line).1, max + 1);
    line.pop();
    line.push(b'a');
    assert_eq!(error_text(&line), "Protocol error: too big inline request");
    line.push(b'\n');
    assert_eq!(error_text(&line), "Protocol error: too big inline request");

    let mut mbulk = vec![b'*'];
    mbulk.resize(max, b'1');
    assert!(is_incomplete(&mbulk));
    mbulk.push(b'1');
    assert_eq!(error_text(&mbulk), "Protocol error: too big mbulk count string");
    let mut bulk = b"*1\r\n$".to_vec();
    bulk.resize(4 + max, b'1');
    assert!(is_incomplete(&bulk));
    bulk.push(b'1');
    assert_eq!(error_text(&bulk), "Protocol error: too big bulk count string");
    // The same with a small limit.
    let small = Limits { max_inline_len: 8, ..Limits::default() };
    assert_eq!(error_text_with(b"*000000000", &small), "Protocol error: too big mbulk count string");
    assert_eq!(error_text_with(b"*1\r\n$000000000", &small), "Protocol error: too big bulk count string");
    assert_eq!(error_text_with(b"get aaaaaa\n", &small), "Protocol error: too big inline request");
    // A line of exactly the limit is accepted, whichever way it is parsed.
    let three = Limits { max_inline_len: 3, ..Limits::default() };
    let two = Limits { max_inline_len: 2, ..Limits::default() };
    assert_eq!(parse_one_with(b"*-1\r\n", &three), Ok((Vec::new(), Status::Complete { consumed: 5 })));
    assert_eq!(error_text_with(b"*-1\r\n", &two), "Protocol error: too big mbulk count string");
    assert_eq!(parse_one_with(b"*1\r\n$-1\r\n", &three).unwrap_err(), ProtocolError::InvalidBulkLength);
    assert_eq!(parse_one_with(b"*1\r\n$-1\r\n", &two).unwrap_err(), ProtocolError::TooBigBulkCount);
    assert_eq!(parse_one_with(b"*12\r\n", &three).unwrap().1, Status::Incomplete { needed: 1 });
    assert_eq!(error_text_with(b"*12\r\n", &two), "Protocol error: too big mbulk count string");
    assert_eq!(error_text_with(b"*12", &two), "Protocol error: too big mbulk count string");
    assert_eq!(parse_one_with(b"get aaaa\n", &small).unwrap().0, args(&["get", "aaaa"]));
    assert_eq!(parse_one_with(b"*1\r\n$1\r\na\r\n", &Limits { max_inline_len: 2, ..small }).unwrap().0, args(&["a"]));

    for buf in [&b"set \"a b\n"[..], b"set 'a\n", b"\"foo\"bar\n", b"'foo'bar\n", b"\"a\\\"\n", b"'a\\'\n"] {
        assert_eq!(error_text(buf), "Protocol error: unbalanced quotes in request", "{buf:?}");
    }

    let small_bulk = Limits { max_bulk_len: 3, ..Limits::default() };
    assert!(parse_one_with(b"*1\r\n$3\r\nabc\r\n", &small_bulk).is_ok());
    assert_eq!(error_text_with(b"*1\r\n$4\r\n", &small_bulk), invalid_bulk);
    let small_args = Limits { max_args: 2, ..Limits::default() };
    assert!(parse_one_with(b"*2\r\n", &small_args).is_ok());
    assert_eq!(error_text_with(b"*3\r\n", &small_args), invalid_mbulk);
}

#[test]
fn error_replies() {
    let mut out = Vec::new();
    ProtocolError::InvalidBulkLength.write_reply(&mut out);
    assert_eq!(out, b"-ERR Protocol error: invalid bulk length\r\n");
    for (byte, written) in [(b'f', b'f'), (b'\r', b' '), (b'\n', b' '), (0xff, 0xff)] {
        let mut out = Vec::new();
        ProtocolError::ExpectedDollar(byte).write_reply(&mut out);
        let mut expected = b"-ERR Protocol error: expected '$', got '".to_vec();
        expected.extend_from_slice(&[written, b'\'', b'\r', b'\n']);
        assert_eq!(out, expected);
    }
    assert_eq!(ProtocolError::ExpectedDollar(0xff).to_string(), "Protocol error: expected '$', got '\\xff'");
    let boxed: Box<dyn std::error::Error> = Box::new(ProtocolError::UnbalancedQuotes);
    assert_eq!(boxed.to_string(), "Protocol error: unbalanced quotes in request");
}

#[test]
fn inline_quoting_as_sdssplitargs() {
    let cases: &[(&[u8], &[&[u8]])] = &[
        (b"PING\r\n", &[b"PING"]),
        (b"PING\n", &[b"PING"]),
        (b"set \"a b\" 'c d'\r\n", &[b"set", b"a b", b"c d"]),
        (b"  set\tkey   value  \r\n", &[b"set", b"key", b"value"]),
        (b"\"\\x41\"\n", &[b"A"]),
        (b"\"\\x4a\\x4B\"\n", &[b"JK"]),
        (b"\"\\x4\"\n", &[b"x4"]),
        (b"\"\\xZZ\"\n", &[b"xZZ"]),
        (b"\"\\n\\r\\t\\b\\a\\\\\\\"\\q\"\n", &[b"\n\r\t\x08\x07\\\"q"]),
        (b"\"\\x00\"\n", &[b"\0"]),
        (b"'it\\'s' 'a\\b' 'a\"b'\n", &[b"it's", b"a\\b", b"a\"b"]),
        (b"\"it's\"\n", &[b"it's"]),
        (b"\"\" ''\n", &[b"", b""]),
        (b"foo\"bar baz\" x\n", &[b"foobar baz", b"x"]),
        (b"a'b c'd\n", &[]), // error, see below
        (b"\"a\"\tb\n", &[b"a", b"b"]),
        (b"\"a\"\x0bb\n", &[b"a", b"b"]),
        (b"a\rb\n", &[b"a", b"b"]),
        (b"a\x0bb\n", &[b"a\x0bb"]),
        (b"a\r\r\n", &[b"a"]),
        (b"get a\0b c\n", &[b"get", b"a"]),
        (b"\"a\0b\"\n", &[]), // error: the NUL ends the string inside the quotes
        (b"\xff\xfe \x80\n", &[b"\xff\xfe", b"\x80"]),
        (b"$3\r\n", &[b"$3"]),
        (b"+PING\r\n", &[b"+PING"]),
    ];
    for &(line, expected) in cases {
        let parsed = parse_one(line);
        if expected.is_empty() {
            assert_eq!(
                parsed.map(|p| p.0),
                Err(ProtocolError::UnbalancedQuotes),
                "{:?}",
                String::from_utf8_lossy(line)
            );
            continue;
        }
        let (a, status) = parsed.unwrap_or_else(|e| panic!("{:?}: {e}", String::from_utf8_lossy(line)));
        let expected: Args = expected.iter().map(|a| a.to_vec()).collect();
        assert_eq!(a, expected, "{:?}", String::from_utf8_lossy(line));
        assert_eq!(status, Status::Complete { consumed: line.len() });
    }
    let mut req = Request::new();
    let buf = b"set \"a b\" c\r\n";
    parse_request(buf, &Limits::default(), &mut req).unwrap();
    assert!(req.is_inline());
    assert_eq!(req.arg(b"", 1), b"a b", "inline arguments do not depend on the buffer");
}

/// Random arguments: empty, binary, with CR and LF, up to 100 KB.
fn random_args(rng: &mut Rng) -> Vec<Vec<u8>> {
    let max = if rng.one_in(10) { 200 } else { 6 };
    let n = 1 + rng.below(max);
    (0..n).map(|_| rng.string()).collect()
}

fn encode(out: &mut Vec<u8>, args: &[Vec<u8>]) {
    let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
    resp::command(out, &refs);
}

#[test]
fn command_round_trip() {
    let mut rng = Rng::new(1);
    let limits = Limits::default();
    let mut req = Request::new();
    for _ in 0..300 {
        let commands: Vec<Args> = (0..1 + rng.below(8)).map(|_| random_args(&mut rng)).collect();
        let mut buf = Vec::new();
        let mut ends = Vec::new();
        for c in &commands {
            encode(&mut buf, c);
            ends.push(buf.len());
        }
        let mut pos = 0;
        for (c, &end) in commands.iter().zip(&ends) {
            let status = parse_request(&buf[pos..], &limits, &mut req).unwrap();
            assert_eq!(status, Status::Complete { consumed: end - pos });
            assert_eq!(req.iter(&buf[pos..]).collect::<Vec<_>>(), c.iter().map(Vec::as_slice).collect::<Vec<_>>());
            pos = end;
        }
        assert_eq!(parse_request(&buf[pos..], &limits, &mut req), Ok(Status::Incomplete { needed: 1 }));
    }
    // The variant whose last argument the caller writes.
    let mut buf = Vec::new();
    resp::command_with_last(&mut buf, &[b"SET", b"k"], 5);
    buf.extend_from_slice(b"he");
    buf.extend_from_slice(b"llo");
    resp::crlf(&mut buf);
    assert_eq!(buf, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n");
    assert_eq!(complete(&buf).0, args(&["SET", "k", "hello"]));
}

/// A pipeline of every kind of command: multibulk, inline, quoted, empty ones.
fn mixed_pipeline() -> Vec<u8> {
    let mut buf = Vec::new();
    resp::command(&mut buf, &[b"SET", b"key", b"a\r\nvalue"]);
    buf.extend_from_slice(b"PING\r\n");
    buf.extend_from_slice(b"*0\r\n");
    resp::command(&mut buf, &[b"LPUSH", b"", b"x"]);
    buf.extend_from_slice(b"set \"a b\" 'c\\'d' \"\\x41\\n\"\n");
    buf.extend_from_slice(b"\r\n");
    buf.extend_from_slice(b"*-1\r\n");
    resp::command(&mut buf, &[&[b'v'; 300][..]]);
    buf.extend_from_slice(b"  \n");
    resp::command(&mut buf, &[b"GET", b"key"]);
    buf.extend_from_slice(b"INCR counter\n");
    buf
}

/// Feeds `buf` in two reads, split at `split`, to a server loop that keeps one `Request`
/// (resuming a pending command) or clears it before each call.
fn parse_split(buf: &[u8], split: usize, limits: &Limits, resume: bool) -> Parsed {
    let mut req = Request::new();
    let mut commands = Vec::new();
    let mut input = buf[..split].to_vec();
    let mut end = Ok(());
    for rest in [&buf[split..], &[]] {
        if !resume {
            req.clear();
        }
        match parse_all(&input, limits, &mut req, &mut commands) {
            Ok(consumed) => {
                input.drain(..consumed);
                input.extend_from_slice(rest);
            }
            Err(e) => {
                end = Err(e);
                break;
            }
        }
    }
    Parsed { commands, end }
}

#[test]
fn split_at_every_byte() {
    let limits = Limits::default();
    let buf = mixed_pipeline();
    let whole = parse_whole(&buf, &limits);
    assert_eq!(whole.end, Ok(()));
    assert_eq!(whole.commands.len(), 11);
    assert_eq!(whole.commands[4].0, args(&["set", "a b", "c'd", "A\n"]));
    assert_eq!(whole.commands.iter().map(|c| c.1).sum::<usize>(), buf.len());
    for split in 0..=buf.len() {
        for resume in [true, false] {
            assert_eq!(parse_split(&buf, split, &limits, resume), whole, "split at {split}, resume {resume}");
        }
    }
    // The same with an error at the end: the commands before it, then the error.
    let mut bad = buf.clone();
    bad.extend_from_slice(b"*2\r\n$1\r\nx\r\n?");
    let whole = parse_whole(&bad, &limits);
    assert_eq!(whole.end, Err(ProtocolError::ExpectedDollar(b'?')));
    for split in 0..=bad.len() {
        assert_eq!(parse_split(&bad, split, &limits, true), whole, "split at {split}");
    }
}

#[test]
fn byte_by_byte() {
    let limits = Limits::default();
    let buf = mixed_pipeline();
    let whole = parse_whole(&buf, &limits);
    let mut req = Request::new();
    let mut input = Vec::new();
    let mut commands = Vec::new();
    for (i, &b) in buf.iter().enumerate() {
        input.push(b);
        let before = commands.len();
        let consumed = parse_all(&input, &limits, &mut req, &mut commands).unwrap();
        input.drain(..consumed);
        // A command completes exactly with its last byte.
        if commands.len() > before {
            let ends: usize = commands.iter().map(|c| c.1).sum();
            assert_eq!(ends, i + 1);
        }
    }
    assert_eq!(commands, whole.commands);
    assert!(input.is_empty());
}

#[test]
fn needed_is_a_lower_bound() {
    let limits = Limits::default();
    let mut buf = Vec::new();
    resp::command(&mut buf, &[b"SET", b"key", &[b'x'; 5000][..]]);
    let mut req = Request::new();
    for end in 0..buf.len() {
        req.clear();
        match parse_request(&buf[..end], &limits, &mut req).unwrap() {
            Status::Incomplete { needed } => assert!(needed >= 1 && end + needed <= buf.len(), "{end}: {needed}"),
            other => panic!("{end}: {other:?}"),
        }
    }
}

/// Parses a hostile buffer like a server, checking the invariants.
fn hostile(buf: &[u8], limits: &Limits, req: &mut Request) {
    let mut pos = 0;
    loop {
        let rest = &buf[pos..];
        match parse_request(rest, limits, req) {
            Ok(Status::Complete { consumed }) => {
                assert!(consumed > 0 && consumed <= rest.len());
                for i in 0..req.len() {
                    assert!(req.get(rest, i).is_some());
                }
                assert_eq!(req.iter(rest).count(), req.len());
                pos += consumed;
            }
            Ok(Status::Incomplete { needed }) => {
                assert!(needed >= 1);
                return;
            }
            Err(e) => {
                assert!(e.to_string().starts_with("Protocol error: "));
                req.clear();
                return;
            }
        }
    }
}

#[test]
fn hostile_lengths() {
    let unlimited =
        Limits { max_bulk_len: usize::MAX, max_args: usize::MAX, max_inline_len: usize::MAX, max_depth: 32 };
    let mut req = Request::new();
    for buf in [
        &b"*9223372036854775807\r\n"[..],
        b"*-9223372036854775808\r\n",
        b"*1\r\n$9223372036854775807\r\n",
        b"*1\r\n$9223372036854775807\r\nabc",
        b"*1\r\n$-9223372036854775808\r\n",
        b"*99999999999999999999\r\n",
        b"*1\r\n$99999999999999999999\r\n",
        b"*2\r\n$-5\r\n",
        b"*1\r\n$18446744073709551615\r\n",
    ] {
        for limits in [Limits::default(), unlimited] {
            req.clear();
            hostile(buf, &limits, &mut req);
        }
    }
    assert_eq!(
        parse_one_with(b"*1\r\n$9223372036854775807\r\nabc", &unlimited),
        Ok((Vec::new(), Status::Incomplete { needed: 9_223_372_036_854_775_807 - 3 + 2 }))
    );
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = Rng::new(2);
    let small = Limits { max_bulk_len: 100, max_args: 10, max_inline_len: 16, max_depth: 4 };
    let mut req = Request::new();
    for i in 0..300_000 {
        let len = rng.below(64);
        let mut buf = rng.bytes(len);
        if rng.one_in(2) {
            buf.insert(0, b'*');
        }
        let limits = if i % 2 == 0 { Limits::default() } else { small };
        hostile(&buf, &limits, &mut req);
        // The outcome does not depend on how the bytes arrive.
        let split = rng.below(buf.len() + 1);
        assert_eq!(parse_split(&buf, split, &limits, true), parse_whole(&buf, &limits), "{buf:?} split at {split}");
        // Every prefix, resuming from the previous one, as bytes arrive.
        if i % 50 == 0 {
            req.clear();
            for end in 0..=buf.len() {
                match parse_request(&buf[..end], &limits, &mut req) {
                    Ok(Status::Incomplete { .. }) => {}
                    Ok(Status::Complete { consumed }) => {
                        assert!(consumed <= end);
                        req.clear();
                        break;
                    }
                    Err(_) => break,
                }
            }
            req.clear();
        }
    }
}

#[test]
fn mutations_never_panic() {
    let mut rng = Rng::new(3);
    let limits = Limits::default();
    let valid = mixed_pipeline();
    let mut req = Request::new();
    for _ in 0..100_000 {
        let mut buf = valid.clone();
        for _ in 0..1 + rng.below(3) {
            let at = rng.below(buf.len());
            match rng.below(3) {
                0 => buf[at] = *rng.pick(b"*$\r\n0123456789-\"' \\x\0"),
                1 => {
                    buf.remove(at);
                }
                _ => buf.insert(at, rng.byte()),
            }
        }
        hostile(&buf, &limits, &mut req);
        req.clear();
        // Resuming from a cut gives the same as parsing the whole.
        let split = rng.below(buf.len() + 1);
        assert_eq!(parse_split(&buf, split, &limits, true), parse_whole(&buf, &limits));
    }
}

#[test]
fn pipeline_reuses_the_request_capacity() {
    let limits = Limits::default();
    let value = [b'v'; 304];
    let mut buf = Vec::new();
    for _ in 0..64 {
        resp::command(&mut buf, &[b"LPUSH", b"mylist", &value]);
    }
    let mut req = Request::new();
    let mut capacity = None;
    for round in 0..10 {
        let mut pos = 0;
        let mut count = 0;
        while let Status::Complete { consumed } = parse_request(&buf[pos..], &limits, &mut req).unwrap() {
            let cmd = &buf[pos..];
            assert_eq!(req.len(), 3);
            assert_eq!(req.arg(cmd, 0), b"LPUSH");
            assert_eq!(req.arg(cmd, 1), b"mylist");
            assert_eq!(req.arg(cmd, 2), &value[..]);
            pos += consumed;
            count += 1;
        }
        assert_eq!((count, pos), (64, buf.len()), "round {round}");
        match capacity {
            None => capacity = Some(req.capacity()),
            Some(c) => assert_eq!(req.capacity(), c, "round {round}"),
        }
    }
    assert!(capacity.unwrap() >= 3);
}
