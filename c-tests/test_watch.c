/*
 * test_watch.c: seeing the queues from C (tvm.h, "Seeing the queues"):
 * lQueueStats and its size-versioned TvmQueueStats (every member against
 * what was done to the queue, the waiters and processes of a second
 * process, the lease counters, what it leaves alone), lListQueues (counts,
 * bounds, order), and sGetTErrDetail (the detail of the calling thread's
 * last error, "" after a success, per thread).
 *
 * Run by run.sh as `test_watch NAME`, each test in a fresh $TVMDBD.
 */
#include "check.h"

#include <pthread.h>

static TvmQueueStats stats_of(SATvm *p, TABLE t)
{
    TvmQueueStats s;
    memset(&s, 0, sizeof(s));
    s.size = sizeof(s);
    REQUIRE_SUCC(lQueueStats(p, t, &s), p);
    CHECK_EQU(s.size, sizeof(s));
    return s;
}

/* Creates queue t of `rows` rec64 records with the options `opts` of tvmq
 * create, or stops the test. */
static void make_queue_with(TABLE t, size_t rows, const char *opts)
{
    make_queue_cli(t, rows, sizeof(rec64), opts);
}

/* Every member after pushes and pops; the same values tvmq stat shows. */
static void stats_counts(void)
{
    SATvm *p = G();
    const TABLE t = 31;

    make_queue(t, 10, sizeof(rec64));
    TvmQueueStats s = stats_of(p, t);
    CHECK_EQU(s.record_size, sizeof(rec64));
    CHECK_EQU(s.capacity, 10);
    CHECK_EQU(s.depth, 0);
    CHECK_EQU(s.pushed, 0);
    CHECK_EQU(s.popped, 0);
    CHECK_EQU(s.processes, 1); /* this one: lQueueStats attached it */
    for (long i = 1; i <= 5; i++)
        CHECK(push_n(p, t, i));
    EXPECT_POP(p, t, 1);
    EXPECT_POP(p, t, 2);
    s = stats_of(p, t);
    CHECK_EQ(p->m_lEffect, 1);
    CHECK_EQU(s.depth, 3);
    CHECK_EQU(s.pushed, 5);
    CHECK_EQU(s.popped, 2);
    CHECK_EQU(s.waiters, 0);
    CHECK_EQU(s.leases_in_flight, 0);
    CHECK_EQU(s.redelivered, 0);
    CHECK_EQU(s.expired, 0);
    CHECK_EQU(s.dead_lettered, 0);
    CHECK_EQU(s.syncs, 0);
    CHECK_EQ((long long)s.depth, depth(t));
    CHECK_EQ((long long)s.pushed, stat_num(t, "pushed"));
    CHECK_EQ((long long)s.popped, stat_num(t, "popped"));
}

/* A second process asleep in a blocking pop: one more process, one waiter;
 * gone once it has its record and ended. */
static void stats_waiters_and_processes(void)
{
    SATvm *p = G();
    const TABLE t = 32;

    make_queue(t, 10, sizeof(rec64));
    CHECK_EQU(stats_of(p, t).processes, 1);
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        SATvm *c = (SATvm *)pCloneSATvm();
        rec64 out;
        queuevoid(c, out, sizeof(out), t);
        _exit(lPop(c, &out, QUE_NORMAL) == RC_SUCC && out.n == 9 ? 0 : 1);
    }
    remember_child(child);
    long long until = mono_ms() + 20000;
    TvmQueueStats s;
    do {
        sleep_ms(5);
        s = stats_of(p, t);
    } while (s.waiters == 0 && mono_ms() < until);
    CHECK_EQU(s.waiters, 1);
    CHECK_EQU(s.processes, 2);
    CHECK(push_n(p, t, 9));
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    forget_child(child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    s = stats_of(p, t);
    CHECK_EQU(s.waiters, 0);
    CHECK_EQU(s.processes, 1);
    CHECK_EQU(s.pushed, 1);
    CHECK_EQU(s.popped, 1);
}

