/*
 * latency.h: the harness of the latency benchmark, shared by latency.c
 * (tvmq through tvm.h, and a pipe) and boost_mq.cpp (Boost.Interprocess).
 *
 * One producer process sends a record every `gap_us` microseconds, stamped
 * with CLOCK_MONOTONIC just before the send; one consumer process, forked
 * from it, receives with a blocking call and notes now - stamp. The latencies
 * (nanoseconds, uint64, one per record, in order) are written to a file that
 * `tvmq bench` turns into percentiles with an HDR histogram.
 *
 * The producer paces itself with an absolute clock: it sleeps until 100 us
 * before each send when the gap leaves time for it, then spins, so that a gap
 * of 10 us is kept too. A late send is not made up for (no bursts).
 *
 * The idle test forks a consumer that blocks on the empty queue for
 * `seconds`, reads the CPU time it used from /proc, then releases it.
 */
#ifndef TVMQ_LATENCY_H
#define TVMQ_LATENCY_H

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* One side of a transport, opened in its own process after the fork. */
typedef struct latency_ops {
    /* Opens the producer's (1) or the consumer's (0) side; returns a context or NULL. */
    void *(*open)(int producer);
    /* Sends `size` bytes; 0 on success. */
    int (*send)(void *ctx, const char *rec, size_t size);
    /* Receives one record of up to `size` bytes, waiting as long as it takes; 0 on success. */
    int (*recv)(void *ctx, char *rec, size_t size);
} latency_ops;

static inline uint64_t latency_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void latency_wait_until(uint64_t t)
{
    uint64_t now = latency_now_ns();
    if (t > now + 200000) {
        uint64_t wake = t - 100000;
        struct timespec ts = { (time_t)(wake / 1000000000ull), (long)(wake % 1000000000ull) };
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
        }
    }
    while (latency_now_ns() < t) {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
    }
}

/* Runs the benchmark; returns 0, or 1 after a message on stderr. */
static inline int latency_run(const latency_ops *ops, size_t size, unsigned long long records,
                              unsigned gap_us, const char *out_path)
{
    if (size < sizeof(uint64_t)) {
        fprintf(stderr, "latency: records of at least 8 bytes\n");
        return 1;
    }
    /* The consumer's results, shared with the parent. */
    size_t bytes = records * sizeof(uint64_t) + sizeof(uint64_t);
    uint64_t *shared = (uint64_t *)mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) {
        perror("latency: mmap");
        return 1;
    }
    volatile uint64_t *ready = &shared[records];
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        perror("latency: fork");
        return 1;
    }
    if (pid == 0) {
        char *rec = (char *)calloc(1, size);
        void *ctx = ops->open(0);
        if (!ctx || !rec)
            _exit(3);
        __atomic_store_n(ready, 1, __ATOMIC_SEQ_CST);
        for (unsigned long long i = 0; i < records; i++) {
            if (ops->recv(ctx, rec, size) != 0)
                _exit(4);
            uint64_t now = latency_now_ns(), stamp;
            memcpy(&stamp, rec, sizeof stamp);
            shared[i] = now - stamp;
        }
        _exit(0);
    }
    char *rec = (char *)calloc(1, size);
    void *ctx = ops->open(1);
    if (!ctx || !rec) {
        kill(pid, SIGKILL);
        fprintf(stderr, "latency: cannot open the producer's side\n");
        return 1;
    }
    while (!__atomic_load_n(ready, __ATOMIC_SEQ_CST))
        usleep(100);
    usleep(20000); /* let the consumer reach its blocking call */
    uint64_t next = latency_now_ns();
    for (unsigned long long i = 0; i < records; i++) {
        next += (uint64_t)gap_us * 1000u;
        latency_wait_until(next);
        uint64_t stamp = latency_now_ns();
        memcpy(rec, &stamp, sizeof stamp);
        if (ops->send(ctx, rec, size) != 0) {
            kill(pid, SIGKILL);
            fprintf(stderr, "latency: send %llu failed\n", i);
            return 1;
        }
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "latency: the consumer failed (status %d)\n", status);
        return 1;
    }
    FILE *f = fopen(out_path, "wb");
    if (!f || fwrite(shared, sizeof(uint64_t), records, f) != records || fclose(f) != 0) {
        fprintf(stderr, "latency: cannot write %s\n", out_path);
        return 1;
    }
    printf("ok records=%llu\n", records);
    return 0;
}

/* CPU time (user + system) of process `pid`, in seconds, from /proc. */
static inline double latency_cpu_seconds(pid_t pid)
{
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    unsigned long utime = 0, stime = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime) != 2)
        return -1;
    return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

/* The idle test: prints "ok cpu_pct=<percent of one CPU>". */
static inline int latency_idle(const latency_ops *ops, size_t size, unsigned seconds)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        char *rec = (char *)calloc(1, size);
        void *ctx = ops->open(0);
        if (!ctx || !rec)
            _exit(3);
        _exit(ops->recv(ctx, rec, size) == 0 ? 0 : 4);
    }
    char *rec = (char *)calloc(1, size);
    void *ctx = ops->open(1);
    usleep(200000); /* the consumer is in its blocking call (and past its spinning) */
    double before = latency_cpu_seconds(pid);
    sleep(seconds);
    double after = latency_cpu_seconds(pid);
    int ok = ctx && rec && ops->send(ctx, rec, size) == 0;
    int status = 0;
    waitpid(pid, &status, 0);
    if (!ok || before < 0 || after < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "latency: idle test failed (status %d)\n", status);
        return 1;
    }
    printf("ok cpu_pct=%.2f\n", 100.0 * (after - before) / seconds);
    return 0;
}

#endif
