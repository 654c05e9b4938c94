#!/usr/bin/env python3
"""Makes the README's pictures of "Watching it": docs/dashboard.png (the web
dashboard of `tvmq serve --metrics-port`, in headless Chromium driven in real
time by chromedriver, after a minute of a workload) and docs/top.png (`tvmq
top` in tmux, its screen drawn as HTML and photographed by Chromium).

    python3 scripts/screenshots.py [TVMQ]    # TVMQ: the tvmq binary (default target/release/tvmq)

Needs chromium, chromium-driver and tmux (Debian). Works in a queue directory of
its own under /dev/shm, removed at the end; stops everything it starts.
"""

import base64
import html
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TVMQ = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target/release/tvmq")
SECONDS = int(os.environ.get("SCREENSHOT_SECONDS", "75"))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Conn:
    """A RESP connection, one command at a time."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.f = self.sock.makefile("rb")

    def reply(self):
        line = self.f.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"$":
            return None if rest == b"-1" else self.f.read(int(rest) + 2)[:-2]
        if kind == b"*":
            return None if rest == b"-1" else [self.reply() for _ in range(int(rest))]
        return rest

    def __call__(self, *args):
        self.sock.sendall(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args))
        return self.reply()


def workload(port, stop):
    """Orders arrive faster than they are taken for a while, then slower; jobs steadily."""
    s = Conn(port)
    t0 = time.time()
    n = 0
    while not stop.is_set():
        t = time.time() - t0
        push_per_s = 300 if (t // 20) % 2 == 0 else 120
        s(b"RPUSH", b"21", b"order %d" % n)
        if n % 3 != 2:
            s(b"LPOP", b"21")
        if n % 2 == 0:
            s(b"RPUSH", b"22", b"invoice %d" % n)
            if n % 4 == 0:
                s(b"LPOP", b"22")
        s(b"RPUSH", b"23", b"mail %d" % n)
        s(b"LPOP", b"23")
        n += 1
        time.sleep(1 / push_per_s)


def webdriver(port, method, path, body=None):
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def chromium_flags(profile):
    return ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--hide-scrollbars", f"--user-data-dir={profile}"]


def dashboard(url, out):
    port = free_port()
    driver = subprocess.Popen(["chromedriver", f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    profile = tempfile.mkdtemp(prefix="tvmq-shot-")
    try:
        for _ in range(100):
            try:
                webdriver(port, "GET", "/status")
                break
            except OSError:
                time.sleep(0.1)
        caps = {"capabilities": {"alwaysMatch": {"goog:chromeOptions": {
            "binary": shutil.which("chromium"), "args": chromium_flags(profile) + ["--window-size=1280,900"]}}}}
        session = webdriver(port, "POST", "/session", caps)["value"]["sessionId"]
        webdriver(port, "POST", f"/session/{session}/url", {"url": url})
        time.sleep(SECONDS)
        png = webdriver(port, "GET", f"/session/{session}/screenshot")["value"]
        with open(out, "wb") as f:
            f.write(base64.b64decode(png))
        webdriver(port, "DELETE", f"/session/{session}")
    finally:
        driver.terminate()
        driver.wait()
        shutil.rmtree(profile, ignore_errors=True)


COLORS = {30: "#000", 31: "#c33", 32: "#3a3", 33: "#c90", 34: "#36c", 35: "#a3a", 36: "#099", 37: "#ccc",
          90: "#777", 91: "#f55", 92: "#5d5", 93: "#fd5", 94: "#59f", 95: "#e6e", 96: "#5dd", 97: "#fff"}


def ansi_to_html(text):
    """tmux's capture-pane -e text (SGR colours, bold, reverse) as HTML spans."""
    out, fg, bg, bold, rev = [], None, None, False, False
    for part in re.split(r"(\x1b\[[0-9;]*m)", text):
        m = re.fullmatch(r"\x1b\[([0-9;]*)m", part)
        if not m:
            if part:
                f, b = (bg or "#1e1e1e", fg or "#ddd") if rev else (fg, bg)
                style = (f"color:{f};" if f else "") + (f"background:{b};" if b else "") + ("font-weight:bold;" if bold else "")
                out.append(f'<span style="{style}">{html.escape(part)}</span>' if style else html.escape(part))
            continue
        codes = [int(c) for c in m.group(1).split(";") if c] or [0]
        i = 0
        while i < len(codes):
            c = codes[i]
            if c == 0:
                fg, bg, bold, rev = None, None, False, False
            elif c == 1:
                bold = True
            elif c == 7:
                rev = True
            elif c == 22:
                bold = False
            elif c == 27:
                rev = False
            elif c in COLORS:
                fg = COLORS[c]
            elif 40 <= c <= 47 or 100 <= c <= 107:
                bg = COLORS[c - 10]
            elif c == 39:
                fg = None
            elif c == 49:
                bg = None
            elif c in (38, 48) and i + 2 < len(codes) and codes[i + 1] == 5:
                i += 2
            i += 1
    return "".join(out)


