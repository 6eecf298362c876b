/*
 * A stand-in libnvrtc.so.N: NVIDIA's NVRTC, asked for machine code, hands out PTX instead.
 *
 * NOTE [nvrtc stand-in]: NVRTC runs on the client (it only compiles), but programs often ask it for
 * a cubin for the device's architecture (`--gpu-architecture=sm_80`, then nvrtcGetCUBIN) and load
 * that, and a wooly device runs PTX, never machine code for a real GPU. Under `wooly run` this
 * library is found first as libnvrtc.so.N; it loads the real NVRTC (WOOLY_NVRTC_REAL, set by the
 * launcher) and forwards every call, except that a compile for `sm_XX` becomes a compile for the
 * virtual `compute_XX`, and nvrtcGetCUBIN(Size) of such a program returns its PTX (NUL-terminated
 * text, which cuModuleLoadData takes as readily as a cubin). Everything else is NVRTC's own.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef uint64_t A;
#define ARGS A a0, A a1, A a2, A a3, A a4, A a5, A a6, A a7
#define PASS a0, a1, a2, a3, a4, a5, a6, a7
#define NVRTC_ERROR_INTERNAL_ERROR 11
#define MAX_REWRITTEN 4096

static void *real;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load_real(void) {
    const char *path = getenv("WOOLY_NVRTC_REAL");
    if (path && *path) real = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!real)
        fprintf(stderr, "wooly: the real NVRTC could not be loaded (WOOLY_NVRTC_REAL=%s): %s\n", path ? path : "",
                path && *path ? dlerror() : "not set");
}

static void *sym(const char *name) {
    pthread_once(&once, load_real);
    return real ? dlsym(real, name) : NULL;
}

/* Forward with the caller's integer-class arguments (NVRTC takes at most six, all pointers or ints). */
#define FWD(name)                                                   \
    int name(ARGS) {                                                \
        static int (*f)(ARGS);                                      \
        if (!f) *(void **)&f = sym(#name);                          \
        return f ? f(PASS) : NVRTC_ERROR_INTERNAL_ERROR;            \
    }
FWD(nvrtcVersion)
FWD(nvrtcGetNumSupportedArchs)
FWD(nvrtcGetSupportedArchs)
FWD(nvrtcCreateProgram)
FWD(nvrtcGetPTXSize)
FWD(nvrtcGetPTX)
FWD(nvrtcGetNVVMSize)
FWD(nvrtcGetNVVM)
FWD(nvrtcGetLTOIRSize)
FWD(nvrtcGetLTOIR)
FWD(nvrtcGetOptiXIRSize)
FWD(nvrtcGetOptiXIR)
FWD(nvrtcGetProgramLogSize)
FWD(nvrtcGetProgramLog)
FWD(nvrtcAddNameExpression)
FWD(nvrtcGetLoweredName)
FWD(nvrtcGetPCHHeapSize)
FWD(nvrtcSetPCHHeapSize)
FWD(nvrtcGetPCHCreateStatus)
FWD(nvrtcGetPCHHeapSizeRequired)
FWD(nvrtcSetFlowCallback)
FWD(nvrtcGetTileIRSize)
FWD(nvrtcGetTileIR)

const char *nvrtcGetErrorString(int result) {
    static const char *(*f)(int);
    if (!f) *(void **)&f = sym("nvrtcGetErrorString");
    return f ? f(result) : "NVRTC_ERROR_INTERNAL_ERROR (wooly: the real NVRTC is not loaded)";
}

/* Programs compiled for a virtual architecture in place of the real one they asked for. */
static void *rewritten[MAX_REWRITTEN];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static int was_rewritten(void *prog, int forget) {
    int hit = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_REWRITTEN; i++)
        if (rewritten[i] == prog && prog) {
            hit = 1;
            if (forget) rewritten[i] = NULL;
            break;
        }
    pthread_mutex_unlock(&lock);
    return hit;
}

static void remember(void *prog) {
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_REWRITTEN; i++)
        if (!rewritten[i]) { rewritten[i] = prog; break; }
    pthread_mutex_unlock(&lock);
}

/* "sm_80" -> "compute_80" (a fresh string); NULL when ``arch`` names no real architecture. */
static char *virtual_arch(const char *arch) {
    if (strncmp(arch, "sm_", 3) != 0) return NULL;
    size_t n = strlen(arch) + 8;
    char *out = malloc(n);
    if (out) snprintf(out, n, "compute_%s", arch + 3);
    return out;
}

int nvrtcCompileProgram(void *prog, int n, const char *const *options) {
    static int (*f)(void *, int, const char *const *);
    if (!f) *(void **)&f = sym("nvrtcCompileProgram");
    if (!f) return NVRTC_ERROR_INTERNAL_ERROR;
    if (n <= 0 || !options) return f(prog, n, options);
    const char **opts = calloc((size_t)n, sizeof *opts);
    char **owned = calloc((size_t)n, sizeof *owned);
    if (!opts || !owned) { free(opts); free(owned); return f(prog, n, options); }
    int changed = 0;
    for (int i = 0; i < n; i++) {
        const char *o = options[i];
        opts[i] = o;
        if (!o) continue;
        const char *prefixes[] = {"--gpu-architecture=", "-arch=", "--gpu-architecture", "-arch", NULL};
        for (int k = 0; prefixes[k]; k++) {
            size_t pl = strlen(prefixes[k]);
            if (strncmp(o, prefixes[k], pl) != 0) continue;
            if (o[pl] == '\0' && i + 1 < n && options[i + 1]) { /* "-arch" "sm_80" */
                char *v = virtual_arch(options[i + 1]);
                if (v) { owned[i + 1] = v; opts[i + 1] = v; changed = 1; i++; }
            } else if (o[pl - 1] == '=') {
                char *v = virtual_arch(o + pl);
                if (v) {
                    size_t len = pl + strlen(v) + 1;
                    char *full = malloc(len);
                    if (full) {
                        snprintf(full, len, "%.*s%s", (int)pl, o, v);
                        owned[i] = full;
                        opts[i] = full;
                        changed = 1;
                    }
                    free(v);
                }
            }
            break;
        }
    }
    int r = f(prog, n, opts);
    if (changed) remember(prog);
    for (int i = 0; i < n; i++) free(owned[i]);
    free(owned);
    free(opts);
    return r;
}

int nvrtcGetCUBINSize(void *prog, size_t *size) {
    static int (*f)(void *, size_t *);
    if (was_rewritten(prog, 0)) return nvrtcGetPTXSize((A)prog, (A)size, 0, 0, 0, 0, 0, 0);
    if (!f) *(void **)&f = sym("nvrtcGetCUBINSize");
    return f ? f(prog, size) : NVRTC_ERROR_INTERNAL_ERROR;
}

int nvrtcGetCUBIN(void *prog, char *out) {
    static int (*f)(void *, char *);
    if (was_rewritten(prog, 0)) return nvrtcGetPTX((A)prog, (A)out, 0, 0, 0, 0, 0, 0);
    if (!f) *(void **)&f = sym("nvrtcGetCUBIN");
    return f ? f(prog, out) : NVRTC_ERROR_INTERNAL_ERROR;
}

int nvrtcDestroyProgram(void **prog) {
    static int (*f)(void **);
    if (prog) was_rewritten(*prog, 1);
    if (!f) *(void **)&f = sym("nvrtcDestroyProgram");
    return f ? f(prog) : NVRTC_ERROR_INTERNAL_ERROR;
}
