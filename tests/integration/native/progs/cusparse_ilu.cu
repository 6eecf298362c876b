// cuSPARSE's ILU(0) (csrilu02 + zeroPivot) and triangular solves (SpSV), as cuda-samples conjugateGradientPrecond
// uses them: on a tridiagonal matrix ILU(0) is the exact LU, so solving L (unit lower) then U (upper) with SpSV
// gives A^-1 b, which is checked on the host; a zero pivot is reported with its row. Prints PASS.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#include "check.h"

extern "C" {
typedef void *handle_t;
int cusparseCreate(handle_t *h);
int cusparseCreateMatDescr(handle_t *d);
int cusparseCreateCsrilu02Info(handle_t *info);
int cusparseDcsrilu02_bufferSize(handle_t h, int m, int nnz, handle_t d, double *v, const int *rp, const int *ci,
                                 handle_t info, int *size);
int cusparseDcsrilu02_analysis(handle_t h, int m, int nnz, handle_t d, const double *v, const int *rp, const int *ci,
                               handle_t info, int policy, void *buf);
int cusparseDcsrilu02(handle_t h, int m, int nnz, handle_t d, double *v, const int *rp, const int *ci, handle_t info,
                      int policy, void *buf);
int cusparseXcsrilu02_zeroPivot(handle_t h, handle_t info, int *position);
int cusparseCreateCsr(handle_t *mat, long long rows, long long cols, long long nnz, void *rp, void *ci, void *v,
                      int rpType, int ciType, int base, int valueType);
int cusparseSpMatSetAttribute(handle_t mat, int attribute, void *data, size_t size);
int cusparseCreateDnVec(handle_t *vec, long long n, void *values, int valueType);
int cusparseSpSV_createDescr(handle_t *d);
int cusparseSpSV_bufferSize(handle_t h, int op, const void *alpha, handle_t mat, handle_t x, handle_t y, int type,
                            int alg, handle_t d, size_t *size);
int cusparseSpSV_analysis(handle_t h, int op, const void *alpha, handle_t mat, handle_t x, handle_t y, int type,
                          int alg, handle_t d, void *buf);
int cusparseSpSV_solve(handle_t h, int op, const void *alpha, handle_t mat, handle_t x, handle_t y, int type, int alg,
                       handle_t d);
}
enum { I32 = 2, R64F = 1, FILL_MODE = 0, DIAG_TYPE = 1, LOWER = 0, UPPER = 1, UNIT = 1, NON_UNIT = 0, ZERO_PIVOT = 9 };


