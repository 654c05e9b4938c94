/*
 * test_lease.c: acknowledged consumption through the C API (tvm.h, "Beyond
 * STVM"): lPopLease, lAck, lRelease, lReject, lExtendLease and TvmLease,
 * every return value and error code their comments give: expiry and the
 * late call it fences off, extension, release with a delay, dead letter
 * after N deliveries and on rejection, the in-flight bound, a dropped queue,
 * stale tokens, tokens of another queue, NULL and garbage tokens, and a
 * consumer process that dies holding a lease. Queues with leases are made
 * with `$TVMQ create ... --lease-ms` (the CLI is how they are created), and
 * `$TVMQ stat` shows their leases.
 *
 * Run by run.sh as `test_lease NAME`, each test in a fresh $TVMDBD.
 */
#include "check.h"

/* Creates queue t of `rows` rec64 records with the lease options `opts`
 * (e.g. "--lease-ms 30000"), or stops the test. */
static void make_lease_queue(TABLE t, size_t rows, const char *opts)
{
    make_queue_cli(t, rows, sizeof(rec64), opts);
}

/* Pops with a lease from queue t into *out (QUE_NOWAIT, retried for up to
 * `ms` milliseconds: records coming back after a delay or an expiry). */
static long pop_lease_within(SATvm *p, TABLE t, rec64 *out, long lease_ms, TvmLease *l, long ms)
{
    long long until = mono_ms() + ms;
    long rc;
    queuevoid(p, *out, sizeof(*out), t);
    while ((rc = lPopLease(p, out, QUE_NOWAIT, lease_ms, l)) == RC_FAIL && p->m_lErrno == NO_DATA_FOUND &&
           mono_ms() < until)
        sleep_ms(2);
    return rc;
}

/* The token's size is fixed; lPopLease, lAck; a second lAck is refused;
 * records come in order; the record leaves the queue when it is leased. */
static void lease_pop_and_ack(void)
{
    SATvm *p = G();
    const TABLE t = 40;
    rec64 out;
    TvmLease l, l2;

    CHECK_EQU(sizeof(TvmLease), 64);
    make_lease_queue(t, 8, "--lease-ms 30000");
    REQUIRE(push_n(p, t, 1) && push_n(p, t, 2));
    queuevoid(p, out, sizeof(out), t);
    REQUIRE_SUCC(lPopLease(p, &out, QUE_NOWAIT, 0, &l), p);
    CHECK_EQ(p->m_lEffect, 1);
    CHECK_EQ(out.n, 1);
    CHECK_EQU(l.deliveries, 1);
    CHECK_EQ(depth(t), 1);
    CHECK_EQ(stat_num(t, "  in flight"), 1);
    REQUIRE_SUCC(lPopLease(p, &out, QUE_NORMAL, 5000, &l2), p);
    CHECK_EQ(out.n, 2);
    CHECK_EQ(stat_num(t, "  in flight"), 2);
    CHECK_SUCC(lAck(p, &l2), p);
    CHECK_SUCC(lAck(p, &l), p);
    CHECK_EQ(p->m_lEffect, 1);
    CHECK_FAIL(lAck(p, &l), p, LEASE_EXPIRED);
    CHECK_EQ(stat_num(t, "  in flight"), 0);
    CHECK_FAIL(lPopLease(p, &out, QUE_NOWAIT, 0, &l), p, NO_DATA_FOUND);
    /* A failed pop leaves a token every call refuses. */
    CHECK_FAIL(lAck(p, &l), p, LEASE_INVALID);
}

/* A lease that runs out: the record is delivered again (deliveries 2), the
 * late lAck, lRelease, lReject, lExtendLease are refused, never acting on
 * the new delivery. */
