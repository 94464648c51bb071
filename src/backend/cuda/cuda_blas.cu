/* cuda_blas.cu — prefill-sized matrix products through cuBLAS:
 * y (n, n_out) = x (n, n_in) W^T (+ bias), or y += x W^T, for batches of at
 * least min_tok tokens (BLAS_MIN_TOK; BRISK_CUDA_CUBLAS_MIN_TOK overrides).
 *
 * Why: the tensor-core kernel of cuda_mma.cu decodes its weight tiles inside
 * the product loop and reached ~105 TFLOP/s on an H200, a fraction of what
 * cuBLAS's f16 GEMM sustains. Here W is dequantized to f16 in row chunks that
 * fit a bounded scratch (BLAS_SCRATCH_MB; BRISK_CUDA_CUBLAS_SCRATCH_MB), x is
 * converted to f16 once per cuda_matmul call (q/k/v and gate/up share it),
 * and cublasGemmEx multiplies f16 by f16 into the f32 output with f32 sums:
 * the precision of the WMMA kernel, so tests/test_cuda_ops.c holds both to
 * one tolerance. f16 weights need no copy: cuBLAS reads them in place.
 *
 * Layout: cuBLAS is column-major. Row-major y (n, n_out) is column-major
 * C (n_out, n) with ldc = n_out; row-major W (rows, n_in) is column-major
 * (n_in, rows) with lda = n_in, and row-major x (n, n_in) column-major
 * (n_in, n) with ldb = n_in. So C = op_T(W) * x, m = rows, n = n, k = n_in,
 * and the chunk of rows [r0, r0 + R) writes C + r0 with the same ldc.
 *
 * Loading: dlopen at the first product cuBLAS would take, never at link
 * time: brisk starts (and CI links) where there is no cuBLAS, and a process
 * that only decodes never maps the library. Not found, or BRISK_CUDA_DISABLE=cublas:
 * every product stays on cuda_mma.cu. BRISK_CUDA_GRAPH_INFO=1 says on stderr which
 * library was loaded, or why none was. The lab dev/kernels/gemm_lab.cu times
 * both paths per shape.
 *
 * Graphs: only passes of <= 16 tokens are captured (cuda_graph.cu). Should a
 * capture reach here anyway (a lowered threshold), the product runs on the
 * WMMA kernel: no graph ever points into these buffers, so they may grow
 * between passes (cudaFree waits for the device first). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.cuh"

#if __has_include(<cublas_api.h>)
#include <cublas_api.h> /* types and enums only: every call goes through dlsym */
#else
/* The few declarations used, as cublas_api.h (CUDA 11+) has them. */
#include <library_types.h>
typedef struct cublasContext *cublasHandle_t;
typedef enum { CUBLAS_STATUS_SUCCESS = 0 } cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUBLAS_DEFAULT_MATH = 0 } cublasMath_t;
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;
#endif

#define BLAS_MIN_TOK 48           /* batches from here on: cuBLAS (H200, mmq_lab: at 64 tokens cuBLAS 30.7 us
                                   * on a Q4_K 4096x4096, cuda_mmq 35.9; at 32, 30 against 18.6) */
#define BLAS_SCRATCH_MB 64        /* dequantized f16 weights per chunk, MiB */
#define BLAS_WS_BYTES ((size_t)32 << 20) /* cuBLAS workspace: NVIDIA's figure for Hopper */
#define BLAS_ROW_ALIGN 128        /* chunks of whole 128-row tiles (all but the last) */
/* What bk_cuda_backend_overhead counts for this file: the scratch, the workspace,
 * x in f16 (512 tokens of up to 32K: engine batches are at most 512 tokens) and
 * the library's own device memory (handle, kernels loaded on use). */
#define BLAS_RESERVE_BYTES (((size_t)BLAS_SCRATCH_MB << 20) + BLAS_WS_BYTES + ((size_t)64 << 20))

typedef cublasStatus_t (*blas_create_fn)(cublasHandle_t *);
typedef cublasStatus_t (*blas_destroy_fn)(cublasHandle_t);
typedef cublasStatus_t (*blas_set_stream_fn)(cublasHandle_t, cudaStream_t);
typedef cublasStatus_t (*blas_set_workspace_fn)(cublasHandle_t, void *, size_t);
typedef cublasStatus_t (*blas_set_math_fn)(cublasHandle_t, cublasMath_t);
typedef cublasStatus_t (*blas_version_fn)(cublasHandle_t, int *);
typedef cublasStatus_t (*blas_gemm_ex_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                          const void *, const void *, cudaDataType, int, const void *, cudaDataType,
                                          int, const void *, void *, cudaDataType, int, cublasComputeType_t,
                                          cublasGemmAlgo_t);

