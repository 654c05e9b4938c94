/*
 * hdr_api.c: checks of tvm.h itself. One source, built three ways by run.sh:
 *   gcc -std=gnu17 -Wall -Wextra -Werror
 *   gcc -std=c99   -Wall -Werror          (no feature-test macro)
 *   g++ -std=c++17 -Wall -Werror -x c++   (C++: must compile, link and run)
 * then run (in a fresh $TVMDBD). A wrong type in the header is a compile
 * error (pointer assignments below, plus std::is_same in C++); wrong values
 * and misbehaving macros are reported at run time. Exit 0 = all good.
 *
 * Only tvm.h is included (plus our code table): the header must bring in
 * stdio, stdlib, string, pthread, time, unistd, stddef and stdbool itself,
 * as STVM programs rely on it.
 */
#include "tvm.h"
#include "../codes.h"

#ifdef __cplusplus
#include <type_traits>
/* C++: the exact types the spec gives. */
static_assert(std::is_same<TABLE, unsigned int>::value, "TABLE is unsigned int");
static_assert(std::is_same<Uenum, unsigned int>::value, "Uenum is unsigned int");
static_assert(std::is_same<CREATE, long>::value, "CREATE is long");
static_assert(std::is_same<TCREATE, long (*)(TABLE)>::value, "TCREATE is long (*)(TABLE)");
static_assert(std::is_same<decltype(SATvm::lSize), size_t>::value, "lSize is size_t");
static_assert(std::is_same<decltype(SATvm::tblName), TABLE>::value, "tblName is TABLE");
static_assert(std::is_same<decltype(SATvm::pstVoid), void *>::value, "pstVoid is void *");
static_assert(std::is_same<decltype(SATvm::m_lErrno), Uenum>::value, "m_lErrno is Uenum");
static_assert(std::is_same<decltype(SATvm::m_lEffect), size_t>::value, "m_lEffect is size_t");
static_assert(std::is_same<decltype(get_tick_time()), unsigned long long>::value,
              "get_tick_time returns unsigned long long");
#endif

static int failures;

#define EXPECT(cond)                                                          \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, \
                    #cond);                                                   \
            failures++;                                                       \
        }                                                                     \
    } while (0)

