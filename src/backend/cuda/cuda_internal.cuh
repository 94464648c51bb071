/* cuda_internal.cuh — what the .cu files of the CUDA backend share: the
 * backend's context struct, the error macro, metadata staging, the block
 * decoders of every supported weight type, and each op family's launcher. */
#ifndef BK_CUDA_INTERNAL_CUH
#define BK_CUDA_INTERNAL_CUH
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_plan.h"
#include "base/status.h"
#include "quant/quant.h"
}
#include "backend/cuda/cuda_trace.cuh"

/* Metadata staging slots: each op family uploads into its own slot, so a
 * skipped (unchanged) upload never clobbers another op's live data. */
enum { META_IDS = 0, META_ROPE_POS, META_ROPE_FREQ, META_ATT, META_SEQ, META_COUNT };

/* The kernels a test may need to see launched (issue 37: a test of an optional path asserts that it
 * ran, not only that the results agree): counted on the host at each launch, so a captured step
 * counts once, at its capture. Names for bk_cuda_path_launches in cuda_backend.cu's cu_path_names. */
enum {
    CU_PATH_MMVF,         /* cuda_mmvf.cu: one token's products on float weights, streamed */
    CU_PATH_MMVS,         /* cuda_mmvs.cu: one token's products on int8 dots, streamed */
    CU_PATH_MMQH,         /* cuda_mmqh.cu: small batches' f16 products on streamed weights */
    CU_PATH_MMA,          /* cuda_mma.cu: batches' products on f16 tensor cores */
    CU_PATH_ATTN_MMA,     /* cuda_attn_mma.cu: decode attention on tensor cores */
    CU_PATH_ATTN_WARP,    /* cuda_attn_decode.cu: decode attention, a warp per row */
    CU_PATH_ATTN_PREFILL, /* cuda_attn_prefill.cu: prefill attention on tensor cores */
    CU_PATH_MMQ,          /* cuda_mmq.cu: batches' products on int8 tensor cores (dense; not the experts') */
    CU_PATH_MMVQ,         /* cuda_mmvq.cu: the integer-dot GEMV (decode, small batches, slices) */
    CU_PATH_COUNT
};
#define CU_COUNT(cb, path) ((cb)->path_n[path]++)

/* A device buffer grown on demand (cuda_scratch_reserve). A buffer outgrown while a captured graph
 * may point into it is retired, not freed, until the backend is. */
typedef struct cuda_scratch {
    void *buf;
    size_t cap; /* bytes */
    void *retired[8];
    int n_retired;
} cuda_scratch;

typedef struct cuda_backend {
    bk_backend base;
    int device;
    int n_sm;
    cuda_plan plan;             /* the environment's settings, read once at creation (cuda_plan.h); cuda_init
                                 * copies them into the fields below, which the BRISK_CUDA_* comments name */
    cudaStream_t stream;
    brisk_status err;           /* sticky: first failure inside a void op */
    char errmsg[256];
    void *meta_dev[META_COUNT]; /* device staging per slot */
    void *meta_last[META_COUNT];/* host copy of what the slot holds */
    size_t meta_len[META_COUNT];/* bytes valid in meta_last (SIZE_MAX: none) */
    size_t meta_cap[META_COUNT];/* bytes per slot */
    void *pack;                 /* host packing buffer, meta_cap[META_ATT] bytes */
    float *att_part;            /* split-K partials: (n_part, head_dim + 2) floats */
    size_t att_part_cap;        /* floats */

    /* Step mode (cuda_graph.cu): between step_begin and step_end the ops read
     * the step's inputs from one upload instead of staging their own. */
    bool step_on;
    bool capturing;             /* the stream is being captured into a graph */
    bool graphs_off;            /* BRISK_CUDA_DISABLE=graphs, or a capture failed once */
    const int32_t *st_ids, *st_pos, *st_slot, *st_off, *st_tabs; /* device, inside step_dev */
    const int32_t *st_seq;      /* the entries' sequences (recurrent state slots), inside step_dev */
    int st_np;                  /* attention length the step's kernels are shaped for */
    int32_t *step_host;         /* pinned staging of the step's inputs */
    int32_t *step_dev;          /* its device copy */
    size_t step_cap;            /* int32 per buffer */
    cudaEvent_t step_ev;        /* the last step upload: step_host is free once it completed */
    /* A token embedding kept in host memory (as llama.cpp keeps it: a 150K-row table read a row a
     * token): step_begin copies the step's rows, still quantized, into emb_host and uploads them
     * to emb_dev, which get_rows dequantizes (a graph node reading a fixed address). (emb_cap)
     * bytes each. */
    uint8_t *emb_host, *emb_dev;
    size_t emb_cap;
    const uint8_t *st_emb;      /* this step's rows in emb_dev, or NULL */
    struct cuda_graph_entry *graphs; /* captured passes, by shape */
    int n_graphs, cap_graphs, cur_key[5];
    long n_replays, n_captures; /* counters for tests and bench */
    long path_n[CU_PATH_COUNT]; /* launches of each optional kernel (CU_COUNT; bk_cuda_path_launches) */
    struct cuda_trace *trace;   /* BRISK_CUDA_TRACE in a trace build (cuda_trace.cu), else NULL */

    int8_t *xq;                 /* (xq_cap) activations quantized for cuda_mmvq.cu */
    float2 *xds;                /* (xq_cap / 32) their block scales and sums */
    size_t xq_cap;              /* int8 values */
    /* xq/xds already hold the quantization of xq_src (xq_n rows of xq_dim): the RMS norm that
     * wrote xq_src quantized its output on the way (cuda_rms_norm), so the product that reads it
     * next skips its quantize launch. Every other op clears it (CU_LAUNCHED, cuda_copy). */
    const float *xq_src;
    int xq_n;
    int64_t xq_dim;
    bool mma_off;               /* BRISK_CUDA_DISABLE=mma: prefill products on the SIMT tiled kernel */
    bool attn_gqa_off;          /* BRISK_CUDA_DISABLE=attn_gqa: one attention block per query head */
    bool moe_q8_off;            /* BRISK_CUDA_DISABLE=moe_q8: expert products on f32 activations only */
    bool glu_off;               /* BRISK_CUDA_DISABLE=glu: gate and up as two products, then swiglu (A/B) */
    bool qkrope_off;            /* BRISK_CUDA_DISABLE=qkrope: QK-norm and rope op by op (A/B) */
    bool kvfuse_off;            /* BRISK_CUDA_DISABLE=kv_fuse: the K/V cache written by the attention's own kernel, not in QK-norm + rope (A/B) */
    bool normq_off;             /* BRISK_CUDA_DISABLE=normq: the RMS norm does not quantize its output (A/B) */
    bool mmvq_slices_off;       /* BRISK_CUDA_DISABLE=mmvq_slices: 17..MMVQ_SLICE_MAX tokens on the prefill path */
    bool mmvq_multi_off;        /* BRISK_CUDA_DISABLE=mmvq_multi: one launch per matrix of a call (A/B) */
    bool mmvs_off;              /* BRISK_CUDA_DISABLE=mmvs: one token's products through cuda_mmvq's kernel, not cuda_mmvs's (A/B) */
    bool mmvf_on;               /* one token's products on F16 / BF16 / F32 weights streamed (cuda_mmvf.cu; sm_90; BRISK_CUDA_DISABLE=mmvf: off) */
    int64_t mmvs_min_in;        /* BRISK_CUDA_MMVS_MIN_IN (default 2048): narrower rows through cuda_mmvq's kernel */
    bool mmvs_wide_off;         /* BRISK_CUDA_DISABLE=mmvs_wide: rows wider than 8,192 columns through cuda_mmvq's kernel (A/B) */
    bool router_pf_off;         /* BRISK_CUDA_DISABLE=router_pf: the fused router's rows not asked into the L2 before its wait (A/B) */
    bool moe_comb_off;          /* BRISK_CUDA_DISABLE=moe_comb: one token's MoE down products, then the combine (A/B) */
    bool dec_qtypes_off;        /* BRISK_CUDA_DISABLE=dec_qtypes: Q5_K, IQ4_XS, IQ4_NL decode products on the float path (A/B) */
    int mmvs_seg_bytes;         /* BRISK_CUDA_MMVS_SEG: rows shared by warps (cuda_mmvs.cu's mmvs_plan): -1 (default) where 16 warps need it, N: rows over N bytes, 0: never */
    bool attn_fuse_off;         /* BRISK_CUDA_DISABLE=attn_fuse: decode attention merges its splits in a kernel of its own (A/B) */
    int mmvs_pre;               /* BRISK_CUDA_MMVS_PRE=N: cuda_mmvs's warps ask for N stages before pdl_wait on rows of 4,096 columns and more, the rest after the activations' loads (default 1; 0: the whole ring before) (A/B) */
    int attn_mma_min;           /* decode attention on tensor cores (cuda_attn_mma.cu) from this many positions: 1, or 0 (never) with BRISK_CUDA_DISABLE=attn_mma */
    int attn_min_chunk;         /* BRISK_CUDA_ATTN_MINCHUNK=N: a decode split holds at least N positions (multiple of 32; default 128; 0: the splits the bucket shapes), so a short context merges fewer splits (A/B) */
    bool attn_gadapt_off;       /* BRISK_CUDA_DISABLE=attn_gadapt: a decode attention block serves a whole GQA group even when the blocks are fewer than the SMs (A/B) */
    bool attn_merge_off;        /* BRISK_CUDA_DISABLE=attn_merge: a decode attention's few splits merged head by head (A/B) */
    bool attn_adapt_off;        /* BRISK_CUDA_DISABLE=attn_adapt: every split of a decode launch takes part, however short the context (A/B) */
    int *route_cnt;             /* the fused MoE router's finished-block counter (cuda_moe.cu), zero between launches */
    unsigned ablate;            /* BRISK_CUDA_ABLATE=bits: ops that launch nothing (a profile of the decode step by omission; wrong results, timing only): CU_ABLATE */
    int *att_cnt;               /* (ATT_CNT_N) per (token, head group) split counters of the decode attention, zero between launches */
    int q6k_quad;               /* Q6_K decode products (not the LM head) in quads of groups; 0 with BRISK_CUDA_DISABLE=q6k_quad */
    bool pdl_off;               /* BRISK_CUDA_DISABLE=pdl or before sm_90: decode kernels launched the ordinary way (cuda_pdl.cuh) */
    bool gd_chunk_off;          /* BRISK_CUDA_DISABLE=gd_chunk: prefill delta rule and short conv token by token (A/B) */

    /* int8 tensor-core products (cuda_mmq.cu) for batches of mmq_min <= n < mmq_max tokens on the
     * integer-dot types; below, cuda_mmvq.cu; from mmq_max, cuda_blas.cu / cuda_mma.cu */
    bool mmq_off;               /* BRISK_CUDA_DISABLE=mmq */
    int mmq_min;                /* BRISK_CUDA_MMQ_MIN (default MMQ_MIN_TOK) */
    int mmq_mt;                 /* BRISK_CUDA_MMQ_MT: m16 tiles per mmq warp from 16 tokens (1 or 2, default 2) */
    int mmq_max;                /* BRISK_CUDA_MMQ_MAX (default: BRISK_CUDA_CUBLAS_MIN_TOK, else MMQ_MAX_TOK) */
    bool moe_mmq_off;           /* BRISK_CUDA_DISABLE=moe_mmq: expert products on the GEMV-style kernels only */
    /* f16 tensor-core products on streamed weights (cuda_mmqh.cu) for batches of mmqh_min <= n <
     * mmqh_max tokens on Q4_K, Q6_K and Q8_0; they come before mmq and mmvq */
    bool mmqh_off;              /* BRISK_CUDA_DISABLE=mmqh (or before sm_90) */
    int mmqh_min, mmqh_max;     /* BRISK_CUDA_MMQH_MIN (default MMQH_MIN_TOK), BRISK_CUDA_MMQH_MAX (default mmq_max) */
    __half *xh;                 /* (xh_cap) activations in f16, in the kernel's fragment order */
    float *xmul;                /* (MMQH_MAX_N) per token: the power of two that undoes their scaling */
    size_t xh_cap;              /* values */
    /* xh already holds the conversion of xh_src (xh_n rows of xh_dim): the RMS norm that wrote it
     * converted its output on the way; cleared wherever xq_src is */
    const float *xh_src;
    int xh_n;
    int64_t xh_dim;
    bool moe_vec_off;           /* BRISK_CUDA_DISABLE=moe_vec: one token's experts through the grouped kernels (A/B) */
    /* A weights backend's pool (bk_cuda_weights_backend_new): slabs the weights are carved from,
     * as llama.cpp puts a model in one buffer, instead of a cudaMalloc each (rounded up to the
     * allocator's 2 MiB pages: ~1 MiB lost per tensor, hundreds of tensors). */
    bool weights_only;
    uint8_t **slab;
    size_t *slab_used, *slab_cap;
    int n_slab;
    uint64_t pool_expect;       /* bytes the model still expects to bind (bk_cuda_weights_expect) */
    bool attnq_off;             /* BRISK_CUDA_DISABLE=attnq: the decode attention does not quantize its output (A/B) */
    /* bk_cuda_expert_count_arm: the routing counters the next one-token MoE layer adds into in its
     * gate·up launch (NULL: none armed; taken: it did), instead of a count kernel of their own */
    const int32_t *xc_cached;
    uint32_t *xc_counts;
    bool xc_taken;
    bool gd_conv_off;           /* BRISK_CUDA_DISABLE=gd_conv: the short conv before the fused rule in a launch of its own (A/B) */
    bool gd_fuse_off;           /* BRISK_CUDA_DISABLE=gd_fuse: the delta rule, the heads' norm and the gate in three launches (A/B) */
    bool route_warp_off;        /* BRISK_CUDA_DISABLE=route_warp: the router's block-per-token kernel only (A/B) */
    bool attn_rope_off;         /* BRISK_CUDA_DISABLE=attn_rope: one token's QK-norm, rope and cache write in a launch of their own (A/B) */
    bool attn_gate_off;         /* BRISK_CUDA_DISABLE=attn_gate: the gated attention's output gate in a launch of its own (A/B) */
    bool router_fuse_off;       /* BRISK_CUDA_DISABLE=router_fuse: the router's product and routing as two launches (A/B) */
    bool router_join_off;       /* BRISK_CUDA_DISABLE=router_join: the shared expert's gate in a launch of its own (A/B) */
    bool moe_shared_off;        /* BRISK_CUDA_DISABLE=moe_shared: one token's MoE layer end (the shared expert, the
                                   residual) in launches of their own (A/B) */
    int moe_mmq_min;            /* BRISK_CUDA_MOE_MMQ_MIN: (token, expert) entries from which cuda_moe.cu uses mmq */

    /* MoE scratch (cuda_moe.cu): sized at the first moe_ffn call for the
     * model's dims and a whole chunk of entries, so later calls never grow it. */
    cuda_scratch moe;
    cuda_scratch rot;           /* the q4_0h cache's rotated q and k rows (cuda_attention.cu) */
    cuda_scratch fa_part;       /* the prefill attention's split partials (cuda_attn_prefill.cu) */

    struct cuda_blas *blas;     /* cuda_blas.cu: cuBLAS for prefill products; NULL with BRISK_CUDA_DISABLE=cublas */
    bool fa_off;                /* BRISK_CUDA_DISABLE=fa: prefill attention on the SIMT tile kernel (A/B) */
    bool attn_wgmma_off;        /* BRISK_CUDA_DISABLE=attn_wgmma: prefill attention on mma.sync, not wgmma */
    struct cuda_nccl *nccl;     /* cuda_nccl.cu: this backend's communicator (tensor parallelism), or NULL */
} cuda_backend;

