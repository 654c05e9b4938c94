//! Connection and server commands: PING, AUTH, HELLO, SELECT, CLIENT,
//! CONFIG GET, COMMAND (INFO: [`super::info`]).

use super::context::{Ctx, parse_int};
use super::table;
use crate::reply;
use crate::slice::Slicer;
use resp::{Proto, Request};

/// The Redis version announced (HELLO, INFO): the 7.0 command set's shapes.
pub(crate) const REDIS_VERSION: &str = "7.0.0";

/// PING [message].
pub(crate) fn ping(_ctx: &mut Ctx<'_>, buf: &[u8], req: &Request, out: &mut Vec<u8>) {
    match req.len() {
        1 => out.extend_from_slice(b"+PONG\r\n"),
        2 => resp::bulk(out, req.arg(buf, 1)),
        _ => reply::wrong_args(out, "ping"),
    }
}

/// Compares a password in constant time (for the secret's content: the time
/// depends only on the length of what the client sent).
pub(crate) fn password_matches(secret: &[u8], given: &[u8]) -> bool {
    let mut diff = u8::from(secret.len() != given.len());
    for (i, &g) in given.iter().enumerate() {
        let s = if secret.is_empty() { 0 } else { secret[i % secret.len()] };
        diff |= std::hint::black_box(s ^ g);
    }
    std::hint::black_box(diff) == 0
}

/// Checks `user`/`pass` against --requirepass; Some(reply error) if wrong.
fn check_auth(ctx: &Ctx<'_>, user: Option<&[u8]>, pass: &[u8]) -> bool {
    let Some(secret) = ctx.shared.password.as_deref() else { return false };
    let user_ok = user.is_none_or(|u| u == b"default");
    password_matches(secret, pass) & user_ok
}

const WRONGPASS: &[u8] = b"WRONGPASS invalid username-password pair or user is disabled.";

/// AUTH [username] password.
pub(crate) fn auth(ctx: &mut Ctx<'_>, buf: &[u8], req: &Request, out: &mut Vec<u8>) {
    if req.len() > 3 {
        return reply::syntax_error(out);
    }
    if ctx.shared.password.is_none() {
        return resp::error(
            out,
            b"ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
        );
    }
    let (user, pass) = if req.len() == 3 { (Some(req.arg(buf, 1)), req.arg(buf, 2)) } else { (None, req.arg(buf, 1)) };
    if check_auth(ctx, user, pass) {
        ctx.client.authed = true;
        resp::simple(out, b"OK");
    } else {
        wrong_password(ctx, out);
    }
}

/// Counts a wrong password (the connection delays its answer) and answers.
fn wrong_password(ctx: &mut Ctx<'_>, out: &mut Vec<u8>) {
    ctx.client.auth_failures += 1;
    ctx.shared.auth_failed(&ctx.client.peer);
    resp::error(out, WRONGPASS);
}

/// HELLO [protover [AUTH username password] [SETNAME clientname]].
pub(crate) fn hello(ctx: &mut Ctx<'_>, buf: &[u8], req: &Request, out: &mut Vec<u8>) {
    let mut proto = ctx.client.proto;
    if let Some(v) = req.get(buf, 1) {
        match parse_int(v) {
            Some(2) => proto = Proto::Resp2,
            Some(3) => proto = Proto::Resp3,
            Some(_) => return resp::error(out, b"NOPROTO unsupported protocol version"),
            None => return resp::error(out, b"ERR Protocol version is not an integer or out of range"),
        }
    }
    let mut auth: Option<(&[u8], &[u8])> = None;
    let mut name: Option<&[u8]> = None;
    let mut i = 2;
    while i < req.len() {
        let opt = req.arg(buf, i);
        let more = req.len() - i - 1;
        if opt.eq_ignore_ascii_case(b"AUTH") && more >= 2 {
            auth = Some((req.arg(buf, i + 1), req.arg(buf, i + 2)));
            i += 3;
        } else if opt.eq_ignore_ascii_case(b"SETNAME") && more >= 1 {
            name = Some(req.arg(buf, i + 1));
            i += 2;
        } else {
            return reply::error_quoting(out, b"ERR Syntax error in HELLO option ", opt, b"");
        }
    }
    if let Some((user, pass)) = auth {
        if !check_auth(ctx, Some(user), pass) {
            return wrong_password(ctx, out);
        }
        ctx.client.authed = true;
    }
    if !ctx.client.authed {
        return resp::error(
            out,
            b"NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time",
        );
    }
    if let Some(n) = name {
        if !valid_name(n) {
            return resp::error(out, b"ERR Client names cannot contain spaces, newlines or special characters.");
        }
        if n.len() > MAX_CLIENT_VALUE {
            return too_long(out, "a client name", n);
        }
        ctx.client.name = (!n.is_empty()).then(|| n.to_vec());
    }
    ctx.client.proto = proto;
    resp::map_header(out, proto, 7);
    resp::bulk(out, b"server");
    resp::bulk(out, b"redis");
    resp::bulk(out, b"version");
    resp::bulk(out, REDIS_VERSION.as_bytes());
    resp::bulk(out, b"proto");
    resp::integer(out, if proto == Proto::Resp3 { 3 } else { 2 });
    resp::bulk(out, b"id");
    resp::integer(out, ctx.client.id as i64);
    resp::bulk(out, b"mode");
    resp::bulk(out, b"standalone");
    resp::bulk(out, b"role");
    resp::bulk(out, b"master");
    resp::bulk(out, b"modules");
    resp::array_header(out, 0);
}

