/*
 * test_net.c: the network calls of tvm.h (lTvmConnect, lTvmPush, lTvmPop,
 * lTvmPopup, lAsyPush, lAsyWait, lTvmShare, vTvmDisconnect) and every error
 * code their comments give: against the redis-server run.sh started
 * ($REDIS_PORT, $REDIS_SOCK), against redis-servers a test starts and kills
 * itself ($REDIS_SERVER), and against fake servers forked here (silent,
 * closing mid-call, scripted error replies, a full accept queue).
 *
 * Run by run.sh as `test_net NAME` (see check.h); `test_net --list` lists
 * the tests. $REDIS_CLI names redis-cli, used to look at the lists.
 */
#define _GNU_SOURCE
#include "check.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>

static char LOCALHOST[] = "127.0.0.1";

static long redis_port(void)
{
    const char *p = getenv("REDIS_PORT");
    REQUIRE(p != NULL && *p != '\0');
    return atol(p);
}

/* Runs redis-cli with `args` against port `port`, returns the first line of
 * its output (static buffer; not a terminal: raw replies, "3" not "(integer) 3"). */
static const char *redis_at(long port, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static const char *redis_at(long port, const char *fmt, ...)
{
    static char line[4096];
    char args[2048], cmd[4096];
    const char *cli = getenv("REDIS_CLI");
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof(cmd), "'%s' -p %ld %s 2>&1", cli ? cli : "redis-cli", port, args);
    FILE *f = popen(cmd, "r");
    REQUIRE(f != NULL);
    line[0] = '\0';
    if (!fgets(line, sizeof(line), f))
        line[0] = '\0';
    line[strcspn(line, "\r\n")] = '\0';
    char rest[512];
    while (fgets(rest, sizeof(rest), f))
        ;
    pclose(f);
    return line;
}
#define REDIS(...) redis_at(redis_port(), __VA_ARGS__)

static long llen(TABLE t) { return atol(REDIS("llen %u", t)); }

/* A clean server for each test. */
static void flush_redis(void) { CHECK_STR(REDIS("flushall"), "OK"); }

/* A clone connected to the test's redis-server, timeout 5 s. */
static SATvm *connected(void)
{
    SATvm *p = (SATvm *)pCloneSATvm();
    REQUIRE(p != NULL);
    REQUIRE_SUCC(lTvmConnect(p, LOCALHOST, redis_port(), 5), p);
    return p;
}

/* Binds r (text "record n") and pushes it through p to queue t. */
static int npush(SATvm *p, TABLE t, long n)
{
    rec64 r;
    bind_rec(p, &r, t, n);
    return CHECK_SUCC(lTvmPush(p), p);
}

/* Pops one record of t (QUE_NOWAIT) through p, checks it is record n. */
static void expect_npop(SATvm *p, TABLE t, long n, int line)
{
    rec64 out;
    memset(&out, 0xee, sizeof(out));
    queuevoid(p, out, sizeof(out), t);
    long rc = lTvmPop(p, &out, QUE_NOWAIT);
    char want[56];
    snprintf(want, sizeof(want), "record %ld", n);
    if (rc != RC_SUCC || out.n != n || strcmp(out.text, want) != 0)
        fail_at(__FILE__, line, "lTvmPop of queue %u: rc %ld (%s), record %ld, want record %ld", t, rc,
                code_name(p->m_lErrno), rc == RC_SUCC ? out.n : -1L, n);
}
#define EXPECT_NPOP(p, t, n) expect_npop((p), (t), (n), __LINE__)