#define MMVQ_MAX_TOK 16         /* tokens per integer-dot matrix product (batched decode) */
#define ATT_CNT_N 16384         /* decode attention split counters: (tokens x head groups) of one launch */
#define MMVQ_MULTI_MAX 8        /* matrices of one matmul call cuda_mmvq_multi looks at (it launches runs of up to 3) */
/* Batches up to this size run the integer-dot product in MMVQ_MAX_TOK-token slices (the weights
 * are read once per slice): the tensor-core kernel's 128x64 tiles leave most SMs idle there. */
#define MMVQ_SLICE_MAX 64
#define MMQH_MIN_TOK 17         /* default smallest batch of cuda_mmqh.cu (H200, session 13: qwen3-8b decoding
                                 * 16 sequences level with cuda_mmq.cu, 32 sequences 1.44x; 2 and 8 behind) */
#define MMQH_MAX_N 64           /* its largest batch (cb->xmul) */
#define MMQH_XH_CAP ((size_t)MMQH_MAX_N << 15) /* f16 activations: 64 rows of 32,768 (4 MiB) */
#define MMQ_MIN_TOK 8           /* default smallest batch of the tensor-core integer product (cuda_mmq.cu; H200, session 5:
                                 * 4 sequences decode at 545 tok/s on it, 776 on the mmvq slices) */
#define MMQ_MAX_TOK 48          /* default first batch it leaves to cuBLAS (cuda_blas.cu's BLAS_MIN_TOK) */
#define MOE_MMQ_MIN_ENT 64      /* default smallest (token, expert) entry count of grouped mmq expert products */

/* KV cache element types (brisk_kv_type): f32, f16, or blocks of 32 values with an f16 scale
 * first, ggml's q8_0 (34 bytes: 32 int8) and q4_0 (18 bytes: 16 bytes of nibbles, value i < 16 in
 * the low nibble of byte i, value i >= 16 in the high nibble of byte i - 16, less 8). Cache
 * positions are counted in elements for all four: element e of a quantized cache lives in block
 * e / 32. */
enum { KT_F32 = 0, KT_F16 = 1, KT_Q8_0 = 2, KT_Q4_0 = 3 };
/* Bytes of a block of a quantized type; 0: elements one by one. */
__host__ __device__ constexpr int kt_block_bytes(int kt) { return kt == KT_Q8_0 ? 34 : kt == KT_Q4_0 ? 18 : 0; }

/* Stores value a as cache element e. For the quantized types the 32 lanes of a warp must store the
 * 32 elements of one block together (e % 32 == lane): they share its scale, and each lane rounds
 * its own value as ggml's reference quantizers do, so the bytes are those of the CPU's
 * quant_quantize (kv_write_kernel, qk_norm_rope's fused write, the decode kernels' fused rope).
 * q8_0: d = amax / 127, q = round(a * (1 / d)). q4_0: d = -max / 8 with max the value of largest
 * magnitude (the first of equals: the lowest lane), q = min(15, trunc(a * (1 / d) + 8.5)); lanes
 * l and l + 16 share byte l, which lane l writes. */
template <int KT> __device__ __forceinline__ void kv_store(void *c, size_t e, float a) {
    const unsigned full = 0xffffffffu;
    if (KT == KT_Q8_0) {
        float m = fabsf(a);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(full, m, o));
        float d = m / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        uint8_t *b = (uint8_t *)c + e / 32 * 34;
        b[2 + e % 32] = (uint8_t)(int8_t)roundf(a * id);
        if (e % 32 == 0) *(__half *)b = __float2half_rn(d);
    } else if (KT == KT_Q4_0) {
        float m = fabsf(a);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(full, m, o));
        /* (all zero: the reference's max stays +0, whatever the signs of the zeros) */
        const unsigned top = __ballot_sync(full, m > 0.0f && fabsf(a) == m);
        const float mx = __shfl_sync(full, a, top ? __ffs(top) - 1 : 0);
        const float d = (top ? mx : 0.0f) / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        /* the product rounded before the sum, as the CPU's (no fused multiply-add) */
        const int q = min(15, (int)__fadd_rn(__fmul_rn(a, id), 8.5f));
        const int hi = __shfl_down_sync(full, q, 16);
        uint8_t *b = (uint8_t *)c + e / 32 * 18;
        if (e % 32 < 16) b[2 + e % 32] = (uint8_t)(q | hi << 4);
        if (e % 32 == 0) *(__half *)b = __float2half_rn(d);
    } else if (KT == KT_F16) {
        ((__half *)c)[e] = __float2half_rn(a);
    } else {
        ((float *)c)[e] = a;
    }
}

