/*
 * tvmq_driver.c: benchmark driver for a tvmq queue, through the STVM C API
 * (tvm.h) only. `tvmq bench` runs it many times and parses its output.
 *
 *   tvmq_driver run --queue Q --op OP --threads N [--pop-threads M]
 *                   --records R --size S [--batch B]
 *
 *   OP  push     N threads each lPush R/N records (a full queue is an error)
 *       pop      N threads each lPop(QUE_NORMAL) R/N records
 *       pushpop  N push threads (R/N each) and M pop threads (R/M each) at once
 *       pushs    N threads each push R/N records with lPushs, B per call
 *       popup    N threads each pop R/N records with lPopup, B per call, secs=1
 *
 * The queue Q must exist (tvmq create Q --rows ... --size S). Records are S
 * bytes (S >= 8); when S >= 304 they start with the seed benchmark's dbUser
 * filled as push_bench.c fills it. As in the seed, the queue is attached before
 * the clock starts; the clock covers thread creation, the work and the joins.
 *
 * Success: one line on stdout, "ok ms=<ms, 3 decimals> records=<pushed+popped>".
 * Failure: a message on stderr, exit 1. Bad arguments: usage on stderr, exit 2.
 *
 * Build: gcc -O2 -Wall -Werror -o tvmq_driver bench/drivers/tvmq_driver.c -I include \
 *            -L target/release -ltvm -lpthread -Wl,-rpath,<abs libdir>
 */
#include "tvm.h"
#include "seed_record.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>

#define MAX_THREADS 64

enum op { OP_PUSH, OP_POP, OP_PUSHPOP, OP_PUSHS, OP_POPUP };

/* The command line. */
static struct {
    TABLE queue;
    enum op op;
    int threads, pop_threads;
    unsigned long long records;
    size_t size, batch;
} cfg;

/* One thread's work: what it does, how many records, and how many it moved. */
/* Each job on its own 128 bytes: `done` moves on every record, and threads
 * whose jobs shared a cache line would slow each other down (false sharing). */
typedef struct {
    _Alignas(128) enum op role;  /* OP_PUSH, OP_POP, OP_PUSHS or OP_POPUP */
    int index;                   /* thread number, for messages */
    unsigned long long count;    /* records to move */
    unsigned long long first;    /* sequence number of its first pushed record */
    unsigned long long done;     /* records moved */
    pthread_t tid;
} job_t;

static pthread_barrier_t start_line;  /* every thread starts work together */
static atomic_int stopping;           /* set by the first failure: threads quit */
static atomic_int running;            /* worker threads still working */
static _Thread_local int is_worker;   /* set in worker threads */

/*
 * Reports a failure and ends the process with status 1. The other threads are
 * told to stop and given up to a second to leave their loops, so that no
 * thread is killed in the middle of a queue call (threads blocked in a pop
 * are waiting, not inside the ring, and are ended by _exit).
 */