/* One backend's cuBLAS state (cb->blas; NULL when BRISK_CUDA_DISABLE=cublas). */
typedef struct cuda_blas {
    bool tried, ok;            /* loading was attempted; it succeeded and products may use it */
    bool verbose;              /* BRISK_CUDA_GRAPH_INFO=1: report loading on stderr */
    int min_tok;               /* smallest batch taken */
    size_t w_budget;           /* bytes of f16 weights per chunk */
    void *lib;                 /* dlopen handle (kept: see cuda_blas_free) */
    cublasHandle_t h;
    blas_create_fn create;
    blas_destroy_fn destroy;
    blas_set_stream_fn set_stream;
    blas_set_workspace_fn set_workspace; /* NULL in old libraries: cuBLAS's own pool */
    blas_set_math_fn set_math;
    blas_gemm_ex_fn gemm_ex;
    void *ws;                  /* (BLAS_WS_BYTES) the GEMM's workspace */
    half *w16;                 /* (rows, n_in) one chunk of W in f16 */
    size_t w16_cap;            /* bytes */
    half *x16;                 /* (n, n_in) the activations in f16 */
    size_t x16_cap;            /* bytes */
    const float *x16_src;      /* what x16 holds: this x, x16_n rows of x16_dim */
    int x16_n;
    int64_t x16_dim;
    long n_products;           /* products run here (tests, lab) */
} cuda_blas;

static_assert(CUDA_PLAN_CUBLAS_MIN == BLAS_MIN_TOK && CUDA_PLAN_CUBLAS_MB == BLAS_SCRATCH_MB, "cuda_plan.h");

brisk_status cuda_blas_init(cuda_backend *cb) {
    if (cb->plan.cublas_off) return BRISK_OK;
    cuda_blas *bl = (cuda_blas *)calloc(1, sizeof *bl);
    if (!bl) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    bl->verbose = cb->plan.graph_info;
    bl->min_tok = cb->plan.cublas_min_tok;
    bl->w_budget = (size_t)cb->plan.cublas_scratch_mb << 20;
    cb->blas = bl;
    return BRISK_OK;
}

/* The library stays mapped (no dlclose): unloading cuBLAS under its runtime's
 * exit handlers is unsafe, and the next backend's dlopen only counts up. */
void cuda_blas_free(cuda_backend *cb) {
    cuda_blas *bl = cb->blas;
    if (!bl) return;
    if (bl->h) bl->destroy(bl->h);
    cudaFree(bl->ws);
    cudaFree(bl->w16);
    cudaFree(bl->x16);
    free(bl);
    cb->blas = NULL;
}

/* Device memory counted for this file in bk_cuda_backend_overhead (none when switched off). */
size_t cuda_blas_reserve(void) {
    cuda_plan plan; /* malformed settings fail the backend's creation, not this estimate */
    cuda_plan_read(&plan, NULL, NULL, NULL, 0);
    return plan.cublas_off ? 0 : BLAS_RESERVE_BYTES;
}

/* Loading failed or was refused: products stay on the WMMA kernel from now on. */
static bool blas_give_up(cuda_blas *bl, const char *why) {
    if (bl->verbose) fprintf(stderr, "brisk: cuda: cuBLAS not used: %s\n", why);
    if (bl->h) bl->destroy(bl->h);
    bl->h = NULL;
    cudaFree(bl->ws);
    bl->ws = NULL;
    cudaGetLastError();
    bl->ok = false;
    return false;
}

/* dlopen + dlsym, then a handle on the backend's stream with the workspace.
 * Runs once, outside any capture (cublasCreate allocates and synchronizes). */
