/*
 * test_mt.c: the queue API under threads and processes: per-thread error
 * state, blocking pops (woken by a push or a drop, no CPU burnt while
 * asleep), exact capacity under contention, and every record delivered
 * exactly once and in per-producer order with several producers and
 * consumers, threads or processes.
 *
 * Run by run.sh as `test_mt NAME` in a fresh $TVMDBD (see check.h).
 */
#define _GNU_SOURCE /* pthread_timedjoin_np */
#include "check.h"

#include <sched.h>
#include <sys/mman.h>

/* A tagged record: who pushed it, its number, and a check word. */
typedef struct {
    uint32_t producer;
    uint32_t seq;
    uint64_t check;
    char pad[48];
} tagrec;

static uint64_t tag_check(uint32_t producer, uint32_t seq)
{
    return ((uint64_t)producer * 0x9e3779b97f4a7c15ULL) ^ ((uint64_t)seq * 0xbf58476d1ce4e5b9ULL) ^
           0x1234567ULL;
}

/* Joins th within ms milliseconds; on timeout reports and stops the test
 * (a hung thread would otherwise hang the run). */
static void join_within(pthread_t th, long ms, const char *what, int line)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    int rc = pthread_timedjoin_np(th, NULL, &ts);
    if (rc != 0) {
        fail_at(__FILE__, line, "%s: thread did not finish within %ld ms (%s)", what, ms,
                strerror(rc));
        exit(1);
    }
}
#define JOIN_WITHIN(th, ms, what) join_within((th), (ms), (what), __LINE__)

/* Waits for child pid to exit within ms; returns its exit status (or -1
 * after killing it on timeout). */
static int wait_child(pid_t pid, long ms)
{
    int status;
    long long end = mono_ms() + ms;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) {
            forget_child(pid);
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        if (r < 0 || mono_ms() > end)
            break;
        sleep_ms(5);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    forget_child(pid);
    return -1;
}

/* ======================================================================== */
/* Per-thread state                                                         */
/* ======================================================================== */

struct errno_arg {
    TABLE t;
    long seen_errno_at_start;
    size_t seen_effect_at_start;
    long after_set, after_fail, after_push;
    size_t effect_after_push;
    SATvm *global_seen;
};

static void *errno_thread(void *v)
{
    struct errno_arg *a = (struct errno_arg *)v;
    SATvm *c = (SATvm *)pCloneSATvm();
    long x = 1;

    a->global_seen = (SATvm *)pGetSATvm();
    a->seen_errno_at_start = lGetTErrno();
    a->seen_effect_at_start = lGetEffect();
    vSetTErrno(7);
    a->after_set = lGetTErrno();
    /* A failing call sets this thread's error. */
    queuevoid(c, x, sizeof(x), a->t);
    lPop(c, &x, QUE_NOWAIT); /* empty */
    a->after_fail = lGetTErrno();
    lPush(c);
    a->after_push = lGetTErrno();
    a->effect_after_push = lGetEffect();
    vCloneFree(c);
    return NULL;
}

/* Stress: each thread sets and reads back its own values many times. */
static void *errno_stress(void *v)
{
    long id = (long)(intptr_t)v;
    for (long i = 0; i < 20000; i++) {
        vSetTErrno(id * 100000 + i);
        if (lGetTErrno() != id * 100000 + i) {
            fail_at(__FILE__, __LINE__, "thread %ld: lGetTErrno %ld, set %ld", id, lGetTErrno(),
                    id * 100000 + i);
            break;
        }
    }
    return NULL;
}

/* lGetTErrno / vSetTErrno / lGetEffect are per thread; pGetSATvm is the
 * same handle in every thread. */
static void errno_per_thread(void)
{
    SATvm *p = G();
    struct errno_arg a;
    pthread_t th;
    long v[3] = { 1, 2, 3 };
    void *base = v;
    size_t n = 3;

    memset(&a, 0, sizeof(a));
    a.t = 6; /* empty: the thread's first pop fails */
    make_queue(6, 10, sizeof(long));
    make_queue(1, 10, sizeof(long));
    queuenull(p, sizeof(long), 1);
    CHECK_SUCC(lPushs(p, &n, &base), p);
    CHECK_EQU(lGetEffect(), 3);
    vSetTErrno(42);

    REQUIRE(pthread_create(&th, NULL, errno_thread, &a) == 0);
    JOIN_WITHIN(th, 5000, "errno thread");
    CHECK(a.global_seen == p);
    CHECK_EQ(a.seen_errno_at_start, 0);  /* a new thread starts clean */
    CHECK_EQU(a.seen_effect_at_start, 0);
    CHECK_EQ(a.after_set, 7);
    CHECK_EQ(a.after_fail, NO_DATA_FOUND);
    CHECK_EQ(a.after_push, 0);
    CHECK_EQU(a.effect_after_push, 1);
    /* This thread's values are untouched by what the other one did. */
    CHECK_EQ(lGetTErrno(), 42);
    CHECK_EQU(lGetEffect(), 3);

    pthread_t ths[4];
    for (long i = 0; i < 4; i++)
        REQUIRE(pthread_create(&ths[i], NULL, errno_stress, (void *)(intptr_t)(i + 1)) == 0);
    for (int i = 0; i < 4; i++)
        JOIN_WITHIN(ths[i], 10000, "errno stress");
    CHECK_EQ(lGetTErrno(), 42);
}

