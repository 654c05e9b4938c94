/*
 * net_cluster.c: the network calls against a Redis Cluster, through one
 * lTvmConnect to one node (run by run.sh's t_net_cluster, which makes the
 * cluster, checks the lists with redis-cli -c and migrates slots).
 *
 *   net_cluster HOST PORT push N      queues 21 to 28: N tagged records each,
 *                                     lTvmPush on even queues, lAsyPush +
 *                                     lAsyWait on odd ones, one handle
 *   net_cluster HOST PORT pop N       the same records back, in order, then
 *                                     empty (lTvmPop QUE_NOWAIT on 21-24,
 *                                     lTvmPopup on 25-28), one handle
 *   net_cluster HOST PORT run STOPFILE
 *                                     queue 21, until STOPFILE exists: one
 *                                     thread pushes with lTvmPush, one with
 *                                     lAsyPush, one pops (QUE_NOWAIT and
 *                                     lTvmPopup) while slots migrate; then
 *                                     every record must have been popped
 *                                     exactly once, each producer's in order
 *
 * Records are net_common.h's tagged dbUser. Exit 0 only if all held.
 */
#include "net_common.h"

#include <sys/stat.h>

static char *g_host;
static long g_port;
static int g_failed;

#define FAIL(...)                                                             \
    do {                                                                      \
        fprintf(stderr, __VA_ARGS__);                                         \
        fputc('\n', stderr);                                                  \
        __atomic_store_n(&g_failed, 1, __ATOMIC_SEQ_CST);                     \
    } while (0)

static SATvm *connect_handle(void)
{
    SATvm *p = (SATvm *)pCloneSATvm();
    if (connect_to(p, g_host, g_port) != RC_SUCC) {
        FAIL("lTvmConnect %s:%ld: %s (%u)", g_host, g_port, sGetTError(p->m_lErrno), p->m_lErrno);
        exit(1);
    }
    return p;
}

static int push_all(unsigned long n)
{
    SATvm *p = connect_handle();
    dbUser u;
    for (TABLE q = 21; q <= 28; q++) {
        queueinit(p, u, q);
        for (unsigned long i = 0; i < n; i++) {
            tag_record(&u, q - 21, i);
            long rc = q % 2 ? lAsyPush(p) : lTvmPush(p);
            if (rc != RC_SUCC) {
                FAIL("queue %u record %lu: push: %s (%u)", q, i, sGetTError(p->m_lErrno), p->m_lErrno);
                return 1;
            }
        }
        if (q % 2 && (lAsyWait(p) != RC_SUCC || p->m_lEffect != n)) {
            FAIL("queue %u: lAsyWait: %s, %zu records in", q, sGetTError(p->m_lErrno), p->m_lEffect);
            return 1;
        }
    }
    vTvmDisconnect(p);
    vCloneFree(p);
    return g_failed;
}

static int expect_record(const dbUser *u, unsigned producer, unsigned long seq)
{
    unsigned pr;
    unsigned long s;
    if (!check_record(u, &pr, &s) || pr != producer || s != seq) {
        FAIL("want producer %u record %lu, got a record tagged %u/%lu (%s)", producer, seq, pr, s,
             check_record(u, &pr, &s) ? "intact" : "corrupt");
        return 0;
    }
    return 1;
}

static int pop_all(unsigned long n)
{
    SATvm *p = connect_handle();
    dbUser u;
    for (TABLE q = 21; q <= 28; q++) {
        queueinit(p, u, q);
        unsigned long got = 0;
        while (got < n) {
            if (q <= 24) {
                if (lTvmPop(p, &u, QUE_NOWAIT) != RC_SUCC) {
                    FAIL("queue %u: lTvmPop after %lu: %s", q, got, sGetTError(p->m_lErrno));
                    return 1;
                }
                if (!expect_record(&u, q - 21, got++))
                    return 1;
            } else {
                size_t k = 0;
                void *arr = NULL;
                if (lTvmPopup(p, 100, 0, &k, &arr) != RC_SUCC) {
                    FAIL("queue %u: lTvmPopup after %lu: %s", q, got, sGetTError(p->m_lErrno));
                    return 1;
                }
                for (size_t j = 0; j < k; j++)
                    if (!expect_record((dbUser *)arr + j, q - 21, got++))
                        return 1;
                TFree(arr);
            }
        }
        if (got != n || lTvmPop(p, &u, QUE_NOWAIT) != RC_FAIL || p->m_lErrno != NO_DATA_FOUND) {
            FAIL("queue %u: %lu records, want %lu and then NO_DATA_FOUND (%s)", q, got, n,
                 sGetTError(p->m_lErrno));
            return 1;
        }
    }
    vTvmDisconnect(p);
    vCloneFree(p);
    return g_failed;
}

/* ---- Pushing and popping while slots migrate ---------------------------- */

static const char *g_stopfile;
static int g_stop;                     /* producers stop */
static unsigned long g_pushed[2];      /* records each producer pushed (all acknowledged) */
static unsigned long g_popped[2];      /* records of each producer popped so far */
static int g_producers_done;

