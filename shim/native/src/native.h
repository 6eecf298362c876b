/* Shared by the native library's sources (wooly_native.c, export_tables.c). */
#ifndef WOOLY_NATIVE_H
#define WOOLY_NATIVE_H
#include <stdint.h>

typedef int CUresult;
typedef uint64_t A;
/* 24 integer-class arguments: the longest entry point forwarded, cublasGemmStridedBatchedEx, takes 23. */
#define ARGS A a0, A a1, A a2, A a3, A a4, A a5, A a6, A a7, A a8, A a9, A a10, A a11, A a12, A a13, A a14, A a15, \
    A a16, A a17, A a18, A a19, A a20, A a21, A a22, A a23
#define PASS a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, a20, a21, a22, a23

CUresult wooly_get_export_table(const void **out, const uint8_t *id);
#endif