/* ======================================================================== */
/* Blocking                                                                 */
/* ======================================================================== */

struct pop_arg {
    TABLE t;
    Uenum wait;
    long rc;
    Uenum err;
    tagrec rec;
    int done; /* atomic */
    long long woke_ms;
};

static void *pop_thread(void *v)
{
    struct pop_arg *a = (struct pop_arg *)v;
    SATvm *c = (SATvm *)pCloneSATvm();
    queuevoid(c, a->rec, sizeof(a->rec), a->t);
    a->rc = lPop(c, &a->rec, a->wait);
    a->err = c->m_lErrno;
    a->woke_ms = mono_ms();
    __atomic_store_n(&a->done, 1, __ATOMIC_SEQ_CST);
    vCloneFree(c);
    return NULL;
}

/* Waits up to ms for `tvmq stat t` to report at least n waiters. */
static long long wait_for_waiters(TABLE t, long long n, long ms)
{
    long long end = mono_ms() + ms, w = -1;
    while (mono_ms() < end) {
        w = stat_num(t, "waiters");
        if (w >= n)
            break;
        sleep_ms(10);
    }
    return w;
}

/* lPop(QUE_NORMAL) blocks until another thread pushes, without burning CPU
 * while blocked, and then gets that record. */
static void pop_blocks_until_push(void)
{
    SATvm *p = G();
    const TABLE t = 2;
    struct pop_arg a;
    pthread_t th;

    make_queue(t, 8, sizeof(tagrec));
    memset(&a, 0, sizeof(a));
    a.t = t;
    a.wait = QUE_NORMAL;
    REQUIRE(pthread_create(&th, NULL, pop_thread, &a) == 0);
    CHECK_EQ(wait_for_waiters(t, 1, 3000), 1); /* asleep in the queue */

    /* ~300 ms of blocking: this process (the sleeping popper plus this
     * sleeping thread) must use next to no CPU. A busy loop would use ~300 ms. */
    long long cpu0 = process_cpu_us();
    sleep_ms(300);
    long long cpu_used = process_cpu_us() - cpu0;
    CHECK_RANGE(cpu_used, 0, 30000);
    CHECK_EQ(__atomic_load_n(&a.done, __ATOMIC_SEQ_CST), 0); /* still blocked */

    tagrec r;
    memset(&r, 0, sizeof(r));
    r.producer = 9;
    r.seq = 77;
    r.check = tag_check(9, 77);
    queuevoid(p, r, sizeof(r), t);
    long long pushed_at = mono_ms();
    CHECK_SUCC(lPush(p), p);
    JOIN_WITHIN(th, 3000, "blocked lPop");
    CHECK_EQ(a.rc, RC_SUCC);
    CHECK_EQ(a.err, 0);
    CHECK_MEM(&a.rec, &r, sizeof(r));
    CHECK_RANGE(a.woke_ms - pushed_at, 0, 500);
    CHECK_EQ(stat_num(t, "waiters"), 0);
    CHECK_EQ(depth(t), 0);
}

struct popup_arg {
    TABLE t;
    int count;
    long interval_ms;
};

static void *slow_pusher(void *v)
{
    struct popup_arg *a = (struct popup_arg *)v;
    SATvm *c = (SATvm *)pCloneSATvm();
    tagrec r;
    for (int i = 0; i < a->count; i++) {
        sleep_ms(a->interval_ms);
        memset(&r, 0, sizeof(r));
        r.producer = 1;
        r.seq = (uint32_t)i;
        r.check = tag_check(1, (uint32_t)i);
        queuevoid(c, r, sizeof(r), a->t);
        if (lPush(c) != RC_SUCC)
            fail_at(__FILE__, __LINE__, "slow push %d: %s", i, code_name(c->m_lErrno));
    }
    vCloneFree(c);
    return NULL;
}

/* lPopup with secs > 0 collects records that arrive while it waits, and
 * returns as soon as it has `expect`; waiting costs no CPU. */
