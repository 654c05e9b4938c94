/*
 * hdr_stvm_decl.c: a program that declares STVM's remaining queue calls
 * itself, as STVM's tvm.h and tmain.h declare them, and names its
 * constants. With tvm.h's own declarations this must compile without a
 * single warning (gcc -std=gnu17 / -std=c99 -Wall -Wextra -Werror, and as
 * C++): every signature is STVM's. At run time it checks the constants'
 * values and makes each call once on a queue that does not exist (a
 * failure, not a crash).
 */
#include "tmain.h"

/* STVM's tvm.h */
extern void vCloneQueue(SATvm *, TABLE);
extern void *pInitSATvm(TABLE);
extern void vInitSATvm(SATvm *);
extern long lResetLock(SATvm *, TABLE);
extern size_t lGetTblRow(TABLE);
extern size_t lGetTblValid(TABLE);
extern long lGetRowSize(TABLE);
extern bool bTableIsExist(TABLE);
extern void vForceDisconnect(SATvm *, TABLE);
extern long lCount(SATvm *, size_t *);
extern long lTruncate(SATvm *, TABLE);
extern long lExportFile(TABLE, char *, char *);
extern long lImportFile(TABLE, char *, char *);
extern long lDumpTable(SATvm *, TABLE);
/* STVM's tmain.h */
extern long lTvmDropTable(SATvm *, TABLE);
extern long lTvmResetLock(SATvm *, TABLE);
extern long lTvmCount(SATvm *, size_t *);
extern long lTvmTruncate(SATvm *, TABLE);

int main(void)
{
    SATvm *p = (SATvm *)pGetSATvm();
    size_t n = 0;
    const char *version = TVM_VERSION;
    long rcs[] = { RC_MATCH, RC_MISMA, RC_CONTU, RC_CLOSE };

    if (rcs[0] != 2 || rcs[1] != 1 || rcs[2] != -5 || rcs[3] != -9 || strlen(version) == 0) {
        fprintf(stderr, "%s:%d: wrong constants\n", __FILE__, __LINE__);
        return 1;
    }
    vInitSATvm(p);
    vCloneQueue(p, 4000000001u);
    vForceDisconnect(p, 4000000001u);
    if (pInitSATvm(4000000001u) != NULL || bTableIsExist(4000000001u) || lGetTblRow(4000000001u) != 0 ||
        lGetTblValid(4000000001u) != 0 || lGetRowSize(4000000001u) != RC_FAIL ||
        lResetLock(p, 4000000001u) != RC_FAIL || lTruncate(p, 4000000001u) != RC_FAIL ||
        lDumpTable(p, 4000000001u) != RC_FAIL ||
        lExportFile(4000000001u, (char *)"/nonexistent/x", (char *)"|") != RC_FAIL ||
        lImportFile(4000000001u, (char *)"/nonexistent/x", (char *)"|") != RC_FAIL) {
        fprintf(stderr, "%s:%d: a call on a missing queue did not fail\n", __FILE__, __LINE__);
        return 1;
    }
    p->tblName = 4000000001u;
    if (lCount(p, &n) != RC_FAIL || lTvmCount(p, &n) != RC_FAIL || lGetTErrno() != SERV_NOT_CONN ||
        lTvmDropTable(p, 1) != RC_FAIL || lTvmResetLock(p, 1) != RC_FAIL || lTvmTruncate(p, 1) != RC_FAIL) {
        fprintf(stderr, "%s:%d: a call did not fail as it should\n", __FILE__, __LINE__);
        return 1;
    }
    return 0;
}
