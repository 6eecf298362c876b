/*
 * wooly native face: the process's libcuda.so.1 (and libnvidia-ml.so.1).
 *
 * Every entry point is a trampoline into a Python implementation registered by
 * shim.native.face.activate() through wooly_register(). See NOTE [trampolines] in
 * shim/native/registry.py for the design; in short:
 *  - cuGetProcAddress(_v2) asks the Python resolver for (symbol, version, flags) and hands out
 *    one of a fixed pool of C trampolines bound to that answer;
 *  - the symbols programs call directly (cuInit, nvmlInit_v2, ...) are exported here and bind
 *    themselves to a trampoline slot on first call, resolved by their exact symbol name;
 *  - a trampoline forwards 24 integer-class arguments (x86-64 SysV / AArch64: every driver API
 *    argument is an integer, a pointer or a struct of <= 8 bytes), so one C type fits all;
 *  - once the interpreter is finalizing, trampolines return CUDA_ERROR_DEINITIALIZED instead of
 *    entering Python (calling a ctypes callback then can crash the process);
 *  - entry points with no implementation return CUDA_ERROR_NOT_SUPPORTED (NVML_ERROR_NOT_SUPPORTED
 *    for nvml*) and report their name once.
 * If nothing registered yet and the host process is a Python interpreter, the first call imports
 * shim.native.face and activates it (a subprocess that inherited LD_LIBRARY_PATH, say).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "native.h"

typedef CUresult (*impl_fn)(ARGS);
/* resolver(name, version, flags, &impl) -> 1 implemented, 0 known but unsupported, -1 unknown.
 * version -1 means "name is an exact exported symbol name". */
typedef int (*resolver_fn)(const char *, int, uint64_t, void **);
typedef void (*report_fn)(const char *);

#define NSLOTS 4096
#define CUDA_ERROR_DEINITIALIZED 4
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_NOT_FOUND 500
#define CUDA_ERROR_NOT_SUPPORTED 801
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_LIBRARY_NOT_FOUND 12
#define CUBLAS_STATUS_NOT_INITIALIZED 1
#define CUBLAS_STATUS_NOT_SUPPORTED 15
#define CUFFT_SETUP_FAILED 7
#define CUFFT_NOT_SUPPORTED 16
#define CURAND_STATUS_NOT_INITIALIZED 101
#define CURAND_STATUS_INTERNAL_ERROR 999
#define CUSOLVER_STATUS_NOT_INITIALIZED 1
#define CUSOLVER_STATUS_NOT_SUPPORTED 9
#define CUSPARSE_STATUS_NOT_INITIALIZED 1
#define CUSPARSE_STATUS_NOT_SUPPORTED 10

/* Which library an exported name belongs to: 1 NVML, 2 cuBLAS (and cuBLASLt), 3 cuFFT, 4 cuRAND, 5 cuSOLVER,
 * 6 cuSPARSE, 0 the driver. */
static int library_of(const char *name) {
    if (strncmp(name, "nvml", 4) == 0) return 1;
    if (strncmp(name, "cublas", 6) == 0) return 2;
    if (strncmp(name, "cufft", 5) == 0) return 3;
    if (strncmp(name, "curand", 6) == 0) return 4;
    if (strncmp(name, "cusolver", 8) == 0) return 5;
    if (strncmp(name, "cusparse", 8) == 0) return 6;
    return 0;
}

