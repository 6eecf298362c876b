// cuSOLVER's sparse API (NOTE [sparse solves]): csrlsv{chol,lu,qr} on the host and on the device, the low-level
// csrchol/csrqr families (analysis, buffer sizes, factorisation, zero pivot, solve; QR with a shift), csrperm,
// symrcm, the host LU (its extracted factors) and cusolverRf, singular matrices and bad indices. Every x is checked
// on the host against A x = b. Prints PASS.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

#include "check.h"

extern "C" {
typedef void *handle_t;
int cusolverSpCreate(handle_t *h);
int cusolverSpDestroy(handle_t h);
int cusparseCreateMatDescr(handle_t *d);
int cusparseSetMatIndexBase(handle_t d, int base);
int cusolverSpDcsrlsvluHost(handle_t, int, int, handle_t, const double *, const int *, const int *, const double *,
                            double, int, double *, int *);
int cusolverSpDcsrlsvqrHost(handle_t, int, int, handle_t, const double *, const int *, const int *, const double *,
                            double, int, double *, int *);
int cusolverSpDcsrlsvcholHost(handle_t, int, int, handle_t, const double *, const int *, const int *, const double *,
                              double, int, double *, int *);
int cusolverSpDcsrlsvqr(handle_t, int, int, handle_t, const double *, const int *, const int *, const double *, double,
                        int, double *, int *);
int cusolverSpDcsrlsvchol(handle_t, int, int, handle_t, const double *, const int *, const int *, const double *,
                          double, int, double *, int *);
int cusolverSpCreateCsrcholInfo(handle_t *);
int cusolverSpDestroyCsrcholInfo(handle_t);
int cusolverSpXcsrcholAnalysis(handle_t, int, int, handle_t, const int *, const int *, handle_t);
int cusolverSpDcsrcholBufferInfo(handle_t, int, int, handle_t, const double *, const int *, const int *, handle_t,
                                 size_t *, size_t *);
int cusolverSpDcsrcholFactor(handle_t, int, int, handle_t, const double *, const int *, const int *, handle_t, void *);
int cusolverSpDcsrcholZeroPivot(handle_t, handle_t, double, int *);
int cusolverSpDcsrcholSolve(handle_t, int, const double *, double *, handle_t, void *);
int cusolverSpCreateCsrqrInfoHost(handle_t *);
int cusolverSpXcsrqrAnalysisHost(handle_t, int, int, int, handle_t, const int *, const int *, handle_t);
int cusolverSpDcsrqrBufferInfoHost(handle_t, int, int, int, handle_t, const double *, const int *, const int *,
                                   handle_t, size_t *, size_t *);
int cusolverSpDcsrqrSetupHost(handle_t, int, int, int, handle_t, const double *, const int *, const int *, double,
                              handle_t);
int cusolverSpDcsrqrFactorHost(handle_t, int, int, int, double *, double *, handle_t, void *);
int cusolverSpDcsrqrZeroPivotHost(handle_t, handle_t, double, int *);
int cusolverSpDcsrqrSolveHost(handle_t, int, int, double *, double *, handle_t, void *);
int cusolverSpCreateCsrluInfoHost(handle_t *);
int cusolverSpXcsrluAnalysisHost(handle_t, int, int, handle_t, const int *, const int *, handle_t);
int cusolverSpDcsrluBufferInfoHost(handle_t, int, int, handle_t, const double *, const int *, const int *, handle_t,
                                   size_t *, size_t *);
int cusolverSpDcsrluFactorHost(handle_t, int, int, handle_t, const double *, const int *, const int *, handle_t, double,
                               void *);
int cusolverSpDcsrluZeroPivotHost(handle_t, handle_t, double, int *);
int cusolverSpDcsrluSolveHost(handle_t, int, const double *, double *, handle_t, void *);
int cusolverSpXcsrluNnzHost(handle_t, int *, int *, handle_t);
int cusolverSpDcsrluExtractHost(handle_t, int *, int *, handle_t, double *, int *, int *, handle_t, double *, int *,
                                int *, handle_t, void *);
int cusolverRfCreate(handle_t *);
int cusolverRfDestroy(handle_t);
int cusolverRfSetNumericProperties(handle_t, double, double);
int cusolverRfGetNumericProperties(handle_t, double *, double *);
int cusolverRfSetupHost(int, int, int *, int *, double *, int, int *, int *, double *, int, int *, int *, double *,
                        int *, int *, handle_t);
int cusolverRfAnalyze(handle_t);
int cusolverRfResetValues(int, int, int *, int *, double *, int *, int *, handle_t);
int cusolverRfRefactor(handle_t);
int cusolverRfSolve(handle_t, int *, int *, int, double *, int, double *, int);
int cusolverSpXcsrsymrcmHost(handle_t, int, int, handle_t, const int *, const int *, int *);
int cusolverSpXcsrperm_bufferSizeHost(handle_t, int, int, int, handle_t, const int *, const int *, const int *,
                                      const int *, size_t *);
int cusolverSpXcsrpermHost(handle_t, int, int, int, handle_t, int *, int *, const int *, const int *, int *, void *);
}