/// A client name: printable ASCII without blanks (Redis's rule).
fn valid_name(n: &[u8]) -> bool {
    n.iter().all(|&c| (b'!'..=b'~').contains(&c))
}

/// The longest client name (`CLIENT SETNAME`, `HELLO ... SETNAME`) and
/// `CLIENT SETINFO` value kept, in bytes: a connection keeps them while it
/// lasts, so that 10 connections naming themselves with 16 MB each would
/// hold 160 MB.
const MAX_CLIENT_VALUE: usize = 512;

/// The refusal of a name or value longer than [`MAX_CLIENT_VALUE`].
fn too_long(out: &mut Vec<u8>, what: &str, value: &[u8]) {
    let text = format!("ERR {what} is {} bytes, at most {MAX_CLIENT_VALUE} are allowed", value.len());
    resp::error(out, text.as_bytes());
}

/// SELECT 0: the only database.
pub(crate) fn select(buf: &[u8], req: &Request, out: &mut Vec<u8>) {
    match parse_int(req.arg(buf, 1)) {
        Some(0) => resp::simple(out, b"OK"),
        Some(_) => resp::error(out, b"ERR DB index is out of range"),
        None => reply::not_an_integer(out),
    }
}

/// CLIENT ID | SETNAME | GETNAME | SETINFO | INFO | HELP.
pub(crate) fn client(ctx: &mut Ctx<'_>, buf: &[u8], req: &Request, out: &mut Vec<u8>) {
    let sub = req.arg(buf, 1);
    let n = req.len();
    let is = |s: &[u8]| sub.eq_ignore_ascii_case(s);
    if is(b"ID") {
        if n != 2 {
            return reply::wrong_args(out, "client|id");
        }
        resp::integer(out, ctx.client.id as i64);
    } else if is(b"SETNAME") {
        if n != 3 {
            return reply::wrong_args(out, "client|setname");
        }
        let name = req.arg(buf, 2);
        if !valid_name(name) {
            return resp::error(out, b"ERR Client names cannot contain spaces, newlines or special characters.");
        }
        if name.len() > MAX_CLIENT_VALUE {
            return too_long(out, "a client name", name);
        }
        ctx.client.name = (!name.is_empty()).then(|| name.to_vec());
        resp::simple(out, b"OK");
    } else if is(b"GETNAME") {
        if n != 2 {
            return reply::wrong_args(out, "client|getname");
        }
        match &ctx.client.name {
            Some(name) => resp::bulk(out, name),
            None => resp::null(out, ctx.client.proto),
        }
    } else if is(b"SETINFO") {
        if n != 4 {
            return reply::wrong_args(out, "client|setinfo");
        }
        let (attr, value) = (req.arg(buf, 2), req.arg(buf, 3));
        let slot = if attr.eq_ignore_ascii_case(b"LIB-NAME") {
            0
        } else if attr.eq_ignore_ascii_case(b"LIB-VER") {
            1
        } else {
            return reply::error_quoting(out, b"ERR Unrecognized option ", attr, b"");
        };
        if !value.iter().all(|&c| (b'!'..=b'~').contains(&c)) {
            return resp::error(
                out,
                b"ERR lib-name and lib-ver cannot contain spaces, newlines or special characters.",
            );
        }
        if value.len() > MAX_CLIENT_VALUE {
            return too_long(out, if slot == 0 { "lib-name" } else { "lib-ver" }, value);
        }
        ctx.client.lib[slot] = (!value.is_empty()).then(|| value.to_vec());
        resp::simple(out, b"OK");
    } else if is(b"INFO") {
        if n != 2 {
            return reply::wrong_args(out, "client|info");
        }
        let c = &ctx.client;
        let text = |v: &Option<Vec<u8>>| v.as_deref().map(String::from_utf8_lossy).unwrap_or_default().into_owned();
        let line = format!(
            "id={} addr={} age={} name={} db=0 resp={} lib-name={} lib-ver={}\n",
            c.id,
            c.peer,
            c.since.elapsed().as_secs(),
            text(&c.name),
            if c.proto == Proto::Resp3 { 3 } else { 2 },
            text(&c.lib[0]),
            text(&c.lib[1]),
        );
        resp::verbatim(out, c.proto, b"txt", line.as_bytes());
    } else if is(b"HELP") {
        reply::help(
            out,
            &[
                b"CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                b"ID: the id of this connection",
                b"SETNAME <name>, GETNAME: the connection's name",
                b"SETINFO <LIB-NAME|LIB-VER> <value>: the client library's name and version",
                b"INFO: this connection",
                b"HELP: this text",
            ],
        );
    } else {
        reply::unknown_subcommand(out, sub, "CLIENT");
    }
}

