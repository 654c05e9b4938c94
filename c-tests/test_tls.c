/*
 * test_tls.c: lTvmConnectTls and TvmTls, against the TLS servers run.sh
 * started with the certificates of scripts/tls-certs.sh:
 *   $TLS_DIR          the certificates (ca.crt, client.crt/key, other-ca.crt...)
 *   $TLS_TVMQ_PORT    tvmq serve --tls-port (queues created on first use)
 *   $TLS_MTLS_PORT    tvmq serve --tls-port --tls-ca-cert-file ca.crt
 *   $TLS_REDIS_PORT   redis-server --tls-port (tls-auth-clients optional);
 *                     unset when redis-server cannot serve TLS
 * Every call of the network API through TLS (sync, async, popup, shared
 * connection, a blocking pop on its own connection), every option of
 * TvmTls, and every error code lTvmConnectTls's comment gives.
 *
 * Run by run.sh as `test_tls NAME`; `test_tls --list` lists the tests.
 */
#define _GNU_SOURCE
#include "check.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>

static char LOCALHOST[] = "127.0.0.1";

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static long port_of(const char *var)
{
    const char *p = getenv(var);
    REQUIRE(p != NULL && *p != '\0');
    return atol(p);
}

/* $TLS_DIR/name (allocated: a test's few paths live as long as it). */
static const char *cert(const char *name)
{
    const char *dir = getenv("TLS_DIR");
    REQUIRE(dir != NULL && *dir != '\0');
    char *b = NULL;
    REQUIRE(asprintf(&b, "%s/%s", dir, name) > 0);
    return b;
}

/* A push through an unconnected handle: SERV_NOT_CONN. */
static void check_not_connected(SATvm *p)
{
    rec64 r;
    bind_rec(p, &r, 25, 0);
    CHECK_FAIL(lTvmPush(p), p, SERV_NOT_CONN);
}

/* Options trusting the test CA. */
static TvmTls trusting(const char *ca)
{
    TvmTls t;
    memset(&t, 0, sizeof(t));
    t.size = sizeof(t);
    t.ca_file = cert(ca);
    return t;
}

static void npush(SATvm *p, TABLE t, long n)
{
    rec64 r;
    bind_rec(p, &r, t, n);
    CHECK_SUCC(lTvmPush(p), p);
}

static void expect_npop(SATvm *p, TABLE t, long n, Uenum wait, int line)
{
    rec64 out;
    memset(&out, 0xee, sizeof(out));
    queuevoid(p, out, sizeof(out), t);
    long rc = lTvmPop(p, &out, wait);
    char want[56];
    snprintf(want, sizeof(want), "record %ld", n);
    if (rc != RC_SUCC || out.n != n || strcmp(out.text, want) != 0)
        fail_at(__FILE__, line, "lTvmPop of queue %u: rc %ld (%s), record %ld, want record %ld", t, rc,
                code_name(p->m_lErrno), rc == RC_SUCC ? out.n : -1L, n);
}
#define EXPECT_NPOP(p, t, n) expect_npop((p), (t), (n), QUE_NOWAIT, __LINE__)

struct blocked {
    SATvm *p;
    long rc;
    long n;
};

static void *blocking_pop(void *arg)
{
    struct blocked *b = arg;
    rec64 out;
    queuevoid(b->p, out, sizeof(out), 24);
    b->rc = lTvmPop(b->p, &out, QUE_NORMAL);
    b->n = out.n;
    return NULL;
}

