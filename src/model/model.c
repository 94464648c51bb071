/* model.c — loading: GGUF metadata -> hyperparameters, tensors -> bound weights. */
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "base/progress.h"
#include "base/status.h"
#include "engine/shard.h"
#include "quant/quant.h"

static const struct {
    const char *name;
    model_arch arch;
} known_archs[] = {{"llama", ARCH_LLAMA}, {"qwen2", ARCH_QWEN2}, {"qwen3", ARCH_QWEN3},
                  {"qwen3moe", ARCH_QWEN3MOE}, {"qwen35", ARCH_QWEN35},
                  {"qwen35moe", ARCH_QWEN35MOE}, {"qwen3next", ARCH_QWEN3NEXT}};

/* Reads "<arch>.<suffix>" as an int; absent keys give dflt (or fail if required). */
static brisk_status get_int(const gguf_file *g, const char *arch, const char *suffix, bool required,
                            int64_t dflt, int64_t lo, int64_t hi, int *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int64_t v;
    brisk_status s = gguf_get_i64(g, key, &v);
    if (s == BRISK_ERR_NOT_FOUND) {
        if (required) return bk_fail(BRISK_ERR_FORMAT, "missing metadata key %s", key);
        v = dflt;
    } else if (s != BRISK_OK) {
        return s;
    }
    if (v < lo || v > hi)
        return bk_fail(BRISK_ERR_FORMAT, "metadata %s = %lld is out of range [%lld, %lld]", key,
                       (long long)v, (long long)lo, (long long)hi);
    *out = (int)v;
    return BRISK_OK;
}

static float get_float(const gguf_file *g, const char *arch, const char *suffix, float dflt) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    float v;
    return gguf_get_f32(g, key, &v) == BRISK_OK ? v : dflt;
}

/* The Gated DeltaNet keys of qwen35/qwen35moe/qwen3next (llama.cpp's qwen35 and qwen3next loaders).
 * The multi-token-prediction blocks (nextn_predict_layers) are appended after
 * the trunk: n_layer counts the trunk, n_nextn those (bind_mtp). Positions of text tokens are equal in
 * the three M-RoPE streams, so rope.dimension_sections reduces to NEOX RoPE
 * over rope.dimension_count dims and is not read. */
static brisk_status read_hybrid(const gguf_file *g, const char *arch, model_hparams *hp) {
    int inner, nextn;
    BK_TRY(get_int(g, arch, "ssm.conv_kernel", true, 0, 1, 64, &hp->ssm_d_conv));
    BK_TRY(get_int(g, arch, "ssm.state_size", true, 0, 1, 512, &hp->ssm_d_state));
    BK_TRY(get_int(g, arch, "ssm.group_count", true, 0, 1, 4096, &hp->ssm_n_k_heads));
    BK_TRY(get_int(g, arch, "ssm.time_step_rank", true, 0, 1, 4096, &hp->ssm_n_v_heads));
    BK_TRY(get_int(g, arch, "ssm.inner_size", true, 0, 1, 1 << 24, &inner));
    BK_TRY(get_int(g, arch, "full_attention_interval", false, 4, 1, 4096, &hp->full_attn_interval));
    BK_TRY(get_int(g, arch, "nextn_predict_layers", false, 0, 0, hp->n_layer - 1, &nextn));
    hp->n_layer -= nextn;
    hp->n_nextn = nextn;
    if (hp->ssm_n_v_heads % hp->ssm_n_k_heads)
        return bk_fail(BRISK_ERR_FORMAT, "ssm.time_step_rank %d is not a multiple of ssm.group_count %d",
                       hp->ssm_n_v_heads, hp->ssm_n_k_heads);
    if (inner != hp->ssm_n_v_heads * hp->ssm_d_state)
        return bk_fail(BRISK_ERR_UNSUPPORTED, "ssm.inner_size %d != time_step_rank %d x state_size %d", inner,
                       hp->ssm_n_v_heads, hp->ssm_d_state);
    char key[128];
    snprintf(key, sizeof key, "%s.attention.recurrent_layers", arch);
    int64_t v;
    if (gguf_get_i64(g, key, &v) != BRISK_ERR_NOT_FOUND)
        return bk_fail(BRISK_ERR_UNSUPPORTED, "%s (a per-layer list) is not supported, only full_attention_interval", key);
    if (hp->arch == ARCH_QWEN35MOE || hp->arch == ARCH_QWEN3NEXT)
        BK_TRY(get_int(g, arch, "expert_shared_feed_forward_length", false, hp->n_ff, 1, 1 << 24, &hp->n_ff_shexp));
    hp->ssm_v_grouped = hp->arch == ARCH_QWEN3NEXT;
    return BRISK_OK;
}

brisk_status model_read_rope_file(const gguf_file *g, const char *arch, int n_ctx_train, model_rope_file *rf) {
    rf->freq_base = get_float(g, arch, "rope.freq_base", 10000.0f);
    rf->attn_factor = get_float(g, arch, "rope.scaling.attn_factor", 1.0f);
    rf->yarn_attn_factor = get_float(g, arch, "rope.scaling.yarn_attn_factor", 1.0f);
    rf->yarn_beta_fast = get_float(g, arch, "rope.scaling.yarn_beta_fast", 32.0f);
    rf->yarn_beta_slow = get_float(g, arch, "rope.scaling.yarn_beta_slow", 1.0f);
    rf->n_ctx_train = n_ctx_train;
    BK_TRY(get_int(g, arch, "rope.scaling.original_context_length", false, n_ctx_train, 1,
                   1 << 30, &rf->orig_ctx));
    if (!(rf->freq_base > 0 && isfinite(rf->freq_base)))
        return bk_fail(BRISK_ERR_FORMAT, "bad rope.freq_base %g", rf->freq_base);
    if (!(rf->yarn_beta_fast > 0 && rf->yarn_beta_slow > 0 && isfinite(rf->yarn_beta_fast + rf->yarn_beta_slow)))
        return bk_fail(BRISK_ERR_FORMAT, "bad rope.scaling.yarn_beta_fast/slow %g/%g", rf->yarn_beta_fast,
                       rf->yarn_beta_slow);
    char key[128];
    const char *st = NULL;
    size_t st_len = 0;
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    gguf_get_str(g, key, &st, &st_len);
    float factor = get_float(g, arch, "rope.scaling.factor", 0.0f);
    if (factor == 0.0f) {
        float lin = get_float(g, arch, "rope.scale_linear", 0.0f); /* older files */
        if (lin > 0) factor = lin;
    }
    bool is_yarn = st && st_len == 4 && !memcmp(st, "yarn", 4);
    bool is_none = st && st_len == 4 && !memcmp(st, "none", 4);
    if (st && !is_yarn && !is_none && !(st_len == 6 && !memcmp(st, "linear", 6)))
        return bk_fail(BRISK_ERR_UNSUPPORTED, "rope scaling type '%.*s' is not supported", (int)st_len, st);
    if (factor < 0 || !isfinite(factor)) return bk_fail(BRISK_ERR_FORMAT, "bad rope.scaling.factor %g", factor);
    rf->type = is_yarn ? BRISK_ROPE_SCALING_YARN : is_none ? BRISK_ROPE_SCALING_NONE : BRISK_ROPE_SCALING_LINEAR;
    rf->freq_scale = factor > 0 ? 1.0f / factor : 1.0f;
    /* llama.cpp's loader reads the yarn_* keys for a few architectures only (grok, mistral3) and
     * otherwise takes their defaults; brisk takes them from any yarn file, whose converter wrote
     * them from the model's config (the defaults when absent: the same numbers) */
    rf->yarn_ext_factor = is_yarn ? get_float(g, arch, "rope.scaling.yarn_ext_factor", -1.0f) : -1.0f;
    return BRISK_OK;
}

