//! The commands, through redis-cli and a raw connection: replies, FIFO
//! order, errors in the protocol's words, AUTH, HELLO 3, limits on one key.

mod common;

use common::*;
use std::time::Duration;

#[test]
fn redis_cli_ping_push_pop_llen() {
    let dir = TempDir::new("server", "cli");
    create(&dir, 21, "QUEUE_USER_INFO", 100, 16);
    let server = start(&dir, &[]);
    let addr = server.tcp_addr().unwrap();
    assert_eq!(cli(addr, &["PING"]), "PONG");
    assert_eq!(cli(addr, &["ping", "hello"]), "hello");
    assert_eq!(cli(addr, &["RPUSH", "21", "one", "two"]), "2");
    assert_eq!(cli(addr, &["LPUSH", "QUEUE_USER_INFO", "three"]), "3", "a name is the same queue");
    assert_eq!(cli(addr, &["LLEN", "21"]), "3");
    // FIFO whichever end: LPUSH appended at the tail, LPOP and RPOP take the oldest.
    assert_eq!(cli(addr, &["LPOP", "21"]), "one");
    assert_eq!(cli(addr, &["RPOP", "21"]), "two");
    assert_eq!(cli(addr, &["LPOP", "21", "5"]), "three");
    assert_eq!(cli(addr, &["LPOP", "21"]), "");
    assert_eq!(cli(addr, &["LLEN", "QUEUE_USER_INFO"]), "0");
    // A local consumer sees what redis-cli pushed.
    assert_eq!(cli(addr, &["RPUSH", "21", "for the library"]), "1");
    let q = tvm::Queue::open(dir.path(), 21).unwrap();
    let mut out = [0u8; 16];
    let n = q.pop(&mut out, tvm::Wait::NoWait).unwrap();
    assert_eq!(&out[..n], b"for the library");
    assert_eq!(cli(addr, &["ECHO", "x y"]), "x y");
    assert_eq!(cli(addr, &["SELECT", "0"]), "OK");
    assert_eq!(cli(addr, &["CONFIG", "GET", "save"]), "save");
    assert_eq!(cli(addr, &["CONFIG", "GET", "appendonly"]), "appendonly\nno");
    assert!(cli(addr, &["INFO"]).contains("queue_21:name=QUEUE_USER_INFO,record_size=16,capacity=100"));
    assert_eq!(cli(addr, &["COMMAND", "COUNT"]), "30");
    server.stop();
}

