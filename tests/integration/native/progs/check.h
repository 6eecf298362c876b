// What the test programs here share: CHECK(call) prints the failing call with its status (a CUDA error or a
// library's status code) and exits 1; EXPECT(cond) prints the condition that does not hold and exits 1.
#pragma once
#include <cstdio>
#include <cstdlib>

#define CHECK(call)                                                                                          \
    do {                                                                                                     \
        int s_ = (int)(call);                                                                                \
        if (s_ != 0) {                                                                                       \
            printf("FAIL %s:%d %s: status %d\n", __FILE__, __LINE__, #call, s_);                             \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

#define EXPECT(cond)                                                                                         \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            printf("FAIL %s:%d %s\n", __FILE__, __LINE__, #cond);                                            \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)
