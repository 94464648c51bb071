/* synth.c — writes random-weight models (see synth.h): the tensor plan of
 * each architecture, the metadata and vocabulary, the per-tensor types of a
 * llama-quantize mix, and the threaded, streaming generation of the rows. */
#include "model/synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "base/status.h"
#include "format/gguf.h"
#include "format/gguf_rows.h"
#include "model/model.h"
#include "quant/quant.h"
#include "quant/quant_mix.h"

#define MAX_THREADS 256

/* ---- a counter-based generator: splitmix64 streams keyed by (seed, tensor, row) ---- */

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static uint64_t next64(uint64_t *s) { return mix64(*s += 0x9E3779B97F4A7C15ull); }
static uint64_t hash_name(const char *s, uint64_t seed) {
    uint64_t h = 1469598103934665603ull ^ mix64(seed);
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return mix64(h);
}
static float unit(uint64_t x) { return (float)((x >> 40) + 0.5) * 0x1.0p-24f; } /* (0, 1) */

/* n standard normals (Box-Muller, both values of each pair). */
static void fill_normal(uint64_t *s, float *x, int64_t n, float scale) {
    int64_t i = 0;
    for (; i + 1 < n; i += 2) {
        uint64_t r = next64(s);
        float u1 = unit(r), u2 = unit(r << 24);
        float m = scale * sqrtf(-2.0f * logf(u1)), c = cosf(6.2831853f * u2), sn = sinf(6.2831853f * u2);
        x[i] = m * c;
        x[i + 1] = m * sn;
    }
    if (i < n) {
        uint64_t r = next64(s);
        x[i] = scale * sqrtf(-2.0f * logf(unit(r))) * cosf(6.2831853f * unit(r << 24));
    }
}

/* ---- the tensor plan ---- */

typedef enum { INIT_NORMAL, INIT_ONES, INIT_UNIFORM, INIT_ROUTER, INIT_D2T, INIT_LLAMA3, INIT_EYE } init_kind;

typedef struct tensor_plan {
    char name[64];
    int n_dims;
    int64_t ne[3];
    init_kind init;
    float a, b;    /* NORMAL, ROUTER: std; UNIFORM: range [a, b]; D2T: stride, target vocabulary;
                    * LLAMA3: head dim, RoPE base */
    bool matrix;   /* gets the model's type (else f32) */
    bool ids;      /* token ids, i64 whatever the model's type (D2T) */
    uint32_t type; /* chosen type */
} tensor_plan;

typedef struct {
    tensor_plan *p;
    int n;
} plan_list;

static void add(plan_list *l, const char *name, init_kind init, float a, bool matrix, int n_dims, int64_t ne0,
                int64_t ne1, int64_t ne2) {
    tensor_plan *t = &l->p[l->n++];
    *t = (tensor_plan){.n_dims = n_dims, .ne = {ne0, ne1, ne2}, .init = init, .a = a, .matrix = matrix};
    snprintf(t->name, sizeof t->name, "%s", name);
    if (init == INIT_UNIFORM) t->b = -1.0f, t->a = -16.0f; /* ssm_a = -exp(A_log), A in [1, 16] */
}
static void vec(plan_list *l, const char *name, init_kind init, float a, int64_t n) {
    add(l, name, init, a, false, 1, n, 1, 1);
}
static void mat(plan_list *l, const char *name, float std, int64_t n_in, int64_t n_out) {
    add(l, name, INIT_NORMAL, std, true, 2, n_in, n_out, 1);
}
static void experts(plan_list *l, const char *name, float std, int64_t n_in, int64_t n_out, int64_t n_exp) {
    add(l, name, INIT_NORMAL, std, true, 3, n_in, n_out, n_exp);
}