static void lease_expiry_fences_the_late_call(void)
{
    SATvm *p = G();
    const TABLE t = 40;
    rec64 out;
    TvmLease stale, again, copy;

    make_lease_queue(t, 8, "--lease-ms 30000");
    REQUIRE(push_n(p, t, 7));
    queuevoid(p, out, sizeof(out), t);
    REQUIRE_SUCC(lPopLease(p, &out, QUE_NOWAIT, 40, &stale), p);
    CHECK_FAIL(lPopLease(p, &out, QUE_NOWAIT, 0, &again), p, NO_DATA_FOUND);
    sleep_ms(60);
    CHECK_FAIL(lAck(p, &stale), p, LEASE_EXPIRED);
    REQUIRE_SUCC(pop_lease_within(p, t, &out, 0, &again, 10000), p);
    CHECK_EQ(out.n, 7);
    CHECK_EQU(again.deliveries, 2);
    CHECK_FAIL(lAck(p, &stale), p, LEASE_EXPIRED);
    CHECK_FAIL(lRelease(p, &stale, 0), p, LEASE_EXPIRED);
    CHECK_FAIL(lReject(p, &stale), p, LEASE_EXPIRED);
    copy = stale;
    CHECK_FAIL(lExtendLease(p, &copy, 1000), p, LEASE_EXPIRED);
    CHECK_SUCC(lAck(p, &again), p);
    CHECK_EQ(stat_num(t, "  expired"), 1);
    CHECK_EQ(stat_num(t, "  redelivered"), 1);
}

/* lExtendLease: the lease holds past its first deadline; the token is
 * updated and its old copy is stale; 0 means the queue's lease time. */
static void lease_extension(void)
{
    SATvm *p = G();
    const TABLE t = 40;
    rec64 out;
    TvmLease l, old, other;

    make_lease_queue(t, 8, "--lease-ms 30000");
    REQUIRE(push_n(p, t, 3));
    queuevoid(p, out, sizeof(out), t);
    REQUIRE_SUCC(lPopLease(p, &out, QUE_NOWAIT, 50, &l), p);
    old = l;
    CHECK_SUCC(lExtendLease(p, &l, 20000), p);
    CHECK_EQ(p->m_lEffect, 1);
    CHECK_EQU(l.deliveries, 1);
    sleep_ms(100);
    CHECK_FAIL(lPopLease(p, &out, QUE_NOWAIT, 0, &other), p, NO_DATA_FOUND);
    CHECK_FAIL(lAck(p, &old), p, LEASE_EXPIRED);
    CHECK_FAIL(lExtendLease(p, &l, -1), p, CONDIT_IS_NIL);
    CHECK_FAIL(lExtendLease(p, &l, 31536000001L), p, CONDIT_IS_NIL); /* over a year */
    CHECK_SUCC(lExtendLease(p, &l, 0), p);
    CHECK_SUCC(lAck(p, &l), p);
}

/* lRelease with a delay: not delivered before it, delivered after it with
 * deliveries 2; a negative delay, or one over a year, is refused; the
 * released token is spent. */
static void lease_release_with_delay(void)
{
    SATvm *p = G();
    const TABLE t = 40;
    rec64 out;
    TvmLease l, again;

    make_lease_queue(t, 8, "--lease-ms 30000");
    REQUIRE(push_n(p, t, 9));
    queuevoid(p, out, sizeof(out), t);
    REQUIRE_SUCC(lPopLease(p, &out, QUE_NOWAIT, 0, &l), p);
    CHECK_FAIL(lRelease(p, &l, -5), p, CONDIT_IS_NIL);
    CHECK_FAIL(lRelease(p, &l, 31536000001L), p, CONDIT_IS_NIL); /* over a year */
    long long released = mono_ms();
    CHECK_SUCC(lRelease(p, &l, 150), p);
    CHECK_EQ(p->m_lEffect, 1);
    CHECK_FAIL(lAck(p, &l), p, LEASE_EXPIRED);
    CHECK_FAIL(lPopLease(p, &out, QUE_NOWAIT, 0, &again), p, NO_DATA_FOUND);
    CHECK_EQ(stat_num(t, "  waiting"), 1);
    /* A blocking pop sleeps until it is due. */
    queuevoid(p, out, sizeof(out), t);
    REQUIRE_SUCC(lPopLease(p, &out, QUE_NORMAL, 0, &again), p);
    CHECK(mono_ms() - released >= 150);
    CHECK_EQ(out.n, 9);
    CHECK_EQU(again.deliveries, 2);
    /* Released at once: taken by the next pop. */
    CHECK_SUCC(lRelease(p, &again, 0), p);
    REQUIRE_SUCC(lPopLease(p, &out, QUE_NOWAIT, 0, &l), p);
    CHECK_EQU(l.deliveries, 3);
    CHECK_SUCC(lAck(p, &l), p);
    CHECK_EQ(stat_num(t, "  released"), 2);
}

