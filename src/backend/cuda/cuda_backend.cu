/* cuda_backend.cu — memory, the stream, metadata staging and the op table of
 * the CUDA backend. The op families live in cuda_matmul.cu (which kernel takes a matrix
 * product: a ladder of the kernels' predicates), cuda_gemv.cu, cuda_norm_rope.cu,
 * cuda_attention.cu (decode batches: cuda_attn_decode.cu), cuda_elementwise.cu,
 * cuda_moe.cu (router, experts) and cuda_ssm.cu (Gated DeltaNet). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.cuh"

/* Staging capacities in bytes: ids and positions of up to 64K tokens, and
 * attention metadata (positions, slots, table offsets and the distinct block
 * tables of a batch) of up to 1M int32. A batch beyond them is an error. */
#define META_TOKENS_BYTES ((size_t)65536 * 4)
#define META_FREQ_BYTES ((size_t)4096 * 4)
#define META_ATT_BYTES ((size_t)1 << 22)
/* Split-K attention partials: 8M floats (32 MiB). */
#define ATT_PART_FLOATS ((size_t)8 << 20)

void cuda_set_error(cuda_backend *cb, brisk_status s) {
    if (cb->err != BRISK_OK) return;
    cb->err = s;
    snprintf(cb->errmsg, sizeof cb->errmsg, "%s", brisk_last_error());
}

static const char *const cu_path_names[CU_PATH_COUNT] = {"mmvf", "mmvs", "mmqh", "mma", "attn_mma", "attn_warp",
                                                           "attn_prefill", "mmq", "mmvq"};

extern "C" long bk_cuda_path_launches(bk_backend *be, const char *name) {
    const cuda_backend *cb = (const cuda_backend *)be;
    for (int i = 0; i < CU_PATH_COUNT; i++) {
        if (strcmp(name, cu_path_names[i])) continue;
        /* -1 for a path this backend never takes (switched off, or before sm_90): a test then has no
         * launch to expect */
        bool off = (i == CU_PATH_MMVF && !cb->mmvf_on) || (i == CU_PATH_MMVS && cb->mmvs_off) ||
                   (i == CU_PATH_MMQH && cb->mmqh_off) || (i == CU_PATH_MMQ && cb->mmq_off);
        return off ? -1 : cb->path_n[i];
    }
    return -1;
}

bool cuda_scratch_reserve(cuda_backend *cb, cuda_scratch *sc, size_t need, const char *what) {
    if (need <= sc->cap) return true;
    if (sc->buf) {
        if (!cb->capturing && cb->n_graphs == 0) {
            cudaError_t e = cudaStreamSynchronize(cb->stream);
            if (e != cudaSuccess) {
                cuda_set_error(cb, bk_fail(BRISK_ERR_BACKEND, "cuda %s scratch: %s", what, cudaGetErrorString(e)));
                return false;
            }
            cudaFree(sc->buf);
        } else if (sc->n_retired < (int)(sizeof sc->retired / sizeof sc->retired[0])) {
            sc->retired[sc->n_retired++] = sc->buf;
        } else {
            cuda_set_error(cb, bk_fail(BRISK_ERR_NOMEM, "cuda %s: scratch regrown too often", what));
            return false;
        }
        sc->buf = NULL;
        sc->cap = 0;
    }
    cudaError_t e = cudaMalloc(&sc->buf, need);
    if (e != cudaSuccess) {
        sc->buf = NULL;
        cudaGetLastError();
        cuda_set_error(cb, bk_fail(BRISK_ERR_NOMEM, "cuda %s: cannot allocate %.1f MiB of scratch: %s", what,
                                   need / 1048576.0, cudaGetErrorString(e)));
        return false;
    }
    sc->cap = need;
    return true;
}

void cuda_scratch_free(cuda_scratch *sc) {
    cudaFree(sc->buf);
    for (int i = 0; i < sc->n_retired; i++) cudaFree(sc->retired[i]);
    *sc = cuda_scratch{};
}

