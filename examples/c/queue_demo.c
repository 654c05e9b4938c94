/*
 * queue_demo.c: the STVM queue API end to end with tvmq.
 *
 * Creates queue 41 with a record layout (lTableQueue + QUEUE/FIELD), pushes
 * records from two threads, pops them (blocking and batch), and drops the
 * queue. Build and run (from the project root, after `make`):
 *
 *   gcc -O2 -Wall examples/c/queue_demo.c -I include -L target/release \
 *       -ltvm -lpthread -Wl,-rpath,$PWD/target/release -o queue_demo
 *   TVMDBD=/dev/shm/demo ./queue_demo
 */
#include "tvm.h"

#define QUEUE_ORDERS 41
#define PER_THREAD   1000

typedef struct {
    long   order_id;
    char   symbol[12];
    double price;
} dbOrder;

/* The record layout stored with the queue (see `tvmq stat 41`). */
CREATE lQueueOrders() {
    QUEUE(QUEUE_ORDERS, "demo", dbOrder)
    FIELD(dbOrder, order_id, FIELD_LONG)
    FIELD(dbOrder, symbol, FIELD_CHAR)
    FIELD(dbOrder, price, FIELD_DOUB)
    FINISH
}

static int fail(SATvm *p, const char *what) {
    fprintf(stderr, "%s: (%u) %s\n", what, p->m_lErrno, sGetTError(p->m_lErrno));
    return 1;
}

static void *producer(void *arg) {
    long base = (long)arg;
    SATvm *p = (SATvm *)pCloneSATvm();   /* one handle per thread */
    dbOrder o;
    queueinit(p, o, QUEUE_ORDERS);
    strcpy(o.symbol, "TVMQ");
    for (long i = 0; i < PER_THREAD; i++) {
        o.order_id = base + i;
        o.price = 1.5 * (double)i;
        if (lPush(p) != RC_SUCC) {
            fail(p, "lPush");
            break;
        }
    }
    vCloneFree(p);
    return NULL;
}

int main(void) {
    SATvm *p = (SATvm *)pGetSATvm();
    dbOrder o;
    lDropTable(p, QUEUE_ORDERS); /* a leftover from an earlier run, if any */
    if (lTableQueue(p, QUEUE_ORDERS, 4096, (TCREATE)lQueueOrders) != RC_SUCC)
        return fail(p, "lTableQueue");

    pthread_t t[2];
    pthread_create(&t[0], NULL, producer, (void *)0L);
    pthread_create(&t[1], NULL, producer, (void *)1000000L);
    pthread_join(t[0], NULL);
    pthread_join(t[1], NULL);

    /* One record at a time, blocking... */
    queueinit(p, o, QUEUE_ORDERS);
    if (lPop(p, &o, QUE_NORMAL) != RC_SUCC)
        return fail(p, "lPop");
    printf("first record: order %ld %s %.2f\n", o.order_id, o.symbol, o.price);

    /* ...then everything else in one call. */
    size_t n = 0;
    void *all = NULL;
    queuenull(p, sizeof(dbOrder), QUEUE_ORDERS);
    if (lPopup(p, 2 * PER_THREAD, 0, &n, &all) != RC_SUCC)
        return fail(p, "lPopup");
    printf("then %zu more records in one lPopup\n", n);
    TFree(all);

    if (lPop(p, &o, QUE_NOWAIT) == RC_SUCC || p->m_lErrno != NO_DATA_FOUND)
        return fail(p, "queue should be empty");
    if (lDropTable(p, QUEUE_ORDERS) != RC_SUCC)
        return fail(p, "lDropTable");
    puts(n + 1 == 2 * PER_THREAD ? "ok" : "MISSING RECORDS");
    return n + 1 == 2 * PER_THREAD ? 0 : 1;
}