const int N = 40;
struct Csr {
    int rp[N + 1], ci[4 * N];
    double v[4 * N];
    int nnz;
};

// A tridiagonal matrix plus a far entry per row; symmetric (and positive definite) when ``sym``
static Csr make(bool sym, double shift = 0.0) {
    Csr a;
    a.nnz = 0;
    for (int i = 0; i < N; i++) {
        a.rp[i] = a.nnz;
        int far = (i + N / 2) % N;
        for (int j = 0; j < N; j++) {
            double x = 0.0;
            if (j == i) x = 6.0 + 0.1 * i + shift;
            else if (j == i - 1) x = -1.0;
            else if (j == i + 1) x = sym ? -1.0 : -2.5;
            else if (j == far || (sym && (j + N / 2) % N == i)) x = sym ? 0.5 : 0.75;
            if (x != 0.0) {
                a.ci[a.nnz] = j;
                a.v[a.nnz++] = x;
            }
        }
    }
    a.rp[N] = a.nnz;
    return a;
}

static double residual(const Csr &a, const double *x, const double *b, double mu = 0.0) {
    double worst = 0.0;
    for (int i = 0; i < N; i++) {
        double s = -mu * x[i];
        for (int k = a.rp[i]; k < a.rp[i + 1]; k++) s += a.v[k] * x[a.ci[k]];
        worst = fmax(worst, fabs(s - b[i]));
    }
    return worst;
}

