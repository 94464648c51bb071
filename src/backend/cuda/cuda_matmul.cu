/* cuda_matmul.cu — which kernel computes a matrix product: y (n, n_out) = x (n, n_in) W^T (+ bias).
 *
 * A ladder, as ggml's ggml_cuda_mul_mat: for each matrix the first rung whose predicate says yes
 * runs it. The predicates (*_should_use, *_use) are pure functions of the plan (cb's switches and
 * limits), the weight's type and shape and the batch n, declared in cuda_internal.cuh and defined
 * beside their kernels. A kernel that refuses at run time (returns 0 or false: alignment, a buffer
 * too small, a shared-memory opt-in, cuBLAS not loading) leaves its matrix to the next rung.
 *
 * Before the rungs, once per call (the only steps with side effects besides the launches):
 *   a. x to f16 for the f16 tensor-core batches (cuda_mmqh_prepare), when a matrix of the call
 *      takes them (cuda_mmqh_should_use);
 *   b. x quantized to int8 for the integer-dot paths (cuda_mmvq_prepare, or the fused norm's copy),
 *      when a matrix of the call takes one (cuda_mmq_should_use / cuda_mmvq_should_use) and is not
 *      already on rung 1. Where it fails, no matrix of the call takes rungs 2-3 (nor does a matrix
 *      rung 1 refuses at run time unless another matrix of the call had x quantized).
 *
 * The rungs of cuda_matmul, for each matrix in order (runs of consecutive matrices of one type share
 * a launch where the rung says so; the run then skips the matrices it took):
 *   1. cuda_mmqh          f16 tensor cores, weights streamed     cuda_mmqh_should_use (x converted in a)
 *   2. cuda_mmq           int8 tensor cores                       cuda_mmq_should_use (x quantized in b)
 *   3. cuda_mmvq_multi    integer-dot GEMV, a run in one launch   cuda_mmvq_should_use + _multi_should_use
 *      cuda_mmvq          integer-dot GEMV, one matrix            cuda_mmvq_should_use
 *   4. cuda_mmvf_run      one token on float weights, a run       cuda_mmvf_should_use, several matrices left
 *   then the float ladder (float_matmul, one matrix):
 *   5. cuda_blas_matmul   cuBLAS on f16-dequantized weights       cuda_mma_should_use + cuda_blas_should_use
 *      cuda_mma           f16 tensor cores (WMMA)                 cuda_mma_should_use
 *   6. cuda_mm_tiled      SIMT 64x64 tiles                        cuda_mm_tiled_should_use
 *   7. cuda_gemv_splitk   a block per row (routers)               cuda_gemv_splitk_should_use
 *   8. cuda_mmvf_run      one token on float weights              cuda_mmvf_should_use
 *   9. cuda_gemv          the float GEMV                          (always)
 * cuda_matmul_add (y += x W^T) climbs 1, 2-3 (single), then the float ladder; cuda_matmul_swiglu
 * climbs the fused GLU kernels (cuda_mmqh_glu, cuda_mmq_glu / cuda_mmvq_glu, cuda_mmvf_run with up),
 * then two cuda_matmul products and cuda_swiglu.
 *
 * The path counters (CU_COUNT) are the kernels' own; CU_ABLATE(ABL_MATMUL) skips the whole op. */
#include "backend/cuda/cuda_internal.cuh"
#include "backend/cuda/cuda_mmvq.cuh" /* cuda_mmvf_should_use, cuda_mmvf_run */

/* Rungs 5-9: one matrix on the float paths (weights of any type decoded to floats). *x16 notes that x
 * is already in f16 for cuBLAS (cuda_blas.cu): the matrices of one cuda_matmul call share it. */
static void float_matmul(cuda_backend *cb, const bk_weight *w, const bk_weight *bias, const float *x, int n,
                         float *y, int accum, bool *x16) {
    const float *b = bias ? (const float *)bias->dev : NULL;
    if (cuda_mma_should_use(cb, w->type, w->n_in, n)) {
        if (cuda_blas_should_use(cb, w->type, w->n_in, w->n_out, n) && cuda_blas_matmul(cb, w, b, x, n, y, accum, x16))
            return;
        cuda_mma(cb, w, b, x, n, y, accum);
        return;
    }
    if (cuda_mm_tiled_should_use(w->n_in, n)) {
        cuda_mm_tiled(cb, w, b, x, n, y, accum);
        return;
    }
    if (cuda_gemv_splitk_should_use(w->type, w->n_in, w->n_out)) {
        cuda_gemv_splitk(cb, w, b, x, n, y, accum);
        return;
    }
    if (cuda_mmvf_should_use(cb, w->type, n) && cuda_mmvf_run(cb, 1, &w, &bias, x, &y, accum, NULL)) return;
    cuda_gemv(cb, w, b, x, n, y, accum);
}