static void popup_waits_for_records(void)
{
    SATvm *p = G();
    const TABLE t = 3;
    struct popup_arg a = { t, 5, 100 };
    pthread_t th;
    size_t n = 0;
    void *out = NULL;

    make_queue(t, 16, sizeof(tagrec));
    REQUIRE(pthread_create(&th, NULL, slow_pusher, &a) == 0);
    queuenull(p, sizeof(tagrec), t);
    long long t0 = mono_ms();
    CHECK_SUCC(lPopup(p, 5, 10, &n, &out), p);
    long long took = mono_ms() - t0;
    CHECK_RANGE(took, 400, 3000); /* the 5th record arrives after ~500 ms */
    CHECK_EQU(n, 5);
    REQUIRE(out != NULL);
    for (size_t i = 0; i < n; i++) {
        const tagrec *r = (const tagrec *)out + i;
        CHECK_EQ(r->seq, i);
        CHECK_EQU(r->check, tag_check(1, (uint32_t)i));
    }
    TFree(out);
    JOIN_WITHIN(th, 3000, "slow pusher");

    /* A 1 s lPopup that times out uses next to no CPU. */
    struct timespec c0, c1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    CHECK_FAIL(lPopup(p, 2, 1, &n, &out), p, NO_DATA_FOUND);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    long long cpu_us = (c1.tv_sec - c0.tv_sec) * 1000000LL + (c1.tv_nsec - c0.tv_nsec) / 1000;
    CHECK_RANGE(cpu_us, 0, 50000);
}

/* ======================================================================== */
/* Dropping a queue someone is blocked on                                   */
/* ======================================================================== */

struct popup_block_arg {
    TABLE t;
    long rc;
    Uenum err;
    void *out;
    long long woke_ms;
};

static void *popup_thread(void *v)
{
    struct popup_block_arg *a = (struct popup_block_arg *)v;
    SATvm *c = (SATvm *)pCloneSATvm();
    size_t n = 0;
    queuenull(c, sizeof(tagrec), a->t);
    a->rc = lPopup(c, 1, 30, &n, &a->out);
    a->err = c->m_lErrno;
    a->woke_ms = mono_ms();
    vCloneFree(c);
    return NULL;
}

/* A thread blocked in lPop(QUE_NORMAL) and one in lPopup(secs 30) wake up
 * with SHM_ERR_EIDRM when the queue is dropped. */
static void drop_wakes_blocked_threads(void)
{
    SATvm *p = G();
    const TABLE t = 4;
    struct pop_arg a;
    struct popup_block_arg b;
    pthread_t ta, tb;

    make_queue(t, 8, sizeof(tagrec));
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    a.t = b.t = t;
    a.wait = QUE_NORMAL;
    REQUIRE(pthread_create(&ta, NULL, pop_thread, &a) == 0);
    REQUIRE(pthread_create(&tb, NULL, popup_thread, &b) == 0);
    CHECK_EQ(wait_for_waiters(t, 2, 3000), 2);
    CHECK_EQ(__atomic_load_n(&a.done, __ATOMIC_SEQ_CST), 0);

    long long dropped_at = mono_ms();
    CHECK_SUCC(lDropTable(p, t), p);
    JOIN_WITHIN(ta, 3000, "lPop blocked on a dropped queue");
    JOIN_WITHIN(tb, 3000, "lPopup blocked on a dropped queue");
    CHECK_EQ(a.rc, RC_FAIL);
    CHECK_EQ(a.err, SHM_ERR_EIDRM);
    CHECK_RANGE(a.woke_ms - dropped_at, 0, 1000);
    CHECK_EQ(b.rc, RC_FAIL);
    CHECK_EQ(b.err, SHM_ERR_EIDRM);
    CHECK(b.out == NULL);
    CHECK_RANGE(b.woke_ms - dropped_at, 0, 1000);

    /* And later calls: TBL_NOT_FOUND. */
    tagrec r;
    queuevoid(p, r, sizeof(r), t);
    CHECK_FAIL(lPop(p, &r, QUE_NORMAL), p, TBL_NOT_FOUND);
}

/* A process blocked in lPop(QUE_NORMAL) wakes with SHM_ERR_EIDRM when
 * another process drops the queue (the child reports its m_lErrno as its
 * exit status). */