int main()
{
    const int n = 64, nnz = 3 * n - 2;
    int       rp[n + 1], ci[nnz], k = 0;
    double    v[nnz], b[n], y[n];
    for (int i = 0; i < n; i++) {  // tridiagonal, not symmetric
        rp[i] = k;
        if (i > 0) { ci[k] = i - 1; v[k++] = -1.0; }
        ci[k] = i; v[k++] = 4.0 + 0.01 * i;
        if (i < n - 1) { ci[k] = i + 1; v[k++] = -2.0; }
        b[i] = 1.0 + i % 3;
    }
    rp[n] = k;
    int *drp, *dci;
    double *dv, *db, *dz, *dy;
    CHECK(cudaMalloc(&drp, sizeof(rp)));
    CHECK(cudaMalloc(&dci, sizeof(ci)));
    CHECK(cudaMalloc(&dv, sizeof(v)));
    CHECK(cudaMalloc(&db, sizeof(b)));
    CHECK(cudaMalloc(&dz, sizeof(b)));
    CHECK(cudaMalloc(&dy, sizeof(b)));
    CHECK(cudaMemcpy(drp, rp, sizeof(rp), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dci, ci, sizeof(ci), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dv, v, sizeof(v), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(db, b, sizeof(b), cudaMemcpyHostToDevice));

    handle_t h, descr, info, L, U, vb, vz, vy, sl, su;
    int      size, pivot;
    CHECK(cusparseCreate(&h));
    CHECK(cusparseCreateMatDescr(&descr));
    CHECK(cusparseCreateCsrilu02Info(&info));
    CHECK(cusparseDcsrilu02_bufferSize(h, n, nnz, descr, dv, drp, dci, info, &size));
    void *buf;
    CHECK(cudaMalloc(&buf, size));
    CHECK(cusparseDcsrilu02_analysis(h, n, nnz, descr, dv, drp, dci, info, 1, buf));
    CHECK(cusparseDcsrilu02(h, n, nnz, descr, dv, drp, dci, info, 1, buf));
    CHECK(cusparseXcsrilu02_zeroPivot(h, info, &pivot));
    if (pivot != -1) {
        printf("FAIL zero pivot %d reported for a regular matrix\n", pivot);
        return 1;
    }
    int fill_lower = LOWER, fill_upper = UPPER, unit = UNIT, non_unit = NON_UNIT;
    CHECK(cusparseCreateCsr(&L, n, n, nnz, drp, dci, dv, I32, I32, 0, R64F));  // the factors share A's arrays
    CHECK(cusparseCreateCsr(&U, n, n, nnz, drp, dci, dv, I32, I32, 0, R64F));
    CHECK(cusparseSpMatSetAttribute(L, FILL_MODE, &fill_lower, 4));
    CHECK(cusparseSpMatSetAttribute(L, DIAG_TYPE, &unit, 4));
    CHECK(cusparseSpMatSetAttribute(U, FILL_MODE, &fill_upper, 4));
    CHECK(cusparseSpMatSetAttribute(U, DIAG_TYPE, &non_unit, 4));
    CHECK(cusparseCreateDnVec(&vb, n, db, R64F));
    CHECK(cusparseCreateDnVec(&vz, n, dz, R64F));
    CHECK(cusparseCreateDnVec(&vy, n, dy, R64F));
    CHECK(cusparseSpSV_createDescr(&sl));
    CHECK(cusparseSpSV_createDescr(&su));
    const double one = 1.0;
    size_t       bytes;
    CHECK(cusparseSpSV_bufferSize(h, 0, &one, L, vb, vz, R64F, 0, sl, &bytes));
    CHECK(cusparseSpSV_analysis(h, 0, &one, L, vb, vz, R64F, 0, sl, buf));
    CHECK(cusparseSpSV_analysis(h, 0, &one, U, vz, vy, R64F, 0, su, buf));
    CHECK(cusparseSpSV_solve(h, 0, &one, L, vb, vz, R64F, 0, sl));  // L z = b
    CHECK(cusparseSpSV_solve(h, 0, &one, U, vz, vy, R64F, 0, su));  // U y = z
    CHECK(cudaMemcpy(y, dy, sizeof(y), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) {  // A y = b, with A as it was
        double ay = (4.0 + 0.01 * i) * y[i] - (i > 0 ? y[i - 1] : 0.0) - 2.0 * (i < n - 1 ? y[i + 1] : 0.0);
        if (fabs(ay - b[i]) > 1e-9) {
            printf("FAIL (A y)[%d] = %.12f, b = %.12f\n", i, ay, b[i]);
            return 1;
        }
    }
    v[rp[0]] = 0.0;  // A(0,0) = 0: the first pivot is zero
    CHECK(cudaMemcpy(dv, v, sizeof(v), cudaMemcpyHostToDevice));
    CHECK(cusparseDcsrilu02(h, n, nnz, descr, dv, drp, dci, info, 1, buf));
    int status = cusparseXcsrilu02_zeroPivot(h, info, &pivot);
    if (status != ZERO_PIVOT || pivot != 0) {
        printf("FAIL zero pivot: status %d, position %d\n", status, pivot);
        return 1;
    }
    printf("PASS\n");
    return 0;
}
