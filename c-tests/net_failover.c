/*
 * net_failover.c: producers and leasing consumers while run.sh kills the
 * Redis master with SIGKILL (and restarts it as a replica), behind Redis
 * Sentinel or in a Redis Cluster with replicas.
 *
 *   net_failover sentinel HOST:PORT,HOST:PORT,... NAME STOPFILE
 *   net_failover cluster HOST PORT STOPFILE
 *
 * Queue 31 (FQ; lease options made here: lease time 2 s). Two producers push
 * tagged records (producer << 32 | sequence) with lTvmRequireReplicas(p,
 * 1, 2000), one every millisecond or so; a push that fails is tried again
 * (the same record) until it returns RC_SUCC, which is noted. Two
 * consumers lease (one blocking with QUE_NORMAL, one QUE_NOWAIT) and
 * acknowledge; every delivery is counted per record. Once STOPFILE exists
 * the producers stop, and the consumers go on until every record whose
 * push returned RC_SUCC was delivered (or 20 s).
 *
 * Prints "pushed N (retried pushes R), delivered U of them, missing M,
 * duplicates D" and one line "gap START END" (CLOCK_REALTIME ms) for every
 * stretch of more than 300 ms without a delivery, for run.sh to compare
 * with the failovers it timed. Exit 0 only if M is 0 and nothing but
 * connection, failover and lease-expiry errors happened.
 */
#include "check.h"

#include <pthread.h>
#include <stdint.h>

#define FQ 31
#define PRODUCERS 2
#define MAX_SEQ 200000

static int g_sentinel;
static char *g_a, *g_b;
static const char *g_stop;
static long g_port;

static unsigned char g_pushed[PRODUCERS][MAX_SEQ + 1];
static unsigned short g_got[PRODUCERS][MAX_SEQ + 1];
static long g_seq[PRODUCERS];
static long g_retried;
static volatile int g_producing = 1, g_consuming = 1;
static long long g_last_delivery;
static long g_odd;            /* an error that is not expected here */

static long long real_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static long connect_one(SATvm *p)
{
    if (g_sentinel)
        return lTvmConnectSentinel(p, g_a, g_b, 5);
    return lTvmConnect(p, g_a, g_port, 5);
}

/* Errors a failover explains. */
static int expected(long code)
{
    switch (code) {
    case SOCK_CONN_ERR: case SOCK_CONN_TMO: case SOCK_IO_RESET: case SOCK_READ_ERR:
    case SOCK_SEND_ERR: case SOCK_READ_TMO: case SOCK_SEND_TMO: case REPL_TIMEOUT:
    case SVR_EXCEPTION: case LEASE_EXPIRED: case NO_DATA_FOUND:
        return 1;
    }
    return 0;
}

static void *producer(void *arg)
{
    unsigned id = (unsigned)(uintptr_t)arg;
    SATvm *p = (SATvm *)pCloneSATvm();
    while (connect_one(p) != RC_SUCC)
        sleep_ms(50);
    if (lTvmRequireReplicas(p, 1, 2000) != RC_SUCC) {
        fprintf(stderr, "lTvmRequireReplicas: %s\n", sGetTErrName(p->m_lErrno));
        __atomic_add_fetch(&g_odd, 1, __ATOMIC_SEQ_CST);
    }
    rec64 r;
    for (long seq = 1; seq <= MAX_SEQ && g_producing; seq++) {
        for (;;) {
            bind_rec(p, &r, FQ, (long)((uint64_t)id << 32 | (uint64_t)seq));
            if (lTvmPush(p) == RC_SUCC)
                break;
            if (!expected(p->m_lErrno)) {
                fprintf(stderr, "push: %s\n", sGetTErrName(p->m_lErrno));
                __atomic_add_fetch(&g_odd, 1, __ATOMIC_SEQ_CST);
            }
            __atomic_add_fetch(&g_retried, 1, __ATOMIC_SEQ_CST);
            sleep_ms(10);
        }
        g_pushed[id][seq] = 1;
        g_seq[id] = seq;
        usleep(1000);
    }
    vTvmDisconnect(p);
    vCloneFree(p);
    return NULL;
}