brisk_status model_read_hparams(const gguf_file *g, model_hparams *hp) {
    memset(hp, 0, sizeof *hp);
    const char *arch_s;
    size_t arch_len;
    if (gguf_get_str(g, "general.architecture", &arch_s, &arch_len) != BRISK_OK)
        return bk_fail(BRISK_ERR_FORMAT, "missing general.architecture");
    char arch[32];
    if (arch_len >= sizeof arch) arch_len = sizeof arch - 1;
    memcpy(arch, arch_s, arch_len);
    arch[arch_len] = 0;
    bool found = false;
    for (size_t i = 0; i < sizeof known_archs / sizeof known_archs[0]; i++)
        if (!strcmp(arch, known_archs[i].name)) {
            hp->arch = known_archs[i].arch;
            found = true;
        }
    if (!found) return bk_fail(BRISK_ERR_UNSUPPORTED, "architecture '%s' is not supported", arch);

    const int64_t BIG = 1 << 24;
    BK_TRY(get_int(g, arch, "embedding_length", true, 0, 1, BIG, &hp->n_embd));
    BK_TRY(get_int(g, arch, "block_count", true, 0, 1, 4096, &hp->n_layer));
    bool moe = hp->arch == ARCH_QWEN3MOE || hp->arch == ARCH_QWEN35MOE || hp->arch == ARCH_QWEN3NEXT;
    bool hybrid = hp->arch == ARCH_QWEN35 || hp->arch == ARCH_QWEN35MOE || hp->arch == ARCH_QWEN3NEXT;
    BK_TRY(get_int(g, arch, "feed_forward_length", !moe, 0, moe ? 0 : 1, BIG, &hp->n_ff));
    if (moe) { /* as llama.cpp: n_ff_exp defaults to n_ff / n_expert_used */
        BK_TRY(get_int(g, arch, "expert_count", true, 0, 2, BK_MOE_MAX_EXPERTS, &hp->n_expert));
        BK_TRY(get_int(g, arch, "expert_used_count", true, 0, 1, hp->n_expert, &hp->n_expert_used));
        BK_TRY(get_int(g, arch, "expert_feed_forward_length", false, hp->n_ff / hp->n_expert_used, 1, BIG,
                       &hp->n_ff_exp));
    }
    if (hybrid) BK_TRY(read_hybrid(g, arch, hp));
    BK_TRY(get_int(g, arch, "attention.head_count", true, 0, 1, 4096, &hp->n_head));
    BK_TRY(get_int(g, arch, "attention.head_count_kv", false, hp->n_head, 1, hp->n_head, &hp->n_head_kv));
    BK_TRY(get_int(g, arch, "context_length", false, 2048, 1, 1 << 30, &hp->n_ctx_train));
    if (hp->n_head % hp->n_head_kv)
        return bk_fail(BRISK_ERR_FORMAT, "head_count %d is not a multiple of head_count_kv %d",
                       hp->n_head, hp->n_head_kv);
    int hd_default = hp->n_embd / hp->n_head;
    BK_TRY(get_int(g, arch, "attention.key_length", false, hd_default, 1, 4096, &hp->head_dim));
    int v_len;
    BK_TRY(get_int(g, arch, "attention.value_length", false, hp->head_dim, 1, 4096, &v_len));
    if (v_len != hp->head_dim)
        return bk_fail(BRISK_ERR_UNSUPPORTED, "key_length %d != value_length %d", hp->head_dim, v_len);
    BK_TRY(get_int(g, arch, "pooling_type", false, 0, 0, 4, &hp->pooling_type));
    hp->rms_eps = get_float(g, arch, "attention.layer_norm_rms_epsilon", 1e-5f);
    if (!(hp->rms_eps > 0 && hp->rms_eps < 1))
        return bk_fail(BRISK_ERR_FORMAT, "bad layer_norm_rms_epsilon %g", hp->rms_eps);
    hp->qk_norm = hp->arch == ARCH_QWEN3 || hp->arch == ARCH_QWEN3MOE || hybrid;
    hp->n_attn_layers = 0;
    for (int l = 0; l < hp->n_layer; l++) hp->n_attn_layers += !model_layer_recurrent(hp, l);
    hp->qkv_bias = hp->arch == ARCH_QWEN2;

    bk_rope_params *rp = &hp->rope;
    BK_TRY(get_int(g, arch, "rope.dimension_count", false, hp->head_dim, 2, hp->head_dim, &rp->n_rot));
    if (rp->n_rot % 2) return bk_fail(BRISK_ERR_FORMAT, "rope.dimension_count %d is odd", rp->n_rot);
    rp->mode = hp->arch == ARCH_LLAMA ? BK_ROPE_NORM : BK_ROPE_NEOX;
    BK_TRY(model_read_rope_file(g, arch, hp->n_ctx_train, &hp->rope_file));
    return model_rope_resolve(hp, NULL);
}

float model_rope_llama3_factor(int64_t i, int64_t dim, double base, double factor, double lo, double hi,
                               double orig_ctx) {
    float freq = 1.0f / powf((float)base, (float)(2 * i) / (float)dim); /* as torch computes it, in f32 */
    double wavelen = 2 * M_PI / freq;
    if (wavelen < orig_ctx / hi) return 1.0f;
    if (wavelen > orig_ctx / lo) return (float)factor;
    double smooth = (orig_ctx / wavelen - lo) / (hi - lo);
    return (float)(1 / ((1 - smooth) / factor + smooth));
}

brisk_status model_rope_resolve(model_hparams *hp, const brisk_rope_overrides *o) {
    const brisk_rope_overrides unset = brisk_model_default_params().rope;
    if (!o) o = &unset;
    const model_rope_file *rf = &hp->rope_file;
    if ((unsigned)o->scaling > BRISK_ROPE_SCALING_YARN)
        return bk_fail(BRISK_ERR_INVALID_ARG, "rope override: scaling type %d is not a brisk_rope_scaling",
                       o->scaling);
    if (!(o->freq_base >= 0 && isfinite(o->freq_base)))
        return bk_fail(BRISK_ERR_INVALID_ARG, "rope override: freq_base %g: expected a positive number (0: the "
                       "file's)", o->freq_base);
    if (!(o->freq_scale >= 0 && isfinite(o->freq_scale)))
        return bk_fail(BRISK_ERR_INVALID_ARG, "rope override: freq_scale %g: expected a positive number (0: the "
                       "file's)", o->freq_scale);
    if (o->orig_ctx < 0)
        return bk_fail(BRISK_ERR_INVALID_ARG, "rope override: yarn orig_ctx %d: expected a positive count (0: the "
                       "file's)", o->orig_ctx);
    if (!isfinite(o->ext_factor) || !isfinite(o->attn_factor))
        return bk_fail(BRISK_ERR_INVALID_ARG, "rope override: yarn ext_factor %g / attn_factor %g: expected "
                       "numbers (< 0: the file's)", o->ext_factor, o->attn_factor);
    /* a beta of 0 puts a correction dim at infinity (log of n_ctx_orig / 0) */
    if (o->beta_fast == 0 || o->beta_slow == 0 || !isfinite(o->beta_fast) || !isfinite(o->beta_slow))
        return bk_fail(BRISK_ERR_INVALID_ARG, "rope override: yarn beta_fast %g / beta_slow %g: expected positive "
                       "numbers (< 0: the file's)", o->beta_fast, o->beta_slow);

    bk_rope_params *rp = &hp->rope; /* n_rot, mode and freq_factors are the file's and stay */
    brisk_rope_scaling type = o->scaling != BRISK_ROPE_SCALING_MODEL ? o->scaling : rf->type;
    rp->freq_base = o->freq_base > 0 ? o->freq_base : rf->freq_base;
    rp->freq_scale = type == BRISK_ROPE_SCALING_NONE ? 1.0f : o->freq_scale > 0 ? o->freq_scale : rf->freq_scale;
    rp->n_ctx_orig = o->orig_ctx > 0 ? o->orig_ctx : rf->orig_ctx;
    rp->beta_fast = o->beta_fast > 0 ? o->beta_fast : rf->yarn_beta_fast;
    rp->beta_slow = o->beta_slow > 0 ? o->beta_slow : rf->yarn_beta_slow;
    float ext = o->ext_factor >= 0 ? o->ext_factor : type == BRISK_ROPE_SCALING_YARN ? rf->yarn_ext_factor : -1.0f;
    if (ext < 0) ext = type == BRISK_ROPE_SCALING_YARN ? 1.0f : 0.0f;
    float attn = o->attn_factor >= 0 ? o->attn_factor : rf->yarn_attn_factor;
    if (ext != 0.0f) {
        /* llama.cpp sets the magnitude to HF's get_mscale(factor) = 1 + 0.1 ln(factor) (1 for
         * factor <= 1) and divides out the 1 + 0.1 ln(factor) that the rope kernel multiplies in
         * whenever ext_factor != 0; computed in the same float steps so the scale rounds alike */
        float factor = 1.0f / rp->freq_scale;
        attn = factor <= 1.0f ? 1.0f : 0.1f * 1.0f * logf(factor) + 1.0f;
        attn *= 1.0f / (1.0f + 0.1f * logf(factor));
    }
    rp->ext_factor = ext;
    rp->attn_factor = attn * rf->attn_factor;
    /* llama_init_from_model: a YaRN context's trained length becomes what the stretch reaches */
    hp->n_ctx_train = rf->n_ctx_train;
    if (type == BRISK_ROPE_SCALING_YARN && rp->freq_scale != rf->freq_scale) {
        float n = (float)rp->n_ctx_orig / rp->freq_scale; /* in float, as llama.cpp */
        hp->n_ctx_train = n > (float)(1 << 30) ? 1 << 30 : n < 1 ? 1 : (int)n;
    }
    return BRISK_OK;
}