const void *cuda_upload(cuda_backend *cb, int slot, const void *host, size_t bytes) {
    if (bytes > cb->meta_cap[slot]) {
        cuda_set_error(cb, bk_fail(BRISK_ERR_RANGE, "cuda: batch metadata of %zu bytes exceeds the staging area (%zu)",
                                   bytes, cb->meta_cap[slot]));
        return NULL;
    }
    if (bytes == cb->meta_len[slot] && !memcmp(cb->meta_last[slot], host, bytes)) return cb->meta_dev[slot];
    memcpy(cb->meta_last[slot], host, bytes);
    cb->meta_len[slot] = bytes;
    if (cb->capturing) {
        /* A capture cannot record a copy from pageable memory: copy now, outside
         * the graph. Only constants (RoPE frequency factors) get here inside a
         * step, so the replays read the same bytes. */
        cudaError_t e = cudaMemcpy(cb->meta_dev[slot], cb->meta_last[slot], bytes, cudaMemcpyHostToDevice);
        if (e != cudaSuccess) {
            cb->meta_len[slot] = (size_t)-1;
            cuda_set_error(cb, bk_fail(BRISK_ERR_BACKEND, "cuda: metadata upload: %s", cudaGetErrorString(e)));
            return NULL;
        }
        return cb->meta_dev[slot];
    }
    /* From pageable memory: the driver has taken the bytes when the call returns,
     * so meta_last may change afterwards; the copy stays ordered on the stream. */
    cudaError_t e = cudaMemcpyAsync(cb->meta_dev[slot], cb->meta_last[slot], bytes, cudaMemcpyHostToDevice,
                                    cb->stream);
    if (e != cudaSuccess) {
        cb->meta_len[slot] = (size_t)-1;
        cuda_set_error(cb, bk_fail(BRISK_ERR_BACKEND, "cuda: metadata upload: %s", cudaGetErrorString(e)));
        return NULL;
    }
    return cb->meta_dev[slot];
}

static void cuda_free(bk_backend *be) {
    cuda_backend *cb = (cuda_backend *)be;
    if (!cb) return;
    cudaSetDevice(cb->device);
    if (cb->stream) cudaStreamSynchronize(cb->stream);
    for (int i = 0; i < META_COUNT; i++) {
        cudaFree(cb->meta_dev[i]);
        free(cb->meta_last[i]);
    }
    cudaFree(cb->att_part);
    cudaFree(cb->att_cnt);
    cudaFree(cb->route_cnt);
    cudaFree(cb->xq);
    cudaFree(cb->xds);
    cudaFree(cb->xh);
    cudaFree(cb->xmul);
    cuda_moe_free(cb);
    cuda_scratch_free(&cb->rot);
    cuda_scratch_free(&cb->fa_part);
    cuda_blas_free(cb);
    cuda_nccl_free(cb);
    cuda_graph_free(cb);
    for (int i = 0; i < cb->n_slab; i++) cudaFree(cb->slab[i]);
    free(cb->slab);
    free(cb->slab_used);
    free(cb->slab_cap);
    free(cb->pack);
    if (cb->stream) cudaStreamDestroy(cb->stream);
    free(cb);
}

static brisk_status cuda_alloc(bk_backend *be, size_t bytes, void **out) {
    cuda_backend *cb = (cuda_backend *)be;
    *out = NULL;
    CU_TRY(cudaSetDevice(cb->device));
    cudaError_t e = cudaMalloc(out, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* the failure is this status, not the next op's launch check (a caller may go on:
                             * brisk_maxsim_batch scores on the CPU when its scratch does not fit) */
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        *out = NULL;
        return bk_fail(BRISK_ERR_NOMEM, "cuda device %d: cannot allocate %.1f MiB (%.1f MiB free): %s",
                       cb->device, bytes / 1048576.0, fr / 1048576.0, cudaGetErrorString(e));
    }
    CU_TRY(cudaMemsetAsync(*out, 0, bytes, cb->stream));
    CU_TRY(cudaStreamSynchronize(cb->stream));
    return BRISK_OK;
}

static void cuda_release(bk_backend *be, void *p) {
    cuda_backend *cb = (cuda_backend *)be;
    cuda_forget_act_copies(cb); /* the next allocation may reuse the address for other activations */
    cudaStreamSynchronize(cb->stream);
    cudaFree(p);
}

#define WEIGHT_SLAB_BYTES ((size_t)512 << 20)

/* `bytes` from the pool of a weights backend (256-byte aligned), or NULL: first fit over the
 * slabs, else a new slab of WEIGHT_SLAB_BYTES or what the model still expects, whichever is
 * less (but at least `bytes`). */
