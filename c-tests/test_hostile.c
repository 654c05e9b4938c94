/*
 * test_hostile.c: every function of tvm.h called with NULL and garbage
 * arguments wherever a C caller can pass them (never wild non-NULL pointers,
 * which no C API can survive), and queue files corrupted while attached.
 *
 * Each call must return the code tvm.h documents for it, never crash, never
 * hang; and the process must still work normally afterwards: every test ends
 * with a push/pop round trip on a fresh queue (final_round_trip).
 *
 * The corruption tests write random bytes into the control block and the
 * slot headers of a queue this process has attached (pwrite on the file,
 * which the shared mapping sees at once), with TVMQ_UNBLOCK_TIMEOUT_MS=300,
 * then push and pop with QUE_NOWAIT and lPopup with secs 0/1: each call must
 * succeed or fail with a code that says "corrupted / full / empty / robbed /
 * timed out / dropped", within a few seconds. Every corruption runs in a
 * child process under alarm(), so that a hang or a crash is reported with
 * what caused it instead of stopping the suite. The random corruptions use a
 * fixed seed (HOSTILE_SEED overrides it, HOSTILE_ROUNDS the count,
 * HOSTILE_FIRST the first round: HOSTILE_FIRST=98 HOSTILE_ROUNDS=99 replays
 * round 98 alone).
 *
 * Run by run.sh as `test_hostile NAME` in a fresh, empty $TVMDBD, like
 * test_api. `test_hostile --list` lists the tests.
 */
#include "check.h"

#include <fcntl.h>

/* Allowed failure codes given as a list: "rc is RC_FAIL with one of these". */
#define CODES(...) ((const long[]){ __VA_ARGS__, -999 })

/*
 * A call on handle h must fail (RC_FAIL) with one of `codes` (a -999
 * terminated list), m_lErrno and lGetTErrno() agreeing. For behaviour that
 * tvm.h describes only by a set of codes.
 */
#define CHECK_FAIL_IN(call, h, codes) \
    check_fail_in_((call), (h), (codes), #call, __FILE__, __LINE__)

static int check_fail_in_(long rc, SATvm *h, const long *codes, const char *what,
                          const char *file, int line)
{
    long terr = lGetTErrno();
    if (rc == RC_FAIL && (long)h->m_lErrno == terr)
        for (const long *c = codes; *c != -999; c++)
            if (terr == *c)
                return 1;
    fail_at(file, line, "%s: rc %ld, m_lErrno %u %s, lGetTErrno %ld %s: not an allowed failure",
            what, rc, h->m_lErrno, code_name(h->m_lErrno), terr, code_name(terr));
    return 0;
}

/* The path of queue t's file ($TVMDBD/queue-<t>.tvmq, README). */
static void queue_path(TABLE t, char *path, size_t len)
{
    snprintf(path, len, "%s/queue-%u.tvmq", queue_dir(), t);
}

static int file_exists(TABLE t)
{
    char path[1024];
    struct stat st;
    queue_path(t, path, sizeof(path));
    return lstat(path, &st) == 0;
}

/*
 * The process still works normally: a new queue, a push, a pop that gives
 * the same bytes back, through the global handle and a clone, then a drop.
 * Every test ends with it.
 */
static void final_round_trip(void)
{
    const TABLE t = 4000000007u;
    SATvm *p = G();
    rec64 in, out;

    vSetTErrno(0);
    REQUIRE_SUCC(lCircleQueue(p, t, 2, sizeof(rec64), (char *)"final", NULL), p);
    bind_rec(p, &in, t, 424242);
    CHECK_SUCC(lPush(p), p);
    CHECK_EQU(p->m_lEffect, 1);
    SATvm *c = (SATvm *)pCloneSATvm();
    REQUIRE(c != NULL);
    memset(&out, 0, sizeof(out));
    queuevoid(c, out, sizeof(out), t);
    CHECK_SUCC(lPop(c, &out, QUE_NOWAIT), c);
    CHECK_MEM(&out, &in, sizeof(in));
    CHECK_FAIL(lPop(c, &out, QUE_NOWAIT), c, NO_DATA_FOUND);
    vCloneFree(c);
    CHECK_SUCC(lDropTable(p, t), p);
    CHECK(!file_exists(t));
}

/* ======================================================================== */
/* NULL handle                                                              */
/* ======================================================================== */

static CREATE def_small(TABLE t)
{
    (void)t;
    QUEUE(31, "", rec64)
    FIELD(rec64, n, FIELD_LONG)
    FINISH
}

/* Every function taking SATvm *, given NULL: RC_FAIL and lGetTErrno() ==
 * CONDIT_IS_NIL (void functions: no crash, and the same code), whatever
 * the other arguments, good or bad; and nothing happened to any queue. */
static void null_handle(void)
{
    const TABLE t = 30;
    rec64 r;
    size_t n = 1, got = 77;
    void *recs = &r, *out = NULL, *nullrecs = NULL;

    memset(&r, 0, sizeof(r));
    make_queue(t, 4, sizeof(rec64));
    CHECK(push_n(G(), t, 1));

#define NOH(call)                                                             \
    do {                                                                      \
        vSetTErrno(12345);                                                    \
        CHECK_FAIL_NOH(call, CONDIT_IS_NIL);                                  \
    } while (0)
    static const TABLE ids[] = { 0, 1, t, 31, UINT_MAX };
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        TABLE id = ids[i];
        NOH(lAttchTable(NULL, id));
        NOH(lInitSATvm(NULL, id));
        NOH(lDropTable(NULL, id));
        NOH(lCircleQueue(NULL, id, 4, 8, NULL, NULL));
        NOH(lCircleQueue(NULL, id, 0, 0, NULL, NULL));
        NOH(lCircleQueue(NULL, id, SIZE_MAX, SIZE_MAX, (char *)"n", (char *)"p"));
        NOH(lTableQueue(NULL, id, 4, NULL));
        NOH(lTableQueue(NULL, id, 4, def_small));
        NOH(lTableQueue(NULL, id, 0, def_small));
    }
    NOH(lPush(NULL));
    NOH(lPop(NULL, &r, QUE_NOWAIT));
    NOH(lPop(NULL, &r, QUE_NORMAL)); /* must not block */
    NOH(lPop(NULL, NULL, QUE_NOWAIT));
    NOH(lPop(NULL, &r, 7));
    NOH(lPop(NULL, &r, UINT_MAX));
    NOH(lPopup(NULL, 1, 0, &got, &out));
    NOH(lPopup(NULL, 1, 1, &got, &out)); /* must not wait */
    NOH(lPopup(NULL, 0, -1, NULL, NULL));
    NOH(lPopup(NULL, SIZE_MAX, LONG_MAX, &got, &out));
    NOH(lPushs(NULL, &n, &recs));
    NOH(lPushs(NULL, NULL, NULL));
    NOH(lPushs(NULL, &n, &nullrecs));
    n = SIZE_MAX;
    NOH(lPushs(NULL, &n, &recs));
#undef NOH
    CHECK(out == NULL);

    /* void functions. */
    vSetTErrno(0);
    vHoldConnect(NULL);
    CHECK_EQ(lGetTErrno(), CONDIT_IS_NIL);
    vSetTErrno(0);
    vHoldRelease(NULL);
    CHECK_EQ(lGetTErrno(), CONDIT_IS_NIL);
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        vSetTErrno(0);
        vTblDisconnect(NULL, ids[i]);
        CHECK_EQ(lGetTErrno(), CONDIT_IS_NIL);
    }
    vCloneFree(NULL);

    /* Nothing was created or dropped: only queue t, with its record. */
    CHECK_EQ(dir_entries(), 1);
    CHECK_EQ(depth(t), 1);
    EXPECT_POP(G(), t, 1);
    final_round_trip();
}

/* ======================================================================== */
/* lPush                                                                    */
/* ======================================================================== */

/* lPush with odd buffers, sizes and queue ids. */
static void push_odd(void)
{
    SATvm *p = G();
    const TABLE t = 40;
    rec64 r;
    unsigned char buf[256];

    make_queue(t, 4, sizeof(rec64));

    /* pstVoid NULL with lSize set (0, 1, the record size, huge). */
    static const size_t sizes[] = { 0, 1, sizeof(rec64), sizeof(rec64) + 1, SIZE_MAX };
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        p->pstVoid = NULL;
        p->lSize = sizes[i];
        p->tblName = t;
        CHECK_FAIL(lPush(p), p, CONDIT_IS_NIL);
    }
    /* A buffer with lSize 0. */
    queuevoid(p, r, 0, t);
    CHECK_FAIL(lPush(p), p, CONDIT_IS_NIL);
    /* Larger than the record: RECD_TOO_LONG, nothing read. */
    memset(buf, 'x', sizeof(buf));
    queuevoid(p, buf, sizeof(rec64) + 1, t);
    CHECK_FAIL(lPush(p), p, RECD_TOO_LONG);
    queuevoid(p, buf, SIZE_MAX, t);
    CHECK_FAIL(lPush(p), p, RECD_TOO_LONG);
    queuevoid(p, buf, SIZE_MAX / 2 + 1, t);
    CHECK_FAIL(lPush(p), p, RECD_TOO_LONG);
    queuevoid(p, buf, (size_t)UINT_MAX + 1, t);
    CHECK_FAIL(lPush(p), p, RECD_TOO_LONG);
    CHECK_EQ(depth(t), 0);

    /* Queue ids that do not exist. */
    static const TABLE missing[] = { 0, 1, 41, 65535, UINT_MAX - 1, UINT_MAX };
    for (size_t i = 0; i < sizeof(missing) / sizeof(missing[0]); i++) {
        bind_rec(p, &r, missing[i], 1);
        CHECK_FAIL(lPush(p), p, TBL_NOT_FOUND);
        CHECK_EQU(p->m_lEffect, 0);
    }
    CHECK_EQ(dir_entries(), 1); /* pushing never creates a queue */

    /* lSize 1: a 1-byte record, which comes out zero-filled. */
    buf[0] = 0x5a;
    queuevoid(p, buf, 1, t);
    CHECK_SUCC(lPush(p), p);
    CHECK_EQU(p->m_lEffect, 1);
    unsigned char out[sizeof(rec64) + 32];
    memset(out, 0xee, sizeof(out));
    queuevoid(p, out, sizeof(rec64), t);
    CHECK_SUCC(lPop(p, out, QUE_NOWAIT), p);
    CHECK_EQ(out[0], 0x5a);
    for (size_t i = 1; i < sizeof(rec64); i++)
        if (out[i] != 0) {
            fail_at(__FILE__, __LINE__, "1-byte record: byte %zu = 0x%02x, want 0", i, out[i]);
            break;
        }
    for (size_t i = sizeof(rec64); i < sizeof(out); i++)
        if (out[i] != 0xee) {
            fail_at(__FILE__, __LINE__, "lPop wrote byte %zu, past the record size", i);
            break;
        }

    /* Full: DATA_SPC_FULL at once, as often as asked. */
    for (long i = 0; i < 4; i++)
        CHECK(push_n(p, t, i));
    bind_rec(p, &r, t, 9);
    for (int i = 0; i < 100; i++)
        if (!CHECK_FAIL(lPush(p), p, DATA_SPC_FULL))
            break;
    CHECK_EQ(depth(t), 4);
    for (long i = 0; i < 4; i++)
        EXPECT_POP(p, t, i);
    final_round_trip();
}

