/*
 * orders_consumer.c: pops the orders of orders_producer.c, in batches of up
 * to 100 with lPopup, waiting at most 5 seconds for each batch; checks that
 * they come in order, and stops at the producer's end marker. Exits 1 if
 * the producer falls silent for 5 seconds.
 *
 *   ./orders_consumer &  ./orders_producer 10000
 */
#include "orders.h"

int main(void) {
    SATvm *p = (SATvm *)pGetSATvm();
    if (ensure_orders_queue(p, 1024) != RC_SUCC) {
        fprintf(stderr, "lTableQueue: %s\n", sGetTError(p->m_lErrno));
        return 1;
    }
    long expected = 0;
    double total = 0;
    for (;;) {
        size_t n = 0;
        void *batch = NULL;
        queuenull(p, sizeof(dbOrder), QUEUE_ORDERS);
        /* RC_SUCC: 100 orders. MQUE_WAIT_TMO: fewer, all that came within 5 s. */
        long rc = lPopup(p, 100, 5, &n, &batch);
        if (rc != RC_SUCC && p->m_lErrno != MQUE_WAIT_TMO) {
            fprintf(stderr, "consumer: %s after %ld orders\n", sGetTError(p->m_lErrno), expected);
            return 1;
        }
        dbOrder *orders = (dbOrder *)batch;
        for (size_t i = 0; i < n; i++) {
            if (orders[i].order_id == -1) {
                printf("consumer: %ld orders in order, total price %.2f\n", expected, total);
                TFree(batch);
                return 0;
            }
            if (orders[i].order_id != expected) {
                fprintf(stderr, "consumer: order %ld where %ld was due\n", orders[i].order_id, expected);
                return 1;
            }
            total += orders[i].price;
            expected++;
        }
        TFree(batch);
    }
}