static bool blas_load(cuda_backend *cb, cuda_blas *bl) {
    bl->tried = true;
    static const char *const names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};
    const char *dirs[] = {NULL, getenv("CUDA_HOME"), "/usr/local/cuda"};
    char path[1024], why[512] = "";
    for (int d = 0; d < 3 && !bl->lib; d++) {
        if (d > 0 && (!dirs[d] || !*dirs[d])) continue;
        for (int i = 0; i < 3 && !bl->lib; i++) {
            if (dirs[d]) snprintf(path, sizeof path, "%s/lib64/%s", dirs[d], names[i]);
            else snprintf(path, sizeof path, "%s", names[i]);
            bl->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
            const char *e = bl->lib ? NULL : dlerror();
            if (e && !why[0]) snprintf(why, sizeof why, "%s", e); /* the first failure says most */
        }
    }
    if (!bl->lib) return blas_give_up(bl, why[0] ? why : "libcublas not found");
    bl->create = (blas_create_fn)dlsym(bl->lib, "cublasCreate_v2");
    bl->destroy = (blas_destroy_fn)dlsym(bl->lib, "cublasDestroy_v2");
    bl->set_stream = (blas_set_stream_fn)dlsym(bl->lib, "cublasSetStream_v2");
    bl->set_workspace = (blas_set_workspace_fn)dlsym(bl->lib, "cublasSetWorkspace_v2");
    bl->set_math = (blas_set_math_fn)dlsym(bl->lib, "cublasSetMathMode");
    bl->gemm_ex = (blas_gemm_ex_fn)dlsym(bl->lib, "cublasGemmEx");
    blas_version_fn version = (blas_version_fn)dlsym(bl->lib, "cublasGetVersion_v2");
    if (!bl->create || !bl->destroy || !bl->set_stream || !bl->set_math || !bl->gemm_ex)
        return blas_give_up(bl, "libcublas lacks cublasCreate_v2/cublasGemmEx");
    /* the handle binds to the current device; our runtime and cuBLAS's share its primary context */
    if (cudaSetDevice(cb->device) != cudaSuccess || bl->create(&bl->h) != CUBLAS_STATUS_SUCCESS) {
        bl->h = NULL;
        return blas_give_up(bl, "cublasCreate failed");
    }
    /* the stream first: cublasSetStream resets the workspace to cuBLAS's pool */
    if (bl->set_stream(bl->h, cb->stream) != CUBLAS_STATUS_SUCCESS)
        return blas_give_up(bl, "cublasSetStream failed");
    if (bl->set_workspace) {
        if (cudaMalloc(&bl->ws, BLAS_WS_BYTES) != cudaSuccess) {
            bl->ws = NULL;
            return blas_give_up(bl, "no device memory for the workspace");
        }
        if (bl->set_workspace(bl->h, bl->ws, BLAS_WS_BYTES) != CUBLAS_STATUS_SUCCESS)
            return blas_give_up(bl, "cublasSetWorkspace failed");
    }
    if (bl->set_math(bl->h, CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS)
        return blas_give_up(bl, "cublasSetMathMode failed");
    bl->ok = true;
    if (bl->verbose) {
        int v = 0;
        if (version) version(bl->h, &v);
        fprintf(stderr, "brisk: cuda: cuBLAS %d.%d.%d (%s) for products of >= %d tokens, %zu MiB weight chunks\n",
                v / 10000, v / 100 % 100, v % 100, path, bl->min_tok, bl->w_budget >> 20);
    }
    return true;
}

/* True when cuBLAS may run a product now: loaded (loading it on the first
 * call) and the stream not being captured. */
bool cuda_blas_ready(cuda_backend *cb) {
    cuda_blas *bl = cb->blas;
    if (!bl || cb->capturing) return false;
    if (!bl->tried) blas_load(cb, bl);
    return bl->ok;
}

extern "C" long bk_cuda_blas_products(bk_backend *be) {
    cuda_backend *cb = (cuda_backend *)be;
    return cuda_blas_ready(cb) ? cb->blas->n_products : -1;
}

/* Grows a device buffer to `need` bytes (contents dropped); false when memory is short. */
static bool blas_grow(void **p, size_t *cap, size_t need) {
    if (need <= *cap) return true;
    cudaFree(*p); /* waits for the device: a product in flight may still read it */
    *p = NULL;
    *cap = 0;
    if (cudaMalloc(p, need) != cudaSuccess) {
        cudaGetLastError();
        *p = NULL;
        return false;
    }
    *cap = need;
    return true;
}