/* The lease counters: in flight, expired and redelivered, dead-lettered. */
static void stats_leases(void)
{
    SATvm *p = G();
    const TABLE t = 33, dl = 34;
    rec64 out;
    TvmLease a, b, c;

    make_queue(dl, 10, sizeof(rec64));
    make_queue_with(t, 10, "--lease-ms 30000 --dead-letter 34");
    for (long i = 1; i <= 3; i++)
        CHECK(push_n(p, t, i));
    queuevoid(p, out, sizeof(out), t);
    REQUIRE_SUCC(lPopLease(p, &out, QUE_NOWAIT, 0, &a), p);
    REQUIRE_SUCC(lPopLease(p, &out, QUE_NOWAIT, 40, &b), p);
    TvmQueueStats s = stats_of(p, t);
    CHECK_EQU(s.leases_in_flight, 2);
    CHECK_EQU(s.depth, 1);
    CHECK_EQU(s.popped, 2);
    CHECK_SUCC(lReject(p, &a), p);
    sleep_ms(60); /* b's 40 ms run out: the next lease takes it again */
    long long until = mono_ms() + 10000;
    long rc;
    while ((rc = lPopLease(p, &out, QUE_NOWAIT, 0, &c)) == RC_SUCC && out.n != 2 && mono_ms() < until)
        CHECK_SUCC(lAck(p, &c), p);
    REQUIRE(rc == RC_SUCC && out.n == 2);
    CHECK_EQU(c.deliveries, 2);
    s = stats_of(p, t);
    CHECK_EQU(s.dead_lettered, 1);
    CHECK_EQU(s.expired, 1);
    CHECK_EQU(s.redelivered, 1);
    CHECK_EQU(s.leases_in_flight, 1);
    CHECK_SUCC(lAck(p, &c), p);
    CHECK_EQU(stats_of(p, t).leases_in_flight, 0);
    CHECK_EQU(stats_of(p, dl).depth, 1);
}

/* NULL handle, NULL or too small struct: refused, nothing written; a
 * larger struct (a later tvm.h) keeps what lies past this one; a missing
 * queue. */
static void stats_args(void)
{
    SATvm *p = G();
    const TABLE t = 35;
    TvmQueueStats s;

    make_queue(t, 4, sizeof(rec64));
    CHECK(push_n(p, t, 1));
    memset(&s, 0, sizeof(s));
    s.size = sizeof(s);
    CHECK_FAIL_NOH(lQueueStats(NULL, t, &s), CONDIT_IS_NIL);
    CHECK_FAIL(lQueueStats(p, t, NULL), p, CONDIT_IS_NIL);
    memset(&s, 0x5a, sizeof(s));
    s.size = sizeof(s) - 8;
    CHECK_FAIL(lQueueStats(p, t, &s), p, CONDIT_IS_NIL);
    CHECK_EQU(s.size, sizeof(s) - 8);
    CHECK_EQU(s.depth, 0x5a5a5a5a5a5a5a5aULL);
    CHECK(strstr(sGetTErrDetail(), "sizeof(TvmQueueStats)") != NULL);
    s.size = 0;
    CHECK_FAIL(lQueueStats(p, t, &s), p, CONDIT_IS_NIL);

    struct {
        TvmQueueStats s;
        uint64_t later[4];
    } big;
    memset(&big, 0x77, sizeof(big));
    big.s.size = sizeof(big);
    REQUIRE_SUCC(lQueueStats(p, t, &big.s), p);
    CHECK_EQU(big.s.size, sizeof(big));
    CHECK_EQU(big.s.depth, 1);
    for (int i = 0; i < 4; i++)
        CHECK_EQU(big.later[i], 0x7777777777777777ULL);

    memset(&s, 0, sizeof(s));
    s.size = sizeof(s);
    CHECK_FAIL(lQueueStats(p, 36, &s), p, TBL_NOT_FOUND);
    CHECK(strstr(sGetTErrDetail(), "queue-36") != NULL);
}

static int cmp_ids(const void *a, const void *b)
{
    TABLE x = *(const TABLE *)a, y = *(const TABLE *)b;
    return x < y ? -1 : x > y;
}

