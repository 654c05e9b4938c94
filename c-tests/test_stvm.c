/*
 * test_stvm.c: STVM's remaining queue calls and constants (handles,
 * questions, lResetLock, lCount, lTruncate, lExportFile / lImportFile,
 * lDumpTable), QUEUE naming the queue after its first argument, and
 * lCreateQueueEx for every kind of queue; each with its success and error
 * paths, NULL and hostile arguments.
 *
 * Run by run.sh as `test_stvm NAME` in a fresh, empty $TVMDBD, like
 * test_api. `test_stvm --list` lists the tests.
 */
#include "check.h"

#include <pthread.h>

/* A record with a field of every kind and width text can show. */
typedef struct {
    char name[12];
    long n;
    int small;
    double x;
    float y;
    short tiny;
    signed char byte;
} allKinds;

#define QUEUE_ALL_KINDS 60

static CREATE lAllKinds(TABLE t)
{
    (void)t;
    QUEUE(QUEUE_ALL_KINDS, "pAll", allKinds)
    FIELD(allKinds, name, FIELD_CHAR)
    FIELD(allKinds, n, FIELD_LONG)
    FIELD(allKinds, small, FIELD_LONG)
    FIELD(allKinds, x, FIELD_DOUB)
    FIELD(allKinds, y, FIELD_DOUB)
    FIELD(allKinds, tiny, FIELD_LONG)
    FIELD(allKinds, byte, FIELD_LONG)
    FINISH
}

static void fill_all(allKinds *r, long i)
{
    memset(r, 0, sizeof(*r));
    snprintf(r->name, sizeof(r->name), "n|%ld\\", i);
    r->n = i * 1000003L - 7;
    r->small = (int)(i % 100000) - 50000;
    r->x = (double)i / 7.0;
    r->y = (float)i / 3.0f;
    r->tiny = (short)(i % 30000);
    r->byte = (signed char)(i % 120);
}

/* Field by field (padding is not exported as text). */
static int same_all(const allKinds *a, const allKinds *b)
{
    return strcmp(a->name, b->name) == 0 && a->n == b->n && a->small == b->small && a->x == b->x &&
           a->y == b->y && a->tiny == b->tiny && a->byte == b->byte;
}

static void make_all_kinds(void)
{
    SATvm *p = G();
    REQUIRE_SUCC(lTableQueue(p, QUEUE_ALL_KINDS, 1000, lAllKinds), p);
}

/* ---- constants and naming ---------------------------------------------- */

static void constants_of_stvm(void)
{
    CHECK_EQ(RC_MATCH, 2);
    CHECK_EQ(RC_MISMA, 1);
    CHECK_EQ(RC_CONTU, -5);
    CHECK_EQ(RC_CLOSE, -9);
    const char *v = TVM_VERSION;
    CHECK(strlen(v) > 0 && strchr(v, '.') != NULL);
}

#define QUEUE_USER_INFO 61
typedef struct {
    long acct_id;
    char user_no[21];
} dbUser;

static CREATE lQueueUserInfo(TABLE t)
{
    (void)t;
    QUEUE(QUEUE_USER_INFO, "", dbUser)
    FIELD(dbUser, acct_id, FIELD_LONG)
    FINISH
}

static CREATE lDefineNumbered(TABLE t)
{
    (void)t;
    DEFINE(62, "", dbUser);
    FIELD(dbUser, user_no, FIELD_CHAR);
    FINISH
}

/* QUEUE/DEFINE name the queue after their first argument as written. */
static void queue_macro_names_as_stvm(void)
{
    SATvm *p = G();
    char name[128];
    REQUIRE_SUCC(lTableQueue(p, QUEUE_USER_INFO, 10, lQueueUserInfo), p);
    REQUIRE(stat_value(QUEUE_USER_INFO, "name", name, sizeof(name)));
    CHECK_STR(name, "QUEUE_USER_INFO");
    REQUIRE_SUCC(lTableQueue(p, 62, 10, lDefineNumbered), p);
    REQUIRE(stat_value(62, "name", name, sizeof(name)));
    CHECK_STR(name, "62");
}

