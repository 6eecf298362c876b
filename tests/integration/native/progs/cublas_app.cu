// cuBLAS calls as programs make them, checked against a host computation; prints PASS.
// Declares the few cuBLAS prototypes it uses (the ABI of cublas_v2.h), so that it builds without
// cuBLAS's headers; it links against libcublas (the stand-in under wooly run).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

extern "C" {
typedef void *cublasHandle_t;
int cublasCreate_v2(cublasHandle_t *);
int cublasDestroy_v2(cublasHandle_t);
int cublasSetStream_v2(cublasHandle_t, cudaStream_t);
int cublasSetPointerMode_v2(cublasHandle_t, int);
int cublasSgemm_v2(cublasHandle_t, int, int, int, int, int, const float *, const float *, int, const float *, int,
                   const float *, float *, int);
int cublasDgemmStridedBatched(cublasHandle_t, int, int, int, int, int, const double *, const double *, int,
                              long long, const double *, int, long long, const double *, double *, int, long long, int);
int cublasGemmEx(cublasHandle_t, int, int, int, int, int, const void *, const void *, int, int, const void *, int, int,
                 const void *, void *, int, int, int, int);
int cublasSetMatrix(int, int, int, const void *, int, void *, int);
int cublasSaxpy_v2(cublasHandle_t, int, const float *, const float *, int, float *, int);
int cublasSdot_v2(cublasHandle_t, int, const float *, int, const float *, int, float *);
int cublasDdot_v2(cublasHandle_t, int, const double *, int, const double *, int, double *);
int cublasSnrm2_v2(cublasHandle_t, int, const float *, int, float *);
int cublasSscal_v2(cublasHandle_t, int, const float *, float *, int);
int cublasIsamax_v2(cublasHandle_t, int, const float *, int, int *);
int cublasDgemv_v2(cublasHandle_t, int, int, int, const double *, const double *, int, const double *, int,
                   const double *, double *, int);
int cublasGetMatrix(int, int, int, const void *, int, void *, int);
typedef void *cublasXtHandle_t;
int cublasXtCreate(cublasXtHandle_t *);
int cublasXtDestroy(cublasXtHandle_t);
int cublasXtDeviceSelect(cublasXtHandle_t, int, int *);
int cublasXtSgemm(cublasXtHandle_t, int, int, size_t, size_t, size_t, const float *, const float *, size_t,
                  const float *, size_t, const float *, float *, size_t);
}

static int failures = 0;
#define EXPECT(c, ...) do { if (!(c)) { printf(__VA_ARGS__); printf("\n"); failures++; } } while (0)

// column-major reference: C = alpha op(A) op(B) + beta C
template <class T> void ref(int ta, int tb, int m, int n, int k, T alpha, const T *A, int lda, const T *B, int ldb,
                            T beta, T *C, int ldc) {
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0;
            for (int p = 0; p < k; p++) {
                T a = ta ? A[p + i * lda] : A[i + p * lda];
                T b = tb ? B[j + p * ldb] : B[p + j * ldb];
                s += (double)a * (double)b;
            }
            C[i + j * ldc] = (T)(alpha * s + beta * C[i + j * ldc]);
        }
}

