//! `tvmq serve --metrics-port`: the exposition (promtool finds nothing to
//! fix; the server's counters count what was done), its password and
//! protected mode, the HTTP server's bounds; the dashboard in a real browser
//! (headless Chromium) against a server with a workload; and Prometheus
//! itself scraping it: its count of pushes is the pushes made, and it
//! computes a rate() of them.

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// One HTTP/1.1 request (`extra` header lines, each ending in CRLF): the
/// status code and the body.
fn http(addr: SocketAddr, path: &str, extra: &str) -> (u16, String) {
    try_http(addr, path, extra).expect("an HTTP answer")
}

/// [`http`], None when nothing answers.
fn try_http(addr: SocketAddr, path: &str, extra: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}Connection: close\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok())?;
    Some((status, body.to_string()))
}

/// The value of the series `series` (name and labels as written) in `text`.
fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no series {series} in:\n{text}"))
        .parse()
        .expect("a number")
}

#[test]
fn the_exposition_counts_what_was_done_and_promtool_finds_nothing_to_fix() {
    let dir = TempDir::new("server", "metrics");
    create(&dir, 21, "ORDERS", 100, 16);
    create(&dir, 22, "EMPTY", 10, 8);
    let server = start(&dir, &["--metrics-port", "0", "--requirepass", "s3cret-metrics"]);
    let addr = server.tcp_addr().unwrap();
    let maddr = server.metrics_addr().expect("a metrics port");
    let mut c = Conn::connect(addr);
    assert!(c.cmd(&[b"AUTH", b"wrong"]).err_text().starts_with("WRONGPASS"));
    assert_eq!(c.cmd(&[b"AUTH", b"s3cret-metrics"]), V::Simple("OK".into()));
    assert_eq!(c.cmd(&[b"RPUSH", b"21", b"a", b"b", b"c"]), V::Int(3));
    assert_eq!(c.cmd(&[b"LPOP", b"21"]), V::bulk(b"a"));
    assert_eq!(c.cmd(&[b"LLEN", b"21"]), V::Int(2));
    assert_eq!(c.cmd(&[b"LLEN", b"ORDERS"]), V::Int(2));

    // The password: HTTP Basic (any user) or Bearer; nothing without it.
    let (status, _) = http(maddr, "/metrics", "");
    assert_eq!(status, 401);
    let (status, _) = http(maddr, "/metrics", "Authorization: Bearer nope\r\n");
    assert_eq!(status, 401);
    let (status, text) = http(maddr, "/metrics", "Authorization: Basic cHJvbTpzM2NyZXQtbWV0cmljcw==\r\n"); // prom:s3cret-metrics
    assert_eq!(status, 200, "{text}");
    assert_eq!(value(&text, "tvmq_queue_depth{queue=\"21\",name=\"ORDERS\"}"), 2.0);
    assert_eq!(value(&text, "tvmq_queue_pushed_total{queue=\"21\",name=\"ORDERS\"}"), 3.0);
    assert_eq!(value(&text, "tvmq_queue_popped_total{queue=\"21\",name=\"ORDERS\"}"), 1.0);
    assert_eq!(value(&text, "tvmq_queue_capacity{queue=\"22\",name=\"EMPTY\"}"), 10.0);
    assert_eq!(value(&text, "tvmq_queue_processes{queue=\"21\",name=\"ORDERS\"}"), 1.0, "the server attached it");
    assert_eq!(value(&text, "tvmq_queues"), 2.0);
    assert_eq!(value(&text, "tvmq_server_connected_clients"), 1.0);
    assert_eq!(value(&text, "tvmq_server_commands_total{command=\"rpush\"}"), 1.0);
    assert_eq!(value(&text, "tvmq_server_commands_total{command=\"llen\"}"), 2.0);
    assert_eq!(value(&text, "tvmq_server_commands_total{command=\"auth\"}"), 2.0);
    assert_eq!(value(&text, "tvmq_server_commands_total{command=\"scan\"}"), 0.0);
    assert_eq!(value(&text, "tvmq_server_auth_failures_total"), 1.0);
    assert_eq!(value(&text, "tvmq_server_rejected_connections_total"), 0.0);
    assert_eq!(value(&text, "tvmq_durable_sync_seconds_count"), 0.0);
    let (status, bearer) = http(maddr, "/metrics", "Authorization: Bearer s3cret-metrics\r\n");
    assert_eq!(status, 200);
    assert!(bearer.contains("# TYPE tvmq_durable_sync_seconds histogram"));
    match promtool_complaints(&text) {
        Some(said) => assert_eq!(said, "", "promtool check metrics"),
        None => eprintln!("SKIP promtool check: promtool is not installed (Debian: prometheus)"),
    }

    // /api/queues: the same counters, the server's, a bound on the answer.
    let auth = "Authorization: Bearer s3cret-metrics\r\n";
    let (status, json) = http(maddr, "/api/queues?sort=depth&limit=1", auth);
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["total"], 2);
    assert_eq!(v["queues"].as_array().unwrap().len(), 1, "limit=1");
    assert_eq!(v["queues"][0]["id"], 21, "the deepest first");
    assert_eq!(v["queues"][0]["depth"], 2);
    assert_eq!(v["server"]["commands"]["rpush"], 1);
    assert_eq!(v["server"]["connected_clients"], 1);
    let (status, why) = http(maddr, "/api/queues?sort=size", auth);
    assert_eq!((status, why.contains("sort=")), (400, true));
    // The dashboard and its files, embedded.
    let (status, page) = http(maddr, "/", auth);
    assert_eq!(status, 200);
    assert!(page.contains("<script src=\"/app.js\">"));
    assert_eq!(http(maddr, "/app.js", auth).0, 200);
    assert_eq!(http(maddr, "/app.css", auth).0, 200);
    assert_eq!(http(maddr, "/nothing", auth).0, 404);
    server.stop();
}

