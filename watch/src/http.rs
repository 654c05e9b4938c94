//! A small HTTP/1.1 server for the metrics port: `GET /metrics` (the
//! exposition), `/` and `/app.js` (the dashboard), `/api/queues` (its
//! JSON). It runs on a thread of its own (a tokio current-thread runtime),
//! never on a RESP worker, and reads the queues on a blocking thread beside
//! it, so that a slow read of many queues delays no other request.
//!
//! Every byte from the network is hostile: a request's head is at most
//! [`MAX_HEAD`] bytes and must arrive within [`HEAD_TIMEOUT`]; a keep-alive
//! connection idle for [`IDLE_TIMEOUT`] is closed, as is one that reads no
//! answer for [`WRITE_TIMEOUT`]; at most `max_connections` are served at
//! once (beyond, one `503` and the close, [`REFUSING`] at a time; more wait
//! unaccepted, so that its descriptors stay within [`most_descriptors`]);
//! bodies are refused. With a
//! password every request must carry it (HTTP Basic, any user, or a Bearer
//! token: what Prometheus's `basic_auth` and `authorization` send). On a
//! loopback address a request must name a loopback host (`Host:`), so that
//! a web page whose name an attacker points at 127.0.0.1 (DNS rebinding)
//! reads nothing.

use crate::api;
use crate::page;
use crate::state::Watch;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tvm::Error;
use tvm::error::SVR_EXCEPTION;

/// The longest request head (request line and headers).
pub const MAX_HEAD: usize = 16 * 1024;
/// The time a request's head may take to arrive once begun.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// The time a connection may wait for its next request.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// The time an answer may take to be read.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// The default bound on connections served at once.
pub const DEFAULT_MAX_CONNECTIONS: usize = 64;
/// Connections beyond `max_connections` held at once while they are told
/// `503`; more wait in the listener's backlog, unaccepted.
pub const REFUSING: usize = 4;
/// Descriptors of the server's runtime (its epoll and its waker), counted
/// as a RESP server counts a runtime thread's.
const RUNTIME: usize = 4;

/// The most descriptors an [`Http`] started with `options` holds at once:
/// its listener, its runtime, the connections it serves and those it is
/// refusing, and the reading of the queues
/// ([`collect::DESCRIPTORS`](crate::collect::DESCRIPTORS)). A process that
/// shares out its open-file limit (`tvmq serve`) keeps this many for it.
pub fn most_descriptors(options: &HttpOptions) -> usize {
    1 + RUNTIME + options.connections() + REFUSING + crate::collect::DESCRIPTORS
}

/// Protected mode's refusal, the RESP port's rule: no listening on an
/// address other than loopback without a password, unless protected mode
/// is off. `give` says how to give one (the options of the command).
pub fn protected_mode_refusal(
    ip: std::net::IpAddr,
    password: bool,
    protected_mode: bool,
    give: &str,
) -> Option<String> {
    if !protected_mode || password || ip.to_canonical().is_loopback() {
        return None;
    }
    Some(format!(
        "protected mode: refusing to serve metrics on {ip} without a password, where anyone who reaches the port \
         could read every queue's name and counters; give one ({give}), or listen on loopback (127.0.0.1), \
         or, on a network you trust, say --protected-mode no"
    ))
}

/// How the server answers.
#[derive(Clone, Debug, Default)]
pub struct HttpOptions {
    /// The password every request must carry (None: none asked).
    pub password: Option<Vec<u8>>,
    /// Connections served at once (0: [`DEFAULT_MAX_CONNECTIONS`]).
    pub max_connections: usize,
}

impl HttpOptions {
    /// Connections served at once.
    fn connections(&self) -> usize {
        if self.max_connections == 0 { DEFAULT_MAX_CONNECTIONS } else { self.max_connections }
    }
}

/// A running metrics server; [`stop`](Self::stop) or dropping it stops it.
pub struct Http {
    addr: SocketAddr,
    stop: Arc<tokio::sync::Notify>,
    thread: Option<JoinHandle<()>>,
}