/* A free loopback port (bound, then closed). */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof(a);
    REQUIRE(fd >= 0);
    REQUIRE(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    REQUIRE(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* A listening loopback socket with `backlog`; its port in *port. */
static int listener(int backlog, int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof(a);
    REQUIRE(fd >= 0);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    REQUIRE(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    REQUIRE(listen(fd, backlog) == 0);
    REQUIRE(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    *port = ntohs(a.sin_port);
    return fd;
}

/* ======================================================================== */
/* Fake servers                                                             */
/* ======================================================================== */

/*
 * A fake RESP server in a child process, one connection at a time. Replies
 * to CLUSTER (the client's probe at connect) with `probe` (NULL: never);
 * to the other commands with script[0], script[1], ... (the last one again
 * after the end; NULL script: never answers); after `close_after` such
 * commands (-1: never) it stops writing (shutdown) and waits for the client
 * to close. With `first_only`, that is the first connection; the later ones
 * answer ":1" to everything (a server that came back).
 */
typedef struct {
    const char *probe;
    const char *const *script;
    int nscript;
    int close_after;
    int first_only;
} fake_spec;

static const char TVMQ_PROBE[] = "-ERR unknown command 'CLUSTER', with args beginning with: 'SLOTS' \r\n";

static void write_all(int fd, const char *s, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, s, n);
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

/* Length of the complete command at buf[0..len) (0: incomplete); its name
 * (upper-cased, truncated) in name. */
static size_t parse_command(const char *buf, size_t len, char *name, size_t namelen)
{
    size_t pos = 0;
    long n, i;
    char *end;
    if (len < 4 || buf[0] != '*')
        return 0;
    const char *nl = memchr(buf, '\n', len);
    if (!nl)
        return 0;
    n = strtol(buf + 1, &end, 10);
    pos = (size_t)(nl - buf) + 1;
    for (i = 0; i < n; i++) {
        if (pos >= len || buf[pos] != '$')
            return 0;
        nl = memchr(buf + pos, '\n', len - pos);
        if (!nl)
            return 0;
        long blen = strtol(buf + pos + 1, &end, 10);
        size_t body = (size_t)(nl - buf) + 1;
        if (body + (size_t)blen + 2 > len)
            return 0;
        if (i == 0) {
            size_t k;
            for (k = 0; k < (size_t)blen && k + 1 < namelen; k++)
                name[k] = (char)(buf[body + k] & ~0x20);
            name[k] = '\0';
        }
        pos = body + (size_t)blen + 2;
    }
    return pos;
}

static void fake_serve(int lfd, const fake_spec *spec)
{
    static const char *const ones[] = { ":1\r\n" };
    static const fake_spec normal = { TVMQ_PROBE, ones, 1, -1, 0 };
    static char buf[1 << 20];
    for (int conn = 0;; conn++) {
        int c = accept(lfd, NULL, NULL);
        if (c < 0)
            continue;
        const fake_spec *s = (conn == 0 || !spec->first_only) ? spec : &normal;
        size_t have = 0;
        int served = 0, closing = 0;
        for (;;) {
            ssize_t r = read(c, buf + have, sizeof(buf) - have);
            if (r <= 0)
                break;
            have += (size_t)r;
            size_t used;
            char name[16];
            while (!closing && (used = parse_command(buf, have, name, sizeof(name))) > 0) {
                memmove(buf, buf + used, have - used);
                have -= used;
                if (strcmp(name, "CLUSTER") == 0) {
                    if (s->probe)
                        write_all(c, s->probe, strlen(s->probe));
                    continue;
                }
                if (s->close_after >= 0 && served >= s->close_after) {
                    shutdown(c, SHUT_WR);
                    closing = 1;
                    break;
                }
                if (s->script) {
                    const char *rep = s->script[served < s->nscript ? served : s->nscript - 1];
                    write_all(c, rep, strlen(rep));
                }
                served++;
            }
            if (closing)
                have = 0;
        }
        close(c);
    }
}

/* Starts a fake server; returns its port. The child is killed at exit. */
static int fake_server(const fake_spec *spec)
{
    int port;
    int lfd = listener(16, &port);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        fake_serve(lfd, spec);
        _exit(0);
    }
    remember_child(pid);
    close(lfd);
    return port;
}

/* ======================================================================== */
/* Connecting                                                               */
/* ======================================================================== */

/* Nothing listens: SOCK_CONN_ERR, at once. */
static void connect_refused(void)
{
    SATvm *p = (SATvm *)pCloneSATvm();
    long long t0 = mono_ms();
    CHECK_FAIL(lTvmConnect(p, LOCALHOST, free_port(), 5), p, SOCK_CONN_ERR);
    CHECK_RANGE(mono_ms() - t0, 0, 1000);
    /* Not connected afterwards. */
    CHECK_FAIL(lTvmPush(p), p, CONDIT_IS_NIL); /* no record bound: checked first */
    rec64 r;
    bind_rec(p, &r, 1, 1);
    CHECK_FAIL(lTvmPush(p), p, SERV_NOT_CONN);
    vCloneFree(p);
}

/* A listener whose accept queue is full drops new connections: the connect
 * times out with SOCK_CONN_TMO after timeout_secs. */
static void connect_timeout(void)
{
    int port, socks[8];
    int lfd = listener(0, &port);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    for (int i = 0; i < 8; i++) {
        socks[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        connect(socks[i], (struct sockaddr *)&a, sizeof(a));
    }
    sleep_ms(100);
    SATvm *p = (SATvm *)pCloneSATvm();
    long long t0 = mono_ms();
    CHECK_FAIL(lTvmConnect(p, LOCALHOST, port, 1), p, SOCK_CONN_TMO);
    CHECK_RANGE(mono_ms() - t0, 900, 3000);
    vCloneFree(p);
    for (int i = 0; i < 8; i++)
        close(socks[i]);
    close(lfd);
}

/* Bad arguments. */
static void connect_bad_arguments(void)
{
    SATvm *p = (SATvm *)pCloneSATvm();
    char empty[] = "", nohost[] = "no-such-host.invalid", nosock[] = "/nonexistent/dir/redis.sock";
    CHECK_FAIL_NOH(lTvmConnect(NULL, LOCALHOST, redis_port(), 5), CONDIT_IS_NIL);
    CHECK_FAIL(lTvmConnect(p, NULL, redis_port(), 5), p, CONDIT_IS_NIL);
    CHECK_FAIL(lTvmConnect(p, empty, redis_port(), 5), p, CONDIT_IS_NIL);
    CHECK_FAIL(lTvmConnect(p, LOCALHOST, 0, 5), p, SOCK_CONN_ERR);
    CHECK_FAIL(lTvmConnect(p, LOCALHOST, 70000, 5), p, SOCK_CONN_ERR);
    CHECK_FAIL(lTvmConnect(p, LOCALHOST, -1, 5), p, SOCK_CONN_ERR);
    CHECK_FAIL(lTvmConnect(p, nohost, 5050, 5), p, SOCK_CONN_ERR);
    CHECK_FAIL(lTvmConnect(p, nosock, 0, 5), p, SOCK_CONN_ERR);
    /* Still usable: a good connect works. */
    CHECK_SUCC(lTvmConnect(p, LOCALHOST, redis_port(), 0), p);
    vCloneFree(p);
}

/* A server that accepts and never answers: lTvmConnect's first command
 * times out (SOCK_READ_TMO). */
static void connect_to_silent_server(void)
{
    static const fake_spec silent = { NULL, NULL, 0, -1, 0 };
    int port = fake_server(&silent);
    SATvm *p = (SATvm *)pCloneSATvm();
    long long t0 = mono_ms();
    CHECK_FAIL(lTvmConnect(p, LOCALHOST, port, 1), p, SOCK_READ_TMO);
    CHECK_RANGE(mono_ms() - t0, 900, 3000);
    vCloneFree(p);
}

/* A unix socket path instead of an address (the port is ignored). */
static void connect_unix_socket(void)
{
    const char *path = getenv("REDIS_SOCK");
    REQUIRE(path != NULL);
    flush_redis();
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", path);
    SATvm *p = (SATvm *)pCloneSATvm();
    CHECK_SUCC(lTvmConnect(p, buf, 0, 5), p);
    npush(p, 3, 1);
    npush(p, 3, 2);
    CHECK_EQ(llen(3), 2);
    EXPECT_NPOP(p, 3, 1);
    EXPECT_NPOP(p, 3, 2);
    vTvmDisconnect(p);
    vCloneFree(p);
}

/* ======================================================================== */
/* Handles                                                                  */
/* ======================================================================== */

/* Network calls on a handle that never connected, or no longer is. */
static void not_connected(void)
{
    SATvm *p = (SATvm *)pCloneSATvm(), *q = (SATvm *)pCloneSATvm();
    rec64 r;
    size_t n = 7;
    void *out = (void *)&n;
    bind_rec(p, &r, 5, 1);
    CHECK_FAIL(lTvmPush(p), p, SERV_NOT_CONN);
    CHECK_FAIL(lTvmPop(p, &r, QUE_NOWAIT), p, SERV_NOT_CONN);
    CHECK_FAIL(lTvmPopup(p, 4, 0, &n, &out), p, SERV_NOT_CONN);
    CHECK(out == NULL && n == 0);
    CHECK_FAIL(lAsyPush(p), p, SERV_NOT_CONN);
    CHECK_FAIL(lAsyWait(p), p, SERV_NOT_CONN);
    CHECK_FAIL(lTvmShare(q, p), q, SERV_NOT_CONN);
    /* Connected, then disconnected. */
    CHECK_SUCC(lTvmConnect(p, LOCALHOST, redis_port(), 5), p);
    vTvmDisconnect(p);
    CHECK_EQ(p->m_lErrno, 0);
    CHECK_FAIL(lTvmPush(p), p, SERV_NOT_CONN);
    vCloneFree(p);
    vCloneFree(q);
}

/* A clone never shares (nor copies) the connection of the handle it was
 * copied from: the global handle connected, a clone is not. */
static void clone_is_not_connected(void)
{
    SATvm *g = G();
    rec64 r;
    flush_redis();
    REQUIRE_SUCC(lTvmConnect(g, LOCALHOST, redis_port(), 5), g);
    bind_rec(g, &r, 6, 1);
    SATvm *c = (SATvm *)pCloneSATvm();
    CHECK_FAIL(lTvmPush(c), c, SERV_NOT_CONN);
    CHECK_SUCC(lTvmPush(g), g);
    CHECK_EQ(llen(6), 1);
    vCloneFree(c);
    vTvmDisconnect(g);
}

/* vTvmDisconnect on handles that never connected (the global handle, a
 * clone that made only local calls, NULL) does nothing harmful: the local
 * calls go on working; twice after a connect is fine too. */
static void disconnect_never_connected(void)
{
    SATvm *g = G(), *c = (SATvm *)pCloneSATvm();
    vTvmDisconnect(NULL);
    CHECK_EQ(lGetTErrno(), CONDIT_IS_NIL);
    vTvmDisconnect(g);
    CHECK_EQ(g->m_lErrno, 0);
    vTvmDisconnect(c);
    CHECK_EQ(c->m_lErrno, 0);
    make_queue(9, 4, sizeof(rec64));
    push_n(c, 9, 1);
    vTvmDisconnect(c);
    CHECK_EQ(c->m_lErrno, 0);
    push_n(c, 9, 2);
    EXPECT_POP(c, 9, 1);
    vTvmDisconnect(c);
    EXPECT_POP(c, 9, 2);
    CHECK_SUCC(lTvmConnect(c, LOCALHOST, redis_port(), 5), c);
    vTvmDisconnect(c);
    vTvmDisconnect(c);
    CHECK_EQ(c->m_lErrno, 0);
    vCloneFree(c);
}

/* NULL and invalid arguments to every call. */
static void null_arguments(void)
{
    size_t n = 0;
    void *out = NULL;
    rec64 r;
    CHECK_FAIL_NOH(lTvmPush(NULL), CONDIT_IS_NIL);
    CHECK_FAIL_NOH(lTvmPop(NULL, &r, QUE_NOWAIT), CONDIT_IS_NIL);
    CHECK_FAIL_NOH(lTvmPopup(NULL, 1, 0, &n, &out), CONDIT_IS_NIL);
    CHECK_FAIL_NOH(lAsyPush(NULL), CONDIT_IS_NIL);
    CHECK_FAIL_NOH(lAsyWait(NULL), CONDIT_IS_NIL);
    CHECK_FAIL_NOH(lTvmShare(NULL, G()), CONDIT_IS_NIL);

    SATvm *p = connected();
    CHECK_FAIL(lTvmShare(p, NULL), p, CONDIT_IS_NIL);
    queuevoid(p, r, sizeof(r), 7);
    p->pstVoid = NULL;
    CHECK_FAIL(lTvmPush(p), p, CONDIT_IS_NIL);
    CHECK_FAIL(lAsyPush(p), p, CONDIT_IS_NIL);
    queuevoid(p, r, 0, 7);
    CHECK_FAIL(lTvmPush(p), p, CONDIT_IS_NIL);
    CHECK_FAIL(lTvmPop(p, &r, QUE_NOWAIT), p, RECD_TOO_LONG);
    queuevoid(p, r, sizeof(r), 7);
    CHECK_FAIL(lTvmPop(p, NULL, QUE_NOWAIT), p, CONDIT_IS_NIL);
    CHECK_FAIL(lTvmPop(p, &r, 7), p, NOT_SUPPT_OPT);
    CHECK_FAIL(lTvmPopup(p, 1, 0, NULL, &out), p, CONDIT_IS_NIL);
    CHECK_FAIL(lTvmPopup(p, 1, 0, &n, NULL), p, CONDIT_IS_NIL);
    CHECK_FAIL(lTvmPopup(p, 0, 0, &n, &out), p, CONDIT_IS_NIL);
    CHECK_FAIL(lTvmPopup(p, 1, -1, &n, &out), p, CONDIT_IS_NIL);
    /* The handle still works. */
    CHECK_FAIL(lTvmPop(p, &r, QUE_NOWAIT), p, NO_DATA_FOUND);
    CHECK_SUCC(lTvmShare(p, p), p);
    vCloneFree(p);
}

/* lTvmConnect on a connected handle closes the old connection first. */
static void reconnect_replaces(void)
{
    flush_redis();
    SATvm *p = connected();
    rec64 r;
    bind_rec(p, &r, 8, 1);
    CHECK_SUCC(lAsyPush(p), p);
    CHECK_SUCC(lTvmConnect(p, LOCALHOST, redis_port(), 5), p);
    CHECK_EQ(llen(8), 1); /* the asynchronous push was finished first */
    npush(p, 8, 2);
    CHECK_EQ(llen(8), 2);
    vCloneFree(p);
}

/* ======================================================================== */
/* Push and pop                                                             */
/* ======================================================================== */

/* FIFO over the network; NO_DATA_FOUND when empty; m_lEffect = 1. */
static void push_pop_in_order(void)
{
    flush_redis();
    SATvm *p = connected();
    for (long i = 0; i < 5; i++) {
        npush(p, 21, i);
        CHECK_EQU(p->m_lEffect, 1);
    }
    CHECK_EQ(llen(21), 5);
    /* The key is the decimal id, a record one value of lSize bytes. */
    CHECK_STR(REDIS("strlen 21"), "WRONGTYPE Operation against a key holding the wrong kind of value");
    CHECK_STR(REDIS("eval \"return string.len(redis.call('lindex', KEYS[1], 0))\" 1 21"), "64");
    for (long i = 0; i < 5; i++) {
        EXPECT_NPOP(p, 21, i);
        CHECK_EQU(p->m_lEffect, 1);
    }
    rec64 out;
    queuevoid(p, out, sizeof(out), 21);
    CHECK_FAIL(lTvmPop(p, &out, QUE_NOWAIT), p, NO_DATA_FOUND);
    CHECK_EQ(lGetTErrno(), NO_DATA_FOUND);
    vCloneFree(p);
}

/* A value shorter than lSize is followed by zero bytes. */
static void pop_short_value(void)
{
    flush_redis();
    CHECK_STR(REDIS("rpush 10 abcdefghij"), "1");
    SATvm *p = connected();
    char out[64];
    memset(out, 'x', sizeof(out));
    queuevoid(p, out, sizeof(out), 10);
    CHECK_SUCC(lTvmPop(p, out, QUE_NOWAIT), p);
    char want[64] = "abcdefghij";
    CHECK_MEM(out, want, sizeof(out));
    vCloneFree(p);
}

struct later_push {
    long delay_ms;
    TABLE t;
    long n;
};

static void *push_later(void *v)
{
    struct later_push *a = (struct later_push *)v;
    sleep_ms(a->delay_ms);
    SATvm *q = connected();
    for (long i = 0; i < a->n; i++)
        npush(q, a->t, i);
    vCloneFree(q);
    return NULL;
}

/* QUE_NORMAL waits for a record, longer than the connection's timeout. */
static void pop_waits(void)
{
    flush_redis();
    SATvm *p = (SATvm *)pCloneSATvm();
    REQUIRE_SUCC(lTvmConnect(p, LOCALHOST, redis_port(), 1), p);
    struct later_push a = { 1500, 11, 1 };
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, push_later, &a) == 0);
    rec64 out;
    queuevoid(p, out, sizeof(out), 11);
    long long t0 = mono_ms();
    CHECK_SUCC(lTvmPop(p, &out, QUE_NORMAL), p);
    CHECK_RANGE(mono_ms() - t0, 1300, 5000);
    CHECK_EQ(out.n, 0);
    pthread_join(th, NULL);
    vCloneFree(p);
}

/* A value longer than lSize: RECD_TOO_LONG, never cut, never lost: the
 * handle keeps it for the next pop with room, and vTvmDisconnect puts what
 * it keeps back at the head of the list, in order. */
static void pop_too_long_is_kept(void)
{
    flush_redis();
    SATvm *p = connected();
    char big[100], out[100];
    memset(big, 'A', sizeof(big));
    queuevoid(p, big, sizeof(big), 12);
    CHECK_SUCC(lTvmPush(p), p);
    memset(big, 'B', sizeof(big));
    CHECK_SUCC(lTvmPush(p), p);

    queuevoid(p, out, 50, 12);
    CHECK_FAIL(lTvmPop(p, out, QUE_NOWAIT), p, RECD_TOO_LONG);
    CHECK_EQ(llen(12), 1);                                       /* A is in the handle */
    CHECK_FAIL(lTvmPop(p, out, QUE_NOWAIT), p, RECD_TOO_LONG); /* still too small: B stays */
    CHECK_EQ(llen(12), 1);
    queuevoid(p, out, sizeof(out), 12);
    CHECK_SUCC(lTvmPop(p, out, QUE_NOWAIT), p);
    CHECK(out[0] == 'A' && out[99] == 'A');
    CHECK_SUCC(lTvmPop(p, out, QUE_NOWAIT), p);
    CHECK(out[0] == 'B' && out[99] == 'B');

    /* Kept values go back at the head when the handle disconnects. */
    CHECK_STR(REDIS("rpush 12 %s %s %s", "CCCC", "DDDD", "EEEE"), "3");
    queuevoid(p, out, 2, 12);
    size_t n = 9;
    void *arr = NULL;
    CHECK_FAIL(lTvmPopup(p, 3, 0, &n, &arr), p, RECD_TOO_LONG); /* all three taken, all kept */
    CHECK(arr == NULL && n == 0);
    CHECK_EQ(llen(12), 0);
    CHECK_STR(REDIS("rpush 12 FFFF"), "1");
    vTvmDisconnect(p);
    CHECK_EQ(p->m_lErrno, 0);
    CHECK_EQ(llen(12), 4);
    CHECK_STR(REDIS("lindex 12 0"), "CCCC");
    CHECK_STR(REDIS("lindex 12 1"), "DDDD");
    CHECK_STR(REDIS("lindex 12 2"), "EEEE");
    CHECK_STR(REDIS("lindex 12 3"), "FFFF");

    /* Popup returns the records before a long one, and keeps it. */
    REQUIRE_SUCC(lTvmConnect(p, LOCALHOST, redis_port(), 5), p);
    CHECK_STR(REDIS("rpush 12 %s", "GGGGGGGGGG"), "5");
    queuevoid(p, out, 4, 12);
    CHECK_FAIL(lTvmPopup(p, 10, 0, &n, &arr), p, RECD_TOO_LONG);
    CHECK_EQU(n, 4);
    CHECK_EQU(p->m_lEffect, 4);
    CHECK(arr != NULL && memcmp(arr, "CCCCDDDDEEEEFFFF", 16) == 0);
    TFree(arr);
    queuevoid(p, out, 10, 12);
    CHECK_SUCC(lTvmPopup(p, 10, 0, &n, &arr), p);
    CHECK_EQU(n, 1);
    CHECK(arr != NULL && memcmp(arr, "GGGGGGGGGG", 10) == 0);
    TFree(arr);
    /* A handle freed without vTvmDisconnect puts back too. */
    CHECK_STR(REDIS("rpush 12 HHHHHHHH"), "1");
    queuevoid(p, out, 4, 12);
    CHECK_FAIL(lTvmPop(p, out, QUE_NOWAIT), p, RECD_TOO_LONG);
    CHECK_EQ(llen(12), 0);
    vCloneFree(p);
    CHECK_STR(REDIS("lindex 12 0"), "HHHHHHHH");
}

/* lTvmPopup's result rules, as the local lPopup's. */
static void popup_rules(void)
{
    flush_redis();
    SATvm *p = connected();
    size_t n = 9;
    void *arr = (void *)&n;
    rec64 r;
    queuenull(p, sizeof(rec64), 13);
    CHECK_FAIL(lTvmPopup(p, 5, 0, &n, &arr), p, NO_DATA_FOUND);
    CHECK(arr == NULL && n == 0);
    for (long i = 0; i < 3; i++)
        npush(p, 13, i);
    queuenull(p, sizeof(rec64), 13);
    CHECK_SUCC(lTvmPopup(p, 5, 0, &n, &arr), p);
    CHECK_EQU(n, 3);
    CHECK_EQU(p->m_lEffect, 3);
    for (long i = 0; i < 3 && arr; i++)
        CHECK_EQ(((rec64 *)arr)[i].n, i);
    TFree(arr);

    /* Timed out with some: MQUE_WAIT_TMO, the array valid. */
    for (long i = 0; i < 2; i++)
        npush(p, 13, i);
    queuenull(p, sizeof(rec64), 13);
    long long t0 = mono_ms();
    CHECK_FAIL(lTvmPopup(p, 5, 1, &n, &arr), p, MQUE_WAIT_TMO);
    CHECK_RANGE(mono_ms() - t0, 900, 3000);
    CHECK_EQU(n, 2);
    CHECK_EQU(p->m_lEffect, 2);
    CHECK(arr != NULL);
    TFree(arr);
    /* None within secs: NO_DATA_FOUND. */
    CHECK_FAIL(lTvmPopup(p, 5, 1, &n, &arr), p, NO_DATA_FOUND);
    CHECK(arr == NULL);

    /* Exactly expect: RC_SUCC, the rest stays. */
    for (long i = 0; i < 4; i++)
        npush(p, 13, i);
    queuenull(p, sizeof(rec64), 13);
    CHECK_SUCC(lTvmPopup(p, 3, 1, &n, &arr), p);
    CHECK_EQU(n, 3);
    TFree(arr);
    CHECK_EQ(llen(13), 1);

    /* Waiting: records pushed meanwhile are taken. */
    CHECK_STR(REDIS("del 13"), "1");
    struct later_push a = { 300, 13, 3 };
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, push_later, &a) == 0);
    queuenull(p, sizeof(rec64), 13);
    CHECK_SUCC(lTvmPopup(p, 3, 5, &n, &arr), p);
    CHECK_EQU(n, 3);
    for (long i = 0; i < 3 && arr; i++)
        CHECK_EQ(((rec64 *)arr)[i].n, i);
    TFree(arr);
    pthread_join(th, NULL);
    (void)r;
    vCloneFree(p);
}

