//! TLS (`--tls-port`): redis-cli --tls and redis-py over TLS against the
//! server, client certificates required and refused, a wrong CA, a client
//! that stalls its handshake, and certificate files that cannot be used.
//! The certificates are made fresh for each test by scripts/tls-certs.sh
//! (the openssl command).

mod common;

use common::*;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// A directory of fresh test certificates (see scripts/tls-certs.sh).
struct Certs(TempDir);

impl Certs {
    fn new(tag: &str) -> Certs {
        let dir = TempDir::new("tls-certs", tag);
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/tls-certs.sh");
        let out = Command::new("bash").arg(&script).arg(dir.path()).output().expect("bash runs");
        assert!(
            out.status.success(),
            "scripts/tls-certs.sh failed (the openssl command is needed): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Certs(dir)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }

    fn arg(&self, name: &str) -> String {
        self.file(name).display().to_string()
    }

    /// The server options of `--tls-port 0` with the test server certificate.
    fn server_args(&self) -> Vec<String> {
        vec![
            "--tls-port".into(),
            "0".into(),
            "--tls-cert-file".into(),
            self.arg("server.crt"),
            "--tls-key-file".into(),
            self.arg("server.key"),
        ]
    }
}

fn start_tls(dir: &TempDir, certs: &Certs, extra: &[&str]) -> tvmq_server::Server {
    let mut all = certs.server_args();
    all.extend(extra.iter().map(|s| s.to_string()));
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    start(dir, &all)
}

/// redis-cli --tls against `addr` with the TLS options `tls` and the command `args`.
fn tls_cli(addr: SocketAddr, tls: &[&str], args: &[&str]) -> Output {
    let mut all = vec!["--tls"];
    all.extend_from_slice(tls);
    all.extend_from_slice(args);
    redis_cli(addr, &all)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).trim_end().to_string()
}

/// redis-cli says a failure on stderr (and on stdout for some), with status 1.
fn failed(o: &Output) -> bool {
    let all = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    !o.status.success() || all.contains("rror") || all.contains("failed") || all.contains("closed")
}

#[test]
fn redis_cli_over_tls_pushes_and_pops_what_a_local_consumer_and_producer_see() {
    let certs = Certs::new("cli");
    let dir = TempDir::new("tls", "cli");
    create(&dir, 41, "secure", 100, 64);
    let server = start_tls(&dir, &certs, &[]);
    let tls = server.tls_addr().expect("a TLS address");
    let ca = certs.arg("ca.crt");
    let cacert = ["--cacert", ca.as_str()];
    assert_eq!(stdout(&tls_cli(tls, &cacert, &["PING"])), "PONG");
    assert_eq!(stdout(&tls_cli(tls, &cacert, &["RPUSH", "secure", "one", "two"])), "2");
    // The record went into shared memory: a local consumer pops it.
    let q = tvm::Queue::open(dir.path(), 41).unwrap();
    let mut buf = [0u8; 64];
    let n = q.pop(&mut buf, tvm::Wait::NoWait).unwrap();
    assert_eq!(&buf[..n], b"one");
    q.push(b"local").unwrap();
    assert_eq!(stdout(&tls_cli(tls, &cacert, &["LPOP", "secure", "2"])), "two\nlocal");
    // The plain port still serves, and does not speak TLS.
    let plain = server.tcp_addr().unwrap();
    assert_eq!(cli(plain, &["PING"]), "PONG");
    assert!(failed(&tls_cli(plain, &cacert, &["PING"])), "TLS to the plain port must fail");
    // Plain RESP to the TLS port gets no answer in RESP (the handshake fails).
    assert!(failed(&redis_cli(tls, &["PING"])), "plain RESP to the TLS port must fail");
    server.stop();
}

#[test]
fn a_server_certificate_from_another_ca_fails_the_handshake() {
    let certs = Certs::new("wrong-ca");
    let dir = TempDir::new("tls", "wrong-ca");
    let server = start_tls(&dir, &certs, &[]);
    let tls = server.tls_addr().unwrap();
    let other = certs.arg("other-ca.crt");
    let out = tls_cli(tls, &["--cacert", &other], &["PING"]);
    assert!(failed(&out), "a certificate the client's CA did not sign must be refused: {}", stdout(&out));
    assert!(!stdout(&out).contains("PONG"));
    // The server goes on serving the clients that trust it.
    let ca = certs.arg("ca.crt");
    assert_eq!(stdout(&tls_cli(tls, &["--cacert", &ca], &["PING"])), "PONG");
    server.stop();
}

#[test]
fn with_a_ca_file_the_server_requires_a_client_certificate_it_signed() {
    let certs = Certs::new("mtls");
    let dir = TempDir::new("tls", "mtls");
    let ca_file = certs.arg("ca.crt");
    let server = start_tls(&dir, &certs, &["--tls-ca-cert-file", &ca_file]);
    let tls = server.tls_addr().unwrap();
    let (cert, key) = (certs.arg("client.crt"), certs.arg("client.key"));
    let ok = tls_cli(tls, &["--cacert", &ca_file, "--cert", &cert, "--key", &key], &["PING"]);
    assert_eq!(stdout(&ok), "PONG", "a client certificate the CA signed: {}", String::from_utf8_lossy(&ok.stderr));
    // No certificate: refused (TLS 1.3 tells the client on its first read).
    let none = tls_cli(tls, &["--cacert", &ca_file], &["PING"]);
    assert!(failed(&none) && !stdout(&none).contains("PONG"), "no client certificate must be refused");
    // A certificate of another CA: refused.
    let (scert, skey) = (certs.arg("stranger.crt"), certs.arg("stranger.key"));
    let stranger = tls_cli(tls, &["--cacert", &ca_file, "--cert", &scert, "--key", &skey], &["PING"]);
    assert!(failed(&stranger) && !stdout(&stranger).contains("PONG"), "another CA's client certificate");
    // The plain port is not concerned (it is the operator's to close).
    assert_eq!(cli(server.tcp_addr().unwrap(), &["PING"]), "PONG");
    server.stop();
}

/// redis-py over TLS: a pipeline of 2,000 records of 1,000 bytes (TLS
/// records split and joined anywhere in the server's reads), popped back
/// byte for byte; client certificates; a wrong CA.
#[test]
fn redis_py_over_tls() {
    let python = redis_py();
    let certs = Certs::new("py");
    let dir = TempDir::new("tls", "py");
    create(&dir, 42, "pyq", 5000, 1000);
    let ca_file = certs.arg("ca.crt");
    let server = start_tls(&dir, &certs, &["--tls-ca-cert-file", &ca_file]);
    let port = server.tls_addr().unwrap().port().to_string();
    let script = r#"
import sys, redis, redis.retry, redis.backoff
port, ca, cert, key, other = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
r = redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=ca, ssl_certfile=cert, ssl_keyfile=key)
assert r.ping()
recs = [bytes((i * 7 + j) % 256 for j in range(1000)) for i in range(2000)]
p = r.pipeline(transaction=False)
for rec in recs:
    p.rpush("pyq", rec)
got = p.execute()
assert got[-1] == 2000, got[-1]
assert r.llen("pyq") == 2000
back = []
while len(back) < 2000:
    back += r.lpop("pyq", 500)
assert back == recs, "records differ"
# One attempt each: redis-py would otherwise retry a refused connection with
# backoff (seconds), only to be refused again the same way.
once = redis.retry.Retry(redis.backoff.NoBackoff(), 0)
def refused(**kw):
    try:
        redis.Redis(host="127.0.0.1", port=port, ssl=True, socket_timeout=5, retry=once, **kw).ping()
        return False
    except (redis.exceptions.ConnectionError, OSError):
        return True
assert refused(ssl_ca_certs=ca), "no client certificate must be refused"
assert refused(ssl_ca_certs=other, ssl_certfile=cert, ssl_keyfile=key), "a server certificate another CA signed must be refused"
print("redis-py over TLS: 2000 records of 1000 bytes pipelined and popped back; refusals seen")
"#;
    let out = Command::new(&python)
        .arg("-c")
        .arg(script)
        .arg(&port)
        .arg(&ca_file)
        .arg(certs.arg("client.crt"))
        .arg(certs.arg("client.key"))
        .arg(certs.arg("other-ca.crt"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "redis-py over TLS failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprint!("{}", String::from_utf8_lossy(&out.stdout));
    server.stop();
}

/// Clients that open a TLS connection and send nothing, or half a
/// ClientHello, hold their --maxclients slot for --tls-handshake-timeout
/// at most; meanwhile, and afterwards, others are served.
#[test]
fn a_client_that_stalls_its_handshake_is_dropped_after_the_timeout() {
    let certs = Certs::new("stall");
    let dir = TempDir::new("tls", "stall");
    let opts = ["--tls-handshake-timeout", "1", "--maxclients", "6"];
    // The server's timeout is the option's (1 s), not the default (5 s):
    // asserted here, since how soon it closes is not (see below).
    assert_eq!(args(&opts).tls_handshake(), Duration::from_secs(1));
    let server = start_tls(&dir, &certs, &opts);
    let tls = server.tls_addr().unwrap();
    let ca = certs.arg("ca.crt");
    let mut stalled: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(tls).unwrap()).collect();
    // Half a ClientHello: a record header announcing 512 bytes, then 5 of them.
    stalled[0].write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03]).unwrap();
    let t0 = Instant::now();
    // (The waits here, 20 s and 30 s, are hang guards.)
    wait_until(Duration::from_secs(20), "the stalled clients to be counted", || server.connected_clients() == 4);
    // Served meanwhile, on the TLS port and the plain one.
    assert_eq!(stdout(&tls_cli(tls, &["--cacert", &ca], &["PING"])), "PONG");
    assert_eq!(cli(server.tcp_addr().unwrap(), &["PING"]), "PONG");
    // Each stalled connection is closed by the server, not before the
    // timeout (a lower bound: load only makes it more true). That it is
    // closed at all is shown by the close (an end of file or a reset), not
    // by how soon (a loaded machine decides that): a connection left open
    // ends the read at its timeout instead (30 s: a hang guard).
    for (i, s) in stalled.iter_mut().enumerate() {
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut buf = [0u8; 64];
        let r = s.read(&mut buf);
        let timed_out = r.as_ref().is_err_and(|e| matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut));
        assert!(matches!(r, Ok(0)) || (r.is_err() && !timed_out), "stalled client {i}: the server must close: {r:?}");
    }
    assert!(t0.elapsed() >= Duration::from_millis(900), "closed before the timeout: {:?}", t0.elapsed());
    wait_until(Duration::from_secs(20), "the slots to be given back", || server.connected_clients() == 0);
    // The slots are free again: six handshakes at once succeed.
    let many: Vec<_> = (0..6)
        .map(|_| {
            let (addr, ca) = (tls, ca.clone());
            std::thread::spawn(move || stdout(&tls_cli(addr, &["--cacert", &ca], &["PING"])))
        })
        .collect();
    for h in many {
        assert_eq!(h.join().unwrap(), "PONG");
    }
    server.stop();
}

