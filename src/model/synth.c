#include "model/synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "format/gguf.h"
#include "quant/quant.h"

static const struct {
    const char *name;
    synth_config c;
} presets[] = {
    {"qwen3-0.6b", {"qwen3", "synthetic Qwen3-0.6B", 151936, 1024, 28, 16, 8, 128, 3072, 40960, 1e6f, 1e-6f, true, QT_BF16, 1, NULL, 0, 0}},
    {"qwen3-8b", {"qwen3", "synthetic Qwen3-8B", 151936, 4096, 36, 32, 8, 128, 12288, 40960, 1e6f, 1e-6f, false, QT_BF16, 1, NULL, 0, 0}},
    {"llama3-8b", {"llama", "synthetic Llama-3-8B", 128256, 4096, 32, 32, 8, 128, 14336, 8192, 5e5f, 1e-5f, false, QT_BF16, 1, NULL, 0, 0}},
    {"tiny-llama", {"llama", "synthetic tiny llama", 0, 256, 4, 8, 4, 32, 768, 2048, 1e4f, 1e-5f, false, QT_F32, 1, NULL, 0, 0}},
    {"tiny-qwen3", {"qwen3", "synthetic tiny qwen3", 0, 256, 4, 8, 4, 64, 768, 4096, 1e6f, 1e-6f, true, QT_F32, 1, NULL, 0, 0}},
    /* qwen2 with q/k/v biases and YaRN context extension (x4 over an original 64 positions) */
    {"tiny-qwen2-yarn", {"qwen2", "synthetic tiny qwen2 yarn", 0, 256, 3, 4, 2, 64, 512, 256, 1e4f, 1e-6f, false, QT_F32, 1, "yarn", 4.0f, 64}},
    /* llama with linear RoPE scaling (x2) */
    {"tiny-llama-linear", {"llama", "synthetic tiny llama linear rope", 0, 256, 3, 8, 8, 32, 512, 4096, 1e4f, 1e-5f, false, QT_F32, 1, "linear", 2.0f, 2048}},
};
#define N_PRESETS (sizeof presets / sizeof presets[0])

const char *const *synth_preset_names(void) {
    static const char *names[N_PRESETS + 1];
    for (size_t i = 0; i < N_PRESETS; i++) names[i] = presets[i].name;
    return names;
}

brisk_status synth_preset(const char *name, synth_config *c) {
    for (size_t i = 0; i < N_PRESETS; i++)
        if (!strcmp(name, presets[i].name)) {
            *c = presets[i].c;
            return BRISK_OK;
        }
    return bk_fail(BRISK_ERR_NOT_FOUND, "unknown preset '%s'", name);
}

