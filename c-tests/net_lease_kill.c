/*
 * net_lease_kill.c: leasing consumer processes killed with SIGKILL under
 * load, on a redis-server or a Redis Cluster (the lease script of
 * docs/client.md, "Leases on Redis").
 *
 *   net_lease_kill HOST PORT QUEUE RECORDS CONSUMERS KILLS LEASE_MS
 *
 * Makes queue QUEUE's lease options (lTvmCreateQueueEx: LEASE_MS, no
 * delivery limit), forks a producer pushing RECORDS records (n = 1 ..
 * RECORDS, a few at a time) and CONSUMERS consumers, each leasing
 * (QUE_NORMAL), pausing 100 us, acknowledging, and writing n to a pipe
 * once its lTvmAck returned RC_SUCC. Meanwhile the parent kills a
 * consumer with SIGKILL every 150 ms, KILLS times, and forks another in
 * its place. It stops once every record was reported acknowledged, or
 * when none was for 3 s after the last kill (a killed consumer may have
 * acknowledged a record and died before reporting it).
 *
 * Checks here: no record reported acknowledged twice (fencing: a lease that
 * ran out cannot be acknowledged, the record's next delivery can), no
 * unexpected error in any process, at most KILLS records unreported.
 * Prints "acked R of N, unreported U, kills K, redelivered-acks D".
 * run.sh then checks in Redis that {QUEUE}:stats counts exactly RECORDS
 * acknowledgements and that no record is left anywhere: together, every
 * record acknowledged exactly once, none lost.
 */
#include "check.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>

static const char *g_host;
static long g_port;
static TABLE g_queue;

static void consumer(int fd)
{
    SATvm *p = (SATvm *)pCloneSATvm();
    if (lTvmConnect(p, (char *)g_host, g_port, 5) != RC_SUCC) {
        fprintf(stderr, "consumer: connect: %s\n", sGetTErrName(p->m_lErrno));
        _exit(1);
    }
    rec64 r;
    TvmLease l;
    for (;;) {
        queuevoid(p, r, sizeof(r), g_queue);
        if (lTvmPopLease(p, &r, QUE_NORMAL, 0, &l) != RC_SUCC) {
            fprintf(stderr, "consumer: lease: %s\n", sGetTErrName(p->m_lErrno));
            _exit(1);
        }
        usleep(100);
        p->tblName = g_queue;
        if (lTvmAck(p, &l) == RC_SUCC) {
            long n = r.n;
            if (write(fd, &n, sizeof(n)) != (ssize_t)sizeof(n))
                _exit(1);
        } else if (p->m_lErrno != LEASE_EXPIRED) {
            fprintf(stderr, "consumer: ack: %s\n", sGetTErrName(p->m_lErrno));
            _exit(1);
        }
    }
}

static void producer(long records)
{
    SATvm *p = (SATvm *)pCloneSATvm();
    if (lTvmConnect(p, (char *)g_host, g_port, 5) != RC_SUCC)
        _exit(1);
    rec64 r;
    for (long n = 1; n <= records; n++) {
        bind_rec(p, &r, g_queue, n);
        if (lTvmPush(p) != RC_SUCC) {
            fprintf(stderr, "producer: push %ld: %s\n", n, sGetTErrName(p->m_lErrno));
            _exit(1);
        }
        if (n % 20 == 0)
            usleep(2000);
    }
    vTvmDisconnect(p);
    _exit(0);
}

static pid_t spawn(int fd)
{
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0)
        consumer(fd);
    return pid;
}

int main(int argc, char **argv)
{
    if (argc != 8) {
        fprintf(stderr, "usage: net_lease_kill HOST PORT QUEUE RECORDS CONSUMERS KILLS LEASE_MS\n");
        return 2;
    }
    g_host = argv[1];
    g_port = atol(argv[2]);
    g_queue = (TABLE)atol(argv[3]);
    long records = atol(argv[4]);
    int consumers = atoi(argv[5]), kills = atoi(argv[6]);
    long lease_ms = atol(argv[7]);
    REQUIRE(records > 0 && consumers > 0 && consumers <= 64 && kills >= 0 && lease_ms > 0);

    SATvm *p = (SATvm *)pCloneSATvm();
    REQUIRE_SUCC(lTvmConnect(p, (char *)g_host, g_port, 5), p);
    REQUIRE_SUCC(lTvmDropTable(p, g_queue), p);
    TvmQueueOptions o;
    REQUIRE(lInitQueueOptions(&o, sizeof(o)) == RC_SUCC);
    o.leases = true;
    o.lease_ms = (unsigned long long)lease_ms;
    REQUIRE_SUCC(lTvmCreateQueueEx(p, g_queue, &o), p);

    int fds[2];
    REQUIRE(pipe(fds) == 0);
    pid_t prod = fork();
    REQUIRE(prod >= 0);
    if (prod == 0)
        producer(records);
    pid_t pids[64];
    for (int i = 0; i < consumers; i++)
        pids[i] = spawn(fds[1]);

    unsigned char *seen = calloc((size_t)records + 1, 1);
    REQUIRE(seen != NULL);
    long acked = 0, twice = 0, bad = 0;
    int killed = 0, failed = 0;
    long long next_kill = mono_ms() + 150, last = mono_ms(), deadline = mono_ms() + 60000;
    srand((unsigned)getpid());
    while (acked < records && mono_ms() < deadline) {
        long long now = mono_ms();
        if (killed < kills && now >= next_kill) {
            int i = rand() % consumers;
            kill(pids[i], SIGKILL);
            int st;
            waitpid(pids[i], &st, 0);
            pids[i] = spawn(fds[1]);
            killed++;
            next_kill = now + 150;
        }
        if (killed == kills && now - last > 3000 + 2 * lease_ms)
            break;
        struct pollfd pf = { .fd = fds[0], .events = POLLIN };
        if (poll(&pf, 1, 20) > 0) {
            long n;
            if (read(fds[0], &n, sizeof(n)) != (ssize_t)sizeof(n))
                break;
            last = mono_ms();
            if (n < 1 || n > records)
                bad++;
            else if (seen[n]++)
                twice++;
            else
                acked++;
        }
        /* A consumer or the producer that exited by itself failed. */
        int st;
        pid_t w = waitpid(-1, &st, WNOHANG);
        if (w > 0 && w == prod) {
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                failed++;
            prod = 0;
        } else if (w > 0) {
            failed++;
            fprintf(stderr, "process %d ended by itself: status %d\n", (int)w, st);
            for (int i = 0; i < consumers; i++)
                if (pids[i] == w)
                    pids[i] = spawn(fds[1]);
        }
    }
    for (int i = 0; i < consumers; i++)
        kill(pids[i], SIGKILL);
    while (waitpid(-1, NULL, 0) > 0)
        ;
    printf("acked %ld of %ld, unreported %ld, kills %d, twice %ld\n", acked, records, records - acked, killed, twice);
    CHECK_EQ(twice, 0);
    CHECK_EQ(bad, 0);
    CHECK_EQ(failed, 0);
    CHECK(records - acked <= killed);
    vTvmDisconnect(p);
    vCloneFree(p);
    free(seen);
    return __atomic_load_n(&g_failures, __ATOMIC_SEQ_CST) ? 1 : 0;
}