/* --max-deliveries 2 --dead-letter 41: the record released twice goes to
 * queue 41 on its second release; lReject sends a record there at once;
 * without a dead-letter queue, lReject drops it (counted). */
static void lease_dead_letter(void)
{
    SATvm *p = G();
    const TABLE t = 40, dlq = 41, plain = 42;
    rec64 out;
    TvmLease l;

    make_queue(dlq, 8, sizeof(rec64)); /* first: tvmq create warns of a missing one */
    make_lease_queue(t, 8, "--max-deliveries 2 --dead-letter 41");
    REQUIRE(push_n(p, t, 1) && push_n(p, t, 2));
    queuevoid(p, out, sizeof(out), t);
    REQUIRE_SUCC(lPopLease(p, &out, QUE_NOWAIT, 0, &l), p);
    CHECK_EQ(out.n, 1);
    CHECK_SUCC(lRelease(p, &l, 0), p);
    REQUIRE_SUCC(lPopLease(p, &out, QUE_NOWAIT, 0, &l), p);
    CHECK_EQ(out.n, 1);
    CHECK_EQU(l.deliveries, 2);
    CHECK_SUCC(lRelease(p, &l, 0), p); /* its second delivery: dead letter */
    CHECK_EQ(depth(dlq), 1);
    REQUIRE_SUCC(lPopLease(p, &out, QUE_NOWAIT, 0, &l), p);
    CHECK_EQ(out.n, 2);
    CHECK_SUCC(lReject(p, &l), p);
    CHECK_EQ(p->m_lEffect, 1);
    CHECK_FAIL(lAck(p, &l), p, LEASE_EXPIRED);
    CHECK_EQ(depth(dlq), 2);
    CHECK_EQ(depth(t), 0);
    expect_pop_n(p, dlq, 1, __FILE__, __LINE__);
    expect_pop_n(p, dlq, 2, __FILE__, __LINE__);
    CHECK_EQ(stat_num(t, "  dead-lettered"), 2);

    make_lease_queue(plain, 8, "--lease-ms 1000");
    REQUIRE(push_n(p, plain, 5));
    queuevoid(p, out, sizeof(out), plain);
    REQUIRE_SUCC(lPopLease(p, &out, QUE_NOWAIT, 0, &l), p);
    CHECK_SUCC(lReject(p, &l), p);
    CHECK_EQ(depth(plain), 0);
    char v[256];
    REQUIRE(stat_value(plain, "  dead-lettered", v, sizeof(v)));
    CHECK(strstr(v, "1 dropped") != NULL);
}

/* A dead-letter queue that does not exist: lReject fails with
 * TBL_NOT_FOUND and the lease is still held (lAck succeeds). */
static void lease_reject_without_its_queue(void)
{
    SATvm *p = G();
    const TABLE t = 40;
    rec64 out;
    TvmLease l;

    make_lease_queue(t, 8, "--dead-letter 49 2>/dev/null"); /* its warning: queue 49 is missing */
    REQUIRE(push_n(p, t, 1));
    queuevoid(p, out, sizeof(out), t);
    REQUIRE_SUCC(lPopLease(p, &out, QUE_NOWAIT, 0, &l), p);
    CHECK_FAIL(lReject(p, &l), p, TBL_NOT_FOUND);
    CHECK_SUCC(lAck(p, &l), p);
}

/* --max-leases 2: a third lease is refused with LEASE_LIMIT at once, even
 * a blocking pop, and takes nothing; an acknowledgement makes room. */