/* ======================================================================== */
/* lPop                                                                     */
/* ======================================================================== */

/* lPop with odd buffers, sizes, wait flags and ids. */
static void pop_odd(void)
{
    SATvm *p = G();
    const TABLE t = 42;
    unsigned char buf[sizeof(rec64) + 64];

    make_queue(t, 4, sizeof(rec64));
    CHECK(push_n(p, t, 1));

    /* NULL out, with every wait flag and size. */
    static const Uenum flags[] = { QUE_NORMAL, QUE_NOWAIT, 2, 7, UINT_MAX };
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
        queuenull(p, sizeof(rec64), t);
        CHECK_FAIL(lPop(p, NULL, flags[i]), p, CONDIT_IS_NIL);
        queuenull(p, SIZE_MAX, t);
        CHECK_FAIL(lPop(p, NULL, flags[i]), p, CONDIT_IS_NIL);
    }
    /* Wait flags other than QUE_NORMAL / QUE_NOWAIT: NOT_SUPPT_OPT, nothing
     * taken, nothing written, no blocking. */
    static const Uenum bad_flags[] = { 2, 3, 7, 0x80000000u, UINT_MAX - 1, UINT_MAX };
    for (size_t i = 0; i < sizeof(bad_flags) / sizeof(bad_flags[0]); i++) {
        memset(buf, 0xee, sizeof(buf));
        queuevoid(p, buf, sizeof(rec64), t);
        long long t0 = mono_ms();
        CHECK_FAIL(lPop(p, buf, bad_flags[i]), p, NOT_SUPPT_OPT);
        CHECK_RANGE(mono_ms() - t0, 0, 500);
        CHECK_EQ(buf[0], 0xee);
    }
    CHECK_EQ(depth(t), 1);

    /* lSize 0 and 1 (below the record size): refused, nothing taken, nothing
     * written past lSize. */
    memset(buf, 0xee, sizeof(buf));
    queuevoid(p, buf, 0, t);
    CHECK_FAIL_IN(lPop(p, buf, QUE_NOWAIT), p, CODES(RECD_TOO_LONG, CONDIT_IS_NIL));
    queuevoid(p, buf, 1, t);
    CHECK_FAIL(lPop(p, buf, QUE_NOWAIT), p, RECD_TOO_LONG);
    CHECK_FAIL(lPop(p, buf, QUE_NORMAL), p, RECD_TOO_LONG);
    for (size_t i = 1; i < sizeof(buf); i++)
        if (buf[i] != 0xee) {
            fail_at(__FILE__, __LINE__, "lPop with lSize 1 wrote byte %zu", i);
            break;
        }
    CHECK_EQ(depth(t), 1);

    /* lSize larger than the record (64 more, SIZE_MAX): tvm.h says the record
     * and its zero fill go up to the record size: nothing written after. */
    static const size_t big[] = { sizeof(rec64) + 64, SIZE_MAX, SIZE_MAX / 2 };
    static const long want[] = { 1, 10, 11 }; /* FIFO: record 1 first */
    for (size_t i = 0; i < sizeof(big) / sizeof(big[0]); i++) {
        CHECK(push_n(p, t, 10 + (long)i));
        memset(buf, 0xee, sizeof(buf));
        queuevoid(p, buf, big[i], t);
        CHECK_SUCC(lPop(p, buf, QUE_NOWAIT), p);
        CHECK_EQU(p->m_lEffect, 1);
        CHECK_EQ(((rec64 *)buf)->n, want[i]);
        for (size_t k = sizeof(rec64); k < sizeof(buf); k++)
            if (buf[k] != 0xee) {
                fail_at(__FILE__, __LINE__, "lPop with lSize %zu wrote byte %zu (record size %zu)",
                        big[i], k, sizeof(rec64));
                break;
            }
    }
    EXPECT_POP(p, t, 12);
    CHECK_EQ(depth(t), 0);

    /* Empty: QUE_NOWAIT gives NO_DATA_FOUND at once, every time. */
    queuevoid(p, buf, sizeof(rec64), t);
    for (int i = 0; i < 100; i++)
        if (!CHECK_FAIL(lPop(p, buf, QUE_NOWAIT), p, NO_DATA_FOUND))
            break;

    /* Missing queues: TBL_NOT_FOUND at once, even with QUE_NORMAL. */
    static const TABLE missing[] = { 0, 1, 43, UINT_MAX };
    for (size_t i = 0; i < sizeof(missing) / sizeof(missing[0]); i++) {
        queuevoid(p, buf, sizeof(rec64), missing[i]);
        long long t0 = mono_ms();
        CHECK_FAIL(lPop(p, buf, QUE_NOWAIT), p, TBL_NOT_FOUND);
        CHECK_FAIL(lPop(p, buf, QUE_NORMAL), p, TBL_NOT_FOUND);
        CHECK_RANGE(mono_ms() - t0, 0, 500);
    }
    CHECK_EQ(dir_entries(), 1);
    final_round_trip();
}

/* ======================================================================== */
/* lPopup                                                                   */
/* ======================================================================== */

static void popup_odd(void)
{
    SATvm *p = G();
    const TABLE t = 44;
    size_t n = 99;
    void *out = NULL;
    int dummy;

    make_queue(t, 8, sizeof(rec64));
    for (long i = 1; i <= 3; i++)
        CHECK(push_n(p, t, i));
    queuenull(p, sizeof(rec64), t);

    /* NULL out_n / out, expect 0, negative secs: CONDIT_IS_NIL at once. */
    long long t0 = mono_ms();
    CHECK_FAIL(lPopup(p, 1, 0, NULL, &out), p, CONDIT_IS_NIL);
    CHECK_FAIL(lPopup(p, 1, 0, &n, NULL), p, CONDIT_IS_NIL);
    CHECK_FAIL(lPopup(p, 1, 5, NULL, NULL), p, CONDIT_IS_NIL);
    CHECK_FAIL(lPopup(p, 0, 0, &n, &out), p, CONDIT_IS_NIL);
    CHECK_FAIL(lPopup(p, 0, 1, &n, &out), p, CONDIT_IS_NIL);
    CHECK_FAIL(lPopup(p, 0, LONG_MAX, &n, &out), p, CONDIT_IS_NIL);
    static const time_t negative[] = { -1, -2, -3600, LONG_MIN, LONG_MIN + 1, -(LONG_MAX / 2) };
    for (size_t i = 0; i < sizeof(negative) / sizeof(negative[0]); i++) {
        CHECK_FAIL(lPopup(p, 1, negative[i], &n, &out), p, CONDIT_IS_NIL);
        CHECK_FAIL(lPopup(p, SIZE_MAX, negative[i], &n, &out), p, CONDIT_IS_NIL);
    }
    CHECK_RANGE(mono_ms() - t0, 0, 500);
    CHECK(out == NULL);
    CHECK_EQ(depth(t), 3);

    /* lSize 0 and 1 (below the record size): refused, nothing taken. */
    queuenull(p, 0, t);
    CHECK_FAIL_IN(lPopup(p, 1, 0, &n, &out), p, CODES(RECD_TOO_LONG, CONDIT_IS_NIL));
    queuenull(p, 1, t);
    CHECK_FAIL(lPopup(p, 1, 0, &n, &out), p, RECD_TOO_LONG);
    CHECK_FAIL(lPopup(p, 1, 1, &n, &out), p, RECD_TOO_LONG);
    CHECK(out == NULL);
    CHECK_EQ(depth(t), 3);

    /* lSize so large that the array cannot be allocated: MALLC_MEM_ERR
     * (tvm.h), at once, nothing taken. */
    static const size_t huge[] = { SIZE_MAX, SIZE_MAX / 2, SIZE_MAX / 16, (size_t)1 << 60 };
    for (size_t i = 0; i < sizeof(huge) / sizeof(huge[0]); i++) {
        queuenull(p, huge[i], t);
        out = &dummy;
        t0 = mono_ms();
        if (!CHECK_FAIL(lPopup(p, 1, 0, &n, &out), p, MALLC_MEM_ERR))
            fprintf(stderr, "   (lSize %zu)\n", huge[i]);
        CHECK_FAIL(lPopup(p, 3, 1, &n, &out), p, MALLC_MEM_ERR);
        CHECK_RANGE(mono_ms() - t0, 0, 500);
        CHECK(out == NULL || out == &dummy);
        if (out == &dummy)
            out = NULL;
    }
    CHECK_EQ(depth(t), 3);

    /* expect SIZE_MAX, secs 0: takes the 3 there (no SIZE_MAX-sized array). */
    queuenull(p, sizeof(rec64), t);
    out = NULL;
    CHECK_SUCC(lPopup(p, SIZE_MAX, 0, &n, &out), p);
    CHECK_EQU(n, 3);
    REQUIRE(out != NULL);
    for (size_t i = 0; i < 3; i++)
        CHECK_EQ(((rec64 *)out)[i].n, (long)i + 1);
    TFree(out);

    /* expect SIZE_MAX, secs 1: times out with what there is. */
    CHECK(push_n(p, t, 7));
    queuenull(p, sizeof(rec64), t);
    t0 = mono_ms();
    CHECK_FAIL(lPopup(p, SIZE_MAX, 1, &n, &out), p, MQUE_WAIT_TMO);
    CHECK_RANGE(mono_ms() - t0, 900, 2500);
    CHECK_EQU(n, 1);
    CHECK_EQU(p->m_lEffect, 1);
    REQUIRE(out != NULL);
    CHECK_EQ(((rec64 *)out)->n, 7);
    TFree(out);

    /* Empty, secs 0 and 1: NO_DATA_FOUND, *out NULL, *out_n 0. */
    out = &dummy;
    n = 5;
    CHECK_FAIL(lPopup(p, 1, 0, &n, &out), p, NO_DATA_FOUND);
    CHECK(out == NULL);
    CHECK_EQU(n, 0);
    out = &dummy;
    t0 = mono_ms();
    CHECK_FAIL(lPopup(p, 2, 1, &n, &out), p, NO_DATA_FOUND);
    CHECK_RANGE(mono_ms() - t0, 900, 2500);
    CHECK(out == NULL);

    /* Huge secs, with the records there: at once. */
    for (long i = 1; i <= 2; i++)
        CHECK(push_n(p, t, i));
    queuenull(p, sizeof(rec64), t);
    t0 = mono_ms();
    CHECK_SUCC(lPopup(p, 2, LONG_MAX, &n, &out), p);
    CHECK_RANGE(mono_ms() - t0, 0, 500);
    CHECK_EQU(n, 2);
    REQUIRE(out != NULL);
    CHECK_EQ(((rec64 *)out)[1].n, 2);
    TFree(out);

    /* Missing queues. */
    static const TABLE missing[] = { 0, 1, 45, UINT_MAX };
    for (size_t i = 0; i < sizeof(missing) / sizeof(missing[0]); i++) {
        queuenull(p, sizeof(rec64), missing[i]);
        out = &dummy;
        t0 = mono_ms();
        CHECK_FAIL(lPopup(p, 1, 0, &n, &out), p, TBL_NOT_FOUND);
        CHECK_FAIL(lPopup(p, 4, 1, &n, &out), p, TBL_NOT_FOUND);
        CHECK_RANGE(mono_ms() - t0, 0, 500);
        CHECK(out == NULL || out == &dummy);
    }
    out = NULL;
    CHECK_EQ(dir_entries(), 1);
    final_round_trip();
}

