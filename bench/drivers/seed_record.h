/*
 * seed_record.h: the record of the seed benchmarks (dbUser of push_bench.c
 * and pop_bench.c, 304 bytes) and how the benchmark drivers fill it. Shared
 * by bench/drivers/tvmq_driver.c (C) and bench/drivers/boost_mq.cpp (C++), so that tvmq and
 * Boost.Interprocess move the same bytes.
 */
#ifndef TVMQ_BENCH_SEED_RECORD_H
#define TVMQ_BENCH_SEED_RECORD_H

#include <stddef.h>
#include <string.h>

typedef struct {
    long acct_id;
    char user_no[21];
    char user_type[2];
    char user_nm[81];
    char user_addr[161];
    char user_phone[31];
} dbUser;

#ifdef __cplusplus
#define SEED_RECORD_ASSERT static_assert
#else
#define SEED_RECORD_ASSERT _Static_assert
#endif
SEED_RECORD_ASSERT(sizeof(dbUser) == 304, "dbUser must be 304 bytes");
/* The sequence number is written as 8 bytes at offset 0: acct_id when size >= 304. */
SEED_RECORD_ASSERT(offsetof(dbUser, acct_id) == 0 && sizeof(long) == 8, "acct_id layout");

/* Fills one record of `size` bytes (>= 8): dbUser as push_bench.c fills it
 * when it fits, then a letter pattern up to `size`. */
static inline void seed_record_fill(char *rec, size_t size)
{
    size_t from = 8;

    memset(rec, 0, size);
    if (size >= sizeof(dbUser)) {
        dbUser *u = (dbUser *)rec;
        strcpy(u->user_no, "20180223");
        strcpy(u->user_type, "1");
        strcpy(u->user_nm, "Savens Liu");
        strcpy(u->user_addr, "China");
        strcpy(u->user_phone, "18672911111");
        from = sizeof(dbUser);
    }
    for (size_t i = from; i < size; i++)
        rec[i] = (char)('A' + i % 26);
}

/* Stores the sequence number in the first 8 bytes (acct_id for dbUser). */
static inline void seed_record_set_seq(char *rec, unsigned long long seq)
{
    long v = (long)seq;

    memcpy(rec, &v, sizeof v);
}

#endif /* TVMQ_BENCH_SEED_RECORD_H */