static void lease_in_flight_bound(void)
{
    SATvm *p = G();
    const TABLE t = 40;
    rec64 out;
    TvmLease a, b, c;

    make_lease_queue(t, 8, "--max-leases 2");
    REQUIRE(push_n(p, t, 1) && push_n(p, t, 2) && push_n(p, t, 3));
    queuevoid(p, out, sizeof(out), t);
    REQUIRE_SUCC(lPopLease(p, &out, QUE_NOWAIT, 0, &a), p);
    REQUIRE_SUCC(lPopLease(p, &out, QUE_NOWAIT, 0, &b), p);
    long long t0 = mono_ms();
    CHECK_FAIL(lPopLease(p, &out, QUE_NORMAL, 0, &c), p, LEASE_LIMIT);
    CHECK(mono_ms() - t0 < 5000);
    CHECK_EQ(depth(t), 1);
    CHECK_SUCC(lAck(p, &a), p);
    REQUIRE_SUCC(lPopLease(p, &out, QUE_NOWAIT, 0, &c), p);
    CHECK_EQ(out.n, 3);
    CHECK_SUCC(lAck(p, &b), p);
    CHECK_SUCC(lAck(p, &c), p);
}

/* NULL handle, NULL lease, NULL buffer, negative lease time, a zeroed, a
 * garbage and an altered token, a token of another queue, lPopLease on a
 * plain queue, a token on a plain queue, a dropped queue. */
static void lease_bad_tokens(void)
{
    SATvm *p = G();
    const TABLE t = 40, u = 43, plain = 44;
    rec64 out;
    TvmLease l, m, bad, bad2;

    make_lease_queue(t, 8, "--lease-ms 30000");
    make_lease_queue(u, 8, "--lease-ms 30000");
    make_queue(plain, 8, sizeof(rec64));
    REQUIRE(push_n(p, t, 1) && push_n(p, u, 2) && push_n(p, plain, 3));

    CHECK_FAIL_NOH(lPopLease(NULL, &out, QUE_NOWAIT, 0, &l), CONDIT_IS_NIL);
    CHECK_FAIL_NOH(lAck(NULL, &l), CONDIT_IS_NIL);
    CHECK_FAIL_NOH(lRelease(NULL, &l, 0), CONDIT_IS_NIL);
    CHECK_FAIL_NOH(lReject(NULL, &l), CONDIT_IS_NIL);
    CHECK_FAIL_NOH(lExtendLease(NULL, &l, 0), CONDIT_IS_NIL);

    queuevoid(p, out, sizeof(out), t);
    CHECK_FAIL(lPopLease(p, &out, QUE_NOWAIT, 0, NULL), p, CONDIT_IS_NIL);
    CHECK_FAIL(lPopLease(p, NULL, QUE_NOWAIT, 0, &l), p, CONDIT_IS_NIL);
    CHECK_FAIL(lPopLease(p, &out, QUE_NOWAIT, -1, &l), p, CONDIT_IS_NIL);
    CHECK_FAIL(lPopLease(p, &out, QUE_NOWAIT, 31536000001L, &l), p, CONDIT_IS_NIL); /* over a year */
    CHECK_EQ(depth(t), 1); /* nothing taken */
    REQUIRE_SUCC(lPopLease(p, &out, QUE_NOWAIT, 0, &l), p);
    queuevoid(p, out, sizeof(out), u);
    REQUIRE_SUCC(lPopLease(p, &out, QUE_NOWAIT, 0, &m), p);

    p->tblName = t;
    CHECK_FAIL(lAck(p, NULL), p, CONDIT_IS_NIL);
    CHECK_FAIL(lRelease(p, NULL, 0), p, CONDIT_IS_NIL);
    CHECK_FAIL(lReject(p, NULL), p, CONDIT_IS_NIL);
    CHECK_FAIL(lExtendLease(p, NULL, 0), p, CONDIT_IS_NIL);
    memset(&bad, 0, sizeof(bad));
    CHECK_FAIL(lAck(p, &bad), p, LEASE_INVALID);
    memset(&bad, 0xab, sizeof(bad));
    CHECK_FAIL(lAck(p, &bad), p, LEASE_INVALID);
    CHECK_FAIL(lExtendLease(p, &bad, 0), p, LEASE_INVALID);
    for (size_t k = sizeof(unsigned int); k < sizeof(TvmLease); k++) {
        bad = l;
        ((unsigned char *)&bad)[k] ^= 0x10;
        if (lAck(p, &bad) != RC_FAIL || p->m_lErrno != LEASE_INVALID)
            fail_at(__FILE__, __LINE__, "token altered at byte %zu: m_lErrno %u", k, p->m_lErrno);
    }
    /* The public member may be scribbled on: the token stays good. */
    bad = l;
    bad.deliveries = 99;
    /* Tokens of queue u on queue t, and of t on u and on a plain queue. */
    CHECK_FAIL(lAck(p, &m), p, LEASE_INVALID);
    CHECK_FAIL(lRelease(p, &m, 0), p, LEASE_INVALID);
    CHECK_FAIL(lReject(p, &m), p, LEASE_INVALID);
    CHECK_FAIL(lExtendLease(p, &m, 0), p, LEASE_INVALID);
    p->tblName = u;
    CHECK_FAIL(lAck(p, &l), p, LEASE_INVALID);
    p->tblName = plain;
    CHECK_FAIL(lAck(p, &l), p, LEASE_INVALID);
    queuevoid(p, out, sizeof(out), plain);
    CHECK_FAIL(lPopLease(p, &out, QUE_NOWAIT, 0, &bad2), p, NOT_SUPPT_OPT);
    CHECK_FAIL(lAck(p, &bad2), p, LEASE_INVALID); /* a failed pop's token */
    CHECK_EQ(depth(plain), 1);
    /* Still good on their own queues (the scribbled copy too). */
    p->tblName = t;
    CHECK_SUCC(lAck(p, &bad), p);
    CHECK_FAIL(lAck(p, &l), p, LEASE_EXPIRED);
    /* A dropped queue: TBL_NOT_FOUND; re-created under the same id, the
     * old queue's token is not its. */
    p->tblName = u;
    REQUIRE_SUCC(lDropTable(p, u), p);
    CHECK_FAIL(lAck(p, &m), p, TBL_NOT_FOUND);
    make_lease_queue(u, 8, "--lease-ms 30000");
    REQUIRE(push_n(p, u, 4));
    p->tblName = u;
    CHECK_FAIL(lAck(p, &m), p, LEASE_INVALID);
}

