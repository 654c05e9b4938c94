//! The command table: the commands served ([`Cmd`]), what COMMAND, COMMAND
//! INFO, COMMAND DOCS and COMMAND COUNT describe, in Redis 7's shapes, and
//! the arity the dispatcher checks.

use resp::Proto;

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
    Del,
    Ltrim,
    Repair,
    Lease,
    Ack,
    Release,
    Reject,
    Extend,
    Leases,
    Scan,
    Keys,
    Dbsize,
    Type,
}

impl Cmd {
    /// The command named `name`, in any case, without allocating.
    #[inline]
    pub(crate) fn lookup(name: &[u8]) -> Option<Cmd> {
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
            3 if is(b"DEL") => Cmd::Del,
            5 if is(b"LTRIM") => Cmd::Ltrim,
            11 if is(b"TVMQ.REPAIR") => Cmd::Repair,
            10 if is(b"TVMQ.LEASE") => Cmd::Lease,
            8 if is(b"TVMQ.ACK") => Cmd::Ack,
            12 if is(b"TVMQ.RELEASE") => Cmd::Release,
            11 if is(b"TVMQ.REJECT") => Cmd::Reject,
            11 if is(b"TVMQ.EXTEND") => Cmd::Extend,
            11 if is(b"TVMQ.LEASES") => Cmd::Leases,
            4 if is(b"SCAN") => Cmd::Scan,
            4 if is(b"KEYS") => Cmd::Keys,
            6 if is(b"DBSIZE") => Cmd::Dbsize,
            4 if is(b"TYPE") => Cmd::Type,
            _ => return None,
        };
        Some(cmd)
    }

    /// Its entry in the command table.
    pub(crate) fn spec(self) -> &'static CommandSpec {
        &COMMANDS[self as usize]
    }

    /// Whether it may run before AUTH (Redis's `no-auth` flag).
    pub(crate) fn no_auth(self) -> bool {
        matches!(self, Cmd::Auth | Cmd::Hello | Cmd::Quit)
    }
}

/// One command as COMMAND describes it.
pub(crate) struct CommandSpec {
    /// Lowercase name.
    pub(crate) name: &'static str,
    /// Redis's arity: `n` exactly `n` arguments (the name included), `-n` at least `n`.
    pub(crate) arity: i64,
    pub(crate) flags: &'static [&'static str],
    pub(crate) first_key: i64,
    pub(crate) last_key: i64,
    pub(crate) step: i64,
    pub(crate) categories: &'static [&'static str],
    pub(crate) summary: &'static str,
    pub(crate) since: &'static str,
    pub(crate) group: &'static str,
    pub(crate) complexity: &'static str,
}

const fn spec(
    name: &'static str,
    arity: i64,
    flags: &'static [&'static str],
    keys: (i64, i64, i64),
    categories: &'static [&'static str],
    summary: &'static str,
    group: &'static str,
) -> CommandSpec {
    CommandSpec {
        name,
        arity,
        flags,
        first_key: keys.0,
        last_key: keys.1,
        step: keys.2,
        categories,
        summary,
        since: "1.0.0",
        group,
        complexity: "O(1)",
    }
}

const NO_KEYS: (i64, i64, i64) = (0, 0, 0);