/* ======================================================================== */
/* Asynchronous pushes                                                      */
/* ======================================================================== */

/* lAsyPush then lAsyWait: every record in, in order, counted. */
static void async_push_then_wait(void)
{
    flush_redis();
    SATvm *p = connected();
    rec64 r;
    bind_rec(p, &r, 14, 0);
    for (long i = 0; i < 5000; i++) {
        r.n = i;
        snprintf(r.text, sizeof(r.text), "record %ld", i);
        if (!CHECK_SUCC(lAsyPush(p), p))
            break;
    }
    CHECK_SUCC(lAsyWait(p), p);
    CHECK_EQU(p->m_lEffect, 5000);
    CHECK_EQ(llen(14), 5000);
    for (long i = 0; i < 5000; i += 499)
        CHECK_EQ(atol(REDIS("eval \"return struct.unpack('<i8', redis.call('lindex', KEYS[1], %ld))\" 1 14", i)), i);
    /* Nothing outstanding: RC_SUCC, effect 0. */
    CHECK_SUCC(lAsyWait(p), p);
    CHECK_EQU(p->m_lEffect, 0);
    /* vTvmDisconnect finishes outstanding pushes too. */
    for (long i = 0; i < 100; i++)
        CHECK_SUCC(lAsyPush(p), p);
    vTvmDisconnect(p);
    CHECK_EQ(p->m_lErrno, 0);
    CHECK_EQU(p->m_lEffect, 100);
    CHECK_EQ(llen(14), 5100);
    vCloneFree(p);
}