/// Does `pattern` (Redis's glob: `*`, `?`, no classes; any case) match
/// `name`? Linear backtracking on the last star: O(len(pattern) x len(name)).
fn glob(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, n));
                p += 1;
            }
            Some(&c) if c == b'?' || c.eq_ignore_ascii_case(&name[n]) => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    p = sp + 1;
                    n = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p.min(pattern.len())..].iter().all(|&c| c == b'*')
}

/// CONFIG GET parameter [parameter ...]: the settings a client may ask
/// about (redis-benchmark asks for `save` and `appendonly`).
pub(crate) async fn config(ctx: &mut Ctx<'_>, buf: &[u8], req: &Request, out: &mut Vec<u8>) {
    let sub = req.arg(buf, 1);
    if !sub.eq_ignore_ascii_case(b"GET") {
        if sub.eq_ignore_ascii_case(b"SET")
            || sub.eq_ignore_ascii_case(b"RESETSTAT")
            || sub.eq_ignore_ascii_case(b"REWRITE")
        {
            return reply::error_quoting(
                out,
                b"ERR tvmq serve does not support CONFIG ",
                sub,
                b": settings are command-line options",
            );
        }
        return reply::unknown_subcommand(out, sub, "CONFIG");
    }
    if req.len() < 3 {
        return reply::wrong_args(out, "config|get");
    }
    let a = &ctx.shared.args;
    let settings: [(&str, String); 9] = [
        ("save", String::new()),
        ("appendonly", "no".into()),
        ("databases", "1".into()),
        ("maxclients", ctx.shared.maxclients.to_string()),
        ("timeout", a.timeout.to_string()),
        ("port", ctx.shared.tcp_addr.map_or(0, |t| t.port()).to_string()),
        ("bind", a.bind.to_string()),
        ("proto-max-bulk-len", a.max_bulk_len.to_string()),
        ("io-threads", ctx.shared.threads.to_string()),
    ];
    // The patterns matched in slices: a million of them let the worker
    // serve its other connections.
    let mut wanted = [false; 9];
    let mut slicer = Slicer::new();
    for p in req.iter(buf).skip(2) {
        slicer.tick().await;
        for (w, (name, _)) in wanted.iter_mut().zip(&settings) {
            *w = *w || glob(p, name.as_bytes());
        }
        if wanted.iter().all(|w| *w) {
            break;
        }
    }
    let found: Vec<&(&str, String)> = settings.iter().zip(wanted).filter(|(_, w)| *w).map(|(s, _)| s).collect();
    resp::map_header(out, ctx.client.proto, found.len());
    for (name, value) in found {
        resp::bulk(out, name.as_bytes());
        resp::bulk(out, value.as_bytes());
    }
}

/// COMMAND [COUNT | DOCS | INFO | LIST | HELP].
pub(crate) fn command(ctx: &mut Ctx<'_>, buf: &[u8], req: &Request, out: &mut Vec<u8>) {
    let mut args = req.iter(buf).skip(1);
    table::command(ctx.client.proto, &mut args, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords() {
        assert!(password_matches(b"secret", b"secret"));
        for wrong in [&b""[..], b"secre", b"secret!", b"Secret", b"secreu", b"secretsecret"] {
            assert!(!password_matches(b"secret", wrong), "{wrong:?}");
        }
        assert!(!password_matches(b"", b"x"));
    }

    #[test]
    fn globs() {
        assert!(glob(b"save", b"save"));
        assert!(glob(b"SAVE", b"save"));
        assert!(glob(b"*", b"appendonly"));
        assert!(glob(b"append*", b"appendonly"));
        assert!(glob(b"s?ve", b"save"));
        assert!(!glob(b"sav", b"save"));
        assert!(glob(b"*a*e", b"save"));
        assert!(glob(&[b'*'; 10_000], b""));
        let hostile: Vec<u8> = b"*a".repeat(5000);
        assert!(!glob(&hostile, b"appendonly"), "quick, and no match");
    }
}