#[test]
fn errors_in_the_protocol_s_words() {
    let dir = TempDir::new("server", "errors");
    create(&dir, 21, "", 2, 8);
    let server = start(&dir, &[]);
    let mut c = Conn::connect(server.tcp_addr().unwrap());
    let err = |c: &mut Conn, args: &[&[u8]]| c.cmd(args).err_text().to_string();
    assert_eq!(err(&mut c, &[b"FOO", b"a", b"b"]), "ERR unknown command 'FOO', with args beginning with: 'a' 'b' ");
    assert_eq!(err(&mut c, &[b"lpush", b"21"]), "ERR wrong number of arguments for 'lpush' command");
    assert_eq!(err(&mut c, &[b"RPUSH", b"mylist", b"x"]), "ERR no such queue 'mylist'");
    assert_eq!(err(&mut c, &[b"RPUSH", b"021", b"x"]), "ERR no such queue '021'", "021 is a name, not 21");
    assert_eq!(
        err(&mut c, &[b"RPUSH", b"21", b"123456789"]),
        "RECD_TOO_LONG value of 9 bytes, queue 21 holds records of at most 8"
    );
    assert_eq!(
        err(&mut c, &[b"RPUSH", b"21", b"ok", b""]),
        "CONDIT_IS_NIL empty value: tvmq records hold at least one byte"
    );
    assert_eq!(c.cmd(&[b"LLEN", b"21"]), V::Int(0), "a refused value pushes none of the others");
    // Three values into a queue of two: the error says how many went in.
    assert_eq!(
        err(&mut c, &[b"RPUSH", b"21", b"a", b"b", b"c"]),
        "DATA_SPC_FULL queue 21 is full: 2 of 3 values pushed, the rest not"
    );
    assert_eq!(err(&mut c, &[b"RPUSH", b"21", b"d"]), "DATA_SPC_FULL queue 21 is full: no space for insert data");
    assert_eq!(err(&mut c, &[b"LPOP", b"21", b"-1"]), "ERR value is out of range, must be positive");
    assert_eq!(err(&mut c, &[b"LPOP", b"21", b"1", b"2"]), "ERR wrong number of arguments for 'lpop' command");
    assert_eq!(c.cmd(&[b"LPOP", b"21", b"0"]), V::Arr(vec![]));
    assert_eq!(c.cmd(&[b"LPOP", b"21", b"10"]), V::Arr(vec![V::bulk(b"a"), V::bulk(b"b")]));
    assert_eq!(c.cmd(&[b"LPOP", b"21", b"10"]), V::Nil, "an empty queue: a null array");
    assert_eq!(err(&mut c, &[b"BLPOP", b"21", b"x"]), "ERR timeout is not a float or out of range");
    assert_eq!(err(&mut c, &[b"BLPOP", b"21", b"-1"]), "ERR timeout is negative");
    assert_eq!(err(&mut c, &[b"SELECT", b"1"]), "ERR DB index is out of range");
    assert_eq!(err(&mut c, &[b"HELLO", b"4"]), "NOPROTO unsupported protocol version");
    assert_eq!(err(&mut c, &[b"CLIENT", b"NOPE"]), "ERR unknown subcommand 'NOPE'. Try CLIENT HELP.");
    assert!(err(&mut c, &[b"AUTH", b"x"]).starts_with("ERR AUTH <password> called without any password configured"));
    // Dropping the queue: pushes and pops say so, and the connection goes on.
    tvm::Queue::drop_queue(dir.path(), 21).unwrap();
    assert_eq!(err(&mut c, &[b"RPUSH", b"21", b"x"]), "ERR no such queue '21'");
    assert_eq!(c.cmd(&[b"PING"]), V::Simple("PONG".into()));
    // Inline commands (redis-benchmark's PING_INLINE).
    c.send_raw(b"PING\r\nECHO \"a b\"\r\n");
    assert_eq!(c.read(), V::Simple("PONG".into()));
    assert_eq!(c.read(), V::bulk(b"a b"));
    server.stop();
}

#[test]
fn a_dropped_then_re_created_queue_is_found_again() {
    let dir = TempDir::new("server", "eidrm");
    create(&dir, 5, "", 10, 8);
    let server = start(&dir, &[]);
    let mut c = Conn::connect(server.tcp_addr().unwrap());
    assert_eq!(c.cmd(&[b"RPUSH", b"5", b"x"]), V::Int(1));
    let q = tvm::Queue::open(dir.path(), 5).unwrap();
    tvm::Queue::drop_queue(dir.path(), 5).unwrap();
    assert!(q.is_dropped());
    // Re-created under the same id: the server finds the new one.
    create(&dir, 5, "", 10, 8);
    assert_eq!(c.cmd(&[b"RPUSH", b"5", b"y"]), V::Int(1));
    assert_eq!(c.cmd(&[b"LPOP", b"5"]), V::bulk(b"y"));
    server.stop();
}