/* ======================================================================== */
/* lPushs                                                                   */
/* ======================================================================== */

static void pushs_odd(void)
{
    SATvm *p = G();
    const TABLE t = 46;
    rec64 recs[4];
    void *base = recs, *nullbase = NULL;
    size_t n;

    for (long i = 0; i < 4; i++) {
        memset(&recs[i], 0, sizeof(recs[i]));
        recs[i].n = i + 1;
    }
    make_queue(t, 4, sizeof(rec64));

    /* NULL n, NULL records, *records NULL, *n 0, lSize 0. */
    queuenull(p, sizeof(rec64), t);
    CHECK_FAIL(lPushs(p, NULL, &base), p, CONDIT_IS_NIL);
    CHECK_FAIL(lPushs(p, NULL, NULL), p, CONDIT_IS_NIL);
    n = 2;
    CHECK_FAIL(lPushs(p, &n, NULL), p, CONDIT_IS_NIL);
    n = 2;
    CHECK_FAIL(lPushs(p, &n, &nullbase), p, CONDIT_IS_NIL);
    n = SIZE_MAX;
    CHECK_FAIL(lPushs(p, &n, &nullbase), p, CONDIT_IS_NIL);
    n = 0;
    CHECK_FAIL(lPushs(p, &n, &base), p, CONDIT_IS_NIL);
    CHECK_EQU(n, 0);
    queuenull(p, 0, t);
    n = 2;
    CHECK_FAIL(lPushs(p, &n, &base), p, CONDIT_IS_NIL);
    n = SIZE_MAX;
    CHECK_FAIL(lPushs(p, &n, &base), p, CONDIT_IS_NIL);
    CHECK_EQ(depth(t), 0);

    /* *n x lSize overflows size_t: an error, not a crash or a read of
     * SIZE_MAX bytes; nothing pushed, *n 0. */
    static const size_t each[] = { sizeof(rec64), 2, 3, 16 };
    static const size_t counts[] = { SIZE_MAX, SIZE_MAX / 2 + 1, SIZE_MAX / 3 + 1, SIZE_MAX / 8 };
    for (size_t i = 0; i < sizeof(each) / sizeof(each[0]); i++) {
        queuenull(p, each[i], t);
        n = counts[i];
        long rc = lPushs(p, &n, &base);
        if (rc != RC_FAIL || p->m_lErrno == 0 || (long)p->m_lErrno != lGetTErrno())
            fail_at(__FILE__, __LINE__, "lPushs %zu records of %zu bytes: rc %ld, m_lErrno %u %s", counts[i],
                    each[i], rc, p->m_lErrno, code_name(p->m_lErrno));
        CHECK(p->m_lErrno == CONDIT_IS_NIL || p->m_lErrno == RECD_TOO_LONG ||
              p->m_lErrno == MQUE_CRTE_BIG);
        CHECK_EQU(n, 0);
        CHECK_EQU(p->m_lEffect, 0);
    }
    CHECK_EQ(depth(t), 0);

    /* lSize larger than the record (huge too): RECD_TOO_LONG, *n 0. */
    static const size_t big[] = { sizeof(rec64) + 1, (size_t)1 << 40, SIZE_MAX };
    for (size_t i = 0; i < sizeof(big) / sizeof(big[0]); i++) {
        queuenull(p, big[i], t);
        n = 1;
        CHECK_FAIL(lPushs(p, &n, &base), p, RECD_TOO_LONG);
        CHECK_EQU(n, 0);
    }
    CHECK_EQ(depth(t), 0);

    /* *n SIZE_MAX of 1-byte records (no overflow): pushes until the queue is
     * full, reading only the records it pushes (4 bytes), DATA_SPC_FULL. */
    char bytes[4] = { 'a', 'b', 'c', 'd' };
    void *bb = bytes;
    queuenull(p, 1, t);
    n = SIZE_MAX;
    CHECK_FAIL(lPushs(p, &n, &bb), p, DATA_SPC_FULL);
    CHECK_EQU(n, 4);
    CHECK_EQU(p->m_lEffect, 4);
    for (int i = 0; i < 4; i++) {
        unsigned char o[sizeof(rec64)];
        queuevoid(p, o, sizeof(o), t);
        CHECK_SUCC(lPop(p, o, QUE_NOWAIT), p);
        CHECK_EQ(o[0], 'a' + i);
        CHECK_EQ(o[1], 0);
    }

    /* Missing queues: TBL_NOT_FOUND, *n 0. */
    static const TABLE missing[] = { 0, 1, 47, UINT_MAX };
    for (size_t i = 0; i < sizeof(missing) / sizeof(missing[0]); i++) {
        queuenull(p, sizeof(rec64), missing[i]);
        n = 2;
        CHECK_FAIL(lPushs(p, &n, &base), p, TBL_NOT_FOUND);
        CHECK_EQU(n, 0);
    }
    CHECK_EQ(dir_entries(), 1);
    final_round_trip();
}

/* ======================================================================== */
/* lCircleQueue                                                             */
/* ======================================================================== */

static void create_odd(void)
{
    SATvm *p = G();
    char v[512];

    /* rows or size 0: CONDIT_IS_NIL, whatever the other. */
    static const size_t any[] = { 0, 1, 64, SIZE_MAX };
    for (size_t i = 0; i < sizeof(any) / sizeof(any[0]); i++) {
        CHECK_FAIL(lCircleQueue(p, 50, 0, any[i], NULL, NULL), p, CONDIT_IS_NIL);
        CHECK_FAIL(lCircleQueue(p, 50, any[i], 0, NULL, NULL), p, CONDIT_IS_NIL);
    }
    CHECK_EQ(dir_entries(), 0);

    /* SIZE_MAX, and rows x size overflowing: MQUE_CRTE_BIG. */
    static const size_t big[][2] = {
        { SIZE_MAX, SIZE_MAX },
        { SIZE_MAX, 1 },
        { 1, SIZE_MAX },
        { SIZE_MAX / 2 + 1, 2 },        /* exactly 2^64 */
        { (size_t)1 << 32, (size_t)1 << 32 },
        { (size_t)1 << 40, (size_t)1 << 30 },
        { ((size_t)1 << 40) - 1, (size_t)1 << 24 },
        { 3, SIZE_MAX / 2 },
    };
    for (size_t i = 0; i < sizeof(big) / sizeof(big[0]); i++) {
        long rc = lCircleQueue(p, 51, big[i][0], big[i][1], (char *)"big", NULL);
        if (rc != RC_FAIL || p->m_lErrno != MQUE_CRTE_BIG || lGetTErrno() != MQUE_CRTE_BIG)
            fail_at(__FILE__, __LINE__, "rows %zu size %zu: rc %ld, m_lErrno %u %s, want MQUE_CRTE_BIG",
                    big[i][0], big[i][1], rc, p->m_lErrno, code_name(p->m_lErrno));
    }
    CHECK_EQ(dir_entries(), 0);

    /* NULL name and part. */
    CHECK_SUCC(lCircleQueue(p, 52, 2, 8, NULL, NULL), p);
    CHECK_SUCC(lCircleQueue(p, 53, 2, 8, (char *)"", (char *)""), p);
    CHECK_SUCC(lCircleQueue(p, 54, 2, 8, NULL, (char *)"part"), p);
    REQUIRE(stat_value(54, "partition", v, sizeof(v)));
    CHECK_STR(v, "part");

    /* 10 kB name and partition: created, names cut to a prefix, works. */
    size_t len = 10240;
    char *name = (char *)malloc(len + 1), *part = (char *)malloc(len + 1);
    REQUIRE(name && part);
    memset(name, 'n', len);
    name[len] = '\0';
    memset(part, 'p', len);
    part[len] = '\0';
    CHECK_SUCC(lCircleQueue(p, 55, 2, sizeof(rec64), name, part), p);
    REQUIRE(stat_value(55, "name", v, sizeof(v)));
    CHECK(v[0] == 'n' && strspn(v, "n") == strlen(v));
    REQUIRE(stat_value(55, "partition", v, sizeof(v)));
    CHECK(v[0] == 'p' && strspn(v, "p") == strlen(v));
    CHECK(push_n(p, 55, 1));
    EXPECT_POP(p, 55, 1);
    /* Bytes that are not UTF-8, and a name full of 2-byte characters. */
    memset(name, 0xff, 100);
    name[100] = '\0';
    CHECK_SUCC(lCircleQueue(p, 56, 2, sizeof(rec64), name, name), p);
    for (size_t i = 0; i + 2 <= len; i += 2)
        memcpy(name + i, "\xc3\xa9", 2); /* é */
    name[len] = '\0';
    CHECK_SUCC(lCircleQueue(p, 57, 2, sizeof(rec64), name, name), p);
    CHECK(push_n(p, 57, 2));
    EXPECT_POP(p, 57, 2);
    free(name);
    free(part);

    /* Ids 0, 1 and UINT_MAX are queues like any other. */
    static const TABLE ids[] = { 0, 1, UINT_MAX };
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        CHECK_SUCC(lCircleQueue(p, ids[i], 1, sizeof(rec64), NULL, NULL), p);
        CHECK_FAIL(lCircleQueue(p, ids[i], 1, sizeof(rec64), NULL, NULL), p, TBL_ARD_EXIST);
        CHECK(push_n(p, ids[i], (long)i));
    }
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        EXPECT_POP(p, ids[i], (long)i);
        CHECK_SUCC(lDropTable(p, ids[i]), p);
    }
    /* An existing queue given bad arguments is left as it was. */
    CHECK(push_n(p, 55, 3));
    CHECK_FAIL_IN(lCircleQueue(p, 55, 0, 0, NULL, NULL), p, CODES(CONDIT_IS_NIL, TBL_ARD_EXIST));
    CHECK_FAIL_IN(lCircleQueue(p, 55, SIZE_MAX, 8, NULL, NULL), p, CODES(MQUE_CRTE_BIG, TBL_ARD_EXIST));
    CHECK_FAIL(lCircleQueue(p, 55, 2, sizeof(rec64), NULL, NULL), p, TBL_ARD_EXIST);
    EXPECT_POP(p, 55, 3);
    CHECK_EQ(dir_entries(), 6); /* 52..57 */
    final_round_trip();
}

