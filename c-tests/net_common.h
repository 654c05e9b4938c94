/*
 * net_common.h: the tagged record of the network twins of the seed programs
 * (net_push.c, net_pop.c) and of the cluster test (net_cluster.c).
 *
 * The record is the seed's dbUser (304 bytes), filled as push_bench.c fills
 * it, with acct_id = producer << 32 | sequence number, and user_addr holding
 * a text derived from both: a popped record is checked byte for byte.
 */
#ifndef TVMQ_NET_COMMON_H
#define TVMQ_NET_COMMON_H

#include "tvm.h"

#include <stdint.h>

typedef struct __QUEUE_USER_INFO {
    long acct_id;
    char user_no[21];
    char user_type[2];
    char user_nm[81];
    char user_addr[161];
    char user_phone[31];
} dbUser;

_Static_assert(sizeof(dbUser) == 304, "dbUser is the seed's 304-byte record");

static inline void tag_record(dbUser *u, unsigned producer, unsigned long seq)
{
    memset(u, 0, sizeof(*u));
    u->acct_id = (long)(((uint64_t)producer << 32) | (uint64_t)seq);
    strcpy(u->user_no, "20180223");
    strcpy(u->user_type, "1");
    strcpy(u->user_nm, "Savens Liu");
    snprintf(u->user_addr, sizeof(u->user_addr), "China, producer %u, record %lu", producer, seq);
    strcpy(u->user_phone, "18672911111");
}

/* 1 if u is exactly what tag_record wrote for its own tag (then *producer
 * and *seq are set), 0 if any byte differs. */
static inline int check_record(const dbUser *u, unsigned *producer, unsigned long *seq)
{
    dbUser want;
    uint64_t tag = (uint64_t)u->acct_id;
    *producer = (unsigned)(tag >> 32);
    *seq = (unsigned long)(tag & 0xffffffffu);
    tag_record(&want, *producer, *seq);
    return memcmp(&want, u, sizeof(want)) == 0;
}

/* "host:port" or a socket path from the command line. */
static inline long connect_to(SATvm *p, char *host, long port)
{
    return lTvmConnect(p, host, port, 5);
}

#endif /* TVMQ_NET_COMMON_H */
