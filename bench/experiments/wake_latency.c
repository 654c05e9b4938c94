/* Wake-up latency across two processes, the kernel mechanisms alone: a record
 * every G us from a producer process to a consumer blocked in a wait, on the
 * harness of bench/drivers/latency.h (p50 / p99 printed here).
 *   mode pipe      read / write on a pipe
 *   mode futex     a ring of 1,024 slots in a /dev/shm file; the consumer
 *                  spins SPIN_NS (env, default 0), then announces itself,
 *                  re-checks and sleeps with FUTEX_WAIT (shared, not private)
 *                  with a 200 ms timeout, as tvmq's blocking pop does (after
 *                  YIELDS sched_yield calls, env, default 0); the
 *                  producer bumps the word and wakes only when someone waits
 *   mode futex-nt  the same without the timeout
 *   mode mix       even records through the pipe, odd ones as futex does,
 *                  between the same two processes, so that both meet the
 *                  same load (p50 / p99 printed for each half)
 *   mode mix-nt    the same with futex-nt
 * Build and run from the project root:
 *   gcc -O2 -Wall -o target/wake_latency bench/experiments/wake_latency.c -I bench/drivers
 *   for m in pipe futex futex-nt pipe; do target/wake_latency $m 100 20000; done
 *   for m in mix mix-nt; do target/wake_latency $m 100 20000; done
 */
#define _GNU_SOURCE
#include "latency.h"

#include <fcntl.h>
#include <sched.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <sys/syscall.h>

#define SLOTS 1024
#define SIZE 304

struct shared {
    _Alignas(64) atomic_ulong tail;
    _Alignas(64) atomic_uint futex;
    atomic_uint waiters;
    _Alignas(64) char slots[SLOTS][SIZE];
};

static struct shared *sh;
static int pipe_fds[2];
static int timeout_on = 1;
static long spin_ns;
static int yields;

static void *open_side(int producer)
{
    static unsigned long head;
    (void)producer;
    return &head;
}

static int fx_send(void *ctx, const char *rec, size_t size)
{
    unsigned long t = atomic_load_explicit(&sh->tail, memory_order_relaxed);
    (void)ctx;
    memcpy(sh->slots[t % SLOTS], rec, size);
    atomic_store(&sh->tail, t + 1);
    if (atomic_load(&sh->waiters) != 0) {
        atomic_fetch_add(&sh->futex, 1);
        syscall(SYS_futex, &sh->futex, FUTEX_WAKE, 1, NULL, NULL, 0);
    }
    return 0;
}

static int fx_recv(void *ctx, char *rec, size_t size)
{
    unsigned long *head = ctx;
    uint64_t spin_until = spin_ns ? latency_now_ns() + (uint64_t)spin_ns : 0;
    int yielded = 0;
    for (;;) {
        if (atomic_load(&sh->tail) != *head) {
            memcpy(rec, sh->slots[*head % SLOTS], size);
            (*head)++;
            return 0;
        }
        if (spin_until && latency_now_ns() < spin_until) {
            __builtin_ia32_pause();
            continue;
        }
        if (yielded < yields) {
            yielded++;
            sched_yield();
            continue;
        }
        atomic_fetch_add(&sh->waiters, 1);
        unsigned seen = atomic_load(&sh->futex);
        if (atomic_load(&sh->tail) == *head) {
            struct timespec ts = { 0, 200000000 };
            syscall(SYS_futex, &sh->futex, FUTEX_WAIT, seen, timeout_on ? &ts : NULL, NULL, 0);
        }
        atomic_fetch_sub(&sh->waiters, 1);
    }
}

static int pipe_send(void *ctx, const char *rec, size_t size)
{
    (void)ctx;
    return write(pipe_fds[1], rec, size) == (ssize_t)size ? 0 : -1;
}

static int pipe_recv(void *ctx, char *rec, size_t size)
{
    (void)ctx;
    return read(pipe_fds[0], rec, size) == (ssize_t)size ? 0 : -1;
}

static unsigned long mix_sent, mix_received;

static int mix_send(void *ctx, const char *rec, size_t size)
{
    return mix_sent++ % 2 == 0 ? pipe_send(ctx, rec, size) : fx_send(ctx, rec, size);
}

static int mix_recv(void *ctx, char *rec, size_t size)
{
    return mix_received++ % 2 == 0 ? pipe_recv(ctx, rec, size) : fx_recv(ctx, rec, size);
}

static int cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char *argv[])
{
    if (argc < 4)
        return 2;
    const char *mode = argv[1];
    unsigned gap = (unsigned)atoi(argv[2]);
    unsigned long long n = strtoull(argv[3], NULL, 10);
    latency_ops ops = { open_side, pipe_send, pipe_recv };
    if (getenv("SPIN_NS"))
        spin_ns = atol(getenv("SPIN_NS"));
    if (getenv("YIELDS"))
        yields = atoi(getenv("YIELDS"));
    int mix = !strncmp(mode, "mix", 3);
    if (mix && pipe(pipe_fds) != 0)
        return 1;
    if (!strcmp(mode, "pipe")) {
        if (pipe(pipe_fds) != 0)
            return 1;
    } else {
        int fd = open("/dev/shm/wake_latency.tmp", O_RDWR | O_CREAT | O_TRUNC, 0600);
        if (fd < 0 || ftruncate(fd, sizeof *sh) != 0)
            return 1;
        sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        unlink("/dev/shm/wake_latency.tmp");
        ops.send = mix ? mix_send : fx_send;
        ops.recv = mix ? mix_recv : fx_recv;
        timeout_on = strcmp(mode, "futex-nt") != 0 && strcmp(mode, "mix-nt") != 0;
    }
    if (latency_run(&ops, SIZE, n, gap, "/tmp/wake_latency.bin") != 0)
        return 1;
    FILE *f = fopen("/tmp/wake_latency.bin", "rb");
    uint64_t *v = malloc(n * 8);
    if (!f || fread(v, 8, n, f) != n)
        return 1;
    fclose(f);
    if (mix) {
        /* After the warm-up, even records (the pipe's) and odd ones (the futex's) apart. */
        uint64_t *half[2] = { malloc(n * 8), malloc(n * 8) };
        unsigned long long count[2] = { 0, 0 };
        if (!half[0] || !half[1])
            return 1;
        for (unsigned long long i = n / 50; i < n; i++)
            half[i % 2][count[i % 2]++] = v[i];
        for (int h = 0; h < 2; h++) {
            qsort(half[h], count[h], 8, cmp);
            printf("%-9s gap %u us, %s: p50 %.2f us, p99 %.2f us\n", mode, gap, h ? "futex" : "pipe ",
                   half[h][count[h] / 2] / 1e3, half[h][count[h] * 99 / 100] / 1e3);
        }
        return 0;
    }
    qsort(v + n / 50, n - n / 50, 8, cmp);
    uint64_t *w = v + n / 50;
    unsigned long long m = n - n / 50;
    printf("%-9s gap %u us spin %ld ns, %d yields: p50 %.2f us, p99 %.2f us\n", mode, gap, spin_ns, yields,
           w[m / 2] / 1e3, w[m * 99 / 100] / 1e3);
    return 0;
}
