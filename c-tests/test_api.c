/*
 * test_api.c: every function of the queue API and every error code the spec
 * (shared/spec/c-api.md) and tvm.h's comments give for it, one thread.
 * Threads and processes are in test_mt.c.
 *
 * Run by run.sh as `test_api NAME`, each test in a fresh, empty $TVMDBD,
 * with $TVMQ naming the tvmq tool (used to read a queue's depth and header
 * from outside the process). `test_api --list` lists the tests.
 */
#include "check.h"

#include <fcntl.h>

/* The queue is empty: QUE_NOWAIT gives NO_DATA_FOUND. */
static void expect_empty(SATvm *p, TABLE t, const char *file, int line)
{
    rec64 out;
    queuevoid(p, out, sizeof(out), t);
    long rc = lPop(p, &out, QUE_NOWAIT);
    if (rc != RC_FAIL || p->m_lErrno != NO_DATA_FOUND)
        fail_at(file, line, "queue %u should be empty: rc %ld, m_lErrno %u %s", t, rc,
                p->m_lErrno, code_name(p->m_lErrno));
}
#define EXPECT_EMPTY(p, t) expect_empty((p), (t), __FILE__, __LINE__)

/* ======================================================================== */
/* Handles                                                                  */
/* ======================================================================== */

/* pGetSATvm: non-NULL and always the same handle. */
static void handle_global(void)
{
    SATvm *a = (SATvm *)pGetSATvm();
    SATvm *b = (SATvm *)pGetSATvm();
    CHECK(a != NULL);
    CHECK(a == b);
    /* Members set by the program stay set (it is one persistent handle). */
    a->lSize = 17;
    a->tblName = 18;
    CHECK_EQU(((SATvm *)pGetSATvm())->lSize, 17);
    CHECK_EQU(((SATvm *)pGetSATvm())->tblName, 18);
}

/* pCloneSATvm copies the public binding members; clones are independent;
 * vCloneFree(NULL) and vCloneFree(global) are harmless. */
static void handle_clone(void)
{
    SATvm *g = G();
    rec64 r;
    const TABLE t = 11;

    make_queue(t, 8, sizeof(rec64));
    queueinit(g, r, t);
    r.n = 5;

    SATvm *c1 = (SATvm *)pCloneSATvm();
    SATvm *c2 = (SATvm *)pCloneSATvm();
    REQUIRE(c1 != NULL && c2 != NULL);
    CHECK(c1 != g && c2 != g && c1 != c2);
    CHECK_EQU(c1->lSize, sizeof(rec64));
    CHECK_EQU(c1->tblName, t);
    CHECK(c1->pstVoid == (void *)&r);

    /* A clone works on its own: it pushes the record bound in the global. */
    CHECK_SUCC(lPush(c1), c1);
    CHECK_EQU(c1->m_lEffect, 1);

    /* Changing a clone does not change the global handle or other clones. */
    c2->tblName = 999;
    c2->lSize = 1;
    CHECK_EQU(g->tblName, t);
    CHECK_EQU(g->lSize, sizeof(rec64));
    CHECK_EQU(c1->tblName, t);
    /* An error on a clone is recorded in that clone, not in the global. */
    g->m_lErrno = 0;
    CHECK_FAIL(lAttchTable(c2, 999), c2, TBL_NOT_FOUND);
    CHECK_EQU(g->m_lErrno, 0);

    vCloneFree(c1);
    vCloneFree(c2);
    vCloneFree(NULL);
    vCloneFree(g); /* must be ignored: the global handle stays valid */
    CHECK(G() == g);
    CHECK_EQU(g->lSize, sizeof(rec64));
    CHECK_EQU(g->tblName, t);
    EXPECT_POP(g, t, 5);
    CHECK(push_n(g, t, 6));
    EXPECT_POP(g, t, 6);
}

/* vHoldConnect / vHoldRelease: the hold flag (tvm.h: "set by vHoldConnect,
 * cleared by vHoldRelease"), and queues stay usable after a release (later
 * calls re-attach), their records intact. */
static void handle_hold(void)
{
    SATvm *p = G();
    const TABLE t = 12;

    make_queue(t, 8, sizeof(rec64));
    vHoldConnect(p);
    CHECK(p->m_bHold);
    CHECK_SUCC(lAttchTable(p, t), p);
    CHECK(push_n(p, t, 1));
    CHECK(push_n(p, t, 2));
    vHoldRelease(p);
    CHECK(!p->m_bHold);
    EXPECT_POP(p, t, 1);   /* re-attached on first use */
    vHoldRelease(p);       /* twice: harmless */
    vHoldRelease(p);
    EXPECT_POP(p, t, 2);
    EXPECT_EMPTY(p, t);

    /* A clone that never attached anything can be released too. */
    SATvm *c = (SATvm *)pCloneSATvm();
    REQUIRE(c != NULL);
    vHoldConnect(c);
    CHECK(c->m_bHold);
    vHoldRelease(c);
    CHECK(!c->m_bHold);
    CHECK(push_n(c, t, 3));
    vHoldRelease(c);
    vCloneFree(c);
    EXPECT_POP(p, t, 3);
}

/* Every function given a NULL handle: RC_FAIL (void functions: no crash)
 * and lGetTErrno() == CONDIT_IS_NIL. */
static void null_handle(void)
{
    size_t n = 1, got = 0;
    rec64 r;
    void *recs = &r, *out = NULL;
    const TABLE t = 13;

    memset(&r, 0, sizeof(r));
    make_queue(t, 4, sizeof(rec64));
#define NOH(call)                                                             \
    do {                                                                      \
        vSetTErrno(0);                                                        \
        CHECK_FAIL_NOH(call, CONDIT_IS_NIL);                                  \
    } while (0)
    NOH(lAttchTable(NULL, t));
    NOH(lInitSATvm(NULL, t));
    NOH(lCircleQueue(NULL, 14, 4, 8, NULL, NULL));
    NOH(lTableQueue(NULL, 14, 4, NULL));
    NOH(lDropTable(NULL, t));
    NOH(lPush(NULL));
    NOH(lPop(NULL, &r, QUE_NOWAIT));
    NOH(lPop(NULL, &r, QUE_NORMAL)); /* must not block either */
    NOH(lPopup(NULL, 1, 0, &got, &out));
    NOH(lPushs(NULL, &n, &recs));
    NOH(lSyncQueue(NULL, t));
#undef NOH
    /* void functions: no crash, and the thread's error says why. */
    vSetTErrno(0);
    vHoldConnect(NULL);
    CHECK_EQ(lGetTErrno(), CONDIT_IS_NIL);
    vSetTErrno(0);
    vHoldRelease(NULL);
    CHECK_EQ(lGetTErrno(), CONDIT_IS_NIL);
    vSetTErrno(0);
    vTblDisconnect(NULL, t);
    CHECK_EQ(lGetTErrno(), CONDIT_IS_NIL);
    vCloneFree(NULL);
    /* Nothing happened to the queue: it exists (not dropped), no queue 14. */
    CHECK_SUCC(lAttchTable(G(), t), G());
    CHECK_FAIL(lAttchTable(G(), 14), G(), TBL_NOT_FOUND);
    CHECK_EQ(depth(t), 0);
}

/* lAttchTable / lInitSATvm: missing queue -> TBL_NOT_FOUND; existing ->
 * RC_SUCC with m_lErrno reset to 0. */
static void attach(void)
{
    SATvm *p = G();
    const TABLE t = 15;

    CHECK_FAIL(lAttchTable(p, t), p, TBL_NOT_FOUND);
    CHECK_FAIL(lInitSATvm(p, t), p, TBL_NOT_FOUND);
    CHECK_FAIL(lAttchTable(p, 0), p, TBL_NOT_FOUND);
    CHECK_FAIL(lAttchTable(p, UINT_MAX), p, TBL_NOT_FOUND);
    CHECK_EQ(dir_entries(), 0); /* attaching never creates a file */

    make_queue(t, 4, sizeof(rec64));
    p->m_lErrno = 55;
    vSetTErrno(55);
    CHECK_SUCC(lAttchTable(p, t), p);
    CHECK_SUCC(lAttchTable(p, t), p); /* again: fine */
    CHECK_SUCC(lInitSATvm(p, t), p);

    /* A queue created by another process (tvmq) is attached as well. */
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "'%s' create 16 --rows 2 --size 8 >/dev/null", getenv("TVMQ"));
    REQUIRE(system(cmd) == 0);
    CHECK_SUCC(lAttchTable(p, 16), p);
    long v = 77;
    queuevoid(p, v, sizeof(v), 16);
    CHECK_SUCC(lPush(p), p);
    CHECK_EQ(depth(16), 1);
}

/* vTblDisconnect: detaching is harmless; the next call re-attaches and the
 * queue's records are intact. */
static void disconnect(void)
{
    SATvm *p = G();
    const TABLE t = 17;

    vTblDisconnect(p, t);   /* never attached, does not exist: no-op */
    vTblDisconnect(p, 4242);
    make_queue(t, 4, sizeof(rec64));
    CHECK_SUCC(lAttchTable(p, t), p);
    CHECK(push_n(p, t, 1));
    vTblDisconnect(p, t);
    vTblDisconnect(p, t);
    CHECK(push_n(p, t, 2));
    vTblDisconnect(p, t);
    EXPECT_POP(p, t, 1);
    vTblDisconnect(p, t);
    EXPECT_POP(p, t, 2);
    EXPECT_EMPTY(p, t);
}