static void *pool_alloc(cuda_backend *cb, size_t bytes) {
    size_t need = (bytes + 255) & ~(size_t)255;
    for (int i = 0; i < cb->n_slab; i++)
        if (cb->slab_cap[i] - cb->slab_used[i] >= need) {
            void *p = cb->slab[i] + cb->slab_used[i];
            cb->slab_used[i] += need;
            return p;
        }
    size_t cap = cb->pool_expect + ((size_t)4 << 20) < WEIGHT_SLAB_BYTES ? (size_t)cb->pool_expect + ((size_t)4 << 20)
                                                                         : WEIGHT_SLAB_BYTES;
    if (cap < need) cap = need;
    uint8_t **s = (uint8_t **)realloc(cb->slab, (size_t)(cb->n_slab + 1) * sizeof *s);
    if (s) cb->slab = s;
    size_t *u = (size_t *)realloc(cb->slab_used, (size_t)(cb->n_slab + 1) * sizeof *u);
    if (u) cb->slab_used = u;
    size_t *c = (size_t *)realloc(cb->slab_cap, (size_t)(cb->n_slab + 1) * sizeof *c);
    if (c) cb->slab_cap = c;
    void *d = NULL;
    if (!s || !u || !c || cudaMalloc(&d, cap) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    cb->slab[cb->n_slab] = (uint8_t *)d;
    cb->slab_used[cb->n_slab] = need;
    cb->slab_cap[cb->n_slab++] = cap;
    return d;
}

extern "C" void bk_cuda_weights_expect(bk_backend *be, uint64_t bytes) {
    if (bk_backend_is_cuda(be, NULL)) ((cuda_backend *)be)->pool_expect = bytes;
}

static brisk_status cuda_bind_weight(bk_backend *be, bk_weight *w) {
    cuda_backend *cb = (cuda_backend *)be;
    if (w->n_out > 1 && !cuda_type_supported(w->type))
        return bk_fail(BRISK_ERR_UNSUPPORTED, "no CUDA kernel for tensor %s of type %s", w->name,
                       quant_type_name(w->type));
    size_t bytes = (size_t)w->n_out * w->row_bytes;
    CU_TRY(cudaSetDevice(cb->device));
    void *d = NULL;
    /* BK_CUDA_WEIGHT_PAD spare bytes: the integer-dot loaders read aligned words up to 8 bytes
     * past a group (ld_a2) */
    cudaError_t e = cudaSuccess;
    bool pooled = cb->weights_only && !cb->plan.weight_pool_off;
    if (pooled) {
        d = pool_alloc(cb, bytes + BK_CUDA_WEIGHT_PAD);
        if (!d) e = cudaErrorMemoryAllocation;
        cb->pool_expect = cb->pool_expect > bytes ? cb->pool_expect - bytes : 0;
    } else {
        e = cudaMalloc(&d, bytes + BK_CUDA_WEIGHT_PAD);
    }
    if (e != cudaSuccess)
        return bk_fail(BRISK_ERR_NOMEM, "cuda device %d: cannot allocate %.1f MiB for %s: %s", cb->device,
                       bytes / 1048576.0, w->name, cudaGetErrorString(e));
    e = cudaMemset((uint8_t *)d + bytes, 0, BK_CUDA_WEIGHT_PAD);
    if (e == cudaSuccess) e = cudaMemcpy(d, w->host, bytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
        if (!pooled) cudaFree(d);
        return bk_fail(BRISK_ERR_BACKEND, "cuda: uploading %s: %s", w->name, cudaGetErrorString(e));
    }
    w->dev = d;
    w->dev_pooled = pooled;
    return BRISK_OK;
}

extern "C" void bk_cuda_release_weight(bk_weight *w) {
    if (w && w->dev) {
        if (!w->dev_pooled) cudaFree(w->dev); /* (a pooled one goes with its backend's slabs) */
        w->dev = NULL;
        w->dev_pooled = false;
    }
}

static brisk_status cuda_read(bk_backend *be, const void *src, void *dst, size_t bytes) {
    cuda_backend *cb = (cuda_backend *)be;
    cb->step_on = false;
    if (cb->err != BRISK_OK) {
        brisk_status s = cb->err;
        cb->err = BRISK_OK;
        return bk_fail(s, "%s", cb->errmsg);
    }
    CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cb->stream));
    CU_TRY(cudaStreamSynchronize(cb->stream));
    return BRISK_OK;
}

extern "C" brisk_status bk_cuda_write(bk_backend *be, void *dst, const void *src, size_t bytes) {
    cuda_backend *cb = (cuda_backend *)be;
    cuda_forget_act_copies(cb); /* dst may be the input the quantized activations stand for (partial offload) */
    CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cb->stream));
    CU_TRY(cudaStreamSynchronize(cb->stream));
    return BRISK_OK;
}