/// In the order of [`Cmd`].
pub(crate) static COMMANDS: [CommandSpec; 30] = [
    spec(
        "ping",
        -1,
        &["fast"],
        NO_KEYS,
        &["@fast", "@connection"],
        "Returns the server's liveliness response.",
        "connection",
    ),
    spec("echo", 2, &["fast"], NO_KEYS, &["@fast", "@connection"], "Returns the given string.", "connection"),
    spec(
        "rpush",
        -3,
        &["write", "denyoom", "fast"],
        (1, 1, 1),
        &["@write", "@list", "@fast"],
        "Appends one or more records to the tail of a queue (FIFO). Returns the depth after the push.",
        "list",
    ),
    spec(
        "lpush",
        -3,
        &["write", "denyoom", "fast"],
        (1, 1, 1),
        &["@write", "@list", "@fast"],
        "Appends one or more records to the tail of a queue, as RPUSH: tvmq queues are FIFO whichever end is named.",
        "list",
    ),
    spec(
        "lpop",
        -2,
        &["write", "fast"],
        (1, 1, 1),
        &["@write", "@list", "@fast"],
        "Removes and returns the oldest records of a queue.",
        "list",
    ),
    spec(
        "rpop",
        -2,
        &["write", "fast"],
        (1, 1, 1),
        &["@write", "@list", "@fast"],
        "Removes and returns the oldest records of a queue, as LPOP (FIFO).",
        "list",
    ),
    spec(
        "blpop",
        -3,
        &["write", "noscript", "blocking"],
        (1, -2, 1),
        &["@write", "@list", "@slow", "@blocking"],
        "Removes and returns the oldest record of the first non-empty queue, or blocks until one is pushed.",
        "list",
    ),
    spec(
        "brpop",
        -3,
        &["write", "noscript", "blocking"],
        (1, -2, 1),
        &["@write", "@list", "@slow", "@blocking"],
        "As BLPOP (FIFO).",
        "list",
    ),
    spec(
        "llen",
        2,
        &["readonly", "fast"],
        (1, 1, 1),
        &["@read", "@list", "@fast"],
        "Returns the depth of a queue.",
        "list",
    ),
    spec(
        "info",
        -1,
        &["loading", "stale"],
        NO_KEYS,
        &["@slow", "@dangerous"],
        "Returns information and statistics about the server and its queues.",
        "server",
    ),
    spec(
        "auth",
        -2,
        &["noscript", "loading", "stale", "fast", "no_auth"],
        NO_KEYS,
        &["@fast", "@connection"],
        "Authenticates the connection.",
        "connection",
    ),
    spec(
        "hello",
        -1,
        &["noscript", "loading", "stale", "fast", "no_auth"],
        NO_KEYS,
        &["@fast", "@connection"],
        "Handshakes with the server (protocol 2 or 3, AUTH, SETNAME).",
        "connection",
    ),
    spec(
        "quit",
        -1,
        &["noscript", "loading", "stale", "fast", "no_auth"],
        NO_KEYS,
        &["@fast", "@connection"],
        "Closes the connection.",
        "connection",
    ),
    spec(
        "select",
        2,
        &["loading", "stale", "fast"],
        NO_KEYS,
        &["@fast", "@connection"],
        "Selects database 0 (the only one).",
        "connection",
    ),
    spec(
        "client",
        -2,
        &[],
        NO_KEYS,
        &["@slow", "@connection"],
        "CLIENT ID, SETNAME, GETNAME, SETINFO, INFO.",
        "connection",
    ),
    spec("config", -2, &[], NO_KEYS, &["@slow"], "CONFIG GET (read-only settings).", "server"),
    spec(
        "command",
        -1,
        &["loading", "stale"],
        NO_KEYS,
        &["@slow", "@connection"],
        "Returns details about the commands: COMMAND, COMMAND COUNT, COMMAND DOCS, COMMAND INFO, COMMAND LIST.",
        "server",
    ),
    spec(
        "del",
        -2,
        &["write"],
        (1, -1, 1),
        &["@keyspace", "@write", "@slow"],
        "Drops queues (blocked clients get SHM_ERR_EIDRM). Returns how many existed.",
        "generic",
    ),
    spec(
        "ltrim",
        4,
        &["write"],
        (1, 1, 1),
        &["@write", "@list", "@slow"],
        "Removes the oldest records of a queue, by popping them: LTRIM key N -1 keeps all but the first N, LTRIM key 1 0 none.",
        "list",
    ),
    spec(
        "tvmq.repair",
        2,
        &["write"],
        (1, 1, 1),
        &["@write", "@slow"],
        "Recovers what dead processes left in a queue (as tvmq repair). Returns the records recovered.",
        "list",
    ),
    spec(
        "tvmq.lease",
        -2,
        &["write", "blocking"],
        (1, 1, 1),
        &["@write", "@list", "@blocking"],
        "TVMQ.LEASE key [COUNT n] [BLOCK ms] [FOR ms]: leases the oldest records to this connection. Returns [id, deliveries, record] (an array of them with COUNT), or null.",
        "list",
    ),
    spec(
        "tvmq.ack",
        -3,
        &["write", "fast"],
        (1, 1, 1),
        &["@write", "@list", "@fast"],
        "TVMQ.ACK key id [id ...]: acknowledges leases of this connection (done, gone). Returns how many.",
        "list",
    ),
    spec(
        "tvmq.release",
        -3,
        &["write", "fast"],
        (1, 1, 1),
        &["@write", "@list", "@fast"],
        "TVMQ.RELEASE key id [DELAY ms]: puts a leased record back, delivered again after the delay.",
        "list",
    ),
    spec(
        "tvmq.reject",
        3,
        &["write", "fast"],
        (1, 1, 1),
        &["@write", "@list", "@fast"],
        "TVMQ.REJECT key id: moves a leased record to the dead-letter queue (or drops it without one).",
        "list",
    ),
    spec(
        "tvmq.extend",
        4,
        &["write", "fast"],
        (1, 1, 1),
        &["@write", "@list", "@fast"],
        "TVMQ.EXTEND key id ms: the lease runs out ms from now. Returns its new id.",
        "list",
    ),
    spec(
        "tvmq.leases",
        2,
        &["readonly"],
        (1, 1, 1),
        &["@read", "@list", "@slow"],
        "TVMQ.LEASES key: the queue's lease statistics.",
        "list",
    ),
    spec(
        "scan",
        -2,
        &["readonly"],
        NO_KEYS,
        &["@keyspace", "@read", "@slow"],
        "SCAN cursor [MATCH pattern] [COUNT n] [TYPE list]: the next queues (their ids) from the cursor, at most 1000 examined.",
        "generic",
    ),
    spec(
        "keys",
        2,
        &["readonly"],
        NO_KEYS,
        &["@keyspace", "@read", "@slow", "@dangerous"],
        "KEYS pattern: the ids of every queue matching the pattern.",
        "generic",
    ),
    spec(
        "dbsize",
        1,
        &["readonly", "fast"],
        NO_KEYS,
        &["@keyspace", "@read", "@fast"],
        "Returns the number of queues.",
        "server",
    ),
    spec(
        "type",
        2,
        &["readonly", "fast"],
        (1, 1, 1),
        &["@keyspace", "@read", "@fast"],
        "Returns list for a queue, none for a key no queue has.",
        "generic",
    ),
];

