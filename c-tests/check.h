/*
 * check.h: the tiny assertion helper and shared utilities of the tvmq C tests.
 *
 * A test program is a list of named test functions (see TEST_MAIN). run.sh
 * runs each test in its own process, with its own fresh $TVMDBD, so a test
 * starts with no queue at all and may use any queue id.
 *
 * Checks never stop the test on failure (so one run shows every broken
 * value); REQUIRE_* stop it (exit 1) when going on would make no sense.
 * Every failure prints file:line, the expression and the values.
 */
#ifndef TVMQ_TEST_CHECK_H
#define TVMQ_TEST_CHECK_H

#include "tvm.h"
#include "codes.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>

/* Helpers are static and not all used by every program: no warning for those. */
#define TEST_HELPER static __attribute__((unused))

/* ---- Failure accounting ------------------------------------------------- */

/* Failed checks in this process (atomic: threads check too). */
static int g_failures;

TEST_HELPER void fail_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

TEST_HELPER void fail_at(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    char msg[1024];

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    __atomic_add_fetch(&g_failures, 1, __ATOMIC_SEQ_CST);
    /* One write per failure so lines of different threads do not mix. */
    fprintf(stderr, "%s:%d: check failed: %s\n", file, line, msg);
    fflush(stderr);
}

/* Name of an error code ("TBL_NOT_FOUND"), or "?" outside 0..102. */
TEST_HELPER const char *code_name(long code)
{
#define TVMQ_NAME(c) #c,
    static const char *names[TVM_CODE_COUNT] = { TVM_CODES(TVMQ_NAME) };
#undef TVMQ_NAME
    return (code >= 0 && code < TVM_CODE_COUNT) ? names[code] : "?";
}

/* Children that must not outlive a failed test (killed at exit). */
static pid_t g_children[16];
static int g_nchildren;

TEST_HELPER void kill_children(void)
{
    for (int i = 0; i < g_nchildren; i++)
        if (g_children[i] > 0)
            kill(g_children[i], SIGKILL);
}

TEST_HELPER void remember_child(pid_t pid)
{
    if (g_nchildren < (int)(sizeof(g_children) / sizeof(g_children[0])))
        g_children[g_nchildren++] = pid;
}

TEST_HELPER void forget_child(pid_t pid)
{
    for (int i = 0; i < g_nchildren; i++)
        if (g_children[i] == pid)
            g_children[i] = 0;
}

/* ---- Checks -------------------------------------------------------------- */