#[test]
fn durable_syncs_are_counted_per_queue_and_in_the_server_s_histogram() {
    let dir = DiskDir::new("metrics-always");
    let mut spec = tvm::Spec::new(100, 16);
    spec.name = "LEDGER".into();
    spec.durability = Some(tvm::Durability::Always);
    tvm::Queue::create(dir.path(), 31, &spec).expect("an always queue on the disk");
    let server = tvmq_server::Server::start(dir.path(), &args(&["--metrics-port", "0"])).expect("server starts");
    let mut c = Conn::connect(server.tcp_addr().unwrap());
    for i in 0..3 {
        assert_eq!(c.cmd(&[b"RPUSH", b"31", format!("entry {i}").as_bytes()]), V::Int(i + 1));
    }
    let (status, text) = http(server.metrics_addr().unwrap(), "/metrics", "");
    assert_eq!(status, 200);
    let syncs = value(&text, "tvmq_queue_syncs_total{queue=\"31\",name=\"LEDGER\"}");
    let held = value(&text, "tvmq_durable_sync_seconds_count");
    assert!(held >= 1.0, "the server synced for its replies: {held}");
    assert!(syncs >= held, "every sync of the server is one of the queue's: {syncs} >= {held}");
    assert_eq!(value(&text, "tvmq_durable_sync_seconds_bucket{le=\"+Inf\"}"), held);
    assert!(value(&text, "tvmq_durable_sync_seconds_sum") > 0.0);
    drop(c);
    server.stop();
    tvm::Queue::drop_queue(dir.path(), 31).unwrap();
}

