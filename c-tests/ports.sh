# c-tests/ports.sh: free loopback ports for the C tests' servers, sourced by
# c-tests/run.sh and c-tests/failover.sh (one copy of each helper).

# port_below_ephemeral OFFSET...: a port P in 20000-29999, below the
# kernel's ephemeral range, with P + OFFSET free too for each OFFSET (0:
# P itself). Below that range, no outgoing connection of any process takes
# it between this look and the server's bind (a port the kernel hands out,
# bind(port 0), is one the next connect(2) may take meanwhile), and a
# server killed there can be started again on it.
port_below_ephemeral() {
    python3 - "$@" <<'PY'
import random, socket, sys
offsets = [int(a) for a in sys.argv[1:]]
for _ in range(500):
    p = random.randint(20000, 29999)
    try:
        for q in offsets:
            s = socket.socket()
            s.bind(("127.0.0.1", p + q))
            s.close()
    except OSError:
        continue
    print(p)
    break
PY
}

# free_port: a TCP port of 127.0.0.1 that nothing is bound to now (see
# port_below_ephemeral).
free_port() { port_below_ephemeral 0; }

# steady_port: the same, with P + 10000 free too (a Redis Cluster node's
# bus port).
steady_port() { port_below_ephemeral 0 10000; }
