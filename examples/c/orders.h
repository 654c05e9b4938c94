/*
 * orders.h: the record and the queue of the producer/consumer examples
 * (orders_producer.c, orders_consumer.c), shared so that both processes
 * agree on the layout.
 */
#ifndef ORDERS_H
#define ORDERS_H
#include "tvm.h"

#define QUEUE_ORDERS 42

typedef struct {
    long   order_id;   /* -1: the producer is done */
    char   symbol[12];
    double price;
} dbOrder;

/* The record layout stored with the queue: `tvmq peek 42` decodes records by it. */
static CREATE lQueueOrders(TABLE t) {
    (void)t;
    QUEUE(QUEUE_ORDERS, "examples", dbOrder)
    FIELD(dbOrder, order_id, FIELD_LONG)
    FIELD(dbOrder, symbol, FIELD_CHAR)
    FIELD(dbOrder, price, FIELD_DOUB)
    FINISH
}

/* Creates the queue unless it exists (whichever process starts first). */
static long ensure_orders_queue(SATvm *p, size_t rows) {
    if (lTableQueue(p, QUEUE_ORDERS, rows, lQueueOrders) == RC_SUCC || p->m_lErrno == TBL_ARD_EXIST)
        return RC_SUCC;
    return RC_FAIL;
}
#endif
