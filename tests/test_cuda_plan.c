/* test_cuda_plan.c — the CUDA backend's settings table (backend/cuda/cuda_plan.h), on the CPU:
 * environments fed through the injectable getenv, and the plan's fields checked against what the
 * scattered getenv calls it replaced made of them. */
#include <limits.h>

#include "backend/cuda/cuda_plan.h"
#include "test.h"

/* A NULL-terminated list of "NAME=VALUE" strings, read as the environment. */
static const char *fake_getenv(void *ud, const char *name) {
    size_t n = strlen(name);
    for (const char *const *e = (const char *const *)ud; *e; e++)
        if (!strncmp(*e, name, n) && (*e)[n] == '=') return *e + n + 1;
    return NULL;
}

static brisk_status read_env(cuda_plan *p, const char *const *env, char *err, size_t cap) {
    return cuda_plan_read(p, fake_getenv, (void *)env, err, cap);
}

/* *p: the plan of env, which must parse (read in place: memcmp below compares the padding too,
 * which a struct copy need not keep). */
static void plan_into(cuda_plan *p, const char *const *env) {
    char err[256];
    brisk_status s = read_env(p, env, err, sizeof err);
    if (s != BRISK_OK) fprintf(stderr, "  unexpected: %s\n", err);
    CHECK(s == BRISK_OK);
}
static cuda_plan plan_of(const char *const *env) {
    cuda_plan p;
    plan_into(&p, env);
    return p;
}

/* True when env is refused with a message that contains want. */
static bool refused(const char *const *env, const char *want) {
    cuda_plan p;
    char err[256];
    if (read_env(&p, env, err, sizeof err) != BRISK_ERR_INVALID_ARG) return false;
    if (!strstr(err, want)) fprintf(stderr, "  message '%s' lacks '%s'\n", err, want);
    return strstr(err, want) != NULL;
}

static void test_defaults(void) {
    const char *env[] = {NULL};
    cuda_plan p, d;
    plan_into(&p, env);
    cuda_plan_defaults(&d);
    CHECK(!memcmp(&p, &d, sizeof p));
    /* the values cuda_init used to fall back to */
    CHECK(!p.graphs_off && !p.pdl_off && !p.mma_off && !p.mmq_off && !p.mmvs_off && !p.fa_off && !p.weight_pool_off);
    CHECK(!p.mmvf_on && !p.norm_fuse_on && !p.attn_v1 && !p.emb_gpu && !p.graph_info);
    CHECK(p.cublas == 2 && p.attn_mma_min == 1 && p.q6k_quad == 1 && p.nq == 0 && p.ablate == 0);
    CHECK(p.mmvs_min_in == 2048 && p.mmvs_warps == 16 && p.mmvs_min_mb == 0 && p.mmvs_smem == 0);
    CHECK(p.mmvs_pre == 1 && p.mmvs_seg_bytes == -1 && p.attn_bps == 0 && p.attn_min_chunk == 128);
    CHECK(p.mmq_min == 8 && p.mmq_max == 48 && p.mmq_mt == 2 && p.mmqh_min == 17 && p.mmqh_max == 48);
    CHECK(p.moe_mmq_min == 64 && p.moe_tnt == 0 && p.moe_vec_r == 2);
    CHECK(p.cublas_min_tok == 48 && p.cublas_scratch_mb == 64);
    CHECK(p.trace == NULL && p.trace_step == 40);
}

/* Every path's own name: =0 turns a default path off, =1 turns an off-by-default one on; the
 * other value leaves the default. */
static void test_polarity(void) {
    const char *off[] = {"BRISK_CUDA_GRAPHS=0", "BRISK_CUDA_MMVS=0", "BRISK_CUDA_KV_FUSE=0", "BRISK_CUDA_GD_CONV=0", NULL};
    cuda_plan p = plan_of(off);
    CHECK(p.graphs_off && p.mmvs_off && p.kvfuse_off && p.gd_conv_off && !p.pdl_off && !p.mma_off);
    const char *on_again[] = {"BRISK_CUDA_GRAPHS=1", "BRISK_CUDA_MMVF=0", NULL};
    p = plan_of(on_again);
    CHECK(!p.graphs_off && !p.mmvf_on);
    const char *on[] = {"BRISK_CUDA_MMVF=1", "BRISK_CUDA_NORM_FUSE=1", "BRISK_CUDA_ATTN_V1=1", "BRISK_CUDA_EMB_GPU=1",
                        "BRISK_CUDA_GRAPH_INFO=1", NULL};
    p = plan_of(on);
    CHECK(p.mmvf_on && p.norm_fuse_on && p.attn_v1 && p.emb_gpu && p.graph_info);
    const char *cublas[][2] = {{"BRISK_CUDA_CUBLAS=0", NULL}, {"BRISK_CUDA_CUBLAS=1", NULL}};
    CHECK(plan_of(cublas[0]).cublas == 0 && plan_of(cublas[1]).cublas == 1);
    /* every path row: its own name at 0 (or 1 for those off by default) flips exactly one field */
    cuda_plan d;
    cuda_plan_defaults(&d);
    for (int i = 0; i < cuda_plan_rows(); i++) {
        const char *name, *flag;
        cuda_plan_class cls;
        cuda_plan_row(i, &name, &flag, &cls);
        if (cls != CUDA_PLAN_PATH) continue;
        CHECK(flag != NULL);
        char set0[64], set1[64];
        snprintf(set0, sizeof set0, "%s=0", name);
        snprintf(set1, sizeof set1, "%s=1", name);
        const char *e0[] = {set0, NULL}, *e1[] = {set1, NULL};
        cuda_plan p0, p1;
        plan_into(&p0, e0);
        plan_into(&p1, e1);
        CHECK(memcmp(&p0, &d, sizeof d) || memcmp(&p1, &d, sizeof d)); /* one of them is not the default */
    }
}