impl Http {
    /// Serves `watch` on `listener` (bound by the caller, so that a port in
    /// use is the caller's error) from a thread of its own. Errors:
    /// `SVR_EXCEPTION` (the thread or its runtime cannot start, the
    /// listener cannot be used).
    pub fn start(listener: std::net::TcpListener, watch: Arc<Watch>, options: HttpOptions) -> Result<Http, Error> {
        let failed = |what: &str, e: std::io::Error| Error::new(SVR_EXCEPTION, format!("metrics server: {what}: {e}"));
        let addr = listener.local_addr().map_err(|e| failed("no local address", e))?;
        listener.set_nonblocking(true).map_err(|e| failed("cannot use the listener", e))?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .max_blocking_threads(2)
            .thread_name("tvmq-metrics-read")
            .build()
            .map_err(|e| failed("cannot start a runtime", e))?;
        let stop = Arc::new(tokio::sync::Notify::new());
        let stopped = stop.clone();
        let connections = options.connections();
        // A descriptor for each connection accepted, taken before the
        // accept: what is beyond waits in the backlog, so that the
        // descriptors held stay within most_descriptors.
        let descriptors = Arc::new(tokio::sync::Semaphore::new(connections + REFUSING));
        let options = Arc::new(Serving {
            loopback: addr.ip().to_canonical().is_loopback(),
            password: options.password,
            slots: Arc::new(tokio::sync::Semaphore::new(connections)),
        });
        let thread = std::thread::Builder::new()
            .name("tvmq-metrics".into())
            .spawn(move || {
                rt.block_on(async move {
                    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else { return };
                    loop {
                        let descriptor = tokio::select! {
                            _ = stopped.notified() => break,
                            d = descriptors.clone().acquire_owned() => d,
                        };
                        let Ok(descriptor) = descriptor else { break };
                        tokio::select! {
                            _ = stopped.notified() => break,
                            accepted = listener.accept() => {
                                let Ok((stream, _)) = accepted else {
                                    // Out of descriptors, say: let the moment pass.
                                    tokio::time::sleep(Duration::from_millis(50)).await;
                                    continue;
                                };
                                let (watch, options) = (watch.clone(), options.clone());
                                tokio::spawn(async move {
                                    connection(stream, watch, options).await;
                                    drop(descriptor);
                                });
                            }
                        }
                    }
                });
                rt.shutdown_timeout(Duration::from_secs(1));
            })
            .map_err(|e| failed("cannot start its thread", e))?;
        Ok(Http { addr, stop, thread: Some(thread) })
    }

    /// The address it listens on (the real port when 0 asked for any).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, ends the connections, joins the thread.
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        self.stop.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Http {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

/// What every connection shares.
struct Serving {
    loopback: bool,
    password: Option<Vec<u8>>,
    slots: Arc<tokio::sync::Semaphore>,
}

/// A parsed request head.
#[derive(Debug, PartialEq)]
struct Head {
    method: String,
    path: String,
    query: String,
    /// HTTP/1.0, or `Connection: close`.
    close: bool,
    host: Option<String>,
    authorization: Option<String>,
    /// `Content-Length` above 0 or `Transfer-Encoding`: a body this server does not read.
    body: bool,
}

/// Parses a request head (without its blank line). None: not HTTP/1.x.
fn parse_head(head: &[u8]) -> Option<Head> {
    let text = std::str::from_utf8(head).ok()?;
    let mut lines = text.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, target, version) = (first.next()?, first.next()?, first.next()?);
    if first.next().is_some() || !version.starts_with("HTTP/1.") {
        return None;
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut h = Head {
        method: method.to_string(),
        path: path.to_string(),
        query: query.to_string(),
        close: version == "HTTP/1.0",
        host: None,
        authorization: None,
        body: false,
    };
    for line in lines {
        let (name, value) = line.split_once(':')?;
        let value = value.trim();
        match name.to_ascii_lowercase().as_str() {
            "host" => h.host = Some(value.to_string()),
            "authorization" => h.authorization = Some(value.to_string()),
            "connection" => h.close |= value.eq_ignore_ascii_case("close"),
            "content-length" => h.body |= value != "0",
            "transfer-encoding" => h.body = true,
            _ => {}
        }
    }
    Some(h)
}

/// Is `host` (a `Host:` value, its port included) a loopback name?
fn loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(n, port)| if port.bytes().all(|b| b.is_ascii_digit()) { n } else { host })
    };
    name.eq_ignore_ascii_case("localhost")
        || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.to_canonical().is_loopback())
}

/// Decodes standard base64 (padding optional); None on anything else.
fn base64(text: &str) -> Option<Vec<u8>> {
    let mut bits = 0u32;
    let mut n = 0;
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    for c in text.trim_end_matches('=').bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        bits = bits << 6 | u32::from(v);
        n += 6;
        if n >= 8 {
            n -= 8;
            out.push((bits >> n) as u8);
        }
    }
    Some(out)
}

/// Equal, in a time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// Does `authorization` carry `password` (Basic with any user, or Bearer)?
fn authorized(authorization: Option<&str>, password: &[u8]) -> bool {
    let Some(a) = authorization else { return false };
    let (scheme, value) = a.split_once(' ').unwrap_or((a, ""));
    if scheme.eq_ignore_ascii_case("bearer") {
        return same(value.trim().as_bytes(), password);
    }
    if scheme.eq_ignore_ascii_case("basic") {
        if let Some(pair) = base64(value.trim()) {
            let secret = pair.iter().position(|&b| b == b':').map_or(&pair[..0], |i| &pair[i + 1..]);
            return same(secret, password);
        }
    }
    false
}

