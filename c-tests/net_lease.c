/*
 * net_lease.c: one lease sequence run against a local queue (lPopLease,
 * lAck, lRelease, lReject, lExtendLease), against tvmq serve and against a
 * redis-server or a Redis Cluster (their network twins lTvmPopLease,
 * lTvmAck, lTvmRelease, lTvmReject, lTvmExtendLease): the same TvmLease,
 * the same codes, the program changing only which calls it makes.
 *
 *   net_lease local                  (in $TVMDBD)
 *   net_lease HOST PORT tvmq DIR     (DIR: the server's queue directory)
 *   net_lease HOST PORT redis        (a redis-server or any node of a cluster)
 *
 * Queue 24 has leases (at most 3 deliveries, dead letter: queue 25), queue
 * 26 has none. The sequence: acknowledge (twice: LEASE_EXPIRED), release
 * and redeliver with the delivery count raised, extend (the old token
 * stale), reject to the dead-letter queue, release with a delay and a
 * blocking lease that waits for it, a lease that runs out, the delivery
 * limit (the third release dead-letters), the error codes. Against tvmq
 * serve also owner mode: a handle that disconnects holding a lease has its
 * record delivered again at once. Against Redis (queues made with
 * lTvmCreateQueueEx, options in {24}:opts) a lease is not the
 * connection's: a handle that disconnects holding one has its record
 * delivered again when the lease runs out. Exit 0 only if every check held.
 */
#include "check.h"

typedef struct {
    long (*push)(SATvm *);
    long (*pop)(SATvm *, void *, Uenum);
    long (*pop_lease)(SATvm *, void *, Uenum, long, TvmLease *);
    long (*ack)(SATvm *, TvmLease *);
    long (*release)(SATvm *, TvmLease *, long);
    long (*reject)(SATvm *, TvmLease *);
    long (*extend)(SATvm *, TvmLease *, long);
} lease_ops;

static const lease_ops LOCAL = { lPush, lPop, lPopLease, lAck, lRelease, lReject, lExtendLease };
static const lease_ops NET = { lTvmPush, lTvmPop, lTvmPopLease, lTvmAck, lTvmRelease, lTvmReject, lTvmExtendLease };

static void push_rec(const lease_ops *o, SATvm *p, TABLE t, long n)
{
    rec64 r;
    bind_rec(p, &r, t, n);
    CHECK_SUCC(o->push(p), p);
}

/* Leases the next record of queue 24 into *r (QUE_NOWAIT unless `wait`). */
static long take(const lease_ops *o, SATvm *p, rec64 *r, Uenum wait, long ms, TvmLease *l)
{
    queuevoid(p, *r, sizeof(*r), 24);
    return o->pop_lease(p, r, wait, ms, l);
}

/* Creates queues 24 (leases, dead letter 25), 25 and 26 (plain) in $TVMDBD. */
static void make_queues(SATvm *p)
{
    lDropTable(p, 24);
    lDropTable(p, 25);
    lDropTable(p, 26);
    TvmQueueOptions o;
    REQUIRE(lInitQueueOptions(&o, sizeof(o)) == RC_SUCC);
    o.rows = 100;
    o.record_size = sizeof(rec64);
    REQUIRE_SUCC(lCreateQueueEx(p, 25, &o), p);
    REQUIRE_SUCC(lCreateQueueEx(p, 26, &o), p);
    o.leases = true;
    o.lease_ms = 30000;
    o.max_deliveries = 3;
    o.has_dead_letter = true;
    o.dead_letter = 25;
    REQUIRE_SUCC(lCreateQueueEx(p, 24, &o), p);
}

/* The same on a Redis: only queue 24's lease options are kept (lists need
 * no creation); what a run before may have left is dropped first. */
static void make_redis_queues(SATvm *p)
{
    for (TABLE t = 24; t <= 26; t++)
        REQUIRE_SUCC(lTvmDropTable(p, t), p);
    TvmQueueOptions o;
    REQUIRE(lInitQueueOptions(&o, sizeof(o)) == RC_SUCC);
    o.leases = true;
    o.lease_ms = 30000;
    o.max_deliveries = 3;
    o.has_dead_letter = true;
    o.dead_letter = 25;
    REQUIRE_SUCC(lTvmCreateQueueEx(p, 24, &o), p);
    CHECK_FAIL(lTvmCreateQueueEx(p, 24, &o), p, TBL_ARD_EXIST);
    o.leases = false;
    CHECK_SUCC(lTvmCreateQueueEx(p, 26, &o), p);
}

