/*
 * net_sentinel_tls.c: lTvmConnectSentinelTls against a sentinel, a master
 * and a replica that speak TLS only (c-tests/failover.sh tls starts them,
 * with certificates of scripts/tls-certs.sh in CERTS).
 *
 *   net_sentinel_tls HOST:PORT NAME CERTS KILLED
 *
 * Plain TCP to the TLS sentinel fails; a CA that signed nothing there is
 * refused; with the test CA the handle connects, pushes and pops. Then it
 * prints "ready", waits until the file KILLED exists (the script has killed
 * the master with SIGKILL and the sentinel has promoted the replica), and
 * the same handle pushes record 78 (again if the first push's connection
 * broke), pops it, and pushes record 79, which the script looks for on the
 * new master. Exit 0 only if every check held.
 */
#include "check.h"
#include <sys/stat.h>

static char certs[4096];

/* TvmTls trusting CERTS/ca (a file of scripts/tls-certs.sh). */
static TvmTls trusting(const char *ca, char *path, size_t len)
{
    TvmTls t;
    memset(&t, 0, sizeof(t));
    t.size = sizeof(t);
    snprintf(path, len, "%s/%s", certs, ca);
    t.ca_file = path;
    return t;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: net_sentinel_tls HOST:PORT NAME CERTS KILLED\n");
        return 2;
    }
    snprintf(certs, sizeof(certs), "%s", argv[3]);
    SATvm *p = (SATvm *)pCloneSATvm();
    char path[4200];
    rec64 r;
    /* The sentinel speaks TLS only: a plain question gets no answer it can read. */
    CHECK(lTvmConnectSentinel(p, argv[1], argv[2], 1) == RC_FAIL);
    CHECK_FAIL(lTvmConnectSentinelTls(p, argv[1], argv[2], 1, NULL), p, CONDIT_IS_NIL);
    TvmTls other = trusting("other-ca.crt", path, sizeof(path));
    CHECK_FAIL(lTvmConnectSentinelTls(p, argv[1], argv[2], 1, &other), p, SOCK_COM_EXCP);
    TvmTls tls = trusting("ca.crt", path, sizeof(path));
    /* The failover bound: the sentinel's down-after (1 s) and its election, with room. */
    CHECK_SUCC(lTvmConnectSentinelTls(p, argv[1], argv[2], 30, &tls), p);
    bind_rec(p, &r, 31, 77);
    CHECK_SUCC(lTvmPush(p), p);
    memset(&r, 0, sizeof(r));
    CHECK_SUCC(lTvmPop(p, &r, QUE_NOWAIT), p);
    CHECK_EQ(r.n, 77);
    printf("ready\n");
    fflush(stdout);
    struct stat st;
    for (int i = 0; stat(argv[4], &st) != 0; i++) {
        if (i > 1200) { /* 60 s */
            fprintf(stderr, "net_sentinel_tls: %s never appeared\n", argv[4]);
            return 1;
        }
        usleep(50000);
    }
    /* The first call finds the master gone: its connection broken before an
     * answer, it may fail with a SOCK_* code (as lTvmConnectSentinel says;
     * the master is dead, so it was not executed); then the handle asks the
     * sentinel again over TLS and reconnects over TLS to the replica it
     * promoted. */
    bind_rec(p, &r, 31, 78);
    if (lTvmPush(p) != RC_SUCC) {
        printf("first push after the kill: %s\n", sGetTErrName(p->m_lErrno));
        CHECK(p->m_lErrno == SOCK_IO_RESET || p->m_lErrno == SOCK_COM_EXCP || p->m_lErrno == SOCK_CONN_TMO ||
              p->m_lErrno == SOCK_CONN_ERR);
        CHECK_SUCC(lTvmPush(p), p);
    }
    memset(&r, 0, sizeof(r));
    CHECK_SUCC(lTvmPop(p, &r, QUE_NOWAIT), p);
    CHECK_EQ(r.n, 78);
    bind_rec(p, &r, 31, 79);
    CHECK_SUCC(lTvmPush(p), p);
    vCloneFree(p);
    return __atomic_load_n(&g_failures, __ATOMIC_SEQ_CST) ? 1 : 0;
}
