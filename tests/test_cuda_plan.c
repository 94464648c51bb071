/* test_cuda_plan.c — the CUDA backend's settings table (backend/cuda/cuda_plan.h), on the CPU:
 * environments fed through the injectable getenv, the plan's fields checked. */
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
    CHECK(!p.graphs_off && !p.pdl_off && !p.mma_off && !p.mmq_off && !p.mmvs_off && !p.fa_off && !p.weight_pool_off);
    CHECK(!p.cublas_off && !p.attn_mma_off && !p.q6k_quad_off && !p.mmvf_off && !p.graph_info && p.ablate == 0);
    CHECK(p.mmvs_min_in == 2048 && p.mmvs_pre == 1 && p.mmvs_seg_bytes == -1 && p.attn_min_chunk == 128);
    CHECK(p.mmq_min == 8 && p.mmq_max == 48 && p.mmq_mt == 2 && p.mmqh_min == 17 && p.mmqh_max == 48);
    CHECK(p.moe_mmq_min == 64 && p.cublas_min_tok == 48 && p.cublas_scratch_mb == 64);
    CHECK(p.trace == NULL && p.trace_step == 40);
}

/* Issue 31's budget: the environment names of the table (the lists, the tunings, the debugging
 * aids) stay under 20; the paths are list entries only. */
static void test_count(void) {
    int names = 1; /* BRISK_CUDA_DISABLE */
    for (int i = 0; i < cuda_plan_rows(); i++) {
        const char *env;
        cuda_plan_row(i, &env, NULL, NULL);
        names += env != NULL;
    }
    printf("  %d environment names, %d rows\n", names, cuda_plan_rows());
    CHECK(names < 20);
}

/* A path's old own name, and a removed setting's, are refused with what to set instead. */
static void test_retired(void) {
    const char *old[] = {"BRISK_CUDA_MMVS=0", NULL};
    CHECK(refused(old, "BRISK_CUDA_MMVS=0: the paths are not variables of their own any more; BRISK_CUDA_DISABLE=mmvs"));
    const char *old_on[] = {"BRISK_CUDA_MMVF=0", NULL};
    CHECK(refused(old_on, "BRISK_CUDA_DISABLE=mmvf"));
    /* the list for paths off by default went with the last such path */
    const char *en[] = {"BRISK_CUDA_ENABLE=mmvf", NULL};
    CHECK(refused(en, "BRISK_CUDA_ENABLE=mmvf: every GPU path is on by default now"));
    const char *kv[] = {"BRISK_CUDA_KV_FUSE=0", NULL};
    CHECK(refused(kv, "BRISK_CUDA_DISABLE=kv_fuse"));
    static const char *const gone[] = {"BRISK_CUDA_NQ=3",        "BRISK_CUDA_NORM_FUSE=1", "BRISK_CUDA_ATTN_V1=1",
                                       "BRISK_CUDA_EMB_GPU=1",   "BRISK_CUDA_ATTN_BPS=3",  "BRISK_CUDA_MMVS_MIN_MB=4",
                                       "BRISK_CUDA_MMVS_SMEM=96", "BRISK_CUDA_MMVS_WARPS=8", "BRISK_CUDA_MOE_TNT=32",
                                       "BRISK_CUDA_MOE_VEC_R=4"};
    for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++) {
        const char *e[] = {gone[i], NULL};
        CHECK(refused(e, "removed from brisk"));
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(strchr(gone[i], '=') - gone[i]), gone[i]);
        CHECK(cuda_plan_known_name(name)); /* refused, so not also warned about as unknown */
    }
    /* every path's old name is refused */
    for (int i = 0; i < cuda_plan_rows(); i++) {
        const char *flag;
        cuda_plan_row(i, NULL, &flag, NULL);
        if (!flag) continue;
        char set[64];
        int n = snprintf(set, sizeof set, "BRISK_CUDA_%s", flag);
        for (int k = 11; k < n; k++) set[k] = (char)(set[k] >= 'a' && set[k] <= 'z' ? set[k] - 'a' + 'A' : set[k]);
        snprintf(set + n, sizeof set - (size_t)n, "=0");
        const char *e[] = {set, NULL};
        CHECK(refused(e, flag));
    }
    /* an empty value is unset, as everywhere */
    const char *empty[] = {"BRISK_CUDA_MMVS=", "BRISK_CUDA_NQ=", NULL};
    (void)plan_of(empty);
}