/* xoshiro-style generator seeded per tensor, so files are reproducible. */
typedef struct { uint64_t s; } rng;
static uint64_t rng_u64(rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static float rng_normal(rng *r) {
    double u1 = ((rng_u64(r) >> 11) + 1.0) * 0x1.0p-53, u2 = (rng_u64(r) >> 11) * 0x1.0p-53;
    return (float)(sqrt(-2.0 * log(u1)) * cos(2 * M_PI * u2));
}
static uint64_t hash_name(const char *s, uint64_t seed) {
    uint64_t h = 1469598103934665603ull ^ seed;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

typedef struct tensor_plan {
    char name[64];
    int64_t ne0, ne1; /* ne1 = 0: vector */
    float std;        /* 0: all ones */
    uint32_t type;
} tensor_plan;

static int plan_tensors(const synth_config *c, tensor_plan *p) {
    int n = 0;
    int64_t d = c->n_embd, qd = (int64_t)c->n_head * c->head_dim, kvd = (int64_t)c->n_head_kv * c->head_dim;
    bool qwen3 = !strcmp(c->arch, "qwen3"), qwen2 = !strcmp(c->arch, "qwen2");
#define ADD(nm, a, b, sd, ty) \
    do { snprintf(p[n].name, sizeof p[n].name, "%s", nm); p[n].ne0 = a; p[n].ne1 = b; p[n].std = sd; p[n].type = ty; n++; } while (0)
    ADD("token_embd.weight", d, c->n_vocab, 0.02f, c->type);
    ADD("output_norm.weight", d, 0, 0, QT_F32);
    if (!c->tied) ADD("output.weight", d, c->n_vocab, 1.0f / sqrtf((float)d), c->type);
    for (int l = 0; l < c->n_layer; l++) {
        char nm[64];
        float sd = 1.0f / sqrtf((float)d), sf = 1.0f / sqrtf((float)c->n_ff);
        /* outputs of residual branches are damped by depth so the stream stays O(1) */
        float so = sd / sqrtf(2.0f * c->n_layer), sdn = sf / sqrtf(2.0f * c->n_layer);
#define L(suffix) (snprintf(nm, sizeof nm, "blk.%d.%s", l, suffix), nm)
        ADD(L("attn_norm.weight"), d, 0, 0, QT_F32);
        ADD(L("attn_q.weight"), d, qd, sd, c->type);
        ADD(L("attn_k.weight"), d, kvd, sd, c->type);
        ADD(L("attn_v.weight"), d, kvd, sd, c->type);
        if (qwen2) {
            ADD(L("attn_q.bias"), qd, 0, 0.02f, QT_F32);
            ADD(L("attn_k.bias"), kvd, 0, 0.02f, QT_F32);
            ADD(L("attn_v.bias"), kvd, 0, 0.02f, QT_F32);
        }
        if (qwen3) {
            ADD(L("attn_q_norm.weight"), c->head_dim, 0, 0, QT_F32);
            ADD(L("attn_k_norm.weight"), c->head_dim, 0, 0, QT_F32);
        }
        ADD(L("attn_output.weight"), qd, d, so, c->type);
        ADD(L("ffn_norm.weight"), d, 0, 0, QT_F32);
        ADD(L("ffn_gate.weight"), d, c->n_ff, sd, c->type);
        ADD(L("ffn_up.weight"), d, c->n_ff, sd, c->type);
        ADD(L("ffn_down.weight"), c->n_ff, d, sdn, c->type);
#undef L
    }
#undef ADD
    return n;
}

/* A self-contained SentencePiece-style vocabulary: <unk>, <s>, </s>, the 256
 * byte tokens and the printable ASCII characters (with "▁" for space), for
 * models made without a vocab file (the demo). */
static brisk_status set_builtin_vocab(gguf_writer *w, int *n_tokens) {
    enum { N = 3 + 256 + 95 };
    static char texts[N][8];
    const char *strs[N];
    size_t lens[N];
    float scores[N];
    int32_t types[N];
    int n = 0;
    const char *special[3] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < 3; i++, n++) {
        snprintf(texts[n], sizeof texts[n], "%s", special[i]);
        types[n] = i == 0 ? 2 : 3;
        scores[n] = 0;
    }
    for (int b = 0; b < 256; b++, n++) {
        snprintf(texts[n], sizeof texts[n], "<0x%02X>", b);
        types[n] = 6;
        scores[n] = 0;
    }
    for (int ch = 32; ch < 127; ch++, n++) {
        if (ch == ' ') snprintf(texts[n], sizeof texts[n], "\xe2\x96\x81");
        else snprintf(texts[n], sizeof texts[n], "%c", ch);
        types[n] = 1;
        scores[n] = -(float)(ch - 32);
    }
    for (int i = 0; i < n; i++) {
        strs[i] = texts[i];
        lens[i] = strlen(texts[i]);
    }
    BK_TRY(gguf_writer_set_str(w, "tokenizer.ggml.model", "llama"));
    BK_TRY(gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", strs, lens, (uint64_t)n));
    BK_TRY(gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, (uint64_t)n));
    BK_TRY(gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, (uint64_t)n));
    BK_TRY(gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0));
    BK_TRY(gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1));
    BK_TRY(gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2));
    BK_TRY(gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true));
    *n_tokens = n;
    return BRISK_OK;
}

static brisk_status set_meta(gguf_writer *w, const synth_config *c, const gguf_file *vocab) {
    char k[128];
    const char *a = c->arch;
#define KEY(s) (snprintf(k, sizeof k, "%s.%s", a, s), k)
    BK_TRY(gguf_writer_set_str(w, "general.architecture", a));
    BK_TRY(gguf_writer_set_str(w, "general.name", c->name ? c->name : "synthetic"));
    BK_TRY(gguf_writer_set_u32(w, "general.quantization_version", 2));
    BK_TRY(gguf_writer_set_u32(w, KEY("context_length"), (uint32_t)c->n_ctx));
    BK_TRY(gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)c->n_embd));
    BK_TRY(gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)c->n_layer));
    BK_TRY(gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)c->n_ff));
    BK_TRY(gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)c->n_head));
    BK_TRY(gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)c->n_head_kv));
    BK_TRY(gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)c->head_dim));
    BK_TRY(gguf_writer_set_u32(w, KEY("attention.value_length"), (uint32_t)c->head_dim));
    BK_TRY(gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), c->rms_eps));
    BK_TRY(gguf_writer_set_f32(w, KEY("rope.freq_base"), c->rope_base));
    BK_TRY(gguf_writer_set_u32(w, KEY("rope.dimension_count"), (uint32_t)c->head_dim));
    BK_TRY(gguf_writer_set_u32(w, KEY("vocab_size"), (uint32_t)c->n_vocab));
    if (c->rope_scaling) {
        BK_TRY(gguf_writer_set_str(w, KEY("rope.scaling.type"), c->rope_scaling));
        BK_TRY(gguf_writer_set_f32(w, KEY("rope.scaling.factor"), c->rope_factor));
        if (c->rope_orig_ctx > 0)
            BK_TRY(gguf_writer_set_u32(w, KEY("rope.scaling.original_context_length"), (uint32_t)c->rope_orig_ctx));
    }
#undef KEY
    if (!vocab) {
        int n_tok;
        return set_builtin_vocab(w, &n_tok);
    }
    for (int64_t i = 0; i < gguf_kv_count(vocab); i++)
        if (!strncmp(gguf_kv_key(vocab, i), "tokenizer.", 10)) BK_TRY(gguf_writer_copy_kv(w, vocab, i));
    return BRISK_OK;
}

