/* payoff's native kernels: the few loops where Python's per-call cost, not arithmetic, is
 * the work.
 *
 * PPO on classic control spends its time in hundreds of small tensor operations on arrays
 * of 64 to 512 rows each iteration, where each call's dispatch costs more than its
 * arithmetic. These functions do the same arithmetic in one call each: a rollout step of a small MLP actor (forward, Gumbel-max sampling), the critic's
 * pass over a rollout, one PPO minibatch step (forward, clipped surrogate, entropy and value
 * losses, their gradients, the joint gradient-norm clip and Adam), and a whole rollout of the
 * batched CartPole with the runner's books. Matrix products run in this
 * file's own AVX-512 blocks where the CPU has them, else in the BLAS NumPy itself uses (its
 * sgemm's address is handed in by payoff/accel/native.py); everything between them is plain
 * loops the compiler vectorizes.
 *
 * Floating point: no -ffast-math and no contraction of a * b + c into one rounding (setup.py
 * passes -ffp-contract=off), so CartPole's float64 dynamics are Gymnasium's bit for bit (libm's
 * sin and cos, as math.sin and math.cos call). The networks' float32 arithmetic agrees with
 * the torch reference (autograd, payoff/algos/ppo.py) to float32 rounding: summation order
 * and tanh differ (tests/test_accel.py).
 *
 * Python sees a module with the functions below (METH_FASTCALL; arrays through the buffer
 * protocol, each checked for its length). payoff/accel/ wraps them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define HAVE_AVX512_KERNELS 1
#endif
#include <stdint.h>
#include <string.h>

/* The float32 loops are compiled for AVX-512, AVX2 and the baseline, the best chosen when the
 * module loads (GCC's function multiversioning, on x86-64 ELF systems). */
#if defined(__GNUC__) && defined(__x86_64__) && defined(__ELF__) && !defined(__clang__)
#define VECTORIZED __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define VECTORIZED
#endif

/* ---- BLAS --------------------------------------------------------------------------- */
enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };
typedef void (*sgemm64_t)(int, int, int, int64_t, int64_t, int64_t, float, const float *,
                          int64_t, const float *, int64_t, float, float *, int64_t);
typedef void (*sgemm32_t)(int, int, int, int, int, int, float, const float *, int,
                          const float *, int, float, float *, int);
static void *sgemm_address = NULL;
static int sgemm_ilp64 = 0;

static void blas_gemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                      const float *a, int64_t lda, const float *b, int64_t ldb, float *c,
                      int64_t ldc) {
    if (sgemm_address == NULL) { /* no BLAS was found: plain loops (slow, never wrong) */
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                float sum = 0.0f;
                for (int64_t p = 0; p < k; p++)
                    sum += (trans_a ? a[p * lda + i] : a[i * lda + p]) *
                           (trans_b ? b[j * ldb + p] : b[p * ldb + j]);
                c[i * ldc + j] = sum;
            }
        return;
    }
    int ta = trans_a ? TRANS : NO_TRANS, tb = trans_b ? TRANS : NO_TRANS;
    if (sgemm_ilp64)
        ((sgemm64_t)sgemm_address)(ROW_MAJOR, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
    else
        ((sgemm32_t)sgemm_address)(ROW_MAJOR, ta, tb, (int)m, (int)n, (int)k, 1.0f, a, (int)lda,
                                   b, (int)ldb, 0.0f, c, (int)ldc);
}

#ifdef HAVE_AVX512_KERNELS
/* ---- matrix products for AVX-512 -------------------------------------------------------------
 * The BLAS NumPy bundles (OpenBLAS) runs its AVX2 kernel on CPUs it does not know by name,
 * such as AMD's Zen 5: half of what their 512-bit units do. These products of a few hundred
 * rows by 64 columns are this file's main arithmetic, so they get their own: a block of 6 rows
 * by 64 columns kept in 24 registers while the inner dimension streams through (one
 * broadcast and four fused multiply-adds per row and step), and 16-column blocks, masked at
 * the edge, for what is left. They run where the CPU has AVX-512 (checked once); elsewhere
 * the BLAS does. */
#define AVX512_FN __attribute__((target("avx512f")))
#define ZERO4(r)                                                                                 \
    __m512 c##r##0 = _mm512_setzero_ps(), c##r##1 = _mm512_setzero_ps(),                         \
           c##r##2 = _mm512_setzero_ps(), c##r##3 = _mm512_setzero_ps();
#define FMA4(r, scalar)                                                                          \
    {                                                                                            \
        __m512 s_ = _mm512_set1_ps(scalar);                                                      \
        c##r##0 = _mm512_fmadd_ps(s_, b0, c##r##0);                                              \
        c##r##1 = _mm512_fmadd_ps(s_, b1, c##r##1);                                              \
        c##r##2 = _mm512_fmadd_ps(s_, b2, c##r##2);                                              \
        c##r##3 = _mm512_fmadd_ps(s_, b3, c##r##3);                                              \
    }
