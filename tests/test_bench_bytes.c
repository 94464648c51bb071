/* test_bench_bytes.c — brisk_decode_bytes, the bytes a decode step reads
 * (`brisk bench`'s GB/s), per architecture, against figures computed here
 * from the GGUF's own tensor list and metadata: a dense qwen3 (every layer
 * keeps K and V), the qwen35 hybrid (K and V of the full-attention layers
 * only, plus each Gated DeltaNet layer's state read and written), a qwen3moe
 * (the routed experts read, not all), random qwen35moe and untied llama
 * models of the synth presets, and the context's count of distinct
 * experts a step routes to (brisk_context_expert_reads). */
#include "brisk.h"
#include <stdlib.h>
#include <unistd.h>

#include "format/gguf.h"
#include "model/synth.h"
#include "quant/quant.h"
#include "test.h"

/* What a step reads, from the file alone: its tensor bytes split into the
 * routed experts (*_exps), the token embedding and the rest. */
typedef struct {
    gguf_file *g;
    char arch[32];
    double experts, embd, other; /* bytes */
    bool tied;                   /* no output.weight: the embedding is the LM head */
    double embd_row;             /* bytes of one embedding row */
} file_bytes;

static bool open_file(const char *path, file_bytes *f) {
    memset(f, 0, sizeof *f);
    if (gguf_open(path, &f->g) != BRISK_OK) {
        fprintf(stderr, "  cannot open %s: %s\n", path, brisk_last_error());
        CHECK(!"open");
        return false;
    }
    const char *a;
    size_t len;
    CHECK_OK(gguf_get_str(f->g, "general.architecture", &a, &len));
    snprintf(f->arch, sizeof f->arch, "%.*s", (int)len, a);
    f->tied = true;
    for (int64_t i = 0; i < gguf_tensor_count(f->g); i++) {
        const gguf_tensor *t = gguf_get_tensor(f->g, i);
        if (strstr(t->name, "_exps.")) f->experts += (double)t->nbytes;
        else if (!strcmp(t->name, "token_embd.weight")) f->embd += (double)t->nbytes, f->embd_row = (double)t->nbytes / t->ne[1];
        else f->other += (double)t->nbytes;
        if (!strcmp(t->name, "output.weight")) f->tied = false;
    }
    return true;
}

static int64_t key(const file_bytes *f, const char *name) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", f->arch, name);
    int64_t v = 0;
    return gguf_get_i64(f->g, k, &v) == BRISK_OK ? v : 0;
}

static brisk_model *load(const char *path) {
    brisk_model_params mp = brisk_model_default_params();
    mp.n_gpu_layers = 0;
    brisk_model *m = NULL;
    CHECK_OK(brisk_model_load(path, &mp, &m));
    return m;
}

/* Weights of a step: everything but the unread embedding rows and experts. */
static double weights_expected(const file_bytes *f, int n_seq, double expert_share) {
    return f->other + f->experts * expert_share + (f->tied ? f->embd : n_seq * f->embd_row);
}

/* K and V bytes of one token at position depth in one attention layer. */
static double kv_expected(const file_bytes *f, brisk_kv_type t, int64_t depth) {
    double kv_dim = (double)key(f, "attention.head_count_kv") * key(f, "attention.key_length");
    double elt = t == BRISK_KV_F32 ? 4 : t == BRISK_KV_F16 ? 2 : t == BRISK_KV_Q8_0 ? 34.0 / 32 : 18.0 / 32;
    return 2 * (depth + 1) * kv_dim * elt;
}

