/*
 * net_sentinel_auth.c: lTvmConnectSentinel with passwords: a master
 * started with requirepass MASTER_PASS and a sentinel with its own
 * requirepass SENTINEL_PASS (c-tests/failover.sh auth starts them).
 *
 *   net_sentinel_auth HOST:PORT NAME MASTER_PASS SENTINEL_PASS
 *
 * Without lTvmSentinelAuth the sentinel refuses the question; with it but
 * without lTvmAuth the master refuses the commands; with both the handle
 * connects, pushes and pops. Exit 0 only if every check held.
 */
#include "check.h"

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: net_sentinel_auth HOST:PORT NAME MASTER_PASS SENTINEL_PASS\n");
        return 2;
    }
    SATvm *p = (SATvm *)pCloneSATvm();
    rec64 r;
    CHECK_FAIL(lTvmConnectSentinel(p, argv[1], argv[2], 1), p, SVR_EXCEPTION); /* NOAUTH */
    CHECK_SUCC(lTvmSentinelAuth(p, NULL, argv[4]), p);
    CHECK(lTvmConnectSentinel(p, argv[1], argv[2], 1) == RC_FAIL);
    CHECK_SUCC(lTvmAuth(p, NULL, argv[3]), p);
    CHECK_SUCC(lTvmConnectSentinel(p, argv[1], argv[2], 1), p);
    bind_rec(p, &r, 32, 77);
    CHECK_SUCC(lTvmPush(p), p);
    memset(&r, 0, sizeof(r));
    CHECK_SUCC(lTvmPop(p, &r, QUE_NOWAIT), p);
    CHECK_EQ(r.n, 77);
    /* The wrong password for the sentinels: refused again. */
    CHECK_SUCC(lTvmSentinelAuth(p, NULL, "wrong"), p);
    CHECK_FAIL(lTvmConnectSentinel(p, argv[1], argv[2], 1), p, SOCK_COM_EXCP);
    CHECK_FAIL(lTvmSentinelAuth(p, "user", NULL), p, CONDIT_IS_NIL);
    CHECK_FAIL(lTvmConnectSentinel(p, "nohostport", argv[2], 1), p, BOOT_PARM_ERR);
    CHECK_FAIL(lTvmConnectSentinel(p, "", argv[2], 1), p, CONDIT_IS_NIL);
    CHECK_FAIL(lTvmConnectSentinel(p, NULL, argv[2], 1), p, CONDIT_IS_NIL);
    vCloneFree(p);
    return __atomic_load_n(&g_failures, __ATOMIC_SEQ_CST) ? 1 : 0;
}
