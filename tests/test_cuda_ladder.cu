/* test_cuda_ladder.cu — the matrix products' ladder (src/backend/cuda/cuda_matmul.cu) decided
 * on plain values: for a table of (plan, type, n_in, n_out, batch n), the kernel that the first
 * rung whose pure predicate says yes names for one matrix alone (before any run-time refusal),
 * in the ladder's order; and the prefill attention's plan (fa_plan_shape). Host code only: it runs
 * without a GPU, in `make test` of a CUDA build (and make test-cuda).
 * A row that fails names a predicate that moved; if the move was meant, the row changes with it.
 * (dev/ladder/ladder_equiv.sh checked the ladder against the dispatch it replaced.) */
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda_internal.cuh"
#include "backend/cuda/cuda_mmvq.cuh"

/* The plan of an sm_90 card with the defaults (cuda_backend.cu's init, cuda_plan.c), cuBLAS not
 * loaded (cb->blas is opaque here: NULL, so cuda_blas_should_use says no and mma runs). */
static void default_plan(cuda_backend *cb) {
    static int8_t xq;
    static __half xh;
    memset((void *)cb, 0, sizeof *cb);
    cb->xq = &xq;
    cb->xq_cap = (size_t)MMVQ_MAX_TOK << 18;
    cb->xh = &xh;
    cb->xh_cap = MMQH_XH_CAP;
    cb->mmq_min = MMQ_MIN_TOK;
    cb->mmq_max = MMQ_MAX_TOK;
    cb->mmqh_min = MMQH_MIN_TOK;
    cb->mmqh_max = MMQ_MAX_TOK;
    cb->mmvf_on = true;
}

/* The ladder's order for one matrix (cuda_matmul.cu's comment): the first rung that takes it. */
static const char *first_rung(const cuda_backend *cb, uint32_t t, int64_t n_in, int64_t n_out, int n) {
    if (cuda_mmqh_should_use(cb, t, n_in, n)) return "mmqh";
    if (cuda_mmq_should_use(cb, t, n_in, n)) return "mmq";
    if (cuda_mmvq_should_use(cb, t, n_in, n)) return "mmvq";
    if (cuda_mma_should_use(cb, t, n_in, n)) return cuda_blas_should_use(cb, t, n_in, n_out, n) ? "blas" : "mma";
    if (cuda_mm_tiled_should_use(n_in, n)) return "tiled";
    if (cuda_gemv_splitk_should_use(t, n_in, n_out)) return "splitk";
    if (cuda_mmvf_should_use(cb, t, n)) return "mmvf";
    return "gemv";
}

enum { P_DEFAULT, P_NO_MMQ, P_NO_MMQH, P_NO_MMA, P_NO_MMVF, P_NO_XQ, P_NO_DEC_QTYPES };
static const char *plan_names[] = {"default", "mmq off", "mmqh off", "mma off", "mmvf off", "no xq buffer",
                                   "dec_qtypes off"};

static void plan_of(cuda_backend *cb, int p) {
    default_plan(cb);
    switch (p) {
    case P_NO_MMQ: cb->mmq_off = true; break;
    case P_NO_MMQH: cb->mmqh_off = true; break;
    case P_NO_MMA: cb->mma_off = true; break;
    case P_NO_MMVF: cb->mmvf_on = false; break;
    case P_NO_XQ: cb->xq = NULL; break;
    case P_NO_DEC_QTYPES: cb->dec_qtypes_off = true; break;
    }
}