brisk_status synth_write(const synth_config *c0, const char *vocab_path, const char *out_path, bool progress) {
    synth_config c = *c0;
    if (c.n_head <= 0 || c.n_head_kv <= 0 || c.n_head % c.n_head_kv || c.n_embd <= 0 || c.n_layer <= 0 ||
        c.head_dim <= 0 || c.n_ff <= 0)
        return bk_fail(BRISK_ERR_INVALID_ARG, "synth: inconsistent shape");
    if (strcmp(c.arch, "llama") && strcmp(c.arch, "qwen2") && strcmp(c.arch, "qwen3"))
        return bk_fail(BRISK_ERR_UNSUPPORTED, "synth: architecture '%s' is not supported", c.arch);
    const quant_traits *qt = quant_get_traits(c.type);
    if (!qt || !qt->can_quantize)
        return bk_fail(BRISK_ERR_UNSUPPORTED, "synth: cannot write type %s", quant_type_name(c.type));
    gguf_file *vocab = NULL;
    uint64_t n_tok = 3 + 256 + 95; /* the built-in vocabulary */
    gguf_value_type et;
    const void *unused;
    if (vocab_path) BK_TRY(gguf_open(vocab_path, &vocab));
    if (vocab && gguf_get_arr(vocab, "tokenizer.ggml.tokens", &et, &n_tok, &unused) != BRISK_OK) {
        gguf_close(vocab);
        return bk_fail(BRISK_ERR_FORMAT, "%s: no tokenizer.ggml.tokens", vocab_path);
    }
    if (c.n_vocab <= 0) c.n_vocab = (int)n_tok;
    if ((uint64_t)c.n_vocab < n_tok) {
        gguf_close(vocab);
        return bk_fail(BRISK_ERR_INVALID_ARG, "synth: n_vocab %d is below the vocabulary's %llu tokens",
                       c.n_vocab, (unsigned long long)n_tok);
    }
    int max_t = 16 + c.n_layer * 16;
    tensor_plan *plan = calloc((size_t)max_t, sizeof *plan);
    gguf_writer *w = gguf_writer_new();
    float *row = NULL;
    void *qrow = NULL;
    brisk_status s = (!plan || !w) ? bk_fail(BRISK_ERR_NOMEM, "out of memory") : BRISK_OK;
    int n = 0;
    if (s == BRISK_OK) {
        n = plan_tensors(&c, plan);
        s = set_meta(w, &c, vocab);
    }
    uint64_t total = 0;
    for (int i = 0; s == BRISK_OK && i < n; i++) {
        uint32_t ty = plan[i].type;
        if (plan[i].ne0 % quant_get_traits(ty)->block_elems) ty = QT_F32; /* odd widths stay f32 */
        plan[i].type = ty;
        int64_t ne[2] = {plan[i].ne0, plan[i].ne1 ? plan[i].ne1 : 1};
        s = gguf_writer_add_tensor(w, plan[i].name, ty, plan[i].ne1 ? 2 : 1, ne);
        total += quant_row_size(ty, ne[0]) * (uint64_t)ne[1];
    }
    if (s == BRISK_OK) s = gguf_writer_begin(w, out_path);
    /* One tensor is generated in memory at a time (the largest is the embedding). */
    size_t max_bytes = 0;
    for (int i = 0; i < n; i++) {
        size_t b = quant_row_size(plan[i].type, plan[i].ne0) * (size_t)(plan[i].ne1 ? plan[i].ne1 : 1);
        if (b > max_bytes) max_bytes = b;
    }
    int64_t max_row = c.n_embd > c.n_ff ? c.n_embd : c.n_ff;
    row = malloc((size_t)max_row * sizeof(float));
    qrow = malloc(max_bytes);
    if (s == BRISK_OK && (!row || !qrow)) s = bk_fail(BRISK_ERR_NOMEM, "out of memory");
    uint64_t done = 0;
    for (int i = 0; s == BRISK_OK && i < n; i++) {
        tensor_plan *t = &plan[i];
        rng r = {hash_name(t->name, c.seed)};
        int64_t rows = t->ne1 ? t->ne1 : 1;
        size_t rb = quant_row_size(t->type, t->ne0);
        for (int64_t j = 0; j < rows && s == BRISK_OK; j++) {
            for (int64_t e = 0; e < t->ne0; e++) row[e] = t->std > 0 ? t->std * rng_normal(&r) : 1.0f;
            s = quant_quantize(t->type, row, (char *)qrow + (size_t)j * rb, t->ne0);
        }
        if (s == BRISK_OK) s = gguf_writer_write_tensor(w, qrow, rb * (uint64_t)rows);
        done += rb * (uint64_t)rows;
        if (progress)
            fprintf(stderr, "\rwriting %s: %5.1f%% (%d/%d tensors)", out_path, 100.0 * done / (double)total, i + 1, n);
    }
    if (s == BRISK_OK) s = gguf_writer_finish(w);
    if (progress) fprintf(stderr, "\n");
    free(row);
    free(qrow);
    free(plan);
    gguf_writer_free(w);
    gguf_close(vocab);
    return s;
}