static void test_dense(void) {
    const char *path = "models/brisk-kjv-6m.gguf";
    file_bytes f;
    if (!open_file(path, &f)) return;
    brisk_model *m = load(path);
    if (!m) goto out;
    CHECK(!strcmp(f.arch, "qwen3"));
    int n_layer = (int)key(&f, "block_count");
    CHECK(n_layer == 6);
    const brisk_kv_type types[4] = {BRISK_KV_F32, BRISK_KV_F16, BRISK_KV_Q8_0, BRISK_KV_Q4_0};
    for (int ti = 0; ti < 4; ti++)
        for (int n_seq = 1; n_seq <= 4; n_seq += 3) {
            brisk_step_bytes b;
            CHECK_OK(brisk_decode_bytes(m, types[ti], 1000, n_seq, 0, &b));
            CHECK_NEAR((double)b.weights, weights_expected(&f, n_seq, 0), 0.5);
            CHECK_NEAR((double)b.kv, n_seq * n_layer * kv_expected(&f, types[ti], 1000), 0.5);
            CHECK(b.state == 0);
            CHECK(b.total == b.weights + b.kv + b.state);
        }
    /* by hand: 6 layers x K and V x 1001 positions x 2 kv heads x 64 x f16 */
    brisk_step_bytes b;
    CHECK_OK(brisk_decode_bytes(m, BRISK_KV_F16, 1000, 1, 0, &b));
    CHECK(b.kv == 6ull * 2 * 1001 * 128 * 2);
    CHECK(brisk_decode_bytes(m, BRISK_KV_F16, -1, 1, 0, &b) == BRISK_ERR_INVALID_ARG);
    CHECK(brisk_decode_bytes(m, BRISK_KV_F16, 0, 0, 0, &b) == BRISK_ERR_INVALID_ARG);
    CHECK_OK(brisk_decode_bytes(m, BRISK_KV_Q4_0H, 1000, 1, 0, &b)); /* q4_0's 18-byte blocks of 32 */
    CHECK(b.kv == 6ull * 2 * 1001 * (128 / 32 * 18));
    /* --attn-sparse 8 at depth 1000: 63 pages of 16; 7 whole ones and the token's own (9 rows), so
     * 121 rows of K and V, and every page's key min and max (2 kv heads x 64 floats each) scored */
    CHECK_OK(brisk_decode_bytes_sparse(m, BRISK_KV_F16, 1000, 1, 0, 8, 16, &b));
    CHECK(b.kv == 6ull * (2 * 121 * 128 * 2 + 63 * 2 * 128 * 4));
    brisk_step_bytes dense;
    CHECK_OK(brisk_decode_bytes(m, BRISK_KV_F16, 1000, 1, 0, &dense));
    CHECK_OK(brisk_decode_bytes_sparse(m, BRISK_KV_F16, 1000, 1, 0, 63, 16, &b)); /* k covers every page: dense */
    CHECK(b.kv == dense.kv && b.total == dense.total);
    CHECK(brisk_decode_bytes_sparse(m, BRISK_KV_F16, 1000, 1, 0, -1, 16, &b) == BRISK_ERR_INVALID_ARG);
    CHECK(brisk_decode_bytes(m, (brisk_kv_type)5, 0, 1, 0, &b) == BRISK_ERR_INVALID_ARG);
    CHECK(brisk_decode_bytes(m, (brisk_kv_type)7, 0, 1, 0, &b) == BRISK_ERR_INVALID_ARG);
out:
    brisk_model_free(m);
    gguf_close(f.g);
}

static void test_hybrid(void) {
    const char *path = "models/brisk-kjv-hybrid.gguf";
    file_bytes f;
    if (!open_file(path, &f)) return;
    brisk_model *m = load(path);
    if (!m) goto out;
    CHECK(!strcmp(f.arch, "qwen35"));
    /* layer l is full attention iff (l + 1) % interval == 0 (REFERENCE-ARCH.md) */
    int n_layer = (int)key(&f, "block_count"), interval = (int)key(&f, "full_attention_interval"), n_attn = 0;
    for (int l = 0; l < n_layer; l++) n_attn += (l + 1) % interval == 0;
    int n_rec = n_layer - n_attn;
    CHECK(n_attn == 1 && n_rec == 3);
    /* a DeltaNet layer's state per sequence: one dk x dv matrix per value head and the conv's
     * last d_conv - 1 inputs of the q, k and v channels, f32 */
    double ds = (double)key(&f, "ssm.state_size"), nk = (double)key(&f, "ssm.group_count"),
           nv = (double)key(&f, "ssm.time_step_rank"), d_conv = (double)key(&f, "ssm.conv_kernel");
    double state = (nv * ds * ds + (d_conv - 1) * (2 * nk + nv) * ds) * 4;
    for (int n_seq = 1; n_seq <= 3; n_seq += 2) {
        brisk_step_bytes b;
        CHECK_OK(brisk_decode_bytes(m, BRISK_KV_F16, 4095, n_seq, 0, &b));
        CHECK_NEAR((double)b.weights, weights_expected(&f, n_seq, 0), 0.5);
        CHECK_NEAR((double)b.kv, n_seq * n_attn * kv_expected(&f, BRISK_KV_F16, 4095), 0.5);
        CHECK_NEAR((double)b.state, 2 * n_seq * n_rec * state, 0.5); /* read and written */
    }
    /* by hand (models/README.md: 3 DeltaNet layers, 2 k / 4 v heads of 32, conv 4; 1 attention
     * layer of 2 kv heads of 64): K and V of 4096 positions, and (4*32*32 + 3*8*32) floats x 2 x 3 */
    brisk_step_bytes b;
    CHECK_OK(brisk_decode_bytes(m, BRISK_KV_F16, 4095, 1, 0, &b));
    CHECK(b.kv == 1ull * 2 * 4096 * 128 * 2);
    CHECK(b.state == 2ull * 3 * (4 * 32 * 32 + 3 * 8 * 32) * 4);
out:
    brisk_model_free(m);
    gguf_close(f.g);
}

