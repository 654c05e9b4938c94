/*
 * net_driver.c: benchmark driver for the network calls of tvm.h (lTvmPush,
 * lTvmPop, lAsyPush, shared connections), against tvmq serve or a
 * redis-server, plus a bare TCP echo (client and server) for the floor of
 * one synchronous round trip.
 *
 *   net_driver --host H --port P --op OP --threads N --records R
 *              [--queue Q] [--size S] [--shared] [--nowait] [--timeout SECS]
 *   net_driver --op echo-server|resp-server --port P [--host H] [--size S]
 *
 *   OP  push         N threads each lTvmPush R/N records
 *       pop          N threads each lTvmPop(QUE_NORMAL) R/N records (the
 *                    driver first fills the queue with R records, lAsyPush,
 *                    outside the clock)
 *       asypush      N threads each lAsyPush R/N records, then lAsyWait
 *       lease        N threads each lTvmPopLease(QUE_NOWAIT) + lTvmAck R/N
 *                    records (the driver first fills the queue, as for pop;
 *                    on a Redis it stores lease options for the queue with
 *                    lTvmCreateQueueEx if it has none)
 *       ackpoplease  the same with lTvmAckPopLease (each acknowledgement and
 *                    the next lease in one call)
 *       blmove       Redis's reliable queue written by hand on raw sockets
 *                    (no tvm.h): N threads each BLMOVE Q -> Q:processing:i
 *                    then LREM of the value, R/N records (the queue filled
 *                    first, as for pop); --pipelined: each LREM in the same
 *                    write as the next BLMOVE
 *       echo         N threads each make R/N round trips of S bytes over
 *                    their own TCP connection to an echo server (no tvm.h)
 *       echo-server  serves echo on H:P, a thread per connection, until
 *                    killed (prints "listening" once ready)
 *       resp-server  the least a RESP server can do, the same way (a thread
 *                    per connection, blocking I/O): RPUSH answered :1, LPOP
 *                    and BLPOP with an S-byte value, anything else (the
 *                    client's CLUSTER SLOTS probe) with an error; the floor
 *                    of the client's own cost, next to the echo's
 *
 *   --shared   the N threads' handles share one connection (lTvmShare);
 *              default: each thread connects its own handle
 *   --nowait   pop with QUE_NOWAIT (LPOP) instead of QUE_NORMAL (BLPOP)
 *   --replicas K  lTvmRequireReplicas(p, K, 5000) on every handle: pushes
 *              and acks wait for K replicas (Redis)
 *   --spread S lTvmSpread(p, Q, S) on every handle (Redis, Redis Cluster)
 *   --queue Q  queue id (default 21; its key on the server is "Q")
 *   --size S   record size in bytes (default 304, the seed's dbUser; the
 *              echo uses S + 16, the seed's 320-byte slot, unless given)
 *   H may be a unix socket path (then P is ignored) except for the echo.
 *
 * Records are filled as push_bench.c fills dbUser (seed_record.h), with a
 * sequence number in the first 8 bytes. As in the seed, connections are made
 * before the clock starts; the clock covers the work and the joins.
 *
 * Success: one line on stdout,
 *   ok op=OP threads=N shared=0|1 records=R ms=M rate=RECORDS_PER_S errors=E
 *      cpu_us_per_record=C switches_per_record=W
 * (errors: failed calls, each also reported on stderr; exit 1 if any; C and
 * W: this process's CPU time and context switches over the clocked part,
 * per record: what the client costs, whatever else runs on the machine).
 * Bad arguments: usage on stderr, exit 2.
 *
 * Build: gcc -O2 -Wall -Werror -o net_driver bench/drivers/net_driver.c -I include \
 *            -L target/release -ltvm -lpthread -Wl,-rpath,<abs libdir>
 */
#define _GNU_SOURCE
#include "tvm.h"
#include "seed_record.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/socket.h>

#define MAX_THREADS 64

static struct {
    const char *host;
    long port;
    const char *op;
    int threads;
    unsigned long long records;
    TABLE queue;
    size_t size;
    int size_given;
    int shared;
    int timeout;
    int nowait;
    long replicas;
    long spread;
    int pipelined;
} cfg = { "127.0.0.1", 5050, NULL, 1, 0, 21, 304, 0, 0, 10, 0, 0, 0, 0 };