/* Each library's status for: the face is gone (0), not supported (1), not bound (2). */
static const CUresult STATUS[7][3] = {
    {CUDA_ERROR_DEINITIALIZED, CUDA_ERROR_NOT_SUPPORTED, CUDA_ERROR_NOT_INITIALIZED},
    {NVML_ERROR_UNINITIALIZED, NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_LIBRARY_NOT_FOUND},
    {CUBLAS_STATUS_NOT_INITIALIZED, CUBLAS_STATUS_NOT_SUPPORTED, CUBLAS_STATUS_NOT_INITIALIZED},
    {CUFFT_SETUP_FAILED, CUFFT_NOT_SUPPORTED, CUFFT_SETUP_FAILED},
    {CURAND_STATUS_NOT_INITIALIZED, CURAND_STATUS_INTERNAL_ERROR, CURAND_STATUS_NOT_INITIALIZED},
    {CUSOLVER_STATUS_NOT_INITIALIZED, CUSOLVER_STATUS_NOT_SUPPORTED, CUSOLVER_STATUS_NOT_INITIALIZED},
    {CUSPARSE_STATUS_NOT_INITIALIZED, CUSPARSE_STATUS_NOT_SUPPORTED, CUSPARSE_STATUS_NOT_INITIALIZED},
};

struct slot {
    char name[112];
    int version;
    uint64_t flags;
    impl_fn impl;
    int nvml;  /* the library the name belongs to (library_of): their status codes differ */
    int cleanup; /* frees, destroys, unloads: answered with success once the face has shut down */
    int warned;
};

static struct slot slots[NSLOTS];
static int nslots;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static resolver_fn resolver;
static report_fn report;
static volatile int shutting_down;
static int (*py_finalizing)(void);
static int (*py_initialized)(void);

static int finalizing(void) {
    if (shutting_down) return 1;
    if (py_initialized && !py_initialized()) return 1;
    return py_finalizing ? py_finalizing() : 0;
}

static void find_python(void) {
    if (!py_initialized) *(void **)&py_initialized = dlsym(RTLD_DEFAULT, "Py_IsInitialized");
    if (!py_finalizing) *(void **)&py_finalizing = dlsym(RTLD_DEFAULT, "Py_IsFinalizing");
    if (!py_finalizing) *(void **)&py_finalizing = dlsym(RTLD_DEFAULT, "_Py_IsFinalizing");
}

/* NOTE [embedded interpreter]: a program with no Python of its own (an nvcc-built binary, any
 * native CUDA application) gets one here. `wooly run ./app` sets WOOLY_LIBPYTHON (the launcher's
 * libpython), WOOLY_PYTHONHOME and WOOLY_PYTHONPATH (its prefix and sys.path); at the first driver
 * call this library loads that libpython, starts an interpreter without signal handlers (the
 * program's own stay in force), activates the face exactly as in a Python program, and releases
 * the GIL: from then on every trampoline enters Python through its ctypes callback, which takes
 * the GIL on whichever of the program's threads calls. The wire format therefore has one
 * definition (proto/), shared with every other face. At exit a C atexit handler flushes queued
 * work and stops the trampolines; the interpreter is not finalized (other threads may be inside
 * it, and the process is ending anyway). */
static pthread_once_t boot_once = PTHREAD_ONCE_INIT;
static int embedded;

static void embedded_exit(void) {
    int (*ensure)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "PyGILState_Ensure");
    void (*release)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "PyGILState_Release");
    int (*run)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "PyRun_SimpleString");
    if (shutting_down || !ensure || !release || !run) return;
    int g = ensure();
    run("import shim.native.face as _wooly_face\n_wooly_face.embedded_exit()\n");
    release(g);
    shutting_down = 1;
}

/* setenv NAME to the value of FROM for the interpreter's start; returns the old value to restore. */
static char *swap_env(const char *name, const char *from) {
    const char *value = getenv(from);
    char *old = getenv(name) ? strdup(getenv(name)) : NULL;
    if (value && *value) setenv(name, value, 1);
    return old;
}

static void restore_env(const char *name, char *old) {
    if (old) { setenv(name, old, 1); free(old); }
    else unsetenv(name);
}