static int64_t gcd64(int64_t a, int64_t b) {
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static bool is_next(const synth_config *c) { return !strcmp(c->arch, "qwen3next"); }
static bool is_moe(const synth_config *c) {
    return !strcmp(c->arch, "qwen3moe") || !strcmp(c->arch, "qwen35moe") || is_next(c);
}
static bool is_hybrid(const synth_config *c) { return !strncmp(c->arch, "qwen35", 6) || is_next(c); }
static bool is_eagle3(const synth_config *c) { return !strcmp(c->arch, "eagle3"); }

/* An EAGLE-3 drafter as llama.cpp's eagle3 loader reads it: fc (3 d_tgt -> d), one layer whose q/k/v take
 * 2 d inputs, an own LM head; no token_embd (the target's serves, as in EAGLE-3 checkpoints for Llama 3.1). */
static void plan_eagle3(const synth_config *c, plan_list *l) {
    const int64_t d = c->n_embd, hd = c->head_dim, qd = (int64_t)c->n_head * hd, kvd = (int64_t)c->n_head_kv * hd;
    const float sd2 = 1.0f / sqrtf(2.0f * (float)d), damp = 1.0f / sqrtf(2.0f);
    mat(l, "fc.weight", 1.0f / sqrtf(3.0f * (float)c->eagle3_target_embd), 3 * (int64_t)c->eagle3_target_embd, d);
    vec(l, "output_norm.weight", INIT_ONES, 0, d);
    const int64_t n_out = c->eagle3_draft_vocab > 0 ? c->eagle3_draft_vocab : c->n_vocab;
    mat(l, "output.weight", 1.0f / sqrtf((float)d), d, n_out);
    if (c->eagle3_draft_vocab > 0) { /* draft row i -> target (stride i + 3) mod V, stride prime to V: distinct */
        int64_t stride = 7;
        while (gcd64(stride, c->n_vocab) != 1) stride++;
        vec(l, "d2t", INIT_D2T, (float)stride, c->eagle3_draft_vocab);
        l->p[l->n - 1].b = (float)c->n_vocab;
        l->p[l->n - 1].ids = true;
    }
    if (c->eagle3_rope_llama3) {
        vec(l, "rope_freqs.weight", INIT_LLAMA3, (float)hd, hd / 2);
        l->p[l->n - 1].b = c->rope_base;
    }
    vec(l, "blk.0.attn_norm.weight", INIT_ONES, 0, d);
    vec(l, "blk.0.attn_norm_2.weight", INIT_ONES, 0, d);
    mat(l, "blk.0.attn_q.weight", sd2, 2 * d, qd);
    mat(l, "blk.0.attn_k.weight", sd2, 2 * d, kvd);
    mat(l, "blk.0.attn_v.weight", sd2, 2 * d, kvd);
    mat(l, "blk.0.attn_output.weight", damp / sqrtf((float)qd), qd, d);
    vec(l, "blk.0.ffn_norm.weight", INIT_ONES, 0, d);
    mat(l, "blk.0.ffn_gate.weight", 1.0f / sqrtf((float)d), d, c->n_ff);
    mat(l, "blk.0.ffn_up.weight", 1.0f / sqrtf((float)d), d, c->n_ff);
    mat(l, "blk.0.ffn_down.weight", damp / sqrtf((float)c->n_ff), c->n_ff, d);
}

/* Upper bound of tensors per layer, for the allocation. */
#define MAX_PER_LAYER 24

static void plan_tensors(const synth_config *c, plan_list *l) {
    const int64_t d = c->n_embd, hd = c->head_dim, qd = (int64_t)c->n_head * hd, kvd = (int64_t)c->n_head_kv * hd;
    const bool qwen2 = !strcmp(c->arch, "qwen2"), hybrid = is_hybrid(c), moe = is_moe(c);
    const bool qk_norm = !strcmp(c->arch, "qwen3") || !strcmp(c->arch, "qwen3moe") || hybrid;
    const float sd = 1.0f / sqrtf((float)d), damp0 = 1.0f / sqrtf(2.0f * c->n_layer);
    /* DeltaNet sizes */
    const int64_t key_dim = (int64_t)c->ssm_n_group * c->ssm_d_state, val_dim = (int64_t)c->ssm_dt_rank * c->ssm_d_state;
    const int64_t conv_dim = 2 * key_dim + val_dim;
    char nm[64];
    l->n = 0;
    if (is_eagle3(c)) {
        plan_eagle3(c, l);
        return;
    }
    mat(l, "token_embd.weight", c->bigram ? 1.0f : 0.02f, d, c->n_vocab);
    vec(l, "output_norm.weight", INIT_ONES, 0, d);
    if (!c->tied) mat(l, "output.weight", sd, d, c->n_vocab);
    for (int i = 0; i < c->n_layer + c->n_mtp; i++) {
#define L(suffix) (snprintf(nm, sizeof nm, "blk.%d.%s", i, suffix), nm)
        /* the residual branches' output projections (bigram: a quarter in the trunk, none in an MTP block; at
         * a half, qwen3.6-35b-a3b's near-tied expert choices still moved its greedy text with the batch) */
        const float damp = damp0 * (!c->bigram ? 1.0f : i < c->n_layer ? 0.25f : 0.0f);
        vec(l, L("attn_norm.weight"), INIT_ONES, 0, d);
        if (i >= c->n_layer) { /* an MTP block: [enorm(embedding) ; hnorm(hidden)] -> eh_proj -> the block */
            if (c->bigram) add(l, L("nextn.eh_proj.weight"), INIT_EYE, 0, true, 2, 2 * d, d, 1);
            else mat(l, L("nextn.eh_proj.weight"), 1.0f / sqrtf(2.0f * (float)d), 2 * d, d);
            vec(l, L("nextn.enorm.weight"), INIT_ONES, 0, d);
            vec(l, L("nextn.hnorm.weight"), INIT_ONES, 0, d);
            vec(l, L("nextn.shared_head_norm.weight"), INIT_ONES, 0, d);
        }
        if (hybrid && i < c->n_layer && (i + 1) % c->full_attn_interval != 0) { /* Gated DeltaNet */
            if (c->ssm_in) { /* qwen3next's older layout: q, k, v, z fused, interleaved per key head */
                mat(l, L("ssm_in.weight"), sd, d, conv_dim + val_dim);
            } else {
                mat(l, L("attn_qkv.weight"), sd, d, conv_dim);
                mat(l, L("attn_gate.weight"), sd, d, val_dim);
            }
            add(l, L("ssm_conv1d.weight"), INIT_NORMAL, 1.0f / sqrtf((float)c->ssm_d_conv), false, 2, c->ssm_d_conv,
                conv_dim, 1);
            vec(l, L("ssm_dt.bias"), INIT_ONES, 0, c->ssm_dt_rank);
            vec(l, L("ssm_a"), INIT_UNIFORM, 0, c->ssm_dt_rank);
            if (is_next(c)) { /* per key head: its value heads' beta rows, then their alpha rows */
                mat(l, L("ssm_ba.weight"), sd, d, 2 * c->ssm_dt_rank);
            } else {
                mat(l, L("ssm_beta.weight"), sd, d, c->ssm_dt_rank);
                mat(l, L("ssm_alpha.weight"), sd, d, c->ssm_dt_rank);
            }
            vec(l, L("ssm_norm.weight"), INIT_ONES, 0, c->ssm_d_state);
            mat(l, L("ssm_out.weight"), damp / sqrtf((float)val_dim), val_dim, d);
        } else {
            mat(l, L("attn_q.weight"), sd, d, hybrid ? 2 * qd : qd); /* qwen35: query and gate per head */
            mat(l, L("attn_k.weight"), sd, d, kvd);
            mat(l, L("attn_v.weight"), sd, d, kvd);
            if (qwen2) {
                vec(l, L("attn_q.bias"), INIT_NORMAL, 0.02f, qd);
                vec(l, L("attn_k.bias"), INIT_NORMAL, 0.02f, kvd);
                vec(l, L("attn_v.bias"), INIT_NORMAL, 0.02f, kvd);
            }
            if (qk_norm) {
                vec(l, L("attn_q_norm.weight"), INIT_ONES, 0, hd);
                vec(l, L("attn_k_norm.weight"), INIT_ONES, 0, hd);
            }
            mat(l, L("attn_output.weight"), damp / sqrtf((float)qd), qd, d);
        }
        vec(l, hybrid ? L("post_attention_norm.weight") : L("ffn_norm.weight"), INIT_ONES, 0, d);
        if (moe) {
            add(l, L("ffn_gate_inp.weight"), INIT_ROUTER, sd, false, 2, d, c->n_expert, 1);
            experts(l, L("ffn_gate_exps.weight"), sd, d, c->n_ff_exp, c->n_expert);
            experts(l, L("ffn_up_exps.weight"), sd, d, c->n_ff_exp, c->n_expert);
            experts(l, L("ffn_down_exps.weight"), damp / sqrtf((float)c->n_ff_exp), c->n_ff_exp, d, c->n_expert);
            if (hybrid) {
                vec(l, L("ffn_gate_inp_shexp.weight"), INIT_NORMAL, sd, d);
                mat(l, L("ffn_gate_shexp.weight"), sd, d, c->n_ff_shexp);
                mat(l, L("ffn_up_shexp.weight"), sd, d, c->n_ff_shexp);
                mat(l, L("ffn_down_shexp.weight"), damp / sqrtf((float)c->n_ff_shexp), c->n_ff_shexp, d);
            }
        } else {
            mat(l, L("ffn_gate.weight"), sd, d, c->n_ff);
            mat(l, L("ffn_up.weight"), sd, d, c->n_ff);
            mat(l, L("ffn_down.weight"), damp / sqrtf((float)c->n_ff), c->n_ff, d);
        }
#undef L
    }
}

static int64_t plan_rows(const tensor_plan *t) { return t->ne[1] * t->ne[2]; }

/* ---- checks ---- */

static brisk_status check_config(const synth_config *c) {
    static const char *archs[] = {"llama", "qwen2", "qwen3", "qwen3moe", "qwen35", "qwen35moe", "qwen3next", "eagle3"};
    bool known = false;
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++) known |= c->arch && !strcmp(c->arch, archs[i]);
    if (!known) return bk_fail(BRISK_ERR_UNSUPPORTED, "synth: architecture '%s' is not supported", c->arch ? c->arch : "");
    if (c->n_head <= 0 || c->n_head_kv <= 0 || c->n_head % c->n_head_kv || c->n_embd <= 0 || c->n_layer <= 0 ||
        c->head_dim <= 0 || c->n_ff < 0 || c->n_layer > 4096)
        return bk_fail(BRISK_ERR_INVALID_ARG, "synth: inconsistent shape");
    if (!is_moe(c) && c->n_ff <= 0) return bk_fail(BRISK_ERR_INVALID_ARG, "synth: %s needs n_ff", c->arch);
    if (is_moe(c) && (c->n_expert <= 0 || c->n_expert_used <= 0 || c->n_expert_used > c->n_expert ||
                      c->n_ff_exp <= 0 || (is_hybrid(c) && c->n_ff_shexp <= 0)))
        return bk_fail(BRISK_ERR_INVALID_ARG, "synth: inconsistent expert shape");
    if (is_hybrid(c) && (c->ssm_d_conv <= 0 || c->ssm_d_state <= 0 || c->ssm_n_group <= 0 || c->ssm_dt_rank <= 0 ||
                         c->ssm_dt_rank % c->ssm_n_group || c->full_attn_interval <= 0 || c->n_rot > c->head_dim))
        return bk_fail(BRISK_ERR_INVALID_ARG, "synth: inconsistent DeltaNet shape");
    if (c->ssm_in && !is_next(c))
        return bk_fail(BRISK_ERR_INVALID_ARG, "synth: a fused ssm_in is qwen3next's, not %s's", c->arch);
    if (is_hybrid(c) && c->n_layer < c->full_attn_interval) /* llama.cpp cannot run a model without one */
        return bk_fail(BRISK_ERR_INVALID_ARG, "synth: %s needs at least %d layers (one of full attention)", c->arch,
                       c->full_attn_interval);
    if (c->n_mtp < 0 || c->n_mtp > 4 || (c->n_mtp && !is_hybrid(c)))
        return bk_fail(BRISK_ERR_INVALID_ARG, "synth: %d MTP blocks (0..4, qwen35, qwen35moe and qwen3next only)",
                       c->n_mtp);
    if (is_eagle3(c) && (c->n_layer != 1 || c->eagle3_target_embd <= 0 || c->eagle3_layers[0] < 0 ||
                         c->eagle3_layers[1] < 0 || c->eagle3_layers[2] < 0 || c->eagle3_draft_vocab < 0 ||
                         (c->n_vocab > 0 && c->eagle3_draft_vocab > c->n_vocab)))
        return bk_fail(BRISK_ERR_INVALID_ARG, "synth: an eagle3 drafter has one layer, a target width and three "
                       "target layers");
    if (!(c->expert_skew >= 0 && c->expert_skew <= 64))
        return bk_fail(BRISK_ERR_INVALID_ARG, "synth: expert skew %g is outside [0, 64]", (double)c->expert_skew);
    return BRISK_OK;
}