static void test_numbers(void) {
    const char *env[] = {"BRISK_CUDA_MMVS_MIN_IN=0", "BRISK_CUDA_MMVS_WARPS=8", "BRISK_CUDA_MMVS_MIN_MB=1.5",
                         "BRISK_CUDA_MMVS_SMEM=96", "BRISK_CUDA_MMVS_PRE=0", "BRISK_CUDA_MMVS_SEG=1024",
                         "BRISK_CUDA_ATTN_BPS=2", "BRISK_CUDA_ATTN_MINCHUNK=100", "BRISK_CUDA_ATTN_MMA=0",
                         "BRISK_CUDA_Q6K_QUAD=2", "BRISK_CUDA_MMQ_MIN=4", "BRISK_CUDA_MMQ_MT=1",
                         "BRISK_CUDA_MMQH_MIN=2", "BRISK_CUDA_MOE_MMQ_MIN=16", "BRISK_CUDA_MOE_TNT=32",
                         "BRISK_CUDA_MOE_VEC_R=4", "BRISK_CUDA_CUBLAS_SCRATCH_MB=1", "BRISK_CUDA_TRACE=/tmp/t",
                         "BRISK_CUDA_TRACE_STEP=7", "BRISK_CUDA_NQ=3", "BRISK_CUDA_ABLATE=2064", NULL};
    cuda_plan p = plan_of(env);
    CHECK(p.mmvs_min_in == 0 && p.mmvs_warps == 8 && p.mmvs_min_mb == 1.5 && p.mmvs_smem == 96);
    CHECK(p.mmvs_pre == 0 && p.mmvs_seg_bytes == 1024 && p.attn_bps == 2 && p.attn_min_chunk == 100);
    CHECK(p.attn_mma_min == 0 && p.q6k_quad == 2 && p.mmq_min == 4 && p.mmq_mt == 1 && p.mmqh_min == 2);
    CHECK(p.moe_mmq_min == 16 && p.moe_tnt == 32 && p.moe_vec_r == 4 && p.cublas_scratch_mb == 1);
    CHECK(p.trace && !strcmp(p.trace, "/tmp/t") && p.trace_step == 7 && p.nq == 3 && p.ablate == 2064);
    const char *seg0[] = {"BRISK_CUDA_MMVS_SEG=0", "BRISK_CUDA_ABLATE=2048", NULL};
    p = plan_of(seg0);
    CHECK(p.mmvs_seg_bytes == 0 && p.ablate == 2048);
}

/* MMQ_MAX unset follows CUBLAS_MIN_TOK; MMQH_MAX unset follows MMQ_MAX (as cuda_init chained them). */
static void test_follows(void) {
    const char *blas[] = {"BRISK_CUDA_CUBLAS_MIN_TOK=128", NULL};
    cuda_plan p = plan_of(blas);
    CHECK(p.cublas_min_tok == 128 && p.mmq_max == 128 && p.mmqh_max == 128);
    const char *mq[] = {"BRISK_CUDA_CUBLAS_MIN_TOK=128", "BRISK_CUDA_MMQ_MAX=32", NULL};
    p = plan_of(mq);
    CHECK(p.mmq_max == 32 && p.mmqh_max == 32);
    const char *mh[] = {"BRISK_CUDA_MMQH_MAX=40", NULL};
    p = plan_of(mh);
    CHECK(p.mmq_max == 48 && p.mmqh_max == 40);
}

