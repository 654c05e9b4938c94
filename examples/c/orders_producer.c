/*
 * orders_producer.c: one process pushing orders into queue 42, which
 * orders_consumer.c pops in another process. Creates the queue (with its
 * record layout, through lTableQueue) if the consumer has not.
 *
 *   ./orders_producer [count]     # default 10000; then an end marker
 *
 * Build (after `make install`, or see README for the build tree):
 *   gcc -O2 -Wall orders_producer.c $(pkg-config --cflags --libs tvm) -o orders_producer
 */
#include "orders.h"

int main(int argc, char **argv) {
    long count = argc > 1 ? atol(argv[1]) : 10000;
    SATvm *p = (SATvm *)pGetSATvm();
    if (ensure_orders_queue(p, 1024) != RC_SUCC) {
        fprintf(stderr, "lTableQueue: %s\n", sGetTError(p->m_lErrno));
        return 1;
    }
    dbOrder o;
    queueinit(p, o, QUEUE_ORDERS);
    strcpy(o.symbol, "TVMQ");
    for (long i = 0; i <= count; i++) {
        o.order_id = i < count ? i : -1;
        o.price = 0.25 * (double)i;
        /* A full queue (the consumer is slower) is not an error: wait and retry. */
        while (lPush(p) != RC_SUCC) {
            if (p->m_lErrno != DATA_SPC_FULL) {
                fprintf(stderr, "lPush: %s\n", sGetTError(p->m_lErrno));
                return 1;
            }
            usleep(100);
        }
    }
    printf("producer: pushed %ld orders and the end marker\n", count);
    return 0;
}