/* ---- handles ------------------------------------------------------------ */

static void handles_init_clone_disconnect(void)
{
    SATvm *g = G();
    vSetTErrno(0);
    CHECK(pInitSATvm(63) == NULL);
    CHECK_EQ(lGetTErrno(), TBL_NOT_FOUND);
    make_queue(63, 4, sizeof(rec64));
    SATvm *p = (SATvm *)pInitSATvm(63);
    CHECK(p == g);
    CHECK_EQU(p->tblName, 63);
    CHECK_EQ(lGetTErrno(), 0);

    /* A handle on the stack, initialised by vInitSATvm, works. */
    SATvm s;
    memset(&s, 0xA5, sizeof(s));
    vInitSATvm(&s);
    CHECK_EQU(s.lSize, 0);
    CHECK_EQU(s.tblName, 0);
    CHECK(s.pstVoid == NULL);
    CHECK(push_n(&s, 63, 1));
    CHECK_EQU(s.m_lEffect, 1);
    vInitSATvm(NULL);

    /* vCloneQueue on a clone; vForceDisconnect; the queue still works. */
    SATvm *c = (SATvm *)pCloneSATvm();
    REQUIRE(c != NULL);
    vCloneQueue(c, 63);
    CHECK_EQ(c->m_lErrno, 0);
    vCloneQueue(c, 64);
    CHECK_EQ(c->m_lErrno, TBL_NOT_FOUND);
    vForceDisconnect(c, 63);
    CHECK_EQ(c->m_lErrno, 0);
    CHECK(push_n(c, 63, 2));
    rec64 out;
    queueinit(c, out, 63);
    CHECK_SUCC(lPop(c, &out, QUE_NOWAIT), c);
    CHECK_EQ(out.n, 1);
    vCloneFree(c);

    vSetTErrno(0);
    vCloneQueue(NULL, 63);
    CHECK_EQ(lGetTErrno(), CONDIT_IS_NIL);
    vSetTErrno(0);
    vForceDisconnect(NULL, 63);
    CHECK_EQ(lGetTErrno(), CONDIT_IS_NIL);
}

/* ---- questions -------------------------------------------------------- */

static void questions_about_a_queue(void)
{
    SATvm *p = G();
    make_queue(65, 7, sizeof(rec64));
    for (long i = 0; i < 3; i++)
        CHECK(push_n(p, 65, i));
    CHECK_EQU(lGetTblRow(65), 7);
    CHECK_EQU(lGetTblValid(65), 3);
    CHECK_EQ(lGetRowSize(65), (long)sizeof(rec64));
    CHECK(bTableIsExist(65));
    CHECK_EQ(lGetTErrno(), 0);

    size_t n = 99;
    p->tblName = 65;
    CHECK_SUCC(lCount(p, &n), p);
    CHECK_EQU(n, 3);
    CHECK_EQU(p->m_lEffect, 3);

    /* A queue that does not exist, and hostile ids. */
    TABLE missing[] = { 66, 0, UINT_MAX };
    for (size_t i = 0; i < sizeof(missing) / sizeof(missing[0]); i++) {
        TABLE t = missing[i];
        vSetTErrno(0);
        CHECK_EQU(lGetTblRow(t), 0);
        CHECK_EQ(lGetTErrno(), TBL_NOT_FOUND);
        CHECK_EQU(lGetTblValid(t), 0);
        CHECK_EQ(lGetTErrno(), TBL_NOT_FOUND);
        CHECK_EQ(lGetRowSize(t), RC_FAIL);
        CHECK_EQ(lGetTErrno(), TBL_NOT_FOUND);
        CHECK(!bTableIsExist(t));
        CHECK_EQ(lGetTErrno(), TBL_NOT_FOUND);
        p->tblName = t;
        CHECK_FAIL(lCount(p, &n), p, TBL_NOT_FOUND);
    }
    p->tblName = 65;
    CHECK_FAIL(lCount(p, NULL), p, CONDIT_IS_NIL);
    CHECK_FAIL_NOH(lCount(NULL, &n), CONDIT_IS_NIL);
}