// The worker's counters have room for every command.
const _: () = assert!(COMMANDS.len() <= crate::state::COMMAND_KINDS);

/// The table entry named `name` (any case).
pub(crate) fn find(name: &[u8]) -> Option<&'static CommandSpec> {
    Cmd::lookup(name).map(Cmd::spec)
}

/// Appends COMMAND's description of one command (Redis 7: ten elements).
pub(crate) fn write_info(out: &mut Vec<u8>, proto: Proto, s: &CommandSpec) {
    resp::array_header(out, 10);
    resp::bulk(out, s.name.as_bytes());
    resp::integer(out, s.arity);
    resp::set_header(out, proto, s.flags.len());
    for f in s.flags {
        resp::simple(out, f.as_bytes());
    }
    resp::integer(out, s.first_key);
    resp::integer(out, s.last_key);
    resp::integer(out, s.step);
    resp::set_header(out, proto, s.categories.len());
    for c in s.categories {
        resp::simple(out, c.as_bytes());
    }
    resp::array_header(out, 0); // tips
    resp::array_header(out, 0); // key specifications
    resp::array_header(out, 0); // subcommands
}

/// Appends COMMAND DOCS's map of one command (its value only).
pub(crate) fn write_docs(out: &mut Vec<u8>, proto: Proto, s: &CommandSpec) {
    resp::map_header(out, proto, 4);
    for (k, v) in [("summary", s.summary), ("since", s.since), ("group", s.group), ("complexity", s.complexity)] {
        resp::bulk(out, k.as_bytes());
        resp::bulk(out, v.as_bytes());
    }
}

/// The most command names one `COMMAND INFO` or `COMMAND DOCS` takes: each
/// is answered (a name given twice, twice), and a million of them made a
/// reply of 81 MB (INFO) or 152 MB (DOCS), built at once on the worker.
pub(crate) const MAX_COMMAND_NAMES: usize = 1024;

