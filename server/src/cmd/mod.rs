//! Commands: the name looked up without allocating, the arity and the
//! authentication checked in Redis's order, then one function per command
//! in the file of its family: [`queue`] (pushes, pops, LLEN), [`blocking`]
//! (BLPOP, BRPOP), [`server`] (connection and server commands), with
//! [`table`] describing them all for COMMAND.

pub(crate) mod blocking;
pub(crate) mod queue;
pub(crate) mod server;
pub(crate) mod table;

use crate::keys::{LastKey, WorkerKeys};
use crate::reply;
use crate::state::ServerState;
use resp::{Proto, Request};
use std::time::Instant;

/// One connection's state, as the commands see it.
pub(crate) struct Client {
    /// CLIENT ID.
    pub id: u64,
    /// RESP2, or RESP3 after HELLO 3.
    pub proto: Proto,
    /// AUTH passed (or no password is required).
    pub authed: bool,
    /// CLIENT SETNAME.
    pub name: Option<Vec<u8>>,
    /// CLIENT SETINFO LIB-NAME / LIB-VER.
    pub lib: [Option<Vec<u8>>; 2],
    /// The peer, for CLIENT INFO.
    pub peer: String,
    /// The queue of the last key used.
    pub last: LastKey,
    /// When the connection was accepted.
    pub since: Instant,
}

impl Client {
    /// A new client; `authed` when no password is required.
    pub fn new(id: u64, authed: bool, peer: String) -> Client {
        Client {
            id,
            proto: Proto::Resp2,
            authed,
            name: None,
            lib: [None, None],
            peer,
            last: LastKey::default(),
            since: Instant::now(),
        }
    }
}

/// What a command needs: the server, the worker, the client.
pub(crate) struct Ctx<'a> {
    pub shared: &'a ServerState,
    pub keys: &'a WorkerKeys,
    pub client: &'a mut Client,
}

/// What the connection does after a command.
pub(crate) enum Flow {
    /// Go on with the next command.
    Next,
    /// The reply is written: close the connection (QUIT).
    Close,
    /// Nothing to pop yet: wait (the reply is written when it ends).
    Block(blocking::Blocked),
}

/// The commands served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cmd {
    Ping,
    Echo,
    Rpush,
    Lpush,
    Lpop,
    Rpop,
    Blpop,
    Brpop,
    Llen,
    Info,
    Auth,
    Hello,
    Quit,
    Select,
    Client,
    Config,
    Command,
}

impl Cmd {
    /// The command named `name`, in any case, without allocating.
    #[inline]
    pub fn lookup(name: &[u8]) -> Option<Cmd> {
        let is = |s: &[u8]| name.eq_ignore_ascii_case(s);
        let cmd = match name.len() {
            4 if is(b"PING") => Cmd::Ping,
            4 if is(b"ECHO") => Cmd::Echo,
            4 if is(b"LPOP") => Cmd::Lpop,
            4 if is(b"RPOP") => Cmd::Rpop,
            4 if is(b"LLEN") => Cmd::Llen,
            4 if is(b"INFO") => Cmd::Info,
            4 if is(b"AUTH") => Cmd::Auth,
            4 if is(b"QUIT") => Cmd::Quit,
            5 if is(b"LPUSH") => Cmd::Lpush,
            5 if is(b"RPUSH") => Cmd::Rpush,
            5 if is(b"BLPOP") => Cmd::Blpop,
            5 if is(b"BRPOP") => Cmd::Brpop,
            5 if is(b"HELLO") => Cmd::Hello,
            6 if is(b"SELECT") => Cmd::Select,
            6 if is(b"CLIENT") => Cmd::Client,
            6 if is(b"CONFIG") => Cmd::Config,
            7 if is(b"COMMAND") => Cmd::Command,
            _ => return None,
        };
        Some(cmd)
    }

    /// Its entry in the command table.
    pub fn spec(self) -> &'static table::Spec {
        &table::COMMANDS[self as usize]
    }

    /// Whether it may run before AUTH (Redis's `no-auth` flag).
    fn no_auth(self) -> bool {
        matches!(self, Cmd::Auth | Cmd::Hello | Cmd::Quit)
    }
}