/* One thread on several queues: in turns (each call on another queue), in
 * runs, and after a detach; every record reaches its own queue, in order,
 * and lGetTErrno follows every call. (A thread keeps the queue it works on
 * at hand; these are the changes of that queue.) */
static void several_queues(void)
{
    SATvm *p = G();
    const TABLE a = 202, b = 203;
    rec64 r;

    make_queue(a, 64, sizeof(rec64));
    make_queue(b, 64, sizeof(rec64));
    for (long i = 0; i < 10; i++) {       /* in turns */
        CHECK(push_n(p, a, i));
        CHECK(push_n(p, b, 100 + i));
    }
    for (long i = 10; i < 20; i++)        /* a run on b, then one on a */
        CHECK(push_n(p, b, 100 + i));
    for (long i = 10; i < 20; i++)
        CHECK(push_n(p, a, i));
    CHECK_EQ(depth(a), 20);
    CHECK_EQ(depth(b), 20);
    bind_rec(p, &r, 4242, 0);             /* no such queue, between two calls */
    CHECK_FAIL(lPush(p), p, TBL_NOT_FOUND);
    CHECK_EQ(lGetTErrno(), TBL_NOT_FOUND);
    for (long i = 0; i < 20; i++) {
        EXPECT_POP(p, a, i);
        CHECK_EQ(lGetTErrno(), 0);
        if (i == 7)
            vTblDisconnect(p, b);         /* detached: attached again on use */
        EXPECT_POP(p, b, 100 + i);
    }
    EXPECT_EMPTY(p, a);
    EXPECT_EMPTY(p, b);
    CHECK_SUCC(lDropTable(p, a), p);
    CHECK_SUCC(lDropTable(p, b), p);
}

/* ======================================================================== */
/* Creating queues                                                          */
/* ======================================================================== */

/* lCircleQueue holds exactly `rows` records: N pushes succeed, push N+1 gives
 * DATA_SPC_FULL at once; popping one makes room for exactly one. */
static void create_capacity(void)
{
    static const size_t sizes[] = { 1, 2, 3, 7, 1000, 1023, 1025 };
    SATvm *p = G();

    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        const size_t rows = sizes[k];
        const TABLE t = (TABLE)(20 + k);
        long pushed = 0;

        make_queue(t, rows, sizeof(long));
        CHECK_EQ(stat_num(t, "capacity"), rows);
        for (size_t i = 0; i < rows; i++) {
            long v = (long)i;
            queuevoid(p, v, sizeof(v), t);
            if (lPush(p) == RC_SUCC)
                pushed++;
            else
                fail_at(__FILE__, __LINE__, "rows %zu: push #%zu failed: %s", rows, i,
                        code_name(p->m_lErrno));
        }
        CHECK_EQ(pushed, rows);
        long extra = -1;
        queuevoid(p, extra, sizeof(extra), t);
        long long t0 = mono_ms();
        CHECK_FAIL(lPush(p), p, DATA_SPC_FULL);
        CHECK_RANGE(mono_ms() - t0, 0, 250); /* at once, no waiting */
        CHECK_FAIL(lPush(p), p, DATA_SPC_FULL);
        CHECK_EQ(depth(t), rows);

        /* Pop one: exactly one more fits, then full again. */
        long out = -5;
        queuevoid(p, out, sizeof(out), t);
        CHECK_SUCC(lPop(p, &out, QUE_NOWAIT), p);
        CHECK_EQ(out, 0);
        queuevoid(p, extra, sizeof(extra), t);
        CHECK_SUCC(lPush(p), p);
        CHECK_FAIL(lPush(p), p, DATA_SPC_FULL);
        /* Everything comes out in order: 1..rows-1, then the extra one. */
        queuevoid(p, out, sizeof(out), t);
        for (size_t i = 1; i <= rows; i++) {
            out = -5;
            if (lPop(p, &out, QUE_NOWAIT) != RC_SUCC ||
                out != (i < rows ? (long)i : -1)) {
                fail_at(__FILE__, __LINE__, "rows %zu: pop #%zu: %s, value %ld", rows, i,
                        code_name(p->m_lErrno), out);
                break;
            }
        }
        CHECK_FAIL(lPop(p, &out, QUE_NOWAIT), p, NO_DATA_FOUND);
    }
}

/* lCircleQueue errors: CONDIT_IS_NIL, TBL_ARD_EXIST, MQUE_CRTE_BIG; a failed
 * create leaves no file behind and does not touch an existing queue. */
static void create_errors(void)
{
    SATvm *p = G();

    CHECK_FAIL(lCircleQueue(p, 30, 0, 64, NULL, NULL), p, CONDIT_IS_NIL);
    CHECK_FAIL(lCircleQueue(p, 30, 10, 0, NULL, NULL), p, CONDIT_IS_NIL);
    CHECK_FAIL(lCircleQueue(p, 30, 0, 0, NULL, NULL), p, CONDIT_IS_NIL);
    CHECK_FAIL(lCreateQueue(p, 30, 0, 64, ""), p, CONDIT_IS_NIL);
    CHECK_EQ(dir_entries(), 0);

    /* Absurd sizes: too big for memory or for the index type. */
    static const size_t big[][2] = {
        { 1, SIZE_MAX },
        { SIZE_MAX, 1 },
        { SIZE_MAX / 2, 2 },
        { SIZE_MAX / 64, 64 },
        { (size_t)1 << 40, (size_t)1 << 20 },
        { (size_t)1 << 33, 1024 },
        { 2, (size_t)1 << 42 },
    };
    for (size_t i = 0; i < sizeof(big) / sizeof(big[0]); i++) {
        long rc = lCircleQueue(p, 31, big[i][0], big[i][1], NULL, NULL);
        if (rc != RC_FAIL || p->m_lErrno != MQUE_CRTE_BIG || lGetTErrno() != MQUE_CRTE_BIG)
            fail_at(__FILE__, __LINE__, "rows %zu size %zu: rc %ld, m_lErrno %u %s, want MQUE_CRTE_BIG",
                    big[i][0], big[i][1], rc, p->m_lErrno, code_name(p->m_lErrno));
        CHECK_EQ(dir_entries(), 0);
    }
    CHECK_FAIL(lAttchTable(p, 31), p, TBL_NOT_FOUND);

    /* Existing queue: TBL_ARD_EXIST, and the queue is left as it was. */
    make_queue(32, 3, sizeof(rec64));
    CHECK(push_n(p, 32, 7));
    CHECK_FAIL(lCircleQueue(p, 32, 3, sizeof(rec64), NULL, NULL), p, TBL_ARD_EXIST);
    CHECK_FAIL(lCircleQueue(p, 32, 100, 8, NULL, NULL), p, TBL_ARD_EXIST);
    CHECK_FAIL(lCreateQueue(p, 32, 5, 5, ""), p, TBL_ARD_EXIST);
    CHECK_EQ(stat_num(32, "capacity"), 3);
    CHECK_EQ(depth(32), 1);
    EXPECT_POP(p, 32, 7);
    CHECK_EQ(dir_entries(), 1);
}

#define MY_QUEUE_ID 23

/* Name and partition are stored (tvmq stat shows them); lCreateQueue names
 * the queue after its id argument as written (#t); the file is mode 0600. */
static void create_names(void)
{
    SATvm *p = G();
    char v[512];

    CHECK_SUCC(lCircleQueue(p, 22, 4, 16, (char *)"myname", (char *)"part1"), p);
    REQUIRE(stat_value(22, "name", v, sizeof(v)));
    CHECK_STR(v, "myname");
    REQUIRE(stat_value(22, "partition", v, sizeof(v)));
    CHECK_STR(v, "part1");
    CHECK_EQ(stat_num(22, "record size"), 16);
    CHECK_EQ(stat_num(22, "capacity"), 4);

    CHECK_SUCC(lCircleQueue(p, 24, 4, 16, NULL, NULL), p); /* NULL name/part */

    CHECK_SUCC(lCreateQueue(p, MY_QUEUE_ID, 5, 64, "pp"), p);
    REQUIRE(stat_value(MY_QUEUE_ID, "name", v, sizeof(v)));
    CHECK_STR(v, "MY_QUEUE_ID"); /* #t: the argument as written */
    REQUIRE(stat_value(MY_QUEUE_ID, "partition", v, sizeof(v)));
    CHECK_STR(v, "pp");
    CHECK_EQ(stat_num(MY_QUEUE_ID, "capacity"), 5);
    CHECK_EQ(stat_num(MY_QUEUE_ID, "record size"), 64);

    CHECK_SUCC(lCreateQueue(p, 25, 2, 8, ""), p);
    REQUIRE(stat_value(25, "name", v, sizeof(v)));
    CHECK_STR(v, "25");

    /* New queue files: in $TVMDBD, owner read/write only. */
    REQUIRE(stat_value(22, "file", v, sizeof(v)));
    CHECK(strncmp(v, queue_dir(), strlen(queue_dir())) == 0 && v[strlen(queue_dir())] == '/');
    CHECK_EQ(dir_entries(), 4); /* queues 22, 23, 24, 25 */
    struct stat st;
    REQUIRE(lstat(v, &st) == 0);
    CHECK(S_ISREG(st.st_mode));
    CHECK_EQ(st.st_mode & 07777, 0600);
    REQUIRE(stat_value(22, "mode", v, sizeof(v)));
    CHECK_STR(v, "0600");
}