/* ---- lResetLock --------------------------------------------------------- */

static void reset_lock_is_the_repair(void)
{
    SATvm *p = G();
    make_queue(67, 4, sizeof(rec64));
    CHECK(push_n(p, 67, 1));
    CHECK_SUCC(lResetLock(p, 67), p);
    CHECK_EQU(p->m_lEffect, 0);
    CHECK_EQU(lGetTblValid(67), 1);
    CHECK_FAIL(lResetLock(p, 68), p, TBL_NOT_FOUND);
    CHECK_FAIL_NOH(lResetLock(NULL, 67), CONDIT_IS_NIL);

    /* A consumer killed while it held a record: the repair delivers it again. */
    make_queue(69, 4, sizeof(rec64));
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        /* Block in lPop; the parent pushes, then kills us at some instant. */
        SATvm *c = G();
        rec64 out;
        queueinit(c, out, 69);
        for (;;)
            lPop(c, &out, QUE_NORMAL);
    }
    remember_child(pid);
    sleep_ms(100);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    forget_child(pid);
    CHECK_SUCC(lResetLock(p, 69), p);
    CHECK(push_n(p, 69, 5));
    rec64 out;
    queueinit(p, out, 69);
    CHECK_SUCC(lPop(p, &out, QUE_NOWAIT), p);
    CHECK_EQ(out.n, 5);
}

/* ---- lTruncate ------------------------------------------------------- */

struct waiter {
    TABLE t;
    long rc, n;
};

static void *blocked_pop(void *arg)
{
    struct waiter *w = arg;
    SATvm *c = (SATvm *)pCloneSATvm();
    rec64 out;
    queueinit(c, out, w->t);
    w->rc = lPop(c, &out, QUE_NORMAL);
    w->n = out.n;
    vCloneFree(c);
    return NULL;
}

static void truncate_empties_without_disturbing(void)
{
    SATvm *p = G();
    make_queue(70, 100, sizeof(rec64));
    for (long i = 0; i < 50; i++)
        CHECK(push_n(p, 70, i));
    CHECK_SUCC(lTruncate(p, 70), p);
    CHECK_EQU(p->m_lEffect, 50);
    CHECK_EQU(lGetTblValid(70), 0);
    CHECK_EQU(lGetTblRow(70), 100);
    CHECK_SUCC(lTruncate(p, 70), p);
    CHECK_EQU(p->m_lEffect, 0);

    /* A consumer blocked on the empty queue is not woken into an error:
     * it gets the next record pushed after the truncation. */
    struct waiter w = { 70, -99, -1 };
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, blocked_pop, &w) == 0);
    sleep_ms(100);
    CHECK_SUCC(lTruncate(p, 70), p);
    sleep_ms(50);
    CHECK_EQ(__atomic_load_n(&w.rc, __ATOMIC_SEQ_CST), -99);
    CHECK(push_n(p, 70, 777));
    pthread_join(th, NULL);
    CHECK_EQ(w.rc, RC_SUCC);
    CHECK_EQ(w.n, 777);

    /* Pushes go on at once; the queue is whole. */
    for (long i = 0; i < 100; i++)
        CHECK(push_n(p, 70, i));
    CHECK_SUCC(lTruncate(p, 70), p);
    CHECK_EQU(p->m_lEffect, 100);

    CHECK_FAIL(lTruncate(p, 71), p, TBL_NOT_FOUND);
    CHECK_FAIL_NOH(lTruncate(NULL, 70), CONDIT_IS_NIL);
}

/* ---- export and import ------------------------------------------------ */