/* Binds tensor `name` with the expected shape (ne1 = 0: a vector of ne0; ne2 > 1:
 * ne2 stacked experts, bound as one weight of ne1 * ne2 rows, see bk_weight)
 * to backend be (NULL: the CPU, which reads the map). */
static brisk_status bind3(brisk_model *m, bk_backend *be, const char *name, int64_t ne0, int64_t ne1, int64_t ne2,
                          bool required, bk_weight *w) {
    memset(w, 0, sizeof *w);
    const gguf_tensor *t = gguf_find_tensor(m->gguf, name);
    if (!t) return required ? bk_fail(BRISK_ERR_FORMAT, "missing tensor %s", name) : BRISK_OK;
    int64_t want1 = ne1 ? ne1 : 1;
    if (t->ne[0] != ne0 || t->ne[1] != want1 || t->ne[2] != ne2 || t->ne[3] != 1)
        return bk_fail(BRISK_ERR_FORMAT,
                       "tensor %s has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld]", name,
                       (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                       (long long)t->ne[3], (long long)ne0, (long long)want1, (long long)ne2);
    const quant_traits *qt = quant_get_traits(t->type);
    if (!qt || !qt->can_dequantize)
        return bk_fail(BRISK_ERR_UNSUPPORTED, "tensor %s has type %s, which brisk cannot read", name,
                       quant_type_name(t->type));
    if (!ne1 && t->type != QT_F32)
        return bk_fail(BRISK_ERR_UNSUPPORTED, "tensor %s: vector of type %s (want f32)", name,
                       quant_type_name(t->type));
    w->name = t->name;
    w->type = t->type;
    w->n_in = t->ne[0];
    w->n_out = t->ne[1] * t->ne[2];
    w->n_expert = ne2 > 1 ? (int)ne2 : 0;
    w->row_bytes = quant_row_size(t->type, t->ne[0]);
    w->host = t->data;
    m->n_params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2]);
    m->weight_bytes += t->nbytes;
    if (!be) return BRISK_OK;
    m->gpu_weight_bytes += t->nbytes;
    return be->ops->bind_weight(be, w);
}

static brisk_status bind(brisk_model *m, bk_backend *be, const char *name, int64_t ne0, int64_t ne1, bool required,
                         bk_weight *w) {
    return bind3(m, be, name, ne0, ne1, 1, required, w);
}

/* Keeps buf, a packed host copy of a shard or of rows picked out of a tensor (malloc'd), in
 * m->tp_packed until the model is freed; frees it when the list cannot grow. */
static brisk_status keep_packed(brisk_model *m, void *buf, const char *name) {
    void **list = realloc(m->tp_packed, (size_t)(m->n_tp_packed + 1) * sizeof *list);
    if (!list) {
        free(buf);
        return bk_fail(BRISK_ERR_NOMEM, "out of memory packing %s", name);
    }
    m->tp_packed = list;
    m->tp_packed[m->n_tp_packed++] = buf;
    return BRISK_OK;
}

/* Tensor parallelism: binds rank m->tp_rank's shard of a tensor (engine/shard.h) to be: ROWS
 * keeps whole output rows (a vector: its elements, e.g. a q/k/v bias), COLS input columns, in
 * units of `unit` (head_dim for per-head splits). kv: the k/v split, where a KV head may be shared
 * by several ranks (shard_heads_for). A GPU rank uploads a column shard packed (its rows are not
 * contiguous in the file): the packed copy is kept in m->tp_packed. */
static brisk_status bind_shard(brisk_model *m, bk_backend *be, const char *name, int64_t ne0, int64_t ne1,
                               bool required, shard_kind kind, int64_t unit, bool kv, bk_weight *w) {
    if (m->tp_size < 1) return bind3(m, be, name, ne0, ne1, 1, required, w);
    BK_TRY(bind3(m, NULL, name, ne0, ne1, 1, required, w));
    if (!w->host) return BRISK_OK; /* an absent optional tensor */
    int rank = m->tp_rank, n = m->tp_size;
    shard_heads sh;
    if (kv) {
        BK_TRY(shard_heads_for(m->tp_n_head, m->tp_n_head_kv, rank, n, &sh));
        if (sh.kv_replicated) rank = sh.kv_first, n = m->tp_n_head_kv;
    }
    if (!ne1) kind = SHARD_COLS; /* a vector's elements are its columns */
    bk_weight full = *w;
    BK_TRY(shard_weight(&full, kind, rank, n, unit, w));
    if (!be) return BRISK_OK; /* the CPU reads the view in place (row stride row_bytes) */
    size_t packed = quant_row_size(w->type, w->n_in);
    if (packed != w->row_bytes) {
        char *buf = malloc((size_t)w->n_out * packed);
        if (!buf) return bk_fail(BRISK_ERR_NOMEM, "out of memory packing %s", name);
        for (int64_t r = 0; r < w->n_out; r++)
            memcpy(buf + (size_t)r * packed, (const char *)w->host + (size_t)r * w->row_bytes, packed);
        BK_TRY(keep_packed(m, buf, name));
        w->host = buf;
        w->row_bytes = packed;
    }
    m->gpu_weight_bytes += (uint64_t)w->n_out * w->row_bytes;
    return be->ops->bind_weight(be, w);
}

/* A Gated DeltaNet tensor: whole, or with tensor parallelism rank m->tp_rank's key heads and the
 * value heads that read them, the same slice of each of n_blocks blocks of its rows (ROWS) or
 * columns (COLS; a vector: its elements) in units of `unit` (shard.h's shard_gather). The slice is
 * several runs, so it is always a packed copy (kept in m->tp_packed), read by the CPU or uploaded. */
static brisk_status bind_gather(brisk_model *m, bk_backend *be, const char *name, int64_t ne0, int64_t ne1,
                                shard_kind kind, int n_blocks, int64_t unit, bk_weight *w) {
    if (m->tp_size < 2) return bind3(m, be, name, ne0, ne1, 1, true, w);
    BK_TRY(bind3(m, NULL, name, ne0, ne1, 1, true, w));
    bk_weight full = *w;
    void *buf;
    BK_TRY(shard_gather(&full, ne1 ? kind : SHARD_COLS, n_blocks, m->tp_rank, m->tp_size, unit, &buf, w));
    BK_TRY(keep_packed(m, buf, name));
    if (!be) return BRISK_OK;
    m->gpu_weight_bytes += (uint64_t)w->n_out * w->row_bytes;
    return be->ops->bind_weight(be, w);
}