/// The sum of the series of family `name` listed one by one in `text`.
fn family_sum(text: &str, name: &str) -> f64 {
    let prefix = format!("{name}{{");
    text.lines().filter(|l| l.starts_with(&prefix)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
}

/// A server at 256 descriptors (soft and hard) serving 1,500 queues, more
/// than it holds open (about 8 at that limit) and more than its limit: a
/// scrape lists every queue with its record, none unreadable, while the
/// RESP side opens queues and takes new clients as before; the server's
/// descriptors stay within its limit. (Before the metrics' views held no
/// descriptor, each held one: the scrape took the RESP side's.)
#[test]
fn at_a_low_descriptor_limit_a_scrape_of_more_queues_than_descriptors_starves_nothing() {
    let dir = TempDir::new("server", "metrics-fds");
    let (n, limit) = (1500u32, 256);
    for id in 1..=n {
        create(&dir, id, &format!("Q{id}"), 4, 8);
    }
    let how = Spawn { nofile: Some(limit), capture_stderr: true, ..Spawn::default() };
    let server = ChildServer::spawn(&dir, &["--metrics-port", "0"], &how);
    let (addr, maddr) = (server.addr, server.metrics_addr.expect("a metrics port"));
    // Every queue pushed to once: the server opens each in turn.
    let mut c = Conn::connect(addr);
    let mut wire = Vec::new();
    for id in 1..=n {
        resp::command(&mut wire, &[b"RPUSH", id.to_string().as_bytes(), format!("v{id}").as_bytes()]);
    }
    c.send_raw(&wire);
    for id in 1..=n {
        assert_eq!(c.read(), V::Int(1), "RPUSH {id}");
    }
    for round in 0..2 {
        // A scrape while the client has every queue opened again.
        wire.clear();
        for id in 1..=n {
            resp::command(&mut wire, &[b"LLEN", id.to_string().as_bytes()]);
        }
        c.send_raw(&wire);
        let (status, text) = http(maddr, "/metrics", "");
        for id in 1..=n {
            assert_eq!(c.read(), V::Int(1), "LLEN {id}");
        }
        assert_eq!(status, 200, "{text}");
        assert_eq!(value(&text, "tvmq_queues"), f64::from(n), "round {round}");
        assert_eq!(value(&text, "tvmq_queues_unreadable"), 0.0, "round {round}");
        assert_eq!(family_sum(&text, "tvmq_queue_depth"), f64::from(n), "every queue's record, round {round}");
        assert_eq!(value(&text, &format!("tvmq_queue_depth{{queue=\"{n}\",name=\"Q{n}\"}}")), 1.0);
        // New clients are answered, each opening a queue of its own.
        for id in [1, n / 2, n] {
            let mut other = Conn::connect(addr);
            assert_eq!(other.cmd(&[b"PING"]), V::Simple("PONG".into()), "round {round}");
            assert_eq!(other.cmd(&[b"LLEN", id.to_string().as_bytes()]), V::Int(1));
        }
        let fds = open_fds(server.pid());
        eprintln!("round {round}: {fds} descriptors open at a limit of {limit}");
        assert!(fds < limit as usize / 2, "{fds} descriptors");
        // Past the quarter of a second a sample is kept for.
        std::thread::sleep(Duration::from_millis(300));
    }
    let stderr = server.stderr.lock().unwrap().clone();
    assert!(!stderr.iter().any(|l| l.contains("accept")), "no accept error: {stderr:?}");
}

#[test]
fn the_metrics_port_refuses_what_it_does_not_serve() {
    let dir = TempDir::new("server", "metrics-bounds");
    create(&dir, 21, "Q", 10, 8);
    // Protected mode: not off loopback without a password.
    let refused = tvmq_server::Server::start(dir.path(), &args(&["--metrics-port", "0", "--metrics-bind", "0.0.0.0"]));
    let e = refused.err().expect("refused");
    assert!(e.to_string().contains("protected mode"), "{e}");
    let server = start(&dir, &["--metrics-port", "0"]);
    let maddr = server.metrics_addr().unwrap();
    // A host name that is not loopback's (DNS rebinding): refused.
    let mut s = TcpStream::connect(maddr).unwrap();
    s.write_all(b"GET /api/queues HTTP/1.1\r\nHost: evil.example:80\r\nConnection: close\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.1 403"), "{text}");
    // A body, a head too long, not HTTP: refused and closed.
    for (bad, want) in [
        (b"POST /metrics HTTP/1.1\r\nHost: localhost\r\nContent-Length: 3\r\n\r\nabc".to_vec(), "HTTP/1.1 413"),
        ([b"GET /metrics HTTP/1.1\r\nX: ".to_vec(), vec![b'a'; 20_000]].concat(), "HTTP/1.1 400"),
        (b"HELLO\r\n\r\n".to_vec(), "HTTP/1.1 400"),
        (b"DELETE /metrics HTTP/1.1\r\nConnection: close\r\n\r\n".to_vec(), "HTTP/1.1 405"),
    ] {
        let mut s = TcpStream::connect(maddr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let _ = s.write_all(&bad);
        let mut text = Vec::new();
        let _ = s.read_to_end(&mut text);
        let text = String::from_utf8_lossy(&text);
        assert!(text.starts_with(want), "{want}: {text}");
    }
    // Keep-alive: two requests on one connection, the RESP port unaffected.
    let mut s = TcpStream::connect(maddr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\nGET /api/queues HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    assert_eq!(text.matches("HTTP/1.1 200 OK").count(), 2);
    assert_eq!(cli(server.tcp_addr().unwrap(), &["PING"]), "PONG");
    server.stop();
}

/// A workload for the browser and Prometheus: pushes to queue `id` at
/// `per_second` (paced, by a local producer, which is what the counters
/// count), pops half of them through the server; counts the pushes.
struct Workload {
    stop: Arc<AtomicBool>,
    pushed: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Workload {
    fn start(dir: &Path, id: u32, per_second: u64, addr: SocketAddr) -> Workload {
        let stop = Arc::new(AtomicBool::new(false));
        let pushed = Arc::new(AtomicU64::new(0));
        let (s, p, dir) = (stop.clone(), pushed.clone(), dir.to_path_buf());
        let thread = std::thread::spawn(move || {
            let q = tvm::Queue::open(&dir, id).unwrap();
            let mut c = Conn::connect(addr);
            let start = Instant::now();
            let mut n = 0u64;
            while !s.load(Ordering::Relaxed) {
                let due = start + Duration::from_secs_f64(n as f64 / per_second as f64);
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
                q.push(&n.to_le_bytes()).unwrap();
                n += 1;
                p.store(n, Ordering::Relaxed);
                if n % 2 == 0 {
                    assert!(matches!(c.cmd(&[b"LPOP", id.to_string().as_bytes()]), V::Bulk(_)));
                }
            }
        });
        Workload { stop, pushed, thread: Some(thread) }
    }

    fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().expect("the workload ran");
        self.pushed.load(Ordering::Relaxed)
    }
}

/// Where the browser's profile and screenshots go.
fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target")
}

/// Headless Chromium on `url`: `what` is `--dump-dom` or `--screenshot=PATH`.
fn chromium(url: &str, what: &str, virtual_ms: u64) -> String {
    let profile = TempDir::new("chromium", "profile");
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--window-size=1280,1000",
            &format!("--user-data-dir={}", profile.path().display()),
            &format!("--virtual-time-budget={virtual_ms}"),
            what,
            url,
        ])
        .stderr(Stdio::null())
        .output()
        .expect("chromium runs");
    assert!(out.status.success(), "chromium failed: {}", out.status);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The value of attribute `attr` of the first element of `dom` that has