/* ---- metadata ---- */

static brisk_status set_arch_meta(gguf_writer *w, const synth_config *c, const quant_ftype *ft) {
    char k[128];
    const char *a = c->arch;
#define KEY(s) (snprintf(k, sizeof k, "%s.%s", a, s), k)
#define U32(s, v) BK_TRY(gguf_writer_set_u32(w, KEY(s), (uint32_t)(v)))
    BK_TRY(gguf_writer_set_str(w, "general.architecture", a));
    BK_TRY(gguf_writer_set_str(w, "general.name", c->name ? c->name : "synthetic"));
    BK_TRY(gguf_writer_set_u32(w, "general.quantization_version", 2));
    if (ft) BK_TRY(gguf_writer_set_u32(w, "general.file_type", ft->id));
    U32("context_length", c->n_ctx);
    U32("embedding_length", c->n_embd);
    U32("block_count", c->n_layer + c->n_mtp);
    if (c->n_mtp > 0) U32("nextn_predict_layers", c->n_mtp);
    if (c->n_ff > 0) U32("feed_forward_length", c->n_ff);
    U32("attention.head_count", c->n_head);
    U32("attention.head_count_kv", c->n_head_kv);
    U32("attention.key_length", c->head_dim);
    U32("attention.value_length", c->head_dim);
    BK_TRY(gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), c->rms_eps));
    BK_TRY(gguf_writer_set_f32(w, KEY("rope.freq_base"), c->rope_base));
    U32("rope.dimension_count", c->n_rot > 0 ? c->n_rot : c->head_dim);
    U32("vocab_size", c->n_vocab);
    if (c->rope_scaling) {
        BK_TRY(gguf_writer_set_str(w, KEY("rope.scaling.type"), c->rope_scaling));
        BK_TRY(gguf_writer_set_f32(w, KEY("rope.scaling.factor"), c->rope_factor));
        if (c->rope_orig_ctx > 0) U32("rope.scaling.original_context_length", c->rope_orig_ctx);
    }
    if (is_moe(c)) {
        U32("expert_count", c->n_expert);
        U32("expert_used_count", c->n_expert_used);
        U32("expert_feed_forward_length", c->n_ff_exp);
        if (is_hybrid(c)) U32("expert_shared_feed_forward_length", c->n_ff_shexp);
    }
    if (is_hybrid(c) && !is_next(c)) { /* qwen3next's RoPE is plain NEOX */
        int32_t sec[4] = {c->rope_sections[0], c->rope_sections[1], c->rope_sections[2], c->rope_sections[3]};
        BK_TRY(gguf_writer_set_arr(w, KEY("rope.dimension_sections"), GGUF_TYPE_INT32, sec, 4));
    }
    if (is_eagle3(c)) {
        int32_t ids[3] = {c->eagle3_layers[0], c->eagle3_layers[1], c->eagle3_layers[2]};
        BK_TRY(gguf_writer_set_arr(w, KEY("target_layers"), GGUF_TYPE_INT32, ids, 3));
        U32("target_hidden_size", c->eagle3_target_embd);
    }
    if (is_hybrid(c)) {
        U32("ssm.conv_kernel", c->ssm_d_conv);
        U32("ssm.state_size", c->ssm_d_state);
        U32("ssm.group_count", c->ssm_n_group);
        U32("ssm.time_step_rank", c->ssm_dt_rank);
        U32("ssm.inner_size", (int64_t)c->ssm_dt_rank * c->ssm_d_state);
        U32("full_attention_interval", c->full_attn_interval);
    }