/* ---- lTableQueue --------------------------------------------------------- */

typedef struct {
    long acct_id;
    char user_no[21];
    char user_type[2];
    double balance;
    long flags;
} dbUser;

/* The spec's example style (old-style empty parameter list). */
CREATE lQueueUserInfo()
{
    QUEUE(70, "p70", dbUser)
    FIELD(dbUser, acct_id, FIELD_LONG)
    FIELD(dbUser, user_no, FIELD_CHAR)
    FIELD(dbUser, user_type, FIELD_CHAR)
    FIELD(dbUser, balance, FIELD_DOUB)
    FINISH
}

/* The same with DEFINE and ';' after each macro, for queue 71. */
static CREATE lDefineUser(TABLE t)
{
    (void)t;
    DEFINE(71, "", dbUser);
    FIELD(dbUser, flags, FIELD_LONG);
    FINISH
}

/* One field's line in `tvmq stat`: "  <name> offset N  length N  <kind>". */
static int stat_field(TABLE t, const char *name, long *off, long *len, char *kind)
{
    char cmd[4096], line[1024], fname[128], k[16];
    long o, l;
    int found = 0;

    snprintf(cmd, sizeof(cmd), "'%s' stat %u", getenv("TVMQ"), t);
    FILE *f = popen(cmd, "r");
    REQUIRE(f != NULL);
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, " %127s offset %ld length %ld %15s", fname, &o, &l, k) == 4 &&
            strcmp(fname, name) == 0) {
            *off = o;
            *len = l;
            strcpy(kind, k);
            found = 1;
        }
    pclose(f);
    return found;
}

static void check_field(TABLE t, const char *name, size_t off, size_t len, const char *kind,
                        int line)
{
    long o = -1, l = -1;
    char k[16] = "";
    if (!stat_field(t, name, &o, &l, k))
        fail_at(__FILE__, line, "queue %u: field %s not listed by tvmq stat", t, name);
    else if (o != (long)off || l != (long)len || strcmp(k, kind) != 0)
        fail_at(__FILE__, line, "queue %u: field %s: offset %ld length %ld %s, want %zu %zu %s", t,
                name, o, l, k, off, len, kind);
}
#define CHECK_FIELD(t, s, m, kind) \
    check_field((t), #m, offsetof(s, m), sizeof(((s *)0)->m), (kind), __LINE__)

/* lTableQueue with a QUEUE/FIELD/FINISH function: record size = sizeof the
 * struct, field list stored (tvmq stat), records go through. */
static void table_queue(void)
{
    SATvm *p = G();
    dbUser u, out;

    CHECK_SUCC(lTableQueue(p, 70, 8, lQueueUserInfo), p);
    CHECK_EQ(stat_num(70, "record size"), sizeof(dbUser));
    CHECK_EQ(stat_num(70, "capacity"), 8);
    CHECK_EQ(stat_num(70, "fields"), 4);
    CHECK_FIELD(70, dbUser, acct_id, "long");
    CHECK_FIELD(70, dbUser, user_no, "char");
    CHECK_FIELD(70, dbUser, user_type, "char");
    CHECK_FIELD(70, dbUser, balance, "double");

    queueinit(p, u, 70);
    u.acct_id = 123456789;
    strcpy(u.user_no, "20180223");
    strcpy(u.user_type, "1");
    u.balance = 2.5;
    CHECK_SUCC(lPush(p), p);
    memset(&out, 0x33, sizeof(out));
    CHECK_SUCC(lPop(p, &out, QUE_NOWAIT), p);
    CHECK_MEM(&out, &u, sizeof(u));
    /* One byte more than the struct does not fit. */
    p->lSize = sizeof(dbUser) + 1;
    CHECK_FAIL(lPush(p), p, RECD_TOO_LONG);

    CHECK_SUCC(lTableQueue(p, 71, 3, lDefineUser), p);
    CHECK_EQ(stat_num(71, "record size"), sizeof(dbUser));
    CHECK_EQ(stat_num(71, "fields"), 1);
    CHECK_FIELD(71, dbUser, flags, "long");
    CHECK_FAIL(lTableQueue(p, 71, 3, lDefineUser), p, TBL_ARD_EXIST);
}

/* Definition functions that go wrong. */
static long g_kind = FIELD_LONG;   /* kind used by lDefKind */
static int g_after_bad_field;      /* set if a FIELD error did not return */

static CREATE lDefKind(TABLE t)
{
    (void)t;
    QUEUE(72, "", dbUser)
    FIELD(dbUser, acct_id, g_kind)
    g_after_bad_field = 1;
    FIELD(dbUser, user_no, FIELD_CHAR)
    FINISH
}

static CREATE lDefOtherId(TABLE t)
{
    (void)t;
    QUEUE(99, "", dbUser) /* not the queue being created */
    FINISH
}

static CREATE lDefOutside(TABLE t)
{
    (void)t;
    QUEUE(74, "", dbUser)
    /* A field past the end of the record, declared directly. */
    if (RC_SUCC != lTvmDefField("beyond", sizeof(dbUser) - 4, 8, FIELD_CHAR))
        return RC_FAIL;
    FINISH
}

static CREATE lDefFails(TABLE t)
{
    (void)t;
    QUEUE(75, "", dbUser)
    return RC_FAIL; /* the function itself gives up */
}

static CREATE lDefBig(TABLE t)
{
    (void)t;
    QUEUE(76, "", dbUser)
    FINISH
}

/* lTableQueue errors: FTYPE_NOT_DEF for a bad kind (and FIELD returns from
 * the function), CONDIT_IS_NIL (NULL def, rows 0), TABLE_NOT_DEF (QUEUE of
 * another id), FLD_DEF_SPILL (field outside the record), MQUE_CRTE_BIG; no
 * queue is left behind by a failure. */
static void table_queue_errors(void)
{
    SATvm *p = G();
    static const long bad_kinds[] = { 0, 3, 5, 8, -1, 1000 };

    for (size_t i = 0; i < sizeof(bad_kinds) / sizeof(bad_kinds[0]); i++) {
        g_kind = bad_kinds[i];
        g_after_bad_field = 0;
        long rc = lTableQueue(p, 72, 4, lDefKind);
        if (rc != RC_FAIL || p->m_lErrno != FTYPE_NOT_DEF)
            fail_at(__FILE__, __LINE__, "FIELD kind %ld: rc %ld m_lErrno %u %s, want FTYPE_NOT_DEF",
                    g_kind, rc, p->m_lErrno, code_name(p->m_lErrno));
        CHECK_EQ(g_after_bad_field, 0); /* FIELD returned RC_FAIL at once */
    }
    CHECK_EQ(dir_entries(), 0);
    /* The good kinds work with the same function. */
    g_kind = FIELD_LONG;
    CHECK_SUCC(lTableQueue(p, 72, 4, lDefKind), p);
    CHECK_EQ(g_after_bad_field, 1);
    CHECK_EQ(stat_num(72, "fields"), 2);

    CHECK_FAIL(lTableQueue(p, 73, 4, NULL), p, CONDIT_IS_NIL);
    CHECK_FAIL(lTableQueue(p, 76, 0, lDefBig), p, CONDIT_IS_NIL);
    CHECK_FAIL(lTableQueue(p, 73, 4, lDefOtherId), p, TABLE_NOT_DEF);
    CHECK_FAIL(lTableQueue(p, 74, 4, lDefOutside), p, FLD_DEF_SPILL);
    CHECK_EQ(lTableQueue(p, 75, 4, lDefFails), RC_FAIL);
    CHECK(p->m_lErrno != 0);
    CHECK_FAIL(lTableQueue(p, 72, 4, lDefKind), p, TBL_ARD_EXIST);
    CHECK_FAIL(lTableQueue(p, 76, SIZE_MAX, lDefBig), p, MQUE_CRTE_BIG);
    CHECK_FAIL(lTableQueue(p, 76, SIZE_MAX / 8, lDefBig), p, MQUE_CRTE_BIG);
    CHECK_EQ(dir_entries(), 1); /* only queue 72 */
}

/* ======================================================================== */
/* Dropping                                                                 */
/* ======================================================================== */

/* lDropTable: later calls get TBL_NOT_FOUND (none blocks), the file is gone,
 * and the id can be created again, empty. */
static void drop(void)
{
    SATvm *p = G();
    const TABLE t = 60;
    rec64 r;
    size_t n = 1, got = 99;
    void *recs = &r, *out = NULL;

    make_queue(t, 4, sizeof(rec64));
    CHECK_SUCC(lAttchTable(p, t), p);
    CHECK(push_n(p, t, 1));
    CHECK_SUCC(lDropTable(p, t), p);
    CHECK_EQ(dir_entries(), 0);

    bind_rec(p, &r, t, 2);
    CHECK_FAIL(lPush(p), p, TBL_NOT_FOUND);
    CHECK_FAIL(lPop(p, &r, QUE_NOWAIT), p, TBL_NOT_FOUND);
    long long t0 = mono_ms();
    CHECK_FAIL(lPop(p, &r, QUE_NORMAL), p, TBL_NOT_FOUND);
    CHECK_FAIL(lPopup(p, 1, 1, &got, &out), p, TBL_NOT_FOUND);
    CHECK_RANGE(mono_ms() - t0, 0, 500); /* no waiting on a missing queue */
    CHECK(out == NULL);
    CHECK_FAIL(lPushs(p, &n, &recs), p, TBL_NOT_FOUND);
    CHECK_EQU(n, 0);
    CHECK_FAIL(lAttchTable(p, t), p, TBL_NOT_FOUND);
    CHECK_FAIL(lInitSATvm(p, t), p, TBL_NOT_FOUND);
    CHECK_FAIL(lDropTable(p, t), p, TBL_NOT_FOUND);
    CHECK_FAIL(lDropTable(p, 61), p, TBL_NOT_FOUND); /* never existed */

    /* Same id again: a new, empty queue, usable through the same handle. */
    make_queue(t, 2, sizeof(rec64));
    EXPECT_EMPTY(p, t);
    CHECK(push_n(p, t, 3));
    EXPECT_POP(p, t, 3);
}

/* A queue dropped by another process (tvmq drop) while this one has it
 * attached: later calls get TBL_NOT_FOUND; re-created, it is used again. */
static void drop_by_other_process(void)
{
    SATvm *p = G();
    const TABLE t = 62;
    char cmd[4096];

    make_queue(t, 4, sizeof(rec64));
    CHECK_SUCC(lAttchTable(p, t), p);
    CHECK(push_n(p, t, 1));
    snprintf(cmd, sizeof(cmd), "'%s' drop %u >/dev/null", getenv("TVMQ"), t);
    REQUIRE(system(cmd) == 0);

    rec64 r;
    bind_rec(p, &r, t, 2);
    CHECK_FAIL(lPush(p), p, TBL_NOT_FOUND);
    CHECK_FAIL(lPop(p, &r, QUE_NOWAIT), p, TBL_NOT_FOUND);

    snprintf(cmd, sizeof(cmd), "'%s' create %u --rows 4 --size %zu >/dev/null", getenv("TVMQ"), t,
             sizeof(rec64));
    REQUIRE(system(cmd) == 0);
    CHECK(push_n(p, t, 3));
    CHECK_EQ(depth(t), 1); /* went into the new queue */
    EXPECT_POP(p, t, 3);
    EXPECT_EMPTY(p, t);
}

/* ======================================================================== */
/* lPush                                                                    */
/* ======================================================================== */

static void push(void)
{
    SATvm *p = G();
    const TABLE t = 40;
    rec64 r;
    char big[128];

    make_queue(t, 4, sizeof(rec64));

    /* Argument errors, none of which pushes anything. */
    bind_rec(p, &r, t, 1);
    p->pstVoid = NULL;
    CHECK_FAIL(lPush(p), p, CONDIT_IS_NIL);
    bind_rec(p, &r, t, 1);
    p->lSize = 0;
    CHECK_FAIL(lPush(p), p, CONDIT_IS_NIL);
    memset(big, 'b', sizeof(big));
    queuevoid(p, big, sizeof(rec64) + 1, t);
    CHECK_FAIL(lPush(p), p, RECD_TOO_LONG);
    queuevoid(p, big, sizeof(big), t);
    CHECK_FAIL(lPush(p), p, RECD_TOO_LONG);
    queuevoid(p, big, SIZE_MAX, t);
    CHECK_FAIL(lPush(p), p, RECD_TOO_LONG);
    CHECK_EQ(depth(t), 0);

    /* Missing queue. */
    bind_rec(p, &r, 41, 1);
    CHECK_FAIL(lPush(p), p, TBL_NOT_FOUND);

    /* Success: RC_SUCC, m_lErrno 0, m_lEffect 1, lGetEffect() 1. */
    bind_rec(p, &r, t, 1);
    p->m_lErrno = 33;
    p->m_lEffect = 77;
    vSetTErrno(33);
    CHECK_SUCC(lPush(p), p);
    CHECK_EQU(p->m_lEffect, 1);
    CHECK_EQU(lGetEffect(), 1);

    /* Exactly the record size, and a shorter record, are both accepted. */
    queuevoid(p, big, sizeof(rec64), t);
    CHECK_SUCC(lPush(p), p);
    queuevoid(p, big, 1, t);
    CHECK_SUCC(lPush(p), p);
    CHECK_EQ(depth(t), 3);

    /* The record is copied at push time: changing the buffer later does not
     * change what was queued. */
    bind_rec(p, &r, t, 4);
    CHECK_SUCC(lPush(p), p);
    r.n = 5;
    EXPECT_POP(p, t, 1);
    rec64 out;
    queuevoid(p, out, sizeof(out), t);
    CHECK_SUCC(lPop(p, &out, QUE_NOWAIT), p);
    CHECK_MEM(&out, big, sizeof(out));
    CHECK_SUCC(lPop(p, &out, QUE_NOWAIT), p);
    CHECK_EQ(((unsigned char *)&out)[0], 'b');
    EXPECT_POP(p, t, 4);
    EXPECT_EMPTY(p, t);
}

/* The first lPush / lPop of a process attaches the queue by itself (this
 * process never calls lAttchTable), through the global handle and a clone. */
static void push_attaches(void)
{
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "'%s' create 42 --rows 4 --size %zu >/dev/null", getenv("TVMQ"),
             sizeof(rec64));
    REQUIRE(system(cmd) == 0);
    SATvm *c = (SATvm *)pCloneSATvm();
    REQUIRE(c != NULL);
    CHECK(push_n(c, 42, 1));   /* clone first */
    CHECK(push_n(G(), 42, 2));
    EXPECT_POP(c, 42, 1);
    EXPECT_POP(G(), 42, 2);
    vCloneFree(c);
    CHECK_EQ(stat_num(42, "pushed"), 2);
    CHECK_EQ(stat_num(42, "popped"), 2);
}