/* One check macro: a failing CUDA call becomes a status with file, line and the driver's text. */
#define CU_TRY(call)                                                                       \
    do {                                                                                   \
        cudaError_t cu_e_ = (call);                                                        \
        if (cu_e_ != cudaSuccess)                                                          \
            return bk_fail(BRISK_ERR_BACKEND, "%s:%d: %s: %s", __FILE__, __LINE__, #call,   \
                           cudaGetErrorString(cu_e_));                                     \
    } while (0)

/* For void ops: records the first error (sticky) and returns from the op. */
void cuda_set_error(cuda_backend *cb, brisk_status s);
/* Makes sc hold `need` bytes (what: the error message's name for it). Inside a capture the
 * allocation is made anyway (relaxed mode allows it; it is not part of the graph, and the buffer
 * outlives every graph that uses it). An outgrown buffer is freed when no graph can point into it,
 * else retired until cuda_scratch_free. False with the error recorded. */
bool cuda_scratch_reserve(cuda_backend *cb, cuda_scratch *sc, size_t need, const char *what);
void cuda_scratch_free(cuda_scratch *sc);
#define CU_OP(cb, call)                                                                    \
    do {                                                                                   \
        cudaError_t cu_e_ = (call);                                                        \
        if (cu_e_ != cudaSuccess) {                                                        \
            cuda_set_error(cb, bk_fail(BRISK_ERR_BACKEND, "%s:%d: %s: %s", __FILE__,        \
                                       __LINE__, #call, cudaGetErrorString(cu_e_)));       \
            return;                                                                        \
        }                                                                                  \
    } while (0)
/* BRISK_CUDA_ABLATE: with bit b set the op returns at once (for ops that return a value: ret). Timing
 * a decode step with an op class left out tells what that class costs inside the graph, where the
 * programmatic launches overlap kernels and ncu's serialised per-kernel times overstate it. */
enum { ABL_NORM = 1, ABL_ROPE = 2, ABL_ATTN = 4, ABL_MATMUL = 8, ABL_ROUTER = 16, ABL_MOE = 32, ABL_ADD = 64,
       /* single launches inside ops: the one-token MoE's quantization of h, its combine, its gate/up, its down */
       ABL_MOE_HQ = 128, ABL_MOE_COMB = 256, ABL_MOE_GU = 512, ABL_MOE_DOWN = 1024,
       /* the Gated DeltaNet's short convolution and recurrent update */
       ABL_SSM = 2048 };
#define CU_ABLATE(cb, bit, ...)                                                                         \
    do {                                                                                                \
        if ((cb)->ablate & (bit)) return __VA_ARGS__;                                                   \
    } while (0)
/* The activations' converted copies (xq: int8 for the integer dots, xh: f16 for cuda_mmqh.cu) no
 * longer stand for any input: an op may have written the memory they were made from. */
static inline void cuda_forget_act_copies(cuda_backend *cb) {
    cb->xq_src = cb->xh_src = NULL;
}
/* The end of every op that launched work: checks the launch and forgets which input the
 * quantized activations stand for (the op may have written it). */
#define CU_LAUNCHED(cb)                \
    do {                               \
        cuda_forget_act_copies(cb);    \
        CU_OP(cb, cudaGetLastError()); \
    } while (0)

/* Copies bytes of host data into staging slot `slot` (skipped when equal to
 * the last upload); returns the device copy, or NULL after recording an error. */
const void *cuda_upload(cuda_backend *cb, int slot, const void *host, size_t bytes);

/* ---- weight decoding: 8 consecutive elements starting at element e (e % 8 == 0) ---- */
__device__ __forceinline__ float bk_h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ float bk_bf2f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
__device__ __forceinline__ uint16_t ld16(const uint8_t *p) { return *(const uint16_t *)p; }
/* 8 bytes from a 2-byte-aligned address */
__device__ __forceinline__ uint2 ld8_a2(const uint8_t *p) {
    const uint16_t *q = (const uint16_t *)p;
    return make_uint2(q[0] | ((uint32_t)q[1] << 16), q[2] | ((uint32_t)q[3] << 16));
}

/* Cache elements [e, e + 8) of a quantized KV cache (KT_Q8_0, KT_Q4_0; e % 8 == 0: one block), as
 * loaded: x and y the 8 bytes that hold them, z the block's f16 scale, w the shift of q4_0's
 * nibbles (0: the block's first 16 values, low nibbles; 4: its last 16). Blocks are 2-byte aligned
 * only. Split from kvq_cvt8 so that a lane issues all its loads before it waits on one. */
template <int KT> __device__ __forceinline__ uint4 kvq_load8(const void *base, int64_t e) {
    const uint8_t *b = (const uint8_t *)base + (e >> 5) * kt_block_bytes(KT); /* (e >= 0) */
    const int j = (int)(e & 31);
    const uint2 q = ld8_a2(b + 2 + (KT == KT_Q4_0 ? j % 16 : j));
    return make_uint4(q.x, q.y, ld16(b), KT == KT_Q4_0 && j >= 16 ? 4 : 0);
}

/* kvq_load8's 8 values as floats: d * q, the products the CPU's quant_dequantize makes. */
template <int KT> __device__ __forceinline__ void kvq_cvt8(const uint4 &r, float v[8]) {
    const float d = bk_h2f((uint16_t)r.z);
    const uint32_t w[2] = {r.x, r.y};
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int q = KT == KT_Q4_0 ? (int)((w[i / 4] >> (8 * (i % 4) + r.w)) & 15) - 8
                                    : (int)(int8_t)(w[i / 4] >> (8 * (i % 4)));
        v[i] = d * (float)q;
    }
}

/* Two codes of a word (bytes picked by sel into the low bytes of two halves: 0x5140 bytes 0, 1;
 * 0x5342 bytes 2, 3; with the codes of two rows interleaved, 0x4140 / 0x4342), made unsigned (q8_0:
 * q + 128; q4_0: the nibble), times d: f16 1024 + u, the offset off exactly, one rounded product:
 * d * q rounded to f16. The decode (cuda_attn_mma.cu) and prefill (kvq_h8) attention read the
 * quantized caches through it, so both see the same f16 values. */
template <int KT> __device__ __forceinline__ uint32_t kvq_h2(uint32_t codes, uint32_t sel, __half2 d) {
    const uint32_t h = __byte_perm(codes, 0x64646464u, sel);
    const __half2 off = __half2half2(__ushort_as_half(KT == KT_Q4_0 ? 0x6408 : 0x6480)); /* 1032, 1152 */
    const __half2 x = __hmul2(__hsub2(*(const __half2 *)&h, off), d);
    return *(const uint32_t *)&x;
}

/* kvq_load8's 8 values as 8 f16 (a uint4), d * q rounded once to f16: the same bits as kvq_cvt8's
 * f32 products rounded (d * q is exact in f32), in a few half2 instructions instead of 8 conversions
 * and products: each code u, made unsigned (q8_0: q + 128, the sign bit flipped; q4_0: the nibble,
 * q + 8), becomes the mantissa under f16 1024's exponent (0x6400 | u = 1024 + u, exact); the offset
 * (1152, 1032) comes off exactly; then one rounded product by d. */
template <int KT> __device__ __forceinline__ uint4 kvq_h8(const uint4 &r) {
    uint32_t w0, w1; /* the 8 codes as unsigned bytes, in order */
    if constexpr (KT == KT_Q4_0) {
        w0 = (r.x >> r.w) & 0x0f0f0f0fu;
        w1 = (r.y >> r.w) & 0x0f0f0f0fu;
    } else {
        w0 = r.x ^ 0x80808080u;
        w1 = r.y ^ 0x80808080u;
    }
    const __half2 d = __half2half2(__ushort_as_half((uint16_t)r.z));
    return make_uint4(kvq_h2<KT>(w0, 0x5140, d), kvq_h2<KT>(w0, 0x5342, d), kvq_h2<KT>(w1, 0x5140, d),
                      kvq_h2<KT>(w1, 0x5342, d));
}

__constant__ static const int8_t bk_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                  1,    13,   25,  38,  53,  69,  89,  113};

/* the codebook, ternary and FP4 types (deq8 below calls iq_deq8) */
#include "backend/cuda/cuda_iq.cuh"

