/*
 * net_push.c: the network twin of the seed's push_bench.c.
 *
 *   net_push HOST PORT THREADS ROWS [sync|async|shared] [QUEUE]
 *
 * THREADS threads (1 to 10, as the seed) each push ROWS/THREADS tagged
 * records (net_common.h) into queue QUEUE (default 21) of the server at
 * HOST:PORT (HOST may be a unix socket path):
 *   sync    each thread its own connection, lTvmPush
 *   async   each thread its own connection, lAsyPush, then lAsyWait (which
 *           must report every record in)
 *   shared  one connection (the global handle's) shared by every thread
 *           (lTvmShare), lTvmPush
 * Prints cost_time:[ms] as the seed does; exit 0 only if every call
 * succeeded. Producer i tags its records (i, 0..ROWS/THREADS-1).
 */
#include "net_common.h"

typedef unsigned long long uint64;
extern uint64 get_tick_time();

static char *g_host;
static long g_port;
static unsigned long g_rows;
static TABLE g_queue = 21;
static int g_mode; /* 0 sync, 1 async, 2 shared */
static int g_failed;

typedef struct {
    unsigned index;
    SATvm *handle;
} job;

static void *producer(void *arg)
{
    job *j = (job *)arg;
    SATvm *p = j->handle;
    dbUser u;

    if (g_mode != 2 && connect_to(p, g_host, g_port) != RC_SUCC) {
        fprintf(stderr, "producer %u: lTvmConnect: %s (%u)\n", j->index, sGetTError(p->m_lErrno), p->m_lErrno);
        __atomic_store_n(&g_failed, 1, __ATOMIC_SEQ_CST);
        return NULL;
    }
    queueinit(p, u, g_queue);
    for (unsigned long i = 0; i < g_rows; i++) {
        tag_record(&u, j->index, i);
        long rc = g_mode == 1 ? lAsyPush(p) : lTvmPush(p);
        if (rc != RC_SUCC) {
            fprintf(stderr, "producer %u: push %lu: %s (%u)\n", j->index, i, sGetTError(p->m_lErrno), p->m_lErrno);
            __atomic_store_n(&g_failed, 1, __ATOMIC_SEQ_CST);
            return NULL;
        }
    }
    if (g_mode == 1) {
        if (lAsyWait(p) != RC_SUCC || p->m_lEffect != g_rows) {
            fprintf(stderr, "producer %u: lAsyWait: %s (%u), %zu records in, want %lu\n", j->index,
                    sGetTError(p->m_lErrno), p->m_lErrno, p->m_lEffect, g_rows);
            __atomic_store_n(&g_failed, 1, __ATOMIC_SEQ_CST);
        }
    }
    vTvmDisconnect(p);
    if (p->m_lErrno != 0) {
        fprintf(stderr, "producer %u: vTvmDisconnect: %s\n", j->index, sGetTError(p->m_lErrno));
        __atomic_store_n(&g_failed, 1, __ATOMIC_SEQ_CST);
    }
    return NULL;
}

int main(int argc, char *argv[])
{
    pthread_t th[10];
    job jobs[10];
    int n;
    SATvm *g = (SATvm *)pGetSATvm();

    if (argc < 5) {
        fprintf(stderr, "usage: net_push HOST PORT THREADS ROWS [sync|async|shared] [QUEUE]\n");
        return 2;
    }
    g_host = argv[1];
    g_port = atol(argv[2]);
    n = atoi(argv[3]);
    if (n < 1 || n > 10) {
        fprintf(stderr, "THREADS must be 1 to 10\n");
        return 2;
    }
    g_rows = strtoul(argv[4], NULL, 10) / n;
    if (argc > 5)
        g_mode = strcmp(argv[5], "async") == 0 ? 1 : strcmp(argv[5], "shared") == 0 ? 2 : 0;
    if (argc > 6)
        g_queue = (TABLE)atol(argv[6]);

    if (g_mode == 2 && connect_to(g, g_host, g_port) != RC_SUCC) {
        fprintf(stderr, "lTvmConnect: %s (%u)\n", sGetTError(g->m_lErrno), g->m_lErrno);
        return 1;
    }
    uint64 t0 = get_tick_time();
    for (int i = 0; i < n; i++) {
        jobs[i].index = (unsigned)i;
        jobs[i].handle = (SATvm *)pCloneSATvm();
        if (g_mode == 2 && lTvmShare(jobs[i].handle, g) != RC_SUCC) {
            fprintf(stderr, "lTvmShare: %s\n", sGetTError(jobs[i].handle->m_lErrno));
            return 1;
        }
        pthread_create(&th[i], NULL, producer, &jobs[i]);
    }
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        vCloneFree(jobs[i].handle);
    }
    fprintf(stdout, "cost_time:[%llu]\n", get_tick_time() - t0);
    vTvmDisconnect(g);
    return g_failed ? 1 : 0;
}