static void start_interpreter(void) {
    const char *path = getenv("WOOLY_LIBPYTHON");
    if (!path || !*path) {
        fprintf(stderr, "wooly: libcuda shim loaded outside a Python process with the wooly face; "
                        "run the program with `wooly run`\n");
        return;
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        fprintf(stderr, "wooly: cannot load the Python runtime for a native program (WOOLY_LIBPYTHON=%s): %s\n",
                path, dlerror());
        return;
    }
    void (*init)(int) = (void (*)(int))dlsym(h, "Py_InitializeEx");
    int (*run)(const char *) = (int (*)(const char *))dlsym(h, "PyRun_SimpleString");
    void *(*save)(void) = (void *(*)(void))dlsym(h, "PyEval_SaveThread");
    if (!init || !run || !save) {
        fprintf(stderr, "wooly: %s is not a usable Python runtime (no Py_InitializeEx)\n", path);
        return;
    }
    char *home = swap_env("PYTHONHOME", "WOOLY_PYTHONHOME");
    char *pypath = swap_env("PYTHONPATH", "WOOLY_PYTHONPATH");
    init(0); /* 0: keep the program's signal handlers */
    restore_env("PYTHONHOME", home);
    restore_env("PYTHONPATH", pypath);
    find_python();
    embedded = 1;
    if (run("import shim.native.face as _wooly_face\n_wooly_face.activate_embedded()\n") != 0)
        fprintf(stderr, "wooly: activating the CUDA face in the embedded interpreter failed\n");
    atexit(embedded_exit);
    save(); /* release the GIL: trampolines take it on whichever thread calls */
}

static void boot(void) {
    find_python();
    int (*ensure)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "PyGILState_Ensure");
    void (*release)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "PyGILState_Release");
    int (*run)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "PyRun_SimpleString");
    if (!ensure || !release || !run || !py_initialized) {
        start_interpreter(); /* no Python in this process: bring one (NOTE [embedded interpreter]) */
        return;
    }
    if (!py_initialized() || finalizing()) return;
    /* A Python program that inherited LD_LIBRARY_PATH (a subprocess, say): activate the face in it. */
    int g = ensure();
    run("import shim.native.face as _wooly_face\n_wooly_face.activate()\n");
    release(g);
}

/* First call with no resolver: activate the face, bringing an interpreter if the process has none. */
static void bootstrap(void) {
    if (resolver) return;
    pthread_once(&boot_once, boot);
}

/* Entry points that release something. A real driver still answers them while the process exits, and
 * libraries free their objects then (CuPy's module cache, cudart's atexit); the session's end frees
 * everything in gpud anyway, so after shutdown they succeed instead of raising at the program. */
static int is_cleanup(const char *name) {
    static const char *const verbs[] = {"Free", "Destroy", "Unload", "Release", "Unregister", "Unmap", NULL};
    for (int k = 0; verbs[k]; k++)
        if (strstr(name, verbs[k])) return 1;
    return 0;
}

static CUresult body(int i, ARGS) {
    struct slot *s = &slots[i];
    if (finalizing()) {
        if (s->cleanup) return 0;
        return STATUS[s->nvml][0];
    }
    if (s->impl) return s->impl(PASS);
    if (!s->warned) {
        s->warned = 1;
        if (report && !finalizing()) report(s->name);
        else fprintf(stderr, "wooly: %s is not supported\n", s->name);
    }
    return STATUS[s->nvml][1];
}