/* Scale and min of Q4_K/Q5_K sub-block j (0..7). */
__device__ __forceinline__ void k4_scale_min(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Decodes elements [e, e+8) of a row of type T. For float types `row` must be
 * 16-byte aligned (callers check n_in % 8 == 0; see deq1 otherwise). */
template <int T> __device__ __forceinline__ void deq8(const uint8_t *row, int64_t e, float v[8]) {
    if (T == QT_F32) {
        const float4 *p = (const float4 *)(row + e * 4);
        float4 a = p[0], b = p[1];
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
        v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    } else if (T == QT_F16 || T == QT_BF16) {
        uint4 u = *(const uint4 *)(row + e * 2);
        uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            uint16_t lo = (uint16_t)(w[i] & 0xFFFF), hi = (uint16_t)(w[i] >> 16);
            v[2 * i] = T == QT_F16 ? bk_h2f(lo) : bk_bf2f(lo);
            v[2 * i + 1] = T == QT_F16 ? bk_h2f(hi) : bk_bf2f(hi);
        }
    } else if (T == QT_Q8_0) {
        const uint8_t *b = row + (e / 32) * 34;
        float d = bk_h2f(ld16(b));
        uint2 q = ld8_a2(b + 2 + (e % 32));
        uint32_t w[2] = {q.x, q.y};
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = (float)(int8_t)(w[i / 4] >> (8 * (i % 4))) * d;
    } else if (T == QT_Q4_0 || T == QT_Q4_1 || T == QT_IQ4_NL) {
        const int bs = T == QT_Q4_1 ? 20 : 18;
        const uint8_t *b = row + (e / 32) * bs;
        float d = bk_h2f(ld16(b)), m = T == QT_Q4_1 ? bk_h2f(ld16(b + 2)) : 0.0f;
        int j = (int)(e % 32), sh = j >= 16 ? 4 : 0;
        uint2 q = ld8_a2(b + bs - 16 + (j % 16));
        uint32_t w[2] = {q.x, q.y};
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int n = (w[i / 4] >> (8 * (i % 4) + sh)) & 15;
            v[i] = T == QT_Q4_0 ? (n - 8) * d : T == QT_Q4_1 ? n * d + m : bk_iq4nl[n] * d;
        }
    } else if (T == QT_Q5_0 || T == QT_Q5_1) {
        const int bs = T == QT_Q5_1 ? 24 : 22;
        const uint8_t *b = row + (e / 32) * bs;
        float d = bk_h2f(ld16(b)), m = T == QT_Q5_1 ? bk_h2f(ld16(b + 2)) : 0.0f;
        const uint8_t *qhp = b + (T == QT_Q5_1 ? 4 : 2);
        uint32_t qh = ld16(qhp) | ((uint32_t)ld16(qhp + 2) << 16);
        int j = (int)(e % 32), sh = j >= 16 ? 4 : 0;
        uint2 q = ld8_a2(b + bs - 16 + (j % 16));
        uint32_t w[2] = {q.x, q.y};
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int n = ((w[i / 4] >> (8 * (i % 4) + sh)) & 15) | (((qh >> (j + i)) & 1) << 4);
            v[i] = T == QT_Q5_0 ? (n - 16) * d : n * d + m;
        }
    } else if (T == QT_Q4_K || T == QT_Q5_K) {
        const int bs = T == QT_Q5_K ? 176 : 144;
        const uint8_t *b = row + (e / 256) * bs;
        int ei = (int)(e % 256), c = ei / 64, half = (ei % 64) / 32, l = ei % 32;
        uint32_t dd = *(const uint32_t *)b;
        float d = bk_h2f((uint16_t)dd), dmin = bk_h2f((uint16_t)(dd >> 16));
        int sc, m;
        k4_scale_min(2 * c + half, b + 4, &sc, &m);
        float d1 = d * sc, m1 = dmin * m;
        const uint8_t *qs = b + (T == QT_Q5_K ? 48 : 16) + 32 * c + l;
        uint2 q = *(const uint2 *)qs;
        uint32_t w[2] = {q.x, q.y}, hw[2] = {0, 0};
        if (T == QT_Q5_K) {
            uint2 h = *(const uint2 *)(b + 16 + l);
            hw[0] = h.x;
            hw[1] = h.y;
        }
        int sh = half * 4, hb = 2 * c + half;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int n = (w[i / 4] >> (8 * (i % 4) + sh)) & 15;
            if (T == QT_Q5_K) n += ((hw[i / 4] >> (8 * (i % 4) + hb)) & 1) << 4;
            v[i] = d1 * n - m1;
        }
    } else if (T == QT_Q6_K) {
        const uint8_t *b = row + (e / 256) * 210;
        int ei = (int)(e % 256), n = ei / 128, r = ei % 128, qu = r / 32, l = r % 32;
        float d = bk_h2f(ld16(b + 208));
        float ds = d * (float)(int8_t)b[192 + 8 * n + l / 16 + 2 * qu];
        uint2 ql = ld8_a2(b + 64 * n + l + (qu & 1) * 32);
        uint2 qh = ld8_a2(b + 128 + 32 * n + l);
        uint32_t wl[2] = {ql.x, ql.y}, wh[2] = {qh.x, qh.y};
        int shl = qu >= 2 ? 4 : 0, shh = 2 * qu;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int q = ((wl[i / 4] >> (8 * (i % 4) + shl)) & 15) | (((wh[i / 4] >> (8 * (i % 4) + shh)) & 3) << 4);
            v[i] = ds * (q - 32);
        }
    } else if (T == QT_IQ4_XS) {
        const uint8_t *b = row + (e / 256) * 136;
        int ei = (int)(e % 256), ib = ei / 32, j = ei % 32;
        float d = bk_h2f(ld16(b));
        int sh_h = ld16(b + 2);
        int ls = ((b[4 + ib / 2] >> 4 * (ib % 2)) & 15) | (((sh_h >> 2 * ib) & 3) << 4);
        float dl = d * (ls - 32);
        uint2 q = *(const uint2 *)(b + 8 + 16 * ib + (j % 16));
        uint32_t w[2] = {q.x, q.y};
        int sh = j >= 16 ? 4 : 0;
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = dl * bk_iq4nl[(w[i / 4] >> (8 * (i % 4) + sh)) & 15];
    } else if constexpr (iq_type(T)) {
        iq_deq8<T>(row, e, v);
    }
}

/* One element of a float-type row (any alignment). */
__device__ __forceinline__ float deq1(int type, const uint8_t *row, int64_t e) {
    if (type == QT_F32) return ((const float *)row)[e];
    uint16_t h = ((const uint16_t *)row)[e];
    return type == QT_F16 ? bk_h2f(h) : bk_bf2f(h);
}

/* The end of a warp-per-rows product: sums each of the R rows x NT tokens
 * over the warp and lane 0 writes y[t, r0 + i] (+ bias), or adds it to y
 * when accum is set, for rows < n_out and tokens < n. */
template <int R, int NT>
__device__ __forceinline__ void warp_store_rows(float (&acc)[R][NT], int lane, int64_t r0, int64_t n_out, int n,
                                                const float *bias, float *y, int accum) {
#pragma unroll
    for (int i = 0; i < R; i++) {
        if (r0 + i >= n_out) break;
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t >= n) break;
            float s = acc[i][t];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
            float *o = y + (int64_t)t * n_out + r0 + i;
            if (lane == 0) *o = (accum ? *o : 0.0f) + s + (bias ? bias[r0 + i] : 0.0f);
        }
    }
}

/* One weight row dotted with n <= NT activation rows x (n, n_in) by a block of WARPS warps on the
 * float path (deq8; n_in % 8 == 0): the warps split K, a lane's steps unrolled so their loads go out
 * together; after the call (it ends in a barrier) part[w][t] holds warp w's sum for token t, and
 * block_row_sum adds them in warp order. The split-K GEMV (cuda_gemv.cu) and the fused MoE router
 * (cuda_moe.cu) share it, so their logits are the same. */
#define GEMV_SK_WARPS 4
template <int T, int NT, int WARPS>
__device__ __forceinline__ void block_row_dot(const uint8_t *row, const float *x, int64_t n_in, int n,
                                              float (&part)[WARPS][NT]) {
    const int lane = threadIdx.x % 32, wp = threadIdx.x / 32;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = 0.0f;
    const int64_t steps = n_in / 8;
#pragma unroll 4
    for (int64_t p = wp * 32 + lane; p < steps; p += WARPS * 32) {
        float v[8];
        deq8<T>(row, p * 8, v);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t < n) {
                const float4 *xp = (const float4 *)(x + t * n_in + p * 8);
                float4 a = __ldg(xp), b = __ldg(xp + 1);
                acc[t] += v[0] * a.x + v[1] * a.y + v[2] * a.z + v[3] * a.w + v[4] * b.x + v[5] * b.y + v[6] * b.z +
                          v[7] * b.w;
            }
        }
    }
#pragma unroll
    for (int t = 0; t < NT; t++) {
        if (t >= n) break;
        float s = acc[t];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0) part[wp][t] = s;
    }
    __syncthreads();
}

template <int NT, int WARPS> __device__ __forceinline__ float block_row_sum(const float (&part)[WARPS][NT], int t) {
    float s = part[0][t];
#pragma unroll
    for (int w = 1; w < WARPS; w++) s += part[w][t];
    return s;
}

/* The sum of s over the warp's lanes, in double (the norms' sums of squares). */
__device__ __forceinline__ double warp_sum_d(double s) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    return s;
}

/* silu(g) = g sigmoid(g), rounded as every SwiGLU and short conv of the backend rounds it
 * (swiglu_kernel's g / (1 + exp(-g)), then times the up value), and sigmoid(g) as every gate
 * rounds it (sigmoid_mul, gated_residual, the shared expert's gate, the delta rule's beta): a
 * fused form gives the unfused op's bits because both call the same one. */
__device__ __forceinline__ float silu_f(float g) { return g / (1.0f + expf(-g)); }
__device__ __forceinline__ float sigmoid_f(float g) { return 1.0f / (1.0f + expf(-g)); }

/* The RMS norm's scale 1 / sqrt(mean(x^2) + eps) of n values read by one warp (lane l: values l,
 * l + 32, ...), the squares summed in double: rms_norm_warp_kernel's arithmetic, which the norms
 * fused into other kernels repeat to the bit. */
__device__ __forceinline__ float warp_rms_scale(const float *x, int n, float eps) {
    double s = 0;
    for (int i = threadIdx.x % 32; i < n; i += 32) s += (double)(x[i] * x[i]);
    s = warp_sum_d(s);
    return 1.0f / sqrtf((float)(s / n) + eps);
}

/* The 32 lanes of a warp hold one group of 32 consecutive activations (lane l: element i, the
 * group's first at i - l): lane l stores its int8 quant to xq[i] and lane 0 the group's (d, d * sum
 * of the quants) to xds[i / 32], the int8 blocks the integer-dot products read (q8_1 as ggml's).
 * Every kernel that quantizes activations on the way (the norm, the decode attention's output,
 * quantize_q8_1_kernel itself) stores through this, so all give the same bytes. */
__device__ __forceinline__ int q8_1_quant(float v, float a) { /* v's quant in a group of largest |value| a */
    return a == 0.0f ? 0 : (int)roundf(v / (a / 127.0f));
}
__device__ __forceinline__ void q8_1_store_lane(float v, int64_t i, int lane, int8_t *xq, float2 *xds) {
    float a = fabsf(v);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
    int q = q8_1_quant(v, a);
    xq[i] = (int8_t)q;
    int s = q;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) xds[i / 32] = make_float2(a / 127.0f, a / 127.0f * (float)s);
}
/* The same with two values a lane, i and i + 1 (i even), a group of 32 held by 16 lanes (lanes
 * 16k .. 16k + 15, the whole warp calling); have: whether this lane holds values (both lanes of a
 * group's 16 alike). */
__device__ __forceinline__ void q8_1_store_pair(float v0, float v1, int64_t i, int lane, bool have, int8_t *xq,
                                                float2 *xds) {
    float a = fmaxf(fabsf(v0), fabsf(v1));
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
    const int q0 = q8_1_quant(v0, a), q1 = q8_1_quant(v1, a);
    int s = q0 + q1;
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (have) {
        *(char2 *)(xq + i) = make_char2((signed char)q0, (signed char)q1);
        if (lane % 16 == 0) xds[i / 32] = make_float2(a / 127.0f, a / 127.0f * (float)s);
    }
}