#define STORE4(r, row)                                                                           \
    {                                                                                            \
        float *c_ = (row);                                                                       \
        _mm512_storeu_ps(c_, c##r##0);                                                           \
        _mm512_storeu_ps(c_ + 16, c##r##1);                                                      \
        _mm512_storeu_ps(c_ + 32, c##r##2);                                                      \
        _mm512_storeu_ps(c_ + 48, c##r##3);                                                      \
    }
#define LOAD4(ptr)                                                                               \
    const float *p_ = (ptr);                                                                     \
    __m512 b0 = _mm512_loadu_ps(p_), b1 = _mm512_loadu_ps(p_ + 16),                              \
           b2 = _mm512_loadu_ps(p_ + 32), b3 = _mm512_loadu_ps(p_ + 48);

/* C[i..i+6, n0..n0+64] = A[i..i+6, :] @ B[:, n0..n0+64] */
AVX512_FN static void nn_6x64(const float *a, int64_t lda, const float *b, int64_t ldb, float *c,
                              int64_t ldc, int64_t k) {
    ZERO4(0) ZERO4(1) ZERO4(2) ZERO4(3) ZERO4(4) ZERO4(5)
    for (int64_t p = 0; p < k; p++) {
        LOAD4(b + p * ldb)
        FMA4(0, a[p]) FMA4(1, a[lda + p]) FMA4(2, a[2 * lda + p]) FMA4(3, a[3 * lda + p])
        FMA4(4, a[4 * lda + p]) FMA4(5, a[5 * lda + p])
    }
    STORE4(0, c) STORE4(1, c + ldc) STORE4(2, c + 2 * ldc) STORE4(3, c + 3 * ldc)
    STORE4(4, c + 4 * ldc) STORE4(5, c + 5 * ldc)
}

AVX512_FN static void nn_1x64(const float *a, const float *b, int64_t ldb, float *c, int64_t k) {
    ZERO4(0)
    for (int64_t p = 0; p < k; p++) {
        LOAD4(b + p * ldb)
        FMA4(0, a[p])
    }
    STORE4(0, c)
}

/* 6 rows (or 1) by 16 columns, the columns past `mask` left alone: the edge of a product
 * whose width is not a multiple of 64 (a policy's head of a few actions) */
AVX512_FN static void nn_6x16(const float *a, int64_t lda, const float *b, int64_t ldb, float *c,
                              int64_t ldc, int64_t k, __mmask16 mask) {
    __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0;
    for (int64_t p = 0; p < k; p++) {
        __m512 w = _mm512_maskz_loadu_ps(mask, b + p * ldb);
        c0 = _mm512_fmadd_ps(_mm512_set1_ps(a[p]), w, c0);
        c1 = _mm512_fmadd_ps(_mm512_set1_ps(a[lda + p]), w, c1);
        c2 = _mm512_fmadd_ps(_mm512_set1_ps(a[2 * lda + p]), w, c2);
        c3 = _mm512_fmadd_ps(_mm512_set1_ps(a[3 * lda + p]), w, c3);
        c4 = _mm512_fmadd_ps(_mm512_set1_ps(a[4 * lda + p]), w, c4);
        c5 = _mm512_fmadd_ps(_mm512_set1_ps(a[5 * lda + p]), w, c5);
    }
    _mm512_mask_storeu_ps(c, mask, c0);
    _mm512_mask_storeu_ps(c + ldc, mask, c1);
    _mm512_mask_storeu_ps(c + 2 * ldc, mask, c2);
    _mm512_mask_storeu_ps(c + 3 * ldc, mask, c3);
    _mm512_mask_storeu_ps(c + 4 * ldc, mask, c4);
    _mm512_mask_storeu_ps(c + 5 * ldc, mask, c5);
}

AVX512_FN static void nn_1x16(const float *a, const float *b, int64_t ldb, float *c, int64_t k,
                              __mmask16 mask) {
    __m512 c0 = _mm512_setzero_ps();
    for (int64_t p = 0; p < k; p++)
        c0 = _mm512_fmadd_ps(_mm512_set1_ps(a[p]), _mm512_maskz_loadu_ps(mask, b + p * ldb), c0);
    _mm512_mask_storeu_ps(c, mask, c0);
}

/* C[M, N] = A[M, K] @ B[K, N] */
AVX512_FN static void avx512_nn(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                                const float *b, int64_t ldb, float *c, int64_t ldc) {
    int64_t n0 = 0;
    for (; n0 + 64 <= n; n0 += 64) {
        int64_t i = 0;
        for (; i + 6 <= m; i += 6) nn_6x64(a + i * lda, lda, b + n0, ldb, c + i * ldc + n0, ldc, k);
        for (; i < m; i++) nn_1x64(a + i * lda, b + n0, ldb, c + i * ldc + n0, k);
    }
    for (; n0 < n; n0 += 16) {
        int64_t cols = n - n0 < 16 ? n - n0 : 16;
        __mmask16 mask = (__mmask16)((1u << cols) - 1u);
        int64_t i = 0;
        for (; i + 6 <= m; i += 6)
            nn_6x16(a + i * lda, lda, b + n0, ldb, c + i * ldc + n0, ldc, k, mask);
        for (; i < m; i++) nn_1x16(a + i * lda, b + n0, ldb, c + i * ldc + n0, k, mask);
    }
}

/* C[K, N] = A[M, K]^T @ B[M, N] (a weight gradient: the sum over M rows of outer products),
 * six rows of C at a time in registers */
AVX512_FN static void tn_6x64(int r, const float *a, int64_t lda, const float *b, int64_t ldb,
                              float *c, int64_t ldc, int64_t m) {
    ZERO4(0) ZERO4(1) ZERO4(2) ZERO4(3) ZERO4(4) ZERO4(5)
    if (r == 6)
        for (int64_t i = 0; i < m; i++) {
            const float *x = a + i * lda;
            LOAD4(b + i * ldb)
            FMA4(0, x[0]) FMA4(1, x[1]) FMA4(2, x[2]) FMA4(3, x[3]) FMA4(4, x[4]) FMA4(5, x[5])
        }
    else
        for (int64_t i = 0; i < m; i++) {
            const float *x = a + i * lda;
            LOAD4(b + i * ldb)
            FMA4(0, x[0])
            if (r > 1) FMA4(1, x[1])
            if (r > 2) FMA4(2, x[2])
            if (r > 3) FMA4(3, x[3])
            if (r > 4) FMA4(4, x[4])
        }
    STORE4(0, c)
    if (r > 1) STORE4(1, c + ldc)
    if (r > 2) STORE4(2, c + 2 * ldc)
    if (r > 3) STORE4(3, c + 3 * ldc)
    if (r > 4) STORE4(4, c + 4 * ldc)
    if (r > 5) STORE4(5, c + 5 * ldc)
}

AVX512_FN static void tn_6x16(const float *a, int64_t lda, const float *b, int64_t ldb, float *c,
                              int64_t ldc, int64_t m, __mmask16 mask) {
    __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0;
    for (int64_t p = 0; p < m; p++) {
        const float *x = a + p * lda;
        __m512 g = _mm512_maskz_loadu_ps(mask, b + p * ldb);
        c0 = _mm512_fmadd_ps(_mm512_set1_ps(x[0]), g, c0);
        c1 = _mm512_fmadd_ps(_mm512_set1_ps(x[1]), g, c1);
        c2 = _mm512_fmadd_ps(_mm512_set1_ps(x[2]), g, c2);
        c3 = _mm512_fmadd_ps(_mm512_set1_ps(x[3]), g, c3);
        c4 = _mm512_fmadd_ps(_mm512_set1_ps(x[4]), g, c4);
        c5 = _mm512_fmadd_ps(_mm512_set1_ps(x[5]), g, c5);
    }
    _mm512_mask_storeu_ps(c, mask, c0);
    _mm512_mask_storeu_ps(c + ldc, mask, c1);
    _mm512_mask_storeu_ps(c + 2 * ldc, mask, c2);
    _mm512_mask_storeu_ps(c + 3 * ldc, mask, c3);
    _mm512_mask_storeu_ps(c + 4 * ldc, mask, c4);
    _mm512_mask_storeu_ps(c + 5 * ldc, mask, c5);
}

AVX512_FN static void tn_1x16(const float *a, int64_t lda, const float *b, int64_t ldb, float *c,
                              int64_t m, __mmask16 mask) {
    __m512 c0 = _mm512_setzero_ps();
    for (int64_t p = 0; p < m; p++)
        c0 = _mm512_fmadd_ps(_mm512_set1_ps(a[p * lda]), _mm512_maskz_loadu_ps(mask, b + p * ldb),
                             c0);
    _mm512_mask_storeu_ps(c, mask, c0);
}

AVX512_FN static void avx512_tn(int64_t kk, int64_t n, int64_t m, const float *a, int64_t lda,
                                const float *b, int64_t ldb, float *c, int64_t ldc) {
    int64_t n0 = 0;
    for (; n0 + 64 <= n; n0 += 64)
        for (int64_t k0 = 0; k0 < kk; k0 += 6) {
            int r = kk - k0 < 6 ? (int)(kk - k0) : 6;
            tn_6x64(r, a + k0, lda, b + n0, ldb, c + k0 * ldc + n0, ldc, m);
        }
    for (; n0 < n; n0 += 16) {
        int64_t cols = n - n0 < 16 ? n - n0 : 16;
        __mmask16 mask = (__mmask16)((1u << cols) - 1u);
        int64_t k0 = 0;
        for (; k0 + 6 <= kk; k0 += 6)
            tn_6x16(a + k0, lda, b + n0, ldb, c + k0 * ldc + n0, ldc, m, mask);
        for (; k0 < kk; k0++) tn_1x16(a + k0, lda, b + n0, ldb, c + k0 * ldc + n0, m, mask);
    }
}

static int avx512 = -1; /* whether the CPU runs AVX-512F: -1 until checked */
static float *transposed = NULL;
static int64_t transposed_floats = 0;
#endif

/* C[M, N] = op(A) op(B), row-major (op: transposed or not). AVX-512 products where the CPU
 * has them, the BLAS otherwise, and for a product with both operands transposed. */
static void gemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, const float *a,
                 int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    (void)beta; /* always 0: C is overwritten */
#ifdef HAVE_AVX512_KERNELS
    if (avx512 < 0) avx512 = __builtin_cpu_supports("avx512f") ? 1 : 0;
    if (avx512 && !(trans_a && trans_b)) {
        if (!trans_a && !trans_b) {
            avx512_nn(m, n, k, a, lda, b, ldb, c, ldc);
            return;
        }
        if (trans_a) { /* A is [k, m] */
            avx512_tn(m, n, k, a, lda, b, ldb, c, ldc);
            return;
        }
        /* B is [n, k], read transposed: copy it as [k, n] once (a layer's weights) */
        if (k * n > transposed_floats) {
            float *grown = PyMem_RawRealloc(transposed, (size_t)(k * n) * sizeof(float));
            if (grown != NULL) {
                transposed = grown;
                transposed_floats = k * n;
            }
        }
        if (k * n <= transposed_floats) {
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < k; j++) transposed[j * n + i] = b[i * ldb + j];
            avx512_nn(m, n, k, a, lda, transposed, n, c, ldc);
            return;
        }
    }
#endif
    blas_gemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc);
}

/* ---- activations ---------------------------------------------------------------------- */
/* tanh as a rational function on [-7.9, 7.9] (Eigen's and XLA's float tanh: odd degree-13
 * numerator over even degree-6 denominator; within a few float32 ulp), x itself below 4e-4.
 * Branch-free, so the loop vectorizes. */
static inline float tanh_f32(float a) {
    float x = a > 7.90531110763549805f ? 7.90531110763549805f : a;
    x = x < -7.90531110763549805f ? -7.90531110763549805f : x;
    float x2 = x * x;
    float p = -2.76076847742355e-16f;
    p = p * x2 + 2.00018790482477e-13f;
    p = p * x2 + -8.60467152213735e-11f;
    p = p * x2 + 5.12229709037114e-08f;
    p = p * x2 + 1.48572235717979e-05f;
    p = p * x2 + 6.37261928875436e-04f;
    p = p * x2 + 4.89352455891786e-03f;
    p = p * x;
    float q = 1.19825839466702e-06f;
    q = q * x2 + 1.18534705686654e-04f;
    q = q * x2 + 2.26843463243900e-03f;
    q = q * x2 + 4.89352518554385e-03f;
    float r = p / q;
    return fabsf(a) < 0.0004f ? a : r;
}

/* rows of y [rows, n] += bias [n], then the activation (0 none, 1 tanh, 2 relu), in place */
VECTORIZED static void bias_act(float *restrict y, const float *restrict bias, int64_t rows, int64_t n,
                     int act) {
    for (int64_t i = 0; i < rows; i++) {
        float *row = y + i * n;
        if (act == 1)
            for (int64_t j = 0; j < n; j++) row[j] = tanh_f32(row[j] + bias[j]);
        else if (act == 2)
            for (int64_t j = 0; j < n; j++) {
                float v = row[j] + bias[j];
                row[j] = v < 0.0f ? 0.0f : v; /* NaN stays NaN, as np.maximum(x, 0) */
            }
        else
            for (int64_t j = 0; j < n; j++) row[j] += bias[j];
    }
}

VECTORIZED static void tanh_inplace(float *restrict x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = tanh_f32(x[i]);
}

/* g *= the activation's derivative, read from its output: tanh 1 - out^2, ReLU 1[out > 0] */
VECTORIZED static void times_derivative(float *restrict g, const float *restrict out, int64_t n,
                                        int act) {
    if (act == 1)
        for (int64_t i = 0; i < n; i++) g[i] *= 1.0f - out[i] * out[i];
    else
        for (int64_t i = 0; i < n; i++) g[i] *= out[i] > 0.0f ? 1.0f : 0.0f; /* as g *= out > 0 */
}

/* sums [n] = the column sums of g [rows, n] */
VECTORIZED static void column_sums(const float *restrict g, int64_t rows, int64_t n,
                                   float *restrict sums) {
    for (int64_t j = 0; j < n; j++) sums[j] = 0.0f;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < n; j++) sums[j] += g[i * n + j];
}

