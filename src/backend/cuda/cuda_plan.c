/* cuda_plan.c — the table of the CUDA backend's environment settings (cuda_plan.h), its parser,
 * the names the rest of brisk reads, and the printers of `brisk info --gpu` and
 * docs/gpu-switches.md. */
#include "backend/cuda/cuda_plan.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

extern char **environ;

typedef enum {
    P_OFF,  /* bool x_off: "0" turns the path off, "1" leaves it on */
    P_ON,   /* bool: "1" turns the path on, "0" leaves it off */
    P_INT,  /* int in [lo, hi] */
    P_I64,  /* int64_t in [lo, hi] */
    P_MASK, /* unsigned bits in [0, hi], decimal */
    P_STR,  /* const char *, any text */
} plan_parse;

typedef struct plan_row {
    const char *env;      /* the environment name; NULL for a path (named only in the lists) */
    const char *flag;     /* a path's name in BRISK_CUDA_DISABLE, else NULL */
    cuda_plan_class cls;
    plan_parse parse;
    int64_t def, lo, hi;  /* numbers: the default and the range */
    size_t off;           /* the cuda_plan field */
    const char *follows;  /* unset, it takes this earlier row's value instead of def (NULL: none) */
    const char *doc;
} plan_row;

#define F(field) offsetof(cuda_plan, field)
#define OFF(flag, field, doc) {NULL, flag, CUDA_PLAN_PATH, P_OFF, 0, 0, 1, F(field), NULL, doc}
#define NUM(cls, name, parse, field, def, lo, hi, doc) \
    {"BRISK_CUDA_" name, NULL, CUDA_PLAN_##cls, parse, def, lo, hi, F(field), NULL, doc}
#define FOLLOW(name, field, follows, lo, hi, doc) \
    {"BRISK_CUDA_" name, NULL, CUDA_PLAN_TUNING, P_INT, 0, lo, hi, F(field), "BRISK_CUDA_" follows, doc}

/* One row per setting. Docs say what the path does when on (or what the number means): one line.
 * A path that lost its measurement leaves the table and src/ (docs/experiments.md keeps its line). */
static const plan_row rows[] = {
    /* ---- paths on by default: BRISK_CUDA_DISABLE=name ---- */
    OFF("graphs", graphs_off, "CUDA graphs: a decode step captured once a shape and replayed (also off after a capture fails)"),
    OFF("pdl", pdl_off, "programmatic dependent launches: a decode kernel starts before the one before it ends (sm_90 and later)"),
    OFF("cublas", cublas_off, "cuBLAS for prefill products on dequantized f16 weights (loaded when first needed; BRISK_CUDA_GRAPH_INFO=1 says why when it cannot be)"),
    OFF("mma", mma_off, "prefill products on tensor cores (cuda_mma.cu); off: the SIMT tiled kernel"),
    OFF("mmq", mmq_off, "int8 tensor-core products (cuda_mmq.cu) for batches of MMQ_MIN up to MMQ_MAX tokens"),
    OFF("mmqh", mmqh_off, "Q4_K, Q6_K and Q8_0 weights streamed into shared memory and unpacked to f16 for f16 tensor cores (cuda_mmqh.cu; sm_90) for batches of MMQH_MIN up to MMQH_MAX (17-47 tokens); off: the int8 kernel"),
    OFF("moe_mmq", moe_mmq_off, "expert products on int8 tensor cores from MOE_MMQ_MIN (token, expert) entries; off: the GEMV-style kernels only"),
    OFF("moe_q8", moe_q8_off, "expert products on int8 activations; off: on f32 activations only"),
    OFF("moe_vec", moe_vec_off, "one token's experts on the vector kernels; off: through the grouped kernels"),
    OFF("moe_comb", moe_comb_off, "one token's expert down products and their combine in one launch"),
    OFF("moe_shared", moe_shared_off, "one token's MoE layer end (the shared expert, the residual) inside the routed experts' launches"),
    OFF("router_fuse", router_fuse_off, "the MoE router's product and its routing in one launch"),
    OFF("router_join", router_join_off, "the shared expert's gate inside the router's launch"),
    OFF("router_pf", router_pf_off, "the fused router's rows asked into the L2 before its wait"),
    OFF("route_warp", route_warp_off, "the router's warp-per-token kernel; off: its block-per-token kernel only"),
    OFF("fa", fa_off, "prefill attention on tensor cores; off: the SIMT tile kernel"),
    OFF("attn_wgmma", attn_wgmma_off, "prefill attention on Hopper's warpgroup MMA (sm_90a, head dims 128 and 256); off: the mma.sync kernel"),
    OFF("attn_gqa", attn_gqa_off, "an attention block serves a KV head's whole GQA group; off: a block per query head"),
    OFF("attn_mma", attn_mma_off, "decode attention on tensor cores (cuda_attn_mma.cu); off: the warp-per-row kernel"),
    OFF("attn_fuse", attn_fuse_off, "decode attention merges its splits in its own kernel; off: in a merge kernel of their own"),
    OFF("attn_adapt", attn_adapt_off, "a short context's decode attention launches only the splits it needs; off: every split takes part"),
    OFF("attn_gadapt", attn_gadapt_off, "with fewer decode attention blocks than SMs, a block serves part of a GQA group; off: always the whole group"),
    OFF("attn_merge", attn_merge_off, "a decode attention's few splits merged for a whole head group at once; off: head by head"),
    OFF("attn_rope", attn_rope_off, "one token's QK-norm, rope and cache write inside the decode attention's launch, whose split then also reads its first K/V rows before waiting on the product before it"),
    OFF("attn_gate", attn_gate_off, "the gated attention's output gate inside the attention's launch"),
    OFF("attnq", attnq_off, "the decode attention quantizes its output for the product after it"),
    OFF("kv_fuse", kvfuse_off, "the K/V cache written by QK-norm + rope; off: by the attention's own kernel"),
    OFF("qkrope", qkrope_off, "QK-norm and rope in one kernel; off: op by op"),
    OFF("glu", glu_off, "gate and up as one product with the SwiGLU; off: two products, then swiglu"),
    OFF("normq", normq_off, "the RMS norm quantizes its output for the product after it"),
    OFF("mmvq_slices", mmvq_slices_off, "batches of 17 to 64 tokens on the int8 products in slices of 16; off: on the prefill path"),
    OFF("mmvq_multi", mmvq_multi_off, "the matrices of one matmul call in one launch; off: a launch per matrix"),
    OFF("mmvs", mmvs_off, "one token's products stream their weights through the bulk-copy engine (cuda_mmvs.cu; sm_90); off: cuda_mmvq's kernel"),
    OFF("mmvs_wide", mmvs_wide_off, "rows wider than 8,192 columns on the streamed kernel too; off: through cuda_mmvq's kernel"),
    OFF("dec_qtypes", dec_qtypes_off, "Q5_K, IQ4_XS and IQ4_NL decode products on int8 dots; off: the float path"),
    OFF("q6k_quad", q6k_quad_off, "Q6_K decode products (not the LM head) in quads of groups; off: one group at a time"),
    OFF("gd_chunk", gd_chunk_off, "chunked Gated DeltaNet prefill (delta rule and short conv); off: token by token"),
    OFF("gd_fuse", gd_fuse_off, "one token's delta rule, its heads' RMS norm and the output gate in one launch; off: three"),
    OFF("gd_conv", gd_conv_off, "the Gated DeltaNet's short conv inside the fused delta rule's launch"),
    OFF("weight_pool", weight_pool_off, "a model's weights carved from a few device slabs; off: a cudaMalloc per weight"),
    OFF("mmvf", mmvf_off, "one token's products on F16, BF16 and F32 weights streamed into shared memory by the bulk-copy engine (cuda_mmvf.cu; sm_90); off: the float GEMV (H100: BF16 qwen3-8b 161.7 against 127.1 tokens/s)"),
    /* ---- numeric tuning ---- */
    NUM(TUNING, "MMVS_MIN_IN", P_I64, mmvs_min_in, 2048, 0, INT64_MAX, "rows narrower than this many columns take cuda_mmvq's kernel, not the streamed one"),
    NUM(TUNING, "MMVS_PRE", P_INT, mmvs_pre, 1, 0, 1024, "stages of weights a streamed product's warps ask for before waiting on the kernel before (pdl_wait), the rest after their activations' loads, on rows of 4,096 columns and more; 0: the whole ring first"),
    NUM(TUNING, "MMVS_SEG", P_INT, mmvs_seg_bytes, -1, -1, INT_MAX, "rows shared by several warps: -1 where 16 warps need it, N rows over N bytes, 0 never"),
    NUM(TUNING, "ATTN_MINCHUNK", P_INT, attn_min_chunk, 128, 0, 8192, "positions a decode split holds at least (rounded down to 32); 0: the splits the graph bucket shapes"),
    NUM(TUNING, "CUBLAS_MIN_TOK", P_INT, cublas_min_tok, CUDA_PLAN_CUBLAS_MIN, 1, INT_MAX, "the first batch of prefill products that goes to cuBLAS"),
    NUM(TUNING, "CUBLAS_SCRATCH_MB", P_INT, cublas_scratch_mb, CUDA_PLAN_CUBLAS_MB, 1, 1 << 20, "MiB of dequantized f16 weights per cuBLAS chunk"),
    NUM(TUNING, "MMQ_MIN", P_INT, mmq_min, CUDA_PLAN_MMQ_MIN, 1, INT_MAX, "the smallest batch of the int8 tensor-core products"),
    FOLLOW("MMQ_MAX", mmq_max, "CUBLAS_MIN_TOK", 1, INT_MAX, "the first batch the int8 tensor-core products leave to cuBLAS / cuda_mma.cu; unset: CUBLAS_MIN_TOK"),
    NUM(TUNING, "MMQ_MT", P_INT, mmq_mt, 2, 1, 2, "m16 tiles a cuda_mmq.cu warp takes from 16 tokens"),
    NUM(TUNING, "MMQH_MIN", P_INT, mmqh_min, CUDA_PLAN_MMQH_MIN, 1, INT_MAX, "the smallest batch of the f16 products on streamed weights (cuda_mmqh.cu)"),
    FOLLOW("MMQH_MAX", mmqh_max, "MMQ_MAX", 1, INT_MAX, "the first batch cuda_mmqh.cu leaves to the others (at most 65); unset: MMQ_MAX"),
    NUM(TUNING, "MOE_MMQ_MIN", P_INT, moe_mmq_min, CUDA_PLAN_MOE_MMQ_MIN, 1, INT_MAX, "(token, expert) entries from which expert products take cuda_mmq.cu"),
    /* ---- debugging ---- */
    NUM(DEBUG, "ABLATE", P_MASK, ablate, 0, 0, 4095, "classes of ops that launch nothing, to profile a decode step inside its graph (wrong results; the tokens/s say what a class costs, bench/RESULTS.md sessions 12, 14, 16): 1 RMS norms, 2 QK-norm + rope, 4 attention, 8 dense products, 16 MoE router, 32 expert products, 64 adds, 128 MoE h quantize, 256 combine, 512 gate/up, 1024 down, 2048 Gated DeltaNet conv + update"),
    {"BRISK_CUDA_GRAPH_INFO", NULL, CUDA_PLAN_DEBUG, P_ON, 0, 0, 1, F(graph_info), NULL, "=1: print the nodes of each captured step, and which cuBLAS was loaded or why none was"},
    NUM(DEBUG, "TRACE", P_STR, trace, 0, 0, 0, "a trace build (EXTRA_NVCCFLAGS=-DBK_TRACE) records one decode step's timeline into this file: every block's start, the return of its wait on the kernel before and, in every kernel that waits, each warp's end"),
    NUM(DEBUG, "TRACE_STEP", P_INT, trace_step, 40, 1, INT_MAX, "the replayed step BRISK_CUDA_TRACE records"),
};
#define N_ROWS ((int)(sizeof rows / sizeof rows[0]))

#define LIST_DISABLE "BRISK_CUDA_DISABLE"
#define LIST_ENABLE "BRISK_CUDA_ENABLE" /* gone: every path is on by default (refused with a message) */

/* Names that were settings and are not any more. A run that sets one is refused rather than run
 * with the default: an A/B measurement with a stale name must not silently measure the default.
 * Besides these, every path's old own name (BRISK_CUDA_ and its list name in upper case). */
static const char *const removed[] = {
    "BRISK_CUDA_NQ",       "BRISK_CUDA_NORM_FUSE",   "BRISK_CUDA_ATTN_V1",   "BRISK_CUDA_EMB_GPU",
    "BRISK_CUDA_ATTN_BPS", "BRISK_CUDA_MMVS_MIN_MB", "BRISK_CUDA_MMVS_SMEM", "BRISK_CUDA_MMVS_WARPS",
    "BRISK_CUDA_MOE_TNT",  "BRISK_CUDA_MOE_VEC_R",
};
#define N_REMOVED ((int)(sizeof removed / sizeof removed[0]))

/* The BRISK_* names the rest of brisk reads (or its tests and scripts set), so that the unknown-name
 * check leaves them alone; docs/gpu-switches.md lists them too. */
static const struct {
    const char *env, *where, *doc;
} others[] = {
    {"BRISK_SPLIT_CPU", "model", "=1: split the layers as for a GPU, onto a second CPU backend (tests without a GPU)"},
    {"BRISK_CPU_ISA", "backend/cpu", "portable, avx2 or avx512: the CPU kernels' instruction set at most"},
    {"BRISK_CPU_REPACK", "backend/cpu", "=0: decode reads the mapped weights, no repacked copies (cpu_repack.h)"},
    {"BRISK_XCACHE_MISS", "backend/moe", "cpu, copy or map: how the hot-expert cache runs a miss (unset: chosen by the batch)"},
    {"BRISK_XCACHE_READ_EVERY", "backend/moe", "passes between readbacks of the map mode's counters (16)"},
    {"BRISK_XCACHE_SWAP_MARGIN", "backend/moe", "routings by which an expert must be hotter to replace a cached one (6)"},
    {"BRISK_API_KEY", "server", "the key `brisk serve` requires (when neither --api-key nor --api-key-file is given)"},
    {"BRISK_TP_RANK", "engine/tp", "this process's tensor-parallel rank (or OMPI_COMM_WORLD_RANK, PMI_RANK)"},
    {"BRISK_TP_SIZE", "engine/tp", "the tensor-parallel ranks (or OMPI_COMM_WORLD_SIZE, PMI_SIZE)"},
    {"BRISK_TP_DEVICE", "engine/tp", "this rank's CUDA device (default: the launcher's local rank)"},
    {"BRISK_TP_ADDR", "engine/tp", "host:port where rank 0 listens and the other ranks connect"},
    {"BRISK_TP_FD", "engine/tp", "a worker rank's socket to rank 0 (set by brisk itself for local ranks)"},
    {"BRISK_E2E_MODEL", "tests", "the model tests/test_cuda_ops runs end to end"},
    {"BRISK_E2E_MODELS", "tests", "more models, space-separated, for tests/test_cuda_ops's MoE and hybrid checks"},
    {"BRISK_NO_LLAMACPP", "tests", "=1 (exactly; 0 or unset: on): skip the comparisons against llama.cpp, each skip listed"},
    {"BRISK_PP_GPU", "tests", "=1: tests/test_pp's ranks on CUDA backends"},
    {"BRISK_TOK_RANDOM", "tests", "random strings per vocabulary in tests/test_tokenizer"},
    {"BRISK_URL", "tests", "the server the tests/server/*.mjs clients talk to"},
    {"BRISK_URL_BIG", "tests", "a second server (a larger model) for tests/server"},
    {"BRISK_URL_NOCKPT", "tests", "a server without prefix checkpoints for tests/server"},
    {"BRISK_NPM", "tests", "node_modules of the server tests' clients"},
    {"BRISK_KEY", "tests", "the API key the server tests send"},
    {"BRISK_QUEUE_TEST", "tests", "=1: tests/server/concurrency.mjs checks a full queue's 429"},
};
#define N_OTHERS ((int)(sizeof others / sizeof others[0]))

static const char *real_getenv(void *ud, const char *name) {
    (void)ud;
    return getenv(name);
}

static void *field(cuda_plan *p, const plan_row *r) { return (char *)p + r->off; }
static const void *cfield(const cuda_plan *p, const plan_row *r) { return (const char *)p + r->off; }

static const plan_row *find_env(const char *env) {
    for (int i = 0; i < N_ROWS; i++)
        if (rows[i].env && !strcmp(rows[i].env, env)) return &rows[i];
    return NULL;
}

/* A path's old own name into buf: BRISK_CUDA_GRAPHS for graphs. */
static void old_path_name(char *buf, size_t cap, const plan_row *r) {
    int n = snprintf(buf, cap, "BRISK_CUDA_%s", r->flag);
    for (int k = 11; k < n && (size_t)k < cap; k++)
        if (buf[k] >= 'a' && buf[k] <= 'z') buf[k] = (char)(buf[k] - 'a' + 'A');
}

/* Whether name is a path's old own name or a removed setting's. */
static bool is_retired(const char *name) {
    for (int i = 0; i < N_REMOVED; i++)
        if (!strcmp(removed[i], name)) return true;
    for (int i = 0; i < N_ROWS; i++) {
        char old[64];
        if (!rows[i].flag) continue;
        old_path_name(old, sizeof old, &rows[i]);
        if (!strcmp(old, name)) return true;
    }
    return false;
}

static void set_default(cuda_plan *p, const plan_row *r) {
    void *f = field(p, r);
    switch (r->parse) {
    case P_OFF:
    case P_ON: *(bool *)f = false; break;
    case P_INT: *(int *)f = (int)r->def; break;
    case P_I64: *(int64_t *)f = r->def; break;
    case P_MASK: *(unsigned *)f = (unsigned)r->def; break;
    case P_STR: *(const char **)f = NULL; break;
    }
}

void cuda_plan_defaults(cuda_plan *p) {
    memset(p, 0, sizeof *p);
    for (int i = 0; i < N_ROWS; i++) {
        set_default(p, &rows[i]);
        if (rows[i].follows) /* the table lists what a row follows before it */
            *(int *)field(p, &rows[i]) = *(const int *)cfield(p, find_env(rows[i].follows));
    }
}

/* The first failure's message goes to err; later ones are only counted. */
typedef struct {
    char *err;
    size_t cap;
    int n;
} plan_errs;

static void plan_err(plan_errs *e, const char *fmt, ...) BK_PRINTF(2, 3);
static void plan_err(plan_errs *e, const char *fmt, ...) {
    if (e->n++ || !e->err || !e->cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->err, e->cap, fmt, ap);
    va_end(ap);
}

/* Parses s as a decimal integer into *out: an optional '-', then digits without a leading zero
 * ("0" itself aside); false otherwise. " 1", "01" and "-0" are refused rather than read: the old
 * strcmp-based switches and atoi-based numbers read them differently. */
static bool parse_i64(const char *s, int64_t *out) {
    const char *d = s + (s[0] == '-');
    if (*d < '0' || *d > '9' || (*d == '0' && (d[1] || d != s))) return false;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end) return false;
    *out = v;
    return true;
}

