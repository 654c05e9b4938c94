/*
 * dpdk_ring.c: the benchmark driver of bench/drivers/tvmq_driver.c, for a
 * DPDK rte_ring of fixed-size elements (the rte_ring_*_elem API) in a
 * shared-memory file, so that `tvmq bench` can compare the two.
 *
 *   dpdk_ring create --queue Q --capacity C --size S --mode rts|mpmc
 *                    (removes a stale one first)
 *   dpdk_ring remove --queue Q
 *   dpdk_ring run --queue Q --op OP --threads N [--pop-threads M]
 *                 --records R --size S [--batch B]
 *
 * No EAL: the ring lives in the file /dev/shm/tvmq_bench_dpdk_<Q>, sized by
 * rte_ring_get_memsize_elem and set up by rte_ring_init on the mapping;
 * rte_eal_init is never called (the enqueue and dequeue calls are inline
 * code on the ring's memory, and a ring holds no pointers, so every process
 * may map it at its own address). It holds at least C elements of S bytes
 * (S a multiple of 4).
 *   --mode rts   RING_F_MP_RTS_ENQ | RING_F_MC_RTS_DEQ: multi-producer and
 *                multi-consumer "relaxed tail sync" (the head/tail distance
 *                is bounded, so a preempted thread stalls the others less)
 *   --mode mpmc  flags 0: DPDK's default multi-producer, multi-consumer ring
 *
 *   OP  push     N threads each enqueue R/N records (a full ring is an error)
 *       pop      N threads each dequeue R/N records
 *       pushpop  N push threads (R/N each) and M pop threads (R/M each) at once
 * A pop that finds the ring empty spins, then yields, until a record comes
 * (rte_ring cannot block).
 * --batch is accepted for a command line common with tvmq_driver, and unused.
 *
 * Per operation, as tvmq's lPush and lPop: a push copies the S bytes from the
 * thread's record buffer into the ring (rte_ring_enqueue_elem), a pop copies
 * the S bytes out of the ring into the thread's record buffer
 * (rte_ring_dequeue_elem), which the compiler must then assume is read.
 * Records are S bytes (S >= 8); when S >= 304 they start with the seed
 * benchmark's dbUser filled as push_bench.c fills it. The ring is mapped and
 * its pages faulted in before the clock starts (as lAttchTable does); the
 * clock covers thread creation, the work and the joins.
 *
 * A run gives up after 60 s (a message on stderr, exit 1).
 *
 * Success: "ok ms=<ms, 3 decimals> records=<pushed+popped>" on stdout for run,
 * nothing for create and remove. Failure: a message on stderr, exit 1. Bad
 * arguments: usage on stderr, exit 2.
 *
 * Build: gcc -O2 -Wall -Werror -o dpdk_ring bench/drivers/dpdk_ring.c \
 *            $(pkg-config --cflags libdpdk) -lrte_ring -lrte_eal -lpthread
 */
#define _GNU_SOURCE
#include "seed_record.h"

#include <rte_ring.h>
#include <rte_ring_elem.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 64
/* A run that has not ended after this long gives up (see run). */
#define LIMIT_S 60

enum op { OP_PUSH, OP_POP, OP_PUSHPOP };

/* The command line. */
static struct {
    const char *cmd;
    unsigned long queue;
    enum op op;
    int threads, pop_threads;
    unsigned long long records, capacity;
    size_t size;
    int rts;  /* create: --mode rts */
} cfg;

/* One thread's work; each on its own 128 bytes (no false sharing of `done`). */
typedef struct {
    _Alignas(128) int pusher;
    int index;                 /* thread number, for messages */
    unsigned long long count;  /* records to move */
    unsigned long long first;  /* sequence number of its first pushed record */
    unsigned long long done;   /* records moved */
    pthread_t tid;
} job_t;

static struct rte_ring *ring;
static pthread_barrier_t start_line;  /* every thread starts work together */
static atomic_int stopping;           /* set by the first failure: threads quit */
static atomic_int running;            /* worker threads still working */
static _Thread_local int is_worker;