/* Rungs 2-3 for one matrix on x already quantized: int8 tensor cores or the integer-dot GEMV
 * (cuda_mmq_use and cuda_mmvq_use never both hold for one n). */
static void q8_matmul(cuda_backend *cb, const bk_weight *w, const float *bias, int n, float *y, int accum) {
    if (cuda_mmq_should_use(cb, w->type, w->n_in, n)) cuda_mmq(cb, w, bias, n, y, accum);
    else cuda_mmvq(cb, w, bias, n, y, accum);
}

/* Whether rungs 2-3 take w in a call whose x is quantized. */
static bool q8_takes(const cuda_backend *cb, const bk_weight *w, int n) {
    return cuda_mmq_should_use(cb, w->type, w->n_in, n) || cuda_mmvq_should_use(cb, w->type, w->n_in, n);
}

/* Whether rung 1 takes w in a call whose x is n_in wide (converted once for all its matrices). */
static bool mmqh_takes(const cuda_backend *cb, const bk_weight *w, int64_t n_in, int n) {
    return w->n_in == n_in && cuda_mmqh_should_use(cb, w->type, w->n_in, n);
}

/* The device biases of w[m..m + cnt) (NULL where none). */
static void bias_ptrs(const bk_weight *const *bias, int m, int cnt, const float **bs) {
    for (int i = 0; i < cnt; i++) bs[i] = bias && bias[m + i] ? (const float *)bias[m + i]->dev : NULL;
}

extern "C" void cuda_matmul(bk_backend *be, int n_w, const bk_weight *const *w, const bk_weight *const *bias,
                            const float *x, int n, float *const *y) {
    cuda_backend *cb = (cuda_backend *)be;
    if (n <= 0) return;
    CU_ABLATE(cb, ABL_MATMUL);
    const int64_t n_in = w[0]->n_in;
    /* a. x in f16 once, for the matrices rung 1 takes */
    bool any_h = false;
    for (int m = 0; m < n_w; m++) any_h |= mmqh_takes(cb, w[m], n_in, n);
    const bool hp = any_h && cuda_mmqh_prepare(cb, x, n_in, n);
    /* b. x quantized once, for the matrices rungs 2-3 take (those of rung 1 aside). A matrix of
     * another type in the call (a float vector such as qwen35moe's shared-expert gate beside its
     * Q4_K gate and up) takes the float path alone; the others keep theirs. */
    bool any_q8 = false;
    for (int m = 0; m < n_w; m++) any_q8 |= q8_takes(cb, w[m], n) && !(hp && mmqh_takes(cb, w[m], n_in, n));
    const bool q8 = any_q8 && cuda_mmvq_prepare(cb, x, n_in, n);
    q8_tag tag = q8_tag_now(cb);
    if (q8) tag = {x, n, n_in};

    bool x16 = false;
    for (int m = 0; m < n_w; m++) {
        const int left = n_w - m;
        if (hp && mmqh_takes(cb, w[m], n_in, n)) { /* 1: a run of one type in one launch */
            const float *bs[MMVS_MATS];
            const int cnt = left < MMVS_MATS ? left : MMVS_MATS;
            bias_ptrs(bias, m, cnt, bs);
            const int took = cuda_mmqh(cb, cnt, w + m, bs, n, y + m, 0);
            if (took > 0) {
                m += took - 1;
                continue;
            }
        }
        if (q8 && q8_takes(cb, w[m], n)) {
            if (cuda_mmvq_should_use(cb, w[m]->type, w[m]->n_in, n) &&
                cuda_mmvq_multi_should_use(cb, n, left)) { /* 3: a run of one type in one launch */
                const float *bs[MMVQ_MULTI_MAX];
                const int cnt = left < MMVQ_MULTI_MAX ? left : MMVQ_MULTI_MAX;
                bias_ptrs(bias, m, cnt, bs);
                const int took = cuda_mmvq_multi(cb, cnt, w + m, bs, n, y + m);
                if (took > 0) {
                    m += took - 1;
                    continue;
                }
            }
            q8_matmul(cb, w[m], bias && bias[m] ? (const float *)bias[m]->dev : NULL, n, y[m], 0); /* 2, 3 */
            continue;
        }
        if (left > 1 && cuda_mmvf_should_use(cb, w[m]->type, n)) { /* 4: a float run in one launch */
            const int took = cuda_mmvf_run(cb, left, w + m, bias ? bias + m : NULL, x, y + m, 0, NULL);
            if (took > 0) {
                m += took - 1;
                continue;
            }
        }
        float_matmul(cb, w[m], bias ? bias[m] : NULL, x, n, y[m], 0, &x16); /* 5-9 */
    }
    CU_LAUNCHED(cb);
    for (int m = 0; m < n_w; m++) {
        q8_tag_keep(cb, tag, y[m], (size_t)n * (size_t)w[m]->n_out);
        tag = q8_tag_now(cb);
    }
}