static void test_moe(void) {
    const char *path = "models/brisk-kjv-moe.gguf";
    file_bytes f;
    if (!open_file(path, &f)) return;
    brisk_model *m = load(path);
    if (!m) goto out;
    CHECK(!strcmp(f.arch, "qwen3moe"));
    int n_layer = (int)key(&f, "block_count"), ne = (int)key(&f, "expert_count"),
        k = (int)key(&f, "expert_used_count");
    CHECK(ne == 8 && k == 2);
    brisk_model_info info;
    brisk_model_get_info(m, &info);
    CHECK(info.n_expert == ne && info.n_expert_used == k);
    CHECK_NEAR((double)info.decode_bytes, weights_expected(&f, 1, (double)k / ne), 0.5);
    /* without measured routing: each token's k experts, all distinct, at most all of them */
    for (int n_seq = 1; n_seq <= 5; n_seq++) {
        brisk_step_bytes b;
        CHECK_OK(brisk_decode_bytes(m, BRISK_KV_F32, 10, n_seq, 0, &b));
        double used = n_seq * k < ne ? n_seq * k : ne;
        CHECK_NEAR((double)b.weights, weights_expected(&f, n_seq, used / ne), 1);
        CHECK_NEAR((double)b.kv, n_seq * n_layer * kv_expected(&f, BRISK_KV_F32, 10), 0.5);
        CHECK(b.state == 0);
    }
    /* measured: a fraction of the experts, as an average over steps */
    brisk_step_bytes b;
    CHECK_OK(brisk_decode_bytes(m, BRISK_KV_F16, 0, 3, 3.5, &b));
    CHECK_NEAR((double)b.weights, weights_expected(&f, 3, 3.5 / ne), 1);

    /* the context counts the distinct experts of each pass and layer */
    brisk_context_params cp = brisk_context_default_params();
    cp.n_ctx = 64;
    cp.n_seq_max = 4;
    cp.n_threads = 1;
    cp.collect_expert_stats = true;
    brisk_context *c = NULL;
    CHECK_OK(brisk_context_new(m, &cp, &c));
    if (!c) goto out;
    int64_t reads = -1, passes = -1;
    CHECK_OK(brisk_context_expert_reads(c, &reads, &passes));
    CHECK(reads == 0 && passes == 0);
    brisk_batch_entry one = {5, 0, 0, true};
    CHECK_OK(brisk_decode(c, &one, 1));
    CHECK_OK(brisk_context_expert_reads(c, &reads, &passes));
    CHECK(passes == n_layer && reads == (int64_t)n_layer * k); /* one token: exactly its k */
    brisk_batch_entry four[4];
    for (int s = 0; s < 4; s++) four[s] = (brisk_batch_entry){(brisk_token)(100 + 37 * s), s == 0, s, true};
    CHECK_OK(brisk_decode(c, four, 4));
    int64_t r2, p2;
    CHECK_OK(brisk_context_expert_reads(c, &r2, &p2));
    CHECK(p2 - passes == n_layer);
    CHECK(r2 - reads >= (int64_t)n_layer * k && r2 - reads <= (int64_t)n_layer * ne);
    /* they agree with the routing counts: as many picks as tokens x k x layers */
    int64_t counts[256];
    int nl = 0, nx = 0;
    CHECK_OK(brisk_context_expert_counts(c, counts, 256, &nl, &nx));
    int64_t picks = 0;
    for (int i = 0; i < nl * nx; i++) picks += counts[i];
    CHECK(picks == 5LL * k * n_layer);
    brisk_context_free(c);
out:
    brisk_model_free(m);
    gguf_close(f.g);
}