/* A failed asynchronous push is reported by lAsyWait with the number of
 * records that went in; until then lAsyPush fails at once with it; after
 * it the handle works again. vTvmDisconnect reports it too. */
static void async_failure_is_reported(void)
{
    flush_redis();
    CHECK_STR(REDIS("set 31 not-a-list"), "OK");
    SATvm *p = connected();
    rec64 r;
    long accepted = 0, refused = 0;
    bind_rec(p, &r, 30, 1);
    for (int i = 0; i < 10; i++)
        accepted += lAsyPush(p) == RC_SUCC;
    p->tblName = 31; /* WRONGTYPE: SVR_EXCEPTION */
    accepted += lAsyPush(p) == RC_SUCC;
    p->tblName = 30;
    for (int i = 0; i < 10; i++) {
        long rc = lAsyPush(p);
        accepted += rc == RC_SUCC;
        if (rc != RC_SUCC) {
            refused++;
            CHECK_EQ(p->m_lErrno, SVR_EXCEPTION);
        }
    }
    CHECK_EQ(accepted + refused, 21);
    CHECK_FAIL(lAsyWait(p), p, SVR_EXCEPTION);
    CHECK_EQU(p->m_lEffect, (size_t)(accepted - 1));
    CHECK_EQ(llen(30), accepted - 1);
    /* Ready again. */
    CHECK_SUCC(lAsyPush(p), p);
    CHECK_SUCC(lAsyWait(p), p);
    CHECK_EQU(p->m_lEffect, 1);
    CHECK_EQ(llen(30), accepted);
    /* Reported by vTvmDisconnect when nobody waited. */
    p->tblName = 31;
    CHECK_SUCC(lAsyPush(p), p);
    vTvmDisconnect(p);
    CHECK_EQ(p->m_lErrno, SVR_EXCEPTION);
    CHECK_EQ(lGetTErrno(), SVR_EXCEPTION);
    vCloneFree(p);
}