VECTORIZED static double sum_squares(const float *restrict x, int64_t n) {
    float partial[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) partial[j] += x[i + j] * x[i + j];
    double total = 0;
    for (int j = 0; j < 16; j++) total += partial[j];
    for (; i < n; i++) total += (double)x[i] * x[i];
    return total;
}

VECTORIZED static void scale(float *restrict x, int64_t n, float by) {
    for (int64_t i = 0; i < n; i++) x[i] *= by;
}

/* torch.optim.Adam's step (as FlatAdam and NumpyActorCritic._adam take it, op for op):
 * m = m + (g - m)(1 - beta1); v = v beta2 + g^2 (1 - beta2);
 * p = p + m / (sqrt(v) / sqrt(bc2) + eps) * (-lr / bc1) */
VECTORIZED static void adam(float *restrict p, const float *restrict g, float *restrict m,
                            float *restrict v, int64_t n, float one_minus_beta1, float beta2,
                            float one_minus_beta2, float inv_root_bc2, float eps, float step) {
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i];
        float mi = m[i] + (gi - m[i]) * one_minus_beta1;
        float vi = v[i] * beta2 + (gi * gi) * one_minus_beta2;
        m[i] = mi;
        v[i] = vi;
        p[i] += (mi / (sqrtf(vi) * inv_root_bc2 + eps)) * step;
    }
}

/* ---- argument parsing ------------------------------------------------------------------- */
typedef struct {
    Py_buffer view;
    int held;
} Buf;

/* A C-contiguous buffer of at least `bytes` bytes (writable if asked). */
static int get_buf(PyObject *obj, Buf *buf, Py_ssize_t bytes, int writable, const char *what) {
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &buf->view, flags) < 0) return -1;
    buf->held = 1;
    if (buf->view.len < bytes) {
        PyErr_Format(PyExc_ValueError, "payoff native kernel: %s holds %zd bytes, needs %zd", what,
                     buf->view.len, bytes);
        return -1;
    }
    return 0;
}