static void test_numbers(void) {
    const char *env[] = {"BRISK_CUDA_MMVS_MIN_IN=0", "BRISK_CUDA_MMVS_PRE=0",  "BRISK_CUDA_MMVS_SEG=1024",
                         "BRISK_CUDA_ATTN_MINCHUNK=100", "BRISK_CUDA_MMQ_MIN=4", "BRISK_CUDA_MMQ_MT=1",
                         "BRISK_CUDA_MMQH_MIN=2", "BRISK_CUDA_MOE_MMQ_MIN=16", "BRISK_CUDA_CUBLAS_SCRATCH_MB=1",
                         "BRISK_CUDA_TRACE=/tmp/t", "BRISK_CUDA_TRACE_STEP=7", "BRISK_CUDA_ABLATE=2064",
                         "BRISK_CUDA_GRAPH_INFO=1", NULL};
    cuda_plan p = plan_of(env);
    CHECK(p.mmvs_min_in == 0 && p.mmvs_pre == 0 && p.mmvs_seg_bytes == 1024 && p.attn_min_chunk == 100);
    CHECK(p.mmq_min == 4 && p.mmq_mt == 1 && p.mmqh_min == 2 && p.moe_mmq_min == 16 && p.cublas_scratch_mb == 1);
    CHECK(p.trace && !strcmp(p.trace, "/tmp/t") && p.trace_step == 7 && p.ablate == 2064 && p.graph_info);
    const char *seg0[] = {"BRISK_CUDA_MMVS_SEG=0", "BRISK_CUDA_ABLATE=2048", "BRISK_CUDA_GRAPH_INFO=0", NULL};
    p = plan_of(seg0);
    CHECK(p.mmvs_seg_bytes == 0 && p.ablate == 2048 && !p.graph_info);
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
    const char *dis[] = {"BRISK_CUDA_DISABLE=mmvs,graphs, pdl cublas,attn_mma,q6k_quad,kv_fuse,,", NULL};
    cuda_plan p = plan_of(dis);
    CHECK(p.mmvs_off && p.graphs_off && p.pdl_off && p.cublas_off && p.attn_mma_off && p.q6k_quad_off && p.kvfuse_off);
    CHECK(!p.mma_off && !p.fa_off);
    const char *mf[] = {"BRISK_CUDA_DISABLE=mmvf", NULL};
    p = plan_of(mf);
    CHECK(p.mmvf_off && !p.mmvs_off);
    /* every path of the table works in the list, and flips exactly its own field */
    cuda_plan d;
    cuda_plan_defaults(&d);
    for (int i = 0; i < cuda_plan_rows(); i++) {
        const char *flag;
        cuda_plan_class cls;
        cuda_plan_row(i, NULL, &flag, &cls);
        CHECK((cls == CUDA_PLAN_PATH) == (flag != NULL));
        if (!flag) continue;
        char list[96];
        snprintf(list, sizeof list, "BRISK_CUDA_DISABLE=%s", flag);
        const char *e[] = {list, NULL};
        cuda_plan q;
        plan_into(&q, e);
        int differ = 0;
        for (size_t b = 0; b < sizeof q; b++) differ += ((const char *)&q)[b] != ((const char *)&d)[b];
        CHECK(differ == 1);
    }
}