/* A consumer process that dies holding a lease (30 s long): its record is
 * delivered again within a sweep (milliseconds), deliveries 2. */
static void lease_dead_consumer(void)
{
    SATvm *p = G();
    const TABLE t = 40;
    rec64 out;
    TvmLease l;
    int fds[2];

    make_lease_queue(t, 8, "--lease-ms 30000");
    REQUIRE(push_n(p, t, 5) && push_n(p, t, 6));
    REQUIRE(pipe(fds) == 0);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        SATvm *c = (SATvm *)pCloneSATvm();
        rec64 mine;
        TvmLease held;
        queuevoid(c, mine, sizeof(mine), t);
        if (lPopLease(c, &mine, QUE_NOWAIT, 0, &held) != RC_SUCC || mine.n != 5)
            _exit(1);
        if (write(fds[1], "x", 1) != 1)
            _exit(1);
        pause(); /* killed holding it */
        _exit(1);
    }
    remember_child(pid);
    char c;
    REQUIRE(read(fds[0], &c, 1) == 1);
    CHECK_EQ(stat_num(t, "  in flight"), 1);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    forget_child(pid);
    long long t0 = mono_ms();
    long seen5 = 0, seen6 = 0;
    for (int i = 0; i < 2; i++) {
        REQUIRE_SUCC(pop_lease_within(p, t, &out, 0, &l, 20000), p);
        if (out.n == 5) {
            seen5++;
            CHECK_EQU(l.deliveries, 2);
        } else {
            seen6++;
            CHECK_EQ(out.n, 6);
            CHECK_EQU(l.deliveries, 1);
        }
        CHECK_SUCC(lAck(p, &l), p);
    }
    CHECK(seen5 == 1 && seen6 == 1);
    CHECK(mono_ms() - t0 < 20000);
    CHECK_EQ(stat_num(t, "  orphaned"), 1);
}