#undef U32
#undef KEY
    return BRISK_OK;
}

/* tokens / token_type / scores padded to n_vocab with "[PADi]" (unused) tokens. */
static brisk_status set_token_arrays(gguf_writer *w, int64_t n_tok, int64_t n_vocab, const char **strs,
                                     size_t *lens, int32_t *types, float *scores) {
    char *pad = NULL;
    if (n_vocab > n_tok && !(pad = malloc((size_t)(n_vocab - n_tok) * 16))) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    for (int64_t i = n_tok; i < n_vocab; i++) {
        char *p = pad + (i - n_tok) * 16;
        lens[i] = (size_t)snprintf(p, 16, "[PAD%lld]", (long long)i);
        strs[i] = p;
        if (types) types[i] = 5; /* unused */
        if (scores) scores[i] = -1e9f;
    }
    brisk_status s = gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", strs, lens, (uint64_t)n_vocab);
    if (s == BRISK_OK && types) s = gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, (uint64_t)n_vocab);
    if (s == BRISK_OK && scores) s = gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, (uint64_t)n_vocab);
    free(pad);
    return s;
}

/* A self-contained SentencePiece-style vocabulary: <unk>, <s>, </s>, the 256
 * byte tokens and the printable ASCII characters (with "▁" for space), for
 * models made without a vocab file (the demo). */
