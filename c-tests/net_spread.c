/*
 * net_spread.c: a queue spread over the masters of a Redis Cluster
 * (lTvmSpread), against any node of it (run.sh: the 3-master cluster).
 *
 *   net_spread HOST PORT push|pop|sparse|lease N
 *
 * Queue 41 over 6 shards. push: N records (n = 1 .. N), round-robin; the
 * count is N (lTvmCount sums the shards). pop: N records, each once,
 * the queue empty after. sparse: N records all in one shard, each popped
 * (QUE_NOWAIT) in order by a handle looking at the shards in turn, then
 * NO_DATA_FOUND. lease: lease options on every shard, N records
 * pushed, leased and acknowledged (half released once first: delivered
 * again with their count raised), each once; the queue dropped after.
 * run.sh checks with redis-cli between push and pop that every master
 * holds shards. Exit 0 only if every check held.
 */
#include "check.h"

#define SQ 41
#define SHARDS 6

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: net_spread HOST PORT push|pop|sparse|lease N\n");
        return 2;
    }
    long n = atol(argv[4]);
    REQUIRE(n > 0 && n <= 1000000);
    SATvm *p = (SATvm *)pCloneSATvm();
    REQUIRE_SUCC(lTvmConnect(p, argv[1], atol(argv[2]), 5), p);
    CHECK_FAIL(lTvmSpread(p, SQ, -1), p, CONDIT_IS_NIL);
    CHECK_FAIL(lTvmSpread(p, SQ, 1025), p, CONDIT_IS_NIL);
    REQUIRE_SUCC(lTvmSpread(p, SQ, SHARDS), p);
    unsigned char *seen = calloc((size_t)n + 1, 1);
    REQUIRE(seen != NULL);
    rec64 r;
    size_t count = 0;
    if (strcmp(argv[3], "push") == 0 || strcmp(argv[3], "lease") == 0) {
        REQUIRE_SUCC(lTvmDropTable(p, SQ), p);
        if (strcmp(argv[3], "lease") == 0) {
            TvmQueueOptions o;
            REQUIRE(lInitQueueOptions(&o, sizeof(o)) == RC_SUCC);
            o.leases = true;
            REQUIRE_SUCC(lTvmCreateQueueEx(p, SQ, &o), p);
        }
        for (long i = 1; i <= n; i++) {
            bind_rec(p, &r, SQ, i);
            if (i % 2)
                REQUIRE_SUCC(lTvmPush(p), p);
            else
                REQUIRE_SUCC(lAsyPush(p), p);
        }
        CHECK_SUCC(lAsyWait(p), p);
        CHECK_EQ(p->m_lEffect, n / 2);
        p->tblName = SQ;
        CHECK_SUCC(lTvmCount(p, &count), p);
        CHECK_EQU(count, (size_t)n);
        CHECK_FAIL(lTvmTruncate(p, SQ), p, NOT_SUPPT_OPT);
    }
    if (strcmp(argv[3], "pop") == 0) {
        for (long i = 1; i <= n; i++) {
            queuevoid(p, r, sizeof(r), SQ);
            if (!CHECK_SUCC(lTvmPop(p, &r, i % 3 ? QUE_NOWAIT : QUE_NORMAL), p))
                break;
            CHECK(r.n >= 1 && r.n <= n && !seen[r.n]);
            if (r.n >= 1 && r.n <= n)
                seen[r.n] = 1;
        }
        queuevoid(p, r, sizeof(r), SQ);
        CHECK_FAIL(lTvmPop(p, &r, QUE_NOWAIT), p, NO_DATA_FOUND);
        p->tblName = SQ;
        CHECK_SUCC(lTvmCount(p, &count), p);
        CHECK_EQU(count, 0);
        CHECK_SUCC(lTvmDropTable(p, SQ), p);
    }
    if (strcmp(argv[3], "sparse") == 0) {
        /* Every record in shard 1 (a handle spread again starts its pushes
         * there), popped by a handle whose turn is at another shard 5 times
         * in 6: each pop still finds it. run.sh counts the LPOPs. */
        SATvm *q = (SATvm *)pCloneSATvm();
        REQUIRE_SUCC(lTvmConnect(q, argv[1], atol(argv[2]), 5), q);
        REQUIRE_SUCC(lTvmDropTable(q, SQ), q);
        for (long i = 1; i <= n; i++) {
            REQUIRE_SUCC(lTvmSpread(q, SQ, SHARDS), q);
            bind_rec(q, &r, SQ, i);
            REQUIRE_SUCC(lTvmPush(q), q);
        }
        vCloneFree(q);
        for (long i = 1; i <= n; i++) {
            queuevoid(p, r, sizeof(r), SQ);
            if (!CHECK_SUCC(lTvmPop(p, &r, QUE_NOWAIT), p))
                break;
            CHECK_EQ(r.n, i); /* one shard: FIFO */
        }
        queuevoid(p, r, sizeof(r), SQ);
        CHECK_FAIL(lTvmPop(p, &r, QUE_NOWAIT), p, NO_DATA_FOUND);
    }
    if (strcmp(argv[3], "lease") == 0) {
        long acked = 0, released = 0;
        TvmLease l;
        while (acked < n) {
            queuevoid(p, r, sizeof(r), SQ);
            if (!CHECK_SUCC(lTvmPopLease(p, &r, QUE_NOWAIT, 0, &l), p))
                break;
            p->tblName = SQ;
            if (l.deliveries == 1 && r.n % 2 == 0) {
                CHECK_SUCC(lTvmRelease(p, &l, 0), p);
                released++;
                continue;
            }
            CHECK(r.n >= 1 && r.n <= n && !seen[r.n]);
            CHECK_EQU(l.deliveries, r.n % 2 == 0 ? 2u : 1u);
            if (r.n >= 1 && r.n <= n)
                seen[r.n] = 1;
            CHECK_SUCC(lTvmAck(p, &l), p);
            CHECK_FAIL(lTvmAck(p, &l), p, LEASE_EXPIRED);
            acked++;
        }
        CHECK_EQ(released, n / 2);
        queuevoid(p, r, sizeof(r), SQ);
        CHECK_FAIL(lTvmPopLease(p, &r, QUE_NOWAIT, 0, &l), p, NO_DATA_FOUND);
        /* A token of shard 1 on a handle where the queue is not spread. */
        SATvm *q = (SATvm *)pCloneSATvm();
        REQUIRE_SUCC(lTvmConnect(q, argv[1], atol(argv[2]), 5), q);
        bind_rec(p, &r, SQ, 1);
        CHECK_SUCC(lTvmPush(p), p);
        queuevoid(p, r, sizeof(r), SQ);
        CHECK_SUCC(lTvmPopLease(p, &r, QUE_NOWAIT, 0, &l), p);
        q->tblName = SQ;
        CHECK_FAIL(lTvmAck(q, &l), q, LEASE_INVALID);
        p->tblName = SQ;
        CHECK_SUCC(lTvmAck(p, &l), p);
        vCloneFree(q);
        CHECK_SUCC(lTvmDropTable(p, SQ), p);
    }
    free(seen);
    vTvmDisconnect(p);
    vCloneFree(p);
    return __atomic_load_n(&g_failures, __ATOMIC_SEQ_CST) ? 1 : 0;
}