static const struct row {
    int plan;
    uint32_t type;
    int64_t n_in, n_out;
    int n;
    const char *rung;
} rows[] = {
    /* decode on the integer-dot types: mmvq (Q5_K and IQ4_XS too: decode-only loaders) */
    {P_DEFAULT, QT_Q4_K, 4096, 4096, 1, "mmvq"},
    {P_DEFAULT, QT_Q6_K, 4096, 151936, 1, "mmvq"},
    {P_DEFAULT, QT_Q5_K, 4096, 4096, 1, "mmvq"},
    {P_DEFAULT, QT_IQ4_XS, 4096, 4096, 4, "mmvq"},
    {P_DEFAULT, QT_Q4_0, 4096, 4096, 7, "mmvq"},
    /* batches: int8 tensor cores from MMQ_MIN_TOK, f16 ones from MMQH_MIN_TOK (Q4_K, Q6_K, Q8_0 of
     * rows a multiple of 256), from MMQ_MAX_TOK the float ladder (WMMA: cuBLAS is not loaded here) */
    {P_DEFAULT, QT_Q4_K, 4096, 4096, 8, "mmq"},
    {P_DEFAULT, QT_Q4_K, 4096, 4096, 16, "mmq"},
    {P_DEFAULT, QT_Q4_K, 4096, 4096, 17, "mmqh"},
    {P_DEFAULT, QT_Q8_0, 768, 4096, 47, "mmqh"},
    {P_DEFAULT, QT_Q8_0, 800, 4096, 20, "mmq"},
    {P_DEFAULT, QT_Q4_0, 4096, 4096, 20, "mmq"},
    {P_DEFAULT, QT_Q4_K, 4096, 4096, 48, "mma"},
    {P_DEFAULT, QT_Q6_K, 4096, 4096, 512, "mma"},
    /* a decode-only type in mmq's batches takes the float paths: the GEMV up to GEMV_MAX_TOK */
    {P_DEFAULT, QT_Q5_K, 4096, 4096, 8, "gemv"},
    {P_DEFAULT, QT_Q5_K, 4096, 4096, 20, "mma"},
    {P_DEFAULT, QT_IQ2_XXS, 4096, 4096, 1, "gemv"},
    {P_DEFAULT, QT_IQ2_XXS, 4096, 4096, 100, "mma"},
    /* float weights: one token streamed (mmvf), a router's few wide rows split-K, batches WMMA;
     * rows that are no multiple of 32 (or 8) the GEMV */
    {P_DEFAULT, QT_F16, 4096, 4096, 1, "mmvf"},
    {P_DEFAULT, QT_BF16, 4096, 12288, 1, "mmvf"},
    {P_DEFAULT, QT_F32, 2048, 128, 1, "splitk"},
    {P_DEFAULT, QT_F32, 2048, 128, 4, "splitk"},
    {P_DEFAULT, QT_F32, 512, 128, 1, "mmvf"}, /* (cuda_mmvf refuses < 1024 rows at run time: gemv) */
    {P_DEFAULT, QT_F16, 4096, 4096, 9, "mma"},
    {P_DEFAULT, QT_F16, 100, 4096, 9, "gemv"},
    {P_DEFAULT, QT_F16, 100, 4096, 1, "mmvf"},
    {P_NO_MMVF, QT_BF16, 4096, 4096, 1, "gemv"},
    {P_NO_MMVF, QT_F32, 2048, 128, 1, "splitk"},
    /* switches */
    {P_NO_MMQH, QT_Q4_K, 4096, 4096, 32, "mmq"},
    {P_NO_MMQ, QT_Q4_K, 4096, 4096, 32, "mmqh"},
    {P_NO_MMQ, QT_Q4_0, 4096, 4096, 32, "mmvq"}, /* slices of MMVQ_MAX_TOK up to MMVQ_SLICE_MAX */
    {P_NO_MMQ, QT_Q4_0, 4096, 4096, 64, "mmvq"},
    {P_NO_MMQ, QT_Q4_0, 4096, 4096, 65, "mma"},
    {P_NO_MMA, QT_Q5_K, 4096, 4096, 20, "tiled"},
    {P_NO_MMA, QT_Q4_K, 4096, 4096, 20, "mmqh"},
    {P_NO_MMA, QT_F16, 100, 4096, 20, "gemv"},
    {P_NO_XQ, QT_Q4_K, 4096, 4096, 1, "gemv"},
    {P_NO_XQ, QT_Q4_K, 4096, 4096, 20, "mmqh"},
    {P_NO_XQ, QT_Q4_0, 4096, 4096, 20, "mma"},
    {P_NO_DEC_QTYPES, QT_Q5_K, 4096, 4096, 1, "gemv"},
    {P_NO_DEC_QTYPES, QT_Q4_K, 4096, 4096, 1, "mmvq"},
};

/* The batch predicates of the integer-dot paths never both hold (cuda_matmul.cu's q8_matmul relies
 * on it), and the GLU ones follow theirs with glu_off and (mmvq) one slice. */
static int exclusive_and_glu(void) {
    int bad = 0;
    for (int p = 0; p <= P_NO_DEC_QTYPES; p++)
        for (int off = 0; off < 2; off++)
            for (int n = 1; n <= 600; n++) {
                cuda_backend cb;
                plan_of(&cb, p);
                cb.glu_off = off;
                const bool q = cuda_mmq_use(&cb, n), v = cuda_mmvq_use(&cb, n);
                const bool g = cuda_mmq_glu_should_use(&cb, QT_Q4_K, 4096, n) ==
                                   (!off && cuda_mmq_should_use(&cb, QT_Q4_K, 4096, n)) &&
                               cuda_mmvq_glu_should_use(&cb, QT_Q4_K, 4096, n) ==
                                   (!off && n <= MMVQ_MAX_TOK && cuda_mmvq_should_use(&cb, QT_Q4_K, 4096, n)) &&
                               cuda_mmqh_glu_should_use(&cb, QT_Q4_K, 4096, n) ==
                                   (!off && cuda_mmqh_should_use(&cb, QT_Q4_K, 4096, n));
                if (((q && v) || !g) && bad++ < 5)
                    printf("  plan %s glu_off %d n %d: mmq %d mmvq %d glu %d\n", plan_names[p], off, n, q, v, g);
            }
    return bad;
}

/* The prefill attention's plan (fa_plan_shape, cuda_attn_prefill.cu) on an H100's 132 SMs, at the
 * points attn_lab measured (session 26): what it picks there is what won. */
