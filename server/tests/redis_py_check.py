"""redis-py against tvmq serve (run by server/tests/tools.rs).

Pops the records a local producer pushed through shared memory and checks
them byte for byte (RESP2 client), then pushes records of its own (RESP3
client) for a local consumer to check.

usage: redis_py_check.py PORT KEY EXPECTED_HEX_FILE PUSHED_HEX_FILE
"""
import random
import sys

import redis


def main():
    port, key, expected_file, pushed_file = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    with open(expected_file) as f:
        expected = [bytes.fromhex(line.strip()) for line in f if line.strip()]

    # RESP2 (redis-py's default): LPOP, RPOP with a count, BLPOP, LLEN.
    r2 = redis.Redis(host="127.0.0.1", port=port, socket_timeout=20)
    assert r2.ping() is True
    assert r2.llen(key) == len(expected), (r2.llen(key), len(expected))
    got = []
    got.append(r2.lpop(key))
    got.extend(r2.rpop(key, 9))
    while len(got) < len(expected) - 5:
        got.append(r2.rpop(key))
    while len(got) < len(expected):
        k, v = r2.blpop([key], timeout=5)
        assert k.decode() == key, k
        got.append(v)
    assert r2.lpop(key) is None
    assert r2.blpop([key], timeout=0.1) is None
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g == e, f"record {i}: got {g!r}, expected {e!r}"
    assert len(got) == len(expected)
    try:
        r2.rpush(key, b"x" * 10_000)
        raise AssertionError("a value longer than the record size was accepted")
    except redis.ResponseError as e:
        assert str(e).startswith("RECD_TOO_LONG"), e

    # RESP3: pushes, one and several a call.
    r3 = redis.Redis(host="127.0.0.1", port=port, protocol=3, socket_timeout=20)
    rng = random.Random(7)
    mine = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 513))) for _ in range(100)]
    mine[0] = b"\r\n$-1\r\n*3\r\n"  # protocol bytes inside a value
    mine[1] = b"\x00" * 512
    depth = r3.rpush(key, mine[0])
    assert depth == 1, depth
    depth = r3.lpush(key, *mine[1:50])
    assert depth == 50, depth
    for m in mine[50:]:
        r3.rpush(key, m)
    assert r3.llen(key) == 100
    with open(pushed_file, "w") as f:
        for m in mine:
            f.write(m.hex() + "\n")
    print("redis-py: popped", len(got), "and pushed", len(mine), "records")


if __name__ == "__main__":
    main()