/* Rows picked out of `full` (a host view from bind3) into a packed copy bound as w: for each
 * segment s, for each of n_blocks blocks of block_rows rows, rows [first[s], first[s] + len[s])
 * of that block. Whole rows, so any type. qwen3next's per-key-head interleaved tensors become
 * qwen35moe's separate ones this way (bind_deltanet). */
static brisk_status bind_picked(brisk_model *m, bk_backend *be, const bk_weight *full, int n_seg, const int64_t *first,
                                const int64_t *len, int64_t n_blocks, int64_t block_rows, bk_weight *w) {
    int64_t rows = 0;
    for (int s = 0; s < n_seg; s++) rows += len[s] * n_blocks;
    *w = *full;
    w->n_out = rows;
    char *buf = malloc((size_t)rows * full->row_bytes), *p = buf;
    if (!buf) return bk_fail(BRISK_ERR_NOMEM, "out of memory unpacking %s", full->name);
    for (int s = 0; s < n_seg; s++)
        for (int64_t b = 0; b < n_blocks; b++, p += (size_t)len[s] * full->row_bytes)
            memcpy(p, (const char *)full->host + (size_t)(b * block_rows + first[s]) * full->row_bytes,
                   (size_t)len[s] * full->row_bytes);
    BK_TRY(keep_packed(m, buf, full->name));
    w->host = buf;
    if (!be) return BRISK_OK;
    m->gpu_weight_bytes += (uint64_t)rows * w->row_bytes;
    return be->ops->bind_weight(be, w);
}

/* bind_picked over the rows [first, first + len) of each of the given segments of tensor `name`
 * (d columns, rows rows), read whole; without tensor parallelism a tensor taken whole is bound as is. */
static brisk_status bind_segments(brisk_model *m, bk_backend *be, const char *name, int64_t d, int64_t rows, int n_seg,
                                  const int64_t *first, const int64_t *len, bk_weight *w) {
    if (m->tp_size < 2) return bind3(m, be, name, d, rows, 1, true, w);
    bk_weight full;
    BK_TRY(bind3(m, NULL, name, d, rows, 1, true, &full));
    return bind_picked(m, be, &full, n_seg, first, len, 1, rows, w);
}

/* qwen3next's Gated DeltaNet tensors, bound as qwen35moe's in the file's grouped value-head order
 * (hp->ssm_v_grouped): ssm_ba's rows are, per key head, r = n_v / n_k beta rows then r alpha rows;
 * older files (llama.cpp's "legacy" path) carry ssm_in instead of attn_qkv + attn_gate: per key head
 * q (d_state rows), k (d_state), v (r d_state), z (r d_state). With tensor parallelism a rank keeps
 * whole key heads [k0, k0 + kh) and, in this order, their value heads are the contiguous run
 * [k0 r, (k0 + kh) r): picked rows of q|k|v (and the conv channels), z, beta and alpha; contiguous
 * elements of dt_bias and ssm_a; contiguous columns of ssm_out. */
static brisk_status bind_deltanet(brisk_model *m, bk_backend *be, int l, layer_weights *L) {
    const model_hparams *hp = &m->hp;
    const int64_t d = hp->n_embd, ds = hp->ssm_d_state, nk = hp->ssm_n_k_heads, r = hp->ssm_n_v_heads / nk,
                  nv = nk * r, conv_dim = (2 * nk + nv) * ds;
    const int64_t kh = m->tp_size > 1 ? nk / m->tp_size : nk, k0 = m->tp_size > 1 ? m->tp_rank * kh : 0;
    char n[96];
    bk_weight full, part;
    snprintf(n, sizeof n, "blk.%d.ssm_ba.weight", l);
    BK_TRY(bind3(m, NULL, n, d, 2 * nv, 1, true, &full));
    part = full; /* from the rank's first key head's block on */
    part.host = (const char *)full.host + (size_t)(k0 * 2 * r) * full.row_bytes;
    const int64_t beta0 = 0, alpha0 = r;
    BK_TRY(bind_picked(m, be, &part, 1, &beta0, &r, kh, 2 * r, &L->ssm_beta));
    BK_TRY(bind_picked(m, be, &part, 1, &alpha0, &r, kh, 2 * r, &L->ssm_alpha));
    /* q|k|v rows and conv channels: the rank's q heads, k heads, then its value heads */
    const int64_t qkv_first[3] = {k0 * ds, (nk + k0) * ds, (2 * nk + k0 * r) * ds},
                  qkv_len[3] = {kh * ds, kh * ds, kh * r * ds}, z_first = k0 * r * ds, z_len = kh * r * ds;
    snprintf(n, sizeof n, "blk.%d.ssm_in.weight", l);
    if (!gguf_find_tensor(m->gguf, n)) {
        snprintf(n, sizeof n, "blk.%d.attn_qkv.weight", l);
        BK_TRY(bind_segments(m, be, n, d, conv_dim, 3, qkv_first, qkv_len, &L->ssm_qkv));
        snprintf(n, sizeof n, "blk.%d.attn_gate.weight", l);
        BK_TRY(bind_segments(m, be, n, d, nv * ds, 1, &z_first, &z_len, &L->ssm_z));
    } else {
        const int64_t blk = (2 + 2 * r) * ds, in_first[3] = {0, ds, 2 * ds}, in_len[3] = {ds, ds, r * ds},
                      in_z_first = (2 + r) * ds, in_z_len = r * ds;
        BK_TRY(bind3(m, NULL, n, d, nk * blk, 1, true, &full));
        part = full;
        part.host = (const char *)full.host + (size_t)(k0 * blk) * full.row_bytes;
        BK_TRY(bind_picked(m, be, &part, 3, in_first, in_len, kh, blk, &L->ssm_qkv));
        BK_TRY(bind_picked(m, be, &part, 1, &in_z_first, &in_z_len, kh, blk, &L->ssm_z));
    }
    snprintf(n, sizeof n, "blk.%d.ssm_conv1d.weight", l);
    BK_TRY(bind_segments(m, be, n, hp->ssm_d_conv, conv_dim, 3, qkv_first, qkv_len, &L->ssm_conv1d));
    /* one block of value heads: shard_gather's slice of it is the rank's contiguous run */
    snprintf(n, sizeof n, "blk.%d.ssm_dt.bias", l);
    BK_TRY(bind_gather(m, be, n, nv, 0, SHARD_COLS, 1, 1, &L->ssm_dt_bias));
    snprintf(n, sizeof n, "blk.%d.ssm_a", l);
    BK_TRY(bind_gather(m, be, n, nv, 0, SHARD_COLS, 1, 1, &L->ssm_a));
    snprintf(n, sizeof n, "blk.%d.ssm_out.weight", l);
    return bind_gather(m, be, n, nv * ds, d, SHARD_COLS, 1, ds, &L->ssm_out);
}

/* An expert tensor (ne2 experts): whole, or with tensor parallelism rank m->tp_rank's slice of
 * whole experts (shard.h's SHARD_EXPERTS: a view of the mapped bytes, contiguous, so a GPU rank
 * uploads only its slice and the CPU reads it in place). */
static brisk_status bind_experts(brisk_model *m, bk_backend *be, const char *name, int64_t ne0, int64_t ne1,
                                 int64_t ne2, bk_weight *w) {
    if (m->tp_size < 1) return bind3(m, be, name, ne0, ne1, ne2, true, w);
    BK_TRY(bind3(m, NULL, name, ne0, ne1, ne2, true, w));
    bk_weight full = *w;
    BK_TRY(shard_weight(&full, SHARD_EXPERTS, m->tp_rank, m->tp_size, 1, w));
    if (!be) return BRISK_OK;
    m->gpu_weight_bytes += (uint64_t)w->n_out * w->row_bytes;
    return be->ops->bind_weight(be, w);
}

/* The reranking head (pooling rank), as llama.cpp loads it: cls (a dense layer, n_embd square) and
 * cls.output (n_cls_out rows over cls's outputs or the hidden state), with optional biases. The
 * host reads them from the map (a few rows, once per sequence). */
