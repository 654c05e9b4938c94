/*
 * hdr_seedstyle.c: what the seed programs do with tvm.h. They typedef
 * uint64 themselves and declare get_tick_time again with an empty parameter
 * list; with the header's own declaration this must compile without a single
 * warning (gcc -std=gnu17 / -std=c99 -Wall -Wextra -Werror, and as C++),
 * so the header must not typedef uint64 and must declare get_tick_time
 * returning exactly unsigned long long.
 * At run time get_tick_time() must be milliseconds since the Unix epoch.
 */
#include "tvm.h"

typedef unsigned long long uint64;

extern uint64 get_tick_time();

int main(void)
{
    uint64 tick = get_tick_time();
    uint64 now_ms = (uint64)time(NULL) * 1000ULL;
    uint64 diff = tick > now_ms ? tick - now_ms : now_ms - tick;

    if (diff > 2000) {
        fprintf(stderr, "%s:%d: get_tick_time() = %llu, time(NULL)*1000 = %llu\n",
                __FILE__, __LINE__, tick, now_ms);
        return 1;
    }
    return 0;
}
