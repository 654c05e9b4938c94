//! Writing replies (server side) and parsing them (client side).

mod common;

use common::Rng;
use resp::{Limits, Proto, ProtocolError, Reply, parse_reply, reply_len};

fn written(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut out = Vec::new();
    f(&mut out);
    out
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn encoders_write_resp() {
    use Proto::{Resp2, Resp3};
    let cases: Vec<(Vec<u8>, &[u8])> = vec![
        (written(|o| resp::simple(o, b"OK")), b"+OK\r\n"),
        (written(|o| resp::simple(o, b"a\r\n+b")), b"+a  +b\r\n"),
        (written(|o| resp::error(o, b"ERR unknown command 'x\r\n+OK'")), b"-ERR unknown command 'x  +OK'\r\n"),
        (written(|o| resp::integer(o, 0)), b":0\r\n"),
        (written(|o| resp::integer(o, -1)), b":-1\r\n"),
        (written(|o| resp::integer(o, i64::MAX)), b":9223372036854775807\r\n"),
        (written(|o| resp::integer(o, i64::MIN)), b":-9223372036854775808\r\n"),
        (written(|o| resp::bulk(o, b"")), b"$0\r\n\r\n"),
        (written(|o| resp::bulk(o, b"a\r\nb")), b"$4\r\na\r\nb\r\n"),
        (written(|o| resp::bulk_header(o, 1234)), b"$1234\r\n"),
        (written(resp::null_bulk), b"$-1\r\n"),
        (written(resp::null_array), b"*-1\r\n"),
        (written(|o| resp::array_header(o, 0)), b"*0\r\n"),
        (written(|o| resp::array_header(o, 64)), b"*64\r\n"),
        (written(|o| resp::null(o, Resp2)), b"$-1\r\n"),
        (written(|o| resp::null(o, Resp3)), b"_\r\n"),
        (written(|o| resp::map_header(o, Resp2, 3)), b"*6\r\n"),
        (written(|o| resp::map_header(o, Resp3, 3)), b"%3\r\n"),
        (written(|o| resp::set_header(o, Resp2, 3)), b"*3\r\n"),
        (written(|o| resp::set_header(o, Resp3, 3)), b"~3\r\n"),
        (written(|o| resp::push_header(o, Resp2, 3)), b"*3\r\n"),
        (written(|o| resp::push_header(o, Resp3, 3)), b">3\r\n"),
        (written(|o| resp::boolean(o, Resp2, true)), b":1\r\n"),
        (written(|o| resp::boolean(o, Resp2, false)), b":0\r\n"),
        (written(|o| resp::boolean(o, Resp3, true)), b"#t\r\n"),
        (written(|o| resp::boolean(o, Resp3, false)), b"#f\r\n"),
        (written(|o| resp::double(o, Resp2, 3.0)), b"$1\r\n3\r\n"),
        (written(|o| resp::double(o, Resp2, 1.5)), b"$3\r\n1.5\r\n"),
        (written(|o| resp::double(o, Resp3, 3.0)), b",3\r\n"),
        (written(|o| resp::double(o, Resp3, -0.1)), b",-0.1\r\n"),
        (written(|o| resp::double(o, Resp3, 1e300)), b",1e300\r\n"),
        (written(|o| resp::double(o, Resp3, 1.5e-7)), b",1.5e-7\r\n"),
        (written(|o| resp::double(o, Resp3, 1e20)), b",1e20\r\n"),
        (written(|o| resp::double(o, Resp3, 1e16)), b",1e16\r\n"),
        (written(|o| resp::double(o, Resp3, 1e15)), b",1000000000000000\r\n"),
        (written(|o| resp::double(o, Resp3, 1e-4)), b",0.0001\r\n"),
        (written(|o| resp::double(o, Resp3, 9e-5)), b",9e-5\r\n"),
        (written(|o| resp::double(o, Resp3, -0.0)), b",-0\r\n"),
        (written(|o| resp::double(o, Resp3, 123456.789)), b",123456.789\r\n"),
        (written(|o| resp::double(o, Resp3, f64::INFINITY)), b",inf\r\n"),
        (written(|o| resp::double(o, Resp3, f64::NEG_INFINITY)), b",-inf\r\n"),
        (written(|o| resp::double(o, Resp3, f64::NAN)), b",nan\r\n"),
        (written(|o| resp::double(o, Resp2, f64::NEG_INFINITY)), b"$4\r\n-inf\r\n"),
        (written(|o| resp::verbatim(o, Resp2, b"txt", b"Some string")), b"$11\r\nSome string\r\n"),
        (written(|o| resp::verbatim(o, Resp3, b"txt", b"Some string")), b"=15\r\ntxt:Some string\r\n"),
        (written(|o| resp::command(o, &[b"GET", b"k"])), b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"),
        (written(|o| resp::command(o, &[])), b"*0\r\n"),
    ];
    for (got, expected) in cases {
        assert_eq!(text(&got), text(expected));
    }
}

#[test]
fn doubles_read_back_exactly() {
    let limits = Limits::default();
    let mut rng = Rng::new(4);
    let specials =
        [0.0, -0.0, 1.0, 0.1, 1e-4, 9.999e-5, 1e16, 9.999_999_999_999_998e15, f64::MAX, f64::MIN_POSITIVE, 5e-324];
    for i in 0..100_000 {
        let v = if i < specials.len() { specials[i] } else { f64::from_bits(rng.next_u64()) };
        for proto in [Proto::Resp2, Proto::Resp3] {
            let buf = written(|o| resp::double(o, proto, v));
            assert!(buf.len() < 40, "{}", text(&buf));
            let got = match parse_reply(&buf, &limits).unwrap().unwrap().0 {
                Reply::Double(d) => d,
                Reply::Bulk(b) => text(b).parse().unwrap(),
                other => panic!("{other:?}"),
            };
            assert!(got.to_bits() == v.to_bits() || (got.is_nan() && v.is_nan()), "{v:e}: {}", text(&buf));
        }
    }
}

#[test]
fn parses_every_type() {
    let limits = Limits::default();
    let cases: Vec<(&[u8], Reply)> = vec![
        (b"+OK\r\n", Reply::Simple(b"OK")),
        (b"+\r\n", Reply::Simple(b"")),
        (b"-ERR unknown\r\n", Reply::Error(b"ERR unknown")),
        (b":1000\r\n", Reply::Integer(1000)),
        (b":-9223372036854775808\r\n", Reply::Integer(i64::MIN)),
        (b":+5\r\n", Reply::Integer(5)),
        (b"$5\r\nhello\r\n", Reply::Bulk(b"hello")),
        (b"$0\r\n\r\n", Reply::Bulk(b"")),
        (b"$2\r\n\r\n\r\n", Reply::Bulk(b"\r\n")),
        (b"$-1\r\n", Reply::Null),
        (b"*-1\r\n", Reply::Null),
        (b"_\r\n", Reply::Null),
        (b"*0\r\n", Reply::Array(vec![])),
        (
            b"*3\r\n:1\r\n$3\r\nfoo\r\n*1\r\n+x\r\n",
            Reply::Array(vec![Reply::Integer(1), Reply::Bulk(b"foo"), Reply::Array(vec![Reply::Simple(b"x")])]),
        ),
        (
            b"%2\r\n+first\r\n:1\r\n+second\r\n:2\r\n",
            Reply::Map(vec![(Reply::Simple(b"first"), Reply::Integer(1)), (Reply::Simple(b"second"), Reply::Integer(2))]),
        ),
        (b"%0\r\n", Reply::Map(vec![])),
        (b"~2\r\n+a\r\n+b\r\n", Reply::Set(vec![Reply::Simple(b"a"), Reply::Simple(b"b")])),
        (b">2\r\n+message\r\n$2\r\nhi\r\n", Reply::Push(vec![Reply::Simple(b"message"), Reply::Bulk(b"hi")])),
        (b",1.23\r\n", Reply::Double(1.23)),
        (b",10\r\n", Reply::Double(10.0)),
        (b",-1.5E3\r\n", Reply::Double(-1500.0)),
        (b",inf\r\n", Reply::Double(f64::INFINITY)),
        (b",-inf\r\n", Reply::Double(f64::NEG_INFINITY)),
        (b"#t\r\n", Reply::Boolean(true)),
        (b"#f\r\n", Reply::Boolean(false)),
        (b"(3492890328409238509324850943850943825024385\r\n", Reply::BigNumber(b"3492890328409238509324850943850943825024385")),
        (b"(-1\r\n", Reply::BigNumber(b"-1")),
        (b"=15\r\ntxt:Some string\r\n", Reply::Verbatim { format: *b"txt", text: b"Some string" }),
        (b"=4\r\nmkd:\r\n", Reply::Verbatim { format: *b"mkd", text: b"" }),
        (b"!21\r\nSYNTAX invalid syntax\r\n", Reply::BlobError(b"SYNTAX invalid syntax")),
        // Attributes are skipped, at the top level and inside aggregates.
        (b"|1\r\n+key-popularity\r\n%2\r\n$1\r\na\r\n,0.1923\r\n$1\r\nb\r\n,0.0012\r\n*2\r\n:2039123\r\n:9543892\r\n", Reply::Array(vec![Reply::Integer(2039123), Reply::Integer(9543892)])),
        (b"*2\r\n|1\r\n+ttl\r\n:3600\r\n:1\r\n|0\r\n:2\r\n", Reply::Array(vec![Reply::Integer(1), Reply::Integer(2)])),
        (b"|1\r\n+a\r\n|1\r\n+b\r\n+c\r\n+d\r\n+value\r\n", Reply::Simple(b"value")),
    ];
    for (buf, expected) in cases {
        let mut padded = buf.to_vec();
        padded.extend_from_slice(b"+next\r\n");
        assert_eq!(parse_reply(&padded, &limits), Ok(Some((expected, buf.len()))), "{}", text(buf));
        assert_eq!(reply_len(&padded, &limits), Ok(Some(buf.len())), "{}", text(buf));
        for end in 0..buf.len() {
            assert_eq!(parse_reply(&buf[..end], &limits), Ok(None), "{} cut at {end}", text(buf));
            assert_eq!(reply_len(&buf[..end], &limits), Ok(None), "{} cut at {end}", text(buf));
        }
    }
    let nan = parse_reply(b",nan\r\n", &limits).unwrap().unwrap().0;
    assert!(matches!(nan, Reply::Double(d) if d.is_nan()));
}

#[test]
fn accessors() {
    assert_eq!(Reply::Integer(7).as_int(), Some(7));
    assert_eq!(Reply::Bulk(b"7").as_int(), None);
    assert_eq!(Reply::Bulk(b"x").as_bytes(), Some(&b"x"[..]));
    assert_eq!(Reply::Simple(b"OK").as_bytes(), Some(&b"OK"[..]));
    assert_eq!(Reply::Verbatim { format: *b"txt", text: b"t" }.as_bytes(), Some(&b"t"[..]));
    assert_eq!(Reply::Error(b"ERR x").as_bytes(), None);
    assert_eq!(Reply::Null.as_bytes(), None);
    assert!(Reply::Error(b"ERR x").is_error());
    assert!(Reply::BlobError(b"ERR x").is_error());
    assert!(!Reply::Simple(b"ERR x").is_error());
    assert_eq!(Reply::Error(b"ERR x").error_text(), Some(&b"ERR x"[..]));
    assert_eq!(Reply::BlobError(b"E\r\n").error_text(), Some(&b"E\r\n"[..]));
    assert_eq!(Reply::Bulk(b"ERR x").error_text(), None);
    assert!(Reply::Null.is_null());
    assert!(!Reply::Bulk(b"").is_null());
    let array = Reply::Array(vec![Reply::Integer(1)]);
    assert_eq!(array.as_array(), Some(&[Reply::Integer(1)][..]));
    assert_eq!(Reply::Set(vec![]).as_array(), Some(&[][..]));
    assert_eq!(Reply::Map(vec![]).as_array(), None);
}

#[test]
fn error_texts() {
    let limits = Limits::default();
    let cases: &[(&[u8], &str)] = &[
        (b"?x\r\n", "Protocol error: unexpected reply type byte '?'"),
        (b"\r\n", "Protocol error: unexpected reply type byte '\\x0d'"),
        (b"+OK\rX", "Protocol error: CR not followed by LF"),
        (b":12a\r\n", "Protocol error: invalid integer"),
        (b":\r\n", "Protocol error: invalid integer"),
        (b":+-1\r\n", "Protocol error: invalid integer"),
        (b":9223372036854775808\r\n", "Protocol error: invalid integer"),
        (b"$-2\r\n", "Protocol error: invalid bulk length"),
        (b"$x\r\n", "Protocol error: invalid bulk length"),
        (b"$536870913\r\n", "Protocol error: invalid bulk length"),
        (b"!-1\r\n", "Protocol error: invalid bulk length"),
        (b"=-1\r\n", "Protocol error: invalid bulk length"),
        (b"$3\r\nfooXY", "Protocol error: bulk data not followed by CRLF"),
        (b"*-2\r\n", "Protocol error: invalid multibulk length"),
        (b"%-1\r\n", "Protocol error: invalid multibulk length"),
        (b"*x\r\n", "Protocol error: invalid multibulk length"),
        (b"%-9223372036854775808\r\n", "Protocol error: invalid multibulk length"),
        (b",\r\n", "Protocol error: invalid double"),
        (b",1.2.3\r\n", "Protocol error: invalid double"),
        (b", 1\r\n", "Protocol error: invalid double"),
        (b"#x\r\n", "Protocol error: invalid boolean"),
        (b"#\r\n", "Protocol error: invalid boolean"),
        (b"_x\r\n", "Protocol error: invalid null"),
        (b"(\r\n", "Protocol error: invalid big number"),
        (b"(12a\r\n", "Protocol error: invalid big number"),
        (b"(-\r\n", "Protocol error: invalid big number"),
        (b"=3\r\ntxt\r\n", "Protocol error: invalid verbatim string"),
        (b"=5\r\ntxt-x\r\n", "Protocol error: invalid verbatim string"),
        (b"$?\r\n", "Protocol error: streamed RESP3 types are not supported"),
        (b"*?\r\n", "Protocol error: streamed RESP3 types are not supported"),
        (b"%?\r\n", "Protocol error: streamed RESP3 types are not supported"),
    ];
    for &(buf, expected) in cases {
        assert_eq!(parse_reply(buf, &limits).map_err(|e| e.to_string()), Err(expected.to_string()), "{}", text(buf));
        assert_eq!(reply_len(buf, &limits).map_err(|e| e.to_string()), Err(expected.to_string()), "{}", text(buf));
    }
    // Lines and nesting.
    let small = Limits { max_inline_len: 8, max_depth: 2, ..Limits::default() };
    assert_eq!(parse_reply(b"+1234567\r\n", &small), Ok(Some((Reply::Simple(b"1234567"), 10))));
    assert_eq!(parse_reply(b"+12345678", &small), Err(ProtocolError::TooBigReplyLine));
    assert_eq!(parse_reply(b"+1234567", &small), Ok(None));
    assert_eq!(ProtocolError::TooBigReplyLine.to_string(), "Protocol error: too big reply line");
    assert_eq!(parse_reply(b"*1\r\n*1\r\n:1\r\n", &small).map(|r| r.map(|r| r.1)), Ok(Some(12)));
    assert_eq!(parse_reply(b"*1\r\n*1\r\n*0\r\n", &small), Err(ProtocolError::TooDeep));
    assert_eq!(reply_len(b"*1\r\n*1\r\n*0\r\n", &small), Err(ProtocolError::TooDeep));
    assert_eq!(ProtocolError::TooDeep.to_string(), "Protocol error: reply nested too deeply");
    let small_bulk = Limits { max_bulk_len: 3, ..Limits::default() };
    assert_eq!(parse_reply(b"$3\r\nabc\r\n", &small_bulk), Ok(Some((Reply::Bulk(b"abc"), 9))));
    assert_eq!(parse_reply(b"$4\r\n", &small_bulk), Err(ProtocolError::InvalidBulkLength));
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let mut buf = b"*1\r\n".repeat(10_000);
    buf.extend_from_slice(b":1\r\n");
    let limits = Limits::default();
    assert_eq!(parse_reply(&buf, &limits), Err(ProtocolError::TooDeep));
    assert_eq!(reply_len(&buf, &limits), Err(ProtocolError::TooDeep));
    assert_eq!(reply_len(&buf[..buf.len() - 4], &limits), Err(ProtocolError::TooDeep));
    let map = b"%1\r\n+k\r\n".repeat(10_000);
    assert_eq!(parse_reply(&map, &limits), Err(ProtocolError::TooDeep));
    let attributes = b"|1\r\n+k\r\n".repeat(10_000);
    assert_eq!(reply_len(&attributes, &limits), Err(ProtocolError::TooDeep));
    // Without a depth limit, measuring does not recurse either.
    let deep = Limits { max_depth: usize::MAX, ..limits };
    let mut buf = b"*1\r\n".repeat(1_000_000);
    buf.extend_from_slice(b":1\r\n");
    assert_eq!(reply_len(&buf, &deep), Ok(Some(buf.len())));
    // Nor does building (1000 levels, within what dropping the tree can take).
    let mut buf = b"*1\r\n".repeat(1000);
    buf.extend_from_slice(b":1\r\n");
    let (mut reply, used) = parse_reply(&buf, &deep).unwrap().unwrap();
    assert_eq!(used, buf.len());
    let mut depth = 0;
    while let Reply::Array(mut items) = reply {
        assert_eq!(items.len(), 1);
        reply = items.pop().unwrap();
        depth += 1;
    }
    assert_eq!((depth, reply), (1000, Reply::Integer(1)));
}

#[test]
fn huge_declared_sizes_allocate_nothing_early() {
    let limits = Limits { max_bulk_len: usize::MAX, ..Limits::default() };
    for buf in [
        &b"*9223372036854775807\r\n"[..],
        b"*9223372036854775807\r\n:1\r\n",
        b"%4611686018427387903\r\n+a\r\n",
        b"~9223372036854775807\r\n",
        b">9223372036854775807\r\n",
        b"|4611686018427387903\r\n",
        b"$9223372036854775807\r\nabc",
        b"*2\r\n$9223372036854775807\r\n",
    ] {
        assert_eq!(parse_reply(buf, &limits), Ok(None), "{}", text(buf));
        assert_eq!(reply_len(buf, &limits), Ok(None), "{}", text(buf));
    }
    assert_eq!(parse_reply(b"*99999999999999999999\r\n", &limits), Err(ProtocolError::InvalidMultibulkLength));
    assert_eq!(parse_reply(b"$99999999999999999999\r\n", &limits), Err(ProtocolError::InvalidBulkLength));
}

/// An owned reply, to generate, write and compare.
#[derive(Clone, Debug)]
enum Val {
    Simple(Vec<u8>),
    Error(Vec<u8>),
    Integer(i64),
    Bulk(Vec<u8>),
    Null,
    Array(Vec<Val>),
    Map(Vec<(Val, Val)>),
    Set(Vec<Val>),
    Push(Vec<Val>),
    Double(f64),
    Boolean(bool),
    BigNumber(Vec<u8>),
    Verbatim([u8; 3], Vec<u8>),
    BlobError(Vec<u8>),
}

impl PartialEq for Val {
    fn eq(&self, other: &Self) -> bool {
        use Val::*;
        match (self, other) {
            (Double(a), Double(b)) => a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
            (Simple(a), Simple(b)) | (Error(a), Error(b)) | (Bulk(a), Bulk(b)) => a == b,
            (BigNumber(a), BigNumber(b)) | (BlobError(a), BlobError(b)) => a == b,
            (Integer(a), Integer(b)) => a == b,
            (Boolean(a), Boolean(b)) => a == b,
            (Null, Null) => true,
            (Array(a), Array(b)) | (Set(a), Set(b)) | (Push(a), Push(b)) => a == b,
            (Map(a), Map(b)) => a == b,
            (Verbatim(f, a), Verbatim(g, b)) => f == g && a == b,
            _ => false,
        }
    }
}

fn owned(r: &Reply) -> Val {
    let list = |v: &[Reply]| v.iter().map(owned).collect();
    match r {
        Reply::Simple(s) => Val::Simple(s.to_vec()),
        Reply::Error(s) => Val::Error(s.to_vec()),
        Reply::Integer(i) => Val::Integer(*i),
        Reply::Bulk(s) => Val::Bulk(s.to_vec()),
        Reply::Null => Val::Null,
        Reply::Array(v) => Val::Array(list(v)),
        Reply::Map(v) => Val::Map(v.iter().map(|(k, v)| (owned(k), owned(v))).collect()),
        Reply::Set(v) => Val::Set(list(v)),
        Reply::Push(v) => Val::Push(list(v)),
        Reply::Double(d) => Val::Double(*d),
        Reply::Boolean(b) => Val::Boolean(*b),
        Reply::BigNumber(s) => Val::BigNumber(s.to_vec()),
        Reply::Verbatim { format, text } => Val::Verbatim(*format, text.to_vec()),
        Reply::BlobError(s) => Val::BlobError(s.to_vec()),
    }
}

/// A random reply of the first `kinds` kinds of the `match` below: 6 for the RESP2 types, 11
/// for those a RESP2 server writes too (with their RESP2 form), 14 for all.
fn random_val(rng: &mut Rng, depth: usize, kinds: usize) -> Val {
    // Lines are short (the limit is 64 KiB) and cannot hold CR or LF.
    let line = |rng: &mut Rng| -> Vec<u8> {
        let len = rng.below(100);
        rng.bytes(len).into_iter().filter(|&b| b != b'\r' && b != b'\n').collect()
    };
    let n = rng.below(if depth > 3 { 1 } else { 6 });
    let list = |rng: &mut Rng| (0..n).map(|_| random_val(rng, depth + 1, kinds)).collect();
    let kind = if depth > 4 { rng.below(5) } else { rng.below(kinds) };
    match kind {
        0 => Val::Simple(line(rng)),
        1 => Val::Error(line(rng)),
        2 => Val::Integer(rng.next_u64() as i64 >> rng.below(64)),
        3 => Val::Bulk(rng.string()),
        4 => Val::Null,
        5 => Val::Array(list(rng)),
        6 => Val::Map((0..n).map(|_| (random_val(rng, depth + 1, kinds), random_val(rng, depth + 1, kinds))).collect()),
        7 => Val::Set(list(rng)),
        8 => Val::Push(list(rng)),
        9 => Val::Double(if rng.one_in(2) { f64::from_bits(rng.next_u64()) } else { rng.below(1000) as f64 / 8.0 }),
        10 => Val::Boolean(rng.one_in(2)),
        11 => Val::BigNumber(format!("{}{}", if rng.one_in(2) { "-" } else { "" }, rng.next_u64()).into_bytes()),
        12 => Val::Verbatim(*rng.pick(&[*b"txt", *b"mkd"]), rng.string()),
        _ => Val::BlobError(rng.string()),
    }
}

/// Writes `v` with the public encoders; RESP3 types in RESP2 as Redis writes them.
fn write(out: &mut Vec<u8>, v: &Val, proto: Proto) {
    match v {
        Val::Simple(s) => resp::simple(out, s),
        Val::Error(s) => resp::error(out, s),
        Val::Integer(i) => resp::integer(out, *i),
        Val::Bulk(s) => resp::bulk(out, s),
        Val::Null => resp::null(out, proto),
        Val::Array(items) => {
            resp::array_header(out, items.len());
            items.iter().for_each(|i| write(out, i, proto));
        }
        Val::Map(pairs) => {
            resp::map_header(out, proto, pairs.len());
            for (k, v) in pairs {
                write(out, k, proto);
                write(out, v, proto);
            }
        }
        Val::Set(items) => {
            resp::set_header(out, proto, items.len());
            items.iter().for_each(|i| write(out, i, proto));
        }
        Val::Push(items) => {
            resp::push_header(out, proto, items.len());
            items.iter().for_each(|i| write(out, i, proto));
        }
        Val::Double(d) => resp::double(out, proto, *d),
        Val::Boolean(b) => resp::boolean(out, proto, *b),
        Val::BigNumber(s) => {
            out.push(b'(');
            out.extend_from_slice(s);
            resp::crlf(out);
        }
        Val::Verbatim(format, text) => resp::verbatim(out, proto, format, text),
        Val::BlobError(s) => {
            out.push(b'!');
            out.extend_from_slice(s.len().to_string().as_bytes());
            resp::crlf(out);
            out.extend_from_slice(s);
            resp::crlf(out);
        }
    }
}

/// What a RESP2 client reads for `v` written in RESP2.
fn as_resp2(v: &Val) -> Val {
    match v {
        Val::Array(items) | Val::Set(items) | Val::Push(items) => Val::Array(items.iter().map(as_resp2).collect()),
        Val::Map(pairs) => Val::Array(pairs.iter().flat_map(|(k, v)| [as_resp2(k), as_resp2(v)]).collect()),
        Val::Boolean(b) => Val::Integer(i64::from(*b)),
        Val::Verbatim(_, text) => Val::Bulk(text.clone()),
        Val::Double(d) => Val::Double(*d), // compared after reading the bulk as a number
        other => other.clone(),
    }
}

/// `r` read as RESP2, with bulk strings read as doubles where `expected` holds a double.
fn resp2_view(expected: &Val, r: &Reply) -> Val {
    match (expected, r) {
        (Val::Double(_), Reply::Bulk(b)) => Val::Double(text(b).parse().unwrap_or(f64::NAN)),
        (Val::Array(e), Reply::Array(items)) if e.len() == items.len() => {
            Val::Array(e.iter().zip(items).map(|(e, r)| resp2_view(e, r)).collect())
        }
        _ => owned(r),
    }
}

#[test]
fn round_trip_random_replies() {
    let limits = Limits::default();
    let mut rng = Rng::new(5);
    for round in 0..3000 {
        let resp3 = round % 2 == 0;
        let proto = if resp3 { Proto::Resp3 } else { Proto::Resp2 };
        let kinds = if resp3 { 14 } else { *rng.pick(&[6, 11]) };
        let vals: Vec<Val> = (0..1 + rng.below(5)).map(|_| random_val(&mut rng, 0, kinds)).collect();
        let mut buf = Vec::new();
        let mut ends = Vec::new();
        for v in &vals {
            write(&mut buf, v, proto);
            ends.push(buf.len());
        }
        let mut pos = 0;
        for (v, &end) in vals.iter().zip(&ends) {
            let (reply, used) = parse_reply(&buf[pos..], &limits).unwrap().unwrap();
            assert_eq!(used, end - pos);
            assert_eq!(reply_len(&buf[pos..], &limits), Ok(Some(used)));
            if resp3 {
                assert_eq!(owned(&reply), *v);
            } else {
                let expected = as_resp2(v);
                assert_eq!(resp2_view(&expected, &reply), expected);
            }
            pos = end;
        }
        assert_eq!(parse_reply(&buf[pos..], &limits), Ok(None));
    }
}

/// Every reply of `buf` in order, then how it ended (incomplete or the error), parsed the way
/// a client does, consuming as it goes and reading more after `split`.
fn read_replies(buf: &[u8], split: usize, limits: &Limits) -> (Vec<(Val, usize)>, Result<(), ProtocolError>) {
    let mut input = buf[..split].to_vec();
    let mut replies = Vec::new();
    for rest in [&buf[split..], &[]] {
        loop {
            let measured = reply_len(&input, limits);
            match parse_reply(&input, limits) {
                Ok(Some((reply, used))) => {
                    assert_eq!(measured, Ok(Some(used)));
                    assert!(used > 0 && used <= input.len());
                    replies.push((owned(&reply), used));
                    input.drain(..used);
                }
                Ok(None) => {
                    assert_eq!(measured, Ok(None));
                    break;
                }
                Err(e) => {
                    assert_eq!(measured, Err(e));
                    return (replies, Err(e));
                }
            }
        }
        input.extend_from_slice(rest);
    }
    (replies, Ok(()))
}

#[test]
fn split_at_every_byte() {
    let limits = Limits::default();
    let mut rng = Rng::new(6);
    let mut buf = Vec::new();
    resp::simple(&mut buf, b"OK");
    resp::integer(&mut buf, -42);
    resp::null_bulk(&mut buf);
    resp::bulk(&mut buf, b"a\r\nb");
    buf.extend_from_slice(b"|1\r\n+ttl\r\n:3600\r\n:10\r\n");
    resp::map_header(&mut buf, Proto::Resp3, 2);
    resp::simple(&mut buf, b"k");
    resp::double(&mut buf, Proto::Resp3, 0.5);
    resp::bulk(&mut buf, b"");
    resp::set_header(&mut buf, Proto::Resp3, 1);
    resp::verbatim(&mut buf, Proto::Resp3, b"txt", b"hi");
    resp::array_header(&mut buf, 0);
    for _ in 0..3 {
        write(&mut buf, &random_val(&mut rng, 2, 14), Proto::Resp3);
    }
    let whole = read_replies(&buf, buf.len(), &limits);
    assert_eq!(whole.1, Ok(()));
    assert_eq!(whole.0.iter().map(|r| r.1).sum::<usize>(), buf.len());
    assert_eq!(whole.0[4].0, Val::Integer(10));
    for split in 0..=buf.len() {
        assert_eq!(read_replies(&buf, split, &limits), whole, "split at {split}");
    }
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = Rng::new(7);
    let small = Limits { max_bulk_len: 100, max_args: 10, max_inline_len: 16, max_depth: 4 };
    for i in 0..300_000 {
        let len = rng.below(64);
        let buf = rng.bytes(len);
        let limits = if i % 2 == 0 { Limits::default() } else { small };
        let split = rng.below(buf.len() + 1);
        // read_replies checks that both functions agree and stay within the buffer.
        let _ = read_replies(&buf, split, &limits);
    }
}

#[test]
fn mutations_never_panic() {
    let limits = Limits::default();
    let mut rng = Rng::new(8);
    for _ in 0..20_000 {
        let mut buf = Vec::new();
        write(&mut buf, &random_val(&mut rng, 1, 14), Proto::Resp3);
        if buf.len() > 4096 {
            continue;
        }
        for _ in 0..1 + rng.below(3) {
            let at = rng.below(buf.len());
            match rng.below(3) {
                0 => buf[at] = *rng.pick(b"*$%~>|_,#(=!+-:\r\n0123456789?"),
                1 => {
                    buf.remove(at);
                }
                _ => buf.insert(at, rng.byte()),
            }
        }
        let split = rng.below(buf.len() + 1);
        let whole = read_replies(&buf, buf.len(), &limits);
        assert_eq!(read_replies(&buf, split, &limits), whole);
    }
}
