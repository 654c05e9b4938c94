/*
 * net_auth.c: lTvmAuth against a server started with a password.
 *
 *   net_auth HOST PORT PASSWORD
 *
 * On queue 24 of the server (tvmq serve: started with --auto-create):
 * without credentials the commands are refused; a wrong password makes
 * the connection fail with SOCK_COM_EXCP, sGetTErrDetail() giving the
 * server's WRONGPASS answer; the right one (with and without
 * the user "default") lets a record go round; NULL arguments. Exit 0 only
 * if every check held.
 */
#include "check.h"

static long push_pop(SATvm *p, long n)
{
    rec64 r, out;
    bind_rec(p, &r, 24, n);
    long rc = lTvmPush(p);
    if (rc != RC_SUCC)
        return rc;
    memset(&out, 0, sizeof(out));
    queuevoid(p, out, sizeof(out), 24);
    rc = lTvmPop(p, &out, QUE_NOWAIT);
    if (rc == RC_SUCC && out.n != n)
        fail_at(__FILE__, __LINE__, "popped record %ld, want %ld", out.n, n);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: net_auth HOST PORT PASSWORD\n");
        return 2;
    }
    const char *host = argv[1], *pass = argv[3];
    long port = atol(argv[2]);
    SATvm *p = (SATvm *)pCloneSATvm();

    CHECK_FAIL_NOH(lTvmAuth(NULL, NULL, pass), CONDIT_IS_NIL);
    CHECK_FAIL(lTvmAuth(p, "default", NULL), p, CONDIT_IS_NIL);

    /* No credentials: connected, but every command is refused. */
    REQUIRE_SUCC(lTvmConnect(p, (char *)host, port, 5), p);
    CHECK(push_pop(p, 1) != RC_SUCC);
    vTvmDisconnect(p);

    /* A wrong password: the connection itself fails. */
    CHECK_SUCC(lTvmAuth(p, NULL, "not the password"), p);
    CHECK_FAIL(lTvmConnect(p, (char *)host, port, 5), p, SOCK_COM_EXCP);
    /* The server's answer, beyond the code's generic text. */
    if (strstr(sGetTErrDetail(), "WRONGPASS") == NULL)
        fail_at(__FILE__, __LINE__, "sGetTErrDetail() = \"%s\", want the server's WRONGPASS answer", sGetTErrDetail());

    /* The password: a record goes round. */
    CHECK_SUCC(lTvmAuth(p, NULL, pass), p);
    REQUIRE_SUCC(lTvmConnect(p, (char *)host, port, 5), p);
    CHECK_EQ(push_pop(p, 2), RC_SUCC);
    vTvmDisconnect(p);

    /* With the user, as Redis 6 ACLs name it. */
    CHECK_SUCC(lTvmAuth(p, "default", pass), p);
    REQUIRE_SUCC(lTvmConnect(p, (char *)host, port, 5), p);
    CHECK_EQ(push_pop(p, 3), RC_SUCC);
    vTvmDisconnect(p);

    /* Cleared: refused again. */
    CHECK_SUCC(lTvmAuth(p, NULL, NULL), p);
    REQUIRE_SUCC(lTvmConnect(p, (char *)host, port, 5), p);
    CHECK(push_pop(p, 4) != RC_SUCC);
    vTvmDisconnect(p);

    vCloneFree(p);
    return __atomic_load_n(&g_failures, __ATOMIC_SEQ_CST) ? 1 : 0;
}