static void path_in_dir(char *out, size_t len, const char *file)
{
    snprintf(out, len, "%s/%s", queue_dir(), file);
}

static void export_import_text_of_every_field_kind(void)
{
    SATvm *p = G();
    char file[1024];
    path_in_dir(file, sizeof(file), "all.txt");
    make_all_kinds();
    allKinds r;
    for (long i = 0; i < 100; i++) {
        queueinit(p, r, QUEUE_ALL_KINDS);
        fill_all(&r, i);
        CHECK_SUCC(lPush(p), p);
    }
    vSetTErrno(0);
    CHECK_EQ(lExportFile(QUEUE_ALL_KINDS, file, (char *)"|"), RC_SUCC);
    CHECK_EQU(lGetEffect(), 100);
    CHECK_EQU(lGetTblValid(QUEUE_ALL_KINDS), 100); /* nothing consumed */

    /* STVM's form: one line per record, fields separated by "|". */
    FILE *f = fopen(file, "r");
    REQUIRE(f != NULL);
    char line[512];
    REQUIRE(fgets(line, sizeof(line), f) != NULL);
    CHECK_STR(line, "n\\x7c0\\x5c|-7|-50000|0.0|0.0|0|0\n");
    fclose(f);

    /* Into an empty copy of the queue: the same records, in order. */
    CHECK_SUCC(lTruncate(p, QUEUE_ALL_KINDS), p);
    CHECK_EQ(lImportFile(QUEUE_ALL_KINDS, file, (char *)"|"), RC_SUCC);
    CHECK_EQU(lGetEffect(), 100);
    allKinds out, want;
    for (long i = 0; i < 100; i++) {
        queueinit(p, out, QUEUE_ALL_KINDS);
        REQUIRE_SUCC(lPop(p, &out, QUE_NOWAIT), p);
        fill_all(&want, i);
        CHECK(same_all(&out, &want));
    }
    /* The wrong separator: lines do not split into the fields. */
    CHECK_FAIL_NOH(lImportFile(QUEUE_ALL_KINDS, file, (char *)";"), FLD_NOT_EXIST);
    CHECK_FAIL_NOH(lImportFile(QUEUE_ALL_KINDS, file, NULL), CONDIT_IS_NIL);
}

static void export_import_binary_byte_for_byte(void)
{
    SATvm *p = G();
    char file[1024];
    path_in_dir(file, sizeof(file), "plain.bin");
    make_queue(72, 10, 32);
    unsigned char rec[32];
    for (int i = 0; i < 6; i++) {
        for (int j = 0; j < 32; j++)
            rec[j] = (unsigned char)(i * 31 + j * 7);
        queuevoid(p, rec, (size_t)(1 + i * 5), 72); /* lengths 1 to 26 */
        CHECK_SUCC(lPush(p), p);
    }
    /* No field list: the binary form whatever the separator. */
    CHECK_EQ(lExportFile(72, file, (char *)","), RC_SUCC);
    CHECK_EQU(lGetEffect(), 6);
    CHECK_EQU(lGetTblValid(72), 6);

    make_queue(73, 10, 40); /* longer records take it */
    CHECK_EQ(lImportFile(73, file, NULL), RC_SUCC);
    CHECK_EQU(lGetEffect(), 6);
    for (int i = 0; i < 6; i++) {
        unsigned char out[40];
        queuevoid(p, out, sizeof(out), 73);
        REQUIRE_SUCC(lPop(p, out, QUE_NOWAIT), p);
        for (int j = 0; j < 40; j++)
            CHECK_EQ(out[j], j < 1 + i * 5 ? (unsigned char)(i * 31 + j * 7) : 0);
    }

    /* A full queue stops the import with the count of what went in. */
    make_queue(74, 4, 32);
    CHECK_FAIL_NOH(lImportFile(74, file, NULL), DATA_SPC_FULL);
    CHECK_EQU(lGetEffect(), 4);
    CHECK_EQU(lGetTblValid(74), 4);
    /* Records longer than the queue's: nothing pushed. */
    make_queue(75, 10, 8);
    CHECK_FAIL_NOH(lImportFile(75, file, NULL), RECD_TOO_LONG);
    CHECK_EQU(lGetTblValid(75), 0);
    /* A cut file: what came before the damage, then SHM_ERR_INVAL. */
    REQUIRE(truncate(file, 60) == 0);
    make_queue(76, 10, 32);
    CHECK_FAIL_NOH(lImportFile(76, file, NULL), SHM_ERR_INVAL);
    CHECK_RANGE(lGetEffect(), 0, 3);

    /* lDumpTable: the binary export into $TVMDBD/<t>.sdb. */
    CHECK_SUCC(lDumpTable(p, 72), p);
    CHECK_EQU(p->m_lEffect, 6);
    char dump[1024];
    path_in_dir(dump, sizeof(dump), "72.sdb");
    make_queue(77, 10, 32);
    CHECK_EQ(lImportFile(77, dump, NULL), RC_SUCC);
    CHECK_EQU(lGetEffect(), 6);
    CHECK_FAIL(lDumpTable(p, 78), p, TBL_NOT_FOUND);
    CHECK_FAIL_NOH(lDumpTable(NULL, 72), CONDIT_IS_NIL);
}