/* Every kind of call through TLS to the server on `port`. */
static void calls_through_tls(long port)
{
    TvmTls t = trusting("ca.crt");
    SATvm *p = (SATvm *)pCloneSATvm();
    REQUIRE(p != NULL);
    REQUIRE_SUCC(lTvmConnectTls(p, LOCALHOST, port, 5, &t), p);

    /* Synchronous: FIFO, then NO_DATA_FOUND. */
    for (long i = 0; i < 50; i++)
        npush(p, 21, i);
    for (long i = 0; i < 50; i++)
        EXPECT_NPOP(p, 21, i);
    rec64 out;
    queuevoid(p, out, sizeof(out), 21);
    CHECK_FAIL(lTvmPop(p, &out, QUE_NOWAIT), p, NO_DATA_FOUND);

    /* Asynchronous pushes (many in one write: TLS records of many commands),
     * then lTvmPopup of all of them. */
    for (long i = 0; i < 3000; i++) {
        rec64 r;
        bind_rec(p, &r, 22, i);
        CHECK_SUCC(lAsyPush(p), p);
    }
    CHECK_SUCC(lAsyWait(p), p);
    CHECK_EQU(p->m_lEffect, 3000);
    size_t got = 0;
    long want = 0;
    queuenull(p, sizeof(rec64), 22);
    while (got < 3000) {
        size_t n = 0;
        void *arr = NULL;
        if (!CHECK_SUCC(lTvmPopup(p, 1000, 0, &n, &arr), p))
            break;
        for (size_t i = 0; i < n; i++, want++) {
            const rec64 *r = (const rec64 *)arr + i;
            if (r->n != want) {
                CHECK_EQ(r->n, want);
                break;
            }
        }
        free(arr);
        got += n;
    }
    CHECK_EQU(got, 3000);

    /* A shared connection, and a blocking pop on a shared handle (its own
     * connection, made with the same TLS options). */
    SATvm *q = (SATvm *)pCloneSATvm();
    REQUIRE(q != NULL);
    REQUIRE_SUCC(lTvmShare(q, p), q);
    npush(q, 23, 7);
    EXPECT_NPOP(p, 23, 7);
    struct blocked b = { q, 0, -1 };
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, blocking_pop, &b) == 0);
    sleep_ms(200);
    npush(p, 24, 9);
    pthread_join(th, NULL);
    CHECK_EQ(b.rc, RC_SUCC);
    CHECK_EQ(b.n, 9);
    vCloneFree(q);

    /* Reconnecting after the handle's connection is closed. */
    vTvmDisconnect(p);
    CHECK_EQ(p->m_lErrno, 0);
    REQUIRE_SUCC(lTvmConnectTls(p, LOCALHOST, port, 5, &t), p);
    npush(p, 21, 1);
    EXPECT_NPOP(p, 21, 1);
    vCloneFree(p);
}

static void tvmq_serve_calls(void) { calls_through_tls(port_of("TLS_TVMQ_PORT")); }

static void redis_server_calls(void) { calls_through_tls(port_of("TLS_REDIS_PORT")); }

/* A server certificate no trusted CA signed: SOCK_COM_EXCP; trusted when
 * insecure is set (tests only). */
static void wrong_ca(void)
{
    const char *ports[] = { "TLS_TVMQ_PORT", "TLS_REDIS_PORT" };
    for (int i = 0; i < 2; i++) {
        /* run.sh leaves $TLS_REDIS_PORT unset when redis-server has no TLS. */
        const char *set = getenv(ports[i]);
        if (set == NULL || *set == '\0')
            continue;
        long port = port_of(ports[i]);
        TvmTls t = trusting("other-ca.crt");
        SATvm *p = (SATvm *)pCloneSATvm();
        REQUIRE(p != NULL);
        CHECK_FAIL(lTvmConnectTls(p, LOCALHOST, port, 5, &t), p, SOCK_COM_EXCP);
        check_not_connected(p);
        t.insecure = 1;
        CHECK_SUCC(lTvmConnectTls(p, LOCALHOST, port, 5, &t), p);
        npush(p, 25, 1);
        EXPECT_NPOP(p, 25, 1);
        vCloneFree(p);
    }
}

/* The certificate names localhost and 127.0.0.1: server_name checks
 * another name. */
static void server_name(void)
{
    long port = port_of("TLS_TVMQ_PORT");
    TvmTls t = trusting("ca.crt");
    SATvm *p = (SATvm *)pCloneSATvm();
    REQUIRE(p != NULL);
    char localhost[] = "localhost";
    CHECK_SUCC(lTvmConnectTls(p, localhost, port, 5, &t), p);
    t.server_name = "localhost";
    CHECK_SUCC(lTvmConnectTls(p, LOCALHOST, port, 5, &t), p);
    t.server_name = "queues.example.com";
    CHECK_FAIL(lTvmConnectTls(p, LOCALHOST, port, 5, &t), p, SOCK_COM_EXCP);
    t.server_name = "not a name!";
    CHECK_FAIL(lTvmConnectTls(p, LOCALHOST, port, 5, &t), p, BOOT_PARM_ERR);
    vCloneFree(p);
}

/* A server that requires client certificates: one its CA signed passes;
 * none, or one of another CA, is refused. */
static void client_certificates(void)
{
    long port = port_of("TLS_MTLS_PORT");
    TvmTls t = trusting("ca.crt");
    SATvm *p = (SATvm *)pCloneSATvm();
    REQUIRE(p != NULL);
    long rc = lTvmConnectTls(p, LOCALHOST, port, 5, &t);
    CHECK_EQ(rc, RC_FAIL);
    /* TLS 1.3: the server's refusal comes after the client's handshake, at
     * the first command: its alert, or the connection closed. */
    if (p->m_lErrno != SOCK_COM_EXCP && p->m_lErrno != SOCK_IO_RESET)
        CHECK_EQ(p->m_lErrno, SOCK_COM_EXCP);
    t.cert_file = cert("stranger.crt");
    t.key_file = cert("stranger.key");
    rc = lTvmConnectTls(p, LOCALHOST, port, 5, &t);
    CHECK_EQ(rc, RC_FAIL);
    if (p->m_lErrno != SOCK_COM_EXCP && p->m_lErrno != SOCK_IO_RESET)
        CHECK_EQ(p->m_lErrno, SOCK_COM_EXCP);
    t.cert_file = cert("client.crt");
    t.key_file = cert("client.key");
    REQUIRE_SUCC(lTvmConnectTls(p, LOCALHOST, port, 5, &t), p);
    npush(p, 26, 3);
    EXPECT_NPOP(p, 26, 3);
    vCloneFree(p);
}