/* The connection breaks after 100 answers: lAsyWait gives SOCK_IO_RESET
 * and 100; the next pushes reconnect. */
static void async_connection_lost(void)
{
    static const char *const ones[] = { ":1\r\n" };
    static const fake_spec spec = { TVMQ_PROBE, ones, 1, 100, 1 };
    int port = fake_server(&spec);
    SATvm *p = (SATvm *)pCloneSATvm();
    REQUIRE_SUCC(lTvmConnect(p, LOCALHOST, port, 2), p);
    rec64 r;
    bind_rec(p, &r, 1, 1);
    for (int i = 0; i < 1000; i++)
        if (lAsyPush(p) != RC_SUCC)
            break;
    CHECK_FAIL(lAsyWait(p), p, SOCK_IO_RESET);
    CHECK_EQU(p->m_lEffect, 100);
    for (int i = 0; i < 10; i++)
        CHECK_SUCC(lAsyPush(p), p);
    CHECK_SUCC(lAsyWait(p), p);
    CHECK_EQU(p->m_lEffect, 10);
    vCloneFree(p);
}

/* ======================================================================== */
/* Errors from the server and the network                                   */
/* ======================================================================== */

/* tvmq serve's error words come back as the local calls' codes. */
static void server_error_words(void)
{
    static const char *const script[] = {
        "-DATA_SPC_FULL queue 21 is full: no space for insert data\r\n",
        "-RECD_TOO_LONG value of 400 bytes, queue 21 holds records of at most 304\r\n",
        "-ERR no such queue '21'\r\n",
        "-SHM_ERR_EIDRM queue 21 was dropped\r\n",
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        "-OOM command not allowed when used memory > 'maxmemory'.\r\n",
        "+OK\r\n",
        ":1\r\n",
        "?garbage\r\n",
        ":1\r\n",
    };
    static const fake_spec spec = { TVMQ_PROBE, script, 10, -1, 1 };
    int port = fake_server(&spec);
    SATvm *p = (SATvm *)pCloneSATvm();
    rec64 r;
    REQUIRE_SUCC(lTvmConnect(p, LOCALHOST, port, 2), p);
    bind_rec(p, &r, 21, 1);
    CHECK_FAIL(lTvmPush(p), p, DATA_SPC_FULL);
    CHECK_FAIL(lTvmPush(p), p, RECD_TOO_LONG);
    CHECK_FAIL(lTvmPush(p), p, TBL_NOT_FOUND);
    CHECK_FAIL(lTvmPop(p, &r, QUE_NORMAL), p, SHM_ERR_EIDRM);
    CHECK_FAIL(lTvmPush(p), p, SVR_EXCEPTION);
    CHECK_FAIL(lTvmPush(p), p, SVR_EXCEPTION);
    CHECK_FAIL(lTvmPush(p), p, SOCK_COM_EXCP); /* +OK makes no sense for RPUSH */
    CHECK_SUCC(lTvmPush(p), p);
    CHECK_FAIL(lTvmPush(p), p, SOCK_COM_EXCP); /* not RESP: the connection is dropped */
    CHECK_SUCC(lTvmPush(p), p);                /* a new connection */
    vCloneFree(p);
}