static void export_import_errors(void)
{
    char file[1024], missing[1024];
    path_in_dir(file, sizeof(file), "e.txt");
    path_in_dir(missing, sizeof(missing), "no/such/dir/x");
    make_queue(79, 4, 16);
    CHECK_FAIL_NOH(lExportFile(79, NULL, NULL), CONDIT_IS_NIL);
    CHECK_FAIL_NOH(lExportFile(79, (char *)"", NULL), CONDIT_IS_NIL);
    CHECK_FAIL_NOH(lExportFile(80, file, NULL), TBL_NOT_FOUND);
    CHECK_FAIL_NOH(lExportFile(79, missing, NULL), FILE_NOTFOUND);
    CHECK_FAIL_NOH(lImportFile(79, missing, NULL), FILE_NOTFOUND);
    CHECK_FAIL_NOH(lImportFile(79, NULL, NULL), CONDIT_IS_NIL);
    /* Text into a queue without a field list. */
    FILE *f = fopen(file, "w");
    REQUIRE(f != NULL);
    fputs("1|2|3\n", f);
    fclose(f);
    CHECK_FAIL_NOH(lImportFile(79, file, (char *)"|"), FIELD_NOT_DEF);
    /* Bad text into a queue with fields: the line is named, nothing pushed. */
    make_all_kinds();
    /* A separator a field's text can hold is refused. */
    char other[1024];
    path_in_dir(other, sizeof(other), "sep.txt");
    CHECK_FAIL_NOH(lExportFile(QUEUE_ALL_KINDS, other, (char *)"x"), CONDIT_IS_NIL);
    CHECK_FAIL_NOH(lExportFile(QUEUE_ALL_KINDS, other, (char *)"-"), CONDIT_IS_NIL);
    CHECK_FAIL_NOH(lImportFile(QUEUE_ALL_KINDS, file, (char *)"1"), CONDIT_IS_NIL);
    CHECK_FAIL_NOH(lImportFile(QUEUE_ALL_KINDS, file, (char *)"|"), FLD_NOT_EXIST);
    f = fopen(file, "w");
    REQUIRE(f != NULL);
    fputs("ok|1|2|3.5|4.5|5|6\nbad|x|2|3|4|5|6\n", f);
    fclose(f);
    CHECK_FAIL_NOH(lImportFile(QUEUE_ALL_KINDS, file, (char *)"|"), IDX_DATA_MISM);
    CHECK_EQU(lGetEffect(), 1);
    /* A symbolic link is not followed by an export. */
    char link[1024];
    path_in_dir(link, sizeof(link), "link.txt");
    REQUIRE(symlink(file, link) == 0);
    vSetTErrno(0);
    CHECK_EQ(lExportFile(79, link, NULL), RC_FAIL);
    CHECK(lGetTErrno() != 0);
}