/* ======================================================================== */
/* lPop                                                                     */
/* ======================================================================== */

static void pop(void)
{
    SATvm *p = G();
    const TABLE t = 43;
    rec64 out;

    make_queue(t, 4, sizeof(rec64));

    /* Empty, QUE_NOWAIT: NO_DATA_FOUND at once. */
    queuevoid(p, out, sizeof(out), t);
    long long t0 = mono_ms();
    CHECK_FAIL(lPop(p, &out, QUE_NOWAIT), p, NO_DATA_FOUND);
    CHECK_RANGE(mono_ms() - t0, 0, 250);

    /* Bad wait flags and NULL out are refused, without taking the record
     * and without blocking. */
    CHECK(push_n(p, t, 1));
    queuevoid(p, out, sizeof(out), t);
    CHECK_FAIL(lPop(p, &out, 7), p, NOT_SUPPT_OPT);
    CHECK_FAIL(lPop(p, &out, 2), p, NOT_SUPPT_OPT);
    CHECK_FAIL(lPop(p, &out, UINT_MAX), p, NOT_SUPPT_OPT);
    CHECK_FAIL(lPop(p, NULL, QUE_NOWAIT), p, CONDIT_IS_NIL);
    CHECK_FAIL(lPop(p, NULL, QUE_NORMAL), p, CONDIT_IS_NIL);
    CHECK_EQ(depth(t), 1);

    /* Missing queue. */
    queuevoid(p, out, sizeof(out), 44);
    CHECK_FAIL(lPop(p, &out, QUE_NOWAIT), p, TBL_NOT_FOUND);

    /* Success: the record, m_lErrno 0, m_lEffect 1 (QUE_NORMAL with a record
     * there returns at once). */
    memset(&out, 0xee, sizeof(out));
    queuevoid(p, out, sizeof(out), t);
    p->m_lEffect = 0;
    p->m_lErrno = 9;
    CHECK_SUCC(lPop(p, &out, QUE_NORMAL), p);
    CHECK_EQU(p->m_lEffect, 1);
    CHECK_EQU(lGetEffect(), 1);
    CHECK_EQ(out.n, 1);
    CHECK_STR(out.text, "record 1");
    CHECK_EQ(depth(t), 0);
}

/* lSize below the record size: RECD_TOO_LONG, the record stays queued and
 * nothing is written past lSize; a shorter record comes out zero-filled. */