/* The trampoline pool: t000 ... tfff, each bound to the slot of its own number. */
#define T(n) static CUresult t##n(ARGS) { return body(0x##n, PASS); }
#define T16(p) T(p##0) T(p##1) T(p##2) T(p##3) T(p##4) T(p##5) T(p##6) T(p##7) \
               T(p##8) T(p##9) T(p##a) T(p##b) T(p##c) T(p##d) T(p##e) T(p##f)
#define T256(p) T16(p##0) T16(p##1) T16(p##2) T16(p##3) T16(p##4) T16(p##5) T16(p##6) T16(p##7) \
                T16(p##8) T16(p##9) T16(p##a) T16(p##b) T16(p##c) T16(p##d) T16(p##e) T16(p##f)
T256(0) T256(1) T256(2) T256(3) T256(4) T256(5) T256(6) T256(7)
T256(8) T256(9) T256(a) T256(b) T256(c) T256(d) T256(e) T256(f)
#define E(n) (void *)t##n,
#define E16(p) E(p##0) E(p##1) E(p##2) E(p##3) E(p##4) E(p##5) E(p##6) E(p##7) \
               E(p##8) E(p##9) E(p##a) E(p##b) E(p##c) E(p##d) E(p##e) E(p##f)
#define E256(p) E16(p##0) E16(p##1) E16(p##2) E16(p##3) E16(p##4) E16(p##5) E16(p##6) E16(p##7) \
                E16(p##8) E16(p##9) E16(p##a) E16(p##b) E16(p##c) E16(p##d) E16(p##e) E16(p##f)
static void *const pool[NSLOTS] = {E256(0) E256(1) E256(2) E256(3) E256(4) E256(5) E256(6) E256(7)
                                   E256(8) E256(9) E256(a) E256(b) E256(c) E256(d) E256(e) E256(f)};

/* Bind (name, version, flags) to a slot; -2 when the name is unknown, -1 when the pool is full. */
static int bind_slot(const char *name, int version, uint64_t flags) {
    void *impl = NULL;
    int i, known;
    pthread_mutex_lock(&lock);
    for (i = 0; i < nslots; i++)
        if (slots[i].version == version && slots[i].flags == flags && strcmp(slots[i].name, name) == 0) {
            pthread_mutex_unlock(&lock);
            return i;
        }
    pthread_mutex_unlock(&lock);
    bootstrap();
    /* The resolver runs Python: never call it holding the lock (it needs the GIL). */
    known = resolver && !finalizing() ? resolver(name, version, flags, &impl) : 0;
    if (known < 0) return -2;
    pthread_mutex_lock(&lock);
    for (i = 0; i < nslots; i++)
        if (slots[i].version == version && slots[i].flags == flags && strcmp(slots[i].name, name) == 0) break;
    if (i == nslots) {
        if (nslots == NSLOTS) { pthread_mutex_unlock(&lock); return -1; }
        nslots++;
        snprintf(slots[i].name, sizeof slots[i].name, "%s", name);
        slots[i].version = version;
        slots[i].flags = flags;
        slots[i].nvml = library_of(name);
        slots[i].cleanup = is_cleanup(name);
        slots[i].impl = (impl_fn)impl;
    }
    pthread_mutex_unlock(&lock);
    return i;
}

/* ------------------------------------------------------------------ registration (from Python) */
void wooly_register(resolver_fn r, report_fn rep) {
    find_python();
    pthread_mutex_lock(&lock);
    resolver = r;
    report = rep;
    shutting_down = 0;
    /* Slots bound before registration (calls that raced activation) resolve again. */
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < nslots; i++) {
        void *impl = NULL;
        if (!slots[i].impl && r && r(slots[i].name, slots[i].version, slots[i].flags, &impl) > 0)
            slots[i].impl = (impl_fn)impl;
    }
}

/* Called at interpreter exit: from now on trampolines never enter Python. */
void wooly_shutdown(void) { shutting_down = 1; }

int wooly_slot_count(void) { return nslots; }

/* ------------------------------------------------------------------ cuGetProcAddress */
static CUresult get_proc(const char *symbol, void **pfn, int version, uint64_t flags, int *status) {
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    if (strcmp(symbol, "cuGetProcAddress") == 0) {
        extern CUresult cuGetProcAddress_v2(const char *, void **, int, uint64_t, int *);
        extern CUresult cuGetProcAddress(const char *, void **, int, uint64_t);
        *pfn = version >= 12000 ? (void *)cuGetProcAddress_v2 : (void *)cuGetProcAddress;
        if (status) *status = 0;
        return 0;
    }
    if (strcmp(symbol, "cuGetExportTable") == 0) {
        extern CUresult cuGetExportTable(const void **, const uint8_t *);
        *pfn = (void *)cuGetExportTable;
        if (status) *status = 0;
        return 0;
    }
    int i = bind_slot(symbol, version, flags & 3);
    if (i < 0) {
        if (status) *status = 1; /* CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND */
        return i == -2 ? CUDA_ERROR_NOT_FOUND : CUDA_ERROR_NOT_SUPPORTED;
    }
    *pfn = pool[i];
    if (status) *status = 0;
    return 0;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, uint64_t flags, int *status) {
    return get_proc(symbol, pfn, version, flags, status);
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, uint64_t flags) {
    return get_proc(symbol, pfn, version, flags, NULL);
}

/* ------------------------------------------------------------------ direct exports */
#define X(sym)                                                          \
    CUresult sym(ARGS) {                                                \
        static int s = -1;                                              \
        if (s < 0) s = bind_slot(#sym, -1, 0);                          \
        if (s < 0) return STATUS[library_of(#sym)][2];                  \
        return body(s, PASS);                                           \
    }
#include "exports.h"
#include "exports_cublas.h"
#include "exports_cufft.h"
#include "exports_curand.h"
#include "exports_cusolver.h"
#include "exports_cusparse.h"
#undef X

/* cuRAND entry points that take floating-point arguments by value: those travel in SSE registers, which the
 * integer-only trampolines never see, so they are written out here and hand their values on as IEEE-754 double
 * bit patterns (shim/native/curand.py unpacks them). */
static uint64_t bits(double v) {
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    return u;
}

#define BOUND(sym) static int s = -1; if (s < 0) s = bind_slot(#sym, -1, 0); if (s < 0) return STATUS[4][2]
CUresult curandGenerateNormal(A g, A out, A n, float mean, float sd) {
    BOUND(curandGenerateNormal);
    return body(s, g, out, n, bits(mean), bits(sd), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
}
CUresult curandGenerateNormalDouble(A g, A out, A n, double mean, double sd) {
    BOUND(curandGenerateNormalDouble);
    return body(s, g, out, n, bits(mean), bits(sd), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
}
CUresult curandGenerateLogNormal(A g, A out, A n, float mean, float sd) {
    BOUND(curandGenerateLogNormal);
    return body(s, g, out, n, bits(mean), bits(sd), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
}
CUresult curandGenerateLogNormalDouble(A g, A out, A n, double mean, double sd) {
    BOUND(curandGenerateLogNormalDouble);
    return body(s, g, out, n, bits(mean), bits(sd), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
}
CUresult curandGeneratePoisson(A g, A out, A n, double lambda) {
    BOUND(curandGeneratePoisson);
    return body(s, g, out, n, bits(lambda), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
}
CUresult curandGeneratePoissonMethod(A g, A out, A n, double lambda, A method) {
    BOUND(curandGeneratePoissonMethod);
    return body(s, g, out, n, bits(lambda), method, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
}
CUresult curandCreatePoissonDistribution(double lambda, A out) {
    BOUND(curandCreatePoissonDistribution);
    return body(s, bits(lambda), out, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
}
#undef BOUND

/* cuSPARSE's compress routines take their tolerance by value (float, double, or a complex of either, whose real
 * part is the tolerance): handed on as an IEEE-754 double bit pattern (shim/native/cusparse.py). */
typedef struct { float x, y; } wooly_cf;
typedef struct { double x, y; } wooly_cd;
#define SPARSE(sym) static int s = -1; if (s < 0) s = bind_slot(#sym, -1, 0); if (s < 0) return STATUS[library_of(#sym)][2]
#define NNZ_COMPRESS(sym, T, get)                                                                          \
    CUresult sym(A h, A m, A descr, A vals, A rowptr, A per_row, A nnz, T tol) {                            \
        SPARSE(sym);                                                                                       \
        return body(s, h, m, descr, vals, rowptr, per_row, nnz, bits(get), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, \
                    0, 0, 0, 0, 0);                                                                        \
    }
#define CSR2CSR_COMPRESS(sym, T, get)                                                                      \
    CUresult sym(A h, A m, A n, A descr, A vals, A cols, A rowptr, A nnz, A per_row, A c_vals, A c_cols,    \
                 A c_rowptr, T tol) {                                                                      \
        SPARSE(sym);                                                                                       \
        return body(s, h, m, n, descr, vals, cols, rowptr, nnz, per_row, c_vals, c_cols, c_rowptr, bits(get), \
                    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);                                                      \
    }
NNZ_COMPRESS(cusparseSnnz_compress, float, tol)
NNZ_COMPRESS(cusparseDnnz_compress, double, tol)
NNZ_COMPRESS(cusparseCnnz_compress, wooly_cf, tol.x)
NNZ_COMPRESS(cusparseZnnz_compress, wooly_cd, tol.x)
CSR2CSR_COMPRESS(cusparseScsr2csr_compress, float, tol)
CSR2CSR_COMPRESS(cusparseDcsr2csr_compress, double, tol)
CSR2CSR_COMPRESS(cusparseCcsr2csr_compress, wooly_cf, tol.x)
CSR2CSR_COMPRESS(cusparseZcsr2csr_compress, wooly_cd, tol.x)
#undef NNZ_COMPRESS
#undef CSR2CSR_COMPRESS
#undef SPARSE

/* cuSOLVER's sparse API takes its tolerance and shift by value (double): handed on as an IEEE-754 double bit
 * pattern (shim/native/cusolver_sp.py). */
#define SOLVER(sym) static int s = -1; if (s < 0) s = bind_slot(#sym, -1, 0); if (s < 0) return STATUS[library_of(#sym)][2]
#define LSV(sym)                                                                                           \
    CUresult sym(A h, A n, A nnz, A descr, A vals, A rowptr, A cols, A b, double tol, A reorder, A x, A sing) { \
        SOLVER(sym);                                                                                       \
        return body(s, h, n, nnz, descr, vals, rowptr, cols, b, bits(tol), reorder, x, sing, 0, 0, 0, 0, 0, 0, \
                    0, 0, 0, 0, 0, 0);                                                                     \
    }
#define QR_SETUP(sym)                                                                                      \
    CUresult sym(A h, A m, A n, A nnz, A descr, A vals, A rowptr, A cols, double mu, A info) {             \
        SOLVER(sym);                                                                                       \
        return body(s, h, m, n, nnz, descr, vals, rowptr, cols, bits(mu), info, 0, 0, 0, 0, 0, 0, 0, 0, 0, \
                    0, 0, 0, 0, 0);                                                                        \
    }
#define ZERO_PIVOT(sym)                                                                                    \
    CUresult sym(A h, A info, double tol, A position) {                                                    \
        SOLVER(sym);                                                                                       \
        return body(s, h, info, bits(tol), position, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, \
                    0, 0);                                                                                 \
    }
LSV(cusolverSpDcsrlsvluHost)
LSV(cusolverSpDcsrlsvqrHost)
LSV(cusolverSpDcsrlsvcholHost)
LSV(cusolverSpDcsrlsvqr)
LSV(cusolverSpDcsrlsvchol)
QR_SETUP(cusolverSpDcsrqrSetupHost)
QR_SETUP(cusolverSpDcsrqrSetup)
ZERO_PIVOT(cusolverSpDcsrcholZeroPivotHost)
ZERO_PIVOT(cusolverSpDcsrcholZeroPivot)
ZERO_PIVOT(cusolverSpDcsrqrZeroPivotHost)
ZERO_PIVOT(cusolverSpDcsrqrZeroPivot)
ZERO_PIVOT(cusolverSpDcsrluZeroPivotHost)
CUresult cusolverSpDcsrluFactorHost(A h, A n, A nnz, A descr, A vals, A rowptr, A cols, A info, double threshold,
                                    A buf) {
    SOLVER(cusolverSpDcsrluFactorHost);
    return body(s, h, n, nnz, descr, vals, rowptr, cols, info, bits(threshold), buf, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                0, 0, 0);
}
CUresult cusolverRfSetNumericProperties(A h, double zero, double boost) {
    SOLVER(cusolverRfSetNumericProperties);
    return body(s, h, bits(zero), bits(boost), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
}
#undef LSV
#undef QR_SETUP
#undef ZERO_PIVOT
#undef SOLVER

/* cuBLAS functions that return strings or sizes, not a status: answered here. */
const char *cublasGetStatusName(int status) {
    switch (status) {
    case 0: return "CUBLAS_STATUS_SUCCESS";
    case 1: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case 3: return "CUBLAS_STATUS_ALLOC_FAILED";
    case 7: return "CUBLAS_STATUS_INVALID_VALUE";
    case 8: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case 11: return "CUBLAS_STATUS_MAPPING_ERROR";
    case 13: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case 14: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case 15: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case 16: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "CUBLAS_STATUS_UNKNOWN";
    }
}

const char *cublasGetStatusString(int status) {
    switch (status) {
    case 0: return "the operation completed successfully";
    case 1: return "the library was not initialized";
    case 3: return "the resource allocation failed";
    case 7: return "an invalid numeric value was used as an argument";
    case 8: return "an absent device architectural feature is required";
    case 11: return "an access to GPU memory space failed";
    case 13: return "the GPU program failed to execute";
    case 14: return "an internal operation failed";
    case 15: return "the functionality requested is not supported";
    default: return "unknown error";
    }
}

const char *cublasLtGetStatusName(int status) { return cublasGetStatusName(status); }
const char *cublasLtGetStatusString(int status) { return cublasGetStatusString(status); }
/* cuSPARSE's status names (its handles only are implemented: shim/native/cusolver.py) */
const char *cusparseGetErrorName(int status) {
    switch (status) {
    case 0: return "CUSPARSE_STATUS_SUCCESS";
    case 1: return "CUSPARSE_STATUS_NOT_INITIALIZED";
    case 2: return "CUSPARSE_STATUS_ALLOC_FAILED";
    case 3: return "CUSPARSE_STATUS_INVALID_VALUE";
    case 6: return "CUSPARSE_STATUS_EXECUTION_FAILED";
    case 7: return "CUSPARSE_STATUS_INTERNAL_ERROR";
    case 10: return "CUSPARSE_STATUS_NOT_SUPPORTED";
    default: return "CUSPARSE_STATUS_UNKNOWN";
    }
}
const char *cusparseGetErrorString(int status) {
    switch (status) {
    case 0: return "success";
    case 10: return "operation not supported (wooly remotes cuSPARSE's handles only)";
    default: return cusparseGetErrorName(status);
    }
}
size_t cublasGetCudartVersion(void) { return 12090; }
size_t cublasLtGetCudartVersion(void) { return 12090; }
size_t cublasLtGetVersion(void) { return 120903; }

/* NVIDIA's private tables, for its CUDA runtime: NOTE [export tables] in export_tables.c. */
CUresult cuGetExportTable(const void **out, const uint8_t *id) { return wooly_get_export_table(out, id); }

/* nvmlErrorString returns a string, so it cannot go through an int trampoline. */
const char *nvmlErrorString(int result) {
    switch (result) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 5: return "Already Initialized";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 8: return "Insufficient External Power";
    case 9: return "Driver Not Loaded";
    case 10: return "Timeout";
    case 11: return "Interrupted request for GPU";
    case 12: return "NVML Shared Library Not Found";
    case 13: return "Function Not Found";
    case 15: return "GPU is lost";
    case 19: return "Argument version mismatch";
    case 999: return "Unknown Error";
    default: return "Unknown Error";
    }
}