/* ---- lCreateQueueEx ----------------------------------------------------- */

static void create_ex_plain_and_with_fields(void)
{
    SATvm *p = G();
    TvmQueueOptions o;
    char v[256];
    CHECK_EQ(lInitQueueOptions(&o, sizeof(o)), RC_SUCC);
    CHECK_EQU(o.size, sizeof(o));
    CHECK_EQU(o.mode, 0600);
    o.rows = 5;
    o.record_size = 48;
    o.name = "PLAIN";
    o.part = "p1";
    o.mode = 0640;
    o.unblock_timeout_ms = 1234;
    o.has_spin = true;
    o.spin_us = 250;
    CHECK_SUCC(lCreateQueueEx(p, 81, &o), p);
    CHECK_EQU(lGetTblRow(81), 5);
    CHECK_EQ(lGetRowSize(81), 48);
    REQUIRE(stat_value(81, "name", v, sizeof(v)));
    CHECK_STR(v, "PLAIN");
    REQUIRE(stat_value(81, "partition", v, sizeof(v)));
    CHECK_STR(v, "p1");
    REQUIRE(stat_value(81, "mode", v, sizeof(v)));
    CHECK_STR(v, "0640");
    REQUIRE(stat_value(81, "unblock timeout", v, sizeof(v)));
    CHECK_STR(v, "1234 ms");
    REQUIRE(stat_value(81, "pop wait", v, sizeof(v)));
    CHECK_STR(v, "spin 250 us, then sleep");
    CHECK_FAIL(lCreateQueueEx(p, 81, &o), p, TBL_ARD_EXIST);

    /* spin -1: never sleep. */
    o.spin_us = -1;
    o.name = NULL;
    CHECK_SUCC(lCreateQueueEx(p, 82, &o), p);
    REQUIRE(stat_value(82, "pop wait", v, sizeof(v)));
    CHECK_STR(v, "spin, never sleep");

    /* A field list: the record size and name from def's QUEUE. */
    CHECK_EQ(lInitQueueOptions(&o, sizeof(o)), RC_SUCC);
    o.rows = 100;
    o.def = lAllKinds;
    CHECK_SUCC(lCreateQueueEx(p, QUEUE_ALL_KINDS, &o), p);
    CHECK_EQ(lGetRowSize(QUEUE_ALL_KINDS), (long)sizeof(allKinds));
    REQUIRE(stat_value(QUEUE_ALL_KINDS, "name", v, sizeof(v)));
    CHECK_STR(v, "QUEUE_ALL_KINDS");
    REQUIRE(stat_value(QUEUE_ALL_KINDS, "fields", v, sizeof(v)));
    CHECK_STR(v, "7");
    /* def for another queue than the one created: its QUEUE refuses. */
    CHECK_FAIL(lCreateQueueEx(p, 83, &o), p, TABLE_NOT_DEF);
}