static void sequence(const lease_ops *o, SATvm *p)
{
    rec64 r;
    TvmLease l, old;

    push_rec(o, p, 24, 1);
    push_rec(o, p, 24, 2);
    push_rec(o, p, 24, 3);

    /* Acknowledged: gone; a second acknowledgement is late. */
    CHECK_SUCC(take(o, p, &r, QUE_NOWAIT, 0, &l), p);
    CHECK_EQ(r.n, 1);
    CHECK_EQU(l.deliveries, 1);
    CHECK_EQ(p->m_lEffect, 1);
    p->tblName = 24;
    CHECK_SUCC(o->ack(p, &l), p);
    CHECK_FAIL(o->ack(p, &l), p, LEASE_EXPIRED);

    /* Released: delivered again first, its count raised. */
    CHECK_SUCC(take(o, p, &r, QUE_NOWAIT, 0, &l), p);
    CHECK_EQ(r.n, 2);
    CHECK_SUCC(o->release(p, &l, 0), p);
    CHECK_SUCC(take(o, p, &r, QUE_NOWAIT, 0, &l), p);
    CHECK_EQ(r.n, 2);
    CHECK_EQU(l.deliveries, 2);

    /* Extended: the old token is stale. Rejected: to the dead-letter queue. */
    old = l;
    CHECK_SUCC(o->extend(p, &l, 60000), p);
    CHECK_FAIL(o->ack(p, &old), p, LEASE_EXPIRED);
    CHECK_SUCC(o->reject(p, &l), p);
    CHECK_FAIL(o->ack(p, &l), p, LEASE_EXPIRED);
    queueinit(p, r, 25);
    CHECK_SUCC(o->pop(p, &r, QUE_NOWAIT), p);
    CHECK_EQ(r.n, 2);

    /* Released with a delay: a blocking lease waits for it. */
    CHECK_SUCC(take(o, p, &r, QUE_NOWAIT, 0, &l), p);
    CHECK_EQ(r.n, 3);
    p->tblName = 24;
    CHECK_SUCC(o->release(p, &l, 200), p);
    CHECK_FAIL(take(o, p, &r, QUE_NOWAIT, 0, &l), p, NO_DATA_FOUND);
    long long t0 = mono_ms();
    CHECK_SUCC(take(o, p, &r, QUE_NORMAL, 0, &l), p);
    long long waited = mono_ms() - t0;
    CHECK_EQ(r.n, 3);
    CHECK_EQU(l.deliveries, 2);
    CHECK(waited >= 100 && waited < 3000);
    p->tblName = 24;
    CHECK_SUCC(o->ack(p, &l), p);

    /* A lease that runs out: the late call fails, the record comes back. */
    push_rec(o, p, 24, 4);
    CHECK_SUCC(take(o, p, &r, QUE_NOWAIT, 100, &l), p);
    CHECK_EQ(r.n, 4);
    sleep_ms(300);
    p->tblName = 24;
    CHECK_FAIL(o->ack(p, &l), p, LEASE_EXPIRED);
    CHECK_SUCC(take(o, p, &r, QUE_NORMAL, 0, &l), p);
    CHECK_EQ(r.n, 4);
    CHECK_EQU(l.deliveries, 2);
    p->tblName = 24;
    CHECK_SUCC(o->ack(p, &l), p);

    /* The delivery limit (3): released a third time, it is dead-lettered. */
    push_rec(o, p, 24, 7);
    for (unsigned d = 1; d <= 3; d++) {
        CHECK_SUCC(take(o, p, &r, QUE_NOWAIT, 0, &l), p);
        CHECK_EQ(r.n, 7);
        CHECK_EQU(l.deliveries, d);
        p->tblName = 24;
        CHECK_SUCC(o->release(p, &l, 0), p);
    }
    CHECK_FAIL(take(o, p, &r, QUE_NOWAIT, 0, &l), p, NO_DATA_FOUND);
    queueinit(p, r, 25);
    CHECK_SUCC(o->pop(p, &r, QUE_NOWAIT), p);
    CHECK_EQ(r.n, 7);

    /* Errors. */
    CHECK_FAIL(take(o, p, &r, QUE_NOWAIT, 0, NULL), p, CONDIT_IS_NIL);
    CHECK_FAIL(take(o, p, &r, QUE_NOWAIT, -1, &l), p, CONDIT_IS_NIL);
    CHECK_FAIL(take(o, p, &r, QUE_NOWAIT, 0, &l), p, NO_DATA_FOUND);
    TvmLease zero;
    memset(&zero, 0, sizeof(zero));
    p->tblName = 24;
    CHECK_FAIL(o->ack(p, &zero), p, LEASE_INVALID);
    CHECK_FAIL(o->ack(p, NULL), p, CONDIT_IS_NIL);
    CHECK_FAIL(o->release(p, &zero, 0), p, LEASE_INVALID);
    CHECK_FAIL(o->reject(p, &zero), p, LEASE_INVALID);
    CHECK_FAIL(o->extend(p, &zero, 10), p, LEASE_INVALID);
    /* A queue without leases. */
    push_rec(o, p, 26, 9);
    queuevoid(p, r, sizeof(r), 26);
    CHECK_FAIL(o->pop_lease(p, &r, QUE_NOWAIT, 0, &l), p, NOT_SUPPT_OPT);
}