static void test_lists(void) {
    const char *dis[] = {"BRISK_CUDA_DISABLE=mmvs,graphs, pdl cublas,attn_mma,q6k_quad,,", NULL};
    cuda_plan p;
    plan_into(&p, dis);
    CHECK(p.mmvs_off && p.graphs_off && p.pdl_off && p.cublas == 0 && p.attn_mma_min == 0 && p.q6k_quad == 0);
    CHECK(!p.mma_off && !p.fa_off);
    /* the same as the old names */
    const char *old[] = {"BRISK_CUDA_MMVS=0", "BRISK_CUDA_GRAPHS=0", "BRISK_CUDA_PDL=0", "BRISK_CUDA_CUBLAS=0",
                         "BRISK_CUDA_ATTN_MMA=0", "BRISK_CUDA_Q6K_QUAD=0", NULL};
    cuda_plan q;
    plan_into(&q, old);
    CHECK(!memcmp(&p, &q, sizeof p));
    const char *en[] = {"BRISK_CUDA_ENABLE=mmvf,norm_fuse,attn_v1,emb_gpu", NULL};
    p = plan_of(en);
    CHECK(p.mmvf_on && p.norm_fuse_on && p.attn_v1 && p.emb_gpu);
    /* the lists override the old names, DISABLE last */
    const char *both[] = {"BRISK_CUDA_MMA=0", "BRISK_CUDA_ATTN_MMA=0", "BRISK_CUDA_GRAPHS=1", "BRISK_CUDA_MMVF=1",
                          "BRISK_CUDA_ENABLE=mma,attn_mma,fa", "BRISK_CUDA_DISABLE=graphs,mmvf,fa", NULL};
    p = plan_of(both);
    CHECK(!p.mma_off && p.attn_mma_min == 1 && p.graphs_off && !p.mmvf_on && p.fa_off);
    /* every flag of the table works in the list */
    for (int i = 0; i < cuda_plan_rows(); i++) {
        const char *name, *flag;
        cuda_plan_row(i, &name, &flag, NULL);
        if (!flag) continue;
        char list[96];
        snprintf(list, sizeof list, "BRISK_CUDA_DISABLE=%s", flag);
        const char *e[] = {list, NULL};
        (void)plan_of(e);
    }
}

static void test_malformed(void) {
    const char *b[] = {"BRISK_CUDA_GRAPHS=off", NULL};
    CHECK(refused(b, "BRISK_CUDA_GRAPHS=off: expects 0 or 1"));
    const char *n[] = {"BRISK_CUDA_MMVS_WARPS=abc", NULL};
    CHECK(refused(n, "BRISK_CUDA_MMVS_WARPS=abc: expects an integer from 8 to 16"));
    const char *r[] = {"BRISK_CUDA_MMVS_WARPS=32", NULL};
    CHECK(refused(r, "from 8 to 16"));
    const char *t[] = {"BRISK_CUDA_MMQ_MIN=12x", NULL};
    CHECK(refused(t, "BRISK_CUDA_MMQ_MIN=12x"));
    const char *m[] = {"BRISK_CUDA_NQ=4", NULL};
    CHECK(refused(m, "expects bits, 0 to 3"));
    const char *f[] = {"BRISK_CUDA_MMVS_MIN_MB=-1", NULL};
    CHECK(refused(f, "BRISK_CUDA_MMVS_MIN_MB=-1"));
    const char *big[] = {"BRISK_CUDA_ATTN_MMA=99999999999", NULL};
    CHECK(refused(big, "BRISK_CUDA_ATTN_MMA"));
    const char *l[] = {"BRISK_CUDA_DISABLE=graphs,mmsv", NULL};
    CHECK(refused(l, "no GPU path is called 'mmsv'"));
    const char *two[] = {"BRISK_CUDA_GRAPHS=2", "BRISK_CUDA_PDL=x", NULL};
    CHECK(refused(two, "(and 1 more)"));
    /* the rest of the plan is filled all the same, the malformed ones at their defaults */
    const char *mix[] = {"BRISK_CUDA_MMVS_WARPS=abc", "BRISK_CUDA_MMVS=0", NULL};
    cuda_plan p;
    CHECK(read_env(&p, mix, NULL, 0) == BRISK_ERR_INVALID_ARG);
    CHECK(p.mmvs_warps == 16 && p.mmvs_off);
    /* empty is unset */
    const char *empty[] = {"BRISK_CUDA_MMVS_WARPS=", "BRISK_CUDA_GRAPHS=", "BRISK_CUDA_DISABLE=", NULL};
    p = plan_of(empty);
    CHECK(p.mmvs_warps == 16 && !p.graphs_off);
}

static void test_unknown_names(void) {
    char *env[] = {"PATH=/bin", "BRISK_CUDA_GRAPHS=0", "BRISK_CUDA_DISABLE=mmvs", "BRISK_SPLIT_CPU=1",
                   "BRISK_XCACHE_MISS=cpu", "BRISK_E2E_MODELS=", "BRISK_CUDA_GRAHPS=0", "BRISK_CUDA_MMQ_V1=1",
                   "BRISK_TP_RANK=0", "BRISKLY=1", NULL};
    CHECK(cuda_plan_check_names(env, NULL) == 2);
    FILE *f = tmpfile();
    CHECK(f != NULL);
    if (!f) return;
    CHECK(cuda_plan_check_names(env, f) == 2);
    rewind(f);
    char buf[1024] = {0};
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    CHECK(strstr(buf, "BRISK_CUDA_GRAHPS is not a setting") && strstr(buf, "BRISK_CUDA_MMQ_V1"));
    CHECK(!strstr(buf, "BRISK_SPLIT_CPU") && !strstr(buf, "PATH"));
    CHECK(cuda_plan_known_name("BRISK_CUDA_ENABLE") && cuda_plan_known_name("BRISK_CPU_ISA"));
    CHECK(!cuda_plan_known_name("BRISK_CUDA_MMQ_V1"));
}