template <class T> static T *upload(const T *h, size_t n) {
    T *d;
    CHECK(cudaMalloc(&d, n * sizeof(T)));
    CHECK(cudaMemcpy(d, h, n * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

int main() {
    handle_t h, descr;
    CHECK(cusolverSpCreate(&h));
    CHECK(cusparseCreateMatDescr(&descr));
    double b[N], x[N];
    for (int i = 0; i < N; i++) b[i] = 1.0 + (i % 5);
    int sing;

    // host solvers on a non-symmetric matrix
    Csr g = make(false);
    CHECK(cusolverSpDcsrlsvluHost(h, N, g.nnz, descr, g.v, g.rp, g.ci, b, 1e-12, 0, x, &sing));
    EXPECT(sing == -1 && residual(g, x, b) < 1e-12);
    memset(x, 0, sizeof(x));
    CHECK(cusolverSpDcsrlsvqrHost(h, N, g.nnz, descr, g.v, g.rp, g.ci, b, 1e-12, 1, x, &sing));
    EXPECT(sing == -1 && residual(g, x, b) < 1e-12);

    // Cholesky reads the lower triangle only: garbage above the diagonal does not change x
    Csr s = make(true), t = make(true);
    for (int i = 0; i < N; i++)
        for (int k = t.rp[i]; k < t.rp[i + 1]; k++)
            if (t.ci[k] > i) t.v[k] = 1000.0;
    CHECK(cusolverSpDcsrlsvcholHost(h, N, t.nnz, descr, t.v, t.rp, t.ci, b, 1e-12, 0, x, &sing));
    EXPECT(sing == -1 && residual(s, x, b) < 1e-12);

    // device solvers, 1-based indices
    Csr one = make(false);
    for (int i = 0; i <= N; i++) one.rp[i] += 1;
    for (int k = 0; k < one.nnz; k++) one.ci[k] += 1;
    CHECK(cusparseSetMatIndexBase(descr, 1));
    int *d_rp = upload(one.rp, N + 1), *d_ci = upload(one.ci, one.nnz);
    double *d_v = upload(one.v, one.nnz), *d_b = upload(b, N), *d_x;
    CHECK(cudaMalloc(&d_x, N * sizeof(double)));
    CHECK(cusolverSpDcsrlsvqr(h, N, one.nnz, descr, d_v, d_rp, d_ci, d_b, 1e-12, 0, d_x, &sing));
    CHECK(cudaMemcpy(x, d_x, sizeof(x), cudaMemcpyDeviceToHost));
    EXPECT(sing == -1 && residual(g, x, b) < 1e-12);
    CHECK(cusparseSetMatIndexBase(descr, 0));

    int *s_rp = upload(s.rp, N + 1), *s_ci = upload(s.ci, s.nnz);
    double *s_v = upload(s.v, s.nnz);
    CHECK(cusolverSpDcsrlsvchol(h, N, s.nnz, descr, s_v, s_rp, s_ci, d_b, 1e-12, 0, d_x, &sing));
    CHECK(cudaMemcpy(x, d_x, sizeof(x), cudaMemcpyDeviceToHost));
    EXPECT(sing == -1 && residual(s, x, b) < 1e-12);

    // a singular matrix (row 7 all zero) is reported; a matrix that is not positive definite too
    Csr z = make(false);
    for (int k = z.rp[7]; k < z.rp[8]; k++) z.v[k] = 0.0;
    CHECK(cusolverSpDcsrlsvluHost(h, N, z.nnz, descr, z.v, z.rp, z.ci, b, 1e-12, 0, x, &sing));
    EXPECT(sing >= 0);
    Csr neg = make(true, -20.0);
    int *n_rp = upload(neg.rp, N + 1), *n_ci = upload(neg.ci, neg.nnz);
    double *n_v = upload(neg.v, neg.nnz);
    CHECK(cusolverSpDcsrlsvchol(h, N, neg.nnz, descr, n_v, n_rp, n_ci, d_b, 1e-12, 0, d_x, &sing));
    EXPECT(sing >= 0);

    // the low-level Cholesky on the device
    handle_t info;
    size_t internal, work;
    CHECK(cusolverSpCreateCsrcholInfo(&info));
    CHECK(cusolverSpXcsrcholAnalysis(h, N, s.nnz, descr, s_rp, s_ci, info));
    CHECK(cusolverSpDcsrcholBufferInfo(h, N, s.nnz, descr, s_v, s_rp, s_ci, info, &internal, &work));
    void *d_buf;
    CHECK(cudaMalloc(&d_buf, work));
    CHECK(cusolverSpDcsrcholFactor(h, N, s.nnz, descr, s_v, s_rp, s_ci, info, d_buf));
    CHECK(cusolverSpDcsrcholZeroPivot(h, info, 1e-12, &sing));
    EXPECT(sing == -1);
    CHECK(cusolverSpDcsrcholSolve(h, N, d_b, d_x, info, d_buf));
    CHECK(cudaMemcpy(x, d_x, sizeof(x), cudaMemcpyDeviceToHost));
    EXPECT(residual(s, x, b) < 1e-12);
    CHECK(cusolverSpDestroyCsrcholInfo(info));

    // the low-level QR on the host, with a shift: (A - mu I) x = b
    handle_t qinfo;
    CHECK(cusolverSpCreateCsrqrInfoHost(&qinfo));
    CHECK(cusolverSpXcsrqrAnalysisHost(h, N, N, g.nnz, descr, g.rp, g.ci, qinfo));
    CHECK(cusolverSpDcsrqrBufferInfoHost(h, N, N, g.nnz, descr, g.v, g.rp, g.ci, qinfo, &internal, &work));
    void *buf = malloc(work);
    CHECK(cusolverSpDcsrqrSetupHost(h, N, N, g.nnz, descr, g.v, g.rp, g.ci, 0.5, qinfo));
    CHECK(cusolverSpDcsrqrFactorHost(h, N, N, g.nnz, NULL, NULL, qinfo, buf));
    CHECK(cusolverSpDcsrqrZeroPivotHost(h, qinfo, 1e-12, &sing));
    EXPECT(sing == -1);
    CHECK(cusolverSpDcsrqrSolveHost(h, N, N, b, x, qinfo, buf));
    EXPECT(residual(g, x, b, 0.5) < 1e-12);

    // csrperm: B = A(p, q), and map says where B's values were in A
    int p[N], q[N], map[4 * N], brp[N + 1], bci[4 * N];
    for (int i = 0; i < N; i++) {
        p[i] = N - 1 - i;
        q[i] = (i * 7) % N;  // 7 is prime to 40
    }
    for (int k = 0; k < g.nnz; k++) map[k] = k;
    memcpy(brp, g.rp, sizeof(brp));
    memcpy(bci, g.ci, sizeof(int) * g.nnz);
    size_t need;
    CHECK(cusolverSpXcsrperm_bufferSizeHost(h, N, N, g.nnz, descr, brp, bci, p, q, &need));
    void *pbuf = malloc(need);
    CHECK(cusolverSpXcsrpermHost(h, N, N, g.nnz, descr, brp, bci, p, q, map, pbuf));
    for (int i = 0; i < N; i++)
        for (int k = brp[i]; k < brp[i + 1]; k++) {
            int src = map[k], row = p[i], col = q[bci[k]];
            EXPECT(g.ci[src] == col && g.rp[row] <= src && src < g.rp[row + 1]);
        }
    int order[N], seen[N] = {0};
    CHECK(cusolverSpXcsrsymrcmHost(h, N, s.nnz, descr, s.rp, s.ci, order));
    for (int i = 0; i < N; i++) seen[order[i]]++;
    for (int i = 0; i < N; i++) EXPECT(seen[i] == 1);

    // the host LU: P A Q^T = L U (L's unit diagonal implicit), then cusolverRf refactorising new values of A
    handle_t linfo;
    CHECK(cusolverSpCreateCsrluInfoHost(&linfo));
    CHECK(cusolverSpXcsrluAnalysisHost(h, N, g.nnz, descr, g.rp, g.ci, linfo));
    CHECK(cusolverSpDcsrluBufferInfoHost(h, N, g.nnz, descr, g.v, g.rp, g.ci, linfo, &internal, &work));
    void *lbuf = malloc(work);
    CHECK(cusolverSpDcsrluFactorHost(h, N, g.nnz, descr, g.v, g.rp, g.ci, linfo, 1.0, lbuf));
    CHECK(cusolverSpDcsrluZeroPivotHost(h, linfo, 1e-12, &sing));
    EXPECT(sing == -1);
    CHECK(cusolverSpDcsrluSolveHost(h, N, b, x, linfo, lbuf));
    EXPECT(residual(g, x, b) < 1e-12);
    int nnz_l, nnz_u, lp[N], lq[N];
    CHECK(cusolverSpXcsrluNnzHost(h, &nnz_l, &nnz_u, linfo));
    int *l_rp = (int *)malloc(sizeof(int) * (N + 1)), *l_ci = (int *)malloc(sizeof(int) * nnz_l);
    int *u_rp = (int *)malloc(sizeof(int) * (N + 1)), *u_ci = (int *)malloc(sizeof(int) * nnz_u);
    double *l_v = (double *)malloc(sizeof(double) * nnz_l), *u_v = (double *)malloc(sizeof(double) * nnz_u);
    CHECK(cusolverSpDcsrluExtractHost(h, lp, lq, descr, l_v, l_rp, l_ci, descr, u_v, u_rp, u_ci, linfo, lbuf));
    static double dense_a[N][N], dense_l[N][N], dense_u[N][N];
    for (int i = 0; i < N; i++) {
        dense_l[i][i] = 1.0;
        for (int k = g.rp[i]; k < g.rp[i + 1]; k++) dense_a[i][g.ci[k]] = g.v[k];
        for (int k = l_rp[i]; k < l_rp[i + 1]; k++) { EXPECT(l_ci[k] < i); dense_l[i][l_ci[k]] = l_v[k]; }
        for (int k = u_rp[i]; k < u_rp[i + 1]; k++) { EXPECT(u_ci[k] >= i); dense_u[i][u_ci[k]] = u_v[k]; }
    }
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            double lu = 0.0;
            for (int k = 0; k < N; k++) lu += dense_l[i][k] * dense_u[k][j];
            EXPECT(fabs(lu - dense_a[lp[i]][lq[j]]) < 1e-12);
        }
    handle_t rf;
    CHECK(cusolverRfCreate(&rf));
    double zero, boost;
    CHECK(cusolverRfSetNumericProperties(rf, 1e-14, 1e-13));
    CHECK(cusolverRfGetNumericProperties(rf, &zero, &boost));
    EXPECT(zero == 1e-14 && boost == 1e-13);
    CHECK(cusolverRfSetupHost(N, g.nnz, g.rp, g.ci, g.v, nnz_l, l_rp, l_ci, l_v, nnz_u, u_rp, u_ci, u_v, lp, lq, rf));
    CHECK(cusolverRfAnalyze(rf));
    Csr twice = g;
    for (int k = 0; k < twice.nnz; k++) twice.v[k] *= 2.0;
    int *g_rp = upload(g.rp, N + 1), *g_ci = upload(g.ci, g.nnz), *d_p = upload(lp, N), *d_q = upload(lq, N);
    double *t_v = upload(twice.v, twice.nnz), *d_t;
    CHECK(cudaMalloc(&d_t, N * sizeof(double)));
    CHECK(cusolverRfResetValues(N, g.nnz, g_rp, g_ci, t_v, d_p, d_q, rf));
    CHECK(cusolverRfRefactor(rf));
    CHECK(cudaMemcpy(d_x, b, sizeof(b), cudaMemcpyHostToDevice));
    CHECK(cusolverRfSolve(rf, d_p, d_q, 1, d_t, N, d_x, N));
    CHECK(cudaMemcpy(x, d_x, sizeof(x), cudaMemcpyDeviceToHost));
    EXPECT(residual(twice, x, b) < 1e-12);  // the new values, not the ones set up
    CHECK(cusolverRfDestroy(rf));

    // a column index outside the matrix is refused (CUSOLVER_STATUS_INVALID_VALUE), nothing read past it
    Csr bad = make(false);
    bad.ci[5] = N + 3;
    EXPECT(cusolverSpDcsrlsvluHost(h, N, bad.nnz, descr, bad.v, bad.rp, bad.ci, b, 1e-12, 0, x, &sing) == 3);
    int *bad_rp = upload(bad.rp, N + 1), *bad_ci = upload(bad.ci, bad.nnz);
    EXPECT(cusolverSpDcsrlsvqr(h, N, bad.nnz, descr, d_v, bad_rp, bad_ci, d_b, 1e-12, 0, d_x, &sing) != 0);

    CHECK(cusolverSpDestroy(h));
    printf("PASS\n");
    return 0;
}