enum { BUILTIN_N = 3 + 256 + 95 };
static brisk_status set_builtin_vocab(gguf_writer *w, int64_t n_vocab) {
    static char texts[BUILTIN_N][8];
    const char **strs = malloc((size_t)n_vocab * sizeof *strs);
    size_t *lens = malloc((size_t)n_vocab * sizeof *lens);
    int32_t *types = malloc((size_t)n_vocab * sizeof *types);
    float *scores = malloc((size_t)n_vocab * sizeof *scores);
    brisk_status s = strs && lens && types && scores ? BRISK_OK : bk_fail(BRISK_ERR_NOMEM, "out of memory");
    int n = 0;
    const char *special[3] = {"<unk>", "<s>", "</s>"};
    for (; s == BRISK_OK && n < 3; n++) snprintf(texts[n], sizeof texts[n], "%s", special[n]);
    for (int b = 0; s == BRISK_OK && b < 256; b++, n++) snprintf(texts[n], sizeof texts[n], "<0x%02X>", b);
    for (int ch = 32; s == BRISK_OK && ch < 127; ch++, n++) {
        if (ch == ' ') snprintf(texts[n], sizeof texts[n], "\xe2\x96\x81");
        else snprintf(texts[n], sizeof texts[n], "%c", ch);
    }
    for (int i = 0; s == BRISK_OK && i < BUILTIN_N; i++) {
        strs[i] = texts[i];
        lens[i] = strlen(texts[i]);
        types[i] = i == 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1;
        scores[i] = i < 259 ? 0 : -(float)(i - 259);
    }
    if (s == BRISK_OK) s = gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    if (s == BRISK_OK) s = set_token_arrays(w, BUILTIN_N, n_vocab, strs, lens, types, scores);
    if (s == BRISK_OK) s = gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    if (s == BRISK_OK) s = gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    if (s == BRISK_OK) s = gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    if (s == BRISK_OK) s = gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    free(strs);
    free(lens);
    free(types);
    free(scores);
    return s;
}