static void pop_sizes(void)
{
    SATvm *p = G();
    const TABLE t = 45;
    unsigned char buf[256];

    make_queue(t, 4, 64);
    CHECK(push_n(p, t, 1)); /* rec64 is exactly 64 bytes */

    memset(buf, 0xee, sizeof(buf));
    queuevoid(p, buf, 32, t);
    CHECK_FAIL(lPop(p, buf, QUE_NOWAIT), p, RECD_TOO_LONG);
    queuevoid(p, buf, 63, t);
    CHECK_FAIL(lPop(p, buf, QUE_NORMAL), p, RECD_TOO_LONG);
    for (size_t i = 32; i < sizeof(buf); i++)
        if (buf[i] != 0xee) {
            fail_at(__FILE__, __LINE__, "lPop with lSize 32 wrote byte %zu", i);
            break;
        }
    /* lSize 0 is below the record size too (or a missing size): refused. */
    queuevoid(p, buf, 0, t);
    long rc = lPop(p, buf, QUE_NOWAIT);
    CHECK(rc == RC_FAIL && (p->m_lErrno == RECD_TOO_LONG || p->m_lErrno == CONDIT_IS_NIL));
    CHECK_EQ(depth(t), 1);
    EXPECT_POP(p, t, 1); /* still there, intact */

    /* A 10-byte record in a 64-byte queue: 10 bytes then zeros up to 64. */
    char ten[10];
    memcpy(ten, "0123456789", 10);
    queuevoid(p, ten, sizeof(ten), t);
    CHECK_SUCC(lPush(p), p);
    memset(buf, 0xaa, sizeof(buf));
    queuevoid(p, buf, 64, t);
    CHECK_SUCC(lPop(p, buf, QUE_NOWAIT), p);
    CHECK_MEM(buf, "0123456789", 10);
    for (size_t i = 10; i < 64; i++)
        if (buf[i] != 0) {
            fail_at(__FILE__, __LINE__, "short record: byte %zu is 0x%02x, want 0", i, buf[i]);
            break;
        }

    /* A buffer larger than the record size is fine. */
    CHECK(push_n(p, t, 2));
    queuevoid(p, buf, sizeof(buf), t);
    CHECK_SUCC(lPop(p, buf, QUE_NOWAIT), p);
    CHECK_EQ(((rec64 *)buf)->n, 2);
}

/* FIFO order, also across many wrap-arounds of a small ring. */
static void pop_fifo(void)
{
    SATvm *p = G();

    make_queue(46, 100, sizeof(rec64));
    for (long i = 0; i < 100; i++)
        CHECK(push_n(p, 46, i));
    for (long i = 0; i < 100; i++)
        EXPECT_POP(p, 46, i);
    EXPECT_EMPTY(p, 46);

    make_queue(47, 3, sizeof(rec64));
    long next_in = 0, next_out = 0;
    for (int round = 0; round < 200; round++) {
        int k = 1 + round % 3; /* push 1..3, pop as many */
        for (int i = 0; i < k; i++)
            CHECK(push_n(p, 47, next_in++));
        for (int i = 0; i < k; i++)
            EXPECT_POP(p, 47, next_out++);
    }
    EXPECT_EMPTY(p, 47);
    CHECK_EQ(stat_num(47, "pushed"), next_in);
}

/* ======================================================================== */
/* lPopup                                                                   */
/* ======================================================================== */

/* Checks that the array holds records first..first+n-1, `stride` apart. */
static void check_array(const void *arr, size_t n, size_t stride, long first, int line)
{
    for (size_t i = 0; i < n; i++) {
        const rec64 *r = (const rec64 *)((const char *)arr + i * stride);
        char want[56];
        snprintf(want, sizeof(want), "record %ld", first + (long)i);
        if (r->n != first + (long)i || strcmp(r->text, want) != 0) {
            fail_at(__FILE__, line, "lPopup array slot %zu: record %ld \"%.20s\", want %ld", i, r->n,
                    r->text, first + (long)i);
            return;
        }
    }
}

static void popup(void)
{
    SATvm *p = G();
    const TABLE t = 50;
    size_t n = 99;
    void *out = NULL;

    make_queue(t, 10, sizeof(rec64));

    /* secs 0, 3 queued, expect 10: RC_SUCC with the 3. */
    for (long i = 1; i <= 3; i++)
        CHECK(push_n(p, t, i));
    queuenull(p, sizeof(rec64), t);
    long long t0 = mono_ms();
    CHECK_SUCC(lPopup(p, 10, 0, &n, &out), p);
    CHECK_RANGE(mono_ms() - t0, 0, 250);
    CHECK_EQU(n, 3);
    CHECK_EQU(p->m_lEffect, 3);
    CHECK_EQU(lGetEffect(), 3);
    REQUIRE(out != NULL);
    check_array(out, 3, sizeof(rec64), 1, __LINE__);
    TFree(out);
    CHECK(out == NULL);

    /* None at all, secs 0: NO_DATA_FOUND at once, *out NULL. */
    int dummy;
    out = &dummy;
    n = 99;
    t0 = mono_ms();
    CHECK_FAIL(lPopup(p, 10, 0, &n, &out), p, NO_DATA_FOUND);
    CHECK_RANGE(mono_ms() - t0, 0, 250);
    CHECK(out == NULL);
    CHECK_EQU(n, 0);
    CHECK_EQU(p->m_lEffect, 0);

    /* Exactly `expect` there: RC_SUCC at once even with secs > 0. */
    for (long i = 1; i <= 4; i++)
        CHECK(push_n(p, t, i));
    t0 = mono_ms();
    CHECK_SUCC(lPopup(p, 4, 5, &n, &out), p);
    CHECK_RANGE(mono_ms() - t0, 0, 300);
    CHECK_EQU(n, 4);
    REQUIRE(out != NULL);
    check_array(out, 4, sizeof(rec64), 1, __LINE__);
    TFree(out);

    /* More than `expect` there: takes `expect`, leaves the rest in order. */
    for (long i = 1; i <= 6; i++)
        CHECK(push_n(p, t, i));
    queuenull(p, sizeof(rec64), t);
    CHECK_SUCC(lPopup(p, 4, 0, &n, &out), p);
    CHECK_EQU(n, 4);
    REQUIRE(out != NULL);
    check_array(out, 4, sizeof(rec64), 1, __LINE__);
    TFree(out);
    CHECK_EQ(depth(t), 2);
    EXPECT_POP(p, t, 5);
    EXPECT_POP(p, t, 6);

    /* A huge secs with the records there: at once. */
    for (long i = 1; i <= 2; i++)
        CHECK(push_n(p, t, i));
    queuenull(p, sizeof(rec64), t);
    t0 = mono_ms();
    CHECK_SUCC(lPopup(p, 2, LONG_MAX, &n, &out), p);
    CHECK_RANGE(mono_ms() - t0, 0, 300);
    CHECK_EQU(n, 2);
    REQUIRE(out != NULL);
    check_array(out, 2, sizeof(rec64), 1, __LINE__);
    TFree(out);

    /* A huge `expect` is no problem: takes what is there. */
    for (long i = 1; i <= 2; i++)
        CHECK(push_n(p, t, i));
    queuenull(p, sizeof(rec64), t);
    CHECK_SUCC(lPopup(p, SIZE_MAX, 0, &n, &out), p);
    CHECK_EQU(n, 2);
    REQUIRE(out != NULL);
    check_array(out, 2, sizeof(rec64), 1, __LINE__);
    TFree(out);
}

/* lPopup with secs > 0 and too few records: RC_FAIL MQUE_WAIT_TMO after
 * ~secs with the count and a valid array; none: NO_DATA_FOUND, *out NULL. */
static void popup_timeout(void)
{
    SATvm *p = G();
    const TABLE t = 51;
    size_t n = 99;
    void *out = NULL;

    make_queue(t, 10, sizeof(rec64));
    CHECK(push_n(p, t, 1));
    CHECK(push_n(p, t, 2));
    queuenull(p, sizeof(rec64), t);
    long long t0 = mono_ms();
    CHECK_FAIL(lPopup(p, 5, 1, &n, &out), p, MQUE_WAIT_TMO);
    CHECK_RANGE(mono_ms() - t0, 900, 2000);
    CHECK_EQU(n, 2);
    CHECK_EQU(p->m_lEffect, 2);
    CHECK_EQU(lGetEffect(), 2);
    REQUIRE(out != NULL);
    check_array(out, 2, sizeof(rec64), 1, __LINE__);
    TFree(out);
    CHECK(out == NULL);

    /* Nothing at all within secs: RC_FAIL, NO_DATA_FOUND, *out NULL. */
    int dummy;
    out = &dummy;
    n = 99;
    t0 = mono_ms();
    CHECK_FAIL(lPopup(p, 3, 1, &n, &out), p, NO_DATA_FOUND);
    CHECK_RANGE(mono_ms() - t0, 900, 2000);
    CHECK(out == NULL);
    CHECK_EQU(n, 0);
}

/* lPopup argument errors: CONDIT_IS_NIL (expect 0, secs < 0, NULL
 * pointers), RECD_TOO_LONG (lSize below the record size); nothing taken.
 * lSize above the record size: slots lSize bytes apart. */