/* Names and flags are unique, and every row prints. */
static void test_table(void) {
    int n = cuda_plan_rows(), paths = 0;
    CHECK(n > 60);
    for (int i = 0; i < n; i++) {
        const char *a, *fa;
        cuda_plan_class c;
        CHECK(cuda_plan_row(i, &a, &fa, &c));
        CHECK(!strncmp(a, "BRISK_CUDA_", 11));
        CHECK((c == CUDA_PLAN_PATH) == (fa != NULL));
        paths += c == CUDA_PLAN_PATH;
        for (int j = i + 1; j < n; j++) {
            const char *b, *fb;
            cuda_plan_row(j, &b, &fb, NULL);
            CHECK(strcmp(a, b));
            CHECK(!fa || !fb || strcmp(fa, fb));
        }
    }
    CHECK(paths >= 40);
    CHECK(!cuda_plan_row(n, NULL, NULL, NULL));
    FILE *f = tmpfile();
    if (!f) return;
    const char *env[] = {"BRISK_CUDA_MMVS_WARPS=8", NULL};
    cuda_plan p = plan_of(env);
    cuda_plan_print(f, &p);
    cuda_plan_print_markdown(f);
    long len = ftell(f);
    rewind(f);
    char *buf = calloc(1, (size_t)len + 1);
    if (buf && fread(buf, 1, (size_t)len, f) == (size_t)len) {
        CHECK(strstr(buf, "BRISK_CUDA_MMVS_WARPS        *8"));
        CHECK(strstr(buf, "| `graphs` | `BRISK_CUDA_GRAPHS` | on |"));
        CHECK(strstr(buf, "| `BRISK_CUDA_MMQ_MAX` | CUBLAS_MIN_TOK |"));
    }
    free(buf);
    fclose(f);
}

/* ---- the same backend as before ----
 * What cuda_init, cuda_blas_init, cuda_graph_init, cuda_trace_init, bind_weight and model.c made
 * of the environment before the table: their getenv expressions, copied (legacy), against the
 * plan converted as cuda_init now converts it (from_plan; sm_90: the compute-capability terms
 * left out of both). Every environment the plan accepts must give the same fields. */
typedef struct {
    bool attn_fuse_off, attn_adapt_off, attn_gadapt_off, attn_merge_off, mma_off, attn_gqa_off, moe_q8_off, attn_v1;
    bool mmvq_slices_off, fa_off, mmvq_multi_off, mmvs_off, mmvf_on, norm_fuse_on, mmvs_wide_off, router_pf_off;
    bool moe_comb_off, dec_qtypes_off, pdl_off, gd_chunk_off, glu_off, qkrope_off, kvfuse_off, normq_off, mmq_off;
    bool mmqh_off, moe_mmq_off, moe_vec_off, attnq_off, attn_rope_off, attn_gate_off, router_fuse_off;
    bool router_join_off, gd_conv_off, gd_fuse_off, moe_shared_off, route_warp_off;
    int attn_bps, nq, mmvs_warps, mmvs_smem, mmvs_pre, attn_mma_min, attn_min_chunk, mmvs_seg_bytes, q6k_quad;
    int mmq_min, mmq_mt, mmq_max, mmqh_min, mmqh_max, moe_vec_r, moe_mmq_min, moe_tnt;
    unsigned ablate;
    int64_t mmvs_min_in, mmvs_min_bytes;
    /* cuda_blas.cu, cuda_graph.cu, cuda_trace.cu, bind_weight, model.c */
    bool blas_off, blas_verbose, graphs_off, graph_info, pool_off, emb_gpu;
    int blas_min_tok;
    size_t blas_budget;
    const char *trace;
    long trace_step;
} bk_fields;

static const char *const *legacy_env;
enum { MMQ_MIN_TOK = 8, MMQ_MAX_TOK = 48, MMQH_MIN_TOK = 17, MMQH_MAX_N = 64, MOE_MMQ_MIN_ENT = 64, cc_major = 9 };
static const char *G(const char *name) { return fake_getenv((void *)legacy_env, name); }