static void create_ex_leases(void)
{
    SATvm *p = G();
    TvmQueueOptions o;
    REQUIRE(lInitQueueOptions(&o, sizeof(o)) == RC_SUCC);
    o.rows = 10;
    o.record_size = sizeof(rec64);
    o.leases = true;
    o.lease_ms = 5000;
    o.max_deliveries = 3;
    o.has_dead_letter = true;
    o.dead_letter = 85;
    o.max_leases = 2;
    CHECK_SUCC(lCreateQueueEx(p, 84, &o), p);
    char v[256];
    REQUIRE(stat_value(84, "leases", v, sizeof(v)));
    CHECK_STR(v, "5000 ms by default, at most 2 in flight");
    REQUIRE(stat_value(84, "  max deliveries", v, sizeof(v)));
    CHECK_STR(v, "3");
    CHECK(push_n(p, 84, 1));
    rec64 out;
    TvmLease l;
    queueinit(p, out, 84);
    CHECK_SUCC(lPopLease(p, &out, QUE_NOWAIT, 0, &l), p);
    CHECK_EQ(out.n, 1);
    CHECK_SUCC(lAck(p, &l), p);

    /* The checks tvmq create makes: a queue is not its own dead-letter queue. */
    o.dead_letter = 184;
    CHECK_FAIL(lCreateQueueEx(p, 184, &o), p, NOT_SUPPT_OPT);
    o.max_deliveries = 70000;
    o.dead_letter = 85;
    CHECK_FAIL(lCreateQueueEx(p, 184, &o), p, CONDIT_IS_NIL);
}

static void create_ex_durable(void)
{
    SATvm *p = G();
    TvmQueueOptions o;
    REQUIRE(lInitQueueOptions(&o, sizeof(o)) == RC_SUCC);
    o.rows = 10;
    o.record_size = 16;
    o.durable = TVM_DURABLE_ALWAYS;
    /* $TVMDBD is on /dev/shm (tmpfs): a durable queue is refused there. */
    CHECK_FAIL(lCreateQueueEx(p, 86, &o), p, NOT_DURABLE);

    /* On a disk: each policy. */
    char dir[] = "/var/tmp/tvmq-ctest-durable.XXXXXX";
    if (mkdtemp(dir) == NULL) {
        snprintf(dir, sizeof(dir), "%s", "/tmp/tvmq-ctest-dur.XXXXXX");
        REQUIRE(mkdtemp(dir) != NULL);
    }
    setenv("TVMDBD", dir, 1);
    CHECK_SUCC(lCreateQueueEx(p, 86, &o), p);
    o.durable = TVM_DURABLE_INTERVAL;
    o.durable_interval_ms = 50;
    CHECK_SUCC(lCreateQueueEx(p, 87, &o), p);
    char cmd[2048], line[256];
    snprintf(cmd, sizeof(cmd), "TVMDBD='%s' '%s' stat 87", dir, getenv("TVMQ"));
    FILE *f = popen(cmd, "r");
    REQUIRE(f != NULL);
    int seen = 0;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, "durable          interval=50", 28) == 0)
            seen = 1;
    pclose(f);
    CHECK(seen);
    o.durable_interval_ms = 0;
    CHECK_FAIL(lCreateQueueEx(p, 88, &o), p, CONDIT_IS_NIL);
    o.durable = 7;
    CHECK_FAIL(lCreateQueueEx(p, 88, &o), p, NOT_SUPPT_OPT);
    /* Durable with leases, with either policy (leases and acknowledgements
     * survive a machine crash: with interval=MS, those of the last sync). */
    o.durable = TVM_DURABLE_INTERVAL;
    o.durable_interval_ms = 50;
    o.leases = true;
    CHECK_SUCC(lCreateQueueEx(p, 88, &o), p);
    CHECK_EQU(lGetTblRow(88), 10);
    CHECK_SUCC(lDropTable(p, 88), p);
    CHECK_EQU(lGetTblRow(88), 0);
    o.durable = TVM_DURABLE_ALWAYS;
    o.durable_interval_ms = 0;
    CHECK_SUCC(lCreateQueueEx(p, 88, &o), p);
    CHECK_EQU(lGetTblRow(88), 10);
    /* Dropped, not only removed with the directory: the live part of an
     * interval or always queue without leases is a file in
     * /dev/shm/tvmq-<uid>, which the drop removes. */
    CHECK_SUCC(lDropTable(p, 86), p);
    CHECK_SUCC(lDropTable(p, 87), p);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