static void popup_args(void)
{
    SATvm *p = G();
    const TABLE t = 52;
    size_t n = 99;
    void *out = NULL;

    make_queue(t, 10, sizeof(rec64));
    CHECK(push_n(p, t, 1));
    CHECK(push_n(p, t, 2));
    queuenull(p, sizeof(rec64), t);
    CHECK_FAIL(lPopup(p, 0, 0, &n, &out), p, CONDIT_IS_NIL);
    CHECK_FAIL(lPopup(p, 0, 1, &n, &out), p, CONDIT_IS_NIL);
    CHECK_FAIL(lPopup(p, 2, -1, &n, &out), p, CONDIT_IS_NIL);
    CHECK_FAIL(lPopup(p, 2, LONG_MIN, &n, &out), p, CONDIT_IS_NIL);
    CHECK_FAIL(lPopup(p, 2, 0, NULL, &out), p, CONDIT_IS_NIL);
    CHECK_FAIL(lPopup(p, 2, 0, &n, NULL), p, CONDIT_IS_NIL);
    CHECK_FAIL(lPopup(p, 2, 0, NULL, NULL), p, CONDIT_IS_NIL);
    CHECK(out == NULL);
    queuenull(p, sizeof(rec64) - 1, t);
    CHECK_FAIL(lPopup(p, 2, 0, &n, &out), p, RECD_TOO_LONG);
    CHECK(out == NULL);
    queuenull(p, sizeof(rec64), 53);
    CHECK_FAIL(lPopup(p, 2, 0, &n, &out), p, TBL_NOT_FOUND);
    CHECK(out == NULL);
    CHECK_EQ(depth(t), 2);

    /* lSize 80 > record size 64: each slot is 80 bytes. */
    queuenull(p, 80, t);
    CHECK_SUCC(lPopup(p, 2, 0, &n, &out), p);
    CHECK_EQU(n, 2);
    REQUIRE(out != NULL);
    check_array(out, 2, 80, 1, __LINE__);
    TFree(out);

    /* Short records come out zero-filled up to the record size, as lPop. */
    char three[3] = { 'a', 'b', 'c' };
    queuevoid(p, three, sizeof(three), t);
    CHECK_SUCC(lPush(p), p);
    queuenull(p, sizeof(rec64), t);
    CHECK_SUCC(lPopup(p, 1, 0, &n, &out), p);
    CHECK_EQU(n, 1);
    REQUIRE(out != NULL);
    const unsigned char *b = (const unsigned char *)out;
    CHECK_MEM(b, "abc", 3);
    for (size_t i = 3; i < sizeof(rec64); i++)
        if (b[i] != 0) {
            fail_at(__FILE__, __LINE__, "lPopup short record: byte %zu = 0x%02x", i, b[i]);
            break;
        }
    TFree(out);
}

/* ======================================================================== */
/* lPushs                                                                   */
/* ======================================================================== */

static void pushs(void)
{
    SATvm *p = G();
    rec64 recs[5];
    size_t n;
    void *base = recs;

    for (long i = 0; i < 5; i++) {
        memset(&recs[i], 0, sizeof(recs[i]));
        recs[i].n = i + 1;
        snprintf(recs[i].text, sizeof(recs[i].text), "record %ld", i + 1);
    }

    /* Room for all: *n and m_lEffect 5, order kept. */
    make_queue(54, 10, sizeof(rec64));
    queuenull(p, sizeof(rec64), 54);
    n = 5;
    CHECK_SUCC(lPushs(p, &n, &base), p);
    CHECK_EQU(n, 5);
    CHECK_EQU(p->m_lEffect, 5);
    CHECK_EQU(lGetEffect(), 5);
    CHECK(base == (void *)recs);
    for (long i = 1; i <= 5; i++)
        EXPECT_POP(p, 54, i);
    EXPECT_EMPTY(p, 54);

    /* Room for 3: stops at the first failure, DATA_SPC_FULL, *n 3. */
    make_queue(55, 3, sizeof(rec64));
    queuenull(p, sizeof(rec64), 55);
    n = 5;
    CHECK_FAIL(lPushs(p, &n, &base), p, DATA_SPC_FULL);
    CHECK_EQU(n, 3);
    CHECK_EQU(p->m_lEffect, 3);
    CHECK_EQU(lGetEffect(), 3);
    CHECK_EQ(depth(55), 3);
    for (long i = 1; i <= 3; i++)
        EXPECT_POP(p, 55, i);
    EXPECT_EMPTY(p, 55);
    /* Room for 1 left of 3: *n 1. */
    CHECK(push_n(p, 55, 100));
    CHECK(push_n(p, 55, 101));
    queuenull(p, sizeof(rec64), 55);
    n = 5;
    CHECK_FAIL(lPushs(p, &n, &base), p, DATA_SPC_FULL);
    CHECK_EQU(n, 1);
    CHECK_EQU(p->m_lEffect, 1);
    EXPECT_POP(p, 55, 100);
    EXPECT_POP(p, 55, 101);
    EXPECT_POP(p, 55, 1);
    /* Full: nothing goes in, *n 0. */
    for (long i = 0; i < 3; i++)
        CHECK(push_n(p, 55, i));
    queuenull(p, sizeof(rec64), 55);
    n = 2;
    CHECK_FAIL(lPushs(p, &n, &base), p, DATA_SPC_FULL);
    CHECK_EQU(n, 0);
    CHECK_EQU(p->m_lEffect, 0);

    /* Argument errors. */
    make_queue(56, 10, sizeof(rec64));
    queuenull(p, sizeof(rec64), 56);
    n = 0;
    CHECK_FAIL(lPushs(p, &n, &base), p, CONDIT_IS_NIL);
    CHECK_FAIL(lPushs(p, NULL, &base), p, CONDIT_IS_NIL);
    n = 2;
    CHECK_FAIL(lPushs(p, &n, NULL), p, CONDIT_IS_NIL);
    void *nullbase = NULL;
    n = 2;
    CHECK_FAIL(lPushs(p, &n, &nullbase), p, CONDIT_IS_NIL);
    queuenull(p, 0, 56);
    n = 2;
    CHECK_FAIL(lPushs(p, &n, &base), p, CONDIT_IS_NIL);
    queuenull(p, sizeof(rec64) + 1, 56);
    n = 2;
    CHECK_FAIL(lPushs(p, &n, &base), p, RECD_TOO_LONG);
    CHECK_EQU(n, 0);
    queuenull(p, sizeof(rec64), 57);
    n = 2;
    CHECK_FAIL(lPushs(p, &n, &base), p, TBL_NOT_FOUND);
    CHECK_EQU(n, 0);
    CHECK_EQ(depth(56), 0);

    /* lSize below the record size: records of lSize bytes, zero-filled. */
    queuenull(p, sizeof(long), 56);
    long longs[3] = { 7, 8, 9 };
    void *lb = longs;
    n = 3;
    CHECK_SUCC(lPushs(p, &n, &lb), p);
    CHECK_EQU(n, 3);
    for (long i = 0; i < 3; i++) {
        rec64 out;
        memset(&out, 0xee, sizeof(out));
        queuevoid(p, out, sizeof(out), 56);
        CHECK_SUCC(lPop(p, &out, QUE_NOWAIT), p);
        CHECK_EQ(out.n, 7 + i);
        CHECK_EQ(out.text[0], 0);
        CHECK_EQ(out.text[55], 0);
    }
}

/* ======================================================================== */
/* Errors, time, macros                                                     */
/* ======================================================================== */

static int contains_unknown(const char *s)
{
    char low[256];
    size_t i;
    for (i = 0; s[i] && i < sizeof(low) - 1; i++)
        low[i] = (char)(s[i] >= 'A' && s[i] <= 'Z' ? s[i] - 'A' + 'a' : s[i]);
    low[i] = '\0';
    return strstr(low, "unknown") != NULL;
}

/* sGetTError: a constant, non-empty message for 0..102; a generic "unknown"
 * one for anything else, negative and extreme values included. */
static void error_text(void)
{
    const char *unknown = sGetTError(-1);
    REQUIRE(unknown != NULL);
    CHECK(unknown[0] != '\0');
    CHECK(contains_unknown(unknown));

    for (long c = 0; c < TVM_CODE_COUNT; c++) {
        const char *m = sGetTError(c);
        if (m == NULL || m[0] == '\0') {
            fail_at(__FILE__, __LINE__, "sGetTError(%ld) (%s) is empty", c, code_name(c));
            continue;
        }
        if (strcmp(m, unknown) == 0)
            fail_at(__FILE__, __LINE__, "sGetTError(%ld) (%s) is the unknown-code text", c,
                    code_name(c));
        if (sGetTError(c) != m)
            fail_at(__FILE__, __LINE__, "sGetTError(%ld) is not a constant string", c);
    }
    /* Codes the queue API uses have messages of their own. */
    CHECK(strcmp(sGetTError(DATA_SPC_FULL), sGetTError(NO_DATA_FOUND)) != 0);
    CHECK(strcmp(sGetTError(TBL_NOT_FOUND), sGetTError(TBL_ARD_EXIST)) != 0);
    CHECK(strcmp(sGetTError(CONDIT_IS_NIL), sGetTError(RECD_TOO_LONG)) != 0);

    static const long odd[] = { -1, -2, -103, 200, 201, 255, 256, 1000, 65536, INT_MAX,
                                (long)INT_MAX + 1, INT_MIN, LONG_MIN, LONG_MIN + 1,
                                LONG_MAX };
    for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
        const char *m = sGetTError(odd[i]);
        if (m == NULL || !contains_unknown(m) || strcmp(m, unknown) != 0)
            fail_at(__FILE__, __LINE__, "sGetTError(%ld) = \"%s\", want \"%s\"", odd[i],
                    m ? m : "(null)", unknown);
    }
}

/* sGetTErrName: every code's #define name, the same constant string each
 * call; NULL for anything that is no code. */
static void error_names(void)
{
    for (long c = 0; c < TVM_CODE_COUNT; c++) {
        const char *n = sGetTErrName(c);
        if (n == NULL || strcmp(n, code_name(c)) != 0)
            fail_at(__FILE__, __LINE__, "sGetTErrName(%ld) = \"%s\", want \"%s\"", c, n ? n : "(null)",
                    code_name(c));
        else if (sGetTErrName(c) != n)
            fail_at(__FILE__, __LINE__, "sGetTErrName(%ld) is not a constant string", c);
    }
    static const long odd[] = { -1, -103, TVM_CODE_COUNT, 255, 65536, INT_MIN, LONG_MIN, LONG_MAX };
    for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++)
        if (sGetTErrName(odd[i]) != NULL)
            fail_at(__FILE__, __LINE__, "sGetTErrName(%ld) = \"%s\", want NULL", odd[i], sGetTErrName(odd[i]));
}