/* Every argument and option error. */
static void bad_options(void)
{
    long port = port_of("TLS_TVMQ_PORT");
    SATvm *p = (SATvm *)pCloneSATvm();
    REQUIRE(p != NULL);
    TvmTls t = trusting("ca.crt");
    CHECK_FAIL_NOH(lTvmConnectTls(NULL, LOCALHOST, port, 5, &t), CONDIT_IS_NIL);
    CHECK_FAIL(lTvmConnectTls(p, NULL, port, 5, &t), p, CONDIT_IS_NIL);
    CHECK_FAIL(lTvmConnectTls(p, "", port, 5, &t), p, CONDIT_IS_NIL);
    CHECK_FAIL(lTvmConnectTls(p, LOCALHOST, port, 5, NULL), p, CONDIT_IS_NIL);
    t.size = 0;
    CHECK_FAIL(lTvmConnectTls(p, LOCALHOST, port, 5, &t), p, BOOT_PARM_ERR);
    t.size = sizeof(t) - 1;
    CHECK_FAIL(lTvmConnectTls(p, LOCALHOST, port, 5, &t), p, BOOT_PARM_ERR);

    /* A program built with a newer tvm.h: accepted while the fields this
     * library does not know are zero. */
    struct {
        TvmTls t;
        long future;
    } newer;
    memset(&newer, 0, sizeof(newer));
    newer.t = trusting("ca.crt");
    newer.t.size = sizeof(newer);
    CHECK_SUCC(lTvmConnectTls(p, LOCALHOST, port, 5, &newer.t), p);
    newer.future = 1;
    CHECK_FAIL(lTvmConnectTls(p, LOCALHOST, port, 5, &newer.t), p, BOOT_PARM_ERR);

    t = trusting("ca.crt");
    t.cert_file = cert("client.crt");
    CHECK_FAIL(lTvmConnectTls(p, LOCALHOST, port, 5, &t), p, BOOT_PARM_ERR);
    t.cert_file = NULL;
    t.key_file = cert("client.key");
    CHECK_FAIL(lTvmConnectTls(p, LOCALHOST, port, 5, &t), p, BOOT_PARM_ERR);
    /* A key that is not the certificate's. */
    t.cert_file = cert("client.crt");
    t.key_file = cert("stranger.key");
    CHECK_FAIL(lTvmConnectTls(p, LOCALHOST, port, 5, &t), p, BOOT_PARM_ERR);
    /* Files that do not exist, or hold no certificate. */
    t = trusting("no-such-file.crt");
    CHECK_FAIL(lTvmConnectTls(p, LOCALHOST, port, 5, &t), p, FIL_NOT_EXIST);
    t = trusting("ca.key");
    CHECK_FAIL(lTvmConnectTls(p, LOCALHOST, port, 5, &t), p, BOOT_PARM_ERR);
    t = trusting("ca.crt");
    t.cert_file = cert("client.key");
    t.key_file = cert("client.key");
    CHECK_FAIL(lTvmConnectTls(p, LOCALHOST, port, 5, &t), p, BOOT_PARM_ERR);
    /* TLS is for TCP. */
    t = trusting("ca.crt");
    char sock[] = "/tmp/tvmq-no-such.sock";
    CHECK_FAIL(lTvmConnectTls(p, sock, 0, 5, &t), p, RMT_NOT_SUPPT);
    /* A failed lTvmConnectTls leaves the handle unconnected. */
    check_not_connected(p);
    vCloneFree(p);
}

/* A listening socket nobody accepts from (the kernel completes the TCP
 * handshake): the TLS handshake gets no answer. */
static void handshake_timeout(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof(a);
    REQUIRE(fd >= 0);
    REQUIRE(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    REQUIRE(listen(fd, 8) == 0);
    REQUIRE(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    TvmTls t = trusting("ca.crt");
    SATvm *p = (SATvm *)pCloneSATvm();
    REQUIRE(p != NULL);
    uint64_t t0 = now_ms();
    CHECK_FAIL(lTvmConnectTls(p, LOCALHOST, ntohs(a.sin_port), 1, &t), p, SOCK_CONN_TMO);
    uint64_t ms = now_ms() - t0;
    CHECK_RANGE(ms, 900, 3000);
    close(fd);
    vCloneFree(p);
}

TEST_MAIN(T(tvmq_serve_calls), T(redis_server_calls), T(wrong_ca), T(server_name), T(client_certificates),
          T(bad_options), T(handshake_timeout))