static void cuda_copy(bk_backend *be, void *dst, const void *src, size_t bytes) {
    cuda_backend *cb = (cuda_backend *)be;
    cuda_forget_act_copies(cb); /* dst may be the input the quantized activations stand for */
    CU_OP(cb, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cb->stream));
}

/* One 2-D copy (a single graph node) instead of a copy per row. */
static void cuda_copy_rows(bk_backend *be, void *dst, size_t dst_pitch, const void *src, size_t src_pitch,
                           size_t row_bytes, size_t n_rows) {
    cuda_backend *cb = (cuda_backend *)be;
    if (!n_rows || !row_bytes) return;
    cuda_forget_act_copies(cb);
    CU_OP(cb, cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, n_rows, cudaMemcpyDeviceToDevice, cb->stream));
}

static const bk_backend_ops cuda_ops = {
    /* name */ "cuda",
    /* free */ cuda_free,
    /* alloc */ cuda_alloc,
    /* release */ cuda_release,
    /* bind_weight */ cuda_bind_weight,
    /* get_rows */ cuda_get_rows,
    /* rms_norm */ cuda_rms_norm,
    /* matmul */ cuda_matmul,
    /* rope */ cuda_rope,
    /* attention */ cuda_attention,
    /* swiglu */ cuda_swiglu,
    /* add */ cuda_add,
    /* matmul_add */ cuda_matmul_add,
    /* matmul_swiglu */ cuda_matmul_swiglu,
    /* qk_norm_rope */ cuda_qk_norm_rope,
    /* read */ cuda_read,
    /* copy */ cuda_copy,
    /* step_begin */ cuda_step_begin,
    /* step_end */ cuda_step_end,
    /* moe_route */ cuda_moe_route,
    /* moe_ffn */ cuda_moe_ffn,
    /* ssm_conv */ cuda_ssm_conv,
    /* gated_delta */ cuda_gated_delta,
    /* sigmoid_mul */ cuda_sigmoid_mul,
    /* copy_rows */ cuda_copy_rows,
    /* all_reduce */ cuda_all_reduce,
    /* p2p */ cuda_p2p,
    /* gated_residual */ cuda_gated_residual,
    /* moe_router */ cuda_moe_router,
    /* moe_ids_local */ cuda_moe_ids_local,
    /* moe_ffn_shared */ cuda_moe_ffn_shared,
    /* qk_norm_rope_kv */ cuda_qk_norm_rope_kv,
    /* gated_delta_gate */ cuda_gated_delta_gate,
    /* attention_gated */ cuda_attention_gated,
    /* attention_rope */ cuda_attention_rope,
};

extern "C" int bk_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear: no driver or no device is not an error here */
        return 0;
    }
    return n;
}

extern "C" int bk_cuda_runtime_version(void) {
    int v = 0;
    if (cudaRuntimeGetVersion(&v) != cudaSuccess) cudaGetLastError(), v = 0;
    return v;
}

extern "C" int bk_cuda_driver_version(void) {
    int v = 0;
    if (cudaDriverGetVersion(&v) != cudaSuccess) cudaGetLastError(), v = 0;
    return v;
}

extern "C" brisk_status bk_cuda_device_name(int device, char *name, size_t cap, int *cc_major, int *cc_minor) {
    if (cap) name[0] = 0;
    *cc_major = *cc_minor = 0;
    cudaDeviceProp prop;
    CU_TRY(cudaGetDeviceProperties(&prop, device));
    if (cap) snprintf(name, cap, "%s", prop.name);
    *cc_major = prop.major;
    *cc_minor = prop.minor;
    return BRISK_OK;
}

extern "C" bool bk_backend_is_cuda(const bk_backend *be, int *device) {
    if (!be || be->ops != &cuda_ops) return false;
    if (device) *device = ((const cuda_backend *)be)->device;
    return true;
}

extern "C" brisk_status bk_cuda_mem_info(int device, size_t *free_bytes, size_t *total_bytes) {
    *free_bytes = *total_bytes = 0;
    CU_TRY(cudaSetDevice(device));
    CU_TRY(cudaMemGetInfo(free_bytes, total_bytes));
    return BRISK_OK;
}