typedef struct {
    _Alignas(128) int index;
    unsigned long long count;
    unsigned long long errors;
    SATvm *handle;
    int fd;
    pthread_t tid;
} job_t;

static pthread_barrier_t start_line;

/* CPU time of this process (all threads, user + system), in ms, and its
 * context switches (voluntary + involuntary). */
static double cpu_ms(long *switches)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    *switches = ru.ru_nvcsw + ru.ru_nivcsw;
    return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

static double g_cpu0;
static long g_csw0;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Runs worker on cfg.threads threads, one job each, released together at
 * the start line; the milliseconds from the release to the last one's end. */
static double run_threads(job_t *jobs, void *(*worker)(void *))
{
    for (int i = 0; i < cfg.threads; i++)
        pthread_create(&jobs[i].tid, NULL, worker, &jobs[i]);
    pthread_barrier_wait(&start_line);
    g_cpu0 = cpu_ms(&g_csw0);
    double t0 = now_ms();
    for (int i = 0; i < cfg.threads; i++)
        pthread_join(jobs[i].tid, NULL);
    return now_ms() - t0;
}

static void usage(void)
{
    fprintf(stderr, "usage: net_driver --host H --port P --op push|pop|asypush|lease|ackpoplease|blmove|echo --threads N --records R\n"
                    "                  [--queue Q] [--size S] [--shared] [--nowait] [--timeout SECS]\n"
                    "       net_driver --op echo-server|resp-server --port P [--host H] [--size S]\n");
    exit(2);
}

static void report(SATvm *p, const char *what, job_t *j)
{
    if (j->errors++ < 5)
        fprintf(stderr, "net_driver: thread %d: %s: %s (%u)\n", j->index, what, sGetTError(p->m_lErrno),
                p->m_lErrno);
}

/* ---- tvm.h ---------------------------------------------------------------- */

static void *tvm_worker(void *arg)
{
    job_t *j = (job_t *)arg;
    SATvm *p = j->handle;
    char *rec = calloc(1, cfg.size);
    unsigned long long seq = (unsigned long long)j->index << 40;

    seed_record_fill(rec, cfg.size);
    queuevoid(p, *rec, cfg.size, cfg.queue);
    pthread_barrier_wait(&start_line);
    if (strcmp(cfg.op, "push") == 0) {
        for (unsigned long long i = 0; i < j->count; i++) {
            seed_record_set_seq(rec, seq + i);
            if (lTvmPush(p) != RC_SUCC)
                report(p, "lTvmPush", j);
        }
    } else if (strcmp(cfg.op, "asypush") == 0) {
        for (unsigned long long i = 0; i < j->count; i++) {
            seed_record_set_seq(rec, seq + i);
            if (lAsyPush(p) != RC_SUCC)
                report(p, "lAsyPush", j);
        }
        if (lAsyWait(p) != RC_SUCC)
            report(p, "lAsyWait", j);
    } else if (strcmp(cfg.op, "ackpoplease") == 0) {
        TvmLease l;
        int held = 0;
        for (unsigned long long i = 0; i < j->count; i++) {
            queuevoid(p, *rec, cfg.size, cfg.queue);
            long rc = held ? lTvmAckPopLease(p, &l, rec, QUE_NOWAIT, 0, &l) : lTvmPopLease(p, rec, QUE_NOWAIT, 0, &l);
            held = rc == RC_SUCC;
            if (!held)
                report(p, "lTvmAckPopLease", j);
        }
        p->tblName = cfg.queue;
        if (held && lTvmAck(p, &l) != RC_SUCC)
            report(p, "lTvmAck", j);
    } else if (strcmp(cfg.op, "lease") == 0) {
        TvmLease l;
        for (unsigned long long i = 0; i < j->count; i++) {
            queuevoid(p, *rec, cfg.size, cfg.queue);
            if (lTvmPopLease(p, rec, QUE_NOWAIT, 0, &l) != RC_SUCC) {
                report(p, "lTvmPopLease", j);
                continue;
            }
            p->tblName = cfg.queue;
            if (lTvmAck(p, &l) != RC_SUCC)
                report(p, "lTvmAck", j);
        }
    } else {
        for (unsigned long long i = 0; i < j->count; i++)
            if (lTvmPop(p, rec, cfg.nowait ? QUE_NOWAIT : QUE_NORMAL) != RC_SUCC)
                report(p, "lTvmPop", j);
    }
    free(rec);
    return NULL;
}