#[test]
fn auth_gates_everything_but_auth_hello_and_quit() {
    let dir = TempDir::new("server", "auth");
    create(&dir, 1, "", 10, 8);
    let server = start(&dir, &["--requirepass", "s3cret-pw"]);
    let addr = server.tcp_addr().unwrap();
    let mut c = Conn::connect(addr);
    assert_eq!(c.cmd(&[b"PING"]).err_text(), "NOAUTH Authentication required.");
    assert_eq!(c.cmd(&[b"RPUSH", b"1", b"x"]).err_text(), "NOAUTH Authentication required.");
    assert_eq!(c.cmd(&[b"LLEN", b"1"]).err_text(), "NOAUTH Authentication required.");
    assert!(
        c.cmd(&[b"HELLO", b"3"])
            .err_text()
            .starts_with("NOAUTH HELLO must be called with the client already authenticated")
    );
    assert_eq!(c.cmd(&[b"AUTH", b"wrong"]).err_text(), "WRONGPASS invalid username-password pair or user is disabled.");
    assert_eq!(c.cmd(&[b"AUTH", b"s3cre"]).err_text(), "WRONGPASS invalid username-password pair or user is disabled.");
    assert_eq!(
        c.cmd(&[b"AUTH", b"bob", b"s3cret-pw"]).err_text(),
        "WRONGPASS invalid username-password pair or user is disabled."
    );
    assert_eq!(c.cmd(&[b"RPUSH", b"1", b"x"]).err_text(), "NOAUTH Authentication required.");
    assert_eq!(c.cmd(&[b"LLEN", b"1"]).err_text(), "NOAUTH Authentication required.", "nothing was pushed");
    assert_eq!(c.cmd(&[b"AUTH", b"s3cret-pw"]), V::Simple("OK".into()));
    assert_eq!(c.cmd(&[b"RPUSH", b"1", b"x"]), V::Int(1));
    // HELLO with AUTH authenticates and switches to RESP3.
    let mut c3 = Conn::connect(addr);
    match c3.cmd(&[b"HELLO", b"3", b"AUTH", b"default", b"s3cret-pw", b"SETNAME", b"me"]) {
        V::Map(kv) => assert!(kv.windows(2).any(|w| w[0] == V::bulk(b"proto") && w[1] == V::Int(3))),
        other => panic!("HELLO 3 answers a map, not {other:?}"),
    }
    assert_eq!(c3.cmd(&[b"LPOP", b"1"]), V::bulk(b"x"));
    c3.send_raw(b"*2\r\n$4\r\nLPOP\r\n$1\r\n1\r\n");
    c3.s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut raw = [0u8; 3];
    std::io::Read::read_exact(&mut c3.s, &mut raw).unwrap();
    assert_eq!(&raw, b"_\r\n", "RESP3's null");
    assert_eq!(c3.cmd(&[b"CLIENT", b"GETNAME"]), V::bulk(b"me"));
    // redis-cli with -a.
    let out = redis_cli(addr, &["-a", "s3cret-pw", "--no-auth-warning", "LLEN", "1"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0");
    let out = redis_cli(addr, &["LLEN", "1"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("NOAUTH"));
    // QUIT works unauthenticated and closes.
    let mut q = Conn::connect(addr);
    assert_eq!(q.cmd(&[b"QUIT"]), V::Simple("OK".into()));
    assert!(q.closed_within(Duration::from_secs(5)));
    server.stop();
}

#[test]
fn auto_create_makes_named_and_numbered_queues() {
    let dir = TempDir::new("server", "auto");
    let server = start(&dir, &["--auto-create", "50x32"]);
    let mut c = Conn::connect(server.tcp_addr().unwrap());
    assert_eq!(c.cmd(&[b"LLEN", b"mylist"]), V::Int(0), "a missing queue is empty");
    assert_eq!(c.cmd(&[b"LPOP", b"mylist"]), V::Nil);
    assert_eq!(c.cmd(&[b"LPUSH", b"mylist", b"a", b"b"]), V::Int(2));
    assert_eq!(c.cmd(&[b"RPUSH", b"77", b"c"]), V::Int(1));
    let id = tvmq_server::auto_id("mylist");
    assert!(id >= tvmq_server::AUTO_ID_BASE);
    let q = tvm::Queue::open(dir.path(), id).unwrap();
    assert_eq!((q.name(), q.capacity(), q.record_size(), q.depth()), ("mylist", 50, 32, 2));
    assert_eq!(tvm::Queue::open(dir.path(), 77).unwrap().depth(), 1);
    // An id taken by another name: the next id.
    create(&dir, tvmq_server::auto_id("other"), "squatter", 5, 5);
    assert_eq!(c.cmd(&[b"RPUSH", b"other", b"x"]), V::Int(1));
    assert_eq!(tvm::Queue::open(dir.path(), tvmq_server::auto_id("other") + 1).unwrap().name(), "other");
    assert!(c.cmd(&[b"RPUSH", &[b'n'; 64][..], b"x"]).err_text().starts_with("ERR invalid key 'nnn"), "64 bytes");
    server.stop();
}

#[test]
fn command_docs_and_info_for_redis_cli_interactive_mode() {
    let dir = TempDir::new("server", "docs");
    let server = start(&dir, &[]);
    let mut c = Conn::connect(server.tcp_addr().unwrap());
    let (V::Arr(docs) | V::Map(docs)) = c.cmd(&[b"COMMAND", b"DOCS"]) else {
        panic!("COMMAND DOCS is a map (flattened in RESP2)")
    };
    assert_eq!(docs.len(), 2 * 30);
    let V::Arr(all) = c.cmd(&[b"COMMAND"]) else { panic!("COMMAND is an array") };
    assert_eq!(all.len(), 30);
    assert!(all.iter().all(|e| matches!(e, V::Arr(f) if f.len() == 10)));
    assert_eq!(c.cmd(&[b"CLIENT", b"SETINFO", b"lib-name", b"redis-rs"]), V::Simple("OK".into()));
    assert!(matches!(c.cmd(&[b"CLIENT", b"ID"]), V::Int(n) if n > 0));
    // redis-cli's interactive start (COMMAND DOCS), driven through a pipe.
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &server.tcp_addr().unwrap().port().to_string(), "--no-raw"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(b"PING\nHELP LPUSH\n")?;
            child.wait_with_output()
        })
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("PONG"));
    server.stop();
}