/* ======================================================================== */
/* lTableQueue and its QUEUE / FIELD functions                              */
/* ======================================================================== */

typedef struct {
    long id;
    char text[24];
    double amount;
    char wide[800];
} wideRec;

static long g_kind;            /* kind used by def_kind */
static int g_reached;          /* set when a def goes past a FIELD that should fail */
static size_t g_nfields;       /* fields def_many declares */
static size_t g_offset, g_len; /* field def_offset declares */
static const char *g_name;     /* field name def_name declares */

static CREATE def_other_id(TABLE t)
{
    (void)t;
    QUEUE(t + 1, "", wideRec) /* not the queue being created */
    FINISH
}

static CREATE def_field_first(TABLE t)
{
    FIELD(wideRec, id, FIELD_LONG) /* before QUEUE */
    g_reached = 1;
    QUEUE(t, "", wideRec)
    FINISH
}

static CREATE def_kind(TABLE t)
{
    QUEUE(t, "", wideRec)
    FIELD(wideRec, id, g_kind)
    g_reached = 1;
    FINISH
}

static CREATE def_offset(TABLE t)
{
    QUEUE(t, "", wideRec)
    if (lTvmDefField("beyond", g_offset, g_len, FIELD_CHAR) != RC_SUCC)
        return RC_FAIL;
    g_reached = 1;
    FINISH
}

static CREATE def_many(TABLE t)
{
    QUEUE(t, "", wideRec)
    for (size_t i = 0; i < g_nfields; i++) {
        char name[24];
        snprintf(name, sizeof(name), "f%zu", i);
        if (lTvmDefField(name, offsetof(wideRec, wide) + i * 8, 8, FIELD_CHAR) != RC_SUCC)
            return RC_FAIL;
    }
    g_reached = 1;
    FINISH
}

static CREATE def_duplicate(TABLE t)
{
    QUEUE(t, "", wideRec)
    FIELD(wideRec, id, FIELD_LONG)
    if (lTvmDefField("id", offsetof(wideRec, text), 8, FIELD_CHAR) != RC_SUCC)
        return RC_FAIL;
    g_reached = 1;
    FINISH
}

static CREATE def_name(TABLE t)
{
    QUEUE(t, "", wideRec)
    if (lTvmDefField(g_name, offsetof(wideRec, text), sizeof(((wideRec *)0)->text), FIELD_CHAR) !=
        RC_SUCC)
        return RC_FAIL;
    g_reached = 1;
    FINISH
}

static CREATE def_null_strings(TABLE t)
{
    if (lTvmDefQueue(t, NULL, NULL, sizeof(wideRec)) != RC_SUCC)
        return RC_FAIL;
    FIELD(wideRec, amount, FIELD_DOUB)
    FINISH
}

static CREATE def_size0(TABLE t)
{
    if (lTvmDefQueue(t, "", "empty", 0) != RC_SUCC)
        return RC_FAIL;
    g_reached = 1;
    FINISH
}

static CREATE def_no_queue(TABLE t)
{
    (void)t;
    FINISH /* no QUEUE at all */
}

static CREATE def_odd_return(TABLE t)
{
    QUEUE(t, "", wideRec)
    return 12345; /* neither RC_SUCC nor RC_FAIL */
}

/* One lTableQueue that must fail with a definition error, leave no file,
 * and (for a FIELD/QUEUE error) stop the def function at once. */
static void expect_def_error(TABLE t, TCREATE def, int line)
{
    SATvm *p = G();
    g_reached = 0;
    long rc = lTableQueue(p, t, 4, def);
    long terr = lGetTErrno();
    int ok = rc == RC_FAIL && (long)p->m_lErrno == terr &&
             (terr == TABLE_NOT_DEF || terr == FTYPE_NOT_DEF || terr == FLD_DEF_SPILL);
    if (!ok)
        fail_at(__FILE__, line, "lTableQueue(%u): rc %ld, m_lErrno %u %s, lGetTErrno %ld: want a definition error",
                t, rc, p->m_lErrno, code_name(p->m_lErrno), terr);
    if (g_reached)
        fail_at(__FILE__, line, "lTableQueue(%u): the failing QUEUE/FIELD did not stop the function", t);
    if (file_exists(t))
        fail_at(__FILE__, line, "lTableQueue(%u) failed but left a queue file", t);
}
#define EXPECT_DEF_ERROR(t, def) expect_def_error((t), (def), __LINE__)

static void table_queue_odd(void)
{
    SATvm *p = G();

    CHECK_FAIL(lTableQueue(p, 60, 4, NULL), p, CONDIT_IS_NIL);
    CHECK_FAIL(lTableQueue(p, 60, 0, def_many), p, CONDIT_IS_NIL);
    g_nfields = 1;
    CHECK_FAIL(lTableQueue(p, 60, SIZE_MAX, def_many), p, MQUE_CRTE_BIG);

    /* QUEUE with another id: TABLE_NOT_DEF (tvm.h). */
    g_reached = 0;
    CHECK_FAIL(lTableQueue(p, 61, 4, def_other_id), p, TABLE_NOT_DEF);
    CHECK(!file_exists(61) && !file_exists(62));
    /* FIELD before QUEUE. */
    EXPECT_DEF_ERROR(63, def_field_first);
    /* No QUEUE at all. */
    CHECK_FAIL(lTableQueue(p, 64, 4, def_no_queue), p, TABLE_NOT_DEF);

    /* FIELD kinds other than 1, 2, 4: FTYPE_NOT_DEF (tvm.h), FIELD returns. */
    static const long kinds[] = { 0, 3, 99, -1, 5, 8, LONG_MIN, LONG_MAX, 0x100000001L, 0x100000002L };
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        g_kind = kinds[i];
        g_reached = 0;
        if (!CHECK_FAIL(lTableQueue(p, 65, 4, def_kind), p, FTYPE_NOT_DEF))
            fprintf(stderr, "   (kind %ld)\n", kinds[i]);
        CHECK_EQ(g_reached, 0);
    }
    CHECK(!file_exists(65));
    g_kind = FIELD_DOUB; /* a good kind: fine */
    CHECK_SUCC(lTableQueue(p, 65, 4, def_kind), p);
    CHECK_EQ(stat_num(65, "fields"), 1);

    /* Fields beyond the struct, of length 0, with offsets or lengths that
     * overflow 32 bits: FLD_DEF_SPILL (tvm.h: "a field lies outside"). */
    static const size_t bad[][2] = {
        { sizeof(wideRec), 1 },
        { sizeof(wideRec) - 1, 2 },
        { 0, sizeof(wideRec) + 1 },
        { 8, 0 },
        { SIZE_MAX, 1 },
        { 1, SIZE_MAX },
        { SIZE_MAX, SIZE_MAX },
        { (size_t)1 << 32, 4 },
        { 4, ((size_t)1 << 32) + 4 },
        { UINT_MAX, UINT_MAX },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        g_offset = bad[i][0];
        g_len = bad[i][1];
        g_reached = 0;
        if (!CHECK_FAIL(lTableQueue(p, 66, 4, def_offset), p, FLD_DEF_SPILL))
            fprintf(stderr, "   (offset %zu length %zu)\n", g_offset, g_len);
        CHECK_EQ(g_reached, 0);
    }
    CHECK(!file_exists(66));
    g_offset = sizeof(wideRec) - 1; /* the very last byte: fine */
    g_len = 1;
    CHECK_SUCC(lTableQueue(p, 66, 4, def_offset), p);

    /* 64 fields fit; 65 and 100 are too many: FLD_DEF_SPILL (tvm.h). */
    g_nfields = 64;
    CHECK_SUCC(lTableQueue(p, 67, 2, def_many), p);
    CHECK_EQ(stat_num(67, "fields"), 64);
    static const size_t too_many[] = { 65, 100 };
    for (size_t i = 0; i < 2; i++) {
        g_nfields = too_many[i];
        g_reached = 0;
        CHECK_FAIL(lTableQueue(p, 68, 2, def_many), p, FLD_DEF_SPILL);
        CHECK_EQ(g_reached, 0);
    }
    CHECK(!file_exists(68));

    /* Two fields of the same name. */
    EXPECT_DEF_ERROR(69, def_duplicate);

    /* Field names of 31 characters (fits), 32, 100 and 10 kB, empty, NULL. */
    char name[10241];
    memset(name, 'a', sizeof(name));
    name[31] = '\0';
    g_name = name;
    CHECK_SUCC(lTableQueue(p, 70, 2, def_name), p);
    {
        char cmd[4096], line[1024];
        int found = 0;
        snprintf(cmd, sizeof(cmd), "'%s' stat 70", getenv("TVMQ"));
        FILE *f = popen(cmd, "r");
        REQUIRE(f != NULL);
        while (fgets(line, sizeof(line), f))
            if (strstr(line, name) != NULL)
                found = 1;
        pclose(f);
        CHECK(found); /* the 31-character name is listed whole */
    }
    static const size_t lens[] = { 32, 33, 100, 10240, 0 };
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        memset(name, 'b', sizeof(name));
        name[lens[i]] = '\0';
        g_name = name;
        /* Refused, or cut to fit: either way no crash, and if it was created
         * the queue works. tvm.h names no code for it: a definition error. */
        g_reached = 0;
        long rc = lTableQueue(p, 71, 2, def_name);
        if (rc == RC_SUCC) {
            fprintf(stderr, "note: field name of %zu bytes accepted\n", lens[i]);
            CHECK(lens[i] > 0);
            wideRec w;
            memset(&w, 0, sizeof(w));
            queueinit(p, w, 71);
            w.id = 5;
            CHECK_SUCC(lPush(p), p);
            CHECK_SUCC(lPop(p, &w, QUE_NOWAIT), p);
            CHECK_EQ(w.id, 5);
            CHECK_SUCC(lDropTable(p, 71), p);
        } else {
            EXPECT_DEF_ERROR(71, def_name);
        }
    }
    g_name = NULL; /* NULL name */
    EXPECT_DEF_ERROR(71, def_name);

    /* QUEUE with NULL part and type name: allowed (empty texts). */
    CHECK_SUCC(lTableQueue(p, 72, 2, def_null_strings), p);
    CHECK_EQ(stat_num(72, "record size"), sizeof(wideRec));
    /* QUEUE of a 0-byte struct: refused, the function stopped. */
    g_reached = 0;
    CHECK_EQ(lTableQueue(p, 73, 2, def_size0), RC_FAIL);
    CHECK(p->m_lErrno != 0);
    CHECK_EQ(g_reached, 0);
    CHECK(!file_exists(73));
    /* A def returning neither RC_SUCC nor RC_FAIL: not a success. */
    CHECK_EQ(lTableQueue(p, 74, 2, def_odd_return), RC_FAIL);
    CHECK(p->m_lErrno != 0);
    CHECK(!file_exists(74));

    /* Existing queue: TBL_ARD_EXIST, the queue untouched. */
    g_nfields = 64;
    CHECK_FAIL(lTableQueue(p, 67, 2, def_many), p, TBL_ARD_EXIST);
    CHECK_EQ(stat_num(67, "fields"), 64);
    CHECK_EQ(dir_entries(), 5); /* 65, 66, 67, 70, 72 */
    final_round_trip();
}