/* One row's value; false (and the message) when malformed, the field then keeps its default. */
static bool parse_row(cuda_plan *p, const plan_row *r, const char *s, plan_errs *e) {
    void *f = field(p, r);
    int64_t v = 0;
    switch (r->parse) {
    case P_OFF:
    case P_ON:
        if (strcmp(s, "0") && strcmp(s, "1")) {
            plan_err(e, "%s=%s: expects 0 or 1", r->env, s);
            return false;
        }
        *(bool *)f = r->parse == P_OFF ? s[0] == '0' : s[0] == '1';
        return true;
    case P_INT:
    case P_I64:
    case P_MASK:
        if (!parse_i64(s, &v) || v < r->lo || v > r->hi) {
            if (r->parse == P_MASK)
                plan_err(e, "%s=%s: expects bits, 0 to %" PRId64, r->env, s, r->hi);
            else
                plan_err(e, "%s=%s: expects an integer from %" PRId64 " to %" PRId64, r->env, s, r->lo, r->hi);
            return false;
        }
        if (r->parse == P_INT) *(int *)f = (int)v;
        else if (r->parse == P_I64) *(int64_t *)f = v;
        else *(unsigned *)f = (unsigned)v;
        return true;
    case P_STR: *(const char **)f = s; return true;
    }
    return false;
}