static void drop_wakes_other_process(void)
{
    const TABLE t = 5;
    make_queue(t, 8, sizeof(tagrec));

    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        SATvm *c = G();
        tagrec r;
        queuevoid(c, r, sizeof(r), t);
        long rc = lPop(c, &r, QUE_NORMAL);
        _exit(rc == RC_FAIL ? (int)c->m_lErrno : 200);
    }
    remember_child(pid);
    CHECK_EQ(wait_for_waiters(t, 1, 3000), 1);
    CHECK_EQ(waitpid(pid, NULL, WNOHANG), 0); /* still blocked */

    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "'%s' drop %u >/dev/null", getenv("TVMQ"), t);
    long long dropped_at = mono_ms();
    REQUIRE(system(cmd) == 0);
    int status = wait_child(pid, 3000);
    CHECK_EQ(status, SHM_ERR_EIDRM);
    CHECK_RANGE(mono_ms() - dropped_at, 0, 1500);
}

/* ======================================================================== */
/* Capacity under contention                                                */
/* ======================================================================== */

struct fill_arg {
    TABLE t;
    long pushed;
    long other_errors;
};

static void *fill_thread(void *v)
{
    struct fill_arg *a = (struct fill_arg *)v;
    SATvm *c = (SATvm *)pCloneSATvm();
    long x = 0;
    queuevoid(c, x, sizeof(x), a->t);
    for (;;) {
        if (lPush(c) == RC_SUCC) {
            a->pushed++;
        } else if (c->m_lErrno == DATA_SPC_FULL) {
            break;
        } else {
            a->other_errors++;
            fail_at(__FILE__, __LINE__, "push: %s", code_name(c->m_lErrno));
            break;
        }
    }
    vCloneFree(c);
    return NULL;
}

struct drain_arg {
    TABLE t;
    long popped;
};

static void *drain_thread(void *v)
{
    struct drain_arg *a = (struct drain_arg *)v;
    SATvm *c = (SATvm *)pCloneSATvm();
    long x;
    queuevoid(c, x, sizeof(x), a->t);
    while (lPop(c, &x, QUE_NOWAIT) == RC_SUCC)
        a->popped++;
    if (c->m_lErrno != NO_DATA_FOUND)
        fail_at(__FILE__, __LINE__, "pop: %s", code_name(c->m_lErrno));
    vCloneFree(c);
    return NULL;
}

/* Four threads pushing until DATA_SPC_FULL fit exactly `rows` records in
 * all; two threads draining take exactly those. */
static void full_under_contention(void)
{
    static const size_t rows_list[] = { 1, 5, 1001 };
    for (size_t k = 0; k < 3; k++) {
        const TABLE t = (TABLE)(10 + k);
        const size_t rows = rows_list[k];
        struct fill_arg f[4];
        struct drain_arg d[2];
        pthread_t th[4];
        long total = 0;

        make_queue(t, rows, sizeof(long));
        for (int i = 0; i < 4; i++) {
            f[i] = (struct fill_arg){ t, 0, 0 };
            REQUIRE(pthread_create(&th[i], NULL, fill_thread, &f[i]) == 0);
        }
        for (int i = 0; i < 4; i++) {
            JOIN_WITHIN(th[i], 10000, "filler");
            total += f[i].pushed;
        }
        CHECK_EQ(total, rows);
        CHECK_EQ(depth(t), rows);

        for (int i = 0; i < 2; i++) {
            d[i] = (struct drain_arg){ t, 0 };
            REQUIRE(pthread_create(&th[i], NULL, drain_thread, &d[i]) == 0);
        }
        for (int i = 0; i < 2; i++)
            JOIN_WITHIN(th[i], 10000, "drainer");
        CHECK_EQ(d[0].popped + d[1].popped, rows);
        CHECK_EQ(depth(t), 0);
    }
}

/* ======================================================================== */
/* Exactly once, per-producer order                                         */
/* ======================================================================== */

/*
 * Shared bookkeeping of one exactly-once run. It lives in MAP_SHARED memory
 * so that producer and consumer processes can use it too.
 */
#define MAX_PRODUCERS 8
struct board {
    TABLE t;
    uint32_t producers;
    uint32_t per_producer;
    uint64_t total;
    uint64_t claimed;        /* atomic: pops claimed by consumers */
    uint64_t popped;         /* atomic */
    uint64_t full_retries;   /* atomic: DATA_SPC_FULL seen by producers */
    int failures;            /* atomic: problems found by any process */
    uint8_t seen[];          /* atomic: times each record was popped */
};