/* lPopWait: 0 ms is QUE_NOWAIT, more waits that long at most (MQUE_WAIT_TMO),
 * a record there or arriving is taken as lPop takes it. */
static void pop_wait(void)
{
    SATvm *p = G();
    const TABLE t = 46;
    rec64 out;

    make_queue(t, 4, sizeof(rec64));
    queuevoid(p, out, sizeof(out), t);
    CHECK_FAIL(lPopWait(p, &out, 0), p, NO_DATA_FOUND);
    long long t0 = mono_ms();
    CHECK_FAIL(lPopWait(p, &out, 150), p, MQUE_WAIT_TMO);
    CHECK_RANGE(mono_ms() - t0, 140, 1500);
    CHECK_FAIL(lPopWait(p, &out, -1), p, CONDIT_IS_NIL);
    CHECK_FAIL(lPopWait(p, NULL, 10), p, CONDIT_IS_NIL);
    CHECK_FAIL_NOH(lPopWait(NULL, &out, 10), CONDIT_IS_NIL);

    CHECK(push_n(p, t, 1));
    queuevoid(p, out, sizeof(out), t);
    p->m_lEffect = 0;
    t0 = mono_ms();
    CHECK_SUCC(lPopWait(p, &out, 5000), p);
    CHECK_RANGE(mono_ms() - t0, 0, 250);
    CHECK_EQU(p->m_lEffect, 1);
    CHECK_EQ(out.n, 1);
    CHECK_STR(out.text, "record 1");
    CHECK_EQ(depth(t), 0);

    /* A buffer shorter than the records: refused, the record stays. */
    CHECK(push_n(p, t, 1));
    queuevoid(p, out, sizeof(out) - 1, t);
    CHECK_FAIL(lPopWait(p, &out, 10), p, RECD_TOO_LONG);
    CHECK_EQ(depth(t), 1);
}

/* lGetTErrno / vSetTErrno / lGetEffect in one thread (per-thread: test_mt). */
static void errno_effect(void)
{
    SATvm *p = G();

    vSetTErrno(42);
    CHECK_EQ(lGetTErrno(), 42);
    vSetTErrno(-7);
    CHECK_EQ(lGetTErrno(), -7);
    vSetTErrno(0);
    CHECK_EQ(lGetTErrno(), 0);
    /* A failing call sets it; a succeeding one clears it. */
    CHECK_FAIL(lAttchTable(p, 1), p, TBL_NOT_FOUND);
    make_queue(1, 4, 8);
    CHECK_SUCC(lAttchTable(p, 1), p);
    CHECK_EQ(lGetTErrno(), 0);
    long v[3] = { 1, 2, 3 };
    void *base = v;
    size_t n = 3;
    queuenull(p, sizeof(long), 1);
    CHECK_SUCC(lPushs(p, &n, &base), p);
    CHECK_EQU(lGetEffect(), 3);
    CHECK_EQ(lGetTErrno(), 0);
    vSetTErrno(5); /* does not touch the effect count */
    CHECK_EQU(lGetEffect(), 3);
}

/* get_tick_time: milliseconds since the Unix epoch. */
static void tick(void)
{
    unsigned long long a = get_tick_time();
    long long now = (long long)time(NULL) * 1000;
    CHECK_RANGE((long long)a - now, -2000, 2000);
    sleep_ms(200);
    unsigned long long b = get_tick_time();
    CHECK_RANGE((long long)(b - a), 150, 1000);
}

/* Every binding macro, used the way STVM programs use them. */
static void macros(void)
{
    SATvm *p = G();
    dbUser u, arr[3], *pu = &arr[2];
    char raw[40];

    /* queueinit: size, queue, pointer, and the struct zeroed. */
    memset(&u, 0xff, sizeof(u));
    queueinit(p, u, 81);
    CHECK_EQU(p->lSize, sizeof(dbUser));
    CHECK_EQU(p->tblName, 81);
    CHECK(p->pstVoid == (void *)&u);
    {
        static const dbUser zero;
        CHECK_MEM(&u, &zero, sizeof(u));
    }
    /* With an array element and a handle expression. */
    SATvm *hs[1] = { p };
    memset(arr, 0xff, sizeof(arr));
    queueinit(hs[0], arr[1], 82);
    CHECK(p->pstVoid == (void *)&arr[1]);
    CHECK_EQ(arr[1].acct_id, 0);
    CHECK_EQ(arr[0].acct_id, -1); /* neighbours untouched */
    CHECK_EQ(arr[2].acct_id, -1);

    /* queuevoid: explicit size, no clearing. */
    memset(raw, 'r', sizeof(raw));
    queuevoid(p, raw, 12, 83);
    CHECK_EQU(p->lSize, 12);
    CHECK_EQU(p->tblName, 83);
    CHECK(p->pstVoid == (void *)raw);
    CHECK_EQ(raw[0], 'r');

    /* queuebind: pointer form, size of the pointee (not of the pointer). */
    queuebind(p, pu, 84);
    CHECK_EQU(p->lSize, sizeof(dbUser));
    CHECK_EQU(p->tblName, 84);
    CHECK(p->pstVoid == (void *)pu);
    CHECK_EQ(pu->acct_id, -1); /* no clearing */

    /* queuenull: size and queue only. */
    queuenull(p, 77, 85);
    CHECK_EQU(p->lSize, 77);
    CHECK_EQU(p->tblName, 85);
    CHECK(p->pstVoid == (void *)pu);

    /* TFree: frees and clears; NULL is fine. */
    char *m = (char *)malloc(16);
    REQUIRE(m != NULL);
    TFree(m);
    CHECK(m == NULL);
    TFree(m);
    CHECK(m == NULL);

    /* The macros are single statements (if/else without braces). */
    int branch = 0;
    if (branch)
        queueinit(p, u, 1);
    else
        branch = 2;
    if (branch == 2)
        queuenull(p, 8, 86);
    else
        branch = 3;
    CHECK_EQ(branch, 2);
    CHECK_EQU(p->tblName, 86);

    /* Round trip through queuebind. */
    make_queue(87, 2, sizeof(dbUser));
    memset(pu, 0, sizeof(*pu));
    pu->acct_id = 99;
    queuebind(p, pu, 87);
    CHECK_SUCC(lPush(p), p);
    queueinit(p, u, 87);
    CHECK_SUCC(lPop(p, &u, QUE_NOWAIT), p);
    CHECK_EQ(u.acct_id, 99);
}

/* ======================================================================== */
/* Queue files                                                              */
/* ======================================================================== */

/* Creates queue t with tvmq (so this process has never mapped it) and
 * returns its file path. */
static void tvmq_create(TABLE t, char *path, size_t len)
{
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "'%s' create %u --rows 4 --size 64 >/dev/null", getenv("TVMQ"), t);
    REQUIRE(system(cmd) == 0);
    REQUIRE(stat_value(t, "file", path, len));
}

static void write_at(const char *path, off_t off, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY);
    REQUIRE(fd >= 0);
    REQUIRE(pwrite(fd, data, len, off) == (ssize_t)len);
    close(fd);
}