static void release(Buf *bufs, int count) {
    for (int i = 0; i < count; i++)
        if (bufs[i].held) {
            PyBuffer_Release(&bufs[i].view);
            bufs[i].held = 0;
        }
}

static int check_nargs(Py_ssize_t nargs, Py_ssize_t expected, const char *name) {
    if (nargs != expected) {
        PyErr_Format(PyExc_TypeError, "%s takes %zd arguments (%zd given)", name, expected, nargs);
        return -1;
    }
    return 0;
}

/* Whether matrix products run at speed: the CPU's AVX-512, or a BLAS sgemm handed in. */
static int products_at_speed(void) {
#ifdef HAVE_AVX512_KERNELS
    if (avx512 < 0) avx512 = __builtin_cpu_supports("avx512f") ? 1 : 0;
    if (avx512) return 1;
#endif
    return sgemm_address != NULL;
}

static int need_blas(void) {
    if (!products_at_speed()) {
        PyErr_SetString(PyExc_RuntimeError,
                        "payoff native kernels: no BLAS sgemm was set and the CPU lacks AVX-512");
        return -1;
    }
    return 0;
}

/* One workspace for every kernel, grown as needed and kept: a buffer made afresh per call is
 * page-faulted in each time (an iteration of cartpole-ppo took hundreds of faults,
 * with the critic's 1 MB made per rollout). The kernels hold the GIL throughout, so no two
 * calls use it at once. */
static float *workspace = NULL;
static int64_t workspace_floats = 0;

static float *get_workspace(int64_t floats) {
    if (floats < 1) floats = 1;
    if (floats > workspace_floats) {
        PyMem_RawFree(workspace);
        workspace = PyMem_RawMalloc((size_t)floats * sizeof(float));
        workspace_floats = workspace == NULL ? 0 : floats;
        if (workspace == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
    }
    return workspace;
}

/* ---- the MLP's layers --------------------------------------------------------------------
 * A network is `layers` Linear layers with dims[0] -> dims[1] -> ... -> dims[layers], each
 * stored as W^T [in, out] then bias [out]; `ptrs` holds their 2 * layers addresses (an int64
 * buffer, filled once by native.py from arrays it keeps alive). */
#define MAX_LAYERS 16

typedef struct {
    int layers;
    int64_t dims[MAX_LAYERS + 1];
    const float *weight[MAX_LAYERS];
    const float *bias[MAX_LAYERS];
} Net;

/* The layer sizes [in, h1, ..., out] in `obj` (an int64 buffer, held in `buf` until
 * released): how many layers (1 to MAX_LAYERS) there are, or -1 with an exception set. */
static int read_dims(PyObject *obj, Buf *buf) {
    if (get_buf(obj, buf, 0, 0, "dims") < 0) return -1;
    int layers = (int)(buf->view.len / (Py_ssize_t)sizeof(int64_t)) - 1;
    if (layers < 1 || layers > MAX_LAYERS) {
        PyErr_Format(PyExc_ValueError, "payoff native kernel: %d layers (1 to %d)", layers,
                     MAX_LAYERS);
        return -1;
    }
    const int64_t *d = buf->view.buf;
    for (int k = 0; k <= layers; k++)
        if (d[k] < 1) {
            PyErr_Format(PyExc_ValueError, "payoff native kernel: layer size %lld", (long long)d[k]);
            return -1;
        }
    return layers;
}

/* The widest layer output among dims[1..layers]. */
static int64_t widest_of(const int64_t *dims, int layers) {
    int64_t w = 0;
    for (int k = 1; k <= layers; k++)
        if (dims[k] > w) w = dims[k];
    return w;
}

static int parse_net(PyObject *dims_obj, PyObject *ptrs_obj, Net *net) {
    Buf dims, ptrs;
    memset(&dims, 0, sizeof dims);
    memset(&ptrs, 0, sizeof ptrs);
    int status = -1;
    int layers = read_dims(dims_obj, &dims);
    if (layers < 0) goto done;
    if (get_buf(ptrs_obj, &ptrs, (Py_ssize_t)(2 * layers * sizeof(int64_t)), 0, "ptrs") < 0)
        goto done;
    net->layers = layers;
    const int64_t *d = dims.view.buf, *p = ptrs.view.buf;
    for (int k = 0; k <= layers; k++) net->dims[k] = d[k];
    for (int k = 0; k < layers; k++) {
        net->weight[k] = (const float *)(intptr_t)p[2 * k];
        net->bias[k] = (const float *)(intptr_t)p[2 * k + 1];
    }
    status = 0;
done:
    release(&dims, 1);
    release(&ptrs, 1);
    return status;
}

static int64_t widest(const Net *net) { return widest_of(net->dims, net->layers); }

/* out [rows, dims[layers]] = the network on x [rows, dims[0]]; two scratch buffers of
 * rows * widest floats each hold the hidden layers. */
static void net_forward(const Net *net, const float *x, int64_t rows, float *out, float *scratch_a,
                        float *scratch_b, int act) {
    const float *in = x;
    for (int k = 0; k < net->layers; k++) {
        int last = k == net->layers - 1;
        float *dest = last ? out : (k % 2 == 0 ? scratch_a : scratch_b);
        gemm(0, 0, rows, net->dims[k + 1], net->dims[k], in, net->dims[k], net->weight[k],
             net->dims[k + 1], 0.0f, dest, net->dims[k + 1]);
        bias_act(dest, net->bias[k], rows, net->dims[k + 1], last ? 0 : act);
        in = dest;
    }
}

/* The actor's logits [rows, A] for observations obs [rows, in] (normalized first where
 * `normalize` = [mean, std] is given), and the Gumbel-max action of each row: the argmax of
 * logits + noise, the first of equal ones (as np.argmax). scratch: rows * (in + 2 * widest). */
static void actor_step(const Net *net, int activation, const float *normalize, float clip,
                       const float *obs, int64_t rows, const float *noise, float *logits,
                       int64_t *chosen, float *scratch) {
    int64_t in = net->dims[0], actions = net->dims[net->layers], width = widest(net);
    const float *x = obs;
    if (normalize != NULL) {
        const float *mean = normalize, *std = normalize + in;
        float *normalized = scratch + 2 * rows * width;
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < in; j++) {
                float v = (obs[i * in + j] - mean[j]) / std[j];
                normalized[i * in + j] = v < -clip ? -clip : (v > clip ? clip : v);
            }
        x = normalized;
    }
    net_forward(net, x, rows, logits, scratch, scratch + rows * width, activation);
    for (int64_t i = 0; i < rows; i++) {
        const float *l = logits + i * actions, *g = noise + i * actions;
        int64_t best = 0;
        float top = l[0] + g[0];
        for (int64_t j = 1; j < actions && !isnan(top); j++) { /* np.argmax: the first NaN */
            float v = l[j] + g[j];
            if (v > top || isnan(v)) {
                top = v;
                best = j;
            }
        }
        chosen[i] = best;
    }
}

