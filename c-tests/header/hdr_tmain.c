/*
 * hdr_tmain.c: STVM programs often include tmain.h alone; it must give the
 * whole API and the standard headers tvm.h brings in. The program also
 * defines its own `uint64` as a type the header could not have chosen: if
 * tvm.h or tmain.h typedef'd uint64, this would be a conflicting-types error.
 */
#include "tmain.h"

typedef struct { char c; } uint64;

int main(void)
{
    SATvm *p = (SATvm *)pGetSATvm();
    char name[32];
    uint64 u = { 'x' };

    strcpy(name, "tmain");
    if (p == NULL || u.c != 'x' || strlen(name) != 5 || atoi("7") != 7) {
        fprintf(stderr, "%s:%d: tmain.h program misbehaves\n", __FILE__, __LINE__);
        return 1;
    }
    /* One real call: a missing queue is reported as TBL_NOT_FOUND. */
    if (lAttchTable(p, 12345) != RC_FAIL || p->m_lErrno != TBL_NOT_FOUND) {
        fprintf(stderr, "%s:%d: lAttchTable of a missing queue: m_lErrno %u\n",
                __FILE__, __LINE__, p->m_lErrno);
        return 1;
    }
    return 0;
}