static struct board *new_board(TABLE t, uint32_t producers, uint32_t per_producer)
{
    size_t total = (size_t)producers * per_producer;
    struct board *b = (struct board *)mmap(NULL, sizeof(struct board) + total, PROT_READ | PROT_WRITE,
                                           MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(b != MAP_FAILED);
    memset(b, 0, sizeof(*b));
    b->t = t;
    b->producers = producers;
    b->per_producer = per_producer;
    b->total = total;
    return b;
}

static void board_fail(struct board *b, const char *fmt, unsigned long long x, unsigned long long y)
{
    if (__atomic_fetch_add(&b->failures, 1, __ATOMIC_SEQ_CST) < 10) {
        fprintf(stderr, fmt, x, y);
        fputc('\n', stderr);
    }
}

/* Pushes this producer's records 0..per_producer-1, retrying while full. */
static void produce(struct board *b, uint32_t id)
{
    SATvm *c = (SATvm *)pCloneSATvm();
    tagrec r;
    memset(&r, 0, sizeof(r));
    queuevoid(c, r, sizeof(r), b->t);
    for (uint32_t s = 0; s < b->per_producer; s++) {
        r.producer = id;
        r.seq = s;
        r.check = tag_check(id, s);
        for (;;) {
            if (lPush(c) == RC_SUCC)
                break;
            if (c->m_lErrno != DATA_SPC_FULL) {
                board_fail(b, "producer %llu: lPush failed with code %llu", id, c->m_lErrno);
                vCloneFree(c);
                return;
            }
            __atomic_add_fetch(&b->full_retries, 1, __ATOMIC_RELAXED);
            sched_yield();
        }
    }
    vCloneFree(c);
}

/* Pops records while there are some left to claim: each record must be
 * valid, seen once overall, and this consumer must see each producer's
 * records in increasing order. */
static void consume(struct board *b)
{
    SATvm *c = (SATvm *)pCloneSATvm();
    int64_t last[MAX_PRODUCERS];
    tagrec r;

    for (int i = 0; i < MAX_PRODUCERS; i++)
        last[i] = -1;
    queuevoid(c, r, sizeof(r), b->t);
    while (__atomic_fetch_add(&b->claimed, 1, __ATOMIC_SEQ_CST) < b->total) {
        if (lPop(c, &r, QUE_NORMAL) != RC_SUCC) {
            board_fail(b, "consumer: lPop failed with code %llu (%llu)", c->m_lErrno, 0);
            break;
        }
        if (r.producer >= b->producers || r.seq >= b->per_producer ||
            r.check != tag_check(r.producer, r.seq)) {
            board_fail(b, "consumer: corrupt record producer %llu seq %llu", r.producer, r.seq);
            continue;
        }
        if ((int64_t)r.seq <= last[r.producer])
            board_fail(b, "consumer: producer %llu out of order at seq %llu", r.producer, r.seq);
        last[r.producer] = r.seq;
        __atomic_add_fetch(&b->seen[(size_t)r.producer * b->per_producer + r.seq], 1,
                           __ATOMIC_RELAXED);
        __atomic_add_fetch(&b->popped, 1, __ATOMIC_RELAXED);
    }
    vCloneFree(c);
}

struct role {
    struct board *b;
    uint32_t id;
};

static void *producer_thread(void *v)
{
    struct role *r = (struct role *)v;
    produce(r->b, r->id);
    return NULL;
}

static void *consumer_thread(void *v)
{
    consume(((struct role *)v)->b);
    return NULL;
}

/* After a run: every record popped exactly once, the queue empty, and the
 * queue's own counters agree. */
static void check_board(struct board *b, int line)
{
    uint64_t missing = 0, twice = 0;
    for (uint64_t i = 0; i < b->total; i++) {
        if (b->seen[i] == 0)
            missing++;
        else if (b->seen[i] > 1)
            twice++;
    }
    if (missing || twice || b->failures || b->popped != b->total)
        fail_at(__FILE__, line, "%llu records: %llu popped, %llu missing, %llu seen twice, %d problems",
                (unsigned long long)b->total, (unsigned long long)b->popped,
                (unsigned long long)missing, (unsigned long long)twice, b->failures);
    CHECK_EQ(depth(b->t), 0);
    CHECK_EQ(stat_num(b->t, "pushed"), (long long)b->total);
    CHECK_EQ(stat_num(b->t, "popped"), (long long)b->total);
    SATvm *p = G();
    tagrec r;
    queuevoid(p, r, sizeof(r), b->t);
    CHECK_FAIL(lPop(p, &r, QUE_NOWAIT), p, NO_DATA_FOUND);
}

/* 4 producer threads and 4 consumer threads, each with its own clone. */
static void run_threads(TABLE t, size_t rows, uint32_t per_producer, int line)
{
    struct board *b = new_board(t, 4, per_producer);
    struct role roles[8];
    pthread_t th[8];

    make_queue(t, rows, sizeof(tagrec));
    for (int i = 0; i < 8; i++) {
        roles[i] = (struct role){ b, (uint32_t)(i % 4) };
        REQUIRE(pthread_create(&th[i], NULL, i < 4 ? consumer_thread : producer_thread,
                               &roles[i]) == 0);
    }
    for (int i = 0; i < 8; i++)
        JOIN_WITHIN(th[i], 60000, "exactly-once thread");
    check_board(b, line);
    munmap(b, sizeof(*b) + b->total);
}

/* Queue far from full: 4 x 200000 records into room for 2^20. */
static void exactly_once_threads(void) { run_threads(20, 1 << 20, 200000, __LINE__); }

/* Small queue, constantly full and empty: producers retry on DATA_SPC_FULL,
 * consumers sleep and are woken. */
static void exactly_once_threads_small_queue(void) { run_threads(21, 64, 100000, __LINE__); }

/* Processes: two producer processes, one consumer process and two consumer
 * threads in this process, on one small queue. */
static void exactly_once_processes(void)
{
    const TABLE t = 22;
    struct board *b = new_board(t, 2, 100000);
    pid_t kids[3];

    make_queue(t, 256, sizeof(tagrec));
    for (int i = 0; i < 3; i++) {
        kids[i] = fork();
        REQUIRE(kids[i] >= 0);
        if (kids[i] == 0) {
            if (i < 2)
                produce(b, (uint32_t)i);
            else
                consume(b);
            _exit(0);
        }
        remember_child(kids[i]);
    }
    struct role r = { b, 0 };
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        REQUIRE(pthread_create(&th[i], NULL, consumer_thread, &r) == 0);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(wait_child(kids[i], 60000), 0);
    for (int i = 0; i < 2; i++)
        JOIN_WITHIN(th[i], 10000, "consumer thread");
    check_board(b, __LINE__);
    munmap(b, sizeof(*b) + b->total);
}

/* ======================================================================== */
/* Robustness                                                               */
/* ======================================================================== */

static void on_sigusr1(int sig) { (void)sig; }

/* Signals delivered to a thread blocked in lPop(QUE_NORMAL) (handler
 * installed without SA_RESTART) do not make it return: it keeps waiting
 * and then gets the record. */
static void pop_survives_signals(void)
{
    SATvm *p = G();
    const TABLE t = 30;
    struct pop_arg a;
    pthread_t th;
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_sigusr1;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: the futex wait sees EINTR */
    REQUIRE(sigaction(SIGUSR1, &sa, NULL) == 0);

    make_queue(t, 4, sizeof(tagrec));
    memset(&a, 0, sizeof(a));
    a.t = t;
    a.wait = QUE_NORMAL;
    REQUIRE(pthread_create(&th, NULL, pop_thread, &a) == 0);
    CHECK_EQ(wait_for_waiters(t, 1, 3000), 1);
    for (int i = 0; i < 20; i++) {
        pthread_kill(th, SIGUSR1);
        sleep_ms(5);
    }
    sleep_ms(50);
    CHECK_EQ(__atomic_load_n(&a.done, __ATOMIC_SEQ_CST), 0);

    tagrec r;
    memset(&r, 0, sizeof(r));
    r.seq = 5;
    queuevoid(p, r, sizeof(r), t);
    CHECK_SUCC(lPush(p), p);
    JOIN_WITHIN(th, 3000, "signalled lPop");
    CHECK_EQ(a.rc, RC_SUCC);
    CHECK_EQ(a.rec.seq, 5);
}

/* lPopup's secs is a total: with a record every 300 ms and expect 100, a
 * 2-second lPopup returns after ~2 s (not 2 s after the last record) with
 * MQUE_WAIT_TMO and the records that came. */
static void popup_total_timeout(void)
{
    SATvm *p = G();
    const TABLE t = 31;
    struct popup_arg a = { t, 7, 300 };
    pthread_t th;
    size_t n = 0;
    void *out = NULL;

    make_queue(t, 64, sizeof(tagrec));
    REQUIRE(pthread_create(&th, NULL, slow_pusher, &a) == 0);
    queuenull(p, sizeof(tagrec), t);
    long long t0 = mono_ms();
    CHECK_FAIL(lPopup(p, 100, 2, &n, &out), p, MQUE_WAIT_TMO);
    CHECK_RANGE(mono_ms() - t0, 1900, 2700);
    CHECK_RANGE(n, 5, 7); /* records at 300, 600, ... 1800 ms */
    CHECK_EQU(p->m_lEffect, n);
    REQUIRE(out != NULL);
    for (size_t i = 0; i < n; i++)
        CHECK_EQ(((tagrec *)out)[i].seq, i);
    TFree(out);
    JOIN_WITHIN(th, 5000, "slow pusher");
}

/* vHoldRelease / vTblDisconnect in one thread while another is blocked in
 * lPop on the same queue: the sleeper is not disturbed, and a push made
 * after the release (which re-attaches) still reaches it. */
static void release_while_other_thread_blocked(void)
{
    SATvm *p = G();
    const TABLE t = 32;
    struct pop_arg a;
    pthread_t th;

    make_queue(t, 4, sizeof(tagrec));
    vHoldConnect(p);
    CHECK_SUCC(lAttchTable(p, t), p);
    memset(&a, 0, sizeof(a));
    a.t = t;
    a.wait = QUE_NORMAL;
    REQUIRE(pthread_create(&th, NULL, pop_thread, &a) == 0);
    CHECK_EQ(wait_for_waiters(t, 1, 3000), 1);
    vHoldRelease(p);
    vTblDisconnect(p, t);
    sleep_ms(50);
    CHECK_EQ(__atomic_load_n(&a.done, __ATOMIC_SEQ_CST), 0);

    tagrec r;
    memset(&r, 0, sizeof(r));
    r.seq = 6;
    queuevoid(p, r, sizeof(r), t);
    CHECK_SUCC(lPush(p), p);
    JOIN_WITHIN(th, 3000, "lPop after the releasing thread pushed");
    CHECK_EQ(a.rc, RC_SUCC);
    CHECK_EQ(a.rec.seq, 6);
}

/* A child of fork uses the queue its parent had attached (without
 * attaching it itself), both directions. */
static void fork_child_uses_queue(void)
{
    SATvm *p = G();
    const TABLE t = 33;
    long v = 1;

    make_queue(t, 8, sizeof(long));
    CHECK_SUCC(lAttchTable(p, t), p);
    queuevoid(p, v, sizeof(v), t);
    CHECK_SUCC(lPush(p), p);

    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        long got = 0, two = 2;
        queuevoid(p, got, sizeof(got), t);
        if (lPop(p, &got, QUE_NOWAIT) != RC_SUCC || got != 1)
            _exit(10);
        queuevoid(p, two, sizeof(two), t);
        if (lPush(p) != RC_SUCC)
            _exit(11);
        _exit(0);
    }
    remember_child(pid);
    CHECK_EQ(wait_child(pid, 5000), 0);
    long got = 0;
    queuevoid(p, got, sizeof(got), t);
    CHECK_SUCC(lPop(p, &got, QUE_NOWAIT), p);
    CHECK_EQ(got, 2);
    CHECK_FAIL(lPop(p, &got, QUE_NOWAIT), p, NO_DATA_FOUND);
}