static brisk_status bind_cls_head(brisk_model *m) {
    int64_t d = m->hp.n_embd;
    BK_TRY(bind(m, NULL, "cls.weight", d, d, false, &m->cls));
    if (m->cls.host) BK_TRY(bind(m, NULL, "cls.bias", d, 0, false, &m->cls_b));
    const gguf_tensor *t = gguf_find_tensor(m->gguf, "cls.output.weight");
    if (!t) return BRISK_OK;
    int64_t n_cls_out = t->ne[1];
    if (n_cls_out < 1 || n_cls_out > 4096)
        return bk_fail(BRISK_ERR_FORMAT, "cls.output.weight has %lld outputs", (long long)n_cls_out);
    BK_TRY(bind(m, NULL, "cls.output.weight", d, n_cls_out, true, &m->cls_out));
    return bind(m, NULL, "cls.output.bias", n_cls_out, 0, false, &m->cls_out_b);
}

/* Binds layer l's tensors (a trunk layer, or an MTP block: l >= n_layer, full attention) to backend be
 * (NULL: the CPU reads the map). */
static brisk_status bind_layer(brisk_model *m, int l, bk_backend *be) {
    const model_hparams *hp = &m->hp;
    int64_t d = hp->n_embd, qd = (int64_t)hp->n_head * hp->head_dim,
            kvd = (int64_t)hp->n_head_kv * hp->head_dim;
    bool hybrid = hp->full_attn_interval > 0;
    layer_weights *L = &m->layers[l];
    char n[96];
#define BIND(field, suffix, ne0, ne1, req)                             \
    snprintf(n, sizeof n, "blk.%d.%s", l, suffix);                     \
    BK_TRY(bind(m, be, n, ne0, ne1, req, &L->field))
#define BIND_TP(field, suffix, ne0, ne1, req, kind, unit, kv)          \
    snprintf(n, sizeof n, "blk.%d.%s", l, suffix);                     \
    BK_TRY(bind_shard(m, be, n, ne0, ne1, req, kind, unit, kv, &L->field))
#define BIND_SSM(field, suffix, ne0, ne1, kind, n_blocks, unit)        \
    snprintf(n, sizeof n, "blk.%d.%s", l, suffix);                     \
    BK_TRY(bind_gather(m, be, n, ne0, ne1, kind, n_blocks, unit, &L->field))
    BIND(attn_norm, "attn_norm.weight", d, 0, true);
    if (model_layer_recurrent(hp, l)) {
        int64_t ds = hp->ssm_d_state, nv = hp->ssm_n_v_heads, vd = nv * ds,
                conv_dim = 2 * hp->ssm_n_k_heads * ds + vd;
        /* sharded by key heads: a per-value-head dimension is nv / nk blocks of nk heads, q|k|v
         * and the conv channels two blocks more (shard_gather) */
        int vb = hp->ssm_n_v_heads / hp->ssm_n_k_heads;
        if (hp->arch == ARCH_QWEN3NEXT) {
            BK_TRY(bind_deltanet(m, be, l, L));
        } else {
            BIND_SSM(ssm_qkv, "attn_qkv.weight", d, conv_dim, SHARD_ROWS, 2 + vb, ds);
            BIND_SSM(ssm_z, "attn_gate.weight", d, vd, SHARD_ROWS, vb, ds);
            BIND_SSM(ssm_beta, "ssm_beta.weight", d, nv, SHARD_ROWS, vb, 1);
            BIND_SSM(ssm_alpha, "ssm_alpha.weight", d, nv, SHARD_ROWS, vb, 1);
            BIND_SSM(ssm_conv1d, "ssm_conv1d.weight", hp->ssm_d_conv, conv_dim, SHARD_ROWS, 2 + vb, ds);
            BIND_SSM(ssm_dt_bias, "ssm_dt.bias", nv, 0, SHARD_COLS, vb, 1);
            BIND_SSM(ssm_a, "ssm_a", nv, 0, SHARD_COLS, vb, 1);
            BIND_SSM(ssm_out, "ssm_out.weight", vd, d, SHARD_COLS, vb, ds);
        }
        if (L->ssm_conv1d.type != QT_F32)
            return bk_fail(BRISK_ERR_UNSUPPORTED, "tensor blk.%d.ssm_conv1d.weight: type %s (want f32)", l,
                           quant_type_name(L->ssm_conv1d.type));
        BIND(ssm_norm, "ssm_norm.weight", ds, 0, true);
    } else {
        int64_t hd = hp->head_dim;
        BIND_TP(wq, "attn_q.weight", d, hybrid ? 2 * qd : qd, true, SHARD_ROWS, hd, false);
        BIND_TP(wk, "attn_k.weight", d, kvd, true, SHARD_ROWS, hd, true);
        BIND_TP(wv, "attn_v.weight", d, kvd, true, SHARD_ROWS, hd, true);
        BIND_TP(wo, "attn_output.weight", qd, d, true, SHARD_COLS, hd, false);
        BIND_TP(bq, "attn_q.bias", qd, 0, hp->qkv_bias, SHARD_ROWS, hd, false);
        BIND_TP(bk, "attn_k.bias", kvd, 0, hp->qkv_bias, SHARD_ROWS, hd, true);
        BIND_TP(bv, "attn_v.bias", kvd, 0, hp->qkv_bias, SHARD_ROWS, hd, true);
        BIND(q_norm, "attn_q_norm.weight", hp->head_dim, 0, hp->qk_norm);
        BIND(k_norm, "attn_k_norm.weight", hp->head_dim, 0, hp->qk_norm);
    }
    BIND(ffn_norm, hybrid ? "post_attention_norm.weight" : "ffn_norm.weight", d, 0, true);
    if (hp->n_ff_shexp) { /* its gate (one logit a token) replicated, its FFN split as a dense one */
        BIND(gate_inp_shexp, "ffn_gate_inp_shexp.weight", d, 0, true);
        BIND_TP(gate_shexp, "ffn_gate_shexp.weight", d, hp->n_ff_shexp, true, SHARD_ROWS, 1, false);
        BIND_TP(up_shexp, "ffn_up_shexp.weight", d, hp->n_ff_shexp, true, SHARD_ROWS, 1, false);
        BIND_TP(down_shexp, "ffn_down_shexp.weight", hp->n_ff_shexp, d, true, SHARD_COLS, 1, false);
    }
    if (hp->n_expert) {
        int64_t ne = hp->n_expert, ff = hp->n_ff_exp;
        BIND(ffn_gate_inp, "ffn_gate_inp.weight", d, ne, true);
        /* --n-cpu-moe: a GPU layer's experts stay in the map for the CPU to read */
        L->exps_host = l < m->n_cpu_moe && l >= m->n_cpu_layers;
        bk_backend *ebe = L->exps_host ? NULL : be;
#define BIND_EXPERTS(field, suffix, ne0, ne1)                          \
    snprintf(n, sizeof n, "blk.%d.%s", l, suffix);                     \
    BK_TRY(bind_experts(m, ebe, n, ne0, ne1, ne, &L->field));          \
    if (L->exps_host) m->cpu_moe_bytes += (uint64_t)L->field.n_out * L->field.row_bytes
        BIND_EXPERTS(gate_exps, "ffn_gate_exps.weight", d, ff);
        BIND_EXPERTS(up_exps, "ffn_up_exps.weight", d, ff);
        BIND_EXPERTS(down_exps, "ffn_down_exps.weight", ff, d);
#undef BIND_EXPERTS
        return BRISK_OK;
    }
    BIND_TP(w_gate, "ffn_gate.weight", d, hp->n_ff, true, SHARD_ROWS, 1, false);
    BIND_TP(w_up, "ffn_up.weight", d, hp->n_ff, true, SHARD_ROWS, 1, false);
    BIND_TP(w_down, "ffn_down.weight", hp->n_ff, d, true, SHARD_COLS, 1, false);
#undef BIND_SSM
#undef BIND_TP
#undef BIND
    return BRISK_OK;
}