static void legacy(bk_fields *o) {
    o->attn_fuse_off = G("BRISK_CUDA_ATTN_FUSE") && !strcmp(G("BRISK_CUDA_ATTN_FUSE"), "0");
    o->attn_adapt_off = G("BRISK_CUDA_ATTN_ADAPT") && !strcmp(G("BRISK_CUDA_ATTN_ADAPT"), "0");
    o->attn_gadapt_off = G("BRISK_CUDA_ATTN_GADAPT") && !strcmp(G("BRISK_CUDA_ATTN_GADAPT"), "0");
    o->attn_bps = G("BRISK_CUDA_ATTN_BPS") ? atoi(G("BRISK_CUDA_ATTN_BPS")) : 0;
    o->attn_merge_off = G("BRISK_CUDA_ATTN_MERGE") && !strcmp(G("BRISK_CUDA_ATTN_MERGE"), "0");
    const char *mma = G("BRISK_CUDA_MMA");
    o->mma_off = mma && !strcmp(mma, "0");
    const char *gqa = G("BRISK_CUDA_ATTN_GQA");
    o->attn_gqa_off = gqa && !strcmp(gqa, "0");
    const char *mq8 = G("BRISK_CUDA_MOE_Q8");
    o->moe_q8_off = mq8 && !strcmp(mq8, "0");
    const char *av1 = G("BRISK_CUDA_ATTN_V1");
    o->attn_v1 = av1 && !strcmp(av1, "1");
    const char *sl = G("BRISK_CUDA_MMVQ_SLICES");
    o->mmvq_slices_off = sl && !strcmp(sl, "0");
    o->fa_off = G("BRISK_CUDA_FA") && !strcmp(G("BRISK_CUDA_FA"), "0");
    o->mmvq_multi_off = G("BRISK_CUDA_MMVQ_MULTI") && !strcmp(G("BRISK_CUDA_MMVQ_MULTI"), "0");
    o->mmvs_off = G("BRISK_CUDA_MMVS") && !strcmp(G("BRISK_CUDA_MMVS"), "0");
    o->nq = G("BRISK_CUDA_NQ") ? atoi(G("BRISK_CUDA_NQ")) & 3 : 0;
    o->mmvf_on = G("BRISK_CUDA_MMVF") && !strcmp(G("BRISK_CUDA_MMVF"), "1");
    o->norm_fuse_on = G("BRISK_CUDA_NORM_FUSE") && !strcmp(G("BRISK_CUDA_NORM_FUSE"), "1");
    o->mmvs_min_in = G("BRISK_CUDA_MMVS_MIN_IN") ? atoll(G("BRISK_CUDA_MMVS_MIN_IN")) : 2048;
    o->mmvs_wide_off = G("BRISK_CUDA_MMVS_WIDE") && !strcmp(G("BRISK_CUDA_MMVS_WIDE"), "0");
    o->mmvs_warps = G("BRISK_CUDA_MMVS_WARPS") ? atoi(G("BRISK_CUDA_MMVS_WARPS")) : 16;
    o->mmvs_min_bytes = G("BRISK_CUDA_MMVS_MIN_MB") ? (int64_t)(atof(G("BRISK_CUDA_MMVS_MIN_MB")) * 1048576.0) : 0;
    o->router_pf_off = G("BRISK_CUDA_ROUTER_PF") && !strcmp(G("BRISK_CUDA_ROUTER_PF"), "0");
    o->moe_comb_off = G("BRISK_CUDA_MOE_COMB") && !strcmp(G("BRISK_CUDA_MOE_COMB"), "0");
    o->mmvs_smem = G("BRISK_CUDA_MMVS_SMEM") ? atoi(G("BRISK_CUDA_MMVS_SMEM")) * 1024 : 0;
    o->dec_qtypes_off = G("BRISK_CUDA_DEC_QTYPES") && !strcmp(G("BRISK_CUDA_DEC_QTYPES"), "0");
    o->mmvs_pre = G("BRISK_CUDA_MMVS_PRE") ? atoi(G("BRISK_CUDA_MMVS_PRE")) : 1;
    o->attn_mma_min = G("BRISK_CUDA_ATTN_MMA") ? atoi(G("BRISK_CUDA_ATTN_MMA")) : 1;
    o->attn_min_chunk = G("BRISK_CUDA_ATTN_MINCHUNK") ? atoi(G("BRISK_CUDA_ATTN_MINCHUNK")) / 32 * 32 : 128;
    if (o->attn_min_chunk < 0 || o->attn_min_chunk > 8192) o->attn_min_chunk = 0;
    o->mmvs_seg_bytes = G("BRISK_CUDA_MMVS_SEG") ? atoi(G("BRISK_CUDA_MMVS_SEG")) : -1;
    const char *q6q = G("BRISK_CUDA_Q6K_QUAD");
    o->q6k_quad = q6q ? atoi(q6q) : 1;
    o->pdl_off = cc_major < 9 || (G("BRISK_CUDA_PDL") && !strcmp(G("BRISK_CUDA_PDL"), "0"));
    o->gd_chunk_off = G("BRISK_CUDA_GD_CHUNK") && !strcmp(G("BRISK_CUDA_GD_CHUNK"), "0");
    const char *glu = G("BRISK_CUDA_GLU"), *qkr = G("BRISK_CUDA_QKROPE"), *nq = G("BRISK_CUDA_NORMQ");
    o->glu_off = glu && !strcmp(glu, "0");
    o->qkrope_off = qkr && !strcmp(qkr, "0");
    o->kvfuse_off = G("BRISK_CUDA_KV_FUSE") && !strcmp(G("BRISK_CUDA_KV_FUSE"), "0");
    o->normq_off = nq && !strcmp(nq, "0");
    /* mmq: below cuBLAS's first batch (the same BRISK_CUDA_CUBLAS_MIN_TOK cuda_blas.cu reads) */
    const char *mq = G("BRISK_CUDA_MMQ"), *mqmin = G("BRISK_CUDA_MMQ_MIN"),
               *mqmax = G("BRISK_CUDA_MMQ_MAX"), *bmin = G("BRISK_CUDA_CUBLAS_MIN_TOK");
    o->mmq_off = mq && !strcmp(mq, "0");
    o->mmq_min = mqmin && atoi(mqmin) > 0 ? atoi(mqmin) : MMQ_MIN_TOK;
    o->mmq_mt = G("BRISK_CUDA_MMQ_MT") && atoi(G("BRISK_CUDA_MMQ_MT")) == 1 ? 1 : 2;
    o->mmq_max = mqmax && atoi(mqmax) > 0 ? atoi(mqmax) : bmin && atoi(bmin) > 0 ? atoi(bmin) : MMQ_MAX_TOK;
    const char *mh = G("BRISK_CUDA_MMQH"), *mhmin = G("BRISK_CUDA_MMQH_MIN"),
               *mhmax = G("BRISK_CUDA_MMQH_MAX");
    o->mmqh_off = (mh && !strcmp(mh, "0")) || cc_major < 9; /* the bulk-copy engine: sm_90 */
    o->mmqh_min = mhmin && atoi(mhmin) > 0 ? atoi(mhmin) : MMQH_MIN_TOK;
    o->mmqh_max = mhmax && atoi(mhmax) > 0 ? atoi(mhmax) : o->mmq_max;
    if (o->mmqh_max > MMQH_MAX_N + 1) o->mmqh_max = MMQH_MAX_N + 1;
    const char *mm = G("BRISK_CUDA_MOE_MMQ"), *mmmin = G("BRISK_CUDA_MOE_MMQ_MIN");
    o->moe_mmq_off = mm && !strcmp(mm, "0");
    o->moe_vec_off = G("BRISK_CUDA_MOE_VEC") && !strcmp(G("BRISK_CUDA_MOE_VEC"), "0");
    o->moe_vec_r = G("BRISK_CUDA_MOE_VEC_R") ? atoi(G("BRISK_CUDA_MOE_VEC_R")) : 2;
    o->ablate = G("BRISK_CUDA_ABLATE") ? (unsigned)atoi(G("BRISK_CUDA_ABLATE")) : 0;
    o->attnq_off = G("BRISK_CUDA_ATTNQ") && !strcmp(G("BRISK_CUDA_ATTNQ"), "0");
    o->attn_rope_off = G("BRISK_CUDA_ATTN_ROPE") && !strcmp(G("BRISK_CUDA_ATTN_ROPE"), "0");
    o->attn_gate_off = G("BRISK_CUDA_ATTN_GATE") && !strcmp(G("BRISK_CUDA_ATTN_GATE"), "0");
    o->router_fuse_off = G("BRISK_CUDA_ROUTER_FUSE") && !strcmp(G("BRISK_CUDA_ROUTER_FUSE"), "0");
    o->router_join_off = G("BRISK_CUDA_ROUTER_JOIN") && !strcmp(G("BRISK_CUDA_ROUTER_JOIN"), "0");
    o->gd_conv_off = G("BRISK_CUDA_GD_CONV") && !strcmp(G("BRISK_CUDA_GD_CONV"), "0");
    o->gd_fuse_off = G("BRISK_CUDA_GD_FUSE") && !strcmp(G("BRISK_CUDA_GD_FUSE"), "0");
    o->moe_shared_off = G("BRISK_CUDA_MOE_SHARED") && !strcmp(G("BRISK_CUDA_MOE_SHARED"), "0");
    o->route_warp_off = G("BRISK_CUDA_ROUTE_WARP") && !strcmp(G("BRISK_CUDA_ROUTE_WARP"), "0");
    o->moe_mmq_min = mmmin && atoi(mmmin) > 0 ? atoi(mmmin) : MOE_MMQ_MIN_ENT;
    o->moe_tnt = G("BRISK_CUDA_MOE_TNT") ? atoi(G("BRISK_CUDA_MOE_TNT")) : 0;

    const char *on = G("BRISK_CUDA_CUBLAS"), *mt = G("BRISK_CUDA_CUBLAS_MIN_TOK"), *mb = G("BRISK_CUDA_CUBLAS_SCRATCH_MB");
    o->blas_off = on && !strcmp(on, "0");
    o->blas_verbose = on && !strcmp(on, "1");
    o->blas_min_tok = mt && atoi(mt) > 0 ? atoi(mt) : 48;
    o->blas_budget = (size_t)(mb && atoi(mb) > 0 ? atoi(mb) : 64) << 20;
    o->graphs_off = G("BRISK_CUDA_GRAPHS") && !strcmp(G("BRISK_CUDA_GRAPHS"), "0");
    o->graph_info = G("BRISK_CUDA_GRAPH_INFO") != NULL;
    o->pool_off = G("BRISK_CUDA_WEIGHT_POOL") && !strcmp(G("BRISK_CUDA_WEIGHT_POOL"), "0");
    o->emb_gpu = G("BRISK_CUDA_EMB_GPU") && !strcmp(G("BRISK_CUDA_EMB_GPU"), "1");
    o->trace = G("BRISK_CUDA_TRACE");
    if (o->trace && !*o->trace) o->trace = NULL;
    const char *st = G("BRISK_CUDA_TRACE_STEP");
    o->trace_step = st ? atol(st) : 40;
    if (o->trace_step < 1) o->trace_step = 1;
}