/* lTvmDefQueue / lTvmDefField called directly, outside lTableQueue (as the
 * QUEUE / FIELD macros would be in a function called directly): RC_FAIL
 * with a definition error, no queue created, and no effect on the next
 * lTableQueue (which gets only its own fields). */
static CREATE def_one_field(TABLE t)
{
    QUEUE(t, "one", wideRec)
    FIELD(wideRec, text, FIELD_CHAR)
    FINISH
}

static void def_outside(void)
{
    SATvm *p = G();

#define OUTSIDE(call)                                                          \
    do {                                                                       \
        vSetTErrno(0);                                                         \
        long rc_ = (call), e_ = lGetTErrno();                                  \
        if (rc_ != RC_FAIL || !(e_ == TABLE_NOT_DEF || e_ == FTYPE_NOT_DEF ||  \
                                e_ == FLD_DEF_SPILL || e_ == CONDIT_IS_NIL))   \
            fail_at(__FILE__, __LINE__, "%s outside lTableQueue: rc %ld, lGetTErrno %ld %s", \
                    #call, rc_, e_, code_name(e_));                            \
    } while (0)
    OUTSIDE(lTvmDefQueue(80, "", "wideRec", sizeof(wideRec)));
    OUTSIDE(lTvmDefQueue(80, NULL, NULL, 0));
    OUTSIDE(lTvmDefQueue(UINT_MAX, NULL, NULL, SIZE_MAX));
    OUTSIDE(lTvmDefField("id", 0, 8, FIELD_LONG));
    OUTSIDE(lTvmDefField(NULL, 0, 8, FIELD_LONG));
    OUTSIDE(lTvmDefField("x", SIZE_MAX, SIZE_MAX, -1));
    /* The macros in a function called directly return RC_FAIL. */
    CHECK_EQ(def_one_field(81), RC_FAIL);
    CHECK_EQ(def_many(81), RC_FAIL);
    CHECK_EQ(dir_entries(), 0);

    /* Nothing of that leaks into a real definition. */
    CHECK_SUCC(lTableQueue(p, 82, 2, def_one_field), p);
    CHECK_EQ(stat_num(82, "fields"), 1);
    CHECK_EQ(stat_num(82, "record size"), sizeof(wideRec));
    /* After a definition failed midway, the state is gone too. */
    g_kind = 3;
    CHECK_FAIL(lTableQueue(p, 83, 2, def_kind), p, FTYPE_NOT_DEF);
    OUTSIDE(lTvmDefField("late", 0, 8, FIELD_LONG));
    OUTSIDE(lTvmDefQueue(83, "", "wideRec", sizeof(wideRec)));
    CHECK_SUCC(lTableQueue(p, 84, 2, def_one_field), p);
    CHECK_EQ(stat_num(84, "fields"), 1);
#undef OUTSIDE
    CHECK_EQ(dir_entries(), 2);
    final_round_trip();
}

/* ======================================================================== */
/* Errors and handles                                                       */
/* ======================================================================== */

/* sGetTError on extreme values; vSetTErrno with odd values then lGetTErrno. */
static void errors_odd(void)
{
    const char *unknown = sGetTError(-1);
    REQUIRE(unknown != NULL && unknown[0] != '\0');
    static const long odd[] = { LONG_MIN, LONG_MIN + 1, -1, -103, 200, 201, INT_MAX,
                                (long)INT_MAX + 1, (long)UINT_MAX, (long)UINT_MAX + 1,
                                LONG_MAX - 1, LONG_MAX };
    for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
        const char *m = sGetTError(odd[i]);
        if (m == NULL || strcmp(m, unknown) != 0)
            fail_at(__FILE__, __LINE__, "sGetTError(%ld) = \"%s\", want the unknown-code text \"%s\"",
                    odd[i], m ? m : "(null)", unknown);
        CHECK(sGetTError(odd[i]) == m); /* a constant string */
    }
    /* Codes 0..102 are not "unknown". */
    CHECK(strcmp(sGetTError(0), unknown) != 0);
    CHECK(strcmp(sGetTError(102), unknown) != 0);

    for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
        vSetTErrno(odd[i]);
        CHECK_EQ(lGetTErrno(), odd[i]);
        CHECK(sGetTError(lGetTErrno()) != NULL);
    }
    vSetTErrno(LONG_MIN);
    /* A call after all that reports its own outcome. */
    SATvm *p = G();
    CHECK_FAIL(lAttchTable(p, 90), p, TBL_NOT_FOUND);
    vSetTErrno(LONG_MAX);
    CHECK_EQ(p->m_lErrno, TBL_NOT_FOUND); /* vSetTErrno does not touch handles */
    make_queue(90, 2, 8);
    CHECK_SUCC(lAttchTable(p, 90), p);
    CHECK_EQ(lGetTErrno(), 0);
    final_round_trip();
}

/* Handles that attached nothing: vTblDisconnect / vHoldRelease on them are
 * harmless no-ops (and successes); vCloneFree(NULL) and of the global handle
 * are ignored; a queue attached by another handle stays attached to the
 * process (tvmq stat lists the process). */
static void handles_odd(void)
{
    SATvm *g = G();
    const TABLE t = 91;

    /* In a process that has attached nothing at all. */
    SATvm *c = (SATvm *)pCloneSATvm();
    REQUIRE(c != NULL);
    static const TABLE ids[] = { 0, 1, t, UINT_MAX };
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        vSetTErrno(77);
        vTblDisconnect(c, ids[i]);
        CHECK_EQ(lGetTErrno(), 0);
        vSetTErrno(77);
        vTblDisconnect(g, ids[i]);
        CHECK_EQ(lGetTErrno(), 0);
    }
    for (int i = 0; i < 3; i++) {
        vSetTErrno(77);
        vHoldRelease(c);
        CHECK_EQ(lGetTErrno(), 0);
        vHoldRelease(g);
        CHECK(!c->m_bHold && !g->m_bHold);
    }
    vCloneFree(NULL);
    vCloneFree(g);
    CHECK(G() == g);

    /* The global handle attaches t; a clone that attached nothing releases
     * and frees itself: t stays attached (this process in tvmq stat). */
    make_queue(t, 4, sizeof(rec64));
    CHECK_SUCC(lAttchTable(g, t), g);
    CHECK(push_n(g, t, 1));
    CHECK_EQ(stat_num(t, "processes"), 1);
    vHoldConnect(c);
    vHoldRelease(c);
    vHoldRelease(c);
    vCloneFree(c);
    CHECK_EQ(stat_num(t, "processes"), 1);
    EXPECT_POP(g, t, 1);

    /* A clone whose binding is garbage is still freed and harmless. */
    SATvm *d = (SATvm *)pCloneSATvm();
    REQUIRE(d != NULL);
    d->lSize = SIZE_MAX;
    d->tblName = UINT_MAX;
    d->pstVoid = NULL;
    CHECK_FAIL(lPush(d), d, CONDIT_IS_NIL);
    vHoldRelease(d);
    vCloneFree(d);

    /* The global handle releases what it attached; later calls re-attach. */
    vHoldRelease(g);
    CHECK(push_n(g, t, 2));
    EXPECT_POP(g, t, 2);
    final_round_trip();
}