static int stop_requested(void)
{
    struct stat st;
    return stat(g_stopfile, &st) == 0;
}

static void *producer(void *arg)
{
    unsigned me = (unsigned)(long)arg; /* 0: lTvmPush, 1: lAsyPush */
    SATvm *p = connect_handle();
    dbUser u;
    unsigned long i = 0;
    queueinit(p, u, 21);
    while (!__atomic_load_n(&g_stop, __ATOMIC_SEQ_CST) && !__atomic_load_n(&g_failed, __ATOMIC_SEQ_CST)) {
        tag_record(&u, me, i);
        long rc = me ? lAsyPush(p) : lTvmPush(p);
        if (rc != RC_SUCC) {
            FAIL("producer %u record %lu: %s (%u)", me, i, sGetTError(p->m_lErrno), p->m_lErrno);
            break;
        }
        i++;
        /* Keep the list short (so that a migration moves little): at most
         * 10,000 records of this producer ahead of the consumer. */
        while (i - __atomic_load_n(&g_popped[me], __ATOMIC_SEQ_CST) > 10000 && !__atomic_load_n(&g_failed, __ATOMIC_SEQ_CST))
            usleep(500);
        if (me && i % 5000 == 0 && (lAsyWait(p) != RC_SUCC)) {
            FAIL("producer %u: lAsyWait: %s (%u)", me, sGetTError(p->m_lErrno), p->m_lErrno);
            break;
        }
    }
    if (me && lAsyWait(p) != RC_SUCC)
        FAIL("producer %u: final lAsyWait: %s (%u)", me, sGetTError(p->m_lErrno), p->m_lErrno);
    __atomic_store_n(&g_pushed[me], i, __ATOMIC_SEQ_CST);
    vTvmDisconnect(p);
    vCloneFree(p);
    __atomic_add_fetch(&g_producers_done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

static void *consumer(void *arg)
{
    (void)arg;
    SATvm *p = connect_handle();
    dbUser u;
    unsigned long next[2] = { 0, 0 };
    int empty_after_done = 0;
    queueinit(p, u, 21);
    for (unsigned long round = 0; !__atomic_load_n(&g_failed, __ATOMIC_SEQ_CST); round++) {
        int done = __atomic_load_n(&g_producers_done, __ATOMIC_SEQ_CST) == 2;
        size_t k = 0;
        void *arr = NULL;
        long rc;
        if (round % 2) {
            rc = lTvmPop(p, &u, QUE_NOWAIT);
            k = rc == RC_SUCC;
            arr = &u;
        } else {
            rc = lTvmPopup(p, 50, 0, &k, &arr);
        }
        if (rc != RC_SUCC && p->m_lErrno != NO_DATA_FOUND) {
            FAIL("consumer: %s (%u)", sGetTError(p->m_lErrno), p->m_lErrno);
            break;
        }
        for (size_t j = 0; j < k; j++) {
            const dbUser *r = (const dbUser *)arr + j;
            unsigned pr;
            unsigned long s;
            if (!check_record(r, &pr, &s) || pr > 1 || s != next[pr]) {
                FAIL("consumer: got producer %u record %lu, want record %lu (lost, twice or out of order)", pr, s,
                     pr <= 1 ? next[pr] : 0UL);
                break;
            }
            next[pr]++;
            __atomic_store_n(&g_popped[pr], next[pr], __ATOMIC_SEQ_CST);
        }
        if (round % 2 == 0)
            TFree(arr);
        if (k == 0 && done && ++empty_after_done >= 3)
            break;
    }
    for (unsigned i = 0; i < 2 && !g_failed; i++)
        if (next[i] != g_pushed[i])
            FAIL("producer %u pushed %lu records, %lu popped", i, g_pushed[i], next[i]);
    fprintf(stdout, "pushed %lu + %lu, popped %lu + %lu\n", g_pushed[0], g_pushed[1], next[0], next[1]);
    vTvmDisconnect(p);
    vCloneFree(p);
    return NULL;
}

static int run_until_stop(void)
{
    pthread_t th[3];
    pthread_create(&th[0], NULL, producer, (void *)0L);
    pthread_create(&th[1], NULL, producer, (void *)1L);
    pthread_create(&th[2], NULL, consumer, NULL);
    while (!stop_requested() && !__atomic_load_n(&g_failed, __ATOMIC_SEQ_CST))
        usleep(20000);
    __atomic_store_n(&g_stop, 1, __ATOMIC_SEQ_CST);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    return g_failed;
}

int main(int argc, char *argv[])
{
    if (argc != 5) {
        fprintf(stderr, "usage: net_cluster HOST PORT push|pop N | net_cluster HOST PORT run STOPFILE\n");
        return 2;
    }
    g_host = argv[1];
    g_port = atol(argv[2]);
    if (strcmp(argv[3], "push") == 0)
        return push_all(strtoul(argv[4], NULL, 10));
    if (strcmp(argv[3], "pop") == 0)
        return pop_all(strtoul(argv[4], NULL, 10));
    if (strcmp(argv[3], "run") == 0) {
        g_stopfile = argv[4];
        return run_until_stop();
    }
    return 2;
}