extern "C" size_t bk_cuda_backend_overhead(void) {
    size_t meta = 3 * META_TOKENS_BYTES + META_FREQ_BYTES + META_ATT_BYTES;
    size_t step = ((size_t)1 << 20) * sizeof(int32_t);
    /* the quantized activations (xq_cap int8 values and a float2 per 32) */
    const size_t cap = (size_t)MMVQ_MAX_TOK << 18;
    size_t xq = cap + cap / 32 * sizeof(float2);
    xq += MMQH_XH_CAP * sizeof(__half) + MMQH_MAX_N * sizeof(float);
    return meta + ATT_PART_FLOATS * sizeof(float) + step + xq + cuda_blas_reserve();
}

extern "C" double bk_cuda_copy_bandwidth(int device) {
    if (device < 0 || device >= bk_cuda_device_count() || cudaSetDevice(device) != cudaSuccess) return 0.0;
    const size_t bytes = (size_t)1 << 30;
    void *a = NULL, *b = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    double gbs = 0.0;
    if (cudaMalloc(&a, bytes) == cudaSuccess && cudaMalloc(&b, bytes) == cudaSuccess &&
        cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess) {
        cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice); /* warm-up */
        const int reps = 10;
        cudaEventRecord(e0);
        for (int i = 0; i < reps; i++) cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice);
        cudaEventRecord(e1);
        float ms = 0.0f;
        if (cudaEventSynchronize(e1) == cudaSuccess && cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess && ms > 0)
            gbs = 2.0 * bytes * reps / (ms * 1e-3) / 1e9;
    }
    cudaGetLastError();
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    return gbs;
}

/* the table's defaults (cuda_plan.c) are these */
static_assert(CUDA_PLAN_MMQ_MIN == MMQ_MIN_TOK && CUDA_PLAN_CUBLAS_MIN == MMQ_MAX_TOK, "cuda_plan.h");
static_assert(CUDA_PLAN_MMQH_MIN == MMQH_MIN_TOK && CUDA_PLAN_MOE_MMQ_MIN == MOE_MMQ_MIN_ENT, "cuda_plan.h");