def top(tvmq, qdir, out):
    sock = os.path.join(qdir, "tmux.sock")
    tm = ["tmux", "-S", sock]
    subprocess.run(tm + ["new-session", "-d", "-s", "top", "-x", "150", "-y", "24",
                         f"{tvmq} --dir {qdir} top --interval 1"], check=True)
    try:
        time.sleep(4)
        screen = subprocess.run(tm + ["capture-pane", "-e", "-p", "-t", "top"], check=True,
                                capture_output=True, text=True).stdout
    finally:
        subprocess.run(tm + ["kill-server"], capture_output=True)
    page = os.path.join(qdir, "top.html")
    with open(page, "w") as f:
        f.write('<!doctype html><meta charset="utf-8"><body style="margin:0;background:#1e1e1e">'
                '<pre style="margin:8px;font:13px/1.25 \'DejaVu Sans Mono\',monospace;color:#ddd">'
                + ansi_to_html(screen) + "</pre>")
    profile = tempfile.mkdtemp(prefix="tvmq-shot-")
    try:
        subprocess.run(["chromium"] + chromium_flags(profile) + ["--window-size=1300,400", f"--screenshot={out}",
                        "file://" + page], check=True, capture_output=True)
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def main():
    qdir = tempfile.mkdtemp(prefix="tvmq-shots-", dir="/dev/shm")
    server = None
    stop = threading.Event()
    try:
        for qid, name, rows in [(21, "ORDERS", 100000), (22, "INVOICES", 20000), (23, "EMAILS", 5000)]:
            subprocess.run([TVMQ, "--dir", qdir, "create", str(qid), "--rows", str(rows), "--size", "64",
                            "--name", name], check=True, capture_output=True)
        subprocess.run([TVMQ, "--dir", qdir, "create", "24", "--rows", "1000", "--size", "64", "--name", "JOBS",
                        "--lease-ms", "30000"], check=True, capture_output=True)
        port, mport = free_port(), free_port()
        server = subprocess.Popen([TVMQ, "--dir", qdir, "serve", "--port", str(port), "--metrics-port", str(mport)],
                                  stdout=subprocess.DEVNULL)
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port)).close()
                break
            except OSError:
                time.sleep(0.05)
        s = Conn(port)
        for i in range(40):
            s(b"RPUSH", b"24", b"job %d" % i)
        for _ in range(7):
            s(b"TVMQ.LEASE", b"24")
        threading.Thread(target=workload, args=(port, stop), daemon=True).start()
        top(TVMQ, qdir, os.path.join(ROOT, "docs/top.png"))
        dashboard(f"http://127.0.0.1:{mport}/#ids=21,22,23", os.path.join(ROOT, "docs/dashboard.png"))
    finally:
        stop.set()
        if server:
            server.terminate()
            server.wait()
        subprocess.run([TVMQ, "--dir", qdir, "drop", "24"], capture_output=True)
        shutil.rmtree(qdir, ignore_errors=True)
    print("wrote docs/top.png and docs/dashboard.png")


if __name__ == "__main__":
    main()