/* As cuda_init (and the others) fill the backend from the plan. */
static void from_plan(const cuda_plan *p, bk_fields *o) {
#define SAME(x) o->x = p->x
    SAME(attn_fuse_off), SAME(attn_adapt_off), SAME(attn_gadapt_off), SAME(attn_merge_off), SAME(mma_off);
    SAME(attn_gqa_off), SAME(moe_q8_off), SAME(attn_v1), SAME(mmvq_slices_off), SAME(fa_off), SAME(mmvq_multi_off);
    SAME(mmvs_off), SAME(mmvf_on), SAME(norm_fuse_on), SAME(mmvs_wide_off), SAME(router_pf_off), SAME(moe_comb_off);
    SAME(dec_qtypes_off), SAME(pdl_off), SAME(gd_chunk_off), SAME(glu_off), SAME(qkrope_off), SAME(kvfuse_off);
    SAME(normq_off), SAME(mmq_off), SAME(mmqh_off), SAME(moe_mmq_off), SAME(moe_vec_off), SAME(attnq_off);
    SAME(attn_rope_off), SAME(attn_gate_off), SAME(router_fuse_off), SAME(router_join_off), SAME(gd_conv_off);
    SAME(gd_fuse_off), SAME(moe_shared_off), SAME(route_warp_off), SAME(attn_bps), SAME(mmvs_warps), SAME(mmvs_pre);
    SAME(attn_mma_min), SAME(mmvs_seg_bytes), SAME(q6k_quad), SAME(mmq_min), SAME(mmq_mt), SAME(mmq_max);
    SAME(mmqh_min), SAME(moe_vec_r), SAME(moe_mmq_min), SAME(moe_tnt), SAME(ablate), SAME(mmvs_min_in), SAME(emb_gpu);
    SAME(graphs_off), SAME(graph_info), SAME(trace), SAME(trace_step);
#undef SAME
    o->nq = (int)p->nq;
    o->mmvs_smem = p->mmvs_smem * 1024;
    o->mmvs_min_bytes = (int64_t)(p->mmvs_min_mb * 1048576.0);
    o->attn_min_chunk = p->attn_min_chunk / 32 * 32;
    o->mmqh_max = p->mmqh_max > 65 ? 65 : p->mmqh_max;
    o->blas_off = p->cublas == 0;
    o->blas_verbose = p->cublas == 1;
    o->blas_min_tok = p->cublas_min_tok;
    o->blas_budget = (size_t)p->cublas_scratch_mb << 20;
    o->pool_off = p->weight_pool_off;
}