/* ---- the rollout: one step of the actor ----------------------------------------------------
 * act(dims, ptrs, activation, obs f32 [N, in], normalize f32 [3, in] or b"", clip,
 *     noise f32 [N, A], logits_out f32 [N, A], actions_out int64 [N])
 * The actor's logits for observations obs (normalized as ObsNormalizer: clip((x - mean) / std,
 * -clip, clip) with normalize = [mean, std, unused]), then the Gumbel-max action: argmax of
 * logits + noise, the first of equal ones (as np.argmax). */
static PyObject *act(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (check_nargs(nargs, 9, "act") < 0 || need_blas() < 0) return NULL;
    Net net;
    if (parse_net(args[0], args[1], &net) < 0) return NULL;
    int activation = (int)PyLong_AsLong(args[2]);
    double clip = PyFloat_AsDouble(args[5]);
    if (PyErr_Occurred()) return NULL;
    Buf b[6];
    memset(b, 0, sizeof b);
    PyObject *result = NULL;
    int64_t in = net.dims[0], actions = net.dims[net.layers], width = widest(&net);
    if (get_buf(args[3], &b[0], 0, 0, "obs") < 0) goto done;
    int64_t rows = b[0].view.len / (Py_ssize_t)(in * sizeof(float));
    if (get_buf(args[4], &b[1], 0, 0, "normalize") < 0 ||
        get_buf(args[6], &b[2], rows * actions * sizeof(float), 0, "noise") < 0 ||
        get_buf(args[7], &b[3], rows * actions * sizeof(float), 1, "logits") < 0 ||
        get_buf(args[8], &b[4], rows * sizeof(int64_t), 1, "actions") < 0)
        goto done;
    float *scratch = get_workspace(rows * (in + 2 * width));
    if (scratch == NULL) goto done;
    const float *normalize =
        b[1].view.len >= (Py_ssize_t)(3 * in * sizeof(float)) ? b[1].view.buf : NULL;
    actor_step(&net, activation, normalize, (float)clip, b[0].view.buf, rows, b[2].view.buf,
               b[3].view.buf, b[4].view.buf, scratch);
    result = Py_NewRef(Py_None);
done:
    release(b, 6);
    return result;
}

/* forward(dims, ptrs, activation, x f32 [B, in], out f32 [B, dims[-1]])
 * The network on x (the critic's pass over a rollout). */
static PyObject *forward(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (check_nargs(nargs, 5, "forward") < 0 || need_blas() < 0) return NULL;
    Net net;
    if (parse_net(args[0], args[1], &net) < 0) return NULL;
    int activation = (int)PyLong_AsLong(args[2]);
    if (PyErr_Occurred()) return NULL;
    Buf b[3];
    memset(b, 0, sizeof b);
    PyObject *result = NULL;
    int64_t in = net.dims[0], width = widest(&net);
    if (get_buf(args[3], &b[0], 0, 0, "x") < 0) goto done;
    int64_t rows = b[0].view.len / (Py_ssize_t)(in * sizeof(float));
    if (get_buf(args[4], &b[1], rows * net.dims[net.layers] * sizeof(float), 1, "out") < 0)
        goto done;
    float *scratch = get_workspace(2 * rows * width);
    if (scratch == NULL) goto done;
    net_forward(&net, b[0].view.buf, rows, b[1].view.buf, scratch, scratch + rows * width,
                activation);
    result = Py_NewRef(Py_None);
done:
    release(b, 3);
    return result;
}

/* ---- one PPO minibatch step ----------------------------------------------------------------
 * ppo_step(dims int64 [L + 1], activation, params f32, grads f32, exp_avg f32, exp_avg_sq f32,
 *          x f32 [B, in], actions int64 [B], old_logprobs f32 [B], advantages f32 [B],
 *          returns f32 [B], coefs f64 [10], stats f64 [5])
 *
 * The actor and the critic stacked as NumpyActorCritic stores them: per layer W^T [2, in, out]
 * then bias [2, 1, out] in `params` (the critic's head padded to the actor's width, its extra
 * columns left at zero gradient). coefs = [clip, ent_coef, vf_coef, max_grad_norm, lr / bc1,
 * 1 / sqrt(bc2), beta1, beta2, eps, unused] with bc the bias corrections of this Adam step.
 * stats gets [policy loss, value loss, entropy, approx_kl, clip fraction].
 * The arithmetic is NumpyActorCritic.ppo_step's, in its order where the order is elementwise. */
static int64_t ppo_scratch_floats(const int64_t *dims, int layers, int64_t batch) {
    int64_t total = 0;
    for (int k = 1; k <= layers; k++) total += 2 * batch * dims[k]; /* layer outputs */
    return total + 2 * 2 * batch * widest_of(dims, layers);        /* two gradient buffers */
}