/* ---- rope (cuda_norm_rope.cu; the fused decode attention of cuda_attn_decode.cu) ---- */
typedef struct rope_args {
    int n_rot, neox, n_heads, head_dim;
    float theta_scale, freq_scale, ext_factor, attn_factor, corr0, corr1, log_mscale;
} rope_args;

#define ROPE_MAX_HALF 256 /* rotated pairs per head (n_rot <= 512) */

/* cos and sin (times the YaRN magnitude) of rotated pair i at position p, as the CPU computes them. */
__device__ __forceinline__ void rope_cs(int i, int p, const float *ff, const rope_args &a, float *c, float *s) {
    int i0 = 2 * i;
    float theta = (float)p;
    for (int k = 0; k < i; k++) theta *= a.theta_scale;
    float f = ff ? ff[i] : 1.0f;
    /* _rn intrinsics: no fused multiply-adds, so the angle rounds as on the CPU */
    float extrap = __fdiv_rn(theta, f), interp = __fmul_rn(a.freq_scale, extrap), th = interp;
    float mscale = a.attn_factor;
    if (a.ext_factor != 0.0f) {
        float y = (i0 / 2 - a.corr0) / fmaxf(0.001f, a.corr1 - a.corr0);
        float ramp = 1.0f - fminf(1.0f, fmaxf(0.0f, y));
        float mix = __fmul_rn(ramp, a.ext_factor);
        th = __fadd_rn(__fmul_rn(interp, 1 - mix), __fmul_rn(extrap, mix));
        mscale *= a.log_mscale;
    }
    *c = __fmul_rn(cosf(th), mscale);
    *s = __fmul_rn(sinf(th), mscale);
}

/* Rotates pair i of v (one head) by (c, s). */
__device__ __forceinline__ void rope_pair(float *v, int i, float c, float s, const rope_args &a) {
    int half = a.n_rot / 2;
    int ia = a.neox ? i : 2 * i, ib = a.neox ? i + half : 2 * i + 1;
    float x0 = v[ia], x1 = v[ib];
    v[ia] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    v[ib] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
}

/* One head's QK-norm and rope by one warp, as rms_norm_warp_kernel then rope_kernel compute them:
 * the hd values of v_in normalised with w (NULL: copied) into row, then the pairs rotated there
 * (cs, sn: the half pairs' angles). Every kernel that rotates q or k goes through this. */
__device__ __forceinline__ void qk_head_norm_rope(const float *v_in, const float *w, float eps, int hd, int half,
                                                  const float *cs, const float *sn, const rope_args &a, float *row) {
    const int lane = threadIdx.x % 32;
    if (w) {
        float scale = warp_rms_scale(v_in, hd, eps);
        for (int i = lane; i < hd; i += 32) row[i] = (v_in[i] * scale) * w[i];
    } else {
        for (int i = lane; i < hd; i += 32) row[i] = v_in[i];
    }
    __syncwarp();
    for (int i = lane; i < half; i += 32) rope_pair(row, i, cs[i], sn[i], a);
    __syncwarp();
}

/* ---- the f16 activations of cuda_mmqh.cu ----
 * Column i of a row goes to mmqh_perm(i): within each group of 32, column 8c + r to slot
 * 8c + (r with bits 0 and 1 swapped), the order of the kernel's f16 pairs (see there). A row is
 * scaled by 2^-e, e = mmqh_row_exp(max |x|), so that its largest magnitude lies in [2^14, 2^15). */
__device__ __forceinline__ int64_t mmqh_perm(int64_t i) {
    const int r = (int)(i & 7);
    return (i & ~(int64_t)7) | (r & 4) | ((r & 1) << 1) | ((r >> 1) & 1);
}
__device__ __forceinline__ int mmqh_row_exp(float mx) {
    int e = 0;
    if (mx > 0.0f && isfinite(mx)) {
        (void)frexpf(mx, &e); /* mx = f * 2^e, f in [0.5, 1) */
        e -= 15;
    }
    return e;
}
/* The largest of the block's threads' mx, to every thread (red: 32 floats of shared memory). */
__device__ __forceinline__ float block_max(float mx, float *red) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = mx;
    __syncthreads();
    mx = 0.0f;
    for (int w = 0; w < (int)(blockDim.x / 32); w++) mx = fmaxf(mx, red[w]);
    return mx;
}
/* A row of largest magnitude mx: the factor its f16 copy is scaled by (2^-e, e = mmqh_row_exp(mx));
 * thread 0 stores the inverse to *xmul. */
__device__ __forceinline__ float mmqh_row_scale(float mx, float *xmul) {
    const int e = mmqh_row_exp(mx);
    if (threadIdx.x == 0) *xmul = ldexpf(1.0f, e);
    return ldexpf(1.0f, -e);
}

/* ---- integer-dot weight groups (cuda_mmvq.cu, cuda_moe.cu): Q8_0, Q4_0, Q4_K, Q6_K only ---- */
/* A 4-byte little-endian word from a 2-byte-aligned address. */
__device__ __forceinline__ int ld_i32_a2(const uint8_t *p) {
    const uint16_t *q = (const uint16_t *)p;
    return (int)(q[0] | ((uint32_t)q[1] << 16));
}

/* Weight group g (elements 32g..32g+31) of one row, unpacked once and then
 * dotted with every token: eight words of signed or unsigned bytes w (bytes
 * 0-15 in w[0..3], 16-31 in w[4..7]) with integer scales s0, s1 for the two
 * halves, and float factors so that the group contributes
 *     a * d_x * (s0 * dot(w[0..3], x[0..3]) + s1 * dot(w[4..7], x[4..7])) - b * (d_x * sum x)
 * (b folds constant offsets and K-quant minimums into the activation sums). */
typedef struct wgroup {
    int w[8];
    int s0, s1;
    float a, b;
} wgroup;

/* NW little-endian words (4 * NW bytes) from a 2-byte-aligned address: NW / 2 + 1 aligned 8-byte
 * loads and funnel shifts instead of 2 * NW 2-byte loads (the 18-, 34- and 210-byte blocks of
 * Q4_0, Q8_0 and Q6_K are only 2-byte aligned). Reads up to 8 bytes past p + 4 * NW: bind_weight
 * pads every weight by BK_CUDA_WEIGHT_PAD bytes. */
#define BK_CUDA_WEIGHT_PAD 64
/* A read-only load: through the non-coherent cache from global memory, or a plain load when SH
 * (the row was staged in shared memory: cuda_mmvs.cu). */
template <bool SH, class V> __device__ __forceinline__ V ld_ro(const V *p) {
    if constexpr (SH) return *p;
    else return __ldg(p);
}
template <int NW, bool SH = false> __device__ __forceinline__ void ld_a2(const uint8_t *p, int w[NW]) {
    uintptr_t a = (uintptr_t)p;
    const uint2 *q = (const uint2 *)(a & ~(uintptr_t)7);
    uint32_t W[NW + 2];
#pragma unroll
    for (int i = 0; i < NW / 2 + 1; i++) {
        uint2 u = ld_ro<SH>(q + i);
        W[2 * i] = u.x;
        W[2 * i + 1] = u.y;
    }
    int o = (int)((a >> 2) & 1), sh = (int)(a & 3) * 8;
#pragma unroll
    for (int i = 0; i < NW; i++) {
        uint32_t lo = o ? W[i + 1] : W[i], hi = o ? W[i + 2] : W[i + 1];
        w[i] = (int)__funnelshift_r(lo, hi, sh);
    }
}
/* Byte i (0..3, any value at run time) of a word. */
__device__ __forceinline__ int byte_of(uint32_t w, int i) { return (int)((w >> (8 * i)) & 0xFF); }

/* Q6_K's four 6-bit values a word (low nibbles lo, high bits hi already at bits 4-5, each byte
 * 0..63) minus 32, as signed bytes: lo + hi + 96 stays below 256 in every byte (no carry crosses
 * bytes), and flipping bit 7 subtracts 128. Two instructions (IADD3, LOP3) where __vsubss4's
 * saturating subtract is eight on sm_90 (the values never saturate). */
__device__ __forceinline__ int q6_minus32(uint32_t lo, uint32_t hi) {
    return (int)((lo + hi + 0x60606060u) ^ 0x80808080u);
}

/* Q4_K's and Q5_K's 6-bit scale and min of sub-block j from the block's 16-byte header h (d, dmin,
 * then the 12 scale bytes: 0-3 in h.y, 4-7 in h.z, 8-11 in h.w; k4_scale_min's layout). */
__device__ __forceinline__ void k4_sc_m(const uint4 &h, int j, int &sc, int &m) {
    if (j < 4) {
        sc = byte_of(h.y, j) & 63;
        m = byte_of(h.z, j) & 63;
    } else {
        sc = (byte_of(h.w, j - 4) & 0xF) | ((byte_of(h.y, j - 4) >> 6) << 4);
        m = (byte_of(h.w, j - 4) >> 4) | ((byte_of(h.z, j - 4) >> 6) << 4);
    }
}

/* IQ4_NL's and IQ4_XS's codebook (quant_iq4nl_values) at four indices at once: each byte of idx
 * holds an index 0..15; the result holds the four int8 values in the same bytes. Two byte
 * permutes pick each byte's value among entries 0-7 and 8-15 by the index's low three bits
 * (selector nibbles 0-7: no sign replication), and its fourth bit chooses between them. */
__device__ __forceinline__ int iq4nl_lookup4(uint32_t idx) {
    const uint32_t sel = (idx & 7u) | ((idx >> 4) & 0x70u) | ((idx >> 8) & 0x700u) | ((idx >> 12) & 0x7000u);
    const uint32_t lo = __byte_perm(0xBFAD9881u, 0xF6EADDCFu, sel); /* -127 -104 -83 -65 | -49 -35 -22 -10 */
    const uint32_t hi = __byte_perm(0x26190D01u, 0x71594535u, sel); /* 1 13 25 38 | 53 69 89 113 */
    const uint32_t m = ((idx >> 3) & 0x01010101u) * 0xFFu;
    return (int)((lo & ~m) | (hi & m));
}