static bool blas_launched(cuda_backend *cb) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return true;
    cuda_set_error(cb, bk_fail(BRISK_ERR_BACKEND, "cuda_blas: %s", cudaGetErrorString(e)));
    return false;
}

/* out (rows, n_in) f16 = rows of W decoded, one thread per 8 elements:
 * consecutive threads write consecutive 16 bytes of a row. */
template <int T>
__global__ void __launch_bounds__(256)
blas_deq_kernel(const uint8_t *W, size_t row_bytes, int64_t n_in, int64_t groups, half *out) {
    int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= groups) return;
    int64_t per_row = n_in / 8, r = g / per_row;
    float v[8];
    deq8<T>(W + r * row_bytes, (g - r * per_row) * 8, v);
    uint4 u;
    half2 *h = (half2 *)&u;
#pragma unroll
    for (int i = 0; i < 4; i++) h[i] = __floats2half2_rn(v[2 * i], v[2 * i + 1]);
    ((uint4 *)out)[g] = u; /* element g * 8 = row r, column (g - r * per_row) * 8 */
}

/* out = x in f16, 8 elements per thread (count % 8 == 0, x 16-byte aligned). */
__global__ void __launch_bounds__(256) blas_f16_kernel(const float *x, int64_t groups, half *out) {
    int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= groups) return;
    float4 a = __ldg((const float4 *)x + 2 * g), b = __ldg((const float4 *)x + 2 * g + 1);
    uint4 u;
    half2 *h = (half2 *)&u;
    h[0] = __floats2half2_rn(a.x, a.y);
    h[1] = __floats2half2_rn(a.z, a.w);
    h[2] = __floats2half2_rn(b.x, b.y);
    h[3] = __floats2half2_rn(b.z, b.w);
    ((uint4 *)out)[g] = u;
}

/* y (n, n_out) = bias broadcast over the tokens (+ y when accum): the GEMM then adds onto it (beta = 1). */
__global__ void blas_bias_kernel(float *y, const float *bias, int64_t n_out, int64_t count, int accum) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = (accum ? y[i] : 0.0f) + bias[i % n_out];
}

static unsigned blas_blocks(int64_t threads) { return (unsigned)((threads + 255) / 256); }

bool cuda_blas_dequant(cuda_backend *cb, const bk_weight *w, int64_t r0, int64_t rows, half *out) {
    int64_t groups = rows * (w->n_in / 8);
    const uint8_t *W = (const uint8_t *)w->dev + r0 * w->row_bytes;
    if (groups <= 0) return true;
    BK_DISPATCH(w->type, blas_deq_kernel<TT><<<blas_blocks(groups), 256, 0, cb->stream>>>(W, w->row_bytes, w->n_in,
                                                                                         groups, out));
    return blas_launched(cb);
}

bool cuda_blas_to_f16(cuda_backend *cb, const float *x, int64_t count, half *out) {
    if (count <= 0) return true;
    blas_f16_kernel<<<blas_blocks(count / 8), 256, 0, cb->stream>>>(x, count / 8, out);
    return blas_launched(cb);
}

/* c (ldc-strided, rows x n column-major, i.e. y + r0) = beta c + a x16^T; a (rows, n_in) and
 * x16 (n, n_in) row-major f16. False when cuBLAS refuses the call. */
bool cuda_blas_gemm(cuda_backend *cb, const half *a, int64_t rows, int64_t n_in, const half *x16, int n, float *c,
                    int64_t ldc, float beta) {
    cuda_blas *bl = cb->blas;
    const float alpha = 1.0f; /* host scalars, read when the call is enqueued */
    cublasStatus_t s = bl->gemm_ex(bl->h, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows, n, (int)n_in, &alpha, a, CUDA_R_16F,
                                   (int)n_in, x16, CUDA_R_16F, (int)n_in, &beta, c, CUDA_R_32F, (int)ldc,
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS && bl->verbose)
        fprintf(stderr, "brisk: cuda: cublasGemmEx(m %lld, n %d, k %lld) failed: status %d\n", (long long)rows, n,
                (long long)n_in, (int)s);
    return s == CUBLAS_STATUS_SUCCESS;
}