/* A handle whose pstVoid is NULL with lSize set, through a caller-owned
 * SATvm too (zero-initialised, as a C program may declare one). */
static void null_buffer_handle(void)
{
    const TABLE t = 92;
    SATvm own;
    rec64 r;

    make_queue(t, 2, sizeof(rec64));
    memset(&own, 0, sizeof(own));
    own.lSize = sizeof(rec64);
    own.tblName = t;
    CHECK_FAIL(lPush(&own), &own, CONDIT_IS_NIL);
    own.lSize = SIZE_MAX;
    CHECK_FAIL(lPush(&own), &own, CONDIT_IS_NIL);
    SATvm *g = G();
    g->pstVoid = NULL;
    g->lSize = sizeof(rec64);
    g->tblName = t;
    CHECK_FAIL(lPush(g), g, CONDIT_IS_NIL);
    CHECK_EQ(depth(t), 0);
    /* pstVoid is not used by lPop / lPopup / lPushs: they work. */
    bind_rec(g, &r, t, 3);
    CHECK_SUCC(lPush(g), g);
    g->pstVoid = NULL;
    rec64 out;
    CHECK_SUCC(lPop(g, &out, QUE_NOWAIT), g);
    CHECK_EQ(out.n, 3);
    final_round_trip();
}

/* Missing and dropped queues: TBL_NOT_FOUND for every call, at once, through
 * the handle that dropped it and through a clone that had it attached;
 * non-queue files in place of a queue are refused. */
static void missing_and_dropped(void)
{
    SATvm *p = G();
    const TABLE t = 93;
    rec64 r;
    size_t n;
    void *recs = &r, *out = NULL;

    static const TABLE missing[] = { 0, 1, 94, 65536, UINT_MAX };
    for (size_t i = 0; i < sizeof(missing) / sizeof(missing[0]); i++) {
        CHECK_FAIL(lDropTable(p, missing[i]), p, TBL_NOT_FOUND);
        CHECK_FAIL(lAttchTable(p, missing[i]), p, TBL_NOT_FOUND);
        CHECK_FAIL(lInitSATvm(p, missing[i]), p, TBL_NOT_FOUND);
    }

    make_queue(t, 4, sizeof(rec64));
    SATvm *c = (SATvm *)pCloneSATvm();
    REQUIRE(c != NULL);
    CHECK(push_n(c, t, 1)); /* c has it attached and cached */
    CHECK(push_n(p, t, 2));
    CHECK_SUCC(lDropTable(p, t), p);
    CHECK(!file_exists(t));

    long long t0 = mono_ms();
    SATvm *hs[2] = { p, c };
    for (int k = 0; k < 2; k++) {
        SATvm *h = hs[k];
        bind_rec(h, &r, t, 3);
        CHECK_FAIL(lPush(h), h, TBL_NOT_FOUND);
        CHECK_FAIL(lPop(h, &r, QUE_NOWAIT), h, TBL_NOT_FOUND);
        CHECK_FAIL(lPop(h, &r, QUE_NORMAL), h, TBL_NOT_FOUND);
        out = NULL;
        CHECK_FAIL(lPopup(h, 1, 0, &n, &out), h, TBL_NOT_FOUND);
        CHECK_FAIL(lPopup(h, 1, 1, &n, &out), h, TBL_NOT_FOUND);
        CHECK(out == NULL);
        n = 1;
        CHECK_FAIL(lPushs(h, &n, &recs), h, TBL_NOT_FOUND);
        CHECK_EQU(n, 0);
        CHECK_FAIL(lAttchTable(h, t), h, TBL_NOT_FOUND);
        CHECK_FAIL(lInitSATvm(h, t), h, TBL_NOT_FOUND);
        CHECK_FAIL(lDropTable(h, t), h, TBL_NOT_FOUND);
        vTblDisconnect(h, t);
        vHoldRelease(h);
    }
    CHECK_RANGE(mono_ms() - t0, 0, 1000);
    vCloneFree(c);

    /* Non-queue files under a queue's name: refused (tvm.h: SHM_ERR_INVAL,
     * "not a valid queue file"), without blocking on the FIFO. */
    char path[1024];
    queue_path(95, path, sizeof(path));
    REQUIRE(mkdir(path, 0700) == 0);
    queue_path(96, path, sizeof(path));
    REQUIRE(mkfifo(path, 0600) == 0);
    queue_path(97, path, sizeof(path));
    {
        int fd = open(path, O_CREAT | O_WRONLY, 0600);
        REQUIRE(fd >= 0);
        close(fd); /* empty regular file */
    }
    for (TABLE id = 95; id <= 97; id++) {
        t0 = mono_ms();
        CHECK_FAIL(lAttchTable(p, id), p, SHM_ERR_INVAL);
        bind_rec(p, &r, id, 1);
        CHECK_FAIL(lPush(p), p, SHM_ERR_INVAL);
        CHECK_FAIL(lPop(p, &r, QUE_NOWAIT), p, SHM_ERR_INVAL);
        CHECK_FAIL(lCircleQueue(p, id, 2, 8, NULL, NULL), p, TBL_ARD_EXIST);
        CHECK_RANGE(mono_ms() - t0, 0, 1000);
    }
    /* The same id works again once re-created. */
    make_queue(t, 2, sizeof(rec64));
    CHECK(push_n(p, t, 5));
    EXPECT_POP(p, t, 5);
    final_round_trip();
}

/* ======================================================================== */
/* Corrupted queue files                                                    */
/* ======================================================================== */

/* The queue file's layout (src/file/layout/offsets.rs and control.rs, the
 * slot header in src/ring/storage.rs; README "How it works"): the control
 * block at 4096 starts with `tail` and `head`, each on 128 bytes of its own;
 * the waiter words follow, then the `dropped` word at +384; slots start at
 * file size - capacity x stride, each with a 16-byte header (seq u64, check
 * u32, len u32). Checked at run time by corrupt_setup(). */
#define CONTROL_OFF 4096
#define TAIL_OFF (CONTROL_OFF + 0)
#define HEAD_OFF (CONTROL_OFF + 128)
#define WAKE_OFF (CONTROL_OFF + 256)
#define DROPPED_OFF (CONTROL_OFF + 384)
#define CONTROL_LEN 640

#define C_ROWS 8
#define C_SIZE ((size_t)sizeof(rec64))
#define C_STRIDE (16 + ((C_SIZE + 7) / 8) * 8)
/* "A few seconds": the longest a call on a corrupted queue may take, and
 * the watchdog (SIGALRM) that reports a call as hung. */
#define MAX_CALL_MS 5000
#define WATCHDOG_S 8

/* xorshift64*: the same sequence everywhere for a seed. */
static uint64_t g_rng;
static uint64_t rnd(void)
{
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return g_rng * 0x2545F4914F6CDD1DULL;
}
static uint64_t rnd_below(uint64_t n) { return n ? rnd() % n : 0; }

static int g_fd = -1;   /* the corrupted queue's file, for pread/pwrite */
static off_t g_data_off; /* offset of slot 0 */

static void put(off_t off, const void *data, size_t len)
{
    REQUIRE(pwrite(g_fd, data, len, off) == (ssize_t)len);
}

static uint64_t get64(off_t off)
{
    uint64_t v = 0;
    REQUIRE(pread(g_fd, &v, sizeof(v), off) == (ssize_t)sizeof(v));
    return v;
}

static void put64(off_t off, uint64_t v) { put(off, &v, sizeof(v)); }

/* Creates queue t (C_ROWS x C_SIZE), attaches it, opens its file, checks
 * the layout assumptions with a few pushes and pops (tail 5, head 2). */
static void corrupt_setup(TABLE t)
{
    SATvm *p = G();
    char path[1024];
    struct stat st;

    REQUIRE(setenv("TVMQ_UNBLOCK_TIMEOUT_MS", "300", 1) == 0);
    make_queue(t, C_ROWS, C_SIZE);
    REQUIRE_SUCC(lAttchTable(p, t), p);
    queue_path(t, path, sizeof(path));
    g_fd = open(path, O_RDWR);
    REQUIRE(g_fd >= 0);
    REQUIRE(fstat(g_fd, &st) == 0);
    g_data_off = st.st_size - (off_t)(C_ROWS * C_STRIDE);
    REQUIRE(g_data_off > CONTROL_OFF + CONTROL_LEN);
    for (long i = 0; i < 5; i++)
        CHECK(push_n(p, t, i));
    EXPECT_POP(p, t, 0);
    EXPECT_POP(p, t, 1);
    if (get64(TAIL_OFF) != 5 || get64(HEAD_OFF) != 2 || get64(DROPPED_OFF) != 0 ||
        get64(g_data_off) != 16 /* slot 0 released: free for lap 16 */ ||
        get64(g_data_off + 2 * C_STRIDE) != 1 /* slot 2 published at lap 0 */) {
        fail_at(__FILE__, __LINE__, "the queue file layout is not the one this test knows "
                "(tail %llu head %llu slot0 %llu slot2 %llu): update the offsets",
                (unsigned long long)get64(TAIL_OFF), (unsigned long long)get64(HEAD_OFF),
                (unsigned long long)get64(g_data_off),
                (unsigned long long)get64(g_data_off + 2 * C_STRIDE));
        exit(1);
    }
}

/* What a call on a corrupted queue may answer besides success. */
static int corrupt_code_ok(long code)
{
    return code == SHM_ERR_INVAL || code == DATA_SPC_FULL || code == NO_DATA_FOUND ||
           code == MQUE_WAIT_ERR || code == MQUE_WAIT_TMO || code == SHM_ERR_EIDRM;
}

static const char *g_what = ""; /* what the child is doing (for a hang report) */
static char g_ctx[700];         /* which corruption (for a hang report) */