/* The options of --replicas and --spread on a connected handle. */
static void configure(SATvm *p)
{
    if (cfg.spread && lTvmSpread(p, cfg.queue, cfg.spread) != RC_SUCC) {
        fprintf(stderr, "net_driver: lTvmSpread: %s\n", sGetTError(p->m_lErrno));
        exit(1);
    }
    if (cfg.replicas && lTvmRequireReplicas(p, cfg.replicas, 5000) != RC_SUCC) {
        fprintf(stderr, "net_driver: lTvmRequireReplicas: %s\n", sGetTError(p->m_lErrno));
        exit(1);
    }
}

/* Fills the queue with n records (lAsyPush on one connection). */
static void fill(unsigned long long n)
{
    SATvm *p = (SATvm *)pCloneSATvm();
    char *rec = calloc(1, cfg.size);
    seed_record_fill(rec, cfg.size);
    if (lTvmConnect(p, (char *)cfg.host, cfg.port, cfg.timeout) != RC_SUCC) {
        fprintf(stderr, "net_driver: fill: lTvmConnect: %s\n", sGetTError(p->m_lErrno));
        exit(1);
    }
    if (cfg.spread)
        lTvmSpread(p, cfg.queue, cfg.spread);
    if (strcmp(cfg.op, "lease") == 0 || strcmp(cfg.op, "ackpoplease") == 0) {
        TvmQueueOptions o;
        lInitQueueOptions(&o, sizeof(o));
        o.leases = true;
        /* tvmq serve creates no queue over the network: RMT_NOT_SUPPT. */
        if (lTvmCreateQueueEx(p, cfg.queue, &o) != RC_SUCC && p->m_lErrno != TBL_ARD_EXIST &&
            p->m_lErrno != RMT_NOT_SUPPT) {
            fprintf(stderr, "net_driver: lTvmCreateQueueEx: %s\n", sGetTError(p->m_lErrno));
            exit(1);
        }
    }
    queuevoid(p, *rec, cfg.size, cfg.queue);
    for (unsigned long long i = 0; i < n; i++) {
        seed_record_set_seq(rec, i);
        if (lAsyPush(p) != RC_SUCC)
            break;
    }
    if (lAsyWait(p) != RC_SUCC || p->m_lEffect != n) {
        fprintf(stderr, "net_driver: fill: %s, %zu records in\n", sGetTError(p->m_lErrno), p->m_lEffect);
        exit(1);
    }
    vCloneFree(p);
    free(rec);
}

static double run_tvm(job_t *jobs)
{
    SATvm *g = (SATvm *)pGetSATvm();
    if (strcmp(cfg.op, "pop") == 0 || strncmp(cfg.op, "lease", 5) == 0 || strcmp(cfg.op, "ackpoplease") == 0)
        fill(cfg.records);
    if (cfg.shared && lTvmConnect(g, (char *)cfg.host, cfg.port, cfg.timeout) != RC_SUCC) {
        fprintf(stderr, "net_driver: lTvmConnect %s:%ld: %s\n", cfg.host, cfg.port, sGetTError(g->m_lErrno));
        exit(1);
    }
    for (int i = 0; i < cfg.threads; i++) {
        SATvm *p = jobs[i].handle = (SATvm *)pCloneSATvm();
        long rc = cfg.shared ? lTvmShare(p, g) : lTvmConnect(p, (char *)cfg.host, cfg.port, cfg.timeout);
        if (rc != RC_SUCC) {
            fprintf(stderr, "net_driver: connecting thread %d: %s\n", i, sGetTError(p->m_lErrno));
            exit(1);
        }
        configure(p);
    }
    double ms = run_threads(jobs, tvm_worker);
    for (int i = 0; i < cfg.threads; i++)
        vCloneFree(jobs[i].handle);
    vTvmDisconnect(g);
    return ms;
}

/* ---- Bare TCP echo -------------------------------------------------------- */