/* y += x W^T: the residual add folded into the product's store (one kernel less). */
extern "C" void cuda_matmul_add(bk_backend *be, const bk_weight *w, const float *x, int n, float *y) {
    cuda_backend *cb = (cuda_backend *)be;
    if (n <= 0) return;
    CU_ABLATE(cb, ABL_MATMUL);
    if (cuda_mmqh_should_use(cb, w->type, w->n_in, n) && cuda_mmqh_prepare(cb, x, w->n_in, n) &&
        cuda_mmqh(cb, 1, &w, NULL, n, &y, 1))
        ; /* 1 */
    else if (q8_takes(cb, w, n) && cuda_mmvq_prepare(cb, x, w->n_in, n))
        q8_matmul(cb, w, NULL, n, y, 1); /* 2, 3 */
    else {
        bool x16 = false;
        float_matmul(cb, w, NULL, x, n, y, 1, &x16); /* 5-9 */
    }
    CU_LAUNCHED(cb);
}

/* out = silu(x Wgate^T) * (x Wup^T): one launch that never stores the two products (batches on the
 * f16 tensor cores: cuda_mmqh.cu's GLU kernel; decode: cuda_mmvq.cu's; batches in mmq's range:
 * cuda_mmq.cu's; one token on float weights: cuda_mmvf.cu's); others as two products into out and
 * tmp, then the gate. */
extern "C" void cuda_matmul_swiglu(bk_backend *be, const bk_weight *gate, const bk_weight *up, const float *x, int n,
                                   float *tmp, float *out) {
    cuda_backend *cb = (cuda_backend *)be;
    if (n <= 0) return;
    CU_ABLATE(cb, ABL_MATMUL);
    if (cuda_mmqh_glu_should_use(cb, gate->type, gate->n_in, n) && cuda_mmqh_prepare(cb, x, gate->n_in, n) &&
        cuda_mmqh_glu(cb, gate, up, n, out)) {
        CU_LAUNCHED(cb);
        return;
    }
    const bool mmq = cuda_mmq_glu_should_use(cb, gate->type, gate->n_in, n);
    if ((mmq || cuda_mmvq_glu_should_use(cb, gate->type, gate->n_in, n)) &&
        cuda_mmvq_prepare(cb, x, gate->n_in, n) &&
        (mmq ? cuda_mmq_glu(cb, gate, up, n, out) : cuda_mmvq_glu(cb, gate, up, n, out))) {
        CU_LAUNCHED(cb);
        /* x stays quantized for the products after this one (qwen35moe's routed experts) */
        q8_tag_keep(cb, q8_tag{x, n, gate->n_in}, out, (size_t)n * (size_t)gate->n_out);
        return;
    }
    if (!cb->glu_off && cuda_mmvf_should_use(cb, gate->type, n) && cuda_mmvf_run(cb, 1, &gate, NULL, x, &out, 0, up)) {
        CU_LAUNCHED(cb);
        return;
    }
    const bk_weight *gu[2] = {gate, up};
    float *gu_out[2] = {out, tmp};
    cuda_matmul(be, 2, gu, NULL, x, n, gu_out);
    cuda_swiglu(be, out, tmp, out, (size_t)n * (size_t)gate->n_out);
}