/// Runs the command in `req` (arguments in `buf`), appending its reply to
/// `out`.
#[inline]
pub(crate) fn execute(ctx: &mut Ctx<'_>, buf: &[u8], req: &Request, out: &mut Vec<u8>) -> Flow {
    let name = req.arg(buf, 0);
    let Some(cmd) = Cmd::lookup(name) else {
        unknown_command(out, buf, req);
        return Flow::Next;
    };
    let spec = cmd.spec();
    let argc = req.len() as i64;
    if (spec.arity > 0 && argc != spec.arity) || (spec.arity < 0 && argc < -spec.arity) {
        reply::wrong_args(out, spec.name);
        return Flow::Next;
    }
    if !ctx.client.authed && !cmd.no_auth() {
        resp::error(out, b"NOAUTH Authentication required.");
        return Flow::Next;
    }
    match cmd {
        Cmd::Rpush | Cmd::Lpush => queue::push(ctx, buf, req, out, spec.name),
        Cmd::Lpop | Cmd::Rpop => queue::pop(ctx, buf, req, out, spec.name),
        Cmd::Llen => queue::llen(ctx, buf, req, out),
        Cmd::Blpop | Cmd::Brpop => return blocking::start(ctx, buf, req, out),
        Cmd::Ping => server::ping(ctx, buf, req, out),
        Cmd::Echo => resp::bulk(out, req.arg(buf, 1)),
        Cmd::Info => server::info(ctx, buf, req, out),
        Cmd::Auth => server::auth(ctx, buf, req, out),
        Cmd::Hello => server::hello(ctx, buf, req, out),
        Cmd::Quit => {
            resp::simple(out, b"OK");
            return Flow::Close;
        }
        Cmd::Select => server::select(buf, req, out),
        Cmd::Client => server::client(ctx, buf, req, out),
        Cmd::Config => server::config(ctx, buf, req, out),
        Cmd::Command => server::command(ctx, buf, req, out),
    }
    Flow::Next
}

/// `-ERR unknown command 'FOO', with args beginning with: 'a' 'b' `, as
/// Redis 7 writes it (names and arguments cut at 128 bytes and at a NUL).
fn unknown_command(out: &mut Vec<u8>, buf: &[u8], req: &Request) {
    let start = out.len();
    out.extend_from_slice(b"-ERR unknown command '");
    out.extend_from_slice(reply::c_str(req.arg(buf, 0), 128));
    out.extend_from_slice(b"', with args beginning with: ");
    let args_start = out.len();
    for arg in req.iter(buf).skip(1) {
        let used = out.len() - args_start;
        if used >= 128 {
            break;
        }
        out.push(b'\'');
        out.extend_from_slice(reply::c_str(arg, 128 - used));
        out.extend_from_slice(b"' ");
    }
    for b in &mut out[start + 1..] {
        if *b == b'\r' || *b == b'\n' {
            *b = b' ';
        }
    }
    out.extend_from_slice(b"\r\n");
}

/// An integer as Redis's `string2ll` reads one (no `+`, no leading zero,
/// no blank, within i64).
pub(crate) fn parse_int(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    let (neg, digits) = match s {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, s),
    };
    match digits {
        [b'0'] if !neg => return Some(0),
        [b'1'..=b'9', ..] => {}
        _ => return None,
    }
    let mut v: i128 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v * 10 + i128::from(d - b'0');
    }
    i64::try_from(if neg { -v } else { v }).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_in_any_case_only_whole() {
        assert_eq!(Cmd::lookup(b"lpush"), Some(Cmd::Lpush));
        assert_eq!(Cmd::lookup(b"LpUsH"), Some(Cmd::Lpush));
        assert_eq!(Cmd::lookup(b"lpushx"), None);
        assert_eq!(Cmd::lookup(b""), None);
        for (i, spec) in table::COMMANDS.iter().enumerate() {
            let cmd = Cmd::lookup(spec.name.as_bytes()).expect(spec.name);
            assert_eq!(cmd as usize, i, "the table is in the order of Cmd");
        }
    }

    #[test]
    fn integers_as_redis_reads_them() {
        assert_eq!(parse_int(b"0"), Some(0));
        assert_eq!(parse_int(b"-5"), Some(-5));
        assert_eq!(parse_int(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_int(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b""[..],
            b"-",
            b"-0",
            b"01",
            b"+1",
            b" 1",
            b"1 ",
            b"9223372036854775808",
            b"1a",
            b"99999999999999999999999",
        ] {
            assert_eq!(parse_int(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn unknown_command_text_is_redis_s() {
        let mut req = Request::new();
        let buf = b"*3\r\n$3\r\nFOO\r\n$1\r\na\r\n$2\r\nb\n\r\n";
        resp::parse_request(buf, &resp::Limits::default(), &mut req).unwrap();
        let mut out = Vec::new();
        unknown_command(&mut out, buf, &req);
        assert_eq!(out, b"-ERR unknown command 'FOO', with args beginning with: 'a' 'b ' \r\n");
        let buf = b"*1\r\n$3\r\nFOO\r\n";
        resp::parse_request(buf, &resp::Limits::default(), &mut req).unwrap();
        out.clear();
        unknown_command(&mut out, buf, &req);
        assert_eq!(out, b"-ERR unknown command 'FOO', with args beginning with: \r\n");
    }
}
