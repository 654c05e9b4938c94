/*
 * security_client.c: runs queue calls as whichever user runs it, for
 * security.sh, and prints one line per call with the resulting code name:
 *
 *   security_client create:ID  attach:ID  push:ID:VALUE  pop:ID  drop:ID ...
 *
 *   create:5     lCircleQueue(5, 4 rows of 64 bytes)  -> "create:5 TVM_DONE_SUCC"
 *   attach:5     lAttchTable                          -> "attach:5 SHM_ERR_ACCES"
 *   push:5:7     lPush of a record holding 7          -> "push:5:7 TVM_DONE_SUCC"
 *   pop:5        lPop(QUE_NOWAIT); on success the value -> "pop:5 TVM_DONE_SUCC 7"
 *   drop:5       lDropTable                           -> "drop:5 TBL_NOT_FOUND"
 *
 * The queue directory is $TVMDBD, or the default when it is unset. A line
 * ends in " MISMATCH" if the handle's m_lErrno and lGetTErrno() disagree.
 * Exits 0 unless the arguments are wrong (2).
 */
#include "check.h"

int main(int argc, char **argv)
{
    SATvm *p = (SATvm *)pGetSATvm();

    if (argc < 2) {
        fprintf(stderr, "usage: %s OP:ID[:VALUE]...\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        char op[16];
        unsigned id;
        long value = 0;
        rec64 r;
        long rc;
        int fields = sscanf(argv[i], "%15[a-z]:%u:%ld", op, &id, &value);

        if (fields < 2) {
            fprintf(stderr, "bad operation %s\n", argv[i]);
            return 2;
        }
        memset(&r, 0, sizeof(r));
        if (strcmp(op, "create") == 0) {
            rc = lCircleQueue(p, id, 4, sizeof(rec64), NULL, NULL);
        } else if (strcmp(op, "attach") == 0) {
            rc = lAttchTable(p, id);
        } else if (strcmp(op, "push") == 0) {
            queueinit(p, r, id);
            r.n = value;
            snprintf(r.text, sizeof(r.text), "pushed by uid %u", (unsigned)geteuid());
            rc = lPush(p);
        } else if (strcmp(op, "pop") == 0) {
            queueinit(p, r, id);
            rc = lPop(p, &r, QUE_NOWAIT);
        } else if (strcmp(op, "drop") == 0) {
            rc = lDropTable(p, id);
        } else {
            fprintf(stderr, "unknown operation %s\n", op);
            return 2;
        }
        long code = lGetTErrno();
        printf("%s %s", argv[i], rc == RC_SUCC ? "TVM_DONE_SUCC" : code_name(code));
        if (rc == RC_SUCC && strcmp(op, "pop") == 0)
            printf(" %ld", r.n);
        if ((long)p->m_lErrno != code || (rc == RC_SUCC) != (code == 0))
            printf(" MISMATCH(rc %ld, m_lErrno %u, lGetTErrno %ld)", rc, p->m_lErrno, code);
        printf("\n");
        fflush(stdout);
    }
    return 0;
}