#define CHECK(cond)                                                           \
    do {                                                                      \
        if (!(cond))                                                          \
            fail_at(__FILE__, __LINE__, "%s", #cond);                         \
    } while (0)

/* Signed comparison (codes, return values, small counts). */
#define CHECK_EQ(a, b)                                                        \
    do {                                                                      \
        long long a_ = (long long)(a), b_ = (long long)(b);                   \
        if (a_ != b_)                                                         \
            fail_at(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b,     \
                    a_, b_);                                                  \
    } while (0)

/* Unsigned comparison (sizes, counts, times). */
#define CHECK_EQU(a, b)                                                       \
    do {                                                                      \
        unsigned long long a_ = (unsigned long long)(a);                      \
        unsigned long long b_ = (unsigned long long)(b);                      \
        if (a_ != b_)                                                         \
            fail_at(__FILE__, __LINE__, "%s == %s: %llu != %llu", #a, #b,     \
                    a_, b_);                                                  \
    } while (0)

/* lo <= v <= hi (timings). */
#define CHECK_RANGE(v, lo, hi)                                                \
    do {                                                                      \
        long long v_ = (long long)(v);                                        \
        if (v_ < (long long)(lo) || v_ > (long long)(hi))                     \
            fail_at(__FILE__, __LINE__, "%s = %lld, expected %lld..%lld", #v, \
                    v_, (long long)(lo), (long long)(hi));                    \
    } while (0)

#define CHECK_STR(a, b)                                                       \
    do {                                                                      \
        const char *a_ = (a), *b_ = (b);                                      \
        if (!a_ || !b_ || strcmp(a_, b_) != 0)                                \
            fail_at(__FILE__, __LINE__, "%s == %s: \"%s\" != \"%s\"", #a, #b, \
                    a_ ? a_ : "(null)", b_ ? b_ : "(null)");                  \
    } while (0)

#define CHECK_MEM(a, b, n)                                                    \
    do {                                                                      \
        if (memcmp((a), (b), (n)) != 0)                                       \
            fail_at(__FILE__, __LINE__, "memcmp(%s, %s, %s) != 0", #a, #b,    \
                    #n);                                                      \
    } while (0)

/*
 * A library call on handle h must succeed: RC_SUCC, m_lErrno 0 and
 * lGetTErrno() 0. On failure the code, its name and message are printed.
 */
#define CHECK_SUCC(call, h) check_succ_((call), (h), #call, __FILE__, __LINE__)

TEST_HELPER int check_succ_(long rc, SATvm *h, const char *what, const char *file, int line)
{
    long terr = lGetTErrno();
    if (rc == RC_SUCC && h->m_lErrno == 0 && terr == 0)
        return 1;
    fail_at(file, line, "%s: rc %ld (want RC_SUCC), m_lErrno %u %s (%s), lGetTErrno %ld",
            what, rc, h->m_lErrno, code_name(h->m_lErrno), sGetTError(h->m_lErrno), terr);
    return 0;
}

/*
 * A library call on handle h must fail with `code`: RC_FAIL, m_lErrno ==
 * code and lGetTErrno() == code (the thread's copy of the same error).
 */
#define CHECK_FAIL(call, h, code) \
    check_fail_((call), (h), (code), #call, __FILE__, __LINE__)

TEST_HELPER int check_fail_(long rc, SATvm *h, long code, const char *what, const char *file,
                       int line)
{
    long terr = lGetTErrno();
    if (rc == RC_FAIL && (long)h->m_lErrno == code && terr == code)
        return 1;
    fail_at(file, line, "%s: rc %ld (want RC_FAIL), m_lErrno %u %s, lGetTErrno %ld %s, want %ld %s",
            what, rc, h->m_lErrno, code_name(h->m_lErrno), terr, code_name(terr), code,
            code_name(code));
    return 0;
}

/* A call without a usable handle (NULL) must fail with lGetTErrno() == code. */
#define CHECK_FAIL_NOH(call, code)                                            \
    do {                                                                      \
        long rc_ = (call), e_ = lGetTErrno();                                 \
        if (rc_ != RC_FAIL || e_ != (long)(code))                             \
            fail_at(__FILE__, __LINE__,                                       \
                    "%s: rc %ld (want RC_FAIL), lGetTErrno %ld %s, want %s",  \
                    #call, rc_, e_, code_name(e_), #code);                    \
    } while (0)

/* Stop the test now (after printing why) when cond is false. */
#define REQUIRE(cond)                                                         \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fail_at(__FILE__, __LINE__, "required: %s", #cond);               \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

#define REQUIRE_SUCC(call, h)                                                 \
    do {                                                                      \
        if (!CHECK_SUCC(call, h))                                             \
            exit(1);                                                          \
    } while (0)

/* ---- Utilities ----------------------------------------------------------- */

/* The process-wide handle, typed. */
TEST_HELPER SATvm *G(void) { return (SATvm *)pGetSATvm(); }

/* Milliseconds of a monotonic clock. */
TEST_HELPER long long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* CPU time used by this whole process (all threads), in microseconds. */
TEST_HELPER long long process_cpu_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

TEST_HELPER void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* The queue directory every test works in (run.sh sets it). */
TEST_HELPER const char *queue_dir(void)
{
    const char *d = getenv("TVMDBD");
    REQUIRE(d != NULL && *d != '\0');
    return d;
}

/* Creates queue t with lCircleQueue on the global handle, or stops the test. */
TEST_HELPER void make_queue(TABLE t, size_t rows, size_t size)
{
    SATvm *p = G();
    REQUIRE_SUCC(lCircleQueue(p, t, rows, size, NULL, NULL), p);
}

/* Creates queue t of `rows` records of `size` bytes with the options `opts`
 * of `$TVMQ create` (e.g. "--lease-ms 30000"), or stops the test. */
TEST_HELPER void make_queue_cli(TABLE t, size_t rows, size_t size, const char *opts)
{
    const char *tvmq = getenv("TVMQ");
    char cmd[4096];
    REQUIRE(tvmq != NULL);
    snprintf(cmd, sizeof(cmd), "'%s' create %u --rows %zu --size %zu %s >/dev/null", tvmq, t, rows, size, opts);
    REQUIRE(system(cmd) == 0);
}

/*
 * Runs `$TVMQ stat t` and copies the value of the line whose first word(s)
 * equal `key` (e.g. "depth", "record size") into out. Returns 1 if found.
 * Lines look like "depth            0": key, spaces, value.
 */
TEST_HELPER int stat_value(TABLE t, const char *key, char *out, size_t outlen)
{
    const char *tvmq = getenv("TVMQ");
    char cmd[4096], line[1024];
    int found = 0;

    REQUIRE(tvmq != NULL);
    snprintf(cmd, sizeof(cmd), "'%s' stat %u 2>&1", tvmq, t);
    FILE *f = popen(cmd, "r");
    REQUIRE(f != NULL);
    size_t klen = strlen(key);
    while (fgets(line, sizeof(line), f)) {
        if (!found && strncmp(line, key, klen) == 0 && line[klen] == ' ') {
            char *v = line + klen;
            while (*v == ' ')
                v++;
            v[strcspn(v, "\r\n")] = '\0';
            snprintf(out, outlen, "%s", v);
            found = 1;
        }
    }
    pclose(f);
    return found;
}

/* A numeric `tvmq stat` value (e.g. "depth"), or -1 when missing. */
TEST_HELPER long long stat_num(TABLE t, const char *key)
{
    char v[256];
    if (!stat_value(t, key, v, sizeof(v)))
        return -1;
    return strtoll(v, NULL, 10);
}

/* Queue depth as `tvmq stat` reports it. */
TEST_HELPER long long depth(TABLE t) { return stat_num(t, "depth"); }

/* Number of entries in the queue directory (files, symlinks...). */
TEST_HELPER int dir_entries(void)
{
    DIR *d = opendir(queue_dir());
    struct dirent *e;
    int n = 0;
    if (!d)
        return -1;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            n++;
    closedir(d);
    return n;
}

/* ---- Test registry ------------------------------------------------------- */

typedef struct {
    const char *name;
    void (*fn)(void);
} test_case;

/*
 * main() of a test program: `prog --list` prints the test names, `prog NAME`
 * runs one test and exits 0 only if every check passed.
 */
TEST_HELPER int test_main(int argc, char **argv, const test_case *tests, size_t n)
{
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (size_t i = 0; i < n; i++)
            printf("%s\n", tests[i].name);
        return 0;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: %s --list | TEST\n", argv[0]);
        return 2;
    }
    atexit(kill_children);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(argv[1], tests[i].name) == 0) {
            tests[i].fn();
            return __atomic_load_n(&g_failures, __ATOMIC_SEQ_CST) ? 1 : 0;
        }
    }
    fprintf(stderr, "no test named %s\n", argv[1]);
    return 2;
}

#define TEST_MAIN(...)                                                        \
    int main(int argc, char **argv)                                           \
    {                                                                         \
        static const test_case tests_[] = { __VA_ARGS__ };                    \
        return test_main(argc, argv, tests_,                                  \
                         sizeof(tests_) / sizeof(tests_[0]));                 \
    }
#define T(fn) { #fn, fn }

/* The record most tests use: 64 bytes, a number and some text. */
typedef struct {
    long n;
    char text[56];
} rec64;

/* Binds r to handle p for queue t (queueinit zeroes r) and sets r.n. */
TEST_HELPER void bind_rec(SATvm *p, rec64 *r, TABLE t, long n)
{
    queueinit(p, *r, t);
    r->n = n;
    snprintf(r->text, sizeof(r->text), "record %ld", n);
}

/* Pushes record number n into queue t through handle p; 1 if it went in. */
TEST_HELPER int push_n(SATvm *p, TABLE t, long n)
{
    rec64 r;
    bind_rec(p, &r, t, n);
    return CHECK_SUCC(lPush(p), p);
}

/* Pops one record of queue t (QUE_NOWAIT) and checks it is number n. */
TEST_HELPER void expect_pop_n(SATvm *p, TABLE t, long n, const char *file, int line)
{
    rec64 out;
    memset(&out, 0xee, sizeof(out));
    queuevoid(p, out, sizeof(out), t);
    long rc = lPop(p, &out, QUE_NOWAIT);
    if (rc != RC_SUCC || out.n != n)
        fail_at(file, line, "pop of queue %u: rc %ld (%s), record %ld, want record %ld", t, rc,
                code_name(p->m_lErrno), rc == RC_SUCC ? out.n : -1L, n);
}
#define EXPECT_POP(p, t, n) expect_pop_n((p), (t), (n), __FILE__, __LINE__)

#endif /* TVMQ_TEST_CHECK_H */