static int tcp_connect(void)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)cfg.port) };
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    if (inet_pton(AF_INET, cfg.host, &a.sin_addr) != 1 || fd < 0 ||
        connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        fprintf(stderr, "net_driver: echo: connect %s:%ld: %s\n", cfg.host, cfg.port, strerror(errno));
        exit(1);
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

static int io_all(int fd, char *buf, size_t n, int writing)
{
    while (n > 0) {
        ssize_t r = writing ? send(fd, buf, n, MSG_NOSIGNAL) : recv(fd, buf, n, 0);
        if (r <= 0) {
            if (r < 0 && errno == EINTR)
                continue;
            return -1;
        }
        buf += r;
        n -= (size_t)r;
    }
    return 0;
}

static void *echo_worker(void *arg)
{
    job_t *j = (job_t *)arg;
    char *buf = calloc(1, cfg.size);
    seed_record_fill(buf, cfg.size);
    pthread_barrier_wait(&start_line);
    for (unsigned long long i = 0; i < j->count; i++) {
        if (io_all(j->fd, buf, cfg.size, 1) != 0 || io_all(j->fd, buf, cfg.size, 0) != 0) {
            fprintf(stderr, "net_driver: echo: connection lost\n");
            j->errors++;
            break;
        }
    }
    free(buf);
    return NULL;
}

/* ---- Redis's reliable queue written by hand (no tvm.h) --------------------- */

/* Reads one RESP reply on fd into buf (at most cap bytes of it kept);
 * returns the bulk's length, -1 for a null, -2 for an integer or simple
 * string, -3 on an error reply or a broken connection. */
static long resp_read(int fd, char *buf, size_t cap, char *rbuf, size_t *have)
{
    for (;;) {
        char *nl = memchr(rbuf, '\n', *have);
        if (nl) {
            size_t line = (size_t)(nl - rbuf) + 1;
            char kind = rbuf[0];
            long n = strtol(rbuf + 1, NULL, 10);
            if (kind == '-')
                return -3;
            if (kind == ':' || kind == '+') {
                memmove(rbuf, rbuf + line, *have - line);
                *have -= line;
                return -2;
            }
            if ((kind == '$' || kind == '*') && n < 0) {
                memmove(rbuf, rbuf + line, *have - line);
                *have -= line;
                return -1;
            }
            if (kind == '$' && *have >= line + (size_t)n + 2) {
                memcpy(buf, rbuf + line, (size_t)n < cap ? (size_t)n : cap);
                size_t used = line + (size_t)n + 2;
                memmove(rbuf, rbuf + used, *have - used);
                *have -= used;
                return n;
            }
        }
        ssize_t r = recv(fd, rbuf + *have, 65536 - *have, 0);
        if (r <= 0)
            return -3;
        *have += (size_t)r;
    }
}

/* Appends a RESP command of argc arguments (lengths in lens) to out. */
static size_t resp_cmd(char *out, int argc, const char **argv, const size_t *lens)
{
    size_t o = (size_t)sprintf(out, "*%d\r\n", argc);
    for (int i = 0; i < argc; i++) {
        o += (size_t)sprintf(out + o, "$%zu\r\n", lens[i]);
        memcpy(out + o, argv[i], lens[i]);
        o += lens[i];
        memcpy(out + o, "\r\n", 2);
        o += 2;
    }
    return o;
}

/* BLMOVE queue -> the thread's processing list, then LREM of the value,
 * each a round trip of its own (--pipelined: the LREM goes in the same
 * write as the next BLMOVE). */
static void *blmove_worker(void *arg)
{
    job_t *j = (job_t *)arg;
    char key[16], proc[48], *val = malloc(cfg.size + 64), *out = malloc(2 * cfg.size + 512);
    char *rbuf = malloc(65536);
    size_t have = 0, pending = 0;
    snprintf(key, sizeof key, "%u", cfg.queue);
    snprintf(proc, sizeof proc, "%u:processing:%d", cfg.queue, j->index);
    pthread_barrier_wait(&start_line);
    for (unsigned long long i = 0; i < j->count; i++) {
        size_t o = 0;
        if (pending) {
            const char *a[] = { "LREM", proc, "1", val };
            size_t l[] = { 4, strlen(proc), 1, pending };
            o = resp_cmd(out, 4, a, l);
            if (!cfg.pipelined) {
                if (send(j->fd, out, o, MSG_NOSIGNAL) != (ssize_t)o || resp_read(j->fd, val, 0, rbuf, &have) != -2)
                    j->errors++;
                o = 0;
            }
        }
        const char *a[] = { "BLMOVE", key, proc, "LEFT", "RIGHT", "1" };
        size_t l[] = { 6, strlen(key), strlen(proc), 4, 5, 1 };
        o += resp_cmd(out + o, 6, a, l);
        if (send(j->fd, out, o, MSG_NOSIGNAL) != (ssize_t)o) {
            j->errors++;
            break;
        }
        if (pending && cfg.pipelined && resp_read(j->fd, val, 0, rbuf, &have) != -2)
            j->errors++;
        long n = resp_read(j->fd, val, cfg.size + 64, rbuf, &have);
        if (n < 0) {
            j->errors++;
            pending = 0;
            continue;
        }
        pending = (size_t)n;
    }
    if (pending) {
        const char *a[] = { "LREM", proc, "1", val };
        size_t l[] = { 4, strlen(proc), 1, pending };
        size_t o = resp_cmd(out, 4, a, l);
        if (send(j->fd, out, o, MSG_NOSIGNAL) != (ssize_t)o || resp_read(j->fd, val, 0, rbuf, &have) != -2)
            j->errors++;
    }
    free(val);
    free(out);
    free(rbuf);
    return NULL;
}

static double run_blmove(job_t *jobs)
{
    fill(cfg.records);
    for (int i = 0; i < cfg.threads; i++)
        jobs[i].fd = tcp_connect();
    double ms = run_threads(jobs, blmove_worker);
    for (int i = 0; i < cfg.threads; i++)
        close(jobs[i].fd);
    return ms;
}

static double run_echo(job_t *jobs)
{
    for (int i = 0; i < cfg.threads; i++)
        jobs[i].fd = tcp_connect();
    double ms = run_threads(jobs, echo_worker);
    for (int i = 0; i < cfg.threads; i++)
        close(jobs[i].fd);
    return ms;
}

static void *echo_conn(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char buf[65536];
    for (;;) {
        ssize_t r = recv(fd, buf, sizeof(buf), 0);
        if (r <= 0 || io_all(fd, buf, (size_t)r, 1) != 0)
            break;
    }
    close(fd);
    return NULL;
}

/* Length of the complete RESP command at buf[0..len) (0: incomplete); its
 * first letter (upper-cased) in *first and its argument count in *argc. */
static size_t resp_command(const char *buf, size_t len, char *first, long *argc)
{
    char *end;
    const char *nl;
    size_t pos;
    if (len < 4 || buf[0] != '*' || !(nl = memchr(buf, '\n', len)))
        return 0;
    *argc = strtol(buf + 1, &end, 10);
    pos = (size_t)(nl - buf) + 1;
    for (long i = 0; i < *argc; i++) {
        if (pos >= len || buf[pos] != '$' || !(nl = memchr(buf + pos, '\n', len - pos)))
            return 0;
        size_t blen = strtoul(buf + pos + 1, &end, 10), body = (size_t)(nl - buf) + 1;
        if (body + blen + 2 > len)
            return 0;
        if (i == 0)
            *first = (char)(buf[body] & ~0x20);
        pos = body + blen + 2;
    }
    return pos;
}

static void *resp_conn(void *arg)
{
    int fd = (int)(intptr_t)arg;
    size_t cap = 1 << 20, have = 0, outcap = 1 << 20;
    char *buf = malloc(cap), *out = malloc(outcap), value[64];
    char *rec = calloc(1, cfg.size);
    int vlen = snprintf(value, sizeof(value), "$%zu\r\n", cfg.size);
    seed_record_fill(rec, cfg.size);
    for (;;) {
        ssize_t r = recv(fd, buf + have, cap - have, 0);
        if (r <= 0)
            break;
        have += (size_t)r;
        size_t used, at = 0, olen = 0;
        char first = 0;
        long argc = 0;
        while ((used = resp_command(buf + at, have - at, &first, &argc)) > 0) {
            at += used;
            if (olen + cfg.size + 128 > outcap)
                break;
            if (first == 'R') {
                memcpy(out + olen, ":1\r\n", 4);
                olen += 4;
            } else if (first == 'L' || first == 'B') {
                if (first == 'B') {
                    memcpy(out + olen, "*2\r\n$2\r\n21\r\n", 12);
                    olen += 12;
                }
                memcpy(out + olen, value, (size_t)vlen);
                olen += (size_t)vlen;
                memcpy(out + olen, rec, cfg.size);
                olen += cfg.size;
                memcpy(out + olen, "\r\n", 2);
                olen += 2;
            } else {
                const char *e = "-ERR unknown command\r\n";
                memcpy(out + olen, e, strlen(e));
                olen += strlen(e);
            }
        }
        memmove(buf, buf + at, have - at);
        have -= at;
        if (olen && io_all(fd, out, olen, 1) != 0)
            break;
    }
    free(buf);
    free(out);
    free(rec);
    close(fd);
    return NULL;
}

static int echo_server(int resp)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)cfg.port) };
    int lfd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (inet_pton(AF_INET, cfg.host, &a.sin_addr) != 1 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        listen(lfd, 128) != 0) {
        fprintf(stderr, "net_driver: echo-server %s:%ld: %s\n", cfg.host, cfg.port, strerror(errno));
        return 1;
    }
    printf("listening on %s:%ld\n", cfg.host, cfg.port);
    fflush(stdout);
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        pthread_t t;
        if (fd < 0)
            continue;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (pthread_create(&t, NULL, resp ? resp_conn : echo_conn, (void *)(intptr_t)fd) == 0)
            pthread_detach(t);
        else
            close(fd);
    }
}