static PyObject *ppo_step(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (check_nargs(nargs, 13, "ppo_step") < 0 || need_blas() < 0) return NULL;
    int activation = (int)PyLong_AsLong(args[1]);
    if (PyErr_Occurred()) return NULL;
    Buf b[14];
    memset(b, 0, sizeof b);
    PyObject *result = NULL;
    int layers = read_dims(args[0], &b[0]);
    if (layers < 0) goto done;
    const int64_t *dims = b[0].view.buf;
    int64_t total = 0;
    for (int k = 0; k < layers; k++) total += 2 * dims[k] * dims[k + 1] + 2 * dims[k + 1];
    int64_t in = dims[0], A = dims[layers];
    if (get_buf(args[6], &b[5], 0, 0, "x") < 0) goto done;
    int64_t B = b[5].view.len / (Py_ssize_t)(in * sizeof(float));
    if (B < 1) {
        PyErr_SetString(PyExc_ValueError, "payoff native kernel: an empty minibatch");
        goto done;
    }
    Py_ssize_t pbytes = total * sizeof(float), rbytes = B * sizeof(float);
    if (get_buf(args[2], &b[1], pbytes, 1, "params") < 0 ||
        get_buf(args[3], &b[2], pbytes, 1, "grads") < 0 ||
        get_buf(args[4], &b[3], pbytes, 1, "exp_avg") < 0 ||
        get_buf(args[5], &b[4], pbytes, 1, "exp_avg_sq") < 0 ||
        get_buf(args[7], &b[6], B * sizeof(int64_t), 0, "actions") < 0 ||
        get_buf(args[8], &b[7], rbytes, 0, "old_logprobs") < 0 ||
        get_buf(args[9], &b[8], rbytes, 0, "advantages") < 0 ||
        get_buf(args[10], &b[9], rbytes, 0, "returns") < 0 ||
        get_buf(args[11], &b[11], 10 * sizeof(double), 0, "coefs") < 0 ||
        get_buf(args[12], &b[12], 5 * sizeof(double), 1, "stats") < 0)
        goto done;
    float *params = b[1].view.buf, *grads = b[2].view.buf;
    float *m = b[3].view.buf, *v = b[4].view.buf;
    const float *x = b[5].view.buf;
    const int64_t *taken = b[6].view.buf;
    const float *old = b[7].view.buf, *adv = b[8].view.buf, *ret = b[9].view.buf;
    float *scratch = get_workspace(ppo_scratch_floats(dims, layers, B));
    if (scratch == NULL) goto done;
    const double *coef = b[11].view.buf;
    double *stats = b[12].view.buf;
    for (int64_t i = 0; i < B; i++)
        if (taken[i] < 0 || taken[i] >= A) {
            PyErr_Format(PyExc_ValueError, "payoff native kernel: action %lld outside 0..%lld",
                         (long long)taken[i], (long long)(A - 1));
            goto done;
        }
    float clip = (float)coef[0];
    int64_t width = widest_of(dims, layers);

    /* where each layer's W^T and bias sit in params (and grads) */
    int64_t woff[MAX_LAYERS], boff[MAX_LAYERS], offset = 0;
    for (int k = 0; k < layers; k++) {
        woff[k] = offset;
        offset += 2 * dims[k] * dims[k + 1];
        boff[k] = offset;
        offset += 2 * dims[k + 1];
    }
    /* forward: outputs[k] is layer k's output [2, B, dims[k+1]] (after the activation) */
    float *outputs[MAX_LAYERS];
    float *cursor = scratch;
    for (int k = 0; k < layers; k++) {
        outputs[k] = cursor;
        cursor += 2 * B * dims[k + 1];
    }
    float *grad_a = cursor, *grad_b = cursor + 2 * B * width;
    for (int k = 0; k < layers; k++) {
        int64_t fan_in = dims[k], fan_out = dims[k + 1];
        for (int s = 0; s < 2; s++) {
            const float *input = k == 0 ? x : outputs[k - 1] + s * B * fan_in;
            float *out = outputs[k] + s * B * fan_out;
            gemm(0, 0, B, fan_out, fan_in, input, fan_in, params + woff[k] + s * fan_in * fan_out,
                 fan_out, 0.0f, out, fan_out);
            bias_act(out, params + boff[k] + s * fan_out, B, fan_out,
                     k == layers - 1 ? 0 : activation);
        }
    }
    const float *logits = outputs[layers - 1], *values = outputs[layers - 1] + B * A;

    /* losses and the gradient with respect to the outputs: grad_a = [2, B, A] */
    float *g_out = grad_a;
    memset(g_out, 0, 2 * B * A * sizeof(float));
    float inv_batch = (float)(-1.0 / (double)B), ent_scale = (float)(coef[1] / (double)B);
    float value_scale = (float)(coef[2] / (double)B);
    float low = (float)(1.0 - coef[0]), high = (float)(1.0 + coef[0]);
    double surrogate_sum = 0, error_sq = 0, neg_entropy_sum = 0, kl_sum = 0;
    int64_t clipped = 0;
    for (int64_t i = 0; i < B; i++) {
        const float *l = logits + i * A;
        float *g = g_out + i * A;
        float top = l[0];
        for (int64_t j = 1; j < A; j++) top = l[j] > top ? l[j] : top;
        float sum = 0.0f;
        for (int64_t j = 0; j < A; j++) {
            g[j] = expf(l[j] - top); /* exps, until the row's gradient replaces them */
            sum += g[j];
        }
        float log_sum = logf(sum), neg_entropy = 0.0f;
        for (int64_t j = 0; j < A; j++) neg_entropy += (g[j] / sum) * ((l[j] - top) - log_sum);
        float log_ratio = ((l[taken[i]] - top) - log_sum) - old[i];
        float ratio = expf(log_ratio);
        float weighted = adv[i] * ratio;
        float bounded = ratio < low ? low : (ratio > high ? high : ratio);
        float weighted_clipped = adv[i] * bounded;
        surrogate_sum += weighted < weighted_clipped ? weighted : weighted_clipped;
        float grad_logprob = (weighted <= weighted_clipped ? weighted : 0.0f) * inv_batch;
        for (int64_t j = 0; j < A; j++) {
            float logprob = (l[j] - top) - log_sum;
            float prob = g[j] / sum;
            g[j] = coef[1] != 0.0 ? prob * ((logprob - neg_entropy) * ent_scale - grad_logprob)
                                  : prob * -grad_logprob;
        }
        g[taken[i]] += grad_logprob;
        float error = values[i * A] - ret[i];
        g_out[B * A + i * A] = error * value_scale;
        error_sq += (double)error * error;
        neg_entropy_sum += neg_entropy;
        float ratio_minus_one = ratio - 1.0f;
        kl_sum += ratio_minus_one - log_ratio;
        clipped += fabsf(ratio_minus_one) > clip;
    }
    /* summed in double, reported as the float32 numbers torch's losses are: a value loss past
     * float32's range is inf here too, as payoff's divergence check expects */
    stats[0] = (float)(-surrogate_sum / B);
    stats[1] = (float)(0.5 * error_sq / B);
    stats[2] = (float)(-neg_entropy_sum / B);
    stats[3] = (float)(kl_sum / B);
    stats[4] = (double)clipped / B;

    /* backward: g [2, B, out] of layer k's output -> dW^T, db, and g of its input */
    float *g = g_out, *g_next = grad_b;
    for (int k = layers - 1; k >= 0; k--) {
        int64_t fan_in = dims[k], fan_out = dims[k + 1];
        for (int s = 0; s < 2; s++) {
            const float *gs = g + s * B * fan_out;
            const float *input = k == 0 ? x : outputs[k - 1] + s * B * fan_in;
            gemm(1, 0, fan_in, fan_out, B, input, fan_in, gs, fan_out, 0.0f,
                 grads + woff[k] + s * fan_in * fan_out, fan_out);
            column_sums(gs, B, fan_out, grads + boff[k] + s * fan_out);
            if (k == 0) continue;
            float *gin = g_next + s * B * fan_in;
            gemm(0, 1, B, fan_in, fan_out, gs, fan_out, params + woff[k] + s * fan_in * fan_out,
                 fan_out, 0.0f, gin, fan_in);
            times_derivative(gin, input, B * fan_in, activation);
        }
        float *t = g; /* the input's gradient is the next layer down's output gradient */
        g = g_next;
        g_next = t;
    }

    /* the joint gradient-norm clip, then Adam (torch.optim.Adam's, as FlatAdam steps) */
    double max_norm = coef[3];
    if (max_norm > 0) {
        double norm = sqrt(sum_squares(grads, total)), by = max_norm / (norm + 1e-6);
        scale(grads, total, (float)(by >= 1.0 ? 1.0 : by)); /* a NaN norm spreads, as min() */
    }
    float step = (float)(-coef[4]), inv_root_bc2 = (float)coef[5];
    float beta2 = (float)coef[7], eps = (float)coef[8];
    float one_minus_beta1 = (float)(1.0 - coef[6]), one_minus_beta2 = (float)(1.0 - coef[7]);
    adam(params, grads, m, v, total, one_minus_beta1, beta2, one_minus_beta2, inv_root_bc2, eps,
         step);
    result = Py_NewRef(Py_None);
done:
    release(b, 14);
    return result;
}

