#!/usr/bin/env python3
"""`make attack`: the attacks of issue 34 against `tvmq serve`, at full size,
each against a server of its own, printing the figures the tests bound at a
smaller size (server/tests/attack_*.rs). Run by hand; it takes a few
minutes and a few hundred MB of memory.

    python3 scripts/attack.py [--tvmq target/release/tvmq] [ATTACK ...]

With no ATTACK, all of them run; `--list` names them. Each starts
`tvmq serve --port 0` on a fresh queue directory in /dev/shm (removed after)
and stops it. Another client PINGs every 5 ms throughout each attack: its
round trips (p50 / p99 / worst) are printed beside the attack's figures.
Timings on a shared machine are disturbed by whatever else runs there:
compare figures taken in the same minutes.
"""

import argparse
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time

SECRET = "attack-suite-password"
ATTACKS = {}


def attack(fn):
    ATTACKS[fn.__name__] = fn
    return fn


# ---- a server ---------------------------------------------------------------


class Server:
    """`tvmq serve` in a child process on a fresh queue directory."""

    def __init__(self, tvmq, args, nofile=None, directory=None, env=None):
        self.dir = directory or tempfile.mkdtemp(prefix="tvmq-attack-", dir="/dev/shm")
        self.own_dir = directory is None
        cmd = [tvmq, "--dir", self.dir, "serve", "--port", "0"] + list(args)
        if nofile is not None:
            cmd = ["prlimit", f"--nofile={nofile}:{nofile}", "--"] + cmd
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})}
        )
        self.stderr = []
        line = self.proc.stdout.readline()
        m = re.search(r"listening on ([0-9.]+):(\d+)", line)
        if not m:
            err = self.proc.stderr.read()
            self.proc.wait()
            raise RuntimeError(f"the server did not start: {line!r} {err!r}")
        self.addr = (m.group(1), int(m.group(2)))
        self.tls_port = None
        m = re.search(r"and [0-9.]+:(\d+) \(TLS", line)
        if m:
            self.tls_port = int(m.group(1))
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.proc.stderr:
            self.stderr.append((time.monotonic(), line.rstrip("\n")))

    def rss_mib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def threads(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
        return 0

    def fds(self):
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def cpu_seconds(self):
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


# ---- RESP -------------------------------------------------------------------


def command(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Client:
    def __init__(self, addr, timeout=10.0, auth=None, sock=None):
        self.s = sock or socket.create_connection(addr, timeout=timeout)
        self.s.settimeout(timeout)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        if auth is not None:
            r = self.cmd("AUTH", auth)
            if r != "OK":
                raise RuntimeError(f"AUTH: {r!r}")

    def send(self, *args):
        self.s.sendall(command(*args))

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.s.recv(65536)
            if not chunk:
                raise EOFError("closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def read(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return Exception(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                chunk = self.s.recv(65536)
                if not chunk:
                    raise EOFError("closed")
                self.buf += chunk
            v, self.buf = self.buf[:n], self.buf[n + 2 :]
            return v
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RuntimeError(f"unexpected reply {line!r}")

    def cmd(self, *args):
        self.send(*args)
        return self.read()

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass


def _ping_loop(addr, auth, stop, conn):
    c = Client(addr, auth=auth)
    times, failures = [], 0
    while not stop.is_set():
        t = time.perf_counter()
        try:
            r = c.cmd("PING")
        except (OSError, EOFError):
            failures += 1
            break
        if r != "PONG":
            failures += 1
        times.append(time.perf_counter() - t)
        time.sleep(0.005)
    c.close()
    conn.send((times, failures))


class Pinger:
    """Another client, PINGing every 5 ms: its round trips. A process of its
    own, so that the attack's Python code does not delay it (the GIL)."""

    def __init__(self, addr, auth=None):
        import multiprocessing

        self.stop = multiprocessing.Event()
        self.rx, tx = multiprocessing.Pipe(duplex=False)
        self.p = multiprocessing.Process(target=_ping_loop, args=(addr, auth, self.stop, tx), daemon=True)
        self.p.start()

    def finish(self):
        self.stop.set()
        times, failures = self.rx.recv() if self.rx.poll(30) else ([], 1)
        self.p.join(10)
        if not times:
            return "no PING answered"
        ts = sorted(times)
        p = lambda q: ts[min(len(ts) - 1, int(q * len(ts)))] * 1000
        return f"PING x{len(ts)}: p50 {p(0.5):.2f} ms, p99 {p(0.99):.2f} ms, worst {ts[-1] * 1000:.1f} ms" + (
            f", {failures} failed" if failures else ""
        )


def pings(addr, n, limit, auth=None):
    """n new clients, each connecting and PINGing once: how many got PONG
    within `limit` seconds (all in parallel), and the slowest."""
    got = []

    def one():
        t = time.perf_counter()
        try:
            c = Client(addr, timeout=limit)
            if auth is not None:
                c.cmd("AUTH", auth)
            if c.cmd("PING") == "PONG":
                got.append(time.perf_counter() - t)
            c.close()
        except (OSError, EOFError, RuntimeError):
            pass

    ts = [threading.Thread(target=one) for _ in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return len(got), (max(got) * 1000 if got else None)


def settle_rss(server, seconds):
    """RSS after `seconds`, sampled until it stops falling."""
    deadline = time.monotonic() + seconds
    rss = server.rss_mib()
    while time.monotonic() < deadline:
        time.sleep(0.25)
        rss = server.rss_mib()
    return rss


def report(name, lines):
    print(f"\n== {name}")
    for line in lines:
        print(f"   {line}")
    sys.stdout.flush()


# ---- the attacks ------------------------------------------------------------


@attack
def baseline(tvmq, seconds=5):
    """No attack: another client's PING alone, the noise floor of the machine."""
    with Server(tvmq, []) as s:
        pinger = Pinger(s.addr)
        time.sleep(seconds)
        report("baseline (no attack)", [pinger.finish()])


@attack
def many_queues_at_1024_descriptors(tvmq):
    """RPUSH to 1,100 new queues (--auto-create), then LLEN on 1,100 existing
    ones, with the server at a soft and hard limit of 1,024 open files."""
    lines = []
    for variant in ("RPUSH --auto-create", "LLEN existing"):
        directory = tempfile.mkdtemp(prefix="tvmq-attack-", dir="/dev/shm")
        try:
            if variant == "LLEN existing":
                with Server(tvmq, ["--auto-create", "10x16", "--max-queues", "2000"], directory=directory) as s:
                    c = Client(s.addr)
                    for i in range(1100):
                        c.send("RPUSH", f"k{i}", "v")
                    for i in range(1100):
                        c.read()
                    c.close()
            with Server(tvmq, ["--auto-create", "10x16", "--max-queues", "2000"], nofile=1024, directory=directory) as s:
                pinger = Pinger(s.addr)
                start = s.fds()
                c = Client(s.addr, timeout=60)
                t = time.perf_counter()
                verb = "RPUSH" if variant.startswith("RPUSH") else "LLEN"
                for i in range(1100):
                    if verb == "RPUSH":
                        c.send("RPUSH", f"k{i}", "v")
                    else:
                        c.send("LLEN", f"k{i}")
                errors = {}
                for i in range(1100):
                    try:
                        r = c.read()
                    except (OSError, EOFError) as e:
                        errors[f"no reply ({e})"] = errors.get(f"no reply ({e})", 0) + 1
                        break
                    if isinstance(r, Exception):
                        k = str(r)[:60]
                        errors[k] = errors.get(k, 0) + 1
                took = time.perf_counter() - t
                during = s.fds()
                ok, slow = pings(s.addr, 5, 3.0)
                c.close()
                time.sleep(1.0)
                ok_after, slow_after = pings(s.addr, 5, 3.0)
                accepts = [t for t, l in s.stderr if "accept" in l]
                span = accepts[-1] - accepts[0] if len(accepts) > 1 else 0
                lines.append(
                    f"{variant}: 1,100 commands in {took:.2f} s, errors {errors or 'none'}; descriptors {start} -> {during}"
                )
                lines.append(
                    f"  5 new clients: {ok}/5 PONG within 3 s (slowest {slow and f'{slow:.1f} ms'}); "
                    f"after the attacker left: {ok_after}/5 (slowest {slow_after and f'{slow_after:.1f} ms'}); "
                    f"'accept' lines on stderr: {len(accepts)} over {span:.1f} s"
                )
                lines.append(f"  {pinger.finish()}")
        finally:
            shutil.rmtree(directory, ignore_errors=True)
    report("1,100 queues at 1,024 descriptors", lines)


@attack
def maxclients_above_the_descriptor_limit(tvmq):
    """1,100 connections, each sending PING, to a server at a limit of 1,024
    open files with the default --maxclients (10,000)."""
    with Server(tvmq, [], nofile=1024) as s:
        socks = []
        for _ in range(1100):
            try:
                so = socket.create_connection(s.addr, timeout=5)
                so.sendall(b"PING\r\n")
                socks.append(so)
            except OSError:
                break
        pong = refused = silent = 0
        deadline = time.monotonic() + 3
        for so in socks:
            so.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = so.recv(100)
            except OSError:
                data = None
            if data and data.startswith(b"+PONG"):
                pong += 1
            elif data and b"max number of clients" in data:
                refused += 1
            else:
                silent += 1
        warned = [l for _, l in s.stderr if "maxclients" in l]
        for so in socks:
            so.close()
        report(
            "--maxclients above the descriptor limit",
            [
                f"{len(socks)} connections: {pong} PONG, {refused} '-ERR max number of clients reached', "
                f"{silent} without any reply within 3 s",
                f"start-up warning: {warned[0] if warned else 'none'}",
            ],
        )


def preauth_partial(size=16384, args=10, name=None):
    """A command of `args` arguments of `size` bytes (the first `name`, if
    given), the last one byte short."""
    parts = [name] if name else []
    parts += [b"a" * size] * (args - len(parts))
    body = b"*%d\r\n" % args + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)
    return body[:-3]


@attack
def preauth_partial_commands(tvmq, n=2000):
    """2,000 unauthenticated connections, each holding a partial command
    (10 arguments of 16 KiB, the last one byte short; then AUTH with a 16 KiB
    user name and a 16 KiB password, one byte short, the most a server
    holds before AUTH), then they close."""
    lines = []
    for what, partial in (
        ("10 x 16 KiB", preauth_partial()),
        ("AUTH 16 KiB 16 KiB", preauth_partial(args=3, name=b"AUTH")),
    ):
        with Server(tvmq, ["--requirepass", SECRET, "--maxclients", "10000"]) as s:
            pinger = Pinger(s.addr, auth=SECRET)
            time.sleep(0.5)
            base = s.rss_mib()
            socks = []
            t = time.perf_counter()
            for _ in range(n):
                so = socket.create_connection(s.addr, timeout=5)
                try:
                    so.sendall(partial)
                except OSError:
                    pass
                socks.append(so)
            sent = time.perf_counter() - t
            time.sleep(2)
            peak = s.rss_mib()
            open_now = sum(1 for so in socks if _still_open(so))
            time.sleep(12)
            open_later = sum(1 for so in socks if _still_open(so))
            for so in socks:
                so.close()
            after = settle_rss(s, 3)
            lines.append(
                f"{what}: sent in {sent:.1f} s; RSS {base:.0f} MiB -> {peak:.0f} MiB with them (+{peak - base:.0f}); "
                f"open 2 s after: {open_now}, 14 s after: {open_later}; "
                f"RSS 3 s after they closed: {after:.0f} MiB (+{after - base:.0f} over the start)"
            )
            lines.append(f"  {pinger.finish()}")
    report(f"{n} partial pre-AUTH commands", lines)


def _still_open(so):
    so.setblocking(False)
    try:
        data = so.recv(4096)
        return data != b"" and not data.startswith(b"-")
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        so.setblocking(True)


@attack
def idle_unauthenticated_connections(tvmq):
    """250 idle unauthenticated connections against --maxclients 200, then
    the password holder connects."""
    with Server(tvmq, ["--requirepass", SECRET, "--maxclients", "200"]) as s:
        socks = [socket.create_connection(s.addr, timeout=5) for _ in range(250)]
        time.sleep(0.5)
        ok, slow = pings(s.addr, 1, 3.0, auth=SECRET)
        open_now = sum(1 for so in socks if _still_open(so))
        for so in socks:
            so.close()
        report(
            "idle unauthenticated connections against --maxclients 200",
            [
                f"250 idle connections, {open_now} still open; then the password holder: "
                f"{'served' if ok else 'refused'}" + (f" in {slow:.1f} ms" if ok else "")
            ],
        )


@attack
def client_names(tvmq):
    """10 connections, each CLIENT SETNAME and CLIENT SETINFO with 16 MB values."""
    with Server(tvmq, []) as s:
        time.sleep(0.3)
        base = s.rss_mib()
        big = b"n" * (16 << 20)
        conns, replies = [], {}
        for i in range(10):
            c = Client(s.addr, timeout=30)
            for args in (("CLIENT", "SETNAME", big), ("CLIENT", "SETINFO", "LIB-NAME", big)):
                r = c.cmd(*args)
                k = str(r)[:70]
                replies[k] = replies.get(k, 0) + 1
            conns.append(c)
        time.sleep(1)
        held = s.rss_mib()
        for c in conns:
            c.close()
        report(
            "CLIENT SETNAME / SETINFO with 16 MB values, 10 connections",
            [f"replies {replies}; RSS {base:.0f} -> {held:.0f} MiB while they are connected (+{held - base:.0f})"],
        )


@attack
def passwords_at_start(tvmq):
    """The server started with a 1-byte password and with a 64 KiB one."""
    lines = []
    for what, pw in (("1 byte", "x"), ("64 KiB", "p" * 65536)):
        d = tempfile.mkdtemp(prefix="tvmq-attack-", dir="/dev/shm")
        try:
            p = subprocess.run(
                [tvmq, "--dir", d, "serve", "--port", "0"],
                env={**os.environ, "TVMQ_REQUIREPASS": pw},
                capture_output=True,
                text=True,
                timeout=5,
            )
            lines.append(f"{what}: refused, exit {p.returncode}: {p.stderr.strip()[:160]}")
        except subprocess.TimeoutExpired:
            lines.append(f"{what}: accepted (the server started)")
        finally:
            shutil.rmtree(d, ignore_errors=True)
    report("passwords given at the start", lines)


def rsa_certs(d):
    """scripts/tls-certs.sh's certificates in `d`, the server's key RSA-4096."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tls-certs.sh")
    subprocess.run(["bash", script, d], check=True, capture_output=True, env={**os.environ, "TLS_SERVER_KEY": "rsa4096"})


def _flood(port, stop, q):
    # At a lower priority than the server and the PINGing client: an
    # attacker elsewhere on the network takes none of this machine's CPU.
    os.nice(10)
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    done = failed = 0
    while time.time() < stop:
        try:
            raw = socket.create_connection(("127.0.0.1", port), timeout=5)
            with ctx.wrap_socket(raw) as t:
                t.sendall(b"PING\r\n")
                if t.recv(16).startswith(b"+PONG"):
                    done += 1
                else:
                    failed += 1
        except (OSError, ssl.SSLError):
            failed += 1
    q.put((done, failed))


@attack
def tls_handshake_flood(tvmq, seconds=8, flooders=4):
    """TLS handshakes (RSA-4096 key) as fast as `flooders` processes can
    make them, while another client PINGs the plain port."""
    import multiprocessing

    d = tempfile.mkdtemp(prefix="tvmq-attack-certs-")
    try:
        rsa_certs(d)
        args = ["--tls-port", "0", "--tls-cert-file", f"{d}/server.crt", "--tls-key-file", f"{d}/server.key"]
        with Server(tvmq, args) as s:
            cpu0 = s.cpu_seconds()
            pinger = Pinger(s.addr)
            q = multiprocessing.Queue()
            tls_threads = ""
            stop = time.time() + seconds
            ps = [multiprocessing.Process(target=_flood, args=(s.tls_port, stop, q)) for _ in range(flooders)]
            t0 = time.monotonic()
            for p in ps:
                p.start()
            time.sleep(1)
            tls_threads = subprocess.run(
                ["ps", "-L", "-o", "comm=,ni=", "-p", str(s.proc.pid)], capture_output=True, text=True
            ).stdout.split("\n")
            tls_threads = ", ".join(" ".join(l.split()) for l in tls_threads if "tls" in l)
            results = [q.get() for _ in ps]
            for p in ps:
                p.join()
            took = time.monotonic() - t0
            cpu = s.cpu_seconds() - cpu0
            done, failed = sum(r[0] for r in results), sum(r[1] for r in results)
            report(
                "TLS handshake flood (RSA-4096)",
                [
                    f"{done} handshakes served ({done / took:.0f}/s), {failed} failed or refused, in {took:.1f} s; "
                    f"server CPU {cpu:.1f} s ({cpu / took * 100:.0f} % of a core)",
                    pinger.finish(),
                    f"the server's TLS threads (name, nice): {tls_threads or 'none'}",
                ],
            )
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tvmq", default=os.path.join(os.path.dirname(__file__), "../target/release/tvmq"))
    p.add_argument("--list", action="store_true")
    p.add_argument("attacks", nargs="*")
    a = p.parse_args()
    if a.list:
        for name, fn in ATTACKS.items():
            print(f"{name}: {' '.join(fn.__doc__.split())}")
        return
    names = a.attacks or list(ATTACKS)
    for n in names:
        if n not in ATTACKS:
            sys.exit(f"unknown attack {n!r}: --list names them")
    load = os.getloadavg()
    print(f"{a.tvmq}; {os.cpu_count()} cores; load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    for n in names:
        ATTACKS[n](a.tvmq)


if __name__ == "__main__":
    main()
