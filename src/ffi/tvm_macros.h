/* ---- Binding a record to a handle ------------------------------------- */

/* Bind struct variable v to handle p for queue t: size = sizeof(v), v zeroed. */
#define queueinit(p, v, t)                                                    \
    do {                                                                      \
        (p)->lSize = sizeof(v);                                               \
        (p)->tblName = (t);                                                   \
        memset(&(v), 0, sizeof(v));                                           \
        (p)->pstVoid = (void *)&(v);                                          \
    } while (0)

/* As queueinit with an explicit size l, and v left as it is. */
#define queuevoid(p, v, l, t)                                                 \
    do {                                                                      \
        (p)->lSize = (l);                                                     \
        (p)->tblName = (t);                                                   \
        (p)->pstVoid = (void *)&(v);                                          \
    } while (0)

/* Bind the record that pointer v points to: size = sizeof(*(v)). */
#define queuebind(p, v, t)                                                    \
    do {                                                                      \
        (p)->lSize = sizeof(*(v));                                            \
        (p)->tblName = (t);                                                   \
        (p)->pstVoid = (void *)(v);                                           \
    } while (0)

/* Set only the record size and the queue (before lPopup). */
#define queuenull(p, l, t)                                                    \
    do {                                                                      \
        (p)->lSize = (l);                                                     \
        (p)->tblName = (t);                                                   \
    } while (0)

/* Free memory the library malloc'd (lPopup's array) and clear the pointer. */
#define TFree(p)                                                              \
    do {                                                                      \
        if (p) {                                                              \
            free(p);                                                          \
            (p) = NULL;                                                       \
        }                                                                     \
    } while (0)

/* lCircleQueue with the queue's name taken from the id as written. */
#define lCreateQueue(p, t, rows, size, part)                                  \
    lCircleQueue((p), (t), (rows), (size), (char *)#t, (char *)(part))

/* ---- Describing a record layout for lTableQueue ----------------------- */
/*
 * Inside a function returning CREATE, passed to lTableQueue:
 *
 *     CREATE lQueueUserInfo() {
 *         QUEUE(21, "", dbUser)
 *         FIELD(dbUser, acct_id, FIELD_LONG)
 *         FIELD(dbUser, user_no, FIELD_CHAR)
 *         FINISH
 *     }
 *
 * QUEUE and FIELD return RC_FAIL from that function on an error (the code is
 * in lGetTErrno()); FINISH returns RC_SUCC. A ';' after them is allowed.
 * As in STVM, QUEUE names the queue after its first argument as written:
 * QUEUE(QUEUE_USER_INFO, "", dbUser) names it "QUEUE_USER_INFO", QUEUE(21,
 * "", dbUser) names it "21" (tvmq list, name lookups, the server's keys).
 */
#define QUEUE(t, part, s)                                                     \
    {                                                                         \
        if (RC_SUCC != lTvmDefQueue((TABLE)(t), (part), #t, sizeof(s)))       \
            return RC_FAIL;                                                   \
    }
#define DEFINE(t, part, s) QUEUE(t, part, s)
#define FIELD(s, f, k)                                                        \
    {                                                                         \
        if (RC_SUCC != lTvmDefField(#f, offsetof(s, f),                      \
                                    sizeof(((s *)0)->f), (k)))                \
            return RC_FAIL;                                                   \
    }
#define FINISH return RC_SUCC;