/* A path turned off (on == false) or on by a list. */
static void set_path(cuda_plan *p, const plan_row *r, bool on) {
    *(bool *)field(p, r) = r->parse == P_OFF ? !on : on;
}

/* BRISK_CUDA_DISABLE: names separated by commas or spaces. */
static void parse_list(cuda_plan *p, const char *list_env, const char *s, bool on, plan_errs *e) {
    const char *q = s;
    while (*q) {
        size_t n = strcspn(q, ", \t");
        if (n) {
            const plan_row *r = NULL;
            for (int i = 0; i < N_ROWS && !r; i++)
                if (rows[i].flag && strlen(rows[i].flag) == n && !strncmp(rows[i].flag, q, n)) r = &rows[i];
            if (r) set_path(p, r, on);
            else plan_err(e, "%s: no GPU path is called '%.*s' (`brisk info --gpu` lists them)", list_env, (int)n, q);
        }
        q += n;
        q += strspn(q, ", \t");
    }
}

brisk_status cuda_plan_read(cuda_plan *p, cuda_plan_getenv_fn get, void *ud, char *err, size_t err_cap) {
    if (!get) get = real_getenv;
    plan_errs e = {err, err_cap, 0};
    if (err && err_cap) err[0] = 0;
    memset(p, 0, sizeof *p);
    for (int i = 0; i < N_ROWS; i++) {
        const plan_row *r = &rows[i];
        const char *s = r->env ? get(ud, r->env) : NULL;
        set_default(p, r);
        if (s && *s && parse_row(p, r, s, &e)) continue;
        if (r->follows) *(int *)field(p, r) = *(const int *)cfield(p, find_env(r->follows));
    }
    for (int i = 0; i < N_ROWS; i++) { /* the paths' old own names */
        char old[64];
        if (!rows[i].flag) continue;
        old_path_name(old, sizeof old, &rows[i]);
        const char *s = get(ud, old);
        if (s && *s)
            plan_err(&e, "%s=%s: the paths are not variables of their own any more; %s=%s", old, s, LIST_DISABLE,
                     rows[i].flag);
    }
    for (int i = 0; i < N_REMOVED; i++) {
        const char *s = get(ud, removed[i]);
        if (s && *s) plan_err(&e, "%s=%s: removed from brisk (it did not win: docs/experiments.md)", removed[i], s);
    }
    const char *en = get(ud, LIST_ENABLE), *dis = get(ud, LIST_DISABLE);
    if (en && *en) /* (mmvf was the last path off by default) */
        plan_err(&e, "%s=%s: every GPU path is on by default now; %s turns one off", LIST_ENABLE, en, LIST_DISABLE);
    if (dis) parse_list(p, LIST_DISABLE, dis, false, &e);
    if (e.n > 1 && err && err_cap) {
        size_t len = strlen(err);
        snprintf(err + len, err_cap - len, " (and %d more)", e.n - 1);
    }
    return e.n ? BRISK_ERR_INVALID_ARG : BRISK_OK;
}