/* Checks one call's outcome on the corrupted queue. */
static void corrupt_outcome(const char *op, long rc, SATvm *p, long long ms, const char *ctx)
{
    long terr = lGetTErrno();
    if (rc == RC_SUCC) {
        if (p->m_lErrno != 0 || terr != 0)
            fail_at(__FILE__, __LINE__, "%s %s: RC_SUCC with m_lErrno %u, lGetTErrno %ld", ctx, op,
                    p->m_lErrno, terr);
    } else if (rc != RC_FAIL || (long)p->m_lErrno != terr || !corrupt_code_ok(terr)) {
        fail_at(__FILE__, __LINE__, "%s %s: rc %ld, m_lErrno %u %s, lGetTErrno %ld %s", ctx, op, rc,
                p->m_lErrno, code_name(p->m_lErrno), terr, code_name(terr));
    }
    if (ms > MAX_CALL_MS)
        fail_at(__FILE__, __LINE__, "%s %s took %lld ms", ctx, op, ms);
}

/* Pushes and pops on the corrupted queue t: QUE_NOWAIT pops, lPopup with
 * secs 0 (and 1 when `slow`), lPushs; each call bounded and its outcome
 * allowed; pop buffers not overrun. */
static void corrupt_exercise(TABLE t, int slow, const char *ctx)
{
    snprintf(g_ctx, sizeof(g_ctx), "%s", ctx);
    SATvm *p = G();
    unsigned char buf[C_SIZE + 64];
    long long t0;
    long rc;

    for (int i = 0; i < 3; i++) {
        rec64 r;
        bind_rec(p, &r, t, 100 + i);
        g_what = "lPush";
        alarm(WATCHDOG_S);
        t0 = mono_ms();
        rc = lPush(p);
        corrupt_outcome("lPush", rc, p, mono_ms() - t0, ctx);
    }
    for (int i = 0; i < 4; i++) {
        memset(buf, 0xee, sizeof(buf));
        queuevoid(p, buf, C_SIZE, t);
        g_what = "lPop(QUE_NOWAIT)";
        alarm(WATCHDOG_S);
        t0 = mono_ms();
        rc = lPop(p, buf, QUE_NOWAIT);
        corrupt_outcome("lPop(QUE_NOWAIT)", rc, p, mono_ms() - t0, ctx);
        for (size_t k = C_SIZE; k < sizeof(buf); k++)
            if (buf[k] != 0xee) {
                fail_at(__FILE__, __LINE__, "%s lPop wrote past the record (byte %zu)", ctx, k);
                break;
            }
    }
    for (int s = 0; s <= slow; s++) {
        size_t n = 0;
        void *out = NULL;
        queuenull(p, C_SIZE, t);
        g_what = s ? "lPopup(4, secs 1)" : "lPopup(4, secs 0)";
        alarm(WATCHDOG_S);
        t0 = mono_ms();
        rc = lPopup(p, 4, s, &n, &out);
        corrupt_outcome(g_what, rc, p, mono_ms() - t0 - s * 1000, ctx);
        if (out == NULL && n != 0)
            fail_at(__FILE__, __LINE__, "%s lPopup: *out NULL with *out_n %zu", ctx, n);
        if (n > 4)
            fail_at(__FILE__, __LINE__, "%s lPopup: %zu records for expect 4", ctx, n);
        TFree(out);
    }
    {
        rec64 recs[3];
        memset(recs, 0, sizeof(recs));
        void *base = recs;
        size_t n = 3;
        queuenull(p, C_SIZE, t);
        g_what = "lPushs(3)";
        alarm(WATCHDOG_S);
        t0 = mono_ms();
        rc = lPushs(p, &n, &base);
        corrupt_outcome("lPushs", rc, p, mono_ms() - t0, ctx);
        if (n > 3)
            fail_at(__FILE__, __LINE__, "%s lPushs: *n %zu", ctx, n);
    }
    g_what = "";
}

/* After the corruption: the queue can still be dropped, and the process
 * works normally. */
static void corrupt_finish(TABLE t)
{
    SATvm *p = G();
    g_what = "lDropTable";
    alarm(WATCHDOG_S);
    CHECK_SUCC(lDropTable(p, t), p);
    CHECK(!file_exists(t));
    close(g_fd);
    g_fd = -1;
    g_what = "final round trip";
    alarm(WATCHDOG_S);
    final_round_trip();
    g_what = "";
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "HANG: the call below did not return in time\n";
    if (write(2, msg, sizeof(msg) - 1) < 0) {
    }
    if (write(2, g_ctx, strlen(g_ctx)) < 0 || write(2, " ", 1) < 0 ||
        write(2, g_what, strlen(g_what)) < 0 || write(2, "\n", 1) < 0) {
    }
    _exit(3);
}

/*
 * Runs fn(arg) in a child process, in a queue directory of its own (a
 * subdirectory of $TVMDBD, removed afterwards), with the SIGALRM watchdog
 * armed for `secs` (the exercise re-arms it per call): returns 0 if it
 * passed; else prints why (failed checks, a signal, a hang) under `label`.
 */
static int in_child(void (*fn)(long), long arg, unsigned secs, const char *label)
{
    static int seq;
    char dir[1024], cmd[1200];
    snprintf(dir, sizeof(dir), "%s/child-%d", queue_dir(), seq++);
    REQUIRE(mkdir(dir, 0700) == 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        __atomic_store_n(&g_failures, 0, __ATOMIC_SEQ_CST); /* the parent's are not ours */
        signal(SIGALRM, on_alarm);
        alarm(secs);
        REQUIRE(setenv("TVMDBD", dir, 1) == 0);
        fn(arg);
        _exit(__atomic_load_n(&g_failures, __ATOMIC_SEQ_CST) ? 1 : 0);
    }
    remember_child(pid);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    forget_child(pid);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fail_at(__FILE__, __LINE__, "cannot remove %s", dir);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
        return 0;
    if (WIFSIGNALED(st))
        fail_at(__FILE__, __LINE__, "%s: killed by signal %d (%s)", label, WTERMSIG(st),
                strsignal(WTERMSIG(st)));
    else if (WEXITSTATUS(st) == 3)
        fail_at(__FILE__, __LINE__, "%s: hung (a call did not return within %d s)", label, WATCHDOG_S);
    else
        fail_at(__FILE__, __LINE__, "%s: failed checks (exit %d)", label, WEXITSTATUS(st));
    return 1;
}

/* ---- the control block ---- */

static void control_case(long k)
{
    const TABLE t = 200;
    unsigned char junk[CONTROL_LEN];
    char ctx[128];

    corrupt_setup(t);
    g_rng = 0x9e3779b97f4a7c15ULL + (uint64_t)k;
    switch (k) {
    case 0: /* all random, except the dropped word */
        for (size_t i = 0; i < sizeof(junk); i++)
            junk[i] = (unsigned char)rnd();
        put(CONTROL_OFF, junk, sizeof(junk));
        put64(DROPPED_OFF, 0);
        break;
    case 1: /* all 0xff, except the dropped word */
        memset(junk, 0xff, sizeof(junk));
        put(CONTROL_OFF, junk, sizeof(junk));
        put64(DROPPED_OFF, 0);
        break;
    case 2: /* random cursors only */
        put64(TAIL_OFF, rnd());
        put64(HEAD_OFF, rnd());
        break;
    case 3: /* head past tail */
        put64(HEAD_OFF, 7);
        put64(TAIL_OFF, 3);
        break;
    case 4: /* tail more than a capacity ahead of head */
        put64(HEAD_OFF, 2);
        put64(TAIL_OFF, 2 + 16 + 3);
        break;
    case 5: /* cursors at an index beyond the capacity, or with bit 63 */
        put64(TAIL_OFF, 9);
        put64(HEAD_OFF, 1ULL << 63);
        break;
    case 6: /* cursors a lap ahead (plausible values, wrong for the slots) */
        put64(HEAD_OFF, 16 + 2);
        put64(TAIL_OFF, 16 + 5);
        break;
    case 7: /* cursors a lap behind */
        put64(HEAD_OFF, 0);
        put64(TAIL_OFF, 5);
        put64(g_data_off + 4 * C_STRIDE, 16 | 1); /* and one slot a lap ahead */
        break;
    case 8: /* everything zero: a "new" control block over used slots */
        memset(junk, 0, sizeof(junk));
        put(CONTROL_OFF, junk, sizeof(junk));
        break;
    case 9: /* huge waiter count and futex word */
        put64(WAKE_OFF, UINT64_MAX);
        break;
    case 10: /* the dropped flag: SHM_ERR_EIDRM from now on */
        put64(DROPPED_OFF, 0xdeadbeef);
        break;
    case 11: /* all random, dropped word included */
        for (size_t i = 0; i < sizeof(junk); i++)
            junk[i] = (unsigned char)rnd();
        put(CONTROL_OFF, junk, sizeof(junk));
        break;
    }
    snprintf(ctx, sizeof(ctx), "control case %ld:", k);
    corrupt_exercise(t, 1, ctx);
    corrupt_exercise(t, 0, ctx); /* again, after what the first round did */
    if (k == 10) {
        SATvm *p = G();
        rec64 r;
        bind_rec(p, &r, t, 1);
        CHECK_FAIL(lPush(p), p, SHM_ERR_EIDRM);
    }
    corrupt_finish(t);
}

/* Runs case(0..=last) each in its own child (in_child), labelled "<what> k",
 * then checks that this process still pushes and pops normally. */
static void run_cases(void (*one_case)(long), long last, const char *what)
{
    char label[64];
    for (long k = 0; k <= last; k++) {
        snprintf(label, sizeof(label), "%s %ld", what, k);
        in_child(one_case, k, WATCHDOG_S, label);
    }
    final_round_trip();
}

/* The control block of an attached queue overwritten with random and
 * extreme values: errors or successes, never a crash or a hang. */
static void corrupt_control(void)
{
    run_cases(control_case, 11, "control case");
}

/* ---- slot headers ---- */