static void test_malformed(void) {
    const char *n[] = {"BRISK_CUDA_MMVS_PRE=abc", NULL};
    CHECK(refused(n, "BRISK_CUDA_MMVS_PRE=abc: expects an integer from 0 to 1024"));
    const char *r[] = {"BRISK_CUDA_MMQ_MT=3", NULL};
    CHECK(refused(r, "from 1 to 2"));
    const char *t[] = {"BRISK_CUDA_MMQ_MIN=12x", NULL};
    CHECK(refused(t, "BRISK_CUDA_MMQ_MIN=12x"));
    const char *m[] = {"BRISK_CUDA_ABLATE=4096", NULL};
    CHECK(refused(m, "expects bits, 0 to 4095"));
    const char *g[] = {"BRISK_CUDA_GRAPH_INFO=yes", NULL};
    CHECK(refused(g, "BRISK_CUDA_GRAPH_INFO=yes: expects 0 or 1"));
    const char *big[] = {"BRISK_CUDA_TRACE_STEP=99999999999", NULL};
    CHECK(refused(big, "BRISK_CUDA_TRACE_STEP"));
    const char *lead[] = {"BRISK_CUDA_MMQ_MIN=01", NULL};
    CHECK(refused(lead, "BRISK_CUDA_MMQ_MIN=01"));
    const char *l[] = {"BRISK_CUDA_DISABLE=graphs,mmsv", NULL};
    CHECK(refused(l, "no GPU path is called 'mmsv'"));
    const char *two[] = {"BRISK_CUDA_MMQ_MT=9", "BRISK_CUDA_MMVS_PRE=x", NULL};
    CHECK(refused(two, "(and 1 more)"));
    /* the rest of the plan is filled all the same, the malformed ones at their defaults */
    const char *mix[] = {"BRISK_CUDA_MMVS_PRE=abc", "BRISK_CUDA_DISABLE=mmvs", NULL};
    cuda_plan p;
    CHECK(read_env(&p, mix, NULL, 0) == BRISK_ERR_INVALID_ARG);
    CHECK(p.mmvs_pre == 1 && p.mmvs_off);
    /* empty is unset */
    const char *empty[] = {"BRISK_CUDA_MMVS_PRE=", "BRISK_CUDA_DISABLE=", NULL};
    p = plan_of(empty);
    CHECK(p.mmvs_pre == 1 && !p.graphs_off);
}

static void test_unknown_names(void) {
    char *env[] = {"PATH=/bin", "BRISK_CUDA_DISABLE=mmvs", "BRISK_SPLIT_CPU=1", "BRISK_XCACHE_MISS=cpu",
                   "BRISK_E2E_MODELS=", "BRISK_CUDA_GRAHPS=0", "BRISK_CUDA_MMQ_V1=1", "BRISK_CUDA_GRAPHS=0",
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
    CHECK(!strstr(buf, "BRISK_SPLIT_CPU") && !strstr(buf, "PATH") && !strstr(buf, "BRISK_CUDA_GRAPHS "));
    CHECK(cuda_plan_known_name("BRISK_CUDA_ENABLE") && cuda_plan_known_name("BRISK_CPU_ISA"));
    CHECK(!cuda_plan_known_name("BRISK_CUDA_MMQ_V1"));
}

/* Names and flags are unique, and every row prints. */
static void test_table(void) {
    int n = cuda_plan_rows(), paths = 0;
    for (int i = 0; i < n; i++) {
        const char *a, *fa;
        cuda_plan_class c;
        CHECK(cuda_plan_row(i, &a, &fa, &c));
        CHECK((a == NULL) == (fa != NULL));
        CHECK(!a || !strncmp(a, "BRISK_CUDA_", 11));
        paths += c == CUDA_PLAN_PATH;
        for (int j = i + 1; j < n; j++) {
            const char *b, *fb;
            cuda_plan_row(j, &b, &fb, NULL);
            CHECK(!a || !b || strcmp(a, b));
            CHECK(!fa || !fb || strcmp(fa, fb));
        }
    }
    CHECK(paths >= 40);
    CHECK(!cuda_plan_row(n, NULL, NULL, NULL));
    FILE *f = tmpfile();
    if (!f) return;
    const char *env[] = {"BRISK_CUDA_MMQ_MT=1", "BRISK_CUDA_DISABLE=graphs", NULL};
    cuda_plan p = plan_of(env);
    cuda_plan_print(f, &p);
    cuda_plan_print_markdown(f);
    long len = ftell(f);
    rewind(f);
    char *buf = calloc(1, (size_t)len + 1);
    if (buf && fread(buf, 1, (size_t)len, f) == (size_t)len) {
        char want[2][64];
        snprintf(want[0], sizeof want[0], "%-28s *1 ", "BRISK_CUDA_MMQ_MT");
        snprintf(want[1], sizeof want[1], "\n%-28s *off ", "graphs");
        CHECK(strstr(buf, want[0]) && strstr(buf, want[1]));
        CHECK(strstr(buf, "| `graphs` | on |"));
        CHECK(strstr(buf, "| `BRISK_CUDA_MMQ_MAX` | CUBLAS_MIN_TOK |"));
    }
    free(buf);
    fclose(f);
}

int main(int argc, char **argv) {
    static const test_case cases[] = {
        {"defaults", test_defaults}, {"count", test_count}, {"retired", test_retired},
        {"numbers", test_numbers},   {"follows", test_follows}, {"lists", test_lists},
        {"malformed", test_malformed}, {"unknown_names", test_unknown_names}, {"table", test_table},
    };
    return test_main(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}