/// COMMAND and its subcommands.
pub(crate) fn command(proto: Proto, args: &mut dyn Iterator<Item = &[u8]>, out: &mut Vec<u8>) {
    let Some(sub) = args.next() else {
        resp::array_header(out, COMMANDS.len());
        COMMANDS.iter().for_each(|s| write_info(out, proto, s));
        return;
    };
    let rest: Vec<&[u8]> = args.take(MAX_COMMAND_NAMES + 1).collect();
    let names = sub.eq_ignore_ascii_case(b"INFO") || sub.eq_ignore_ascii_case(b"DOCS");
    if names && rest.len() > MAX_COMMAND_NAMES {
        return crate::reply::error_fmt(
            out,
            format_args!("ERR COMMAND INFO and COMMAND DOCS take at most {MAX_COMMAND_NAMES} command names"),
        );
    }
    if sub.eq_ignore_ascii_case(b"COUNT") {
        if !rest.is_empty() {
            return crate::reply::wrong_args(out, "command|count");
        }
        resp::integer(out, COMMANDS.len() as i64);
    } else if sub.eq_ignore_ascii_case(b"LIST") {
        resp::array_header(out, COMMANDS.len());
        COMMANDS.iter().for_each(|s| resp::bulk(out, s.name.as_bytes()));
    } else if sub.eq_ignore_ascii_case(b"INFO") {
        if rest.is_empty() {
            resp::array_header(out, COMMANDS.len());
            COMMANDS.iter().for_each(|s| write_info(out, proto, s));
        } else {
            resp::array_header(out, rest.len());
            for name in rest {
                match find(name) {
                    Some(s) => write_info(out, proto, s),
                    None => resp::null_array(out),
                }
            }
        }
    } else if sub.eq_ignore_ascii_case(b"DOCS") {
        let specs: Vec<&CommandSpec> =
            if rest.is_empty() { COMMANDS.iter().collect() } else { rest.iter().filter_map(|n| find(n)).collect() };
        resp::map_header(out, proto, specs.len());
        for s in specs {
            resp::bulk(out, s.name.as_bytes());
            write_docs(out, proto, s);
        }
    } else if sub.eq_ignore_ascii_case(b"HELP") {
        crate::reply::help(
            out,
            &[
                b"COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                b"(no subcommand): every command's details",
                b"COUNT: the number of commands",
                b"DOCS [<command-name> ...]: documentation",
                b"INFO [<command-name> ...]: details",
                b"LIST: the names of the commands",
            ],
        );
    } else {
        crate::reply::unknown_subcommand(out, sub, "COMMAND");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_info_and_docs_take_at_most_1024_names() {
        for sub in [&b"INFO"[..], b"docs"] {
            let mut out = Vec::new();
            let names = vec![&b"ping"[..]; MAX_COMMAND_NAMES];
            command(Proto::Resp2, &mut std::iter::once(sub).chain(names.iter().copied()), &mut out);
            assert!(out.starts_with(if sub == b"INFO" { b"*1024\r\n" } else { b"*2048\r\n" }), "{sub:?}");
            out.clear();
            let names = vec![&b"ping"[..]; MAX_COMMAND_NAMES + 1];
            command(Proto::Resp2, &mut std::iter::once(sub).chain(names.iter().copied()), &mut out);
            assert_eq!(out, b"-ERR COMMAND INFO and COMMAND DOCS take at most 1024 command names\r\n");
        }
    }

    #[test]
    fn names_match_in_any_case_only_whole() {
        assert_eq!(Cmd::lookup(b"lpush"), Some(Cmd::Lpush));
        assert_eq!(Cmd::lookup(b"LpUsH"), Some(Cmd::Lpush));
        assert_eq!(Cmd::lookup(b"lpushx"), None);
        assert_eq!(Cmd::lookup(b""), None);
        for (i, spec) in COMMANDS.iter().enumerate() {
            let cmd = Cmd::lookup(spec.name.as_bytes()).expect(spec.name);
            assert_eq!(cmd as usize, i, "the table is in the order of Cmd");
        }
    }
}