/* Copies the vocab file's tokenizer.* keys, padding the per-token arrays. */
static brisk_status set_file_vocab(gguf_writer *w, const gguf_file *v, int64_t n_tok, int64_t n_vocab) {
    gguf_value_type et;
    uint64_t n;
    const void *tt = NULL, *sc = NULL;
    bool has_types = gguf_get_arr(v, "tokenizer.ggml.token_type", &et, &n, &tt) == BRISK_OK &&
                     et == GGUF_TYPE_INT32 && (int64_t)n == n_tok;
    bool has_scores = gguf_get_arr(v, "tokenizer.ggml.scores", &et, &n, &sc) == BRISK_OK &&
                      et == GGUF_TYPE_FLOAT32 && (int64_t)n == n_tok;
    const char **strs = malloc((size_t)n_vocab * sizeof *strs);
    size_t *lens = malloc((size_t)n_vocab * sizeof *lens);
    int32_t *types = has_types ? malloc((size_t)n_vocab * sizeof *types) : NULL;
    float *scores = has_scores ? malloc((size_t)n_vocab * sizeof *scores) : NULL;
    brisk_status s = strs && lens && (types || !has_types) && (scores || !has_scores)
                         ? BRISK_OK : bk_fail(BRISK_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; s == BRISK_OK && i < n_tok; i++)
        s = gguf_get_arr_str(v, "tokenizer.ggml.tokens", (uint64_t)i, &strs[i], &lens[i]);
    if (s == BRISK_OK && types) memcpy(types, tt, (size_t)n_tok * 4);
    if (s == BRISK_OK && scores) memcpy(scores, sc, (size_t)n_tok * 4);
    if (s == BRISK_OK) s = set_token_arrays(w, n_tok, n_vocab, strs, lens, types, scores);
    for (int64_t i = 0; s == BRISK_OK && i < gguf_kv_count(v); i++) {
        const char *key = gguf_kv_key(v, i);
        if (strncmp(key, "tokenizer.", 10) || !strcmp(key, "tokenizer.ggml.tokens") ||
            (types && !strcmp(key, "tokenizer.ggml.token_type")) || (scores && !strcmp(key, "tokenizer.ggml.scores")))
            continue;
        s = gguf_writer_copy_kv(w, v, i);
    }
    free(strs);
    free(lens);
    free(types);
    free(scores);
    return s;
}

/* ---- per-tensor types ---- */

/* The mix's choice for every tensor, planned from the shapes
 * (quant_mix_plan_shapes); what the mix leaves alone stays f32. */
static brisk_status mix_types(const synth_config *c, const quant_ftype *ft, plan_list *l, const char *out_path) {
    gguf_writer *w = gguf_writer_new();
    uint32_t *types = malloc((size_t)l->n * sizeof *types);
    quant_mix_tensor *mt = malloc((size_t)l->n * sizeof *mt);
    brisk_status s = w && types && mt ? set_arch_meta(w, c, NULL) : bk_fail(BRISK_ERR_NOMEM, "out of memory");
    for (int i = 0; i < l->n && mt; i++) {
        const tensor_plan *t = &l->p[i];
        mt[i] = (quant_mix_tensor){t->name, t->n_dims, {t->ne[0], t->ne[1], t->ne[2]}, false};
    }
    quant_mix_opts mo = {.pure = c->pure};
    if (s == BRISK_OK) {
        s = quant_mix_plan_shapes(w, l->n, mt, ft, &mo, out_path, types);
        w = NULL; /* consumed */
    }
    for (int i = 0; s == BRISK_OK && i < l->n; i++)
        l->p[i].type = l->p[i].ids ? QT_I64 : types[i] == QT_COUNT ? QT_F32 : types[i];
    gguf_writer_free(w);
    free(types);
    free(mt);
    return s;
}