/* ---- CartPole-v1, batched --------------------------------------------------------------------
 * cartpole_step(state f64 [N, 4], actions int64 [N], elapsed int64 [N], needs_reset bool [N],
 *               max_steps, obs f32 [N, 4], rewards f32 [N], terminated bool [N],
 *               truncated bool [N], resetting int64 [N]) -> how many envs reset
 * payoff/envs/cartpole.py's CartPoleVectorEnv.step without its reset draws: every cart takes
 * Gymnasium's Euler step (its expressions in its order); the envs whose episode ended on the
 * previous step are listed in `resetting` (the caller draws their new states and writes them
 * to state and obs), their action ignored, reward 0 and elapsed 0. */
#define GRAVITY 9.8
#define MASS_POLE 0.1
#define TOTAL_MASS (1.0 + 0.1)
#define LENGTH 0.5
#define POLEMASS_LENGTH (0.1 * 0.5)
#define FORCE_MAG 10.0
#define TAU 0.02

/* One cart's Euler step in place (Gymnasium's expressions in its order); whether the pole
 * fell or the cart left the track. */
static int cart_step(double *s, int64_t action) {
    const double theta_threshold = 12 * 2 * M_PI / 360, x_threshold = 2.4;
    double x = s[0], x_dot = s[1], theta = s[2], theta_dot = s[3];
    double force = action == 1 ? FORCE_MAG : -FORCE_MAG;
    double costheta = cos(theta), sintheta = sin(theta);
    double temp = (force + POLEMASS_LENGTH * (theta_dot * theta_dot) * sintheta) / TOTAL_MASS;
    double thetaacc = (GRAVITY * sintheta - costheta * temp) /
                      (LENGTH * (4.0 / 3.0 - MASS_POLE * (costheta * costheta) / TOTAL_MASS));
    double xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS;
    s[0] = x + TAU * x_dot;
    s[1] = x_dot + TAU * xacc;
    s[2] = theta + TAU * theta_dot;
    s[3] = theta_dot + TAU * thetaacc;
    return s[0] < -x_threshold || s[0] > x_threshold || s[2] < -theta_threshold ||
           s[2] > theta_threshold;
}

/* Env i of a batched CartPole step (CartPoleVectorEnv.step without the reset draw): the cart
 * moves; an env whose episode ended on the previous step is listed in `resetting` instead,
 * its reward 0, its elapsed steps 0, not terminated (NEXT_STEP autoreset). The observation is
 * the new state in float32. Returns whether the step was a valid one (not a reset). */
static int env_step(int64_t i, double *state, int64_t action, int64_t *elapsed,
                    uint8_t *needs_reset, double max_steps, float *obs, float *reward,
                    uint8_t *terminated, uint8_t *truncated, int64_t *resetting,
                    int64_t *resets) {
    double *s = state + 4 * i;
    int fell = cart_step(s, action);
    int was_valid = !needs_reset[i];
    *reward = 1.0f;
    elapsed[i] += 1;
    if (!was_valid) {
        resetting[(*resets)++] = i;
        elapsed[i] = 0;
        fell = 0;
        *reward = 0.0f;
    }
    *terminated = (uint8_t)fell;
    *truncated = (uint8_t)((double)elapsed[i] >= max_steps);
    needs_reset[i] = *terminated | *truncated;
    for (int j = 0; j < 4; j++) obs[4 * i + j] = (float)s[j];
    return was_valid;
}

/* ---- a whole rollout: the actor on the batched CartPole ---------------------------------
 * rollout_cartpole(dims, ptrs, activation, normalize, clip,
 *     noise f32 [T, N, 2], logits f32 [T, N, 2], actions int64 [T, N],          (the sampler's)
 *     state f64 [N, 4], elapsed int64 [N], needs_reset bool [N], max_steps,      (the env's)
 *     current f32 [N, 4], obs f32 [T, N, 4], rewards f32 [T, N], terminated bool [T, N],
 *     truncated bool [T, N], valid bool [T, N],                                  (the storage)
 *     episode_return f64 [N], episode_length int64 [N], finished_returns f64 [T * N],
 *     finished_lengths int64 [T * N],                                            (the runner's)
 *     resetting int64 [N], start_step, finished_so_far, check_finite)
 *   -> (next step, envs reset on the last step, finished episodes so far, valid steps taken,
 *       whether an observation or reward was not finite)
 *
 * VectorRunner.collect with NativeRolloutSampler.act on CartPoleVectorEnv (payoff/rollout/
 * vector.py, payoff/accel/actor_critic.py, payoff/envs/cartpole.py), from step `start_step`:
 * each step stores the observations `current`, samples the actor's actions, steps every
 * cart as payoff.envs.cartpole.cartpole_step does, and keeps the runner's books (valid steps, episode returns and
 * lengths, the finished episodes appended from `finished_so_far`). It returns after a step
 * where envs reset (listed in `resetting`): the caller draws their new states from the envs'
 * generators into state and current, then calls again from the next step. */