/// An answer.
struct Answer {
    status: &'static str,
    content_type: &'static str,
    body: Arc<Vec<u8>>,
    extra: &'static str,
}

impl Answer {
    fn text(status: &'static str, body: String) -> Answer {
        Answer { status, content_type: "text/plain; charset=utf-8", body: Arc::new(body.into_bytes()), extra: "" }
    }
}

/// Runs `f` with the watch on the blocking thread (reading queues may take
/// milliseconds); an error or a panic there is a 500.
async fn off_thread<T: Send + 'static>(
    watch: &Arc<Watch>,
    f: impl FnOnce(&Watch) -> Result<T, Error> + Send + 'static,
) -> Result<T, Answer> {
    let w = watch.clone();
    match tokio::task::spawn_blocking(move || f(&w)).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(Answer::text("500 Internal Server Error", format!("{e}\n"))),
        Err(_) => Err(Answer::text("500 Internal Server Error", "the read of the queues failed\n".into())),
    }
}

/// The answer to a request.
async fn answer(h: &Head, watch: &Arc<Watch>, serving: &Serving) -> Answer {
    if serving.loopback && !h.host.as_deref().is_none_or(loopback_host) {
        return Answer::text("403 Forbidden", "this port answers requests for a loopback host only\n".into());
    }
    if let Some(p) = &serving.password {
        if !authorized(h.authorization.as_deref(), p) {
            let mut a = Answer::text("401 Unauthorized", "the password is needed (HTTP Basic, any user)\n".into());
            a.extra = "WWW-Authenticate: Basic realm=\"tvmq\"\r\n";
            return a;
        }
    }
    if h.method != "GET" && h.method != "HEAD" {
        let mut a = Answer::text("405 Method Not Allowed", "GET or HEAD only\n".into());
        a.extra = "Allow: GET, HEAD\r\n";
        return a;
    }
    match h.path.as_str() {
        "/metrics" => match off_thread(watch, |w| w.exposition()).await {
            Ok(body) => Answer { status: "200 OK", content_type: crate::expose::CONTENT_TYPE, body, extra: "" },
            Err(a) => a,
        },
        "/api/queues" => {
            let query = match api::Query::parse(&h.query) {
                Ok(q) => q,
                Err(e) => return Answer::text("400 Bad Request", format!("{e}\n")),
            };
            let made = off_thread(watch, move |w| {
                let latest = w.latest()?;
                Ok(api::queues(&latest, &query, &w.dir(), w.source()).to_string())
            })
            .await;
            match made {
                Ok(json) => Answer {
                    status: "200 OK",
                    content_type: "application/json",
                    body: Arc::new(json.into_bytes()),
                    extra: "",
                },
                Err(a) => a,
            }
        }
        "/" | "/index.html" => Answer {
            status: "200 OK",
            content_type: "text/html; charset=utf-8",
            body: Arc::new(page::INDEX.as_bytes().to_vec()),
            extra: "",
        },
        "/app.css" => Answer {
            status: "200 OK",
            content_type: "text/css; charset=utf-8",
            body: Arc::new(page::APP_CSS.as_bytes().to_vec()),
            extra: "",
        },
        "/app.js" => Answer {
            status: "200 OK",
            content_type: "text/javascript; charset=utf-8",
            body: Arc::new(page::APP_JS.as_bytes().to_vec()),
            extra: "",
        },
        _ => Answer::text("404 Not Found", "not found: /, /metrics and /api/queues are\n".into()),
    }
}

/// Serves one connection: requests one after the other until it closes,
/// idles too long, or sends what this server does not take.
async fn connection(mut stream: TcpStream, watch: Arc<Watch>, serving: Arc<Serving>) {
    let Ok(_slot) = serving.slots.clone().try_acquire_owned() else {
        let busy = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        let _ = tokio::time::timeout(WRITE_TIMEOUT, stream.write_all(busy.as_bytes())).await;
        return;
    };
    let _ = stream.set_nodelay(true);
    let mut buf: Vec<u8> = Vec::with_capacity(1024);
    loop {
        // The next request: its first byte within the idle time, the rest
        // of its head within the head time.
        let head = loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break Some(end);
            }
            if buf.len() >= MAX_HEAD {
                break None;
            }
            let limit = if buf.is_empty() { IDLE_TIMEOUT } else { HEAD_TIMEOUT };
            let mut chunk = [0u8; 4096];
            match tokio::time::timeout(limit, stream.read(&mut chunk)).await {
                Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return,
                // At most MAX_HEAD + 4095 bytes held: checked before each read.
                Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let parsed = head.and_then(|end| parse_head(&buf[..end]).map(|h| (h, end + 4)));
        let Some((h, used)) = parsed else {
            let a = Answer::text("400 Bad Request", "not an HTTP/1.x request within 16 KiB\n".into());
            let _ = write_answer(&mut stream, &a, false, true).await;
            return;
        };
        buf.drain(..used);
        let a = if h.body {
            Answer::text("413 Content Too Large", "this server takes no request body\n".into())
        } else {
            answer(&h, &watch, &serving).await
        };
        let close = h.close || h.body;
        if write_answer(&mut stream, &a, h.method == "HEAD", close).await.is_err() || close {
            return;
        }
    }
}