/* lAckPopLease: acknowledges and leases in one call (the same token for
 * both, or two); the records come in order, each once; on failure,
 * done->deliveries says whether the acknowledgement was made. */
static void lease_ack_pop_lease(void)
{
    SATvm *p = G();
    const TABLE t = 40;
    rec64 out;
    TvmLease l, done, stale;

    make_lease_queue(t, 8, "--lease-ms 30000");
    REQUIRE(push_n(p, t, 1) && push_n(p, t, 2) && push_n(p, t, 3));
    queuevoid(p, out, sizeof(out), t);
    REQUIRE_SUCC(lPopLease(p, &out, QUE_NOWAIT, 0, &l), p);
    CHECK_EQ(out.n, 1);
    stale = l;
    /* The same token: acknowledged 1, leased 2. */
    REQUIRE_SUCC(lAckPopLease(p, &l, &out, QUE_NOWAIT, 0, &l), p);
    CHECK_EQ(p->m_lEffect, 1);
    CHECK_EQ(out.n, 2);
    CHECK_EQU(l.deliveries, 1);
    CHECK_EQ(stat_num(t, "  in flight"), 1);
    /* Two tokens: acknowledged 2 (its token refused from now on), leased 3. */
    done = l;
    REQUIRE_SUCC(lAckPopLease(p, &done, &out, QUE_NORMAL, 5000, &l), p);
    CHECK_EQ(out.n, 3);
    CHECK_EQU(done.deliveries, 0);
    CHECK_FAIL(lAck(p, &done), p, LEASE_INVALID);
    /* The acknowledgement fails: nothing taken, nothing changed. */
    done = l;
    CHECK_FAIL(lAckPopLease(p, &stale, &out, QUE_NOWAIT, 0, &done), p, LEASE_EXPIRED);
    CHECK_EQU(stale.deliveries, 1);
    CHECK(memcmp(&done, &l, sizeof(l)) == 0);
    CHECK_EQ(stat_num(t, "  in flight"), 1);
    /* Acknowledged, then the queue is empty: done->deliveries is 0. */
    done = l;
    CHECK_FAIL(lAckPopLease(p, &done, &out, QUE_NOWAIT, 0, &l), p, NO_DATA_FOUND);
    CHECK_EQU(done.deliveries, 0);
    CHECK_EQU(l.deliveries, 0);
    CHECK_EQ(stat_num(t, "  in flight"), 0);
    CHECK_EQ(depth(t), 0);
    /* NULLs and a negative lease time: nothing acknowledged. */
    REQUIRE(push_n(p, t, 4));
    REQUIRE_SUCC(lPopLease(p, &out, QUE_NOWAIT, 0, &l), p);
    CHECK_FAIL(lAckPopLease(p, NULL, &out, QUE_NOWAIT, 0, &l), p, CONDIT_IS_NIL);
    CHECK_FAIL(lAckPopLease(p, &l, NULL, QUE_NOWAIT, 0, &l), p, CONDIT_IS_NIL);
    CHECK_FAIL(lAckPopLease(p, &l, &out, QUE_NOWAIT, -1, &l), p, CONDIT_IS_NIL);
    CHECK_FAIL(lAckPopLease(p, &l, &out, QUE_NOWAIT, 31536000001L, &l), p, CONDIT_IS_NIL);
    CHECK_EQU(l.deliveries, 1);
    CHECK_SUCC(lAck(p, &l), p);
}

TEST_MAIN(T(lease_pop_and_ack), T(lease_expiry_fences_the_late_call), T(lease_extension),
          T(lease_release_with_delay), T(lease_dead_letter), T(lease_reject_without_its_queue),
          T(lease_in_flight_bound), T(lease_bad_tokens), T(lease_dead_consumer), T(lease_ack_pop_lease))