/* A server that stops answering: SOCK_READ_TMO after the timeout; the next
 * call connects again (and the server, back, answers). */
static void server_silent_times_out(void)
{
    static const fake_spec spec = { TVMQ_PROBE, NULL, 0, -1, 1 };
    int port = fake_server(&spec);
    SATvm *p = (SATvm *)pCloneSATvm();
    rec64 r;
    REQUIRE_SUCC(lTvmConnect(p, LOCALHOST, port, 1), p);
    bind_rec(p, &r, 21, 1);
    long long t0 = mono_ms();
    CHECK_FAIL(lTvmPush(p), p, SOCK_READ_TMO);
    CHECK_RANGE(mono_ms() - t0, 900, 3000);
    CHECK_SUCC(lTvmPush(p), p);
    vCloneFree(p);
}

/* A server that closes the connection in the middle of a call:
 * SOCK_IO_RESET; the next call connects again. */
static void server_closes_mid_call(void)
{
    static const fake_spec spec = { TVMQ_PROBE, NULL, 0, 0, 1 };
    int port = fake_server(&spec);
    SATvm *p = (SATvm *)pCloneSATvm();
    rec64 r;
    REQUIRE_SUCC(lTvmConnect(p, LOCALHOST, port, 2), p);
    bind_rec(p, &r, 21, 1);
    CHECK_FAIL(lTvmPush(p), p, SOCK_IO_RESET);
    CHECK_SUCC(lTvmPush(p), p);
    vCloneFree(p);
}