brisk_status cuda_plan_read_env(cuda_plan *p) {
    cuda_plan_warn_unknown_once();
    char why[400];
    if (cuda_plan_read(p, NULL, NULL, why, sizeof why) != BRISK_OK)
        return bk_fail(BRISK_ERR_INVALID_ARG, "cuda: %s", why);
    return BRISK_OK;
}

bool cuda_plan_known_name(const char *name) {
    /* (retired names too: cuda_plan_read refuses them with a message of its own) */
    if (!strcmp(name, LIST_DISABLE) || !strcmp(name, LIST_ENABLE) || find_env(name) || is_retired(name)) return true;
    for (int i = 0; i < N_OTHERS; i++)
        if (!strcmp(others[i].env, name)) return true;
    return false;
}

int cuda_plan_check_names(char *const *env, FILE *warn) {
    int n = 0;
    for (; env && *env; env++) {
        const char *eq = strchr(*env, '=');
        size_t len = eq ? (size_t)(eq - *env) : strlen(*env);
        char name[128];
        if (strncmp(*env, "BRISK_", 6) || len >= sizeof name) continue;
        memcpy(name, *env, len);
        name[len] = 0;
        if (cuda_plan_known_name(name)) continue;
        n++;
        if (warn)
            fprintf(warn, "brisk: warning: %s is not a setting brisk reads (ignored; `brisk info --gpu` lists them)\n",
                    name);
    }
    return n;
}