#define CHECK_SAME(x)                                                                          \
    do {                                                                                       \
        if (a.x != b.x) {                                                                      \
            fprintf(stderr, "  %s: %s differs: legacy %lld, plan %lld\n", what, #x,            \
                    (long long)a.x, (long long)b.x);                                           \
            test_failed_ = 1;                                                                  \
        }                                                                                      \
    } while (0)

/* env through both; false when the plan refuses it (a malformed value: no old behaviour to keep) */
static bool same_backend(const char *const *env, const char *what) {
    cuda_plan p;
    if (read_env(&p, env, NULL, 0) != BRISK_OK) return false;
    bk_fields a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    legacy_env = env;
    legacy(&a);
    from_plan(&p, &b);
    CHECK_SAME(attn_fuse_off);
    CHECK_SAME(attn_adapt_off);
    CHECK_SAME(attn_gadapt_off);
    CHECK_SAME(attn_merge_off);
    CHECK_SAME(mma_off);
    CHECK_SAME(attn_gqa_off);
    CHECK_SAME(moe_q8_off);
    CHECK_SAME(attn_v1);
    CHECK_SAME(mmvq_slices_off);
    CHECK_SAME(fa_off);
    CHECK_SAME(mmvq_multi_off);
    CHECK_SAME(mmvs_off);
    CHECK_SAME(mmvf_on);
    CHECK_SAME(norm_fuse_on);
    CHECK_SAME(mmvs_wide_off);
    CHECK_SAME(router_pf_off);
    CHECK_SAME(moe_comb_off);
    CHECK_SAME(dec_qtypes_off);
    CHECK_SAME(pdl_off);
    CHECK_SAME(gd_chunk_off);
    CHECK_SAME(glu_off);
    CHECK_SAME(qkrope_off);
    CHECK_SAME(kvfuse_off);
    CHECK_SAME(normq_off);
    CHECK_SAME(mmq_off);
    CHECK_SAME(mmqh_off);
    CHECK_SAME(moe_mmq_off);
    CHECK_SAME(moe_vec_off);
    CHECK_SAME(attnq_off);
    CHECK_SAME(attn_rope_off);
    CHECK_SAME(attn_gate_off);
    CHECK_SAME(router_fuse_off);
    CHECK_SAME(router_join_off);
    CHECK_SAME(gd_conv_off);
    CHECK_SAME(gd_fuse_off);
    CHECK_SAME(moe_shared_off);
    CHECK_SAME(route_warp_off);
    CHECK_SAME(attn_bps);
    CHECK_SAME(nq);
    CHECK_SAME(mmvs_warps);
    CHECK_SAME(mmvs_smem);
    CHECK_SAME(mmvs_pre);
    CHECK_SAME(attn_mma_min);
    CHECK_SAME(attn_min_chunk);
    CHECK_SAME(mmvs_seg_bytes);
    CHECK_SAME(q6k_quad);
    CHECK_SAME(mmq_min);
    CHECK_SAME(mmq_mt);
    CHECK_SAME(mmq_max);
    CHECK_SAME(mmqh_min);
    CHECK_SAME(mmqh_max);
    CHECK_SAME(moe_vec_r);
    CHECK_SAME(moe_mmq_min);
    CHECK_SAME(moe_tnt);
    CHECK_SAME(ablate);
    CHECK_SAME(mmvs_min_in);
    CHECK_SAME(mmvs_min_bytes);
    CHECK_SAME(blas_off);
    CHECK_SAME(blas_verbose);
    CHECK_SAME(graphs_off);
    CHECK_SAME(graph_info);
    CHECK_SAME(pool_off);
    CHECK_SAME(emb_gpu);
    CHECK_SAME(blas_min_tok);
    CHECK_SAME(blas_budget);
    CHECK_SAME(trace_step);
    if ((a.trace == NULL) != (b.trace == NULL) || (a.trace && strcmp(a.trace, b.trace))) {
        fprintf(stderr, "  %s: trace differs\n", what);
        test_failed_ = 1;
    }
    return true;
}

