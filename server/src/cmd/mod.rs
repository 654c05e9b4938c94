//! Commands: the name looked up without allocating, the arity and the
//! authentication checked in Redis's order, then one function per command
//! in the file of its family: [`queue`] (pushes, pops, LLEN), [`blocking`]
//! (BLPOP, BRPOP), [`admin`] (DEL, LTRIM, TVMQ.REPAIR), [`lease`]
//! (TVMQ.LEASE, TVMQ.ACK, ...), [`keyspace`] (SCAN, KEYS, DBSIZE, TYPE),
//! [`server`] (connection and server commands), [`info`] (INFO), with [`table`] naming and
//! describing them all (for COMMAND too), `context` what they run with,
//! and [`off_worker`] the work they hand to the server's pool
//! ([`crate::pool`]).
//!
//! Inside, imports go one way (`scripts/check-layers.py` finds a circle):
//! this dispatcher uses every family; `blocking` uses `lease` and `queue`;
//! `lease` uses `queue`; `admin`, `blocking`, `keyspace`, `lease`, `queue`
//! `info` and `server` use `context`, which uses only `lease::owned` (the leases a
//! connection owns); `admin`, `blocking`, `keyspace`, `lease` and `queue`
//! use `off_worker`; `server` uses `table` and `off_worker`; `info` uses `server` (the version); `off_worker` and `table` use no
//! other command module.

pub(crate) mod admin;
pub(crate) mod blocking;
mod context;
pub(crate) mod info;
pub(crate) mod keyspace;
pub(crate) mod lease;
pub(crate) mod off_worker;
pub(crate) mod queue;
pub(crate) mod server;
pub(crate) mod table;

pub(crate) use context::{Client, Ctx, key_error};

use crate::reply;
use resp::Request;
use table::Cmd;

/// What the connection does after a command.
pub(crate) enum Flow {
    /// Go on with the next command.
    Next,
    /// The reply is written: close the connection (QUIT).
    Close,
    /// Nothing to pop yet: wait (the reply is written when it ends).
    Block(blocking::Blocked),
    /// TVMQ.LEASE of an `always` queue: taken off the worker
    /// ([`blocking::lease_durable`]), the connection waiting for it.
    LeaseOffWorker(lease::DurableLease),
    /// TVMQ.RELEASE or TVMQ.REJECT moving a record to a dead-letter queue:
    /// run off the worker ([`lease::dead_letter_off_worker`]), the
    /// connection waiting for it.
    DeadLetter(lease::DeadLetter),
    /// DEL, LTRIM, TVMQ.REPAIR: their work (which may touch the disk or
    /// scan a whole ring) runs off the worker ([`off_worker::run`]), the
    /// connection waiting for its reply.
    OffWorker(off_worker::Job),
    /// TVMQ.LEASES: the lease table's scan runs off the worker
    /// ([`lease::stats_off_worker`]), the connection waiting for it.
    LeaseStats(lease::LeaseScan),
    /// INFO with sections that read queue headers: they are read off the
    /// worker ([`info::info_off_worker`]), the connection waiting.
    Info(info::InfoRest),
    /// The command needs queues `--auto-create` makes: made off the worker
    /// ([`crate::keys::create_off_worker`]), then the command runs again
    /// (its reply is not written yet).
    Create(Vec<Vec<u8>>),
}

/// Runs the command in `req` (arguments in `buf`), appending its reply to
/// `out`. A command whose arguments are checked in a loop as long as they
/// are (BLPOP, BRPOP, DEL, TVMQ.ACK, CONFIG GET, INFO, a long RPUSH or LPUSH) runs it in slices ([`crate::slice`]): the
/// worker serves its other connections meanwhile.
#[inline]
pub(crate) async fn execute(ctx: &mut Ctx<'_>, buf: &[u8], req: &Request, out: &mut Vec<u8>) -> Flow {
    match dispatch(ctx, buf, req, out) {
        Step::Done(flow) => flow,
        Step::Blocking => match blocking::start(ctx, buf, req, out).await {
            Some(b) => Flow::Block(b),
            None => created(ctx),
        },
        Step::Del => admin::del(ctx, buf, req, out).await.map_or(Flow::Next, Flow::OffWorker),
        Step::Push(name) => {
            queue::push_sliced(ctx, buf, req, out, name).await;
            created(ctx)
        }
        Step::Ack => {
            lease::ack(ctx, buf, req, out).await;
            Flow::Next
        }
        Step::Config => {
            server::config(ctx, buf, req, out).await;
            Flow::Next
        }
        Step::Info => info::info(ctx, buf, req, out).await.map_or(Flow::Next, Flow::Info),
    }
}