template <int T, bool SH = false> __device__ __forceinline__ void group_load(const uint8_t *row, int64_t g, wgroup &q) {
    q.s0 = q.s1 = 1;
    q.b = 0.0f;
    if (T == QT_Q8_0) {
        const uint8_t *b = row + g * 34;
        ld_a2<8, SH>(b + 2, q.w);
        q.a = bk_h2f(ld16(b));
    } else if (T == QT_Q4_0 || T == QT_IQ4_NL) {
        /* 18-byte blocks: d, then weight l's 4 bits in byte l's low nibble, weight l + 16's in its
         * high one; Q4_0's weight is the value less 8, IQ4_NL's its codebook entry */
        const uint8_t *b = row + g * 18;
        int w[4];
        ld_a2<4, SH>(b + 2, w);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t lo = (uint32_t)w[i] & 0x0F0F0F0Fu, hi = ((uint32_t)w[i] >> 4) & 0x0F0F0F0Fu;
            q.w[i] = T == QT_Q4_0 ? (int)lo : iq4nl_lookup4(lo);
            q.w[4 + i] = T == QT_Q4_0 ? (int)hi : iq4nl_lookup4(hi);
        }
        q.a = bk_h2f(ld16(b));
        if (T == QT_Q4_0) q.b = 8.0f * q.a; /* (n - 8) * x = n * x - 8 * x */
    } else if (T == QT_Q4_K || T == QT_Q5_K) {
        /* 144-byte Q4_K blocks keep 16-byte alignment: the header (d, dmin, 12 scale bytes) is one
         * 16-byte load and the group's 32 nibbles half of two 16-byte loads. Q5_K's 176-byte blocks
         * put 32 bytes of fifth bits (bit j of byte l: weight l of sub-block j) between the two. */
        const uint8_t *b = row + (g / 8) * (T == QT_Q4_K ? 144 : 176);
        int j = (int)(g % 8), c = j / 2, sh = (j % 2) * 4;
        uint4 h = ld_ro<SH>((const uint4 *)b);
        const uint4 *qs = (const uint4 *)(b + (T == QT_Q4_K ? 16 : 48) + 32 * c);
        uint4 u0 = ld_ro<SH>(qs), u1 = ld_ro<SH>(qs + 1);
        uint32_t qw[8] = {u0.x, u0.y, u0.z, u0.w, u1.x, u1.y, u1.z, u1.w};
#pragma unroll
        for (int i = 0; i < 8; i++) q.w[i] = (int)((qw[i] >> sh) & 0x0F0F0F0Fu);
        if (T == QT_Q5_K) {
            uint4 h0 = ld_ro<SH>((const uint4 *)(b + 16)), h1 = ld_ro<SH>((const uint4 *)(b + 32));
            uint32_t hw[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
#pragma unroll
            for (int i = 0; i < 8; i++) q.w[i] |= (int)(((hw[i] >> j) & 0x01010101u) << 4);
        }
        int sc, m;
        k4_sc_m(h, j, sc, m);
        q.a = bk_h2f((uint16_t)h.x) * (float)sc;
        q.b = bk_h2f((uint16_t)(h.x >> 16)) * (float)m;
    } else if (T == QT_IQ4_XS) {
        /* 136-byte blocks keep 8-byte alignment: d, the scales' high bits and their low nibbles in
         * one 8-byte word, then 16 bytes a sub-block (weight l's codebook index in byte l's low
         * nibble, weight l + 16's in its high one) */
        const uint8_t *b = row + (g / 8) * 136;
        int ib = (int)(g % 8);
        uint2 hd = ld_ro<SH>((const uint2 *)b);
        const uint2 *qs = (const uint2 *)(b + 8 + 16 * ib);
        uint2 v0 = ld_ro<SH>(qs), v1 = ld_ro<SH>(qs + 1);
        uint32_t qw[4] = {v0.x, v0.y, v1.x, v1.y};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            q.w[i] = iq4nl_lookup4(qw[i] & 0x0F0F0F0Fu);
            q.w[4 + i] = iq4nl_lookup4((qw[i] >> 4) & 0x0F0F0F0Fu);
        }
        int ls = ((byte_of(hd.y, ib / 2) >> 4 * (ib % 2)) & 15) | ((int)((hd.x >> (16 + 2 * ib)) & 3) << 4);
        q.a = bk_h2f((uint16_t)hd.x) * (float)(ls - 32);
    } else { /* QT_Q6_K */
        const uint8_t *b = row + (g / 8) * 210;
        int j = (int)(g % 8), n = j / 4, k = j % 4;
        const uint8_t *ql = b + 64 * n + 32 * (k & 1), *qh = b + 128 + 32 * n;
        int shl = (k >> 1) * 4, shh = 2 * k;
        int lw[8], hw[8];
        ld_a2<8, SH>(ql, lw);
        ld_a2<8, SH>(qh, hw);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            uint32_t lo = ((uint32_t)lw[i] >> shl) & 0x0F0F0F0Fu;
            uint32_t hi = (((uint32_t)hw[i] >> shh) & 0x03030303u) << 4;
            q.w[i] = q6_minus32(lo, hi); /* 6-bit values minus 32, per byte */
        }
        const int8_t *sc = (const int8_t *)(b + 192 + 8 * n + 2 * k);
        q.s0 = sc[0];
        q.s1 = sc[1];
        q.a = bk_h2f(ld16(b + 208));
    }
}

/* The scales of a Q4_K or Q5_K pair (sub-blocks 2c and 2c + 1) from the block's header. */
__device__ __forceinline__ void k4_pair_scales(const uint4 &h, int c, wgroup &lo, wgroup &hi) {
    lo.s0 = lo.s1 = hi.s0 = hi.s1 = 1;
    float d = bk_h2f((uint16_t)h.x), dmin = bk_h2f((uint16_t)(h.x >> 16));
    int sc0, m0, sc1, m1;
    k4_sc_m(h, 2 * c, sc0, m0);
    k4_sc_m(h, 2 * c + 1, sc1, m1);
    lo.a = d * (float)sc0;
    lo.b = dmin * (float)m0;
    hi.a = d * (float)sc1;
    hi.b = dmin * (float)m1;
}

/* Groups 2p and 2p + 1 of a Q4_K row: the low and high nibbles of the same 32 bytes, so one
 * lane loads the header and the quants once for both (the decode kernels' pair path). */
template <bool SH = false> __device__ __forceinline__ void group_load_q4k_pair(const uint8_t *row, int64_t p, wgroup &lo, wgroup &hi) {
    const uint8_t *b = row + (p / 4) * 144;
    int c = (int)(p % 4);
    uint4 h = ld_ro<SH>((const uint4 *)b);
    const uint4 *qs = (const uint4 *)(b + 16 + 32 * c);
    uint4 u0 = ld_ro<SH>(qs), u1 = ld_ro<SH>(qs + 1);
    int qw[8] = {(int)u0.x, (int)u0.y, (int)u0.z, (int)u0.w, (int)u1.x, (int)u1.y, (int)u1.z, (int)u1.w};
#pragma unroll
    for (int i = 0; i < 8; i++) {
        lo.w[i] = qw[i] & 0x0F0F0F0F;
        hi.w[i] = (qw[i] >> 4) & 0x0F0F0F0F;
    }
    k4_pair_scales(h, c, lo, hi);
}

/* Q5_K's groups 2p and 2p + 1: Q4_K's pair, each nibble topped by its fifth bit (bits 2c and
 * 2c + 1 of the 32 high-bit bytes, which every sub-block of the block shares). */
template <bool SH = false> __device__ __forceinline__ void group_load_q5k_pair(const uint8_t *row, int64_t p, wgroup &lo, wgroup &hi) {
    const uint8_t *b = row + (p / 4) * 176;
    int c = (int)(p % 4);
    uint4 h = ld_ro<SH>((const uint4 *)b);
    const uint4 *qh = (const uint4 *)(b + 16), *qs = (const uint4 *)(b + 48 + 32 * c);
    uint4 h0 = ld_ro<SH>(qh), h1 = ld_ro<SH>(qh + 1), u0 = ld_ro<SH>(qs), u1 = ld_ro<SH>(qs + 1);
    uint32_t qw[8] = {u0.x, u0.y, u0.z, u0.w, u1.x, u1.y, u1.z, u1.w};
    uint32_t hw[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const uint32_t t = hw[i] >> (2 * c);
        lo.w[i] = (int)((qw[i] & 0x0F0F0F0Fu) | ((t & 0x01010101u) << 4));
        hi.w[i] = (int)(((qw[i] >> 4) & 0x0F0F0F0Fu) | ((t & 0x02020202u) << 3));
    }
    k4_pair_scales(h, c, lo, hi);
}

/* Groups 4h..4h+3 of a Q6_K row: the 128 weights of half h % 2 of block h / 2. Their low bits share
 * 64 ql bytes (group k: the low (k < 2) or high nibbles of bytes 32 (k & 1) ..) and their high bits
 * 32 qh bytes (group k: bits 2k, 2k + 1), so one lane loads each byte once for all four instead of
 * ql twice and qh four times (the decode kernels' quad path; group_load<QT_Q6_K> is one of them). */
template <bool SH = false> __device__ __forceinline__ void group_load_q6k_quad(const uint8_t *row, int64_t h, wgroup (&q)[4]) {
    const uint8_t *b = row + (h / 2) * 210;
    int n = (int)(h % 2);
    int lw[16], hw[8];
    ld_a2<16, SH>(b + 64 * n, lw);
    ld_a2<8, SH>(b + 128 + 32 * n, hw);
    float d = bk_h2f(ld16(b + 208));
    const int8_t *sc = (const int8_t *)(b + 192 + 8 * n);
#pragma unroll
    for (int k = 0; k < 4; k++) {
#pragma unroll
        for (int i = 0; i < 8; i++) {
            uint32_t lo = ((uint32_t)lw[8 * (k & 1) + i] >> ((k >> 1) * 4)) & 0x0F0F0F0Fu;
            uint32_t hi = (((uint32_t)hw[i] >> (2 * k)) & 0x03030303u) << 4;
            q[k].w[i] = q6_minus32(lo, hi);
        }
        q[k].s0 = sc[2 * k];
        q[k].s1 = sc[2 * k + 1];
        q[k].a = d;
        q[k].b = 0.0f;
    }
}