/// Writes an answer (its head only for HEAD), within [`WRITE_TIMEOUT`].
async fn write_answer(stream: &mut TcpStream, a: &Answer, head_only: bool, close: bool) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n\
         X-Content-Type-Options: nosniff\r\nContent-Security-Policy: default-src 'self'; frame-ancestors 'none'\r\n{}{}\r\n",
        a.status,
        a.content_type,
        a.body.len(),
        a.extra,
        if close { "Connection: close\r\n" } else { "" }
    );
    let write = async {
        stream.write_all(head.as_bytes()).await?;
        if !head_only {
            stream.write_all(&a.body).await?;
        }
        stream.flush().await
    };
    match tokio::time::timeout(WRITE_TIMEOUT, write).await {
        Ok(r) => r,
        Err(_) => Err(std::io::ErrorKind::TimedOut.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads() {
        let h = parse_head(b"GET /api/queues?sort=depth HTTP/1.1\r\nHost: localhost:9\r\nAuthorization: Basic eDpz")
            .unwrap();
        assert_eq!((h.method.as_str(), h.path.as_str(), h.query.as_str()), ("GET", "/api/queues", "sort=depth"));
        assert_eq!(h.host.as_deref(), Some("localhost:9"));
        assert!(!h.close && !h.body);
        assert!(parse_head(b"GET / HTTP/1.0").unwrap().close);
        assert!(parse_head(b"GET / HTTP/1.1\r\nConnection: Close").unwrap().close);
        assert!(parse_head(b"POST / HTTP/1.1\r\nContent-Length: 5").unwrap().body);
        assert!(parse_head(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked").unwrap().body);
        for bad in
            [&b"GET /"[..], b"GET / SPDY/3", b"GET / HTTP/1.1 x", b"GET / HTTP/1.1\r\nno colon", b"\xff / HTTP/1.1"]
        {
            assert!(parse_head(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn hosts() {
        for ok in ["localhost", "LOCALHOST:9100", "127.0.0.1", "127.0.0.1:80", "[::1]:9100", "[::1]", "127.9.9.9"] {
            assert!(loopback_host(ok), "{ok}");
        }
        for bad in ["evil.example", "evil.example:9100", "10.0.0.1", "[2001:db8::1]:80", "localhost.evil", ""] {
            assert!(!loopback_host(bad), "{bad}");
        }
    }

    #[test]
    fn protected_mode() {
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        assert!(protected_mode_refusal(ip("0.0.0.0"), false, true, "x").is_some());
        assert!(protected_mode_refusal(ip("::"), false, true, "x").is_some());
        assert!(protected_mode_refusal(ip("127.0.0.1"), false, true, "x").is_none());
        assert!(protected_mode_refusal(ip("::ffff:127.0.0.1"), false, true, "x").is_none());
        assert!(protected_mode_refusal(ip("0.0.0.0"), true, true, "x").is_none());
        assert!(protected_mode_refusal(ip("0.0.0.0"), false, false, "x").is_none());
    }

    #[test]
    fn passwords() {
        assert_eq!(base64("eDpz").unwrap(), b"x:s");
        assert_eq!(base64("YWJjZA==").unwrap(), b"abcd");
        assert!(base64("a b").is_none());
        assert!(authorized(Some("Basic eDpz"), b"s"), "any user");
        assert!(authorized(Some("basic Ojpz"), b":s"), "the user ends at the first colon");
        assert!(authorized(Some("Bearer s"), b"s"));
        assert!(!authorized(Some("Basic eDpz"), b"t"));
        assert!(!authorized(Some("Bearer st"), b"s"));
        assert!(!authorized(Some("Digest s"), b"s"));
        assert!(!authorized(None, b"s"));
        assert!(!authorized(Some("Basic cw=="), b"s"), "no colon: no password");
    }
}