static void pure_types(const synth_config *c, plan_list *l) {
    for (int i = 0; i < l->n; i++) {
        tensor_plan *t = &l->p[i];
        t->type = t->ids ? QT_I64 : t->matrix ? c->type : QT_F32;
        if (t->ne[0] % quant_get_traits(t->type)->block_elems) t->type = QT_F32; /* odd widths stay f32 */
    }
}

/* ---- generation ---- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    const tensor_plan *t;
    uint64_t key;           /* (seed, tensor) */
    const float *row_scale; /* ROUTER: per row, or NULL */
} gen_ctx;

/* Row r of the tensor: its numbers depend on (seed, tensor, row) only. */
static brisk_status gen_row(void *ctx, int64_t r, float *x, float *tmp) {
    const gen_ctx *g = ctx;
    const tensor_plan *t = g->t;
    const int64_t n = t->ne[0];
    uint64_t s = mix64(g->key ^ mix64((uint64_t)r + 1));
    (void)tmp;
    switch (t->init) {
    case INIT_ONES:
        for (int64_t e = 0; e < n; e++) x[e] = 1.0f;
        break;
    case INIT_UNIFORM:
        for (int64_t e = 0; e < n; e++) x[e] = t->a + (t->b - t->a) * unit(next64(&s));
        break;
    case INIT_NORMAL:
    case INIT_ROUTER:
        fill_normal(&s, x, n, t->a * (g->row_scale ? g->row_scale[r] : 1.0f));
        break;
    case INIT_D2T:
        for (int64_t e = 0; e < n; e++) x[e] = (float)(((int64_t)t->a * e + 3) % (int64_t)t->b);
        break;
    case INIT_LLAMA3:
        for (int64_t e = 0; e < n; e++) x[e] = model_rope_llama3_factor(e, (int64_t)t->a, t->b, 8, 1, 4, 8192);
        break;
    case INIT_EYE: /* [I | 0]: row r has its one at column r */
        for (int64_t e = 0; e < n; e++) x[e] = e == r ? 1.0f : 0.0f;
        break;
    }
    return BRISK_OK;
}

/* Router row scales for expert skew: expert e of a layer has popularity rank
 * rank[e] (a seeded shuffle) and scale (rank+1)^(-skew/4). */
static brisk_status router_scales(const synth_config *c, uint64_t key, int64_t n, float *scale) {
    int64_t *rank = malloc((size_t)n * sizeof *rank);
    if (!rank) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    uint64_t s = key ^ 0x5EEDull;
    for (int64_t e = 0; e < n; e++) rank[e] = e;
    for (int64_t e = n - 1; e > 0; e--) { /* Fisher-Yates */
        int64_t k = (int64_t)(next64(&s) % (uint64_t)(e + 1)), tmp = rank[e];
        rank[e] = rank[k];
        rank[k] = tmp;
    }
    for (int64_t e = 0; e < n; e++) scale[e] = powf((float)(rank[e] + 1), -c->expert_skew / 4.0f);
    free(rank);
    return BRISK_OK;
}

/* Generates tensor t, streamed out through rs. */
static brisk_status write_tensor(gguf_rows *rs, const synth_config *c, const tensor_plan *t) {
    const int64_t rows = plan_rows(t);
    gen_ctx g = {t, hash_name(t->name, c->seed), NULL};
    float *scales = NULL;
    if (t->init == INIT_ROUTER && c->expert_skew > 0) {
        if (!(scales = malloc((size_t)rows * sizeof *scales))) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
        brisk_status s = router_scales(c, g.key, rows, scales);
        if (s != BRISK_OK) {
            free(scales);
            return s;
        }
        g.row_scale = scales;
    }
    gguf_rows_set_period(rs, t->init == INIT_ROUTER || t->init == INIT_EYE ? 0 : c->repeat_rows);
    brisk_status s = gguf_rows_tensor(rs, t->type, t->ne[0], rows, gen_row, &g);
    free(scales);
    return s;
}

/* ---- the whole file ---- */

static brisk_status vocab_size(const synth_config *c, const char *vocab_path, gguf_file **vocab, int64_t *n_tok) {
    gguf_value_type et;
    uint64_t n = BUILTIN_N;
    const void *unused;
    if (vocab_path) {
        BK_TRY(gguf_open(vocab_path, vocab));
        if (gguf_get_arr(*vocab, "tokenizer.ggml.tokens", &et, &n, &unused) != BRISK_OK || et != GGUF_TYPE_STRING)
            return bk_fail(BRISK_ERR_FORMAT, "%s: no tokenizer.ggml.tokens", vocab_path);
    }
    *n_tok = (int64_t)n;
    if (c->n_vocab > 0 && c->n_vocab < (int64_t)n)
        return bk_fail(BRISK_ERR_INVALID_ARG, "synth: n_vocab %d is below the vocabulary's %llu tokens", c->n_vocab,
                       (unsigned long long)n);
    return BRISK_OK;
}