/// What [`dispatch`] did: the command ran, or it runs in slices.
enum Step {
    Done(Flow),
    /// BLPOP, BRPOP.
    Blocking,
    Del,
    /// RPUSH, LPUSH of more than [`queue::SLICED_PUSH`] values.
    Push(&'static str),
    /// TVMQ.ACK.
    Ack,
    /// CONFIG (GET's patterns).
    Config,
    /// INFO (its sections).
    Info,
}

/// Runs the command unless it is one of those [`execute`] runs in slices.
#[inline]
fn dispatch(ctx: &mut Ctx<'_>, buf: &[u8], req: &Request, out: &mut Vec<u8>) -> Step {
    let name = req.arg(buf, 0);
    let Some(cmd) = Cmd::lookup(name) else {
        unknown_command(out, buf, req);
        return Step::Done(Flow::Next);
    };
    ctx.stats.count_command(cmd as usize);
    let spec = cmd.spec();
    let argc = req.len() as i64;
    if (spec.arity > 0 && argc != spec.arity) || (spec.arity < 0 && argc < -spec.arity) {
        reply::wrong_args(out, spec.name);
        return Step::Done(Flow::Next);
    }
    if !ctx.client.authed && !cmd.no_auth() {
        resp::error(out, b"NOAUTH Authentication required.");
        return Step::Done(Flow::Next);
    }
    match cmd {
        Cmd::Rpush | Cmd::Lpush if req.len() - 2 > queue::SLICED_PUSH => return Step::Push(spec.name),
        Cmd::Rpush | Cmd::Lpush => queue::push(ctx, buf, req, out, spec.name),
        Cmd::Lpop | Cmd::Rpop => queue::pop(ctx, buf, req, out, spec.name),
        Cmd::Llen => queue::llen(ctx, buf, req, out),
        Cmd::Blpop | Cmd::Brpop => return Step::Blocking,
        Cmd::Ping => server::ping(ctx, buf, req, out),
        Cmd::Echo => resp::bulk(out, req.arg(buf, 1)),
        Cmd::Info => return Step::Info,
        Cmd::Auth => server::auth(ctx, buf, req, out),
        Cmd::Hello => server::hello(ctx, buf, req, out),
        Cmd::Quit => {
            resp::simple(out, b"OK");
            return Step::Done(Flow::Close);
        }
        Cmd::Select => server::select(buf, req, out),
        Cmd::Client => server::client(ctx, buf, req, out),
        Cmd::Config => return Step::Config,
        Cmd::Command => server::command(ctx, buf, req, out),
        Cmd::Del => return Step::Del,
        Cmd::Ltrim => return Step::Done(admin::ltrim(ctx, buf, req, out).map_or(Flow::Next, Flow::OffWorker)),
        Cmd::Repair => return Step::Done(admin::repair(ctx, buf, req, out).map_or(Flow::Next, Flow::OffWorker)),
        Cmd::Lease => {
            return Step::Done(match lease::lease(ctx, buf, req, out) {
                lease::LeaseFlow::Done => Flow::Next,
                lease::LeaseFlow::Block(q, timeout, args) => {
                    Flow::Block(blocking::Blocked::lease(ctx.shared, req.arg(buf, 1), q, timeout, args))
                }
                lease::LeaseFlow::OffWorker(d) => Flow::LeaseOffWorker(d),
            });
        }
        Cmd::Ack => return Step::Ack,
        Cmd::Release => {
            if let Some(d) = lease::release(ctx, buf, req, out) {
                return Step::Done(Flow::DeadLetter(d));
            }
        }
        Cmd::Reject => {
            if let Some(d) = lease::reject(ctx, buf, req, out) {
                return Step::Done(Flow::DeadLetter(d));
            }
        }
        Cmd::Extend => lease::extend(ctx, buf, req, out),
        Cmd::Leases => {
            if let Some(scan) = lease::stats(ctx, buf, req, out) {
                return Step::Done(Flow::LeaseStats(scan));
            }
        }
        Cmd::Scan => keyspace::scan(ctx, buf, req, out),
        Cmd::Keys => return Step::Done(keyspace::keys(ctx, buf, req, out).map_or(Flow::Next, Flow::OffWorker)),
        Cmd::Dbsize => keyspace::dbsize(ctx, out),
        Cmd::Type => keyspace::key_type(ctx, buf, req, out),
    }
    Step::Done(created(ctx))
}

/// After a command that wrote its reply, or asked for queues to be made
/// (`Client::create`: then it runs again).
fn created(ctx: &mut Ctx<'_>) -> Flow {
    match ctx.client.create.take() {
        None => Flow::Next,
        Some(keys) => Flow::Create(keys),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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