__device__ __forceinline__ float group_dot(const wgroup &q, const int *xi, float2 ds) {
    int s0, s1;
    dot_halves32(q.w, xi, s0, s1); /* (cuda_iq.cuh) */
    return q.a * ds.x * (float)(q.s0 * s0 + q.s1 * s1) - q.b * ds.y;
}

/* The one list of the weight types the CUDA kernels support: X(T, ...) for each, the arguments after
 * X passed on to it (BK_DISPATCH's statement; none for cuda_type_supported and cuda_mma). */
#define BK_CUDA_TYPES(X, ...) \
    X(QT_F32, __VA_ARGS__) X(QT_F16, __VA_ARGS__) X(QT_BF16, __VA_ARGS__) X(QT_Q8_0, __VA_ARGS__) \
    X(QT_Q4_0, __VA_ARGS__) X(QT_Q4_1, __VA_ARGS__) X(QT_Q5_0, __VA_ARGS__) X(QT_Q5_1, __VA_ARGS__) \
    X(QT_IQ4_NL, __VA_ARGS__) X(QT_Q4_K, __VA_ARGS__) X(QT_Q5_K, __VA_ARGS__) X(QT_Q6_K, __VA_ARGS__) \
    X(QT_IQ4_XS, __VA_ARGS__) BK_CUDA_IQ_TYPES(X, __VA_ARGS__)
/* the codebook, ternary and FP4 types (cuda_iq.cuh): the float paths through deq8 (their int8
 * decode kernel waits on branch lab/iq-dec for a GPU's op test and timing) */
#define BK_CUDA_IQ_TYPES(X, ...) \
    X(QT_IQ2_XXS, __VA_ARGS__) X(QT_IQ2_XS, __VA_ARGS__) X(QT_IQ2_S, __VA_ARGS__) X(QT_IQ3_XXS, __VA_ARGS__) \
    X(QT_IQ3_S, __VA_ARGS__) X(QT_IQ1_S, __VA_ARGS__) X(QT_IQ1_M, __VA_ARGS__) X(QT_TQ1_0, __VA_ARGS__) \
    X(QT_TQ2_0, __VA_ARGS__) X(QT_NVFP4, __VA_ARGS__) X(QT_Q1_0, __VA_ARGS__) X(QT_Q2_0, __VA_ARGS__)
static inline bool cuda_type_supported(uint32_t t) {
#define X(T, ...) if (t == T) return true;
    BK_CUDA_TYPES(X, )
#undef X
    return false;
}

/* ---- launchers, one per op family ---- */
extern "C" {
void cuda_get_rows(bk_backend *be, const bk_weight *emb, const int32_t *ids, int n, float *out);
void cuda_matmul(bk_backend *be, int n_w, const bk_weight *const *w, const bk_weight *const *bias,
                 const float *x, int n, float *const *y);
void cuda_rms_norm(bk_backend *be, const float *x, const bk_weight *w, float *y, int n_rows, int dim,
                   float eps);
void cuda_rope(bk_backend *be, float *x, int n, int n_heads, int head_dim, const int32_t *pos,
               const bk_rope_params *rp);
bool cuda_attention_rope(bk_backend *be, const bk_attn_rope_in *in, const bk_kv_view *kv, const bk_attn_batch *ab,
                         int n_head, int n_head_kv, int head_dim, float scale, float *out);
bool cuda_attention_gated(bk_backend *be, const float *q, const float *k, const float *v, const bk_kv_view *kv,
                          const bk_attn_batch *ab, int n_head, int n_head_kv, int head_dim, float scale,
                          const float *gate, int gate_pitch, float *out);
void cuda_attention(bk_backend *be, const float *q, const float *k, const float *v, const bk_kv_view *kv,
                    const bk_attn_batch *ab, int n_head, int n_head_kv, int head_dim, float scale,
                    float *out);
void cuda_swiglu(bk_backend *be, const float *gate, const float *up, float *out, size_t n);
void cuda_add(bk_backend *be, float *x, const float *y, size_t n);
void cuda_matmul_add(bk_backend *be, const bk_weight *w, const float *x, int n, float *y);
void cuda_matmul_swiglu(bk_backend *be, const bk_weight *gate, const bk_weight *up, const float *x, int n,
                        float *tmp, float *out);
void cuda_qk_norm_rope(bk_backend *be, float *q, float *k, int n, int n_head, int n_head_kv, int head_dim,
                       const bk_weight *q_norm, const bk_weight *k_norm, float eps, const int32_t *pos,
                       const bk_rope_params *rp);
bool cuda_qk_norm_rope_kv(bk_backend *be, float *q, const float *q_src, int q_pitch, float *k, const float *v, int n,
                          int n_head, int n_head_kv, int head_dim, const bk_weight *q_norm, const bk_weight *k_norm,
                          float eps, const int32_t *pos, const bk_rope_params *rp, const bk_kv_view *kv);
brisk_status cuda_step_begin(bk_backend *be, const bk_step *st, bool *replayed);
brisk_status cuda_step_end(bk_backend *be, bool *rerun);
brisk_status cuda_graph_init(cuda_backend *cb);
/* cuda_trace.cu: BRISK_CUDA_TRACE=FILE in a trace build arms the timeline (cuda_trace.cuh) for the
 * BRISK_CUDA_TRACE_STEP-th replayed step (default 40); the graph's kernel names when one is made;
 * the records of that step written after it. All no-ops when not armed. */
void cuda_trace_init(cuda_backend *cb);
void cuda_trace_graph(cuda_backend *cb, cudaGraph_t g);
void cuda_trace_before_replay(cuda_backend *cb);
void cuda_trace_after_replay(cuda_backend *cb);
void cuda_trace_free(cuda_backend *cb);
void cuda_moe_route(bk_backend *be, const float *logits, int n, int n_expert, int k, bool norm, float scale,
                    int32_t *ids, float *weights);
void cuda_moe_ffn(bk_backend *be, const bk_weight *gate, const bk_weight *up, const bk_weight *down, const float *x,
                  int n, const int32_t *ids, const float *weights, int k, float *out);
void cuda_gated_delta_gate(bk_backend *be, const float *x, const bk_weight *conv_w, float *conv, int d_conv,
                           float *conv_out, const float *b, const float *a, const bk_weight *a_bias,
                           const bk_weight *a_scale, float *ssm, const int32_t *seq, int n, int n_k_heads,
                           int n_v_heads, bool v_grouped, int d, float eps, const bk_weight *norm, float norm_eps,
                           const float *z, float *out);
void cuda_ssm_conv(bk_backend *be, const float *x, const bk_weight *w, float *conv, const int32_t *seq, int n,
                   int channels, int d_conv, float *out);
void cuda_gated_delta(bk_backend *be, const float *qkv, const float *b, const float *a, const bk_weight *a_bias,
                      const bk_weight *a_scale, float *ssm, const int32_t *seq, int n, int n_k_heads, int n_v_heads,
                      bool v_grouped, int d, float eps, float *out);
void cuda_sigmoid_mul(bk_backend *be, float *x, const float *gate, int n_rows, int width, int gate_width);
void cuda_gated_residual(bk_backend *be, float *x, float *m, float *s, const float *gate, int n_rows, int width);
void cuda_moe_router(bk_backend *be, const bk_weight *w, const float *x, int n, int k, bool norm, float scale,
                     float *logits, int32_t *ids, float *weights, const bk_weight *w2, float *out2);
void cuda_moe_ids_local(bk_backend *be, int32_t *ids, int n, int e0, int e1);
bool cuda_moe_ffn_shared(bk_backend *be, const bk_weight *gate, const bk_weight *up, const bk_weight *down,
                         const bk_weight *gs, const bk_weight *us, const bk_weight *ds, const float *h, int n,
                         const int32_t *ids, const float *weights, int k, const float *sh_logit, float *x);
void cuda_moe_free(cuda_backend *cb);
}
/* The quantized activations' tag (xq_src above) across an op that reads x and xq and writes only
 * other outputs (the products of cuda_matmul.cu, the MoE router of cuda_moe.cu). A product reads
 * x and xq and writes only its outputs, so the tag outlives it: it names x when the call quantized x
 * (or found it quantized), else stays as it was, unless an output overwrote the tagged rows. So the
 * MoE router's product, which sits between the norm that quantized h and the experts that read h,
 * no longer costs the experts a quantize launch. */
typedef struct q8_tag {
    const float *src;
    int n;
    int64_t dim;
} q8_tag;

static inline q8_tag q8_tag_now(const cuda_backend *cb) {
    q8_tag t = {cb->xq_src, cb->xq_n, cb->xq_dim};
    return t;
}

/* After CU_LAUNCHED (which clears the tag): t again, unless output [y, y + len) overlaps its rows. */
static inline void q8_tag_keep(cuda_backend *cb, q8_tag t, const float *y, size_t len) {
    if (t.src && y < t.src + (size_t)t.n * (size_t)t.dim && t.src < y + len) t.src = NULL;
    cb->xq_src = t.src;
    cb->xq_n = t.n;
    cb->xq_dim = t.dim;
}

/* ---- the rungs of the matrix products (cuda_matmul.cu climbs them in order) ----
 * Each *_should_use is a pure predicate of the plan (cb's switches, limits and buffers, set once at
 * init; the compute capability enters through them, e.g. mmvf_on), the weight's type and shape and
 * the batch n: it launches, allocates and writes nothing. It is defined beside its kernel. A kernel
 * the predicate chose may still refuse at run time (returns 0 or false: an alignment, a shared-memory
 * opt-in, cuBLAS not loading, a buffer too small), and cuda_matmul.cu then takes the next rung. */
/* cuda_gemv.cu: the SIMT tiled kernel for batches over GEMV_MAX_TOK tokens (K a multiple of 32); the
 * split-K GEMV for a float matrix of few, wide rows (a router: a block per row); the float GEMV,
 * which takes everything (the last rung). bias: NULL or n_out floats. */