static brisk_status cuda_init(cuda_backend *cb, bool weights_only) {
    CU_TRY(cudaSetDevice(cb->device));
    CU_TRY(cudaDeviceGetAttribute(&cb->n_sm, cudaDevAttrMultiProcessorCount, cb->device));
    CU_TRY(cudaStreamCreateWithFlags(&cb->stream, cudaStreamNonBlocking));
    if (weights_only) return BRISK_OK;
    const size_t caps[META_COUNT] = {META_TOKENS_BYTES, META_TOKENS_BYTES, META_FREQ_BYTES, META_ATT_BYTES,
                                     META_TOKENS_BYTES};
    for (int i = 0; i < META_COUNT; i++) {
        cb->meta_cap[i] = caps[i];
        cb->meta_len[i] = (size_t)-1;
        CU_TRY(cudaMalloc(&cb->meta_dev[i], caps[i]));
        if (!(cb->meta_last[i] = malloc(caps[i]))) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    }
    if (!(cb->pack = malloc(META_ATT_BYTES))) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    cb->att_part_cap = ATT_PART_FLOATS;
    CU_TRY(cudaMalloc(&cb->att_part, ATT_PART_FLOATS * sizeof(float)));
    CU_TRY(cudaMalloc(&cb->att_cnt, ATT_CNT_N * sizeof(int)));
    CU_TRY(cudaMemset(cb->att_cnt, 0, ATT_CNT_N * sizeof(int)));
    CU_TRY(cudaMalloc(&cb->route_cnt, sizeof(int)));
    CU_TRY(cudaMemset(cb->route_cnt, 0, sizeof(int)));
    /* the plan (read in backend_new) in the backend's own fields and units; the devices before
     * sm_90 lack the bulk-copy engine and programmatic launches */
    const cuda_plan *p = &cb->plan;
    int cc_major = 0;
    CU_TRY(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, cb->device));
    cb->attn_fuse_off = p->attn_fuse_off;
    cb->attn_adapt_off = p->attn_adapt_off;
    cb->attn_gadapt_off = p->attn_gadapt_off;
    cb->attn_merge_off = p->attn_merge_off;
    cb->mma_off = p->mma_off;
    cb->attn_gqa_off = p->attn_gqa_off;
    cb->moe_q8_off = p->moe_q8_off;
    cb->mmvq_slices_off = p->mmvq_slices_off;
    cb->fa_off = p->fa_off;
    cb->attn_wgmma_off = p->attn_wgmma_off;
    cb->mmvq_multi_off = p->mmvq_multi_off;
    cb->mmvs_off = p->mmvs_off || cc_major < 9;
    cb->mmvf_on = !p->mmvf_off && cc_major >= 9;
    cb->mmvs_min_in = p->mmvs_min_in;
    cb->mmvs_wide_off = p->mmvs_wide_off;
    cb->router_pf_off = p->router_pf_off;
    cb->moe_comb_off = p->moe_comb_off;
    cb->dec_qtypes_off = p->dec_qtypes_off;
    cb->mmvs_pre = p->mmvs_pre;
    cb->attn_mma_min = p->attn_mma_off ? 0 : 1; /* from the first position (a threshold never won) */
    cb->attn_min_chunk = p->attn_min_chunk / 32 * 32;
    cb->mmvs_seg_bytes = p->mmvs_seg_bytes;
    cb->q6k_quad = !p->q6k_quad_off;
    cb->pdl_off = p->pdl_off || cc_major < 9;
    cb->gd_chunk_off = p->gd_chunk_off;
    cb->glu_off = p->glu_off;
    cb->qkrope_off = p->qkrope_off;
    cb->kvfuse_off = p->kvfuse_off;
    cb->normq_off = p->normq_off;
    cb->mmq_off = p->mmq_off;
    cb->mmq_min = p->mmq_min;
    cb->mmq_mt = p->mmq_mt;
    cb->mmq_max = p->mmq_max; /* unset: BRISK_CUDA_CUBLAS_MIN_TOK's, cuBLAS's first batch */
    cb->mmqh_off = p->mmqh_off || cc_major < 9;
    cb->mmqh_min = p->mmqh_min;
    cb->mmqh_max = p->mmqh_max < MMQH_MAX_N + 1 ? p->mmqh_max : MMQH_MAX_N + 1;
    cb->moe_mmq_off = p->moe_mmq_off;
    cb->moe_vec_off = p->moe_vec_off;
    cb->ablate = p->ablate;
    cb->attnq_off = p->attnq_off;
    cb->attn_rope_off = p->attn_rope_off;
    cb->attn_gate_off = p->attn_gate_off;
    cb->router_fuse_off = p->router_fuse_off;
    cb->router_join_off = p->router_join_off;
    cb->gd_conv_off = p->gd_conv_off;
    cb->gd_fuse_off = p->gd_fuse_off;
    cb->moe_shared_off = p->moe_shared_off;
    cb->route_warp_off = p->route_warp_off;
    cb->moe_mmq_min = p->moe_mmq_min;
    /* rows of up to 256K elements: a MoE chunk's h (cuda_moe.cu's MOE_MAX_ENT entries of n_ff) */
    cb->xq_cap = (size_t)MMVQ_MAX_TOK << 18;
    CU_TRY(cudaMalloc(&cb->xq, cb->xq_cap));
    CU_TRY(cudaMalloc(&cb->xds, cb->xq_cap / 32 * sizeof(float2)));
    cb->xh_cap = MMQH_XH_CAP;
    CU_TRY(cudaMalloc(&cb->xh, cb->xh_cap * sizeof(__half)));
    CU_TRY(cudaMalloc(&cb->xmul, MMQH_MAX_N * sizeof(float)));
    brisk_status s = cuda_blas_init(cb);
    if (s != BRISK_OK) return s;
    return cuda_graph_init(cb);
}

static brisk_status backend_new(int device, bool weights_only, bk_backend **out) {
    *out = NULL;
    int n = bk_cuda_device_count();
    if (device < 0 || device >= n)
        return bk_fail(BRISK_ERR_INVALID_ARG, "CUDA device %d does not exist (%d found)", device, n);
    cuda_backend *cb = (cuda_backend *)calloc(1, sizeof *cb);
    if (!cb) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    cb->base.ops = &cuda_ops;
    cb->device = device;
    cb->weights_only = weights_only;
    brisk_status s = cuda_plan_read_env(&cb->plan);
    if (s == BRISK_OK) s = cuda_init(cb, weights_only);
    if (s != BRISK_OK) {
        cuda_free(&cb->base);
        return s;
    }
    *out = &cb->base;
    return BRISK_OK;
}

extern "C" brisk_status bk_cuda_backend_new(int device, bk_backend **out) { return backend_new(device, false, out); }
extern "C" brisk_status bk_cuda_weights_backend_new(int device, bk_backend **out) {
    return backend_new(device, true, out);
}