struct traffic {
    TABLE t;
    int pusher;
    int stop;        /* atomic */
    long ok;
    Uenum last_err;  /* code that ended the loop */
    long bad;        /* codes outside the allowed set */
};

static void *traffic_thread(void *v)
{
    struct traffic *a = (struct traffic *)v;
    SATvm *c = (SATvm *)pCloneSATvm();
    long x = 0;
    queuevoid(c, x, sizeof(x), a->t);
    while (!__atomic_load_n(&a->stop, __ATOMIC_SEQ_CST)) {
        long rc = a->pusher ? lPush(c) : lPop(c, &x, QUE_NOWAIT);
        if (rc == RC_SUCC) {
            a->ok++;
            continue;
        }
        Uenum e = c->m_lErrno;
        if (e == DATA_SPC_FULL || e == NO_DATA_FOUND)
            continue;
        a->last_err = e;
        if (e != TBL_NOT_FOUND && e != SHM_ERR_EIDRM)
            a->bad++;
        break;
    }
    vCloneFree(c);
    return NULL;
}

/* Dropping a queue while 2 threads push and 2 pop: each of them ends with
 * TBL_NOT_FOUND or SHM_ERR_EIDRM (no crash, no other code), and the id can
 * be created and used again. */
static void drop_during_traffic(void)
{
    SATvm *p = G();
    const TABLE t = 34;
    struct traffic a[4];
    pthread_t th[4];

    make_queue(t, 1024, sizeof(long));
    for (int i = 0; i < 4; i++) {
        memset(&a[i], 0, sizeof(a[i]));
        a[i].t = t;
        a[i].pusher = i < 2;
        REQUIRE(pthread_create(&th[i], NULL, traffic_thread, &a[i]) == 0);
    }
    sleep_ms(100);
    CHECK_SUCC(lDropTable(p, t), p);
    sleep_ms(100);
    for (int i = 0; i < 4; i++)
        __atomic_store_n(&a[i].stop, 1, __ATOMIC_SEQ_CST);
    for (int i = 0; i < 4; i++) {
        JOIN_WITHIN(th[i], 5000, "traffic thread");
        if (a[i].bad || (a[i].last_err != TBL_NOT_FOUND && a[i].last_err != SHM_ERR_EIDRM))
            fail_at(__FILE__, __LINE__, "thread %d (%s, %ld ok) ended with %u %s", i,
                    a[i].pusher ? "pusher" : "popper", a[i].ok, a[i].last_err,
                    code_name(a[i].last_err));
    }
    CHECK(a[0].ok + a[1].ok > 0);
    make_queue(t, 4, sizeof(long));
    long v = 9;
    queuevoid(p, v, sizeof(v), t);
    CHECK_SUCC(lPush(p), p);
    CHECK_EQ(depth(t), 1);
}