/* Starts a redis-server on `port` in the background; returns its pid. */
static pid_t start_redis(int port)
{
    const char *server = getenv("REDIS_SERVER");
    char portbuf[16];
    REQUIRE(server != NULL);
    snprintf(portbuf, sizeof(portbuf), "%d", port);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1);
        execl(server, server, "--port", portbuf, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
              "--dir", "/tmp", (char *)NULL);
        _exit(127);
    }
    remember_child(pid);
    for (int i = 0; i < 100; i++) {
        if (strcmp(redis_at(port, "ping"), "PONG") == 0)
            return pid;
        sleep_ms(50);
    }
    fail_at(__FILE__, __LINE__, "redis-server on port %d did not start", port);
    exit(1);
}

static void stop_redis(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    forget_child(pid);
}

struct blocked_pop {
    SATvm *p;
    long rc;
    Uenum err;
};

static void *pop_blocked(void *v)
{
    struct blocked_pop *a = (struct blocked_pop *)v;
    rec64 out;
    queuevoid(a->p, out, sizeof(out), 15);
    a->rc = lTvmPop(a->p, &out, QUE_NORMAL);
    a->err = a->p->m_lErrno;
    return NULL;
}

/* redis-server killed while a pop waits: SOCK_IO_RESET; while it is away:
 * SOCK_CONN_ERR; once it is back, the next call connects again. */
static void server_killed_mid_call(void)
{
    int port = free_port();
    pid_t pid = start_redis(port);
    struct blocked_pop a;
    a.p = (SATvm *)pCloneSATvm();
    REQUIRE_SUCC(lTvmConnect(a.p, LOCALHOST, port, 2), a.p);
    SATvm *q = (SATvm *)pCloneSATvm();
    REQUIRE_SUCC(lTvmConnect(q, LOCALHOST, port, 2), q);
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, pop_blocked, &a) == 0);
    sleep_ms(300);
    stop_redis(pid);
    pthread_join(th, NULL);
    CHECK_EQ(a.rc, RC_FAIL);
    CHECK_EQ(a.err, SOCK_IO_RESET);

    rec64 r;
    bind_rec(q, &r, 15, 1);
    /* q's connection is dead too: its push is reported (never retried). */
    long rc = lTvmPush(q);
    CHECK_EQ(rc, RC_FAIL);
    CHECK(q->m_lErrno == SOCK_IO_RESET || q->m_lErrno == SOCK_SEND_ERR);
    CHECK_FAIL(lTvmPush(q), q, SOCK_CONN_ERR); /* nobody there */
    CHECK_FAIL(lAsyPush(q), q, SOCK_CONN_ERR);
    CHECK_FAIL(lAsyWait(q), q, SOCK_CONN_ERR);   /* the failure, collected */

    pid = start_redis(port);
    CHECK_SUCC(lTvmPush(q), q);
    CHECK_SUCC(lTvmPush(a.p), a.p);
    CHECK_EQ(atol(redis_at(port, "llen 15")), 2);
    vCloneFree(a.p);
    vCloneFree(q);
    stop_redis(pid);
}

/* ======================================================================== */
/* Shared connections                                                       */
/* ======================================================================== */

#define SHARERS 8
#define SHARED_EACH 500

struct sharer {
    SATvm *p;
    int index;
};

static void *share_worker(void *v)
{
    struct sharer *s = (struct sharer *)v;
    TABLE t = (TABLE)(40 + s->index);
    for (long i = 0; i < SHARED_EACH; i++)
        if (!npush(s->p, t, i))
            break;
    /* An error of one handle is its own. */
    if (s->index == 0) {
        rec64 r;
        bind_rec(s->p, &r, 31, 0);
        CHECK_FAIL(lTvmPush(s->p), s->p, SVR_EXCEPTION);
    }
    for (long i = 0; i < SHARED_EACH / 2; i++)
        EXPECT_NPOP(s->p, t, i);
    return NULL;
}

/* Handles of 8 threads sharing one connection (lTvmShare): each gets its
 * own answers and errors; order kept; disconnecting one leaves the others. */
static void shared_connection(void)
{
    flush_redis();
    CHECK_STR(REDIS("set 31 not-a-list"), "OK");
    SATvm *g = connected();
    struct sharer s[SHARERS];
    pthread_t th[SHARERS];
    for (int i = 0; i < SHARERS; i++) {
        s[i].p = (SATvm *)pCloneSATvm();
        s[i].index = i;
        REQUIRE_SUCC(lTvmShare(s[i].p, g), s[i].p);
    }
    for (int i = 0; i < SHARERS; i++)
        REQUIRE(pthread_create(&th[i], NULL, share_worker, &s[i]) == 0);
    for (int i = 0; i < SHARERS; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < SHARERS; i++)
        CHECK_EQ(llen((TABLE)(40 + i)), SHARED_EACH / 2);
    /* The source handle and the sharers go on after one leaves. */
    vTvmDisconnect(s[0].p);
    CHECK_FAIL(lTvmPush(s[0].p), s[0].p, SERV_NOT_CONN);
    npush(s[1].p, 41, 1000);
    npush(g, 41, 1001);
    vTvmDisconnect(g);
    npush(s[2].p, 41, 1002);
    CHECK_EQ(llen(41), SHARED_EACH / 2 + 3);
    /* Asynchronous pushes through a shared connection. */
    rec64 r;
    bind_rec(s[3].p, &r, 43, 0);
    for (int i = 0; i < 3000; i++)
        CHECK_SUCC(lAsyPush(s[3].p), s[3].p);
    CHECK_SUCC(lAsyWait(s[3].p), s[3].p);
    CHECK_EQU(s[3].p->m_lEffect, 3000);
    CHECK_EQ(llen(43), SHARED_EACH / 2 + 3000);
    for (int i = 0; i < SHARERS; i++)
        vCloneFree(s[i].p);
}

