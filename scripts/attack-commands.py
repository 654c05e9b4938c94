#!/usr/bin/env python3
"""The command-level attacks on `tvmq serve` of issue 34, with their big
figures (the tests in server/tests/attack_commands.rs run each one small):
one client scanning the lease table or the queues (TVMQ.LEASES, INFO),
blocked clients while nothing is pushed, a blocking pop naming one key a
million times, other commands of a million arguments, many creations and
repairs at once, the auto-creation budget across a restart, out-of-range
lease times, an ACK with a bad id among good ones, and a queue name that
forges a row of `tvmq list`.

Usage: TVMQ=target/release/tvmq python3 scripts/attack-commands.py [NAME ...]
(`make attack` runs it all, `make attack ATTACKS=leases,info` some; names:
leases info blpop-many lease-block dup-keys huge creations repairs budget
lease-times ack names). About three minutes in all. Each attack starts its own
server (two worker threads) on a free port, with its queues in /dev/shm,
and removes them after. Another connection PINGs every 2 ms meanwhile: its
p50, p99 and worst are printed beside each attack's own figures. The
machine's load disturbs every figure: run it on a quiet machine, twice.
"""

import multiprocessing
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

TVMQ = os.environ.get("TVMQ", "target/release/tvmq")
CLK = os.sysconf("SC_CLK_TCK")