/* Reports a failure and ends the process with status 1, after giving the
 * other threads up to a second to leave their loops. */
_Noreturn static void fail(const char *fmt, ...)
{
    va_list ap;

    fputs("dpdk_ring: ", stderr);
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

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void queue_path(char *path, size_t len)
{
    snprintf(path, len, "/dev/shm/tvmq_bench_dpdk_%lu", cfg.queue);
}

static void do_push(job_t *j, char *rec)
{
    seed_record_fill(rec, cfg.size);
    while (j->done < j->count && !atomic_load_explicit(&stopping, memory_order_relaxed)) {
        seed_record_set_seq(rec, j->first + j->done);
        if (rte_ring_enqueue_elem(ring, rec, (unsigned)cfg.size) != 0)
            fail("thread %d: rte_ring_enqueue_elem failed after %llu records: ring is full",
                 j->index, j->done);
        j->done++;
    }
}

static void do_pop(job_t *j, char *rec)
{
    while (j->done < j->count && !atomic_load_explicit(&stopping, memory_order_relaxed)) {
        unsigned spins = 0;

        while (rte_ring_dequeue_elem(ring, rec, (unsigned)cfg.size) != 0) {
            if (atomic_load_explicit(&stopping, memory_order_relaxed))
                return;
            if (++spins > 64)
                sched_yield();
            else
                rte_pause();
        }
        /* The record is the caller's now: the compiler must assume it is read
         * (no copy elided), as the bytes lPop hands a C program are. */
        __asm__ __volatile__("" : : "r"(rec) : "memory");
        j->done++;
    }
}

static void *worker(void *arg)
{
    job_t *j = arg;
    char *rec = calloc(1, cfg.size);

    is_worker = 1;
    if (rec == NULL)
        fail("thread %d: out of memory", j->index);
    pthread_barrier_wait(&start_line);
    if (j->pusher)
        do_push(j, rec);
    else
        do_pop(j, rec);
    free(rec);
    atomic_fetch_sub(&running, 1);
    return NULL;
}

_Noreturn static void usage(const char *msg)
{
    if (msg != NULL)
        fprintf(stderr, "dpdk_ring: %s\n", msg);
    fprintf(stderr,
            "usage: dpdk_ring create --queue Q --capacity C --size S --mode rts|mpmc\n"
            "       dpdk_ring remove --queue Q\n"
            "       dpdk_ring run --queue Q --op push|pop|pushpop --threads N\n"
            "                     [--pop-threads M] --records R --size S [--batch B]\n"
            "  file: /dev/shm/tvmq_bench_dpdk_<Q>; N, M: 1..%d (M defaults to N; pushpop\n"
            "  only); S >= 8 bytes, a multiple of 4; --batch is ignored\n",
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
        fprintf(stderr, "dpdk_ring: bad value for %s: '%s' (%llu..%llu)\n", opt, s, min, max);
        usage(NULL);
    }
    return v;
}

static void parse_args(int argc, char *argv[])
{
    const char *allowed;
    char given[256] = " ";

    if (argc < 2)
        usage("a command is required");
    cfg.cmd = argv[1];
    if (!strcmp(cfg.cmd, "create"))
        allowed = " --queue --capacity --size --mode ";
    else if (!strcmp(cfg.cmd, "remove"))
        allowed = " --queue ";
    else if (!strcmp(cfg.cmd, "run"))
        allowed = " --queue --op --threads --pop-threads --records --size --batch ";
    else
        usage("unknown command");

    for (int i = 2; i < argc; i += 2) {
        const char *opt = argv[i], *val = argv[i + 1];
        char word[40];

        snprintf(word, sizeof word, " %s ", opt);
        if (strlen(opt) > 20 || strstr(allowed, word) == NULL) {
            fprintf(stderr, "dpdk_ring: unknown option '%s' for %s\n", opt, cfg.cmd);
            usage(NULL);
        }
        if (val == NULL)
            usage("missing value after the last option");
        if (strlen(given) + strlen(opt) + 2 < sizeof given) {
            strcat(given, opt);
            strcat(given, " ");
        }
        if (!strcmp(opt, "--queue"))
            cfg.queue = (unsigned long)number(opt, val, 0, UINT32_MAX);
        else if (!strcmp(opt, "--capacity"))
            cfg.capacity = number(opt, val, 1, RTE_RING_SZ_MASK / 2);
        else if (!strcmp(opt, "--size"))
            cfg.size = number(opt, val, 8, 1U << 20);
        else if (!strcmp(opt, "--threads"))
            cfg.threads = (int)number(opt, val, 1, MAX_THREADS);
        else if (!strcmp(opt, "--pop-threads"))
            cfg.pop_threads = (int)number(opt, val, 1, MAX_THREADS);
        else if (!strcmp(opt, "--records"))
            cfg.records = number(opt, val, 0, LONG_MAX);
        else if (!strcmp(opt, "--batch"))
            number(opt, val, 1, 1ULL << 20);
        else if (!strcmp(opt, "--mode")) {
            if (!strcmp(val, "rts"))
                cfg.rts = 1;
            else if (strcmp(val, "mpmc") != 0)
                usage("--mode is rts or mpmc");
        } else if (!strcmp(val, "push"))  /* --op */
            cfg.op = OP_PUSH;
        else if (!strcmp(val, "pop"))
            cfg.op = OP_POP;
        else if (!strcmp(val, "pushpop"))
            cfg.op = OP_PUSHPOP;
        else
            usage("unknown --op (dpdk_ring runs push, pop and pushpop)");
    }

    /* Every allowed option but the optional ones is required. */
    static const char *required[] = { "--queue", "--capacity", "--size", "--mode", "--op",
                                      "--threads", "--records" };
    for (size_t k = 0; k < sizeof required / sizeof *required; k++) {
        char word[40];

        snprintf(word, sizeof word, " %s ", required[k]);
        if (strstr(allowed, word) != NULL && strstr(given, word) == NULL) {
            fprintf(stderr, "dpdk_ring: %s needs %s\n", cfg.cmd, required[k]);
            usage(NULL);
        }
    }
    if (cfg.size % 4 != 0)
        usage("--size must be a multiple of 4 (rte_ring's element size)");
    if (cfg.pop_threads == 0)
        cfg.pop_threads = cfg.threads;
}

/* The smallest power of two above c: a ring of that count holds count-1. */
static unsigned ring_count(unsigned long long c)
{
    unsigned long long n = 1;

    while (n <= c)
        n <<= 1;
    return (unsigned)n;
}

static int create_ring(void)
{
    char path[128];
    unsigned count = ring_count(cfg.capacity);
    ssize_t len = rte_ring_get_memsize_elem((unsigned)cfg.size, count);
    int fd, rc;
    void *mem;

    if (len < 0)
        fail("rte_ring_get_memsize_elem(%zu, %u): %s", cfg.size, count, strerror((int)-len));
    queue_path(path, sizeof path);
    unlink(path);
    fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
        fail("open(%s): %s", path, strerror(errno));
    if (ftruncate(fd, len) != 0)
        fail("ftruncate(%s, %zd): %s", path, len, strerror(errno));
    mem = mmap(NULL, (size_t)len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mem == MAP_FAILED)
        fail("mmap(%s, %zd bytes): %s", path, len, strerror(errno));
    /* Allocate every page now, as tvmq does for a queue file: otherwise the
     * first run would pay for allocating and zeroing them and the next not. */
    if (madvise(mem, (size_t)len, MADV_POPULATE_WRITE) != 0 && errno != EINVAL)
        fail("madvise(%s, MADV_POPULATE_WRITE): %s", path, strerror(errno));
    rc = rte_ring_init(mem, "tvmq_bench", count, cfg.rts ? RING_F_MP_RTS_ENQ | RING_F_MC_RTS_DEQ : 0);
    if (rc != 0)
        fail("rte_ring_init(%u elements of %zu bytes): %s", count, cfg.size, strerror(-rc));
    munmap(mem, (size_t)len);
    close(fd);
    return 0;
}

static int remove_ring(void)
{
    char path[128];

    queue_path(path, sizeof path);
    unlink(path);  /* absent: fine */
    return 0;
}

/* Maps the ring with every page faulted in, and checks it holds S-byte elements. */
static void open_ring(void)
{
    char path[128];
    struct stat st;
    int fd;

    queue_path(path, sizeof path);
    fd = open(path, O_RDWR);
    if (fd < 0 || fstat(fd, &st) != 0)
        fail("open(%s): %s (run dpdk_ring create first)", path, strerror(errno));
    if ((size_t)st.st_size < sizeof(struct rte_ring))
        fail("%s: %lld bytes, too small for a ring", path, (long long)st.st_size);
    ring = mmap(NULL, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (ring == MAP_FAILED)
        fail("mmap(%s, %lld bytes): %s", path, (long long)st.st_size, strerror(errno));
    close(fd);
    if (rte_ring_get_memsize_elem((unsigned)cfg.size, rte_ring_get_size(ring)) != st.st_size)
        fail("%s: not a ring of %zu-byte elements", path, cfg.size);
}

static int run(void)
{
    static job_t jobs[2 * MAX_THREADS];
    unsigned long long want_push = 0, want_pop = 0, pushed = 0, popped = 0;
    int total = 0, err;
    double t0, t1;

    /* Push threads (or the only kind of thread), then pop threads for pushpop. */
    int n = cfg.threads, m = cfg.op == OP_PUSHPOP ? cfg.pop_threads : 0;
    for (int i = 0; i < n + m; i++) {
        job_t *j = &jobs[total++];

        j->index = i;
        j->pusher = i < n && cfg.op != OP_POP;
        j->count = cfg.records / (i < n ? n : m);
        j->first = i < n ? j->count * i : 0;
        if (j->pusher)
            want_push += j->count;
        else
            want_pop += j->count;
    }

    open_ring();  /* before the clock starts, as the seed benchmarks attach first */
    pthread_barrier_init(&start_line, NULL, total);
    atomic_store(&running, total);
    t0 = now_ms();
    for (int i = 0; i < total; i++)
        if ((err = pthread_create(&jobs[i].tid, NULL, worker, &jobs[i])) != 0)
            fail("pthread_create: %s", strerror(err));
    /* A default MP/MC ring makes a thread that moved the head wait, spinning,
     * until every thread ahead of it has written its tail: with more threads
     * than free cores, each wait can last a preempted thread's time slice,
     * and a run that takes a fraction of a second alone can take minutes. */
    struct timespec limit;
    clock_gettime(CLOCK_REALTIME, &limit);
    limit.tv_sec += LIMIT_S;
    for (int i = 0; i < total; i++)
        if (pthread_timedjoin_np(jobs[i].tid, NULL, &limit) != 0) {
            for (int k = 0; k < total; k++)
                *(jobs[k].pusher ? &pushed : &popped) +=
                    __atomic_load_n(&jobs[k].done, __ATOMIC_RELAXED);
            fail("gave up after %d s with %llu of %llu records pushed, %llu of %llu popped "
                 "(threads waiting on preempted ones?)", LIMIT_S, pushed, want_push, popped,
                 want_pop);
        }
    t1 = now_ms();

    for (int i = 0; i < total; i++) {
        if (jobs[i].pusher)
            pushed += jobs[i].done;
        else
            popped += jobs[i].done;
    }
    if (pushed != want_push || popped != want_pop)
        fail("pushed %llu of %llu, popped %llu of %llu records", pushed, want_push, popped,
             want_pop);
    printf("ok ms=%.3f records=%llu\n", t1 - t0, pushed + popped);
    return 0;
}

int main(int argc, char *argv[])
{
    parse_args(argc, argv);
    if (!strcmp(cfg.cmd, "create"))
        return create_ring();
    if (!strcmp(cfg.cmd, "remove"))
        return remove_ring();
    return run();
}
