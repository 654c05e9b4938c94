/*
 * latency.c: the latency benchmark (see latency.h) for tvmq, through tvm.h,
 * and for a pipe between the same two processes (the kernel's floor for a
 * wake-up across processes), or both in turn: `alternate` sends even records
 * through tvmq and odd ones through the pipe, so that the two meet the same
 * load of the machine, record by record.
 *
 *   latency run  --transport tvmq|pipe|alternate [--queue Q] --size S --records R --gap-us G --out FILE
 *   latency idle --transport tvmq|pipe [--queue Q] --size S --seconds N
 *
 * tvmq: queue Q must exist (records of at least S bytes); the consumer pops
 * with lPop(QUE_NORMAL), waiting as the queue's strategy and $TVMQ_SPIN_US
 * say. run writes R latencies (uint64 ns) to FILE and prints "ok records=R";
 * idle prints "ok cpu_pct=P". Failure: a message on stderr, exit 1; bad
 * arguments: usage, exit 2.
 *
 * Build: gcc -O2 -Wall -Werror -o latency bench/drivers/latency.c -I include \
 *            -L target/release -ltvm -lpthread -Wl,-rpath,<abs libdir>
 */
#include "tvm.h"
#include "latency.h"

static TABLE queue;
static int pipe_fds[2];

static void *tvmq_open(int producer)
{
    (void)producer;
    SATvm *p = (SATvm *)pCloneSATvm();
    if (p && lAttchTable(p, queue) != RC_SUCC) {
        fprintf(stderr, "latency: lAttchTable(%u): %s\n", queue, sGetTError(p->m_lErrno));
        return NULL;
    }
    return p;
}

static int tvmq_send(void *ctx, const char *rec, size_t size)
{
    SATvm *p = (SATvm *)ctx;
    queuevoid(p, *(char *)rec, size, queue);
    return lPush(p) == RC_SUCC ? 0 : -1;
}

static int tvmq_recv(void *ctx, char *rec, size_t size)
{
    SATvm *p = (SATvm *)ctx;
    queuevoid(p, *rec, size, queue);
    return lPop(p, rec, QUE_NORMAL) == RC_SUCC ? 0 : -1;
}

static void *pipe_open(int producer)
{
    close(pipe_fds[producer ? 0 : 1]);
    return &pipe_fds[producer ? 1 : 0];
}

static int pipe_send(void *ctx, const char *rec, size_t size)
{
    int fd = *(int *)ctx;
    for (size_t done = 0; done < size;) {
        ssize_t n = write(fd, rec + done, size - done);
        if (n < 0 && errno != EINTR)
            return -1;
        done += n > 0 ? (size_t)n : 0;
    }
    return 0;
}

static int pipe_recv(void *ctx, char *rec, size_t size)
{
    int fd = *(int *)ctx;
    for (size_t done = 0; done < size;) {
        ssize_t n = read(fd, rec + done, size - done);
        if (n == 0 || (n < 0 && errno != EINTR))
            return -1;
        done += n > 0 ? (size_t)n : 0;
    }
    return 0;
}

/* alternate: tvmq for even records, the pipe for odd ones (each side counts its own). */
typedef struct alternate {
    void *tvmq, *pipe;
    unsigned long long n;
} alternate;

static void *alternate_open(int producer)
{
    static alternate a[2];
    alternate *me = &a[producer ? 1 : 0];
    me->tvmq = tvmq_open(producer);
    me->pipe = pipe_open(producer);
    return me->tvmq ? me : NULL;
}

static int alternate_send(void *ctx, const char *rec, size_t size)
{
    alternate *a = (alternate *)ctx;
    return a->n++ % 2 == 0 ? tvmq_send(a->tvmq, rec, size) : pipe_send(a->pipe, rec, size);
}

static int alternate_recv(void *ctx, char *rec, size_t size)
{
    alternate *a = (alternate *)ctx;
    return a->n++ % 2 == 0 ? tvmq_recv(a->tvmq, rec, size) : pipe_recv(a->pipe, rec, size);
}

static const latency_ops tvmq_ops = { tvmq_open, tvmq_send, tvmq_recv };
static const latency_ops alternate_ops = { alternate_open, alternate_send, alternate_recv };
static const latency_ops pipe_ops = { pipe_open, pipe_send, pipe_recv };

_Noreturn static void usage(const char *msg)
{
    fprintf(stderr, "latency: %s\nusage: latency run  --transport tvmq|pipe|alternate [--queue Q] --size S --records R --gap-us G --out FILE\n"
                    "       latency idle --transport tvmq|pipe [--queue Q] --size S --seconds N\n", msg);
    exit(2);
}

static unsigned long long number(const char *opt, const char *s)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*s < '0' || *s > '9' || *end || errno)
        usage(opt);
    return v;
}

int main(int argc, char *argv[])
{
    const char *transport = NULL, *out = NULL;
    unsigned long long size = 0, records = 0, gap = 0, seconds = 0;
    if (argc < 2 || (strcmp(argv[1], "run") && strcmp(argv[1], "idle")))
        usage("the command is run or idle");
    int run = !strcmp(argv[1], "run");
    for (int i = 2; i + 1 < argc; i += 2) {
        const char *o = argv[i], *v = argv[i + 1];
        if (!strcmp(o, "--transport")) transport = v;
        else if (!strcmp(o, "--queue")) queue = (TABLE)number(o, v);
        else if (!strcmp(o, "--size")) size = number(o, v);
        else if (!strcmp(o, "--records")) records = number(o, v);
        else if (!strcmp(o, "--gap-us")) gap = number(o, v);
        else if (!strcmp(o, "--seconds")) seconds = number(o, v);
        else if (!strcmp(o, "--out")) out = v;
        else usage(o);
    }
    if (!transport || size < 8 || (run && (!records || !out)) || (!run && !seconds))
        usage("missing or bad options");
    const latency_ops *ops;
    if (!strcmp(transport, "tvmq")) {
        ops = &tvmq_ops;
    } else if (!strcmp(transport, "pipe") || (run && !strcmp(transport, "alternate"))) {
        if (pipe(pipe_fds) != 0) {
            perror("latency: pipe");
            return 1;
        }
        ops = strcmp(transport, "pipe") ? &alternate_ops : &pipe_ops;
    } else {
        usage("unknown transport");
    }
    return run ? latency_run(ops, size, records, (unsigned)gap, out) : latency_idle(ops, size, (unsigned)seconds);
}