static PyObject *rollout_cartpole(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (check_nargs(nargs, 26, "rollout_cartpole") < 0 || need_blas() < 0) return NULL;
    Net net;
    if (parse_net(args[0], args[1], &net) < 0) return NULL;
    int activation = (int)PyLong_AsLong(args[2]);
    double clip = PyFloat_AsDouble(args[4]);
    double max_steps = PyFloat_AsDouble(args[11]);
    long long start_step = PyLong_AsLongLong(args[23]);
    long long finished = PyLong_AsLongLong(args[24]);
    int check_finite = PyObject_IsTrue(args[25]);
    if (PyErr_Occurred() || check_finite < 0) return NULL;
    if (net.dims[0] != 4 || net.dims[net.layers] != 2) {
        PyErr_SetString(PyExc_ValueError, "rollout_cartpole: the actor must map 4 inputs to 2");
        return NULL;
    }
    /* b[k] holds args[k + 3] */
    enum { NB = 20 };
    Buf b[NB];
    memset(b, 0, sizeof b);
    PyObject *result = NULL;
    int64_t width = widest(&net);
    if (get_buf(args[8], &b[5], 0, 1, "state") < 0 || get_buf(args[5], &b[2], 0, 0, "noise") < 0)
        goto done;
    int64_t n = b[5].view.len / (Py_ssize_t)(4 * sizeof(double));
    int64_t steps = n > 0 ? b[2].view.len / (Py_ssize_t)(n * 2 * sizeof(float)) : 0;
    int64_t tn = steps * n;
    /* each step can finish at most n episodes: the output has room for the rest */
    if (n < 1 || steps < 1 || start_step < 0 || start_step >= steps || finished < 0 ||
        finished > start_step * n) {
        PyErr_SetString(PyExc_ValueError, "rollout_cartpole: sizes or positions out of range");
        goto done;
    }
    Py_ssize_t need[NB] = {
        0,                           /* normalize (empty: none) */
        0,                           /* clip: not a buffer */
        tn * 2 * sizeof(float),      /* noise */
        tn * 2 * sizeof(float),      /* logits */
        tn * sizeof(int64_t),        /* actions */
        n * 4 * sizeof(double),      /* state */
        n * sizeof(int64_t),         /* elapsed */
        n,                           /* needs_reset */
        0,                           /* max_steps: not a buffer */
        n * 4 * sizeof(float),       /* current */
        tn * 4 * sizeof(float),      /* obs */
        tn * sizeof(float),          /* rewards */
        tn,                          /* terminated */
        tn,                          /* truncated */
        tn,                          /* valid */
        n * sizeof(double),          /* episode_return */
        n * sizeof(int64_t),         /* episode_length */
        tn * sizeof(double),         /* finished_returns */
        tn * sizeof(int64_t),        /* finished_lengths */
        n * sizeof(int64_t),         /* resetting */
    };
    static const char *names[NB] = {
        "normalize", "", "noise", "logits", "actions", "state", "elapsed", "needs_reset", "",
        "current", "obs", "rewards", "terminated", "truncated", "valid", "episode_return",
        "episode_length", "finished_returns", "finished_lengths", "resetting"};
    for (int k = 0; k < NB; k++) {
        if (k == 1 || k == 8 || k == 2 || k == 5) continue; /* scalars, or parsed above */
        int writable = k >= 3 && k != 0;
        if (get_buf(args[k + 3], &b[k], need[k], writable, names[k]) < 0) goto done;
    }
    if (b[2].view.len < need[2]) {
        PyErr_SetString(PyExc_ValueError, "rollout_cartpole: noise too short");
        goto done;
    }
    const float *normalize =
        b[0].view.len >= (Py_ssize_t)(3 * 4 * sizeof(float)) ? b[0].view.buf : NULL;
    const float *noise = b[2].view.buf;
    float *logits = b[3].view.buf, *current = b[9].view.buf, *obs = b[10].view.buf;
    float *rewards = b[11].view.buf, *scratch = get_workspace(n * (4 + 2 * width));
    if (scratch == NULL) goto done;
    int64_t *actions = b[4].view.buf, *elapsed = b[6].view.buf, *length = b[16].view.buf;
    int64_t *finished_lengths = b[18].view.buf, *resetting = b[19].view.buf;
    double *state = b[5].view.buf, *episode_return = b[15].view.buf;
    double *finished_returns = b[17].view.buf;
    uint8_t *needs_reset = b[7].view.buf, *terminated = b[12].view.buf;
    uint8_t *truncated = b[13].view.buf, *valid = b[14].view.buf;
    int64_t t = start_step, resets = 0, valid_steps = 0;
    int not_finite = 0;
    while (t < steps && resets == 0 && !not_finite) {
        int64_t row = t * n;
        memcpy(obs + row * 4, current, n * 4 * sizeof(float));
        actor_step(&net, activation, normalize, (float)clip, obs + row * 4, n, noise + row * 2,
                   logits + row * 2, actions + row, scratch);
        for (int64_t i = 0; i < n; i++) {
            int was_valid = env_step(i, state, actions[row + i], elapsed, needs_reset, max_steps,
                                     current, rewards + row + i, terminated + row + i,
                                     truncated + row + i, resetting, &resets);
            if (check_finite)
                for (int j = 0; j < 4; j++) not_finite |= !isfinite(current[4 * i + j]);
            valid[row + i] = (uint8_t)was_valid;
            valid_steps += was_valid;
            episode_return[i] += rewards[row + i];
            length[i] += was_valid;
            if (needs_reset[i]) {
                finished_returns[finished] = episode_return[i];
                finished_lengths[finished] = length[i];
                finished++;
                episode_return[i] = 0.0;
                length[i] = 0;
            }
        }
        t++;
    }
    result = Py_BuildValue("(LLLLi)", (long long)t, (long long)resets, (long long)finished,
                           (long long)valid_steps, not_finite);
done:
    release(b, NB);
    return result;
}

/* ---- the module ------------------------------------------------------------------------- */
static PyObject *set_sgemm(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (check_nargs(nargs, 2, "set_sgemm") < 0) return NULL;
    void *address = PyLong_AsVoidPtr(args[0]);
    int ilp64 = PyObject_IsTrue(args[1]);
    if (PyErr_Occurred() || ilp64 < 0) return NULL;
    sgemm_address = address;
    sgemm_ilp64 = ilp64;
    Py_RETURN_NONE;
}

/* use_avx512(flag) -> whether the kernels' own AVX-512 products were in use before: flag
 * False sends every product to the BLAS (tests compare the two), True uses them where the CPU
 * has AVX-512. */
static PyObject *use_avx512(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (check_nargs(nargs, 1, "use_avx512") < 0) return NULL;
    int flag = PyObject_IsTrue(args[0]);
    if (flag < 0) return NULL;
#ifdef HAVE_AVX512_KERNELS
    int before = avx512 > 0 || (avx512 < 0 && __builtin_cpu_supports("avx512f"));
    avx512 = flag && __builtin_cpu_supports("avx512f") ? 1 : 0;
    return PyBool_FromLong(before);
#else
    return PyBool_FromLong(0);
#endif
}

/* products_ready() -> whether matrix products run at speed here (AVX-512, or a BLAS set) */
static PyObject *products_ready(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (check_nargs(nargs, 0, "products_ready") < 0) return NULL;
    return PyBool_FromLong(products_at_speed());
}

static PyObject *tanh_(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (check_nargs(nargs, 1, "tanh") < 0) return NULL;
    Buf b;
    memset(&b, 0, sizeof b);
    if (get_buf(args[0], &b, 0, 1, "x") < 0) {
        release(&b, 1);
        return NULL;
    }
    tanh_inplace(b.view.buf, b.view.len / (Py_ssize_t)sizeof(float));
    release(&b, 1);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"set_sgemm", (PyCFunction)(void (*)(void))set_sgemm, METH_FASTCALL, "set the BLAS sgemm"},
    {"act", (PyCFunction)(void (*)(void))act, METH_FASTCALL, "an MLP actor's sampling step"},
    {"forward", (PyCFunction)(void (*)(void))forward, METH_FASTCALL, "an MLP's forward pass"},
    {"ppo_step", (PyCFunction)(void (*)(void))ppo_step, METH_FASTCALL, "a PPO minibatch step"},
    {"rollout_cartpole", (PyCFunction)(void (*)(void))rollout_cartpole, METH_FASTCALL,
     "a rollout of an MLP actor on the batched CartPole"},
    {"use_avx512", (PyCFunction)(void (*)(void))use_avx512, METH_FASTCALL,
     "whether matrix products use the kernels' AVX-512 blocks (else the BLAS)"},
    {"products_ready", (PyCFunction)(void (*)(void))products_ready, METH_FASTCALL,
     "whether matrix products run at speed here"},
    {"tanh", (PyCFunction)(void (*)(void))tanh_, METH_FASTCALL, "the kernels' tanh, in place"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kernels", "payoff's native kernels", -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__kernels(void) { return PyModule_Create(&module); }