int main() {
    cublasHandle_t h;
    if (cublasCreate_v2(&h)) { printf("cublasCreate failed\n"); return 1; }
    cudaStream_t s;
    cudaStreamCreate(&s);
    cublasSetStream_v2(h, s);
    // 1. sgemm, A transposed, padded leading dimensions, beta != 0
    const int m = 37, n = 21, k = 13, lda = 16, ldb = 15, ldc = 40;
    float A[lda * m], B[ldb * n], C[ldc * n], R[ldc * n];
    for (int i = 0; i < lda * m; i++) A[i] = (float)((i * 7) % 11) - 5;
    for (int i = 0; i < ldb * n; i++) B[i] = (float)((i * 5) % 9) - 4;
    for (int i = 0; i < ldc * n; i++) C[i] = R[i] = (float)(i % 3);
    float *dA, *dB, *dC;
    cudaMalloc(&dA, sizeof A); cudaMalloc(&dB, sizeof B); cudaMalloc(&dC, sizeof C);
    cublasSetMatrix(lda, m, 4, A, lda, dA, lda);
    cudaMemcpy(dB, B, sizeof B, cudaMemcpyHostToDevice);
    cudaMemcpy(dC, C, sizeof C, cudaMemcpyHostToDevice);
    float alpha = 1.5f, beta = -0.5f;
    EXPECT(cublasSgemm_v2(h, 1, 0, m, n, k, &alpha, dA, lda, dB, ldb, &beta, dC, ldc) == 0, "sgemm status");
    ref<float>(1, 0, m, n, k, alpha, A, lda, B, ldb, beta, R, ldc);
    cublasGetMatrix(m, n, 4, dC, ldc, C, ldc);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++)
            EXPECT(fabsf(C[i + j * ldc] - R[i + j * ldc]) < 1e-3f, "sgemm C[%d,%d] = %f, want %f", i, j,
                   C[i + j * ldc], R[i + j * ldc]);
    // 2. strided batched dgemm with alpha/beta in device memory
    const int bm = 4, bn = 3, bk = 5, batch = 3;
    double X[bm * bk * batch], Y[bk * bn * batch], Z[bm * bn * batch], W[bm * bn * batch], ab[2] = {2.0, 0.0};
    for (int i = 0; i < bm * bk * batch; i++) X[i] = i * 0.25;
    for (int i = 0; i < bk * bn * batch; i++) Y[i] = 1.0 - i * 0.125;
    double *dX, *dY, *dZ, *dab;
    cudaMalloc(&dX, sizeof X); cudaMalloc(&dY, sizeof Y); cudaMalloc(&dZ, sizeof Z); cudaMalloc(&dab, sizeof ab);
    cudaMemcpy(dX, X, sizeof X, cudaMemcpyHostToDevice);
    cudaMemcpy(dY, Y, sizeof Y, cudaMemcpyHostToDevice);
    cudaMemcpy(dab, ab, sizeof ab, cudaMemcpyHostToDevice);
    cudaMemset(dZ, 0xff, sizeof Z);  // NaNs: beta == 0 must not read C
    cublasSetPointerMode_v2(h, 1);
    EXPECT(cublasDgemmStridedBatched(h, 0, 0, bm, bn, bk, dab, dX, bm, bm * bk, dY, bk, bk * bn, dab + 1, dZ, bm,
                                     bm * bn, batch) == 0, "dgemm strided batched status");
    cublasSetPointerMode_v2(h, 0);
    for (int b = 0; b < batch; b++) {
        for (int i = 0; i < bm * bn; i++) W[b * bm * bn + i] = 0;
        ref<double>(0, 0, bm, bn, bk, 2.0, X + b * bm * bk, bm, Y + b * bk * bn, bk, 0.0, W + b * bm * bn, bm);
    }
    cudaMemcpy(Z, dZ, sizeof Z, cudaMemcpyDeviceToHost);
    for (int i = 0; i < bm * bn * batch; i++) EXPECT(fabs(Z[i] - W[i]) < 1e-9, "dgemm Z[%d] = %f, want %f", i, Z[i], W[i]);
    // 3. GemmEx: half inputs, float output and compute (CUDA_R_16F = 2, CUDA_R_32F = 0, CUBLAS_COMPUTE_32F = 68)
    __half P[6], Q[6];
    float out[4] = {0}, one = 1.0f, zero = 0.0f;
    for (int i = 0; i < 6; i++) { P[i] = __float2half((float)i); Q[i] = __float2half((float)(i + 1)); }
    __half *dP, *dQ; float *dO;
    cudaMalloc(&dP, sizeof P); cudaMalloc(&dQ, sizeof Q); cudaMalloc(&dO, sizeof out);
    cudaMemcpy(dP, P, sizeof P, cudaMemcpyHostToDevice);
    cudaMemcpy(dQ, Q, sizeof Q, cudaMemcpyHostToDevice);
    EXPECT(cublasGemmEx(h, 0, 0, 2, 2, 3, &one, dP, 2, 2, dQ, 2, 3, &zero, dO, 0, 2, 68, -1) == 0, "GemmEx status");
    cudaMemcpy(out, dO, sizeof out, cudaMemcpyDeviceToHost);
    // P is 2x3 [[0,2,4],[1,3,5]], Q is 3x2 [[1,4],[2,5],[3,6]]
    const float want[4] = {16, 22, 34, 49};
    for (int i = 0; i < 4; i++) EXPECT(out[i] == want[i], "GemmEx out[%d] = %f, want %f", i, out[i], want[i]);
    // 4. a bad leading dimension is CUBLAS_STATUS_INVALID_VALUE (7), and an unknown call NOT_SUPPORTED (15)
    EXPECT(cublasSgemm_v2(h, 0, 0, m, n, k, &alpha, dA, 1, dB, ldb, &beta, dC, ldc) == 7, "lda below m accepted");
    // 5. level 1 and 2 on strided vectors, negative increments walking backwards (reference BLAS semantics)
    float v[12], w[6], sv[12], sw[6];
    for (int i = 0; i < 12; i++) v[i] = sv[i] = (float)(i * 3 % 7) - 2;
    for (int i = 0; i < 6; i++) w[i] = sw[i] = 0.5f * i;
    float *dv, *dw, *dres;
    cudaMalloc(&dv, sizeof v); cudaMalloc(&dw, sizeof w); cudaMalloc(&dres, 4);
    cudaMemcpy(dv, v, sizeof v, cudaMemcpyHostToDevice);
    cudaMemcpy(dw, w, sizeof w, cudaMemcpyHostToDevice);
    float two = 2.0f, dot = -1.0f, nrm = -1.0f;
    int imax = -1;
    EXPECT(cublasSaxpy_v2(h, 6, &two, dv, 2, dw, -1) == 0, "saxpy status");  // w[5 - i] += 2 v[2 i]
    for (int i = 0; i < 6; i++) sw[5 - i] += 2.0f * sv[2 * i];
    EXPECT(cublasSdot_v2(h, 6, dv, 2, dw, 1, &dot) == 0, "sdot status");  // host pointer mode: a blocking result
    float want_dot = 0;
    for (int i = 0; i < 6; i++) want_dot += sv[2 * i] * sw[i];
    EXPECT(dot == want_dot, "sdot = %f, want %f", dot, want_dot);
    EXPECT(cublasIsamax_v2(h, 12, dv, 1, &imax) == 0 && imax == 3, "isamax = %d, want 3 (1-based, first of |4|)", imax);
    EXPECT(cublasSnrm2_v2(h, 6, dv, 0, &nrm) == 0 && nrm == 0.0f, "snrm2 with incx 0 = %f, want 0", nrm);
    EXPECT(cublasSscal_v2(h, 12, &two, dv, -1) == 0, "sscal with incx < 0 status");  // does nothing
    cublasSetPointerMode_v2(h, 1);  // device pointer mode: the result stays in device memory
    EXPECT(cublasSdot_v2(h, 12, dv, 1, dv, 1, dres) == 0, "sdot (device result) status");
    cublasSetPointerMode_v2(h, 0);
    float self_dot = 0, got = 0;
    for (int i = 0; i < 12; i++) self_dot += sv[i] * sv[i];
    cudaMemcpy(&got, dres, 4, cudaMemcpyDeviceToHost);
    EXPECT(got == self_dot, "sdot into device memory = %f, want %f (sscal with incx < 0 must not scale)", got, self_dot);
    cudaMemcpy(w, dw, sizeof w, cudaMemcpyDeviceToHost);
    for (int i = 0; i < 6; i++) EXPECT(w[i] == sw[i], "saxpy w[%d] = %f, want %f", i, w[i], sw[i]);
    // dgemv, A^T x with A 3 x 4 (lda 5) and y walked backwards with stride 2
    double GA[5 * 4], gx[3] = {1, -2, 0.5}, gy[8], ry[8], ga = 1.5, gb = -1.0;
    for (int i = 0; i < 20; i++) GA[i] = i % 5 < 3 ? (double)(i % 7) - 3 : 1e300;  // padding must not be read
    for (int i = 0; i < 8; i++) gy[i] = ry[i] = i;
    double *dGA, *dgx, *dgy;
    cudaMalloc(&dGA, sizeof GA); cudaMalloc(&dgx, sizeof gx); cudaMalloc(&dgy, sizeof gy);
    cudaMemcpy(dGA, GA, sizeof GA, cudaMemcpyHostToDevice);
    cudaMemcpy(dgx, gx, sizeof gx, cudaMemcpyHostToDevice);
    cudaMemcpy(dgy, gy, sizeof gy, cudaMemcpyHostToDevice);
    EXPECT(cublasDgemv_v2(h, 1, 3, 4, &ga, dGA, 5, dgx, 1, &gb, dgy, -2) == 0, "dgemv status");
    for (int j = 0; j < 4; j++) {
        double acc = 0;
        for (int i = 0; i < 3; i++) acc += GA[i + 5 * j] * gx[i];
        ry[(3 - j) * 2] = ga * acc + gb * ry[(3 - j) * 2];
    }
    cudaMemcpy(gy, dgy, sizeof gy, cudaMemcpyDeviceToHost);
    for (int i = 0; i < 8; i++) EXPECT(gy[i] == ry[i], "dgemv y[%d] = %f, want %f", i, gy[i], ry[i]);
    EXPECT(cublasDgemv_v2(h, 0, 3, 4, &ga, dGA, 5, dgx, 0, &gb, dgy, 1) == 7, "dgemv with incx 0 accepted");
    cudaStreamSynchronize(s);
    cublasDestroy_v2(h);

    // cuBLASXt: the same sgemm with A and C in host memory and B on the device; a bad leading dimension refused
    cublasXtHandle_t xt;
    int dev0 = 0;
    EXPECT(cublasXtCreate(&xt) == 0 && cublasXtDeviceSelect(xt, 1, &dev0) == 0, "cublasXt create");
    for (int i = 0; i < ldc * n; i++) C[i] = R[i] = (float)(i % 3);
    EXPECT(cublasXtSgemm(xt, 1, 0, m, n, k, &alpha, A, lda, dB, ldb, &beta, C, ldc) == 0, "cublasXtSgemm status");
    ref<float>(1, 0, m, n, k, alpha, A, lda, B, ldb, beta, R, ldc);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < ldc; i++)  // the padding rows untouched too
            EXPECT(fabsf(C[i + j * ldc] - R[i + j * ldc]) < 1e-3f, "xt C[%d,%d] = %f, want %f", i, j, C[i + j * ldc],
                   R[i + j * ldc]);
    EXPECT(cublasXtSgemm(xt, 0, 0, m, n, k, &alpha, A, 3, dB, ldb, &beta, C, ldc) == 7, "xt lda < m accepted");
    cublasXtDestroy(xt);
    printf(failures ? "FAIL (%d)\n" : "PASS\n", failures);
    return failures != 0;
}