/* The multi-token-prediction blocks (hp.n_nextn, llama.cpp's nextn layers: qwen35, qwen35moe, qwen3next),
 * when the file holds their tensors: blk.N's ordinary attention and FFN tensors plus blk.N.nextn.*, as
 * llama.cpp's loader names them; embed_tokens, shared_head_head and shared_head_norm are optional (the
 * MTP head then uses the trunk's embedding, LM head and final norm, as llama.cpp does). A file without
 * them (a converter that dropped them) loads without MTP. Bound where the trunk's last layer runs (the
 * GPU when it has one: the MTP context runs there, engine/mtp.h), the block's own embedding kept in host
 * memory as the trunk's is; kept out of n_params / weight_bytes: plain decoding never reads them (a GPU
 * holds them all the same, as llama.cpp's loader does: model_gpu_bytes counts them). */
static brisk_status bind_mtp(brisk_model *m) {
    const model_hparams *hp = &m->hp;
    char n[96];
    snprintf(n, sizeof n, "blk.%d.nextn.eh_proj.weight", hp->n_layer);
    if (!hp->n_nextn || m->tp_size > 0 || m->pp_size > 0 || !gguf_find_tensor(m->gguf, n)) return BRISK_OK;
    if (!(m->nextn = calloc((size_t)hp->n_nextn, sizeof *m->nextn))) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    uint64_t params = m->n_params, bytes = m->weight_bytes;
    int64_t d = hp->n_embd;
    for (int i = 0; i < hp->n_nextn; i++) {
        int l = hp->n_layer + i;
        model_nextn *x = &m->nextn[i];
        BK_TRY(bind_layer(m, l, m->be)); /* m->be: the GPU that runs the trunk's last layer, or NULL */
#define BIND_NEXTN(field, suffix, ne0, ne1, req, be)                   \
    snprintf(n, sizeof n, "blk.%d.nextn.%s", l, suffix);               \
    BK_TRY(bind(m, be, n, ne0, ne1, req, &x->field))
        BIND_NEXTN(eh_proj, "eh_proj.weight", 2 * d, d, true, m->be);
        BIND_NEXTN(enorm, "enorm.weight", d, 0, true, m->be);
        BIND_NEXTN(hnorm, "hnorm.weight", d, 0, true, m->be);
        BIND_NEXTN(embed_tokens, "embed_tokens.weight", d, hp->n_vocab, false, NULL);
        BIND_NEXTN(shared_head_head, "shared_head_head.weight", d, hp->n_vocab, false, m->be);
        BIND_NEXTN(shared_head_norm, "shared_head_norm.weight", d, 0, false, m->be);
#undef BIND_NEXTN
    }
    m->n_mtp = hp->n_nextn;
    m->mtp_params = m->n_params - params;
    m->mtp_bytes = m->weight_bytes - bytes;
    m->n_params = params;
    m->weight_bytes = bytes;
    return BRISK_OK;
}

static brisk_status bind_all(brisk_model *m, progress *bar) {
    const model_hparams *hp = &m->hp;
    int64_t d = hp->n_embd;
    /* The output layer goes with the last layer. The embedding stays in host memory, as llama.cpp
     * keeps it (a GPU backend gathers a step's rows on the host: n_embd floats a token against
     * 334 MiB of qwen3-8b's table on the GPU; on the GPU it ran pp512 1.6% faster, tg128 the same:
     * docs/experiments.md). Tied, the LM head gets its own device copy below. */
    bk_backend *first = NULL, *last = m->be;
    if (m->pp_rank > 0) first = last = NULL; /* pipeline: rank 0 runs them (here host views, never read) */
    BK_TRY(bind(m, first, "token_embd.weight", d, hp->n_vocab, true, &m->tok_embd));
    BK_TRY(bind(m, last, "output_norm.weight", d, 0, true, &m->output_norm));
    BK_TRY(bind(m, last, "output.weight", d, hp->n_vocab, false, &m->output));
    m->hp.tied_output = m->output.host == NULL;
    if (m->hp.tied_output) {
        m->output = m->tok_embd;
        if (last != first) { /* split: the LM head needs its own device copy of the embedding */
            m->output.dev = NULL;
            m->gpu_weight_bytes += (uint64_t)m->output.n_out * m->output.row_bytes;
            BK_TRY(last->ops->bind_weight(last, &m->output));
        }
    }
    BK_TRY(bind(m, m->be, "rope_freqs.weight", hp->rope.n_rot / 2, 0, false, &m->rope_freqs));
    BK_TRY(bind_cls_head(m));
    if (m->rope_freqs.host) m->hp.rope.freq_factors = m->rope_freqs.host;

    /* room for the MTP blocks after the trunk (bind_mtp) */
    m->layers = calloc((size_t)(hp->n_layer + hp->n_nextn), sizeof *m->layers);
    if (!m->layers) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    for (int l = 0; l < hp->n_layer; l++) {
        progress_update(bar, false, "layer %d/%d", l, hp->n_layer);
        if (m->pp_size > 0 && (l < m->pp_l0 || l >= m->pp_l1)) continue; /* another pipeline rank's */
        BK_TRY(bind_layer(m, l, l < m->n_cpu_layers ? NULL : m->be));
    }
    return bind_mtp(m);
}

brisk_model_params brisk_model_default_params(void) {
    brisk_model_params p = {.vocab_only = false, .n_gpu_layers = -1, .device = 0, .progress = false,
                            .split_cpu = false, .n_cpu_moe = 0, .no_mmap = false,
                            .rope = {.ext_factor = -1, .attn_factor = -1, .beta_fast = -1, .beta_slow = -1}};
    return p;
}

uint64_t model_gpu_bytes(const gguf_file *g, int n_layer, int n_cpu_layers, int n_cpu_moe) {
    bool tied = !gguf_find_tensor(g, "output.weight");
    uint64_t need = 0;
    for (int64_t i = 0; i < gguf_tensor_count(g); i++) {
        const gguf_tensor *t = gguf_get_tensor(g, i);
        int l;
        bool gpu = true;
        if (sscanf(t->name, "blk.%d.", &l) == 1 && l < n_layer)
            gpu = l >= n_cpu_layers && !(l < n_cpu_moe && strstr(t->name, "_exps."));
        else if (sscanf(t->name, "blk.%d.", &l) == 1) /* an MTP block (bind_mtp): with the last layer */
            gpu = n_cpu_layers < n_layer && !strstr(t->name, ".nextn.embed_tokens."); /* (which stays on the host) */
        else if (!strcmp(t->name, "token_embd.weight")) gpu = tied; /* as the LM head; else host (bind_all) */
        if (gpu) need += t->nbytes;
    }
    return need;
}