/* Rows of W per chunk: as many as the scratch holds, in whole BLAS_ROW_ALIGN tiles. */
static int64_t blas_chunk_rows(const cuda_blas *bl, int64_t n_in, int64_t n_out) {
    int64_t r = (int64_t)(bl->w_budget / ((size_t)n_in * sizeof(half)));
    if (r >= BLAS_ROW_ALIGN) r -= r % BLAS_ROW_ALIGN;
    return r < n_out ? r : n_out;
}

/* Batches from min_tok tokens (BRISK_CUDA_CUBLAS_MIN_TOK) of the shapes cuBLAS takes, while the
 * library is on (NULL: BRISK_CUDA_DISABLE=cublas); loading it, or having given it up, is cuda_blas_ready's. */
bool cuda_blas_should_use(const cuda_backend *cb, uint32_t type, int64_t n_in, int64_t n_out, int n) {
    const cuda_blas *bl = cb->blas;
    return bl && n >= bl->min_tok && cuda_type_supported(type) && n_in % 32 == 0 && n_in <= INT32_MAX &&
           n_out <= INT32_MAX;
}

/* y (n, n_out) = x W^T (+ bias), or y += x W^T when accum is set, through cuBLAS. False when
 * it does not take the product (off, unavailable, capturing, too few tokens, a type or shape
 * it does not handle, no memory): the caller runs the WMMA kernel; nothing was written to y.
 * *x16_ready is the caller's note that x of this call is already in f16 (shared by the
 * matrices of one cuda_matmul call); set here once converted. A failure after part of y was
 * written is recorded as the backend's error instead (returns true). */
bool cuda_blas_matmul(cuda_backend *cb, const bk_weight *w, const float *bias, const float *x, int n, float *y,
                      int accum, bool *x16_ready) {
    cuda_blas *bl = cb->blas;
    int64_t n_in = w->n_in, n_out = w->n_out;
    if (!cuda_blas_should_use(cb, w->type, n_in, n_out, n) || !cuda_blas_ready(cb)) return false;
    bool in_place = w->type == QT_F16; /* rows of n_in f16 values: cuBLAS reads W itself */
    int64_t rows = in_place ? n_out : blas_chunk_rows(bl, n_in, n_out);
    if (rows < 1 || (!in_place && !blas_grow((void **)&bl->w16, &bl->w16_cap, (size_t)rows * n_in * sizeof(half))))
        return false;
    if (!(*x16_ready && bl->x16_src == x && bl->x16_n == n && bl->x16_dim == n_in)) {
        if (!blas_grow((void **)&bl->x16, &bl->x16_cap, (size_t)n * n_in * sizeof(half))) return false;
        if (!cuda_blas_to_f16(cb, x, (int64_t)n * n_in, bl->x16)) return true;
        bl->x16_src = x;
        bl->x16_n = n;
        bl->x16_dim = n_in;
        *x16_ready = true;
    }
    float beta = accum ? 1.0f : 0.0f;
    bool prefilled = false;
    if (bias) {
        int64_t count = (int64_t)n * n_out;
        unsigned blocks = blas_blocks(count) < 4096 ? blas_blocks(count) : 4096;
        blas_bias_kernel<<<blocks, 256, 0, cb->stream>>>(y, bias, n_out, count, accum);
        if (!blas_launched(cb)) return true;
        beta = 1.0f;
        prefilled = true;
    }
    for (int64_t r0 = 0; r0 < n_out; r0 += rows) {
        int64_t nr = n_out - r0 < rows ? n_out - r0 : rows;
        const half *a = bl->w16;
        if (in_place) a = (const half *)((const uint8_t *)w->dev + r0 * w->row_bytes);
        else if (!cuda_blas_dequant(cb, w, r0, nr, bl->w16)) return true;
        if (cuda_blas_gemm(cb, a, nr, n_in, bl->x16, n, y + r0, n_out, beta)) continue;
        /* Refused on the first chunk with y untouched (or holding only the bias the WMMA
         * kernel rewrites when not accumulating): leave cuBLAS for good, WMMA takes over. */
        if (r0 == 0 && !(prefilled && accum)) return blas_give_up(bl, "cublasGemmEx refused a product");
        cuda_set_error(cb, bk_fail(BRISK_ERR_BACKEND, "cuda_blas: cublasGemmEx failed (%s, %lld x %lld, %d tokens)",
                                   w->name ? w->name : "?", (long long)n_out, (long long)n_in, n));
        return true;
    }
    bl->n_products++;
    return true;
}