static void *consumer(void *arg)
{
    Uenum wait = (Uenum)(uintptr_t)arg;
    SATvm *p = (SATvm *)pCloneSATvm();
    while (connect_one(p) != RC_SUCC)
        sleep_ms(50);
    rec64 r;
    TvmLease l;
    while (g_consuming) {
        queuevoid(p, r, sizeof(r), FQ);
        if (lTvmPopLease(p, &r, wait, 0, &l) != RC_SUCC) {
            if (!expected(p->m_lErrno)) {
                fprintf(stderr, "lease: %s\n", sGetTErrName(p->m_lErrno));
                __atomic_add_fetch(&g_odd, 1, __ATOMIC_SEQ_CST);
            }
            sleep_ms(p->m_lErrno == NO_DATA_FOUND ? 2 : 10);
            continue;
        }
        long long now = real_ms();
        long long before = __atomic_exchange_n(&g_last_delivery, now, __ATOMIC_SEQ_CST);
        if (before && now - before > 300)
            printf("gap %lld %lld\n", before, now);
        uint64_t tag = (uint64_t)r.n;
        unsigned id = (unsigned)(tag >> 32);
        unsigned long seq = (unsigned long)(tag & 0xffffffffu);
        if (id < PRODUCERS && seq >= 1 && seq <= MAX_SEQ)
            __atomic_add_fetch(&g_got[id][seq], 1, __ATOMIC_SEQ_CST);
        else if (r.n != 0) {
            fprintf(stderr, "a record no producer pushed: %ld\n", r.n);
            __atomic_add_fetch(&g_odd, 1, __ATOMIC_SEQ_CST);
        }
        p->tblName = FQ;
        if (lTvmAck(p, &l) != RC_SUCC && !expected(p->m_lErrno)) {
            fprintf(stderr, "ack: %s\n", sGetTErrName(p->m_lErrno));
            __atomic_add_fetch(&g_odd, 1, __ATOMIC_SEQ_CST);
        }
    }
    vTvmDisconnect(p);
    vCloneFree(p);
    return NULL;
}

/* Records whose push returned RC_SUCC and that were never delivered. */
static long missing(long *pushed, long *unique, long *dups)
{
    long m = 0;
    *pushed = *unique = *dups = 0;
    for (int id = 0; id < PRODUCERS; id++)
        for (long s = 1; s <= MAX_SEQ; s++) {
            unsigned got = __atomic_load_n(&g_got[id][s], __ATOMIC_SEQ_CST);
            if (g_pushed[id][s]) {
                (*pushed)++;
                if (got)
                    (*unique)++;
                else
                    m++;
            }
            if (got > 1)
                *dups += got - 1;
        }
    return m;
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "sentinel") == 0) {
        g_sentinel = 1;
        g_a = argv[2];
        g_b = argv[3];
    } else if (argc == 5 && strcmp(argv[1], "cluster") == 0) {
        g_a = argv[2];
        g_port = atol(argv[3]);
    } else {
        fprintf(stderr, "usage: net_failover sentinel LIST NAME STOPFILE | cluster HOST PORT STOPFILE\n");
        return 2;
    }
    g_stop = argv[4];
    setvbuf(stdout, NULL, _IOLBF, 0);
    SATvm *p = (SATvm *)pCloneSATvm();
    REQUIRE_SUCC(connect_one(p), p);
    /* The queue's options on every replica before anything is killed. */
    REQUIRE_SUCC(lTvmRequireReplicas(p, g_sentinel ? 2 : 1, 5000), p);
    REQUIRE_SUCC(lTvmDropTable(p, FQ), p);
    TvmQueueOptions o;
    REQUIRE(lInitQueueOptions(&o, sizeof(o)) == RC_SUCC);
    o.leases = true;
    o.lease_ms = 2000;
    REQUIRE_SUCC(lTvmCreateQueueEx(p, FQ, &o), p);
    REQUIRE_SUCC(lTvmRequireReplicas(p, 0, 0), p);

    pthread_t prod[PRODUCERS], cons[2];
    for (int i = 0; i < PRODUCERS; i++)
        REQUIRE(pthread_create(&prod[i], NULL, producer, (void *)(uintptr_t)i) == 0);
    REQUIRE(pthread_create(&cons[0], NULL, consumer, (void *)(uintptr_t)QUE_NORMAL) == 0);
    REQUIRE(pthread_create(&cons[1], NULL, consumer, (void *)(uintptr_t)QUE_NOWAIT) == 0);

    while (access(g_stop, F_OK) != 0)
        sleep_ms(20);
    g_producing = 0;
    for (int i = 0; i < PRODUCERS; i++)
        pthread_join(prod[i], NULL);
    long pushed, unique, dups, m = 0;
    long long until = mono_ms() + 20000;
    while (mono_ms() < until && (m = missing(&pushed, &unique, &dups)) > 0)
        sleep_ms(100);
    g_consuming = 0;
    /* Wake the blocking consumer: a record of tag 0. */
    rec64 r;
    while (lTvmPush((bind_rec(p, &r, FQ, 0), p)) != RC_SUCC)
        sleep_ms(50);
    for (int i = 0; i < 2; i++)
        pthread_join(cons[i], NULL);
    m = missing(&pushed, &unique, &dups);
    printf("pushed %ld (retried pushes %ld), delivered %ld of them, missing %ld, duplicates %ld\n", pushed,
           g_retried, unique, m, dups);
    CHECK_EQ(m, 0);
    CHECK(pushed > 0);
    CHECK_EQ(__atomic_load_n(&g_odd, __ATOMIC_SEQ_CST), 0);
    lTvmDropTable(p, FQ);
    vTvmDisconnect(p);
    vCloneFree(p);
    return __atomic_load_n(&g_failures, __ATOMIC_SEQ_CST) ? 1 : 0;
}
