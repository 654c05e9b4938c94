/* tmain.h: STVM programs often include it; with tvmq it only includes tvm.h. */
#ifndef TMAIN_H
#define TMAIN_H
#include "tvm.h"
#endif /* TMAIN_H */