def enc(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Conn:
    """A raw RESP connection with a reply parser (enough for these replies)."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def send(self, data):
        self.s.sendall(data)

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.s.recv(1 << 20)
            if not chunk:
                raise EOFError
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _bytes(self, n):
        while len(self.buf) < n + 2:
            chunk = self.s.recv(1 << 20)
            if not chunk:
                raise EOFError
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def read(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t in (b"+", b"-"):
            return ("err " if t == b"-" else "") + rest.decode("utf-8", "replace")
        if t == b":":
            return int(rest)
        if t in (b"$", b"="):
            n = int(rest)
            return None if n < 0 else self._bytes(n)
        if t in (b"*", b"%"):
            n = int(rest)
            if n < 0:
                return None
            return [self.read() for _ in range(n * (2 if t == b"%" else 1))]
        if t == b"_":
            return None
        raise ValueError(line)

    def cmd(self, *args):
        self.send(enc(*args))
        return self.read()

    def close(self):
        self.s.close()


class Server:
    def __init__(self, dirpath, extra=(), env=None):
        e = dict(os.environ)
        e.update(env or {})
        self.p = subprocess.Popen(
            [TVMQ, "--dir", dirpath, "serve", "--port", "0", "--threads", "2", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=e, text=True)
        line = self.p.stdout.readline()
        self.port = int(line.split("listening on ")[1].split()[0].split(";")[0].rsplit(":", 1)[1])
        self.pid = self.p.pid

    def stop(self):
        self.p.terminate()
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


def proc_status(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def cpu_share(pid, seconds):
    """Share of one core the process used over `seconds`."""
    a = cpu_ticks(pid)
    time.sleep(seconds)
    return (cpu_ticks(pid) - a) / CLK / seconds


def _ping(c, times, stop):
    """Pinger's loop: PING every 2 ms on `c`, each round trip timed."""
    while not stop.is_set():
        t = time.perf_counter()
        assert c.cmd("PING") == "PONG"
        times.append(time.perf_counter() - t)
        time.sleep(0.002)
    c.close()


def _pinger_process(port, ready, results, stop):
    conns = [Conn(port), Conn(port)]
    for c in conns:
        c.cmd("PING")
    ready.set()
    times = [[] for _ in conns]
    threads = [threading.Thread(target=_ping, args=(c, ts, stop)) for c, ts in zip(conns, times)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results.put(times)


class Pinger:
    """Other clients: two connections (one on each worker of the server,
    which hands a new connection to the worker serving the fewest), each
    sending PING every 2 ms from a thread of its own, each round trip timed,
    in a process of their own (in this one, the attacker's Python, holding
    the interpreter's lock while it builds a command, would delay them)."""

    def __init__(self, port):
        self.stop_flag = multiprocessing.Event()
        self.results = multiprocessing.Queue()
        ready = multiprocessing.Event()
        self.proc = multiprocessing.Process(target=_pinger_process, args=(port, ready, self.results, self.stop_flag))
        self.proc.start()
        # Connected (one on each worker) before the attacker's connections.
        if not ready.wait(30):
            raise RuntimeError("the pinger could not connect")

    def stop(self):
        self.stop_flag.set()
        self.times = self.results.get(timeout=60)
        self.proc.join()
        # The connection that fared worse (the one on the attacker's worker).
        worst = max((sorted(ts) for ts in self.times if ts), key=lambda ts: ts[min(len(ts) - 1, int(0.99 * len(ts)))])
        pick = lambda q: worst[min(len(worst) - 1, int(q * len(worst)))] * 1000
        return (f"PING p50 {pick(0.5):.2f} ms, p99 {pick(0.99):.2f} ms, worst {worst[-1] * 1000:.1f} ms "
                f"({len(worst)} PINGs on the connection that fared worse)")


def tvmq(d, *args):
    subprocess.run([TVMQ, "--dir", d, *map(str, args)], check=True, stdout=subprocess.DEVNULL)


def many_queues(d, n):
    with tempfile.NamedTemporaryFile("w", suffix=".def", delete=False) as f:
        for i in range(1, n + 1):
            f.write(f"set TABLE={i}\nset TABLESPACE=10\ncreate queue q{i} ( a char(16) );\n")
    tvmq(d, "create", "--def", f.name)
    os.unlink(f.name)


def pipelined(c, cmd, n):
    t = time.perf_counter()
    c.send(cmd * n)
    replies = [c.read() for _ in range(n)]
    return replies, time.perf_counter() - t


def pipelined_attack(d, name, cmd, n, ok, what, setup=lambda c: None):
    """`n` of `cmd` pipelined on one connection (after `setup` on it) while
    another client PINGs; `ok` tells a right reply."""
    s = Server(d)
    try:
        c = Conn(s.port)
        setup(c)
        p = Pinger(s.port)
        time.sleep(0.2)
        replies, took = pipelined(c, cmd, n)
        ping = p.stop()
        good = sum(1 for r in replies if ok(r))
        print(f"{name}: {n} pipelined {what}: {took:.2f} s, {good}/{n} right; {ping}")
    finally:
        s.stop()


def attack_leases(d):
    tvmq(d, "create", 30, "--rows", 1000, "--size", 16, "--lease-ms", 30000, "--max-leases", 1048576)
    pipelined_attack(d, "leases", enc("TVMQ.LEASES", 30), 500, lambda r: isinstance(r, list) and r[1] == 1,
                     "TVMQ.LEASES (1,048,576 entries, 1 in flight: right if it says so)",
                     setup=lambda c: (c.cmd("RPUSH", 30, "a"), c.cmd("TVMQ.LEASE", 30)))


def attack_info(d):
    many_queues(d, 20000)
    pipelined_attack(d, "info", enc("INFO", "queues"), 100, lambda r: isinstance(r, bytes) and b"queue_1:" in r,
                     "INFO queues (20,000 queues: right if it lists queue 1)")


def attack_blpop_many(d):
    many_queues(d, 2000)
    s = Server(d)
    try:
        c = Conn(s.port)
        c.send(enc("BLPOP", *[f"q{i}" for i in range(1, 2001)], 0))
        time.sleep(1.0)
        share = cpu_share(s.pid, 3.0)
        threads = proc_status(s.pid, "Threads")
        Conn(s.port).cmd("RPUSH", "q1999", "x")
        got = c.read()
        print(f"blpop-many: one BLPOP over 2,000 queues, nothing pushed: {share * 100:.1f} % of a core over 3 s, "
              f"{threads} threads; a push then answered it: {got}")
    finally:
        s.stop()


def attack_lease_block(d, n=5000):
    tvmq(d, "create", 31, "--rows", 1000, "--size", 16, "--lease-ms", 30000)
    s = Server(d, ["--maxclients", str(n + 100)])
    try:
        # One lease in flight (held for 10 minutes), as on a busy queue.
        holder = Conn(s.port)
        holder.cmd("RPUSH", 31, "held")
        holder.cmd("TVMQ.LEASE", 31, "FOR", 600000)
        conns = []
        for _ in range(n):
            c = Conn(s.port)
            c.send(enc("TVMQ.LEASE", 31, "BLOCK", 0))
            conns.append(c)
        time.sleep(2.0)
        share = cpu_share(s.pid, 3.0)
        Conn(s.port).cmd("RPUSH", 31, "x")
        t = time.perf_counter()
        woken = None
        while woken is None and time.perf_counter() - t < 10:
            for c in conns:
                c.s.setblocking(False)
                try:
                    c.buf += c.s.recv(4096)
                except BlockingIOError:
                    pass
                c.s.setblocking(True)
                if c.buf:
                    woken = c.read()
                    break
        print(f"lease-block: {n} clients in TVMQ.LEASE BLOCK 0, one lease in flight, nothing pushed: {share * 100:.1f} % of a core "
              f"over 3 s; a push then leased to one: {woken}")
        for c in conns:
            c.close()
    finally:
        s.stop()


def attack_dup_keys(d, conns=3):
    tvmq(d, "create", 32, "--rows", 10, "--size", 16)
    s = Server(d)
    try:
        Conn(s.port).cmd("PING")
        before = proc_status(s.pid, "VmRSS")
        cmd = enc("BLPOP", *([32] * 1_000_000), 0)
        p = Pinger(s.port)
        held = []
        for _ in range(conns):
            c = Conn(s.port)
            c.send(cmd)
            held.append(c)
        deadline = time.time() + 60
        while time.time() < deadline:
            info = Conn(s.port).cmd("INFO", "clients")
            if f"blocked_clients:{conns}\r".encode() in info:
                break
            time.sleep(0.05)
        time.sleep(0.5)
        after = proc_status(s.pid, "VmRSS")
        ping = p.stop()
        print(f"dup-keys: {conns} clients each in BLPOP naming one key 1,000,000 times: RSS {before // 1024} -> "
              f"{after // 1024} MiB ({(after - before) / conns / 1024:.1f} MiB a connection); {ping}")
        for c in held:
            c.close()
    finally:
        s.stop()


def attack_huge(d, n=1_000_000):
    """One command with a million arguments at a time (each built before
    the pinger starts), on one connection, while another client PINGs:
    how long the command took, its reply, and the PINGs (on each worker:
    the worst on the attacker's shows what the command held)."""
    tvmq(d, "create", 32, "--rows", 10, "--size", 16)
    tvmq(d, "create", 33, "--rows", 10, "--size", 16, "--name", "named")
    tvmq(d, "create", 40, "--rows", n + 100_000, "--size", 16)
    tvmq(d, "create", 41, "--rows", 10, "--size", 16, "--lease-ms", 30000)
    attacks = [
        ("BLPOP 32 (1M times) 0", enc("BLPOP", *([32] * n), 0), True),
        ("BLPOP 32 named (500k times) 0", enc("BLPOP", *([32, "named"] * (n // 2)), 0), True),
        ("RPUSH 40 (1M values)", enc("RPUSH", 40, *(["v"] * n)), False),
        ("DEL 99 (1M times, missing)", enc("DEL", *([99] * n)), False),
        ("DEL of 1M missing ids", enc("DEL", *range(100_000, 100_000 + n)), False),
        ("DEL nosuch (1M times)", enc("DEL", *(["nosuch"] * n)), False),
        ("TVMQ.ACK 41 (1M ids)", enc("TVMQ.ACK", 41, *(["1-1"] * n)), False),
        ("CONFIG GET (1M patterns)", enc("CONFIG", "GET", *(["x*"] * n)), False),
        ("INFO (1M sections)", enc("INFO", *(["nosection"] * n)), False),
        ("COMMAND DOCS (1M names)", enc("COMMAND", "DOCS", *(["nocmd"] * n)), False),
        ("HELLO 3 SETNAME a (500k times)", enc("HELLO", 3, *(["SETNAME", "a"] * (n // 2))), False),
        ("an unknown command of 1M arguments", enc("FOO", *(["a"] * n)), False),
    ]
    s = Server(d)
    try:
        for name, cmd, blocks in attacks:
            c = Conn(s.port)
            c.cmd("PING")
            p = Pinger(s.port)
            t = time.perf_counter()
            c.send(cmd)
            if blocks:
                while b"blocked_clients:1\r" not in Conn(s.port).cmd("INFO", "clients"):
                    time.sleep(0.01)
                reply = "blocked"
            else:
                reply = c.read()
            took = time.perf_counter() - t
            time.sleep(0.1)
            p.stop()
            worst = " and ".join(f"{max(ts) * 1000:.1f}" for ts in p.times if ts)
            print(f"huge: {name}: {took * 1000:.0f} ms, {repr(reply)[:40]}; PING worst {worst} ms (one connection on each worker)")
            c.close()
            time.sleep(0.1)
            if name.startswith("RPUSH"):
                Conn(s.port).cmd("LTRIM", 40, 1, 0)
    finally:
        s.stop()


def peak_threads(pid, until):
    peak = 0
    while not until():
        peak = max(peak, proc_status(pid, "Threads"))
        time.sleep(0.005)
    return peak


def at_once(s, n, request, replies):
    """`n` connections each send `request(i)` at once, then read `replies`
    replies each, while another client PINGs: the server's threads before
    and at their peak, the seconds it took, the replies, the PINGs."""
    base = proc_status(s.pid, "Threads")
    conns = [Conn(s.port) for _ in range(n)]
    p = Pinger(s.port)
    for i, c in enumerate(conns):
        c.send(request(i))
    done = []
    t = threading.Thread(target=lambda: done.append([c.read() for c in conns for _ in range(replies)]))
    start = time.perf_counter()
    t.start()
    peak = peak_threads(s.pid, lambda: not t.is_alive())
    took = time.perf_counter() - start
    return base, peak, took, done[0], p.stop()


def attack_creations(d, n=600, delay_ms=20):
    s = Server(d, ["--auto-create", "10x16"], env={"TVMQ_SERVE_TEST_CREATE_DELAY_MS": str(delay_ms)})
    try:
        base, peak, took, got, ping = at_once(s, n, lambda i: enc("RPUSH", f"new{i}", "x"), 1)
        ok = sum(1 for r in got if r == 1)
        print(f"creations: {n} concurrent auto-creations (each slowed to {delay_ms} ms): threads {base} -> peak {peak}, "
              f"{ok}/{n} pushed in {took:.1f} s; {ping}")
    finally:
        s.stop()


def attack_repairs(d, n=200):
    tvmq(d, "create", 33, "--rows", 1_000_000, "--size", 16)
    s = Server(d)
    try:
        base, peak, took, got, ping = at_once(s, n, lambda i: enc("TVMQ.REPAIR", 33) * 2, 2)
        ok = sum(1 for r in got if r == 0)
        print(f"repairs: {n} connections x 2 TVMQ.REPAIR (1,000,000 rows): threads {base} -> peak {peak}, "
              f"{ok}/{2 * n} answered in {took:.1f} s; {ping}")
    finally:
        s.stop()


def attack_budget(d):
    opts = ["--auto-create", "10x16", "--max-queues", "5"]
    made = []
    for run in range(2):
        s = Server(d, opts)
        try:
            c = Conn(s.port)
            made.append(sum(1 for i in range(5) if c.cmd("RPUSH", f"run{run}-{i}", "x") == 1))
        finally:
            s.stop()
    a, b = Server(d, opts), Server(d, opts)
    try:
        both = sum(1 for s in (a, b) for i in range(5) if Conn(s.port).cmd("RPUSH", f"two{s.port}-{i}", "x") == 1)
    finally:
        a.stop()
        b.stop()
    files = len([f for f in os.listdir(d) if f.endswith(".tvmq")])
    print(f"budget: --max-queues 5: created {made[0]}, then {made[1]} after a restart, then {both} by two servers "
          f"at once; {files} queue files in the directory")


def attack_lease_times(d):
    tvmq(d, "create", 34, "--rows", 10, "--size", 16, "--lease-ms", 30000)
    s = Server(d)
    try:
        c = Conn(s.port)
        c.cmd("RPUSH", 34, "a")
        c.cmd("RPUSH", 34, "b")
        big = str(2**63 - 1)
        print(f"lease-times: TVMQ.LEASE 34 FOR 2^63-1: {c.cmd('TVMQ.LEASE', 34, 'FOR', big)}")
        got = c.cmd("TVMQ.LEASE", 34)
        if isinstance(got, list):
            new = c.cmd("TVMQ.EXTEND", 34, got[0], big)
            print(f"lease-times: TVMQ.EXTEND 34 id 2^63-1: {new}")
            lease_id = new if isinstance(new, bytes) else got[0]
            print(f"lease-times: TVMQ.RELEASE 34 id DELAY 2^63-1: {c.cmd('TVMQ.RELEASE', 34, lease_id, 'DELAY', big)}")
        stats = c.cmd("TVMQ.LEASES", 34)
        print(f"lease-times: then TVMQ.LEASES: {dict(zip(stats[::2], stats[1::2]))}")
    finally:
        s.stop()


def attack_ack(d):
    tvmq(d, "create", 35, "--rows", 10, "--size", 16, "--lease-ms", 30000)
    s = Server(d)
    try:
        c = Conn(s.port)
        c.cmd("RPUSH", 35, "a")
        c.cmd("RPUSH", 35, "b")
        a, b = c.cmd("TVMQ.LEASE", 35), c.cmd("TVMQ.LEASE", 35)
        reply = c.cmd("TVMQ.ACK", 35, a[0], "garbage", b[0])
        stats = c.cmd("TVMQ.LEASES", 35)
        print(f"ack: TVMQ.ACK 35 good garbage good: {reply}; then in-flight {dict(zip(stats[::2], stats[1::2]))[b'in-flight']}")
    finally:
        s.stop()


def attack_names(d):
    tvmq(d, "create", 36, "--rows", 10, "--size", 16, "--name", "real")
    forged = "x" + " " * 16 + "16" + " " * 10 + "10" + " " * 12 + "0  /fake\u00a0path"
    tvmq(d, "create", 37, "--rows", 10, "--size", 16, "--name", forged)
    out = subprocess.run([TVMQ, "--dir", d, "list"], check=True, capture_output=True, text=True).stdout
    print("names: tvmq list, a queue named with spaces:\n  " + "\n  ".join(out.splitlines()))


ATTACKS = {
    "leases": attack_leases,
    "info": attack_info,
    "blpop-many": attack_blpop_many,
    "lease-block": attack_lease_block,
    "dup-keys": attack_dup_keys,
    "huge": attack_huge,
    "creations": attack_creations,
    "repairs": attack_repairs,
    "budget": attack_budget,
    "lease-times": attack_lease_times,
    "ack": attack_ack,
    "names": attack_names,
}


def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 20000)), hard))
    names = sys.argv[1:] or list(ATTACKS)
    for name in names:
        d = tempfile.mkdtemp(prefix=f"tvmq-attack-{name}-", dir="/dev/shm")
        try:
            ATTACKS[name](d)
        finally:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