/* Tensor parallelism (params->tp_size > 0): checks that the model splits into tp_size ranks. */
static brisk_status tp_setup(brisk_model *m, const brisk_model_params *params) {
    if (params->tp_size <= 0) return BRISK_OK;
    const model_hparams *hp = &m->hp;
    int n = params->tp_size;
    bool moe = hp->n_expert > 0; /* qwen3moe, qwen35moe: experts placed by expert, not split by columns */
    /* a new architecture opts in once its forward pass all-reduces its column-split products */
    static const bool runs[ARCH_COUNT] = {[ARCH_LLAMA] = true,    [ARCH_QWEN2] = true,  [ARCH_QWEN3] = true,
                                          [ARCH_QWEN3MOE] = true, [ARCH_QWEN35] = true, [ARCH_QWEN35MOE] = true,
                                          [ARCH_QWEN3NEXT] = true};
    if ((unsigned)hp->arch >= ARCH_COUNT || !runs[hp->arch])
        return bk_fail(BRISK_ERR_UNSUPPORTED,
                       "tensor parallelism runs llama, qwen2, qwen3, qwen3moe, qwen35, qwen35moe and qwen3next "
                       "models, not %s", m->arch_name);
    if (params->tp_rank < 0 || params->tp_rank >= n)
        return bk_fail(BRISK_ERR_INVALID_ARG, "tensor parallelism: rank %d of %d", params->tp_rank, n);
    shard_heads sh;
    BK_TRY(shard_heads_for(hp->n_head, hp->n_head_kv, params->tp_rank, n, &sh));
    /* a rank holds whole key heads with all their value heads (shard_gather), so each value head's
     * key head is local */
    if (hp->ssm_n_k_heads && hp->ssm_n_k_heads % n)
        return bk_fail(BRISK_ERR_INVALID_ARG,
                       "tensor parallelism: %d DeltaNet key heads (each read by %d value heads) do not split over "
                       "%d ranks", hp->ssm_n_k_heads, hp->ssm_n_v_heads / hp->ssm_n_k_heads, n);
    if (moe && hp->n_expert % n)
        return bk_fail(BRISK_ERR_INVALID_ARG, "tensor parallelism: %d experts do not split over %d ranks",
                       hp->n_expert, n);
    if (hp->n_ff_shexp % n)
        return bk_fail(BRISK_ERR_INVALID_ARG, "tensor parallelism: shared expert width %d does not split over %d ranks",
                       hp->n_ff_shexp, n);
    if (!moe && hp->n_ff % n)
        return bk_fail(BRISK_ERR_INVALID_ARG, "tensor parallelism: FFN width %d does not split over %d ranks",
                       hp->n_ff, n);
    m->tp_rank = params->tp_rank;
    m->tp_size = n;
    m->tp_n_head = hp->n_head;
    m->tp_n_head_kv = hp->n_head_kv;
    m->tp_n_ff = hp->n_ff;
    m->tp_ssm_n_k_heads = hp->ssm_n_k_heads;
    m->tp_ssm_n_v_heads = hp->ssm_n_v_heads;
    m->tp_n_ff_shexp = hp->n_ff_shexp;
    if (moe) {
        m->tp_n_expert_local = hp->n_expert / n;
        m->tp_expert0 = params->tp_rank * m->tp_n_expert_local;
    }
    return BRISK_OK;
}

/* Pipeline parallelism (params->pp_size > 0): this rank's layers. */
static brisk_status pp_setup(brisk_model *m, const brisk_model_params *params) {
    if (params->pp_size <= 0) return BRISK_OK;
    if (params->tp_size > 0)
        return bk_fail(BRISK_ERR_UNSUPPORTED, "pipeline and tensor parallelism together are not supported yet");
    if (params->pp_rank < 0 || params->pp_rank >= params->pp_size)
        return bk_fail(BRISK_ERR_INVALID_ARG, "pipeline parallelism: rank %d of %d", params->pp_rank, params->pp_size);
    if (params->pp_size > m->hp.n_layer)
        return bk_fail(BRISK_ERR_INVALID_ARG, "pipeline parallelism: %d layers do not split over %d ranks",
                       m->hp.n_layer, params->pp_size);
    if (params->n_cpu_moe > 0)
        return bk_fail(BRISK_ERR_UNSUPPORTED, "pipeline parallelism keeps the experts on the GPUs (no --n-cpu-moe)");
    m->pp_rank = params->pp_rank;
    m->pp_size = params->pp_size;
    model_pp_layers(m->hp.n_layer, m->pp_rank, m->pp_size, &m->pp_l0, &m->pp_l1);
    return BRISK_OK;
}

/* Whether this rank holds layer l (all of them without pipeline parallelism). */
static bool holds_layer(const brisk_model *m, int l) { return m->pp_size <= 0 || (l >= m->pp_l0 && l < m->pp_l1); }

/* A pipeline rank's weight bytes: its layers, and on rank 0 everything outside the layers. */
static uint64_t pp_gpu_bytes(const brisk_model *m) {
    uint64_t need = 0;
    for (int64_t i = 0; i < gguf_tensor_count(m->gguf); i++) {
        const gguf_tensor *t = gguf_get_tensor(m->gguf, i);
        int l;
        if (sscanf(t->name, "blk.%d.", &l) == 1 ? holds_layer(m, l) : m->pp_rank == 0) need += t->nbytes;
    }
    return need;
}

bool model_split_cpu(const brisk_model_params *params) {
    const char *env = getenv("BRISK_SPLIT_CPU");
    return params->split_cpu || (env && !strcmp(env, "1"));
}

/* Picks where the layers run (see brisk_model_params) and makes the GPU backend if any. */
static brisk_status place_layers(brisk_model *m, const brisk_model_params *params) {
    int n_layer = m->hp.n_layer, ngl = params->n_gpu_layers;
    int n_gpu = ngl < 0 || ngl > n_layer ? n_layer : ngl;
    bool split_cpu = model_split_cpu(params);
    bool gpu = n_gpu > 0 && !split_cpu && bk_cuda_device_count() > 0;
    m->n_cpu_layers = n_layer;
    if (gpu || (n_gpu > 0 && split_cpu)) m->n_cpu_layers = n_layer - n_gpu; /* split_cpu: a second CPU backend */
    if (m->hp.n_expert && params->n_cpu_moe > 0 && m->n_cpu_layers < n_layer)
        m->n_cpu_moe = params->n_cpu_moe < n_layer ? params->n_cpu_moe : n_layer;
    if (!gpu) return BRISK_OK;
    /* Refuse up front rather than fail halfway through the upload. */
    uint64_t need = model_gpu_bytes(m->gguf, n_layer, m->n_cpu_layers, m->n_cpu_moe);
    if (m->tp_size > 1) need /= (uint64_t)m->tp_size; /* about a rank's share (the embedding is replicated) */
    if (m->pp_size > 1) need = pp_gpu_bytes(m);
    size_t fr = 0, tot = 0;
    if (bk_cuda_mem_info(params->device, &fr, &tot) == BRISK_OK && need > fr)
        return bk_fail(BRISK_ERR_NOMEM,
                       "the weights of %d layers need %.0f MiB on CUDA device %d, which has %.0f MiB free of "
                       "%.0f MiB (offload fewer layers with -ngl N, or none with -ngl 0%s)",
                       n_gpu, need / 1048576.0, params->device, fr / 1048576.0, tot / 1048576.0,
                       m->hp.n_expert ? "; or keep experts in host memory with --n-cpu-moe N" : "");
    BK_TRY(bk_cuda_weights_backend_new(params->device, &m->be)); /* the contexts run the ops on their own */
    bk_cuda_weights_expect(m->be, need);
    return BRISK_OK;
}