/* Opening bad files: a clear error, never a crash. */
static void files(void)
{
    SATvm *p = G();
    char path[1024];
    rec64 r;

    /* Bad magic. */
    tvmq_create(90, path, sizeof(path));
    write_at(path, 0, "XXXXXXXX", 8);
    CHECK_FAIL(lAttchTable(p, 90), p, SHM_ERR_INVAL);
    bind_rec(p, &r, 90, 1);
    CHECK_FAIL(lPush(p), p, SHM_ERR_INVAL);

    /* Another layout version (the header is magic[8] then a 32-bit version,
     * which tvmq reports as "layout version 1"). */
    tvmq_create(91, path, sizeof(path));
    {
        unsigned char head[12];
        int fd = open(path, O_RDONLY);
        REQUIRE(fd >= 0);
        REQUIRE(pread(fd, head, sizeof(head), 0) == (ssize_t)sizeof(head));
        close(fd);
        unsigned int version;
        memcpy(&version, head + 8, 4);
        CHECK_EQ(version, stat_num(91, "layout version"));
        unsigned int other = 99;
        write_at(path, 8, &other, 4);
    }
    CHECK_FAIL(lAttchTable(p, 91), p, VER_NOT_MATCH);

    /* A header byte changed (geometry / checksum no longer match). */
    tvmq_create(92, path, sizeof(path));
    {
        unsigned char b = 0x5a;
        write_at(path, 24, &b, 1);
        write_at(path, 40, &b, 1);
    }
    CHECK_FAIL(lAttchTable(p, 92), p, SHM_ERR_INVAL);

    /* Truncated, empty, and extended files. */
    tvmq_create(93, path, sizeof(path));
    REQUIRE(truncate(path, 100) == 0);
    CHECK_FAIL(lAttchTable(p, 93), p, SHM_ERR_INVAL);
    REQUIRE(truncate(path, 0) == 0);
    CHECK_FAIL(lAttchTable(p, 93), p, SHM_ERR_INVAL);
    tvmq_create(94, path, sizeof(path));
    {
        struct stat st;
        REQUIRE(stat(path, &st) == 0);
        REQUIRE(truncate(path, st.st_size - 1) == 0);
        CHECK_FAIL(lAttchTable(p, 94), p, SHM_ERR_INVAL);
        REQUIRE(truncate(path, st.st_size + 4096) == 0);
        CHECK_FAIL(lAttchTable(p, 94), p, SHM_ERR_INVAL);
    }

    /* A symbolic link in place of the queue file is not followed (tvm.h:
     * SHM_ERR_ACCES), even when it points at a valid queue file. */
    tvmq_create(95, path, sizeof(path));
    {
        char moved[1200];
        snprintf(moved, sizeof(moved), "%s/elsewhere.bin", queue_dir());
        REQUIRE(rename(path, moved) == 0);
        REQUIRE(symlink(moved, path) == 0);
    }
    CHECK_FAIL(lAttchTable(p, 95), p, SHM_ERR_ACCES);
    bind_rec(p, &r, 95, 1);
    CHECK_FAIL(lPush(p), p, SHM_ERR_ACCES);

    /* A queue file owned by another user is refused (tvm.h: SHM_ERR_ACCES,
     * "foreign owner"). Needs root to give the file away. */
    tvmq_create(97, path, sizeof(path));
    if (geteuid() == 0 && chown(path, 65534, 65534) == 0) {
        CHECK_FAIL(lAttchTable(p, 97), p, SHM_ERR_ACCES);
        bind_rec(p, &r, 97, 1);
        CHECK_FAIL(lPush(p), p, SHM_ERR_ACCES);
    } else {
        fprintf(stderr, "note: not root, foreign-owner case not checked\n");
    }

    /* A good queue next to all that still works. */
    tvmq_create(96, path, sizeof(path));
    CHECK(push_n(p, 96, 1));
    EXPECT_POP(p, 96, 1);
}

/* ======================================================================== */
/* Sizes, ids, many queues                                                  */
/* ======================================================================== */

/* Fills buf with a pattern that depends on the record number and size. */
static void pattern(unsigned char *buf, size_t size, long n)
{
    for (size_t i = 0; i < size; i++)
        buf[i] = (unsigned char)((size_t)n * 131 + i * 7 + size);
}

/* Records of odd sizes (1, 3, 13, 4097 bytes, 1 MiB) go through intact,
 * across wrap-arounds of the ring. */
static void odd_record_sizes(void)
{
    static const size_t sizes[] = { 1, 3, 8, 13, 255, 4097, (size_t)1 << 20 };
    SATvm *p = G();

    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        const size_t size = sizes[k];
        const TABLE t = (TABLE)(100 + k);
        unsigned char *in = (unsigned char *)malloc(size), *out = (unsigned char *)malloc(size);
        REQUIRE(in && out);
        make_queue(t, 3, size);
        CHECK_EQ(stat_num(t, "record size"), size);
        for (long n = 0; n < 10; n++) { /* 10 records through 3 slots */
            pattern(in, size, n);
            queuevoid(p, *in, size, t);
            CHECK_SUCC(lPush(p), p);
            memset(out, 0xee, size);
            queuevoid(p, *out, size, t);
            CHECK_SUCC(lPop(p, out, QUE_NOWAIT), p);
            if (memcmp(in, out, size) != 0)
                fail_at(__FILE__, __LINE__, "record size %zu, record %ld: content differs", size, n);
        }
        /* Full ring of them, then out in order. */
        for (long n = 0; n < 3; n++) {
            pattern(in, size, 100 + n);
            queuevoid(p, *in, size, t);
            CHECK_SUCC(lPush(p), p);
        }
        for (long n = 0; n < 3; n++) {
            pattern(in, size, 100 + n);
            queuevoid(p, *out, size, t);
            CHECK_SUCC(lPop(p, out, QUE_NOWAIT), p);
            if (memcmp(in, out, size) != 0)
                fail_at(__FILE__, __LINE__, "record size %zu, record %ld: content differs", size,
                        100 + n);
        }
        CHECK_SUCC(lDropTable(p, t), p);
        free(in);
        free(out);
    }
}

/* Queue ids are any TABLE value: 0, 1, 65536, UINT_MAX. */
static void queue_ids(void)
{
    static const TABLE ids[] = { 0, 1, 65536, UINT_MAX - 1, UINT_MAX };
    SATvm *p = G();

    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        long v = (long)i;
        CHECK_SUCC(lCircleQueue(p, ids[i], 2, sizeof(long), NULL, NULL), p);
        queuevoid(p, v, sizeof(v), ids[i]);
        CHECK_SUCC(lPush(p), p);
    }
    CHECK_EQ(dir_entries(), 5);
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        long v = -1;
        queuevoid(p, v, sizeof(v), ids[i]);
        CHECK_SUCC(lPop(p, &v, QUE_NOWAIT), p);
        CHECK_EQ(v, (long)i);
        CHECK_SUCC(lDropTable(p, ids[i]), p);
    }
    CHECK_EQ(dir_entries(), 0);
}

/* 200 queues used at once by one process, through one handle and a clone. */
static void many_queues(void)
{
    SATvm *p = G();
    SATvm *c = (SATvm *)pCloneSATvm();
    REQUIRE(c != NULL);

    for (TABLE t = 1000; t < 1200; t++)
        make_queue(t, 4, sizeof(rec64));
    for (int round = 0; round < 2; round++)
        for (TABLE t = 1000; t < 1200; t++)
            CHECK(push_n(round ? c : p, t, (long)t * 10 + round));
    for (TABLE t = 1000; t < 1200; t++) {
        EXPECT_POP(c, t, (long)t * 10);
        EXPECT_POP(p, t, (long)t * 10 + 1);
    }
    for (TABLE t = 1000; t < 1200; t += 50)
        EXPECT_EMPTY(p, t);
    vCloneFree(c);
}

/* Very long name and partition strings: no crash; if accepted, the queue
 * works. */
static void long_names(void)
{
    SATvm *p = G();
    size_t len = 10000;
    char *name = (char *)malloc(len + 1), *part = (char *)malloc(len + 1);
    REQUIRE(name && part);
    memset(name, 'n', len);
    name[len] = '\0';
    memset(part, 'p', len);
    part[len] = '\0';
    long rc = lCircleQueue(p, 110, 2, sizeof(rec64), name, part);
    if (rc == RC_SUCC) {
        CHECK(push_n(p, 110, 1));
        EXPECT_POP(p, 110, 1);
    } else {
        CHECK_EQ(rc, RC_FAIL);
        CHECK(p->m_lErrno != 0);
        CHECK_EQ(dir_entries(), 0);
    }
    free(name);
    free(part);
}

/* $TVMDBD naming a directory that does not exist: queues are not found
 * there (TBL_NOT_FOUND); creating one either makes the directory (and the
 * queue works) or fails cleanly. */
static void missing_dir(void)
{
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s/missing/sub", queue_dir());
    REQUIRE(setenv("TVMDBD", dir, 1) == 0); /* before any library call */
    SATvm *p = G();
    rec64 r;

    CHECK_FAIL(lAttchTable(p, 1), p, TBL_NOT_FOUND);
    bind_rec(p, &r, 1, 1);
    CHECK_FAIL(lPush(p), p, TBL_NOT_FOUND);
    CHECK_FAIL(lDropTable(p, 1), p, TBL_NOT_FOUND);
    long rc = lCircleQueue(p, 1, 2, sizeof(rec64), NULL, NULL);
    if (rc == RC_SUCC) {
        CHECK(push_n(p, 1, 5));
        EXPECT_POP(p, 1, 5);
    } else {
        CHECK_EQ(rc, RC_FAIL);
        CHECK(p->m_lErrno != 0);
    }
}

/* lSyncQueue on a queue that cannot be durable (the tests' directory is on
 * tmpfs): NOT_DURABLE, and the queue is untouched; a missing queue:
 * TBL_NOT_FOUND. (Durable queues are tested from Rust and the CLI, on a disk.) */
static void sync_queue(void)
{
    const TABLE t = 19;
    SATvm *p = G();

    make_queue(t, 4, sizeof(rec64));
    CHECK(push_n(p, t, 2));
    CHECK_FAIL(lSyncQueue(p, t), p, NOT_DURABLE);
    CHECK_FAIL(lSyncQueue(p, 18), p, TBL_NOT_FOUND);
    EXPECT_POP(p, t, 2);
}

TEST_MAIN(T(handle_global), T(handle_clone), T(handle_hold), T(null_handle), T(attach),
          T(disconnect), T(several_queues), T(create_capacity), T(create_errors), T(create_names), T(table_queue),
          T(table_queue_errors), T(drop), T(drop_by_other_process), T(push), T(push_attaches),
          T(pop), T(pop_sizes), T(pop_fifo), T(popup), T(popup_timeout), T(popup_args),
          T(pushs), T(error_text), T(error_names), T(pop_wait), T(errno_effect), T(tick), T(macros), T(files),
          T(odd_record_sizes), T(queue_ids), T(many_queues), T(long_names), T(missing_dir),
          T(sync_queue))