/* Any file: layers with KV from full_attention_interval (all without it), DeltaNet state from
 * the ssm keys, experts from expert_count / expert_used_count. */
static void check_generic(const char *path) {
    file_bytes f;
    if (!open_file(path, &f)) return;
    brisk_model *m = load(path);
    if (!m) goto out;
    int n_layer = (int)key(&f, "block_count"), interval = (int)key(&f, "full_attention_interval"), n_attn = 0;
    for (int l = 0; l < n_layer; l++) n_attn += interval <= 0 || (l + 1) % interval == 0;
    double ds = (double)key(&f, "ssm.state_size"), nk = (double)key(&f, "ssm.group_count"),
           nv = (double)key(&f, "ssm.time_step_rank"), d_conv = (double)key(&f, "ssm.conv_kernel");
    double state = interval > 0 ? (nv * ds * ds + (d_conv - 1) * (2 * nk + nv) * ds) * 4 : 0;
    double ne = (double)key(&f, "expert_count"), k = (double)key(&f, "expert_used_count");
    for (int n_seq = 1; n_seq <= 6; n_seq += 5) {
        brisk_step_bytes b;
        CHECK_OK(brisk_decode_bytes(m, BRISK_KV_Q8_0, 777, n_seq, 0, &b));
        double share = ne > 0 ? (n_seq * k < ne ? n_seq * k : ne) / ne : 0;
        CHECK_NEAR((double)b.weights, weights_expected(&f, n_seq, share), 1);
        CHECK_NEAR((double)b.kv, n_seq * n_attn * kv_expected(&f, BRISK_KV_Q8_0, 777), 0.5);
        CHECK_NEAR((double)b.state, 2 * n_seq * (n_layer - n_attn) * state, 0.5);
    }
out:
    brisk_model_free(m);
    gguf_close(f.g);
}

/* Random models of the synth presets: the hybrid MoE with a shared expert (qwen35moe), and an
 * untied embedding (llama: a step reads its tokens' rows of it, and the LM head apart). */
static void test_synth(void) {
    const char *presets[] = {"tiny-qwen35moe", "tiny-llama"};
    char dir[] = "/tmp/brisk-test-bytes-XXXXXX", path[256];
    if (!mkdtemp(dir)) {
        CHECK(!"mkdtemp");
        return;
    }
    for (int i = 0; i < 2; i++) {
        synth_config c;
        CHECK_OK(synth_preset(presets[i], &c));
        c.type = QT_F16; /* half the bytes of f32 to write */
        c.n_threads = 2;
        snprintf(path, sizeof path, "%s/%s.gguf", dir, presets[i]);
        CHECK_OK(synth_write(&c, NULL, path, false));
        file_bytes f;
        if (open_file(path, &f)) {
            CHECK(i == 1 ? !f.tied : f.experts > 0 && key(&f, "full_attention_interval") == 2);
            gguf_close(f.g);
        }
        check_generic(path);
        remove(path);
    }
    rmdir(dir);
}

/* A context without statistics, or a dense model, has no expert reads. */
static void test_reads_unsupported(void) {
    brisk_model *m = load("models/brisk-kjv-6m.gguf");
    if (!m) return;
    brisk_context_params cp = brisk_context_default_params();
    cp.n_ctx = 32;
    cp.n_threads = 1;
    cp.collect_expert_stats = true;
    brisk_context *c = NULL;
    CHECK_OK(brisk_context_new(m, &cp, &c));
    int64_t r, p;
    if (c) CHECK(brisk_context_expert_reads(c, &r, &p) == BRISK_ERR_UNSUPPORTED);
    brisk_context_free(c);
    brisk_model_free(m);
}

int main(int argc, char **argv) {
    test_case cases[] = {
        {"dense", test_dense},
        {"hybrid", test_hybrid},
        {"moe", test_moe},
        {"synth", test_synth},
        {"reads_unsupported", test_reads_unsupported},
    };
    return test_main(cases, sizeof cases / sizeof cases[0], argc, argv);
}
