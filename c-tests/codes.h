/*
 * codes.h: the 103 error codes of the STVM queue API, in the order and with
 * the numbers given by the spec (shared/spec/c-api.md, "Constants"), then
 * tvmq's own (above 102, "Beyond STVM"): the code named at position i must
 * equal i. TVM_CODES(X) expands X(NAME) for each, so
 * tests can build name tables and check every macro's value against the spec.
 */
#ifndef TVMQ_TEST_CODES_H
#define TVMQ_TEST_CODES_H

#define TVM_CODES(X) \
    X(TVM_DONE_SUCC) /*   0 */ \
    X(SVR_EXCEPTION) /*   1 */ \
    X(IDX_FIELD_NIL) /*   2 */ \
    X(CONDIT_IS_NIL) /*   3 */ \
    X(DATA_SPC_FULL) /*   4 */ \
    X(GENER_KEY_ERR) /*   5 */ \
    X(SHM_ERR_INVAL) /*   6 */ \
    X(SHM_ERR_EXIST) /*   7 */ \
    X(SHM_ERR_EIDRM) /*   8 */ \
    X(SHM_ERR_ACCES) /*   9 */ \
    X(SHM_ERR_NOMEM) /*  10 */ \
    X(VER_NOT_MATCH) /*  11 */ \
    X(BLCK_SIZE_ERR) /*  12 */ \
    X(IDX_DEF_SPILL) /*  13 */ \
    X(IDX_LEN_SPILL) /*  14 */ \
    X(GRP_DEF_SPILL) /*  15 */ \
    X(GRP_LEN_SPILL) /*  16 */ \
    X(IDX_TYP_NODEF) /*  17 */ \
    X(FLD_DEF_SPILL) /*  18 */ \
    X(IDX_DATA_MISM) /*  19 */ \
    X(FTYPE_NOT_DEF) /*  20 */ \
    X(SHMT_NOT_INIT) /*  21 */ \
    X(UNIQ_IDX_REPT) /*  22 */ \
    X(IDX_SPC_SPILL) /*  23 */ \
    X(NO_DATA_FOUND) /*  24 */ \
    X(MORE_ROWS_SEL) /*  25 */ \
    X(MALLC_MEM_ERR) /*  26 */ \
    X(CURS_IS_INVAL) /*  27 */ \
    X(TABLE_NOT_DEF) /*  28 */ \
    X(FIL_NOT_EXIST) /*  29 */ \
    X(SEM_CDIT_NULL) /*  30 */ \
    X(SEM_ERR_INVAL) /*  31 */ \
    X(SEM_ERR_EXIST) /*  32 */ \
    X(SEM_ERR_EIDRM) /*  33 */ \
    X(SEM_ERR_ACCES) /*  34 */ \
    X(SEM_ERR_NOMEM) /*  35 */ \
    X(SEM_ERR_LIMIT) /*  36 */ \
    X(SQL_SYNTX_ERR) /*  37 */ \
    X(SQL_NOT_SUPPT) /*  38 */ \
    X(SQL_TABLE_NIL) /*  39 */ \
    X(SQL_FIELD_NIL) /*  40 */ \
    X(SQL_WHERE_NIL) /*  41 */ \
    X(SQL_ERR_FIELD) /*  42 */ \
    X(SQL_ERR_WHERE) /*  43 */ \
    X(TBL_NOT_FOUND) /*  44 */ \
    X(SQL_FAV_MATCH) /*  45 */ \
    X(LOCK_DORD_ERR) /*  46 */ \
    X(LOCK_UNRD_ERR) /*  47 */ \
    X(LOCK_DOWR_ERR) /*  48 */ \
    X(LOCK_UNWR_ERR) /*  49 */ \
    X(SOCK_CONN_ERR) /*  50 */ \
    X(SOCK_CONN_TMO) /*  51 */ \
    X(SOCK_ERR_CRTE) /*  52 */ \
    X(SOCK_READ_ERR) /*  53 */ \
    X(SOCK_SEND_ERR) /*  54 */ \
    X(SOCK_BIND_ERR) /*  55 */ \
    X(SOCK_LSEN_ERR) /*  56 */ \
    X(SOCK_SEND_TMO) /*  57 */ \
    X(SOCK_READ_TMO) /*  58 */ \
    X(SOCK_IO_RESET) /*  59 */ \
    X(SOCK_COM_EXCP) /*  60 */ \
    X(EPOLL_ADD_ERR) /*  61 */ \
    X(EPOLL_CRT_ERR) /*  62 */ \
    X(EPOLL_DEL_ERR) /*  63 */ \
    X(SOCK_ACPT_ERR) /*  64 */ \
    X(RMT_NOT_SUPPT) /*  65 */ \
    X(FILE_NOTFOUND) /*  66 */ \
    X(BOOT_PARM_ERR) /*  67 */ \
    X(BOOT_RELA_ERR) /*  68 */ \
    X(BOOT_VER_ICMP) /*  69 */ \
    X(DOM_NOT_REGST) /*  70 */ \
    X(DMWORK_NOTSUP) /*  71 */ \
    X(SEQ_NOT_FOUND) /*  72 */ \
    X(FILE_NOT_RSET) /*  73 */ \
    X(RECD_TOO_LONG) /*  74 */ \
    X(RESOU_DISABLE) /*  75 */ \
    X(MSG_ERR_EXIST) /*  76 */ \
    X(MSG_ERR_ACCES) /*  77 */ \
    X(MSG_ERR_NOMEM) /*  78 */ \
    X(MSG_ERR_INVAL) /*  79 */ \
    X(MSG_ERR_FAULT) /*  80 */ \
    X(MSG_ERR_EIDRM) /*  81 */ \
    X(MSG_ERR_E2BIG) /*  82 */ \
    X(MSG_ERR_EINTR) /*  83 */ \
    X(MSG_ERR_SNDEG) /*  84 */ \
    X(INI_ERR_CHLDP) /*  85 */ \
    X(FLD_NOT_EXIST) /*  86 */ \
    X(TBL_ARD_EXIST) /*  87 */ \
    X(WORK_NOT_OPEN) /*  88 */ \
    X(WORK_NOT_REGT) /*  89 */ \
    X(DOM_NOT_INITL) /*  90 */ \
    X(FIELD_NOT_DEF) /*  91 */ \
    X(FIELD_NOT_SET) /*  92 */ \
    X(UPDFD_NOT_SET) /*  93 */ \
    X(EXTRE_SET_ERR) /*  94 */ \
    X(GROUP_SET_ERR) /*  95 */ \
    X(CMM_TABLE_MIS) /*  96 */ \
    X(MQUE_WAIT_TMO) /*  97 */ \
    X(MQUE_WAIT_ERR) /*  98 */ \
    X(MQUE_CRTE_BIG) /*  99 */ \
    X(NOT_SUPPT_OPT) /* 100 */ \
    X(SERV_NOT_CONN) /* 101 */ \
    X(PART_AR_EXIST) /* 102 */ \
    X(NOT_DURABLE)   /* 103 */ \
    X(SYNC_FAILED)   /* 104 */ \
    X(LEASE_EXPIRED) /* 105 */ \
    X(LEASE_LIMIT)   /* 106 */ \
    X(LEASE_INVALID) /* 107 */ \
    X(REPL_TIMEOUT)  /* 108 */

/* Number of codes: STVM's 0 .. 102 and tvmq's 103 .. 108. */
#define TVM_CODE_COUNT 109

#endif /* TVMQ_TEST_CODES_H */