#[test]
fn certificate_and_key_files_that_cannot_be_used_fail_the_start() {
    let certs = Certs::new("bad");
    let dir = TempDir::new("tls", "bad");
    let (crt, key) = (certs.arg("server.crt"), certs.arg("server.key"));
    let missing = dir.path().join("nothing.pem").display().to_string();
    let other_key = certs.arg("client.key");
    let cases: [(&str, [&str; 2], &str); 4] = [
        ("a missing certificate file", [&missing, &key], "--tls-cert-file"),
        ("a key as the certificate", [&key, &key], "no CERTIFICATE"),
        ("a certificate as the key", [&crt, &crt], "--tls-key-file"),
        ("another certificate's key", [&crt, &other_key], "the key is not the certificate's"),
    ];
    for (what, [c, k], says) in cases {
        let args = args(&["--tls-port", "0", "--tls-cert-file", c, "--tls-key-file", k]);
        match tvmq_server::Server::start(dir.path(), &args) {
            Ok(_) => panic!("{what}: the server started"),
            Err(e) => {
                assert_eq!(e.code(), tvm::error::BOOT_PARM_ERR, "{what}: {e}");
                assert!(e.to_string().contains(says), "{what}: {e}");
                // Said in words, not by rustls's name for it.
                assert!(!e.to_string().contains("KeyMismatch"), "{what}: {e}");
            }
        }
    }
}