#define EXPECT_EQ(a, b)                                                       \
    do {                                                                      \
        long long a_ = (long long)(a), b_ = (long long)(b);                   \
        if (a_ != b_) {                                                       \
            fprintf(stderr, "%s:%d: check failed: %s == %s: %lld != %lld\n",  \
                    __FILE__, __LINE__, #a, #b, a_, b_);                      \
            failures++;                                                       \
        }                                                                     \
    } while (0)

/* A record as STVM programs declare them. */
typedef struct {
    long acct_id;
    char user_no[21];
    double balance;
} dbAcct;

/* A record-layout function, for lTableQueue (QUEUE/DEFINE, FIELD, FINISH). */
static CREATE lDefAcct(TABLE t)
{
    (void)t;
    QUEUE(41, "part-a", dbAcct)
    FIELD(dbAcct, acct_id, FIELD_LONG)
    FIELD(dbAcct, user_no, FIELD_CHAR);  /* a ';' after the macros is allowed */
    FIELD(dbAcct, balance, FIELD_DOUB)
    FINISH
}

static CREATE lDefAcctDefine(TABLE t)
{
    (void)t;
    DEFINE(42, "", dbAcct);
    FIELD(dbAcct, acct_id, FIELD_LONG);
    FINISH
}

#ifndef __cplusplus
/* The spec's own example style: an old-style `()` definition (C only). */
CREATE lQueueAcctInfo()
{
    QUEUE(43, "", dbAcct)
    FIELD(dbAcct, acct_id, FIELD_LONG)
    FINISH
}
#endif

/* Compile-time type checks valid in C99 and C++: a wrong type is an
 * incompatible-pointer error (C: a warning made an error by -Werror). */
static void type_checks(void)
{
    SATvm h;
    size_t *p_size = &h.lSize;
    unsigned int *p_table = &h.tblName;
    unsigned int *p_errno = &h.m_lErrno;
    size_t *p_effect = &h.m_lEffect;
    void **p_void = &h.pstVoid;
    TABLE *p_t = p_table;
    Uenum *p_u = p_errno;
    long (*f_def)(TABLE) = (TCREATE)0;
    CREATE *p_create = (long *)0;

    void *(*f_get)(void) = pGetSATvm;
    void *(*f_clone)(void) = pCloneSATvm;
    void (*f_free)(SATvm *) = vCloneFree;
    void (*f_hold)(SATvm *) = vHoldConnect;
    void (*f_rel)(SATvm *) = vHoldRelease;
    long (*f_attach)(SATvm *, TABLE) = lAttchTable;
    long (*f_init)(SATvm *, TABLE) = lInitSATvm;
    void (*f_disc)(SATvm *, TABLE) = vTblDisconnect;
    long (*f_circle)(SATvm *, TABLE, size_t, size_t, char *, char *) = lCircleQueue;
    long (*f_tq)(SATvm *, TABLE, size_t, TCREATE) = lTableQueue;
    long (*f_drop)(SATvm *, TABLE) = lDropTable;
    long (*f_push)(SATvm *) = lPush;
    long (*f_pop)(SATvm *, void *, Uenum) = lPop;
    long (*f_popup)(SATvm *, size_t, time_t, size_t *, void **) = lPopup;
    long (*f_pushs)(SATvm *, size_t *, void **) = lPushs;
    char *(*f_err)(long) = sGetTError;
    long (*f_geterr)(void) = lGetTErrno;
    void (*f_seterr)(long) = vSetTErrno;
    size_t (*f_eff)(void) = lGetEffect;
    unsigned long long (*f_tick)(void) = get_tick_time;
    /* tvmq's additions. */
    long (*f_popwait)(SATvm *, void *, long) = lPopWait;
    const char *(*f_name)(long) = sGetTErrName;

    /* Use them all so that -Wall has nothing to say. */
    EXPECT(p_size && p_table && p_errno && p_effect && p_void && p_t && p_u);
    EXPECT(f_def == 0 && p_create == 0);
    EXPECT(f_get && f_clone && f_free && f_hold && f_rel && f_attach && f_init);
    EXPECT(f_disc && f_circle && f_tq && f_drop && f_push && f_pop && f_popup);
    EXPECT(f_pushs && f_err && f_geterr && f_seterr && f_eff && f_tick);
    EXPECT(f_popwait && f_name);
    EXPECT_EQ(sizeof(TABLE), sizeof(unsigned int));
    EXPECT_EQ(sizeof(CREATE), sizeof(long));
}

/* Every constant has the spec's value. */
static void constant_checks(void)
{
#define HDR_VALUE(c) (long)(c),
    static const long values[] = { TVM_CODES(HDR_VALUE) };
#undef HDR_VALUE
    int i;

    EXPECT_EQ(sizeof(values) / sizeof(values[0]), TVM_CODE_COUNT);
    for (i = 0; i < TVM_CODE_COUNT; i++)
        if (values[i] != i) {
            fprintf(stderr, "error code #%d has value %ld\n", i, values[i]);
            failures++;
        }
    EXPECT_EQ(RC_SUCC, 0);
    EXPECT_EQ(RC_FAIL, -1);
    EXPECT_EQ(RC_NOTFOUND, 24);
    EXPECT_EQ(QUE_NORMAL, 0);
    EXPECT_EQ(QUE_NOWAIT, 1);
    EXPECT_EQ(FIELD_CHAR, 1);
    EXPECT_EQ(FIELD_LONG, 2);
    EXPECT_EQ(FIELD_DOUB, 4);
    /* RC_FAIL must be usable in expressions as written (parenthesised). */
    EXPECT_EQ(1 - RC_FAIL, 2);
}

/* The binding macros: statement-like (do/while) and correct. */
static void macro_checks(void)
{
    SATvm *p = (SATvm *)pGetSATvm();
    dbAcct rec, *prec = &rec;
    char raw[64];
    void *mem;
    int flag = 1;

    memset(&rec, 0x5a, sizeof(rec));
    /* Each macro is used as the lone statement of an if with an else: this
     * only compiles when the macro is one statement (do { } while (0)). */
    if (flag)
        queueinit(p, rec, 41);
    else
        flag = 2;
    EXPECT_EQ(p->lSize, sizeof(dbAcct));
    EXPECT_EQ(p->tblName, 41);
    EXPECT(p->pstVoid == (void *)&rec);
    EXPECT_EQ(rec.acct_id, 0);
    EXPECT_EQ(rec.user_no[20], 0);

    memset(raw, 7, sizeof(raw));
    if (flag)
        queuevoid(p, raw, 10, 42);
    else
        flag = 2;
    EXPECT_EQ(p->lSize, 10);
    EXPECT_EQ(p->tblName, 42);
    EXPECT(p->pstVoid == (void *)raw);
    EXPECT_EQ(raw[0], 7); /* queuevoid does not clear */

    if (flag)
        queuebind(p, prec, 43);
    else
        flag = 2;
    EXPECT_EQ(p->lSize, sizeof(dbAcct));
    EXPECT_EQ(p->tblName, 43);
    EXPECT(p->pstVoid == (void *)prec);

    if (flag)
        queuenull(p, 99, 44);
    else
        flag = 2;
    EXPECT_EQ(p->lSize, 99);
    EXPECT_EQ(p->tblName, 44);
    EXPECT(p->pstVoid == (void *)prec); /* untouched */

    mem = malloc(8);
    if (flag)
        TFree(mem);
    else
        flag = 2;
    EXPECT(mem == NULL);
    TFree(mem); /* NULL: nothing happens */
    EXPECT(mem == NULL);
    EXPECT_EQ(flag, 1);
}

/* A few real calls: the program links against libtvm and works. */
static void call_checks(void)
{
    SATvm *p = (SATvm *)pGetSATvm();
    dbAcct in, out;
    char *msg;

    EXPECT(p != NULL);
    EXPECT(p == (SATvm *)pGetSATvm());
    EXPECT_EQ(lCreateQueue(p, 40, 3, sizeof(dbAcct), ""), RC_SUCC);
    queueinit(p, in, 40);
    in.acct_id = 1234;
    strcpy(in.user_no, "20180223");
    EXPECT_EQ(lPush(p), RC_SUCC);
    EXPECT_EQ(p->m_lEffect, 1);
    memset(&out, 0x11, sizeof(out));
    EXPECT_EQ(lPop(p, &out, QUE_NOWAIT), RC_SUCC);
    EXPECT_EQ(out.acct_id, 1234);
    EXPECT(strcmp(out.user_no, "20180223") == 0);
    EXPECT_EQ(lPop(p, &out, QUE_NOWAIT), RC_FAIL);
    EXPECT_EQ(p->m_lErrno, NO_DATA_FOUND);
    EXPECT_EQ(lGetTErrno(), NO_DATA_FOUND);
    msg = sGetTError(NO_DATA_FOUND);
    EXPECT(msg != NULL && msg[0] != '\0');

    EXPECT_EQ(lTableQueue(p, 41, 4, lDefAcct), RC_SUCC);
    EXPECT_EQ(lTableQueue(p, 42, 4, lDefAcctDefine), RC_SUCC);
#ifndef __cplusplus
    EXPECT_EQ(lTableQueue(p, 43, 4, lQueueAcctInfo), RC_SUCC);
    EXPECT_EQ(lDropTable(p, 43), RC_SUCC);
#endif
    EXPECT_EQ(lDropTable(p, 40), RC_SUCC);
    EXPECT_EQ(lDropTable(p, 41), RC_SUCC);
    EXPECT_EQ(lDropTable(p, 42), RC_SUCC);
    EXPECT_EQ(lDropTable(p, 40), RC_FAIL);
    EXPECT_EQ(p->m_lErrno, TBL_NOT_FOUND);
    EXPECT(get_tick_time() > 1500000000000ULL); /* milliseconds, after 2017 */
}

/* Names the header must make available without other includes. */
static void *thread_main(void *arg) { return arg; }

static void std_checks(void)
{
    pthread_t th;
    void *res = NULL;
    char buf[16];
    bool yes = true;
    time_t now = time(NULL);

    strcpy(buf, "21");
    EXPECT_EQ(atoi(buf), 21);
    EXPECT_EQ(pthread_create(&th, NULL, thread_main, buf), 0);
    EXPECT_EQ(pthread_join(th, &res), 0);
    EXPECT(res == (void *)buf);
    EXPECT(getpid() > 0);
    EXPECT(yes && now > 0);
    EXPECT_EQ(offsetof(dbAcct, acct_id), 0);
}

int main(void)
{
    type_checks();
    constant_checks();
    macro_checks();
    call_checks();
    std_checks();
    if (failures) {
        fprintf(stderr, "%d header check(s) failed\n", failures);
        return 1;
    }
    return 0;
}