/* The ids in ascending order, how many exist, at most max written. */
static void list_queues(void)
{
    TABLE ids[8];
    size_t n = 99;

    CHECK_EQ(lListQueues(NULL, 0, &n), RC_SUCC);
    CHECK_EQU(n, 0);
    const TABLE made[] = { 905, 7, 300 };
    for (int i = 0; i < 3; i++)
        make_queue(made[i], 4, 16);
    CHECK_EQ(lListQueues(NULL, 0, &n), RC_SUCC);
    CHECK_EQU(n, 3);
    CHECK_EQU(lGetEffect(), 0);
    for (int i = 0; i < 8; i++)
        ids[i] = 12345;
    CHECK_EQ(lListQueues(ids, 8, &n), RC_SUCC);
    CHECK_EQU(n, 3);
    CHECK_EQU(lGetEffect(), 3);
    TABLE want[] = { 905, 7, 300 };
    qsort(want, 3, sizeof(TABLE), cmp_ids);
    for (int i = 0; i < 3; i++)
        CHECK_EQU(ids[i], want[i]);
    CHECK_EQU(ids[3], 12345);
    for (int i = 0; i < 8; i++)
        ids[i] = 12345;
    CHECK_EQ(lListQueues(ids, 2, &n), RC_SUCC);
    CHECK_EQU(n, 3);
    CHECK_EQU(lGetEffect(), 2);
    CHECK_EQU(ids[0], 7);
    CHECK_EQU(ids[1], 300);
    CHECK_EQU(ids[2], 12345);
    CHECK_FAIL_NOH(lListQueues(ids, 8, NULL), CONDIT_IS_NIL);
    CHECK_FAIL_NOH(lListQueues(NULL, 1, &n), CONDIT_IS_NIL);
    /* A file that is not a queue's is not listed. */
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/notes.txt", queue_dir());
    FILE *f = fopen(path, "w");
    REQUIRE(f != NULL);
    fclose(f);
    CHECK_EQ(lListQueues(ids, 8, &n), RC_SUCC);
    CHECK_EQU(n, 3);
}

static void *fail_in_thread(void *arg)
{
    (void)arg;
    SATvm *p = (SATvm *)pCloneSATvm();
    long ok = lAttchTable(p, 77) == RC_FAIL && strstr(sGetTErrDetail(), "queue-77") != NULL;
    vCloneFree(p);
    return (void *)ok;
}

/* The detail of the calling thread's last error: the path of a missing
 * queue, "" after a success and after vSetTErrno, "NULL handle", another
 * thread's failure leaving this thread's detail alone. */
static void error_detail(void)
{
    SATvm *p = G();

    CHECK_STR(sGetTErrDetail(), "");
    CHECK_FAIL(lAttchTable(p, 55), p, TBL_NOT_FOUND);
    const char *d = sGetTErrDetail();
    CHECK(strstr(d, queue_dir()) != NULL);
    CHECK(strstr(d, "queue-55") != NULL);
    CHECK(strcmp(d, sGetTError(TBL_NOT_FOUND)) != 0);
    CHECK_STR(sGetTErrDetail(), d); /* the getter changes nothing */

    pthread_t th;
    void *ok = NULL;
    REQUIRE(pthread_create(&th, NULL, fail_in_thread, NULL) == 0);
    REQUIRE(pthread_join(th, &ok) == 0);
    CHECK(ok != NULL);
    CHECK(strstr(sGetTErrDetail(), "queue-55") != NULL);

    make_queue(55, 4, sizeof(rec64));
    CHECK_SUCC(lAttchTable(p, 55), p);
    CHECK_STR(sGetTErrDetail(), "");
    CHECK_FAIL(lAttchTable(p, 56), p, TBL_NOT_FOUND);
    vSetTErrno(TBL_NOT_FOUND);
    CHECK_STR(sGetTErrDetail(), "");
    CHECK_FAIL_NOH(lPush(NULL), CONDIT_IS_NIL);
    CHECK_STR(sGetTErrDetail(), "NULL handle");
    /* An error with no more to say than its code: "". */
    rec64 out;
    queuevoid(p, out, sizeof(out), 55);
    CHECK_FAIL(lPop(p, &out, QUE_NOWAIT), p, NO_DATA_FOUND);
    CHECK_STR(sGetTErrDetail(), "");
}

TEST_MAIN(T(stats_counts), T(stats_waiters_and_processes), T(stats_leases), T(stats_args), T(list_queues),
          T(error_detail))