/* Consumer processes killed (SIGKILL) at random moments while a producer
 * process streams numbered records: the queue is never wedged (everything
 * drains), no record is delivered twice, and at most one record per kill
 * is missing (one a consumer had popped but not yet noted when it died).
 * A consumer killed inside lPop holds its slot until the queue's unblock
 * timeout (10 s, `tvmq stat`) recovers it, so this test may take ~10 s; the
 * 30 s limit below is for a queue that never recovers. */
static void consumers_killed_mid_stream(void)
{
    const TABLE t = 35;
    const long n = 200000;
    unsigned char *seen = (unsigned char *)mmap(NULL, (size_t)n, PROT_READ | PROT_WRITE,
                                                MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(seen != MAP_FAILED);
    make_queue(t, 4096, sizeof(long));

    pid_t producer = fork();
    REQUIRE(producer >= 0);
    if (producer == 0) {
        SATvm *c = G();
        long v = 0;
        queuevoid(c, v, sizeof(v), t);
        while (v < n) {
            if (lPush(c) == RC_SUCC)
                v++;
            else if (c->m_lErrno != DATA_SPC_FULL)
                _exit(10 + (int)c->m_lErrno % 100);
            else
                sched_yield();
        }
        _exit(0);
    }
    remember_child(producer);

    /* One consumer process at a time, killed after 1..10 ms, for ~1 s. */
    int kills = 0;
    srand(12345);
    long long end = mono_ms() + 1000;
    while (mono_ms() < end) {
        pid_t c = fork();
        REQUIRE(c >= 0);
        if (c == 0) {
            SATvm *h = G();
            long v;
            queuevoid(h, v, sizeof(v), t);
            for (;;) {
                if (lPop(h, &v, QUE_NORMAL) != RC_SUCC)
                    _exit(20);
                if (v >= 0 && v < n)
                    __atomic_add_fetch(&seen[v], 1, __ATOMIC_SEQ_CST);
            }
        }
        remember_child(c);
        sleep_ms(1 + rand() % 10);
        kill(c, SIGKILL);
        waitpid(c, NULL, 0);
        forget_child(c);
        kills++;
    }

    /* Drain here until the producer is done and the queue is empty. */
    SATvm *p = G();
    long v, drained = 0;
    int producer_status = -1;
    queuevoid(p, v, sizeof(v), t);
    long long deadline = mono_ms() + 30000;
    for (;;) {
        if (lPop(p, &v, QUE_NOWAIT) == RC_SUCC) {
            if (v >= 0 && v < n)
                seen[v]++;
            drained++;
            continue;
        }
        if (p->m_lErrno != NO_DATA_FOUND) {
            fail_at(__FILE__, __LINE__, "drain: %s", code_name(p->m_lErrno));
            break;
        }
        if (producer_status >= 0)
            break; /* producer done and queue empty */
        int st;
        if (waitpid(producer, &st, WNOHANG) == producer) {
            forget_child(producer);
            producer_status = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
            continue; /* one more pass for what it pushed last */
        }
        if (mono_ms() > deadline) {
            fail_at(__FILE__, __LINE__, "queue wedged: producer not done after 30 s");
            break;
        }
        sleep_ms(1);
    }
    CHECK_EQ(producer_status, 0);
    long missing = 0, twice = 0;
    for (long i = 0; i < n; i++) {
        if (seen[i] == 0)
            missing++;
        else if (seen[i] > 1)
            twice++;
    }
    CHECK_EQ(twice, 0);
    CHECK_RANGE(missing, 0, kills);
    CHECK_EQ(depth(t), 0);
    munmap(seen, (size_t)n);
}

TEST_MAIN(T(errno_per_thread), T(pop_blocks_until_push), T(popup_waits_for_records),
          T(drop_wakes_blocked_threads), T(drop_wakes_other_process), T(full_under_contention),
          T(exactly_once_threads), T(exactly_once_threads_small_queue), T(exactly_once_processes),
          T(pop_survives_signals), T(popup_total_timeout), T(release_while_other_thread_blocked),
          T(fork_child_uses_queue), T(drop_during_traffic), T(consumers_killed_mid_stream))