static int prefill_plans(void) {
    struct {
        int kt, n, nh, nkv, hd, max_np, mt, n_split;
        const char *why;
    } cases[] = {
        {KT_F16, 2048, 32, 8, 128, 2048, 2, 1, "8b, a 2K chunk: MT = 2 (512 blocks), 1.12x"},
        {KT_F16, 2048, 32, 8, 128, 133120, 2, 1, "8b, a 2K chunk after 128K: MT = 2 unsplit, 1.53x"},
        {KT_F16, 512, 32, 8, 128, 4608, 1, 1, "8b ubatch after 4K: MT = 1 (MT = 2 alone 0.92x, split 0.92x)"},
        {KT_F16, 512, 32, 8, 128, 131584, 2, 5, "8b ubatch after 128K: MT = 2, 5 splits, 1.22x"},
        {KT_Q8_0, 512, 32, 8, 128, 33280, 2, 5, "8b q8_0 ubatch after 32K: MT = 2, 5 splits, 1.29x"},
        {KT_F16, 512, 24, 4, 256, 131584, 1, 1, "27b ubatch: 192 blocks, unsplit (the split lost)"},
        {KT_F16, 512, 16, 2, 256, 131584, 1, 5, "35b-a3b ubatch after 128K: 5 splits, 1.33x"},
        {KT_F16, 512, 16, 2, 256, 4608, 1, 1, "35b-a3b ubatch after 4K: unsplit"},
        {KT_F16, 2048, 32, 8, 64, 2048, 1, 1, "head dim 64 at 2K keys: MT = 1 (MT = 2 0.94x)"},
        {KT_F16, 2048, 32, 8, 64, 6144, 2, 1, "head dim 64 at 6K keys: MT = 2, 1.15x"},
        {KT_F32, 512, 32, 8, 128, 131584, 1, 1, "f32 caches: MT = 1, unsplit"},
        {KT_F16, 100, 8, 2, 64, 6300, 2, 6, "test_cuda_ops' split case: 6 splits"},
    };
    int bad = 0;
    for (auto &c : cases) {
        const fa_shape sh = fa_plan_shape(c.kt, c.n, c.nh, c.nkv, c.hd, c.max_np, 132);
        if (sh.mt != c.mt || sh.n_split != c.n_split) {
            bad++;
            printf("FAIL prefill plan (%s): MT = %d, %d splits\n", c.why, sh.mt, sh.n_split);
        }
    }
    printf("%s prefill attention plans: %zu batches -> (MT, splits)\n", bad ? "FAIL" : "ok  ",
           sizeof cases / sizeof cases[0]);
    /* the warpgroup-MMA kernels' splits (fw_plan_splits), at attn_lab's points (session 34) */
    struct {
        int n, nh, nkv, max_np, n_split;
        const char *why;
    } fw[] = {
        {512, 32, 8, 131584, 1, "8b ubatch after 128K: 128 blocks fill 97% unsplit"},
        {512, 24, 4, 131584, 4, "27b ubatch after 128K: 96 blocks, 4 splits fill 97%"},
        {512, 16, 2, 33280, 2, "35b-a3b ubatch after 32K: 64 blocks, 2 splits fill 97%"},
        {512, 16, 2, 4608, 1, "35b-a3b ubatch after 4K: the prefix too short to split"},
        {2048, 24, 4, 133120, 1, "27b chunk of 2K: 384 blocks, more than the SMs"},
        {80, 8, 2, 65680, 16, "test_cuda_ops' deep chunk: 6 blocks, the most splits"},
    };
    int bad_fw = 0;
    for (auto &c : fw) {
        const int sp = fw_plan_splits(c.n, c.nh, c.nkv, c.max_np, 132);
        if (sp != c.n_split) {
            bad_fw++;
            printf("FAIL fw prefill plan (%s): %d splits\n", c.why, sp);
        }
    }
    printf("%s warpgroup-MMA prefill plans: %zu batches -> splits\n", bad_fw ? "FAIL" : "ok  ", sizeof fw / sizeof fw[0]);
    return bad + bad_fw;
}

int main(void) {
    int pass = 0, fail = 0;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const row &r = rows[i];
        cuda_backend cb;
        plan_of(&cb, r.plan);
        const char *got = first_rung(&cb, r.type, r.n_in, r.n_out, r.n);
        if (!strcmp(got, r.rung)) pass++;
        else {
            fail++;
            printf("FAIL ladder row %zu (%s, type %u, %lld x %lld, n %d): %s, expected %s\n", i, plan_names[r.plan],
                   r.type, (long long)r.n_out, (long long)r.n_in, r.n, got, r.rung);
        }
    }
    printf("%s ladder: %d rows of (plan, type, shape, batch) -> kernel\n", fail ? "FAIL" : "ok  ", pass + fail);
    const int bad = exclusive_and_glu();
    printf("%s ladder: mmq and mmvq batches exclusive, GLU predicates as their products'\n", bad ? "FAIL" : "ok  ");
    pass += !bad;
    fail += !!bad;
    const int badp = prefill_plans();
    pass += !badp;
    fail += !!badp;
    printf("%d passed, %d failed\n", pass, fail);
    return fail ? 1 : 0;
}