int main(int argc, char **argv)
{
    SATvm *p = (SATvm *)pCloneSATvm();
    if (argc == 2 && strcmp(argv[1], "local") == 0) {
        make_queues(p);
        sequence(&LOCAL, p);
        /* A local token is not a network one, and the other way round. */
        rec64 r;
        TvmLease l;
        push_rec(&LOCAL, p, 24, 5);
        CHECK_SUCC(take(&LOCAL, p, &r, QUE_NOWAIT, 0, &l), p);
        p->tblName = 24;
        CHECK_FAIL(lTvmAck(p, &l), p, LEASE_INVALID);
        CHECK_SUCC(lAck(p, &l), p);
        lDropTable(p, 24);
        lDropTable(p, 25);
        lDropTable(p, 26);
    } else if (argc == 5 && strcmp(argv[3], "tvmq") == 0) {
        REQUIRE(setenv("TVMDBD", argv[4], 1) == 0);
        make_queues(p);
        REQUIRE_SUCC(lTvmConnect(p, argv[1], atol(argv[2]), 5), p);
        CHECK_FAIL(lTvmRequireReplicas(p, 1, 100), p, NOT_SUPPT_OPT);
        sequence(&NET, p);

        /* Owner mode: a handle that goes away holding a lease. */
        SATvm *a = (SATvm *)pCloneSATvm();
        REQUIRE_SUCC(lTvmConnect(a, argv[1], atol(argv[2]), 5), a);
        rec64 r;
        TvmLease l, mine;
        push_rec(&NET, p, 24, 6);
        CHECK_SUCC(take(&NET, a, &r, QUE_NOWAIT, 0, &mine), a);
        CHECK_EQ(r.n, 6);
        CHECK_FAIL(take(&NET, p, &r, QUE_NOWAIT, 0, &l), p, NO_DATA_FOUND);
        /* Another handle cannot end it. */
        p->tblName = 24;
        CHECK_FAIL(lTvmAck(p, &mine), p, LEASE_EXPIRED);
        /* A local call refuses a network token. */
        CHECK_FAIL(lAck(p, &mine), p, LEASE_INVALID);
        long long t0 = mono_ms();
        vTvmDisconnect(a);
        CHECK_SUCC(take(&NET, p, &r, QUE_NORMAL, 0, &l), p);
        CHECK(mono_ms() - t0 < 1000);
        CHECK_EQ(r.n, 6);
        CHECK_EQU(l.deliveries, 2);
        p->tblName = 24;
        CHECK_SUCC(lTvmAck(p, &l), p);
        /* The disconnected handle's token: the server no longer knows it. */
        REQUIRE_SUCC(lTvmConnect(a, argv[1], atol(argv[2]), 5), a);
        a->tblName = 24;
        CHECK_FAIL(lTvmAck(a, &mine), a, LEASE_EXPIRED);
        vTvmDisconnect(a);
        vCloneFree(a);
        vTvmDisconnect(p);
        lDropTable(p, 24);
        lDropTable(p, 25);
        lDropTable(p, 26);
    } else if (argc == 4 && strcmp(argv[3], "redis") == 0) {
        REQUIRE_SUCC(lTvmConnect(p, argv[1], atol(argv[2]), 5), p);
        make_redis_queues(p);
        sequence(&NET, p);

        /* Not the connection's: a handle that goes away holding a lease
         * leaves it to run out; another handle may end it with the token. */
        SATvm *a = (SATvm *)pCloneSATvm();
        REQUIRE_SUCC(lTvmConnect(a, argv[1], atol(argv[2]), 5), a);
        rec64 r;
        TvmLease l, mine;
        push_rec(&NET, p, 24, 6);
        CHECK_SUCC(take(&NET, a, &r, QUE_NOWAIT, 300, &mine), a);
        CHECK_EQ(r.n, 6);
        vTvmDisconnect(a);
        CHECK_FAIL(take(&NET, p, &r, QUE_NOWAIT, 0, &l), p, NO_DATA_FOUND);
        long long t0 = mono_ms();
        CHECK_SUCC(take(&NET, p, &r, QUE_NORMAL, 0, &l), p);
        long long waited = mono_ms() - t0;
        CHECK(waited >= 150 && waited < 2000);
        CHECK_EQ(r.n, 6);
        CHECK_EQU(l.deliveries, 2);
        p->tblName = 24;
        CHECK_FAIL(lTvmAck(p, &mine), p, LEASE_EXPIRED);
        REQUIRE_SUCC(lTvmConnect(a, argv[1], atol(argv[2]), 5), a);
        a->tblName = 24;
        CHECK_SUCC(lTvmAck(a, &l), a);
        CHECK_FAIL(lTvmAck(p, &l), p, LEASE_EXPIRED);
        vTvmDisconnect(a);
        vCloneFree(a);
        /* lTvmAckPopLease: the acknowledgement and the next lease in one
         * call; a stale `done` does nothing (its deliveries not 0). */
        push_rec(&NET, p, 24, 11);
        push_rec(&NET, p, 24, 12);
        CHECK_SUCC(take(&NET, p, &r, QUE_NOWAIT, 0, &l), p);
        CHECK_EQ(r.n, 11);
        TvmLease first = l;
        queuevoid(p, r, sizeof(r), 24);
        CHECK_SUCC(lTvmAckPopLease(p, &l, &r, QUE_NOWAIT, 0, &l), p);
        CHECK_EQ(r.n, 12);
        CHECK_EQU(l.deliveries, 1);
        queuevoid(p, r, sizeof(r), 24);
        CHECK_FAIL(lTvmAckPopLease(p, &first, &r, QUE_NOWAIT, 0, &mine), p, LEASE_EXPIRED);
        CHECK(first.deliveries != 0);
        queuevoid(p, r, sizeof(r), 24);
        CHECK_FAIL(lTvmAckPopLease(p, &l, &r, QUE_NOWAIT, 0, &mine), p, NO_DATA_FOUND);
        CHECK_EQU(l.deliveries, 0);
        p->tblName = 24;
        CHECK_FAIL(lTvmAck(p, &mine), p, LEASE_INVALID);
        /* lTvmRequireReplicas on a master without replicas: REPL_TIMEOUT
         * after the timeout, the record pushed all the same. */
        CHECK_SUCC(lTvmRequireReplicas(p, 1, 50), p);
        bind_rec(p, &r, 26, 1);
        CHECK_FAIL(lTvmPush(p), p, REPL_TIMEOUT);
        /* Asynchronous pushes: lAsyWait waits for the replicas once. */
        for (long k = 2; k <= 4; k++) {
            bind_rec(p, &r, 26, k);
            CHECK_SUCC(lAsyPush(p), p);
        }
        CHECK_FAIL(lAsyWait(p), p, REPL_TIMEOUT);
        CHECK_EQ(p->m_lEffect, 3);
        CHECK_SUCC(lTvmRequireReplicas(p, 0, 0), p);
        size_t n = 0;
        p->tblName = 26;
        CHECK_SUCC(lTvmCount(p, &n), p);
        CHECK_EQU(n, 5); /* record 9 of the sequence, and these four */
        for (TABLE t = 24; t <= 26; t++)
            CHECK_SUCC(lTvmDropTable(p, t), p);
        vTvmDisconnect(p);
    } else {
        fprintf(stderr, "usage: net_lease local | HOST PORT tvmq DIR | HOST PORT redis\n");
        return 2;
    }
    vCloneFree(p);
    return __atomic_load_n(&g_failures, __ATOMIC_SEQ_CST) ? 1 : 0;
}