_Noreturn static void fail(const char *fmt, ...)
{
    va_list ap;

    fputs("tvmq_driver: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);

    atomic_store(&stopping, 1);
    if (is_worker)
        atomic_fetch_sub(&running, 1);
    for (int ms = 0; ms < 1000 && atomic_load(&running) > 0; ms++)
        usleep(1000);
    _exit(1);
}

/* Reports the failed call `call` of thread j, with the handle's error code. */
_Noreturn static void fail_call(const job_t *j, const char *call, const SATvm *h)
{
    fail("thread %d: %s failed after %llu records: error %u (%s)", j->index, call,
         j->done, h->m_lErrno, sGetTError(h->m_lErrno));
}

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The records handled by one call of a batched operation. */
static size_t batch_len(const job_t *j)
{
    unsigned long long left = j->count - j->done;

    return left < cfg.batch ? (size_t)left : cfg.batch;
}

static void do_push(job_t *j, SATvm *h, char *rec)
{
    seed_record_fill(rec, cfg.size);
    queuevoid(h, *rec, cfg.size, cfg.queue);
    while (j->done < j->count && !atomic_load_explicit(&stopping, memory_order_relaxed)) {
        seed_record_set_seq(rec, j->first + j->done);
        if (RC_SUCC != lPush(h))
            fail_call(j, "lPush", h);
        j->done++;
    }
}

static void do_pop(job_t *j, SATvm *h, char *rec)
{
    queuevoid(h, *rec, cfg.size, cfg.queue);
    while (j->done < j->count && !atomic_load_explicit(&stopping, memory_order_relaxed)) {
        if (RC_SUCC != lPop(h, rec, QUE_NORMAL))
            fail_call(j, "lPop", h);
        if (h->m_lEffect != 1)
            fail("thread %d: lPop succeeded with m_lEffect %zu, expected 1", j->index,
                 h->m_lEffect);
        j->done++;
    }
}

/* lPushs: `recs` holds B records, laid out one after another. */
static void do_pushs(job_t *j, SATvm *h, char *recs)
{
    for (size_t i = 0; i < cfg.batch; i++)
        seed_record_fill(recs + i * cfg.size, cfg.size);
    queuevoid(h, *recs, cfg.size, cfg.queue);
    while (j->done < j->count && !atomic_load_explicit(&stopping, memory_order_relaxed)) {
        size_t k = batch_len(j), n = k;
        void *p = recs;

        for (size_t i = 0; i < k; i++)
            seed_record_set_seq(recs + i * cfg.size, j->first + j->done + i);
        if (RC_SUCC != lPushs(h, &n, &p))
            fail_call(j, "lPushs", h);
        if (n != k)
            fail("thread %d: lPushs succeeded with %zu of %zu records", j->index, n, k);
        j->done += n;
    }
}

/* lPopup: each call must return its B records within 1 second. */
static void do_popup(job_t *j, SATvm *h)
{
    queuenull(h, cfg.size, cfg.queue);
    while (j->done < j->count && !atomic_load_explicit(&stopping, memory_order_relaxed)) {
        size_t k = batch_len(j), n = 0;
        void *out = NULL;

        if (RC_SUCC != lPopup(h, k, 1, &n, &out))
            fail_call(j, "lPopup", h);
        free(out);
        if (n != k)
            fail("thread %d: lPopup succeeded with %zu of %zu records", j->index, n, k);
        j->done += n;
    }
}

static void *worker(void *arg)
{
    job_t *j = arg;
    SATvm *h = pCloneSATvm();  /* every thread has its own handle */
    size_t nrec = j->role == OP_PUSHS ? cfg.batch : 1;
    char *buf = calloc(nrec, cfg.size);

    is_worker = 1;
    if (h == NULL || buf == NULL)
        fail("thread %d: out of memory", j->index);

    pthread_barrier_wait(&start_line);
    switch (j->role) {
    case OP_PUSH:  do_push(j, h, buf);  break;
    case OP_POP:   do_pop(j, h, buf);   break;
    case OP_PUSHS: do_pushs(j, h, buf); break;
    default:       do_popup(j, h);      break;
    }
    free(buf);
    vCloneFree(h);
    atomic_fetch_sub(&running, 1);
    return NULL;
}

_Noreturn static void usage(const char *msg)
{
    if (msg != NULL)
        fprintf(stderr, "tvmq_driver: %s\n", msg);
    fprintf(stderr,
            "usage: tvmq_driver run --queue Q --op push|pop|pushpop|pushs|popup\n"
            "                       --threads N [--pop-threads M] --records R --size S\n"
            "                       [--batch B]\n"
            "  N, M: 1..%d (M defaults to N; pushpop only); S >= 8 bytes;\n"
            "  B: records per lPushs/lPopup call (default 64)\n",
            MAX_THREADS);
    exit(2);
}

/* Parses a whole decimal number in [min, max], or exits with the usage. */
static unsigned long long number(const char *opt, const char *s,
                                 unsigned long long min, unsigned long long max)
{
    char *end;
    unsigned long long v;

    errno = 0;
    v = strtoull(s, &end, 10);
    if (*s < '0' || *s > '9' || *end != '\0' || errno != 0 || v < min || v > max) {
        fprintf(stderr, "tvmq_driver: bad value for %s: '%s' (%llu..%llu)\n", opt, s,
                min, max);
        usage(NULL);
    }
    return v;
}

static void parse_args(int argc, char *argv[])
{
    static const char *ops[] = { "push", "pop", "pushpop", "pushs", "popup" };  /* enum op */
    int have_q = 0, have_op = 0, have_n = 0, have_r = 0, have_s = 0;

    if (argc < 2 || strcmp(argv[1], "run") != 0)
        usage("the only command is 'run'");
    cfg.batch = 64;
    for (int i = 2; i < argc; i += 2) {
        const char *opt = argv[i], *val = argv[i + 1];

        if (val == NULL)
            usage("missing value after the last option");
        if (!strcmp(opt, "--queue")) {
            cfg.queue = (TABLE)number(opt, val, 0, UINT32_MAX);
            have_q = 1;
        } else if (!strcmp(opt, "--op")) {
            for (int k = 0; k < 5 && !have_op; k++)
                if (!strcmp(val, ops[k])) {
                    cfg.op = (enum op)k;
                    have_op = 1;
                }
            if (!have_op)
                usage("unknown --op");
        } else if (!strcmp(opt, "--threads")) {
            cfg.threads = (int)number(opt, val, 1, MAX_THREADS);
            have_n = 1;
        } else if (!strcmp(opt, "--pop-threads")) {
            cfg.pop_threads = (int)number(opt, val, 1, MAX_THREADS);
        } else if (!strcmp(opt, "--records")) {
            cfg.records = number(opt, val, 0, LONG_MAX);
            have_r = 1;
        } else if (!strcmp(opt, "--size")) {
            cfg.size = number(opt, val, 8, 1ULL << 30);
            have_s = 1;
        } else if (!strcmp(opt, "--batch")) {
            cfg.batch = number(opt, val, 1, 1ULL << 20);
        } else {
            fprintf(stderr, "tvmq_driver: unknown option '%s'\n", opt);
            usage(NULL);
        }
    }
    if (!(have_q && have_op && have_n && have_r && have_s))
        usage("--queue, --op, --threads, --records and --size are required");
    if (cfg.pop_threads == 0)
        cfg.pop_threads = cfg.threads;
}

int main(int argc, char *argv[])
{
    static job_t jobs[2 * MAX_THREADS];
    SATvm *g = pGetSATvm();
    unsigned long long want_push = 0, want_pop = 0, pushed = 0, popped = 0;
    int total = 0, err;
    double t0, t1;

    parse_args(argc, argv);

    /* Push threads (or the only kind of thread), then pop threads for pushpop. */
    int n = cfg.threads, m = cfg.op == OP_PUSHPOP ? cfg.pop_threads : 0;
    for (int i = 0; i < n + m; i++) {
        job_t *j = &jobs[total++];

        j->index = i;
        if (i < n) {
            j->role = cfg.op == OP_PUSHPOP ? OP_PUSH : cfg.op;
            j->count = cfg.records / n;
            j->first = j->count * i;
        } else {
            j->role = OP_POP;
            j->count = cfg.records / m;
        }
        if (j->role == OP_PUSH || j->role == OP_PUSHS)
            want_push += j->count;
        else
            want_pop += j->count;
    }

    /* Attach before the clock starts, as the seed benchmarks do. */
    vHoldConnect(g);
    if (RC_SUCC != lAttchTable(g, cfg.queue)) {
        fprintf(stderr, "tvmq_driver: lAttchTable(%u) failed: error %u (%s)\n", cfg.queue,
                g->m_lErrno, sGetTError(g->m_lErrno));
        return 1;
    }

    pthread_barrier_init(&start_line, NULL, total);
    atomic_store(&running, total);
    t0 = now_ms();
    for (int i = 0; i < total; i++)
        if ((err = pthread_create(&jobs[i].tid, NULL, worker, &jobs[i])) != 0)
            fail("pthread_create: %s", strerror(err));
    for (int i = 0; i < total; i++)
        pthread_join(jobs[i].tid, NULL);
    t1 = now_ms();

    for (int i = 0; i < total; i++) {
        if (jobs[i].role == OP_PUSH || jobs[i].role == OP_PUSHS)
            pushed += jobs[i].done;
        else
            popped += jobs[i].done;
    }
    if (pushed != want_push || popped != want_pop) {
        fprintf(stderr, "tvmq_driver: pushed %llu of %llu, popped %llu of %llu records\n",
                pushed, want_push, popped, want_pop);
        return 1;
    }

    printf("ok ms=%.3f records=%llu\n", t1 - t0, pushed + popped);
    vHoldRelease(g);
    return 0;
}