/* A blocking pop on a shared handle does not hold up the other sharers. */
static void shared_blocking_pop(void)
{
    flush_redis();
    SATvm *g = connected();
    struct blocked_pop a;
    a.p = (SATvm *)pCloneSATvm();
    REQUIRE_SUCC(lTvmShare(a.p, g), a.p);
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, pop_blocked, &a) == 0);
    sleep_ms(200);
    long long t0 = mono_ms();
    for (long i = 0; i < 100; i++)
        npush(g, 16, i);
    CHECK_RANGE(mono_ms() - t0, 0, 2000);
    CHECK_EQ(llen(16), 100);
    npush(g, 15, 7);
    pthread_join(th, NULL);
    CHECK_EQ(a.rc, RC_SUCC);
    vCloneFree(a.p);
    vCloneFree(g);
}

/* ======================================================================== */
/* tvmq serve                                                               */
/* ======================================================================== */

/* Starts `$TVMQ serve` on a free port over this test's $TVMDBD; returns its
 * port (the child is killed at exit). */
static int start_tvmq_serve(void)
{
    const char *tvmq = getenv("TVMQ");
    int port = free_port();
    char portbuf[16];
    REQUIRE(tvmq != NULL);
    snprintf(portbuf, sizeof(portbuf), "%d", port);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1);
        execl(tvmq, tvmq, "serve", "--port", portbuf, "--dir", queue_dir(), (char *)NULL);
        _exit(127);
    }
    remember_child(pid);
    for (int i = 0; i < 100; i++) {
        if (strcmp(redis_at(port, "ping"), "PONG") == 0)
            return port;
        sleep_ms(50);
    }
    fail_at(__FILE__, __LINE__, "tvmq serve on port %d did not start", port);
    exit(1);
}

struct dropped_pop {
    SATvm *p;
    long rc;
    Uenum err;
};

static void *pop_until_dropped(void *v)
{
    struct dropped_pop *a = (struct dropped_pop *)v;
    rec64 out;
    queuevoid(a->p, out, sizeof(out), 52);
    a->rc = lTvmPop(a->p, &out, QUE_NORMAL);
    a->err = a->p->m_lErrno;
    return NULL;
}

/* Against tvmq serve, the network calls give the local calls' codes: full
 * queue, record too long, no such queue, queue dropped while waiting; a
 * value kept by the handle goes back (at the tail) on disconnect. */
static void tvmq_serve_error_codes(void)
{
    int port = start_tvmq_serve();
    make_queue(50, 2, sizeof(rec64));
    make_queue(52, 2, sizeof(rec64));
    SATvm *p = (SATvm *)pCloneSATvm();
    char host[] = "127.0.0.1";
    REQUIRE_SUCC(lTvmConnect(p, host, port, 5), p);
    npush(p, 50, 1);
    npush(p, 50, 2);
    rec64 r;
    bind_rec(p, &r, 50, 3);
    CHECK_FAIL(lTvmPush(p), p, DATA_SPC_FULL);
    CHECK_FAIL(lAsyPush(p) == RC_SUCC ? lAsyWait(p) : RC_FAIL, p, DATA_SPC_FULL);
    CHECK_EQU(p->m_lEffect, 0);
    char big[100] = { 0 };
    queuevoid(p, big, sizeof(big), 52);
    CHECK_FAIL(lTvmPush(p), p, RECD_TOO_LONG);
    bind_rec(p, &r, 51, 1);
    CHECK_FAIL(lTvmPush(p), p, TBL_NOT_FOUND);
    CHECK_FAIL(lTvmPop(p, &r, QUE_NOWAIT), p, TBL_NOT_FOUND);

    /* A value longer than lSize: kept, then re-pushed at disconnect. */
    char small[32];
    queuevoid(p, small, sizeof(small), 50);
    CHECK_FAIL(lTvmPop(p, small, QUE_NOWAIT), p, RECD_TOO_LONG);
    CHECK_EQ(depth(50), 1);
    vTvmDisconnect(p);
    CHECK_EQ(p->m_lErrno, 0);
    CHECK_EQ(depth(50), 2);
    REQUIRE_SUCC(lTvmConnect(p, host, port, 5), p);
    EXPECT_NPOP(p, 50, 2);
    EXPECT_NPOP(p, 50, 1);
    size_t n = 0;
    void *arr = NULL;
    queuenull(p, sizeof(rec64), 50);
    CHECK_FAIL(lTvmPopup(p, 2, 0, &n, &arr), p, NO_DATA_FOUND);

    /* Dropped while a pop waits on it. */
    struct dropped_pop a = { (SATvm *)pCloneSATvm(), 0, 0 };
    REQUIRE_SUCC(lTvmConnect(a.p, host, port, 5), a.p);
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, pop_until_dropped, &a) == 0);
    sleep_ms(300);
    CHECK_SUCC(lDropTable(G(), 52), G());
    pthread_join(th, NULL);
    CHECK_EQ(a.rc, RC_FAIL);
    CHECK_EQ(a.err, SHM_ERR_EIDRM);
    vCloneFree(a.p);
    vCloneFree(p);
}

TEST_MAIN(T(connect_refused), T(connect_timeout), T(connect_bad_arguments), T(connect_to_silent_server),
          T(connect_unix_socket), T(not_connected), T(clone_is_not_connected), T(disconnect_never_connected),
          T(null_arguments), T(reconnect_replaces), T(push_pop_in_order), T(pop_short_value), T(pop_waits),
          T(pop_too_long_is_kept), T(popup_rules), T(async_push_then_wait), T(async_failure_is_reported),
          T(async_connection_lost), T(server_error_words), T(server_silent_times_out),
          T(server_closes_mid_call), T(server_killed_mid_call), T(shared_connection), T(shared_blocking_pop),
          T(tvmq_serve_error_codes))