#[test]
fn del_ltrim_and_repair_behind_the_network_twins() {
    let dir = TempDir::new("server", "admin");
    create(&dir, 21, "", 100, 8);
    create(&dir, 22, "", 100, 8);
    let server = start(&dir, &[]);
    let addr = server.tcp_addr().unwrap();
    assert_eq!(cli(addr, &["RPUSH", "21", "a", "b", "c", "d", "e"]), "5");
    // LTRIM key N -1: the first N go, the oldest remaining comes next.
    assert_eq!(cli(addr, &["LTRIM", "21", "2", "-1"]), "OK");
    assert_eq!(cli(addr, &["LLEN", "21"]), "3");
    assert_eq!(cli(addr, &["LPOP", "21"]), "c");
    // An empty range: every record goes; the queue stays.
    assert_eq!(cli(addr, &["LTRIM", "21", "1", "0"]), "OK");
    assert_eq!(cli(addr, &["LLEN", "21"]), "0");
    assert_eq!(cli(addr, &["RPUSH", "21", "f"]), "1");
    assert!(cli(addr, &["LTRIM", "21", "0", "0"]).starts_with("NOT_SUPPT_OPT"));
    assert_eq!(cli(addr, &["LTRIM", "missing", "1", "0"]), "OK");
    assert_eq!(cli(addr, &["TVMQ.REPAIR", "21"]), "0");
    // DEL drops the queues that exist.
    assert_eq!(cli(addr, &["DEL", "21", "22", "missing"]), "2");
    assert!(!dir.path().join("queue-21.tvmq").exists());
    assert_eq!(cli(addr, &["DEL", "21"]), "0");
    assert!(cli(addr, &["RPUSH", "21", "x"]).starts_with("ERR no such queue"));
    server.stop();
}