/// `marker` in its tag.
fn attr(dom: &str, marker: &str, attr: &str) -> Option<String> {
    let at = dom.find(marker)?;
    let tag_start = dom[..=at].rfind('<')?;
    let tag = &dom[tag_start..tag_start + dom[tag_start..].find('>')?];
    let key = format!("{attr}=\"");
    let v = &tag[tag.find(&key)? + key.len()..];
    Some(v[..v.find('"')?].to_string())
}

#[test]
fn the_dashboard_in_chromium_shows_the_queues_their_depth_and_a_chart() {
    if !have_tool("chromium") {
        eprintln!("SKIP the dashboard test: chromium is not installed (Debian: chromium)");
        return;
    }
    let dir = TempDir::new("server", "dashboard");
    create(&dir, 21, "ORDERS", 100_000, 16);
    create(&dir, 22, "INVOICES", 1000, 16);
    create(&dir, 23, "EMAILS", 1000, 16);
    let mut leased = tvm::Spec::new(10, 16);
    leased.leases = Some(tvm::LeaseSpec::default());
    tvm::Queue::create(dir.path(), 24, &leased).unwrap();
    let server = start(&dir, &["--metrics-port", "0"]);
    let addr = server.tcp_addr().unwrap();
    let maddr = server.metrics_addr().unwrap();
    let records: Vec<String> = (0..17).map(|i| format!("invoice {i}")).collect();
    let mut push = vec!["RPUSH", "22"];
    push.extend(records.iter().map(String::as_str));
    assert_eq!(cli(addr, &push), "17");
    // Two leases granted (each redis-cli's connection gives its back).
    assert_eq!(cli(addr, &["RPUSH", "24", "a", "b"]), "2");
    assert!(cli(addr, &["TVMQ.LEASE", "24", "COUNT", "2"]).contains('a'));
    let work = Workload::start(dir.path(), 21, 2000, addr);
    // Two samples a second apart, so that every answer the page gets has
    // rates: under a virtual time budget, the page's seconds pass faster
    // than the server's.
    http(maddr, "/api/queues", "");
    std::thread::sleep(Duration::from_millis(1100));
    http(maddr, "/api/queues", "");
    let url = format!("http://{maddr}/#ids=21,22");
    let dom = chromium(&url, "--dump-dom", 6000);
    // Kept for people, with the screenshot below.
    std::fs::write(target_dir().join("dashboard-dom.html"), &dom).unwrap();
    let updates: u32 = attr(&dom, "<body", "data-updates").and_then(|v| v.parse().ok()).unwrap_or(0);
    assert!(updates >= 2, "the page polled /api/queues at least twice ({updates})");
    for id in ["21", "22", "23"] {
        assert!(dom.contains(&format!("data-id=\"{id}\"")), "queue {id} is listed");
    }
    let llen = cli(addr, &["LLEN", "22"]);
    assert_eq!(attr(&dom, "<tr data-id=\"22\"", "data-depth"), Some(llen.clone()), "the depth shown is LLEN's");
    assert!(dom.contains("INVOICES") && dom.contains("ORDERS"), "names shown");
    assert!(dom.contains("data-k=\"leases_granted\">2<"), "the server's leases granted shown");
    let points: u32 = attr(&dom, "id=\"depth-chart\"", "data-points").and_then(|v| v.parse().ok()).unwrap_or(0);
    let series: u32 = attr(&dom, "id=\"depth-chart\"", "data-series").and_then(|v| v.parse().ok()).unwrap_or(0);
    assert_eq!(series, 2, "two queues charted");
    assert!(points >= 4, "the depth chart has points drawn ({points})");
    let rate_points: u32 = attr(&dom, "id=\"rate-chart\"", "data-points").and_then(|v| v.parse().ok()).unwrap_or(0);
    assert!(rate_points >= 2, "the rate chart has points drawn ({rate_points})");
    // Kept for people: target/dashboard.png.
    let shot = target_dir().join("dashboard.png");
    let _ = std::fs::remove_file(&shot);
    chromium(&url, &format!("--screenshot={}", shot.display()), 6000);
    assert!(std::fs::metadata(&shot).is_ok_and(|m| m.len() > 10_000), "a screenshot at {}", shot.display());
    work.stop();
    server.stop();
}