static void create_ex_hostile(void)
{
    SATvm *p = G();
    TvmQueueOptions o;
    CHECK_FAIL_NOH(lInitQueueOptions(NULL, sizeof(o)), CONDIT_IS_NIL);
    CHECK_FAIL_NOH(lInitQueueOptions(&o, 0), CONDIT_IS_NIL);
    CHECK_FAIL_NOH(lInitQueueOptions(&o, sizeof(o) - 1), CONDIT_IS_NIL);
    CHECK_FAIL(lCreateQueueEx(p, 90, NULL), p, CONDIT_IS_NIL);
    REQUIRE(lInitQueueOptions(&o, sizeof(o)) == RC_SUCC);
    CHECK_FAIL_NOH(lCreateQueueEx(NULL, 90, &o), CONDIT_IS_NIL);
    /* No rows, no size. */
    CHECK_FAIL(lCreateQueueEx(p, 90, &o), p, CONDIT_IS_NIL);
    o.rows = 4;
    CHECK_FAIL(lCreateQueueEx(p, 90, &o), p, CONDIT_IS_NIL);
    o.record_size = 8;
    o.size = 0;
    CHECK_FAIL(lCreateQueueEx(p, 90, &o), p, CONDIT_IS_NIL);
    o.size = sizeof(o);
    o.mode = 01777;
    CHECK_FAIL(lCreateQueueEx(p, 90, &o), p, CONDIT_IS_NIL);
    o.mode = 0600;
    o.has_spin = true;
    o.spin_us = -2;
    CHECK_FAIL(lCreateQueueEx(p, 90, &o), p, CONDIT_IS_NIL);
    o.has_spin = false;
    o.rows = (size_t)1 << 41;
    CHECK_FAIL(lCreateQueueEx(p, 90, &o), p, MQUE_CRTE_BIG);
    o.rows = 4;
    o.leases = true;
    o.lease_ms = 0;
    CHECK_FAIL(lCreateQueueEx(p, 90, &o), p, CONDIT_IS_NIL);
    o.lease_ms = 100;
    o.max_leases = 0;
    CHECK_FAIL(lCreateQueueEx(p, 90, &o), p, CONDIT_IS_NIL);
    o.max_leases = 1;
    o.has_dead_letter = true;
    o.dead_letter = 90;
    CHECK_FAIL(lCreateQueueEx(p, 90, &o), p, NOT_SUPPT_OPT);
    o.has_dead_letter = false;
    CHECK_EQU(lGetTblRow(90), 0); /* none of the above made it */

    /* A struct of a later tvm.h: unknown members must be zero. */
    struct {
        TvmQueueOptions o;
        unsigned long long later[4];
    } big;
    REQUIRE(lInitQueueOptions(&big.o, sizeof(big)) == RC_SUCC);
    CHECK_EQU(big.later[0] | big.later[1] | big.later[2] | big.later[3], 0);
    big.o.rows = 2;
    big.o.record_size = 8;
    CHECK_SUCC(lCreateQueueEx(p, 91, &big.o), p);
    big.later[2] = 1;
    CHECK_FAIL(lCreateQueueEx(p, 92, &big.o), p, NOT_SUPPT_OPT);
    /* Names longer than the header keeps are cut, as lCircleQueue does. */
    char longname[300];
    memset(longname, 'x', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    REQUIRE(lInitQueueOptions(&o, sizeof(o)) == RC_SUCC);
    o.rows = 2;
    o.record_size = 8;
    o.name = longname;
    o.part = longname;
    CHECK_SUCC(lCreateQueueEx(p, 93, &o), p);
}

TEST_MAIN(T(constants_of_stvm), T(queue_macro_names_as_stvm), T(handles_init_clone_disconnect),
          T(questions_about_a_queue), T(reset_lock_is_the_repair), T(truncate_empties_without_disturbing),
          T(export_import_text_of_every_field_kind), T(export_import_binary_byte_for_byte),
          T(export_import_errors), T(create_ex_plain_and_with_fields), T(create_ex_leases),
          T(create_ex_durable), T(create_ex_hostile))