#define GEMV_MAX_TOK 8 /* float-path GEMV tokens per launch; the tiled and tensor-core kernels above */
bool cuda_mm_tiled_should_use(int64_t n_in, int n);
bool cuda_gemv_splitk_should_use(uint32_t type, int64_t n_in, int64_t n_out);
void cuda_mm_tiled(cuda_backend *cb, const bk_weight *w, const float *bias, const float *x, int n, float *y, int accum);
void cuda_gemv_splitk(cuda_backend *cb, const bk_weight *w, const float *bias, const float *x, int n, float *y,
                      int accum);
void cuda_gemv(cuda_backend *cb, const bk_weight *w, const float *bias, const float *x, int n, float *y, int accum);
/* cuda_mmvq.cu: the integer-dot GEMV. _use: a batch of n tokens belongs to it (x quantized into cb->xq:
 * up to MMVQ_SLICE_MAX tokens as MMVQ_MAX_TOK-token slices, none of cuda_mmq's or cuBLAS's batches);
 * _should_use: and a matrix of type and n_in too; multi: several matrices of a call in one launch;
 * glu: the gate/up pair and the SwiGLU in one launch (one slice). */
bool cuda_mmvq_supported(uint32_t type, int64_t n_in);
bool cuda_mmvq_dec_supported(const cuda_backend *cb, uint32_t type, int64_t n_in);
bool cuda_mmvq_use(const cuda_backend *cb, int n);
bool cuda_mmvq_should_use(const cuda_backend *cb, uint32_t type, int64_t n_in, int n);
bool cuda_mmvq_multi_should_use(const cuda_backend *cb, int n, int n_mats);
bool cuda_mmvq_glu_should_use(const cuda_backend *cb, uint32_t type, int64_t n_in, int n);
bool cuda_mmvq_quantize(cuda_backend *cb, const float *x, int64_t n_in, int n);
void cuda_mmvq(cuda_backend *cb, const bk_weight *w, const float *bias, int n, float *y, int accum);
int cuda_mmvq_multi(cuda_backend *cb, int n_w, const bk_weight *const *w, const float *const *bias, int n,
                    float *const *y);
bool cuda_mmvq_glu(cuda_backend *cb, const bk_weight *gate, const bk_weight *up, int n, float *out);
/* cuda_mmq.cu: the same products on int8 tensor cores for activations already quantized
 * (cuda_mmvq_prepare); cuda_mmq_use says whether a batch of n tokens belongs to it, _should_use
 * whether a matrix of type and n_in in that batch does too, glu_should_use the gate of a SwiGLU. */
bool cuda_mmq_use(const cuda_backend *cb, int n);
bool cuda_mmq_should_use(const cuda_backend *cb, uint32_t type, int64_t n_in, int n);
bool cuda_mmq_glu_should_use(const cuda_backend *cb, uint32_t type, int64_t n_in, int n);
void cuda_mmq(cuda_backend *cb, const bk_weight *w, const float *bias, int n, float *y, int accum);
bool cuda_mmq_glu(cuda_backend *cb, const bk_weight *gate, const bk_weight *up, int n, float *out);
/* cuda_mmqh.cu: the batched products on f16 tensor cores, the weights streamed. _use: whether a batch
 * of n tokens belongs to it; _supported: a matrix it takes; _prepare converts x (n rows of n_in) for
 * the calls after it; cuda_mmqh runs up to MMVS_MATS matrices of w's first type and width as one
 * launch and returns how many it took (0: none). */
bool cuda_mmqh_use(const cuda_backend *cb, int n);
bool cuda_mmqh_supported(const cuda_backend *cb, uint32_t type, int64_t n_in);
bool cuda_mmqh_should_use(const cuda_backend *cb, uint32_t type, int64_t n_in, int n); /* _use and _supported */
bool cuda_mmqh_glu_should_use(const cuda_backend *cb, uint32_t type, int64_t n_in, int n);
bool cuda_mmqh_prepare(cuda_backend *cb, const float *x, int64_t n_in, int n);
int cuda_mmqh(cuda_backend *cb, int n_w, const bk_weight *const *w, const float *const *bias, int n,
              float *const *y, int accum);
bool cuda_mmqh_glu(cuda_backend *cb, const bk_weight *gate, const bk_weight *up, int n, float *out);
/* The activations of x (n rows of n_in) are quantized: reuses the fused norm's (xq_src) or quantizes. */
bool cuda_mmvq_prepare(cuda_backend *cb, const float *x, int64_t n_in, int n);
/* An attention output gate (qwen35): output (t, h, d) times sigmoid(g[(t * n_head + h) * pitch + d]);
 * g NULL: none. */
struct att_gate {
    const float *g;
    int pitch;
};
/* The rope arguments and the device copies of pos and freq_factors; false after an error. */
bool cuda_rope_setup(cuda_backend *cb, int n, int n_heads, int head_dim, const int32_t *pos, const bk_rope_params *rp,
                     rope_args *a, const int32_t **d_pos, const float **d_ff);
/* The fused decode attention's QK-norm, rope and cache write (cuda_attention_rope); qs NULL: none. */
struct dec_rope {
    const float *qs; /* q's heads, rows qp floats apart */
    int qp;
    const float *k, *v; /* the step's rows (n, n_head_kv * hd), as the product left them */
    const float *qw, *kw; /* QK-norm weights, NULL: none */
    float eps;
    const float *ff; /* rope frequency factors, NULL: none */
    rope_args a;
    const int32_t *slot; /* cache rows of the step's tokens */
};
bool cuda_attn_decode_supported(int head_dim);
/* The tensor-core decode attention (cuda_attn_mma.cu): GQA groups of 2-16 query heads, f16 (head_dim
 * 64, 128, 256) or q8_0 (128, 256) caches, sm_80+. Same arguments and result as cuda_attn_decode. */
bool cuda_attn_mma_supported(const cuda_backend *cb, int kv_type, int head_dim, int n_head, int n_head_kv);
bool cuda_attn_mma(cuda_backend *cb, const float *q, const bk_kv_view *kv, int n, int max_np, const int32_t *d_pos,
                   const int32_t *d_off, const int32_t *d_tabs, int n_head, int n_head_kv, int hd, float scale,
                   att_gate gate, const dec_rope &rope, float *out);
bool cuda_attn_decode(cuda_backend *cb, const float *q, const bk_kv_view *kv, int n, int max_np, const int32_t *d_pos,
                      const int32_t *d_off, const int32_t *d_tabs, int n_head, int n_head_kv, int hd, float scale,
                      att_gate gate, const dec_rope &rope, float *out);
bool cuda_attn_prefill_supported(const cuda_backend *cb, int head_dim, int n_head, int n_head_kv);
/* How the prefill kernel runs a batch of n entries whose longest key range is max_np (cuda_attn_prefill.cu,
 * its comment before fa_plan): m-tiles a warp (1 or 2) and key-range splits (1: none). Pure. */
struct fa_shape {
    int mt, n_split;
};
fa_shape fa_plan_shape(int kv_type, int n, int n_head, int n_head_kv, int hd, int max_np, int n_sm);
/* The key-range splits of the warpgroup-MMA kernel (sm_90a, one block an SM) for the same batch. Pure. */
int fw_plan_splits(int n, int n_head, int n_head_kv, int max_np, int n_sm);
void cuda_attn_prefill(cuda_backend *cb, const float *q, const bk_kv_view *kv, int n, int max_np, const int32_t *d_pos,
                       const int32_t *d_off, const int32_t *d_tabs, int n_head, int n_head_kv, int hd, float scale,
                       float *out);
/* cuda_mma.cu: batches over GEMV_MAX_TOK tokens on f16 tensor cores (WMMA), weights decoded per tile;
 * cuda_blas.cu: from cuBLAS's first batch, weights dequantized to f16 through cuBLAS (the x16
 * conversion is cuda_blas_matmul's, once per cuda_matmul call), the WMMA kernel where it refuses. */
bool cuda_mma_supported(uint32_t type, int64_t n_in);
bool cuda_mma_should_use(const cuda_backend *cb, uint32_t type, int64_t n_in, int n);
bool cuda_blas_should_use(const cuda_backend *cb, uint32_t type, int64_t n_in, int64_t n_out, int n);
void cuda_mma(cuda_backend *cb, const bk_weight *w, const float *bias, const float *x, int n, float *y, int accum);
brisk_status cuda_blas_init(cuda_backend *cb);
void cuda_blas_free(cuda_backend *cb);
size_t cuda_blas_reserve(void);
bool cuda_blas_matmul(cuda_backend *cb, const bk_weight *w, const float *bias, const float *x, int n, float *y,
                      int accum, bool *x16_ready);
/* cuda_blas_matmul's steps, for dev/kernels/gemm_lab.cu */
bool cuda_blas_ready(cuda_backend *cb);
bool cuda_blas_dequant(cuda_backend *cb, const bk_weight *w, int64_t r0, int64_t rows, half *out);
bool cuda_blas_to_f16(cuda_backend *cb, const float *x, int64_t count, half *out);
bool cuda_blas_gemm(cuda_backend *cb, const half *a, int64_t rows, int64_t n_in, const half *x16, int n, float *c,
                    int64_t ldc, float beta);
extern "C" {
void cuda_graph_free(cuda_backend *cb);
}
/* Dispatch over the weight types the CUDA kernels support (BK_CUDA_TYPES; cuda_gemv.cu, cuda_moe.cu):
 * inside, TT is the type as a constant. */
#define BK_TYPE_CASE(T, ...) \
    case T: {                \
        constexpr int TT = T; \
        __VA_ARGS__;         \
    } break;
#define BK_DISPATCH(type, ...)                   \
    switch (type) {                              \
        BK_CUDA_TYPES(BK_TYPE_CASE, __VA_ARGS__) \
    default: break;                                                              \
    }

/* cuda_nccl.cu: sum over the communicator's ranks in place (no communicator: nothing to sum), and
 * the communicator's release with the backend. */
void cuda_all_reduce(bk_backend *be, float *x, size_t n);
brisk_status cuda_p2p(bk_backend *be, const bk_p2p *list, int n);
/* Rows tokens[0..n) of an embedding in host memory, still quantized, into cb->emb_dev (st_emb);
 * the caller has waited for step_ev (emb_host is reused) and records it after (cuda_graph.cu). */
brisk_status cuda_stage_embedding(cuda_backend *cb, const bk_weight *emb, const int32_t *tokens, int n);
void cuda_nccl_free(cuda_backend *cb);
#endif