/* Every name of the table at a spread of values, alone and in pairs that interact. */
static void test_same_backend(void) {
    static const char *const vals[] = {"0", "1", "2", "3", "4", "7", "8", "16", "17", "31", "32", "33", "64", "65",
                                       "100", "128", "1024", "2048", "8192", "-1", "1.5", "abc", "", "01", "-0", " 1", "1 "};
    int accepted = 0, refused_n = 0;
    for (int i = 0; i < cuda_plan_rows(); i++) {
        const char *name;
        cuda_plan_row(i, &name, NULL, NULL);
        for (size_t v = 0; v < sizeof vals / sizeof vals[0]; v++) {
            char set[96];
            /* the two changes cuda_plan.h documents: an empty value is unset (the old atoi made
             * it 0), and BRISK_CUDA_GRAPH_INFO=0 is off (the old code looked only for the name) */
            if (!*vals[v] || (!strcmp(name, "BRISK_CUDA_GRAPH_INFO") && !strcmp(vals[v], "0"))) continue;
            snprintf(set, sizeof set, "%s=%s", name, vals[v]);
            const char *env[] = {set, NULL};
            if (same_backend(env, set)) accepted++;
            else refused_n++;
        }
    }
    static const char *const pairs[][3] = {
        {"BRISK_CUDA_CUBLAS_MIN_TOK=128", "BRISK_CUDA_MMQ_MAX=32", NULL},
        {"BRISK_CUDA_CUBLAS_MIN_TOK=128", "BRISK_CUDA_MMQH_MAX=100", NULL},
        {"BRISK_CUDA_MMQ_MAX=20", "BRISK_CUDA_MMQH_MAX=18", NULL},
        {"BRISK_CUDA_CUBLAS=0", "BRISK_CUDA_CUBLAS_MIN_TOK=1", NULL},
        {"BRISK_CUDA_TRACE=/tmp/x", "BRISK_CUDA_TRACE_STEP=3", NULL},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) CHECK(same_backend(pairs[i], pairs[i][0]));
    CHECK(accepted > 400);
    printf("  %d settings as before, %d malformed ones refused\n", accepted, refused_n);
}

int main(int argc, char **argv) {
    static const test_case cases[] = {
        {"defaults", test_defaults}, {"polarity", test_polarity},   {"numbers", test_numbers},
        {"follows", test_follows},   {"lists", test_lists},         {"malformed", test_malformed},
        {"unknown_names", test_unknown_names}, {"table", test_table}, {"same_backend", test_same_backend},
    };
    return test_main(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}