/// Prometheus's query API: the value of `query` at `at` (seconds since the epoch).
fn prometheus_query(prom: SocketAddr, query: &str, at: f64) -> Option<f64> {
    let q: String = query
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"_.-".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") }
        })
        .collect();
    let (status, body) = try_http(prom, &format!("/api/v1/query?query={q}&time={at:.3}"), "")?;
    if status != 200 {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
}

#[test]
fn prometheus_scrapes_the_port_counts_every_push_and_rates_them() {
    if !have_tool("prometheus") {
        eprintln!("SKIP the Prometheus test: prometheus is not installed (Debian: prometheus)");
        return;
    }
    let dir = TempDir::new("server", "prometheus");
    create(&dir, 21, "ORDERS", 100_000, 16);
    let server = start(&dir, &["--metrics-port", "0"]);
    let maddr = server.metrics_addr().unwrap();
    let data = TempDir::new("prometheus", "data");
    let config = data.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: tvmq\n    \
             static_configs:\n      - targets: ['{maddr}']\n"
        ),
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let prom_addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _prom = Kill(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", data.path().join("tsdb").display()))
            .arg(format!("--web.listen-address={prom_addr}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus starts"),
    );
    // Its first scrape of the port.
    wait_until(Duration::from_secs(60), "Prometheus's first scrape", || {
        prometheus_query(prom_addr, "up{job=\"tvmq\"}", now_s()).is_some_and(|v| v == 1.0)
    });
    const RATE: u64 = 400;
    let work = Workload::start(dir.path(), 21, RATE, server.tcp_addr().unwrap());
    let started = now_s();
    let pushes = "tvmq_queue_pushed_total{queue=\"21\"}";
    // Prometheus computes a rate of the pushes while they go on. (How close
    // it comes to the pace asked for is not asserted: the pace of a paced
    // producer on a loaded machine is not, and Prometheus's window edges
    // are its own.)
    let rate = format!("rate({pushes}[3s])");
    let mut got = 0.0;
    wait_until(Duration::from_secs(60), "a rate of pushes from Prometheus", || {
        got = prometheus_query(prom_addr, &rate, now_s()).unwrap_or(0.0);
        got > 0.0
    });
    std::thread::sleep(Duration::from_secs(2));
    let pushed = work.stop();
    let ran = now_s() - started;
    // Once it has scraped the port after the last push, its count is the
    // pushes made, to the one (the minute: a guard against a hang).
    let mut seen = None;
    wait_until(Duration::from_secs(60), "Prometheus to have every push", || {
        seen = prometheus_query(prom_addr, pushes, now_s());
        seen == Some(pushed as f64)
    });
    eprintln!(
        "pushed {pushed} in {ran:.2} s ({:.1}/s); Prometheus's rate over [3s] while they went on {got:.1}/s; its count \
         after: {seen:?}",
        pushed as f64 / ran
    );
    server.stop();
}

fn now_s() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64()
}