void cuda_plan_warn_unknown_once(void) {
    static atomic_flag done = ATOMIC_FLAG_INIT;
    if (!atomic_flag_test_and_set(&done)) cuda_plan_check_names(environ, stderr);
}

static const char *class_name(cuda_plan_class c) {
    return c == CUDA_PLAN_PATH ? "path" : c == CUDA_PLAN_TUNING ? "tuning" : "debug";
}

/* A row's value in p, written as the environment would set it. */
static void format_value(char *buf, size_t cap, const cuda_plan *p, const plan_row *r) {
    const void *f = cfield(p, r);
    switch (r->parse) {
    case P_OFF: snprintf(buf, cap, "%s", *(const bool *)f ? "off" : "on"); break;
    case P_ON: snprintf(buf, cap, "%s", *(const bool *)f ? "on" : "off"); break;
    case P_INT: snprintf(buf, cap, "%d", *(const int *)f); break;
    case P_I64: snprintf(buf, cap, "%" PRId64, *(const int64_t *)f); break;
    case P_MASK: snprintf(buf, cap, "%u", *(const unsigned *)f); break;
    case P_STR: snprintf(buf, cap, "%s", *(const char *const *)f ? *(const char *const *)f : "-"); break;
    }
}

/* A row's default as the docs give it (a followed row names what it follows). */
static void format_default(char *buf, size_t cap, const cuda_plan *defaults, const plan_row *r) {
    if (r->follows) snprintf(buf, cap, "=%s", r->follows + strlen("BRISK_CUDA_"));
    else format_value(buf, cap, defaults, r);
}