brisk_status brisk_model_load(const char *path, const brisk_model_params *params, brisk_model **out) {
    *out = NULL;
    brisk_model_params dp = brisk_model_default_params();
    if (!params) params = &dp;
    brisk_model *m = calloc(1, sizeof *m);
    if (!m) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    progress bar; /* a live line on a terminal; a summary only for a load that took a while */
    progress_begin(&bar, params->progress && !params->vocab_only ? "load" : NULL);
    brisk_status s = gguf_open_ex(path, params->no_mmap && !params->vocab_only, &m->gguf);
    if (s != BRISK_OK) goto fail;
    s = tokenizer_from_gguf(m->gguf, &m->tok);
    if (s != BRISK_OK) {
        bk_wrap(s, "%s: tokenizer", path);
        goto fail;
    }
    m->vocab_only = params->vocab_only;
    const char *str;
    size_t len;
    if (gguf_get_str(m->gguf, "general.architecture", &str, &len) == BRISK_OK)
        snprintf(m->arch_name, sizeof m->arch_name, "%.*s", (int)len, str);
    if (gguf_get_str(m->gguf, "general.name", &str, &len) == BRISK_OK)
        snprintf(m->name, sizeof m->name, "%.*s", (int)len, str);
    if (!params->vocab_only) {
        s = model_read_hparams(m->gguf, &m->hp);
        if (s == BRISK_OK) s = model_rope_resolve(&m->hp, &params->rope);
        if (s != BRISK_OK) {
            bk_wrap(s, "%s", path);
            goto fail;
        }
        m->hp.n_vocab = tokenizer_n_vocab(m->tok);
        /* The embedding may be padded beyond the tokenizer (Qwen: 151936 rows). */
        const gguf_tensor *te = gguf_find_tensor(m->gguf, "token_embd.weight");
        if (te && te->ne[1] >= m->hp.n_vocab) m->hp.n_vocab = (int)te->ne[1];
        s = tp_setup(m, params);
        if (s == BRISK_OK) s = pp_setup(m, params);
        if (s == BRISK_OK) s = place_layers(m, params);
        if (s == BRISK_OK && (m->tp_size > 0 || m->pp_size > 0) && model_split(m))
            s = bk_fail(BRISK_ERR_UNSUPPORTED, "%s parallelism keeps every layer on the GPUs (no -ngl split)",
                        m->tp_size > 0 ? "tensor" : "pipeline");
        /* a rank's experts live on its GPU: the host-memory paths (backend/moe.c) know no expert slices */
        if (s == BRISK_OK && m->tp_size > 0 && m->n_cpu_moe > 0)
            s = bk_fail(BRISK_ERR_UNSUPPORTED, "tensor parallelism keeps every rank's experts on its GPU (no "
                                               "--n-cpu-moe, --gpu-mem fit or expert cache)");
        if (s != BRISK_OK) {
            bk_wrap(s, "%s", path);
            goto fail;
        }
        s = bind_all(m, &bar);
        if (s != BRISK_OK) {
            bk_wrap(s, "%s", path);
            goto fail;
        }
        double t = progress_elapsed(&bar);
        char gpu[64] = "";
        if (m->gpu_weight_bytes) snprintf(gpu, sizeof gpu, ", %.0f MiB of weights to the GPU", m->gpu_weight_bytes / 1048576.0);
        if (t >= 1.0) progress_end(&bar, "%s: %d layers%s in %.1f s", path, m->hp.n_layer, gpu, t);
        if (m->tp_size > 0) { /* the forward pass and the context see this rank's heads and FFN columns */
            m->hp.n_head /= m->tp_size;
            m->hp.n_head_kv = m->tp_n_head_kv >= m->tp_size ? m->tp_n_head_kv / m->tp_size : 1;
            if (!m->hp.n_expert) m->hp.n_ff /= m->tp_size; /* a MoE rank holds whole experts instead */
            m->hp.n_ff_shexp /= m->tp_size;
            m->hp.ssm_n_k_heads /= m->tp_size; /* and so its recurrent state holds only its heads' */
            m->hp.ssm_n_v_heads /= m->tp_size;
        }
    }
    progress_clear(&bar); /* a quick load leaves no line behind */
    *out = m;
    return BRISK_OK;
fail:
    progress_clear(&bar);
    brisk_model_free(m);
    return s;
}

/* Frees the device copies of the weights (the CPU reads the map and has none). */
static void release_weights(brisk_model *m) {
    if (!bk_backend_is_cuda(m->be, NULL)) return;
    if (m->output.dev != m->tok_embd.dev) bk_cuda_release_weight(&m->output); /* else tied: tok_embd's copy */
    bk_cuda_release_weight(&m->tok_embd);
    bk_cuda_release_weight(&m->output_norm);
    bk_cuda_release_weight(&m->rope_freqs);
    for (int i = 0; m->nextn && i < m->n_mtp; i++) { /* the MTP blocks (bind_mtp): their own tensors, then layers */
        model_nextn *x = &m->nextn[i];
        bk_weight *ws[] = {&x->eh_proj, &x->enorm, &x->hnorm, &x->embed_tokens, &x->shared_head_head,
                           &x->shared_head_norm};
        for (size_t k = 0; k < sizeof ws / sizeof ws[0]; k++) bk_cuda_release_weight(ws[k]);
    }
    for (int l = 0; m->layers && l < m->hp.n_layer + m->n_mtp; l++) {
        layer_weights *L = &m->layers[l];
        bk_weight *ws[] = {&L->attn_norm, &L->wq, &L->wk, &L->wv, &L->wo, &L->bq, &L->bk, &L->bv,
                           &L->q_norm, &L->k_norm, &L->ffn_norm, &L->w_gate, &L->w_up, &L->w_down,
                           &L->ffn_gate_inp, &L->gate_exps, &L->up_exps, &L->down_exps, &L->ssm_qkv,
                           &L->ssm_z, &L->ssm_conv1d, &L->ssm_dt_bias, &L->ssm_a, &L->ssm_beta, &L->ssm_alpha,
                           &L->ssm_norm, &L->ssm_out, &L->gate_inp_shexp, &L->gate_shexp, &L->up_shexp,
                           &L->down_shexp};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) bk_cuda_release_weight(ws[i]);
    }
}

void brisk_model_free(brisk_model *m) {
    if (!m) return;
    release_weights(m);
    free(m->layers);
    free(m->nextn);
    for (int i = 0; i < m->n_tp_packed; i++) free(m->tp_packed[i]);
    free(m->tp_packed);
    if (m->tp_free) m->tp_free(m->tp);
    if (m->be) m->be->ops->free(m->be);
    if (m->grammar_vocab_free) m->grammar_vocab_free(m->grammar_vocab);
    tokenizer_free(m->tok);
    gguf_close(m->gguf);
    free(m);
}

uint64_t model_step_weight_bytes(const brisk_model *m, double experts_read) {
    uint64_t embd = (uint64_t)m->tok_embd.row_bytes * (uint64_t)m->tok_embd.n_out;
    uint64_t bytes = m->weight_bytes - embd + (m->hp.tied_output ? embd : 0);
    if (!m->hp.n_expert || !m->layers) return bytes;
    /* With tensor parallelism the tensors hold the rank's experts only, and of the experts the
     * router picks the rank runs its share (held / n_expert of them, on average). */
    double ne = m->hp.n_expert, held = m->tp_n_expert_local > 0 ? m->tp_n_expert_local : ne;
    double read = (experts_read < ne ? experts_read : ne) * held / ne, all = 0, used = 0;
    for (int l = 0; l < m->hp.n_layer; l++) {
        const layer_weights *L = &m->layers[l];
        double exps = (double)L->gate_exps.n_out * L->gate_exps.row_bytes +
                      (double)L->up_exps.n_out * L->up_exps.row_bytes +
                      (double)L->down_exps.n_out * L->down_exps.row_bytes;
        all += exps;
        used += exps / held * read;
    }
    return bytes - (uint64_t)all + (uint64_t)(used + 0.5);
}

void brisk_model_get_info(const brisk_model *m, brisk_model_info *o) {
    memset(o, 0, sizeof *o);
    o->arch = m->arch_name;
    o->name = m->name;
    o->n_vocab = m->vocab_only ? tokenizer_n_vocab(m->tok) : m->hp.n_vocab;
    o->n_embd = m->hp.n_embd;
    o->n_layer = m->hp.n_layer;
    o->n_head = m->hp.n_head;
    o->n_head_kv = m->hp.n_head_kv;
    o->head_dim = m->hp.head_dim;
    o->n_ff = m->hp.n_ff;
    if (m->tp_size > 0) { /* the whole model's, not this rank's shard */
        o->n_head = m->tp_n_head;
        o->n_head_kv = m->tp_n_head_kv;
        o->n_ff = m->tp_n_ff;
    }
    o->n_ctx_train = m->hp.n_ctx_train;
    o->n_params = m->n_params;
    o->weight_bytes = m->weight_bytes;
    o->decode_bytes = model_step_weight_bytes(m, m->hp.n_expert_used);
    o->n_expert = m->hp.n_expert;
    o->n_expert_used = m->hp.n_expert_used;
    o->gpu_device = -1;
    bk_backend_is_cuda(m->be, &o->gpu_device);
    o->n_gpu_layers = m->be || model_split(m) ? m->hp.n_layer - m->n_cpu_layers : 0;
    o->n_cpu_moe = m->n_cpu_moe;
    o->cpu_moe_bytes = m->cpu_moe_bytes;
}
