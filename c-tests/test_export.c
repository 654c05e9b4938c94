/*
 * test_export.c: an export and import round trip of 1 M records of every
 * field kind while a producer and a consumer run on the queue.
 *
 * Queue 100 (a field of each kind and width) gets 1,000,000 records, record
 * i derived from i alone; then a producer goes on pushing records 1 M, 1 M
 * + 1, ... and a consumer pops (checking it gets 0, 1, 2, ... in order),
 * each about 100 records a millisecond, while lExportFile writes the binary
 * form and then the text form. Each export must be the records present at
 * one instant: a run of consecutive records a, a + 1, ..., a + n - 1 (n at
 * least the 1 M less what the consumer took before it), each exactly
 * record i (byte for byte in binary, field by field in text), which the
 * test checks by importing each file into queue 101 and popping it all.
 *
 * Run by run.sh as `test_export NAME` in a fresh, empty $TVMDBD.
 */
#include "check.h"

#include <pthread.h>

typedef struct {
    char name[12];
    long n;
    int small;
    double x;
    float y;
    short tiny;
    signed char byte;
} allKinds;

#define RECORDS 1000000L
#define CAPACITY 1250000

static CREATE lAllKinds(TABLE t)
{
    (void)t;
    QUEUE(t, "", allKinds)
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
    snprintf(r->name, sizeof(r->name), "r|%ld", i);
    r->n = i;
    r->small = (int)(i % 100000) - 50000;
    r->x = (double)i / 7.0;
    r->y = (float)i / 3.0f;
    r->tiny = (short)(i % 30000);
    r->byte = (signed char)(i % 120);
}

static int stop_flag;
static long produced = RECORDS, consumed, consumer_errors;

static void *producer(void *arg)
{
    (void)arg;
    SATvm *p = (SATvm *)pCloneSATvm();
    allKinds r;
    while (!__atomic_load_n(&stop_flag, __ATOMIC_SEQ_CST)) {
        for (int k = 0; k < 100; k++) {
            queueinit(p, r, 100);
            fill_all(&r, produced);
            if (lPush(p) != RC_SUCC)
                break;
            produced++;
        }
        sleep_ms(1);
    }
    vCloneFree(p);
    return NULL;
}

static void *consumer(void *arg)
{
    (void)arg;
    SATvm *p = (SATvm *)pCloneSATvm();
    allKinds r, want;
    while (!__atomic_load_n(&stop_flag, __ATOMIC_SEQ_CST)) {
        for (int k = 0; k < 100; k++) {
            queueinit(p, r, 100);
            if (lPop(p, &r, QUE_NOWAIT) != RC_SUCC)
                break;
            fill_all(&want, consumed);
            if (memcmp(&r, &want, sizeof(r)) != 0)
                consumer_errors++;
            consumed++;
        }
        sleep_ms(1);
    }
    vCloneFree(p);
    return NULL;
}

/* Pops all of queue 101 and checks it is a run of consecutive records of
 * at least `least`, compared byte for byte (`exact`) or field by field. */
static void check_run(long least, int exact)
{
    SATvm *p = G();
    size_t n = 0;
    void *arr = NULL;
    long first = -1, count = 0, bad = 0;
    allKinds want;
    for (;;) {
        queuenull(p, sizeof(allKinds), 101);
        long rc = lPopup(p, 65536, 0, &n, &arr);
        if (rc != RC_SUCC) {
            CHECK_EQ(p->m_lErrno, NO_DATA_FOUND);
            break;
        }
        allKinds *a = (allKinds *)arr;
        for (size_t k = 0; k < n; k++, count++) {
            if (first < 0)
                first = a[k].n;
            fill_all(&want, first + count);
            int same = exact ? memcmp(&a[k], &want, sizeof(want)) == 0
                             : strcmp(a[k].name, want.name) == 0 && a[k].n == want.n &&
                                   a[k].small == want.small && a[k].x == want.x && a[k].y == want.y &&
                                   a[k].tiny == want.tiny && a[k].byte == want.byte;
            if (!same && bad++ < 5)
                fail_at(__FILE__, __LINE__, "record %ld of the export is record %ld, not %ld", count,
                        a[k].n, first + count);
        }
        TFree(arr);
    }
    printf("export: records %ld to %ld (%ld)\n", first, first + count - 1, count);
    CHECK(count >= least);
    CHECK(first >= 0);
    CHECK_EQ(bad, 0);
}

static void round_trip_1m_while_producer_and_consumer_run(void)
{
    SATvm *p = G();
    char bin[1024], txt[1024];
    snprintf(bin, sizeof(bin), "%s/q100.bin", queue_dir());
    snprintf(txt, sizeof(txt), "%s/q100.txt", queue_dir());
    REQUIRE_SUCC(lTableQueue(p, 100, CAPACITY, lAllKinds), p);
    REQUIRE_SUCC(lTableQueue(p, 101, CAPACITY, lAllKinds), p);

    /* 1 M records, in batches. */
    static allKinds batch[10000];
    for (long i = 0; i < RECORDS; i += 10000) {
        for (long k = 0; k < 10000; k++)
            fill_all(&batch[k], i + k);
        size_t n = 10000;
        void *recs = batch;
        queuenull(p, sizeof(allKinds), 100);
        REQUIRE_SUCC(lPushs(p, &n, &recs), p);
    }
    pthread_t prod, cons;
    REQUIRE(pthread_create(&prod, NULL, producer, NULL) == 0);
    REQUIRE(pthread_create(&cons, NULL, consumer, NULL) == 0);
    sleep_ms(50);

    long before = __atomic_load_n(&consumed, __ATOMIC_SEQ_CST);
    long long t0 = mono_ms();
    CHECK_EQ(lExportFile(100, bin, NULL), RC_SUCC);
    long nbin = (long)lGetEffect();
    long long t1 = mono_ms();
    long before_txt = __atomic_load_n(&consumed, __ATOMIC_SEQ_CST);
    CHECK_EQ(lExportFile(100, txt, (char *)"|"), RC_SUCC);
    long ntxt = (long)lGetEffect();
    long long t2 = mono_ms();
    long after = __atomic_load_n(&consumed, __ATOMIC_SEQ_CST);
    __atomic_store_n(&stop_flag, 1, __ATOMIC_SEQ_CST);
    pthread_join(prod, NULL);
    pthread_join(cons, NULL);
    printf("binary export %ld records in %lld ms, text %ld in %lld ms; consumed %ld before, %ld after, "
           "produced %ld\n",
           nbin, t1 - t0, ntxt, t2 - t1, before, after, produced);
    CHECK_EQ(consumer_errors, 0);
    CHECK(after > before); /* the consumer ran during the exports */

    /* Nothing consumed by the exports: the depth is what was pushed less popped. */
    CHECK_EQU(lGetTblValid(100), (size_t)(produced - consumed));

    CHECK_EQ(lImportFile(101, bin, NULL), RC_SUCC);
    CHECK_EQ((long)lGetEffect(), nbin);
    check_run(RECORDS - before - 1000000L / 10, 1);
    CHECK(nbin >= RECORDS - after);
    CHECK_EQ(lImportFile(101, txt, (char *)"|"), RC_SUCC);
    CHECK_EQ((long)lGetEffect(), ntxt);
    check_run(RECORDS - before_txt - 1000000L / 10, 0);
    CHECK(ntxt >= RECORDS - after);
}

TEST_MAIN(T(round_trip_1m_while_producer_and_consumer_run))