/* ---- main ----------------------------------------------------------------- */

int main(int argc, char **argv)
{
    static job_t jobs[MAX_THREADS];

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--shared") == 0) {
            cfg.shared = 1;
            continue;
        }
        if (strcmp(a, "--nowait") == 0) {
            cfg.nowait = 1;
            continue;
        }
        if (strcmp(a, "--pipelined") == 0) {
            cfg.pipelined = 1;
            continue;
        }
        if (!v)
            usage();
        i++;
        if (strcmp(a, "--host") == 0)
            cfg.host = v;
        else if (strcmp(a, "--port") == 0)
            cfg.port = atol(v);
        else if (strcmp(a, "--op") == 0)
            cfg.op = v;
        else if (strcmp(a, "--threads") == 0)
            cfg.threads = atoi(v);
        else if (strcmp(a, "--records") == 0)
            cfg.records = strtoull(v, NULL, 10);
        else if (strcmp(a, "--queue") == 0)
            cfg.queue = (TABLE)strtoul(v, NULL, 10);
        else if (strcmp(a, "--size") == 0) {
            cfg.size = strtoul(v, NULL, 10);
            cfg.size_given = 1;
        } else if (strcmp(a, "--timeout") == 0)
            cfg.timeout = atoi(v);
        else if (strcmp(a, "--replicas") == 0)
            cfg.replicas = atol(v);
        else if (strcmp(a, "--spread") == 0)
            cfg.spread = atol(v);
        else
            usage();
    }
    if (!cfg.op)
        usage();
    if (strcmp(cfg.op, "echo-server") == 0 || strcmp(cfg.op, "resp-server") == 0)
        return echo_server(strcmp(cfg.op, "resp-server") == 0);
    int echo = strcmp(cfg.op, "echo") == 0;
    int blmove = strcmp(cfg.op, "blmove") == 0;
    if (!echo && !blmove && strcmp(cfg.op, "push") && strcmp(cfg.op, "pop") && strcmp(cfg.op, "asypush") &&
        strcmp(cfg.op, "lease") && strcmp(cfg.op, "ackpoplease"))
        usage();
    if (cfg.threads < 1 || cfg.threads > MAX_THREADS || cfg.records < (unsigned long long)cfg.threads ||
        cfg.size < 8)
        usage();
    if (echo && !cfg.size_given)
        cfg.size = 320;

    pthread_barrier_init(&start_line, NULL, (unsigned)cfg.threads + 1);
    for (int i = 0; i < cfg.threads; i++) {
        jobs[i].index = i;
        jobs[i].count = cfg.records / (unsigned long long)cfg.threads;
    }
    double ms = echo ? run_echo(jobs) : blmove ? run_blmove(jobs) : run_tvm(jobs);
    long csw;
    double cpu = cpu_ms(&csw) - g_cpu0;
    csw -= g_csw0;
    unsigned long long done = 0, errors = 0;
    for (int i = 0; i < cfg.threads; i++) {
        done += jobs[i].count;
        errors += jobs[i].errors;
    }
    printf("ok op=%s threads=%d shared=%d records=%llu ms=%.3f rate=%.0f errors=%llu cpu_us_per_record=%.2f "
           "switches_per_record=%.2f\n",
           cfg.op, cfg.threads, cfg.shared, done, ms, ms > 0 ? done * 1000.0 / ms : 0.0, errors,
           done ? cpu * 1000.0 / done : 0.0, done ? (double)csw / done : 0.0);
    return errors ? 1 : 0;
}
