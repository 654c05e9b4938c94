/*
 * test_wake.c: "no system call unless a consumer sleeps" (tvm.h, lPush; the
 * spec lists a futex wake on every push as an STVM defect not to copy).
 *
 * This program defines its own syscall(): libtvm.so calls the C library's
 * syscall() for its futex operations, and the program's definition takes
 * precedence (symbol interposition), so it counts the FUTEX_WAKE calls and
 * forwards every call to the real syscall(). A positive control (a push
 * while a consumer sleeps must make a wake call) shows the counter really
 * sees the library's futex calls; without it the zero counts would mean
 * nothing.
 *
 * Run by run.sh as `test_wake NAME` in a fresh $TVMDBD (see check.h).
 */
#define _GNU_SOURCE /* RTLD_NEXT */
#include "check.h"

#include <dlfcn.h>
#include <linux/futex.h>
#include <sys/syscall.h>

/* FUTEX_WAKE calls made since the last reset (any thread). */
static long g_futex_wakes;

long syscall(long number, ...)
{
    static long (*real)(long, ...);
    va_list ap;
    long a[6];

    /* Every Linux system call takes at most 6 word-sized arguments. */
    va_start(ap, number);
    for (int i = 0; i < 6; i++)
        a[i] = va_arg(ap, long);
    va_end(ap);
    if (number == SYS_futex && (a[1] & FUTEX_CMD_MASK) == FUTEX_WAKE)
        __atomic_add_fetch(&g_futex_wakes, 1, __ATOMIC_SEQ_CST);
    if (!real)
        real = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
    return real(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}

static long wakes(void) { return __atomic_load_n(&g_futex_wakes, __ATOMIC_SEQ_CST); }
static void reset_wakes(void) { __atomic_store_n(&g_futex_wakes, 0, __ATOMIC_SEQ_CST); }

struct sleeper {
    TABLE t;
    long rc;
    long value;
};

static void *sleeper_thread(void *v)
{
    struct sleeper *s = (struct sleeper *)v;
    SATvm *c = (SATvm *)pCloneSATvm();
    queuevoid(c, s->value, sizeof(s->value), s->t);
    s->rc = lPop(c, &s->value, QUE_NORMAL);
    vCloneFree(c);
    return NULL;
}

/* 100000 pushes (lPush), 1000 more (lPushs) and 101000 pops with nobody
 * asleep: no futex wake at all (a handful tolerated for the library's own
 * bookkeeping); one push to a sleeping consumer: at least one wake. */
static void push_pop_without_sleepers_make_no_wake(void)
{
    SATvm *p = G();
    const TABLE t = 1;
    const long n = 100000;
    long v = 0;

    make_queue(t, 200000, sizeof(long));
    CHECK_SUCC(lAttchTable(p, t), p);
    queuevoid(p, v, sizeof(v), t);
    CHECK_SUCC(lPush(p), p); /* first use out of the way */
    CHECK_SUCC(lPop(p, &v, QUE_NOWAIT), p);

    reset_wakes();
    for (long i = 0; i < n; i++) {
        v = i;
        if (lPush(p) != RC_SUCC) {
            fail_at(__FILE__, __LINE__, "push %ld: %s", i, code_name(p->m_lErrno));
            break;
        }
    }
    long after_push = wakes();
    static long many[1000];
    void *base = many;
    size_t cnt = 1000;
    queuenull(p, sizeof(long), t);
    CHECK_SUCC(lPushs(p, &cnt, &base), p);
    long after_pushs = wakes();
    queuevoid(p, v, sizeof(v), t);
    for (long i = 0; i < n + 1000; i++)
        if (lPop(p, &v, QUE_NOWAIT) != RC_SUCC) {
            fail_at(__FILE__, __LINE__, "pop %ld: %s", i, code_name(p->m_lErrno));
            break;
        }
    long after_pop = wakes();
    CHECK_RANGE(after_push, 0, 5);
    CHECK_RANGE(after_pushs - after_push, 0, 5);
    CHECK_RANGE(after_pop - after_pushs, 0, 5);

    /* Positive control: a consumer asleep in lPop must be woken by a push. */
    struct sleeper s = { t, 99, -1 };
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, sleeper_thread, &s) == 0);
    long long end = mono_ms() + 3000;
    while (stat_num(t, "waiters") < 1 && mono_ms() < end)
        sleep_ms(10);
    CHECK_EQ(stat_num(t, "waiters"), 1);
    reset_wakes();
    v = 4242;
    queuevoid(p, v, sizeof(v), t);
    CHECK_SUCC(lPush(p), p);
    pthread_join(th, NULL);
    CHECK_EQ(s.rc, RC_SUCC);
    CHECK_EQ(s.value, 4242);
    if (wakes() < 1)
        fail_at(__FILE__, __LINE__,
                "no FUTEX_WAKE seen for a push to a sleeping consumer: this test cannot observe "
                "the library's futex calls, its zero counts above prove nothing");
}

TEST_MAIN(T(push_pop_without_sleepers_make_no_wake))
