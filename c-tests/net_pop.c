/*
 * net_pop.c: the network twin of the seed's pop_bench.c, with checks.
 *
 *   net_pop HOST PORT THREADS ROWS PRODUCERS [normal|nowait|popup|shared] [QUEUE]
 *
 * THREADS threads (1 to 10) each take ROWS/THREADS records of queue QUEUE
 * (default 21) on the server at HOST:PORT, pushed by net_push with
 * PRODUCERS threads (so ROWS/PRODUCERS records of each producer):
 *   normal  lTvmPop(QUE_NORMAL), each thread its own connection
 *   nowait  lTvmPop(QUE_NOWAIT), retried after NO_DATA_FOUND
 *   popup   lTvmPopup of up to 64 records, secs = 1
 *   shared  lTvmPop(QUE_NORMAL) on handles sharing one connection
 * Every record must be intact, taken exactly once over all threads, and
 * each thread must see each producer's records in increasing order.
 * Prints cost_time:[ms]; exit 0 only if everything held.
 */
#include "net_common.h"

typedef unsigned long long uint64;
extern uint64 get_tick_time();

static char *g_host;
static long g_port;
static unsigned long g_rows, g_per_producer;
static unsigned g_producers;
static TABLE g_queue = 21;
static int g_mode; /* 0 normal, 1 nowait, 2 popup, 3 shared */
static int g_failed;
static unsigned char *g_seen; /* producer * per_producer + seq */

typedef struct {
    unsigned index;
    SATvm *handle;
} job;

#define FAIL(...)                                                             \
    do {                                                                      \
        fprintf(stderr, __VA_ARGS__);                                         \
        __atomic_store_n(&g_failed, 1, __ATOMIC_SEQ_CST);                     \
    } while (0)

/* Checks one record; returns 0 when the thread should stop. */
static int take(unsigned me, const dbUser *u, long *last)
{
    unsigned producer;
    unsigned long seq;
    if (!check_record(u, &producer, &seq) || producer >= g_producers || seq >= g_per_producer) {
        FAIL("consumer %u: a corrupt or unknown record (acct_id %ld)\n", me, u->acct_id);
        return 0;
    }
    if ((long)seq <= last[producer]) {
        FAIL("consumer %u: producer %u's record %lu after its record %ld: order lost\n", me, producer, seq,
             last[producer]);
        return 0;
    }
    last[producer] = (long)seq;
    if (__atomic_fetch_add(&g_seen[producer * g_per_producer + seq], 1, __ATOMIC_SEQ_CST) != 0) {
        FAIL("consumer %u: producer %u's record %lu taken twice\n", me, producer, seq);
        return 0;
    }
    return 1;
}

static void *consumer(void *arg)
{
    job *j = (job *)arg;
    SATvm *p = j->handle;
    dbUser u;
    long last[64];
    unsigned long done = 0;

    for (unsigned i = 0; i < 64; i++)
        last[i] = -1;
    if (g_mode != 3 && connect_to(p, g_host, g_port) != RC_SUCC) {
        FAIL("consumer %u: lTvmConnect: %s (%u)\n", j->index, sGetTError(p->m_lErrno), p->m_lErrno);
        return NULL;
    }
    queueinit(p, u, g_queue);
    while (done < g_rows && !__atomic_load_n(&g_failed, __ATOMIC_SEQ_CST)) {
        if (g_mode == 2) {
            size_t n = 0;
            void *arr = NULL;
            size_t want = g_rows - done < 64 ? g_rows - done : 64;
            long rc = lTvmPopup(p, want, 1, &n, &arr);
            if (rc != RC_SUCC && p->m_lErrno != MQUE_WAIT_TMO && p->m_lErrno != NO_DATA_FOUND) {
                FAIL("consumer %u: lTvmPopup: %s (%u)\n", j->index, sGetTError(p->m_lErrno), p->m_lErrno);
                break;
            }
            for (size_t k = 0; k < n; k++)
                if (!take(j->index, (dbUser *)arr + k, last))
                    break;
            done += n;
            TFree(arr);
            continue;
        }
        long rc = lTvmPop(p, &u, g_mode == 1 ? QUE_NOWAIT : QUE_NORMAL);
        if (rc != RC_SUCC) {
            if (g_mode == 1 && p->m_lErrno == NO_DATA_FOUND)
                continue;
            FAIL("consumer %u: lTvmPop: %s (%u)\n", j->index, sGetTError(p->m_lErrno), p->m_lErrno);
            break;
        }
        if (!take(j->index, &u, last))
            break;
        done++;
    }
    vTvmDisconnect(p);
    return NULL;
}

int main(int argc, char *argv[])
{
    pthread_t th[10];
    job jobs[10];
    int n;
    SATvm *g = (SATvm *)pGetSATvm();

    if (argc < 6) {
        fprintf(stderr, "usage: net_pop HOST PORT THREADS ROWS PRODUCERS [normal|nowait|popup|shared] [QUEUE]\n");
        return 2;
    }
    g_host = argv[1];
    g_port = atol(argv[2]);
    n = atoi(argv[3]);
    unsigned long total = strtoul(argv[4], NULL, 10);
    g_producers = (unsigned)atoi(argv[5]);
    if (n < 1 || n > 10 || g_producers < 1 || g_producers > 64 || total % n || total % g_producers) {
        fprintf(stderr, "THREADS 1 to 10, PRODUCERS 1 to 64, both dividing ROWS\n");
        return 2;
    }
    g_rows = total / n;
    g_per_producer = total / g_producers;
    if (argc > 6)
        g_mode = strcmp(argv[6], "nowait") == 0   ? 1
                 : strcmp(argv[6], "popup") == 0  ? 2
                 : strcmp(argv[6], "shared") == 0 ? 3
                                                  : 0;
    if (argc > 7)
        g_queue = (TABLE)atol(argv[7]);
    g_seen = calloc(total, 1);
    if (!g_seen)
        return 1;
    if (g_mode == 3 && connect_to(g, g_host, g_port) != RC_SUCC) {
        fprintf(stderr, "lTvmConnect: %s (%u)\n", sGetTError(g->m_lErrno), g->m_lErrno);
        return 1;
    }

    uint64 t0 = get_tick_time();
    for (int i = 0; i < n; i++) {
        jobs[i].index = (unsigned)i;
        jobs[i].handle = (SATvm *)pCloneSATvm();
        if (g_mode == 3 && lTvmShare(jobs[i].handle, g) != RC_SUCC) {
            fprintf(stderr, "lTvmShare: %s\n", sGetTError(jobs[i].handle->m_lErrno));
            return 1;
        }
        pthread_create(&th[i], NULL, consumer, &jobs[i]);
    }
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        vCloneFree(jobs[i].handle);
    }
    fprintf(stdout, "cost_time:[%llu]\n", get_tick_time() - t0);
    vTvmDisconnect(g);
    if (!g_failed) {
        for (unsigned long k = 0; k < total; k++) {
            if (g_seen[k] != 1) {
                fprintf(stderr, "producer %lu's record %lu taken %u times\n", k / g_per_producer,
                        k % g_per_producer, g_seen[k]);
                g_failed = 1;
                break;
            }
        }
    }
    return g_failed ? 1 : 0;
}
