/*
 * net_admin.c: the network twins of STVM's queue administration,
 * lTvmCount, lTvmTruncate, lTvmDropTable and lTvmResetLock, against a
 * server.
 *
 *   net_admin HOST PORT redis|tvmq
 *
 * On queue 23 of the server (tvmq serve: started with --auto-create):
 * counts, truncation (the queue stays, pushes go on), drop, and the reset
 * (tvmq serve repairs; a redis-server has no lock: RMT_NOT_SUPPT); the
 * error paths (NULL handle or count, a handle not connected). Exit 0 only
 * if every check held.
 */
#include "check.h"

static void push_some(SATvm *p, int n)
{
    for (int i = 0; i < n; i++) {
        rec64 r;
        bind_rec(p, &r, 23, i);
        CHECK_SUCC(lTvmPush(p), p);
    }
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: net_admin HOST PORT redis|tvmq\n");
        return 2;
    }
    int redis = strcmp(argv[3], "redis") == 0;
    SATvm *p = (SATvm *)pCloneSATvm();
    size_t n = 99;

    /* Not connected. */
    p->tblName = 23;
    CHECK_FAIL(lTvmCount(p, &n), p, SERV_NOT_CONN);
    CHECK_FAIL(lTvmTruncate(p, 23), p, SERV_NOT_CONN);
    CHECK_FAIL(lTvmDropTable(p, 23), p, SERV_NOT_CONN);
    CHECK_FAIL(lTvmResetLock(p, 23), p, SERV_NOT_CONN);
    CHECK_FAIL_NOH(lTvmCount(NULL, &n), CONDIT_IS_NIL);
    CHECK_FAIL_NOH(lTvmTruncate(NULL, 23), CONDIT_IS_NIL);
    CHECK_FAIL_NOH(lTvmDropTable(NULL, 23), CONDIT_IS_NIL);
    CHECK_FAIL_NOH(lTvmResetLock(NULL, 23), CONDIT_IS_NIL);

    REQUIRE_SUCC(lTvmConnect(p, argv[1], atol(argv[2]), 5), p);
    CHECK_FAIL(lTvmCount(p, NULL), p, CONDIT_IS_NIL);
    /* Start from nothing (a record left by an earlier run goes). */
    CHECK_SUCC(lTvmTruncate(p, 23), p);

    push_some(p, 5);
    p->tblName = 23;
    CHECK_SUCC(lTvmCount(p, &n), p);
    CHECK_EQU(n, 5);
    CHECK_EQU(p->m_lEffect, 5);

    /* Truncate: the records go, the queue stays and takes pushes. */
    CHECK_SUCC(lTvmTruncate(p, 23), p);
    CHECK_EQU(p->m_lEffect, 5);
    p->tblName = 23;
    CHECK_SUCC(lTvmCount(p, &n), p);
    CHECK_EQU(n, 0);
    push_some(p, 3);
    rec64 out;
    queueinit(p, out, 23);
    CHECK_SUCC(lTvmPop(p, &out, QUE_NOWAIT), p);
    CHECK_EQ(out.n, 0);
    CHECK_SUCC(lTvmTruncate(p, 23), p);
    CHECK_EQU(p->m_lEffect, 2);

    /* The reset: tvmq serve's repair; a Redis list has no lock. */
    push_some(p, 1);
    if (redis) {
        CHECK_FAIL(lTvmResetLock(p, 23), p, RMT_NOT_SUPPT);
    } else {
        CHECK_SUCC(lTvmResetLock(p, 23), p);
        CHECK_EQU(p->m_lEffect, 0);
    }

    /* Drop: it existed; then it does not (a Redis list or an auto-created
     * queue comes back with the next push). */
    CHECK_SUCC(lTvmDropTable(p, 23), p);
    CHECK_EQU(p->m_lEffect, 1);
    CHECK_SUCC(lTvmDropTable(p, 23), p);
    CHECK_EQU(p->m_lEffect, 0);
    p->tblName = 23;
    CHECK_SUCC(lTvmCount(p, &n), p);
    CHECK_EQU(n, 0);
    push_some(p, 2);
    p->tblName = 23;
    CHECK_SUCC(lTvmCount(p, &n), p);
    CHECK_EQU(n, 2);
    CHECK_SUCC(lTvmDropTable(p, 23), p);

    vTvmDisconnect(p);
    vCloneFree(p);
    return __atomic_load_n(&g_failures, __ATOMIC_SEQ_CST) ? 1 : 0;
}