void cuda_plan_print(FILE *f, const cuda_plan *p) {
    cuda_plan d;
    cuda_plan_defaults(&d);
    fprintf(f, "%-28s %-12s %-16s %-7s %s\n", "name", "value", "default", "class", "what");
    for (int i = 0; i < N_ROWS; i++) {
        const plan_row *r = &rows[i];
        char v[64], dv[64], shown[64];
        format_value(v, sizeof v, p, r);
        format_value(dv, sizeof dv, &d, r);
        format_default(shown, sizeof shown, &d, r);
        fprintf(f, "%-28s %c%-11s %-16s %-7s %s\n", r->env ? r->env : r->flag, strcmp(v, dv) ? '*' : ' ', v, shown,
                class_name(r->cls), r->doc);
    }
    fprintf(f, "\n* differs from the default. %s=name,... turns paths off.\n", LIST_DISABLE);
}

/* Markdown cells hold no '|'. */
static void md_cell(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '|') fputc('\\', f);
        fputc(*s, f);
    }
}

void cuda_plan_print_markdown(FILE *f) {
    cuda_plan d;
    cuda_plan_defaults(&d);
    fputs("# GPU switches\n\n"
          "<!-- Generated from src/backend/cuda/cuda_plan.c by `make docs` (`brisk info --gpu --markdown`);\n"
          "     tests/t_gpu_switches.sh fails when this page and the table differ. Edit the table, not this page. -->\n\n"
          "The CUDA backend reads these environment variables when it is created. `brisk info --gpu` prints\n"
          "the values in effect. A malformed value (not 0 or 1 for a switch, a number out of its range, an\n"
          "unknown name in a list) is an error: the backend is not created. An empty value counts as unset.\n"
          "A `BRISK_*` name that nothing reads is warned about once on stderr.\n\n"
          "## Paths\n\n"
          "Every GPU optimization can be turned off, for A/B runs and for bisecting a wrong result, with\n"
          "one list: `BRISK_CUDA_DISABLE=graphs,pdl,mmvs` (names separated by commas or spaces). Every path\n"
          "is on by default (a path lands default-on with the measurement that shows it wins, or not at\n"
          "all), so `BRISK_CUDA_ENABLE` is gone and refused. Before sm_90, `pdl`, `mmvs`, `mmqh` and `mmvf`\n"
          "are off whatever is set. The paths\n"
          "are not variables of their own: a path's old name (`BRISK_CUDA_GRAPHS=0`) is refused with the\n"
          "list entry to use instead, and so is the name of a setting that was removed (below).\n\n"
          "| variable | takes |\n|---|---|\n"
          "| `" LIST_DISABLE "` | names of the paths below to turn off |\n\n",
          f);
    for (int pass = 0; pass < 3; pass++) {
        static const char *const heads[3] = {
            "| name | default | what it does when on |\n|---|---|---|\n",
            "## Tuning\n\n| variable | default | range | meaning |\n|---|---|---|---|\n",
            "## Debugging\n\n| variable | default | meaning |\n|---|---|---|\n"};
        fputs(heads[pass], f);
        for (int i = 0; i < N_ROWS; i++) {
            const plan_row *r = &rows[i];
            if ((int)r->cls != pass) continue;
            char dv[64];
            format_default(dv, sizeof dv, &d, r);
            if (pass == CUDA_PLAN_PATH) fprintf(f, "| `%s` | %s | ", r->flag, dv);
            else fprintf(f, "| `%s` | %s | ", r->env, r->follows ? dv + 1 : r->parse == P_STR ? "unset" : dv);
            if (pass == CUDA_PLAN_TUNING) {
                if (r->parse == P_MASK) fprintf(f, "bits, 0-%" PRId64 " | ", r->hi);
                else if (r->hi == INT_MAX || r->hi == INT64_MAX) fprintf(f, "%" PRId64 "- | ", r->lo);
                else fprintf(f, "%" PRId64 "-%" PRId64 " | ", r->lo, r->hi);
            }
            md_cell(f, r->doc);
            fputs(" |\n", f);
        }
        fputs("\n", f);
    }
    fputs("A trace build (`make BUILD=build-trace EXTRA_NVCCFLAGS=-DBK_TRACE build-trace/brisk`) records\n"
          "one decode step from inside its kernels with `BRISK_CUDA_TRACE=FILE`; `python3\n"
          "bench/cuda/trace_step.py FILE` prints the launches and where the step's time goes\n"
          "(`bench/cuda/h200_trace.sh` runs it on the GPU machine).\n\n"
          "## Removed\n\n"
          "These names are refused when set: their paths lost their measurements and left the source\n"
          "([experiments.md](experiments.md) keeps each one's figures and last commit).\n\n",
          f);
    for (int i = 0; i < N_REMOVED; i++) fprintf(f, "%s`%s`", i ? ", " : "", removed[i]);
    fputs(".\n\n"
          "## Elsewhere in brisk\n\n"
          "Read by other modules (or set by the tests and their scripts); listed so the unknown-name\n"
          "check knows them.\n\n| variable | module | meaning |\n|---|---|---|\n",
          f);
    for (int i = 0; i < N_OTHERS; i++) {
        fprintf(f, "| `%s` | %s | ", others[i].env, others[i].where);
        md_cell(f, others[i].doc);
        fputs(" |\n", f);
    }
}

int cuda_plan_rows(void) { return N_ROWS; }

bool cuda_plan_row(int i, const char **env, const char **flag, cuda_plan_class *cls) {
    if (i < 0 || i >= N_ROWS) return false;
    if (env) *env = rows[i].env;
    if (flag) *flag = rows[i].flag;
    if (cls) *cls = rows[i].cls;
    return true;
}
