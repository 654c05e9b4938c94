# c-tests/ports.sh: free loopback ports for the C tests' servers, sourced by
# c-tests/run.sh and c-tests/failover.sh (one copy of each helper).

# free_port: a TCP port of 127.0.0.1 that nothing is bound to now.
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# steady_port: a port P in 20000-29999, below the kernel's ephemeral range
# (so no outgoing connection takes it meanwhile: a server killed there can
# be started again on it), with P + 10000 free too (a Redis Cluster node's
# bus port).
steady_port() {
    python3 - <<'PY'
import random, socket
for _ in range(500):
    p = random.randint(20000, 29999)
    try:
        for q in (p, p + 10000):
            s = socket.socket()
            s.bind(("127.0.0.1", q))
            s.close()
    except OSError:
        continue
    print(p)
    break
PY
}