static void slot_case(long k)
{
    const TABLE t = 201;
    char ctx[128];
    unsigned char junk[16 * C_ROWS];

    corrupt_setup(t); /* slots 2, 3, 4 hold records 2..4; 0, 1 released */
    g_rng = 0x51ed270b27a3f1c5ULL + (uint64_t)k;
    switch (k) {
    case 0: /* every header random */
        for (int s = 0; s < C_ROWS; s++) {
            for (int i = 0; i < 16; i++)
                junk[i] = (unsigned char)rnd();
            put(g_data_off + s * (off_t)C_STRIDE, junk, 16);
        }
        break;
    case 1: /* every header 0xff */
        memset(junk, 0xff, 16);
        for (int s = 0; s < C_ROWS; s++)
            put(g_data_off + s * (off_t)C_STRIDE, junk, 16);
        break;
    case 2: /* every header zero (slots "free for lap 0" under records) */
        memset(junk, 0, 16);
        for (int s = 0; s < C_ROWS; s++)
            put(g_data_off + s * (off_t)C_STRIDE, junk, 16);
        break;
    case 3: { /* lengths beyond the record size, and 0 */
        uint32_t len = 0xffffffffu;
        put(g_data_off + 2 * (off_t)C_STRIDE + 12, &len, 4);
        len = (uint32_t)C_SIZE + 1;
        put(g_data_off + 3 * (off_t)C_STRIDE + 12, &len, 4);
        len = 0;
        put(g_data_off + 4 * (off_t)C_STRIDE + 12, &len, 4);
        break;
    }
    case 4: /* seq values no lap can produce */
        put64(g_data_off + 2 * C_STRIDE, 3);
        put64(g_data_off + 3 * C_STRIDE, 1ULL << 63);
        put64(g_data_off + 5 * C_STRIDE, 0x7777777777777777ULL);
        break;
    case 5: /* published records far ahead / far behind */
        put64(g_data_off + 2 * C_STRIDE, (1ULL << 40) | 1);
        put64(g_data_off + 5 * C_STRIDE, (1ULL << 62) | 1);
        break;
    case 6: /* random owners (tokens of nobody) on stalled-looking slots */
        for (int s = 0; s < C_ROWS; s++) {
            uint32_t owner = (uint32_t)rnd();
            put(g_data_off + s * (off_t)C_STRIDE + 8, &owner, 4);
        }
        put64(g_data_off + 2 * C_STRIDE, 0); /* record 2 "not yet published" */
        put64(g_data_off + 5 * C_STRIDE, 0 | 1); /* slot 5 "published" early */
        break;
    case 7: /* a released slot made to look held by a consumer of lap 0 */
        put64(g_data_off + 0 * C_STRIDE, 1);
        put64(g_data_off + 1 * C_STRIDE, 1);
        { uint32_t owner = 0; put(g_data_off + 0 * C_STRIDE + 8, &owner, 4); }
        put64(HEAD_OFF, 0);
        break;
    }
    snprintf(ctx, sizeof(ctx), "slot case %ld:", k);
    corrupt_exercise(t, 1, ctx);
    corrupt_exercise(t, 0, ctx);
    corrupt_finish(t);
}

/* The slot headers of an attached queue overwritten: errors or successes,
 * never a crash or a hang. */
static void corrupt_slots(void)
{
    run_cases(slot_case, 7, "slot case");
}

/* The published record this process pushed, its seq's PUBLISHED bit
 * cleared (one bit of corruption): the slot now looks "being written by its
 * producer", and the producer's token in it is this very process. A
 * QUE_NOWAIT pop must still come back within a few seconds. */
static void own_slot_case(long k)
{
    const TABLE t = 202;
    SATvm *p = G();
    rec64 out;

    corrupt_setup(t); /* slot 2 holds record 2, pushed by this process */
    uint64_t seq = get64(g_data_off + 2 * C_STRIDE);
    put64(g_data_off + 2 * C_STRIDE, seq & ~1ULL);
    queuevoid(p, out, sizeof(out), t);
    long long t0 = mono_ms();
    alarm(WATCHDOG_S);
    snprintf(g_ctx, sizeof(g_ctx), "own slot:");
    if (k == 0) {
        g_what = "lPop(QUE_NOWAIT) of a slot whose PUBLISHED bit was cleared";
        long rc = lPop(p, &out, QUE_NOWAIT);
        corrupt_outcome("lPop(QUE_NOWAIT)", rc, p, mono_ms() - t0, "own slot:");
    } else {
        size_t n = 0;
        void *arr = NULL;
        queuenull(p, C_SIZE, t);
        g_what = "lPopup(1, secs 0) of a slot whose PUBLISHED bit was cleared";
        long rc = lPopup(p, 1, 0, &n, &arr);
        corrupt_outcome("lPopup(secs 0)", rc, p, mono_ms() - t0, "own slot:");
        TFree(arr);
    }
    corrupt_finish(t);
}

static void corrupt_own_slot(void)
{
    in_child(own_slot_case, 0, WATCHDOG_S, "lPop on a slot whose PUBLISHED bit was cleared");
    in_child(own_slot_case, 1, WATCHDOG_S, "lPopup on a slot whose PUBLISHED bit was cleared");
    final_round_trip();
}

/* ---- random corruptions from a fixed seed ---- */

static uint64_t g_seed = 20240611;

/* One random round: a queue in a random state (some records pushed and
 * popped), 1..4 random corruptions of its control block or slot headers
 * (random bytes, a flipped bit, a small change of a cursor or seq), then
 * random operations, each checked. */
static void random_case(long round)
{
    const TABLE t = (TABLE)(300 + round);
    SATvm *p = G();
    char ctx[700];
    char path[1024];
    struct stat st;

    g_rng = g_seed * 0x9E3779B97F4A7C15ULL + (uint64_t)round * 0xD1B54A32D192ED03ULL + 1;
    REQUIRE(setenv("TVMQ_UNBLOCK_TIMEOUT_MS", "300", 1) == 0);
    make_queue(t, C_ROWS, C_SIZE);
    REQUIRE_SUCC(lAttchTable(p, t), p);
    queue_path(t, path, sizeof(path));
    g_fd = open(path, O_RDWR);
    REQUIRE(g_fd >= 0);
    REQUIRE(fstat(g_fd, &st) == 0);
    g_data_off = st.st_size - (off_t)(C_ROWS * C_STRIDE);

    /* A random state: up to 3 laps of traffic, then a random depth. */
    long pushes = (long)rnd_below(3 * C_ROWS), queued = 0;
    for (long i = 0; i < pushes; i++) {
        rec64 o;
        queuevoid(p, o, sizeof(o), t);
        if (queued == C_ROWS) {
            CHECK_SUCC(lPop(p, &o, QUE_NOWAIT), p);
            queued--;
        }
        CHECK(push_n(p, t, i));
        queued++;
        if (rnd_below(3) != 0) {
            queuevoid(p, o, sizeof(o), t);
            CHECK_SUCC(lPop(p, &o, QUE_NOWAIT), p);
            queued--;
        }
    }

    int ncorrupt = 1 + (int)rnd_below(4);
    char desc[512] = "";
    for (int c = 0; c < ncorrupt; c++) {
        off_t off;
        int slot = (int)rnd_below(C_ROWS);
        switch (rnd_below(6)) {
        case 0: { /* random bytes in tail, head or the waiter words */
            static const off_t words[] = { TAIL_OFF, HEAD_OFF, WAKE_OFF };
            off = words[rnd_below(3)] + (off_t)rnd_below(8);
            break;
        }
        case 1: /* random bytes in the stats (harmless) or the dropped word (rarely) */
            off = rnd_below(10) == 0 ? DROPPED_OFF : DROPPED_OFF + 128 + (off_t)rnd_below(128);
            break;
        default: /* random bytes in a slot header */
            off = g_data_off + slot * (off_t)C_STRIDE + (off_t)rnd_below(16);
            break;
        }
        int kind = (int)rnd_below(4);
        size_t len = 1;
        if (kind == 0) { /* random bytes */
            unsigned char junk[16];
            len = 1 + (size_t)rnd_below(16);
            for (size_t i = 0; i < len; i++)
                junk[i] = (unsigned char)rnd();
            put(off, junk, len);
        } else if (kind == 1) { /* one bit flipped */
            unsigned char b;
            REQUIRE(pread(g_fd, &b, 1, off) == 1);
            b ^= (unsigned char)(1u << rnd_below(8));
            put(off, &b, 1);
        } else { /* a small change of an aligned 64-bit word (cursor, seq) */
            off &= ~(off_t)7;
            uint64_t v = get64(off);
            static const int64_t deltas[] = { 1, -1, 2, -2, 16, -16, 15, 17, 8, -8, 32 };
            v += (uint64_t)deltas[rnd_below(sizeof(deltas) / sizeof(deltas[0]))];
            put64(off, v);
            len = 8;
        }
        size_t dl = strlen(desc);
        snprintf(desc + dl, sizeof(desc) - dl, " %s@%lld+%zu",
                 kind == 0 ? "bytes" : kind == 1 ? "bit" : "delta", (long long)off, len);
    }
    snprintf(ctx, sizeof(ctx), "seed %llu round %ld (%ld pushes;%s):",
             (unsigned long long)g_seed, round, pushes, desc);
    corrupt_exercise(t, round % 25 == 0, ctx);
    corrupt_exercise(t, 0, ctx);
    corrupt_finish(t);
}

static void corrupt_random(void)
{
    const char *s = getenv("HOSTILE_SEED"), *r = getenv("HOSTILE_ROUNDS");
    const char *f = getenv("HOSTILE_FIRST"); /* to replay one round: HOSTILE_FIRST=N HOSTILE_ROUNDS=N+1 */
    long rounds = r ? atol(r) : 200;
    if (s)
        g_seed = strtoull(s, NULL, 0);
    int failed = 0;
    long long t0 = mono_ms();
    for (long round = f ? atol(f) : 0; round < rounds; round++) {
        char label[96];
        snprintf(label, sizeof(label), "seed %llu round %ld", (unsigned long long)g_seed, round);
        failed += in_child(random_case, round, WATCHDOG_S, label);
        if (failed >= 3) { /* a hang costs WATCHDOG_S: stay well inside run.sh's timeout */
            fprintf(stderr, "stopping after 3 failed rounds (round %ld of %ld)\n", round, rounds);
            rounds = round + 1;
            break;
        }
    }
    fprintf(stderr, "%ld rounds in %lld ms, %d failed\n", rounds, mono_ms() - t0, failed);
    final_round_trip();
}

TEST_MAIN(T(null_handle), T(push_odd), T(pop_odd), T(popup_odd), T(pushs_odd), T(create_odd),
          T(table_queue_odd), T(def_outside), T(errors_odd), T(handles_odd),
          T(null_buffer_handle), T(missing_and_dropped), T(corrupt_control), T(corrupt_slots),
          T(corrupt_own_slot), T(corrupt_random))