static brisk_status write_all(gguf_rows *rs, const synth_config *c, const plan_list *l) {
    for (int i = 0; i < l->n; i++) BK_TRY(write_tensor(rs, c, &l->p[i]));
    return gguf_rows_finish(rs);
}

brisk_status synth_write_ex(const synth_config *c0, const char *vocab_path, const char *out_path, bool show,
                            synth_stats *stats) {
    synth_config c = *c0;
    BK_TRY(check_config(&c));
    const quant_ftype *ft = NULL;
    if (c.ftype && !(ft = quant_ftype_find(c.ftype)))
        return bk_fail(BRISK_ERR_INVALID_ARG, "synth: unknown type '%s'", c.ftype);
    const quant_traits *qt = quant_get_traits(c.type);
    if (!ft && (!qt || !qt->can_quantize))
        return bk_fail(BRISK_ERR_UNSUPPORTED, "synth: cannot write type %s", quant_type_name(c.type));
    BK_TRY(atomic_file_check_distinct("synth", out_path, &vocab_path, 1)); /* --vocab's model */
    double t0 = now_s();
    int n_threads = c.n_threads > 0 ? c.n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    n_threads = n_threads < 1 ? 1 : n_threads > MAX_THREADS ? MAX_THREADS : n_threads;

    gguf_file *vocab = NULL;
    int64_t n_tok = 0;
    plan_list l = {calloc((size_t)(8 + (c.n_layer + c.n_mtp) * MAX_PER_LAYER), sizeof(tensor_plan)), 0};
    gguf_writer *w = NULL;
    gguf_rows *rs = NULL;
    uint64_t total = 0;
    brisk_status s = l.p ? BRISK_OK : bk_fail(BRISK_ERR_NOMEM, "out of memory");
    if (s == BRISK_OK) s = vocab_size(&c, vocab_path, &vocab, &n_tok);
    if (s == BRISK_OK) {
        if (c.n_vocab <= 0) c.n_vocab = (int)n_tok;
        if (c.eagle3_draft_vocab > c.n_vocab)
            s = bk_fail(BRISK_ERR_INVALID_ARG, "synth: a draft vocabulary of %d tokens beside a target's %d",
                        c.eagle3_draft_vocab, c.n_vocab);
    }
    if (s == BRISK_OK) {
        plan_tensors(&c, &l);
        if (ft) s = mix_types(&c, ft, &l, out_path);
        else pure_types(&c, &l);
    }
    if (s == BRISK_OK && !(w = gguf_writer_new())) s = bk_fail(BRISK_ERR_NOMEM, "out of memory");
    if (s == BRISK_OK) s = set_arch_meta(w, &c, ft);
    if (s == BRISK_OK) s = vocab ? set_file_vocab(w, vocab, n_tok, c.n_vocab) : set_builtin_vocab(w, c.n_vocab);
    size_t max_row = 0;
    int64_t max_ne0 = 0;
    for (int i = 0; s == BRISK_OK && i < l.n; i++) {
        const tensor_plan *t = &l.p[i];
        s = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne);
        size_t rb = quant_row_size(t->type, t->ne[0]);
        total += rb * (uint64_t)plan_rows(t);
        if (rb > max_row) max_row = rb;
        if (t->ne[0] > max_ne0) max_ne0 = t->ne[0];
    }
    char label[4200];
    snprintf(label, sizeof label, "synth %s", out_path);
    gguf_rows_opts ro = {.n_threads = n_threads, .slab_bytes = c.slab_bytes, .max_ne0 = max_ne0,
                         .max_row_bytes = max_row, .label = show ? label : NULL, .total_bytes = total,
                         .n_tensors = l.n};
    if (s == BRISK_OK) s = gguf_writer_begin(w, out_path); /* beside it first: see gguf_writer_finish */
    if (s == BRISK_OK) s = gguf_rows_new(w, &ro, &rs);
    if (s == BRISK_OK) s = write_all(rs, &c, &l);
    if (s == BRISK_OK) s = gguf_writer_finish(w);
    if (s == BRISK_OK && stats)
        *stats = (synth_stats){.bytes = total, .n_tensors = l.n, .seconds = now_s() - t0, .n_threads = n_threads};
    gguf_rows_free(rs);
    gguf_writer_free(w); /* removes the temporary file if unfinished */
    gguf_close(vocab);
    free(l.p);
    return s;
}

brisk_status synth_write(const synth_config *c, const char *vocab_path, const char *out_path, bool progress) {
    return synth_write_ex(c, vocab_path, out_path, progress, NULL);
}
