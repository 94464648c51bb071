/* quant_mix.c — the tensor-type rules of llama.cpp's quantization mixes (see
 * quant_mix.h). Written from llama.cpp's llama_tensor_get_type for the mixes
 * brisk can write. */
#include "quant/quant_mix.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/atomic_file.h"
#include "base/status.h"
#include "quant/quant.h"

enum { /* LLAMA_FTYPE_* */
    FT_F32 = 0, FT_F16 = 1, FT_Q4_0 = 2, FT_Q4_1 = 3, FT_Q8_0 = 7, FT_Q5_0 = 8, FT_Q5_1 = 9, FT_Q2_K = 10,
    FT_Q3_K_S = 11, FT_Q3_K_M = 12, FT_Q3_K_L = 13, FT_Q4_K_S = 14, FT_Q4_K_M = 15, FT_Q5_K_S = 16,
    FT_Q5_K_M = 17, FT_Q6_K = 18, FT_IQ2_XXS = 19, FT_IQ2_XS = 20, FT_Q2_K_S = 21, FT_IQ3_XS = 22, FT_IQ3_XXS = 23, FT_IQ1_S = 24, FT_IQ4_NL = 25, FT_IQ3_S = 26,
    FT_IQ3_M = 27, FT_IQ2_S = 28, FT_IQ2_M = 29, FT_IQ4_XS = 30, FT_IQ1_M = 31, FT_BF16 = 32, FT_MXFP4_MOE = 38
};

static const quant_ftype ftypes[] = {
    {"Q4_0", FT_Q4_0, QT_Q4_0},       {"Q4_1", FT_Q4_1, QT_Q4_1},         {"Q5_0", FT_Q5_0, QT_Q5_0},
    {"Q5_1", FT_Q5_1, QT_Q5_1},       {"Q8_0", FT_Q8_0, QT_Q8_0},         {"Q2_K", FT_Q2_K, QT_Q2_K},
    {"Q2_K_S", FT_Q2_K_S, QT_Q2_K},   {"Q3_K_S", FT_Q3_K_S, QT_Q3_K},     {"Q3_K_M", FT_Q3_K_M, QT_Q3_K},
    {"Q3_K_L", FT_Q3_K_L, QT_Q3_K},   {"Q4_K_S", FT_Q4_K_S, QT_Q4_K},     {"Q4_K_M", FT_Q4_K_M, QT_Q4_K},
    {"Q5_K_S", FT_Q5_K_S, QT_Q5_K},   {"Q5_K_M", FT_Q5_K_M, QT_Q5_K},     {"Q6_K", FT_Q6_K, QT_Q6_K},
    {"IQ2_XXS", FT_IQ2_XXS, QT_IQ2_XXS}, {"IQ2_XS", FT_IQ2_XS, QT_IQ2_XS}, {"IQ2_S", FT_IQ2_S, QT_IQ2_XS},
    {"IQ1_S", FT_IQ1_S, QT_IQ1_S},     {"IQ1_M", FT_IQ1_M, QT_IQ1_M},     {"IQ2_M", FT_IQ2_M, QT_IQ2_S},     {"IQ3_XXS", FT_IQ3_XXS, QT_IQ3_XXS},
    {"IQ3_XS", FT_IQ3_XS, QT_IQ3_S},   {"IQ3_S", FT_IQ3_S, QT_IQ3_S},       {"IQ3_M", FT_IQ3_M, QT_IQ3_S},
    {"IQ4_NL", FT_IQ4_NL, QT_IQ4_NL}, {"IQ4_XS", FT_IQ4_XS, QT_IQ4_XS},   {"MXFP4_MOE", FT_MXFP4_MOE, QT_MXFP4},
    {"F16", FT_F16, QT_F16},          {"BF16", FT_BF16, QT_BF16},         {"F32", FT_F32, QT_F32},
};
#define N_FTYPES (int)(sizeof ftypes / sizeof ftypes[0])

const quant_ftype *quant_ftype_at(int i) { return i >= 0 && i < N_FTYPES ? &ftypes[i] : NULL; }

const quant_ftype *quant_ftype_find(const char *name) {
    static const char *alias[][2] = {{"Q3_K", "Q3_K_M"}, {"Q4_K", "Q4_K_M"}, {"Q5_K", "Q5_K_M"}};
    for (size_t i = 0; i < sizeof alias / sizeof alias[0]; i++)
        if (!strcasecmp(name, alias[i][0])) name = alias[i][1];
    for (int i = 0; i < N_FTYPES; i++)
        if (!strcasecmp(name, ftypes[i].name)) return &ftypes[i];
    return NULL;
}

/* ---- which tensors are converted at all ---- */

typedef enum {
    CAT_OTHER, CAT_TOKEN_EMBD, CAT_OUTPUT, CAT_ATTN_V, CAT_ATTN_K, CAT_ATTN_Q, CAT_ATTN_OUT, CAT_FFN_UP, CAT_FFN_GATE,
    CAT_FFN_DOWN
} category;

static bool has(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

/* llama.cpp's tensor_get_category, reduced to the categories our mixes use
 * (attn_qkv and attn_kv_b count as attn_v, as there). */
static category category_of(const char *name) {
    if (!strcmp(name, "output.weight")) return CAT_OUTPUT;
    if (!strcmp(name, "token_embd.weight") || !strcmp(name, "per_layer_token_embd.weight")) return CAT_TOKEN_EMBD;
    if (has(name, "attn_qkv.weight") || has(name, "attn_kv_b.weight") || has(name, "attn_v.weight")) return CAT_ATTN_V;
    if (has(name, "attn_k.weight")) return CAT_ATTN_K;
    if (has(name, "attn_q.weight")) return CAT_ATTN_Q;
    if (has(name, "attn_output.weight")) return CAT_ATTN_OUT;
    if (has(name, "ffn_up")) return CAT_FFN_UP;
    if (has(name, "ffn_gate")) return CAT_FFN_GATE;
    if (has(name, "ffn_down")) return CAT_FFN_DOWN;
    return CAT_OTHER;
}

/* Dimensions not counting trailing ones (ggml_n_dims). */
static int n_dims_of(const gguf_tensor *t) {
    int n = 1;
    for (int i = 1; i < GGUF_MAX_DIMS; i++)
        if (t->ne[i] > 1) n = i + 1;
    return n;
}

/* llama.cpp's tensor_allows_quantization (quantize_output_tensor on). */
static bool convertible(const gguf_tensor *t) {
    static const char *never[] = {
        "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
        "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight",
        "indexer.q_proj.weight", "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight",
        "time_mix_w2.weight", "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight",
        "time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight", "time_mix_g1.weight",
        "time_mix_g2.weight", "time_mix_decay_w1.weight", "time_mix_decay_w2.weight",
        "time_mix_lerp_fused.weight", "attn_rel_b.weight", ".position_embd", "sam.pos_embd", "sam.neck.",
        "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger", "a.rvq.codebook", "mm.a.code_embd"};
    const char *name = t->name;
    size_t n = strlen(name);
    if (n_dims_of(t) < 2 || n < 6 || strcmp(name + n - 6, "weight")) return false;
    if (!strcmp(name, "position_embd.weight") || !strcmp(name, "token_types.weight")) return false;
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++)
        if (has(name, never[i])) return false;
    return quant_get_traits(t->type) && quant_get_traits(t->type)->can_dequantize;
}

/* ---- the model facts the rules look at ---- */

typedef struct {
    char arch[64];
    int n_layer, n_gqa, n_expert;
    bool is_70b, falcon, tied; /* tied: no output.weight, token_embd doubles as it */
    int n_attn_v, i_attn_v, i_ffn_down, i_ffn_gate, i_ffn_up;
} mix_state;

static int64_t kv_first_int(const gguf_file *g, const char *key, int64_t dflt) {
    int64_t v;
    if (gguf_get_i64(g, key, &v) == BRISK_OK) return v;
    gguf_value_type et;
    uint64_t n;
    const void *data;
    if (gguf_get_arr(g, key, &et, &n, &data) == BRISK_OK && n > 0 && data) {
        if (et == GGUF_TYPE_INT32 || et == GGUF_TYPE_UINT32) {
            uint32_t u;
            memcpy(&u, data, 4);
            return et == GGUF_TYPE_INT32 ? (int32_t)u : (int64_t)u;
        }
    }
    return dflt;
}

static brisk_status model_facts(const gguf_file *g, mix_state *s) {
    memset(s, 0, sizeof *s);
    const char *a;
    size_t len;
    if (gguf_get_str(g, "general.architecture", &a, &len) != BRISK_OK || len == 0 || len >= sizeof s->arch)
        return bk_fail(BRISK_ERR_FORMAT, "quantize: the model has no general.architecture");
    memcpy(s->arch, a, len);
    char key[128];
    snprintf(key, sizeof key, "%s.block_count", s->arch);
    s->n_layer = (int)kv_first_int(g, key, 0);
    snprintf(key, sizeof key, "%s.attention.head_count", s->arch);
    int64_t n_head = kv_first_int(g, key, 0);
    snprintf(key, sizeof key, "%s.attention.head_count_kv", s->arch);
    int64_t n_head_kv = kv_first_int(g, key, n_head);
    snprintf(key, sizeof key, "%s.expert_count", s->arch);
    s->n_expert = (int)kv_first_int(g, key, 0);
    s->n_gqa = n_head_kv > 0 ? (int)(n_head / n_head_kv) : 0;
    /* llama.cpp's LLM_TYPE_70B, the only model size its rules look at */
    s->is_70b = (!strcmp(s->arch, "llama") && s->n_layer == 80 && n_head != n_head_kv) ||
                ((!strcmp(s->arch, "qwen2") || !strcmp(s->arch, "olmo") || !strcmp(s->arch, "deci")) && s->n_layer == 80) ||
                (!strcmp(s->arch, "jais2") && s->n_layer == 68);
    s->falcon = !strcmp(s->arch, "falcon");
    s->tied = gguf_find_tensor(g, "output.weight") == NULL;
    for (int64_t i = 0; i < gguf_tensor_count(g); i++)
        if (category_of(gguf_get_tensor(g, i)->name) == CAT_ATTN_V) s->n_attn_v++;
    return BRISK_OK;
}

/* ---- the rules ---- */

/* The first and last eighth of the layers, and every third one between. */
static bool more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

static int block_of(uint32_t t) { return quant_get_traits(t)->block_elems; }

/* The layer of an ffn tensor: its counter, or (MoE: experts come in no layer
 * order) the number in its name. */
static brisk_status ffn_layer(const mix_state *s, const char *name, int counter, int *layer) {
    *layer = counter;
    if (s->n_expert > 1 && (sscanf(name, "blk.%d.", layer) != 1 || *layer < 0 || *layer >= s->n_layer))
        return bk_fail(BRISK_ERR_FORMAT, "quantize: cannot tell the layer of tensor %s", name);
    return BRISK_OK;
}

/* The middle three quarters of the layers (IQ3_XS's IQ3_XXS ffn_gate/ffn_up). */
static bool middle(int i, int n) { return i >= n / 8 && i < 7 * n / 8; }

/* llama_tensor_get_type_impl for one tensor (counters advance as there). */
static brisk_status mix_rule(mix_state *s, uint32_t ft, uint32_t t, const gguf_tensor *x, bool imat, uint32_t *out) {
    const category c = category_of(x->name);
    const bool iq1 = ft == FT_IQ1_S || ft == FT_IQ1_M;
    const bool iq2 = ft == FT_IQ2_XXS || ft == FT_IQ2_XS || ft == FT_IQ2_S || ft == FT_IQ2_M || iq1;
    const bool iq2_sm = ft == FT_IQ2_S || ft == FT_IQ2_M;
    if (c == CAT_OUTPUT || (s->tied && c == CAT_TOKEN_EMBD)) {
        if (ft == FT_MXFP4_MOE || s->falcon || x->ne[0] % block_of(t)) t = QT_Q8_0;
        else if (ft == FT_IQ3_XXS || iq2) t = QT_Q5_K;
        else if (t != QT_Q8_0) t = QT_Q6_K;
    } else if (ft == FT_MXFP4_MOE) {
        t = x->ne[2] > 1 ? QT_MXFP4 : QT_Q8_0; /* experts -> MXFP4, the rest Q8_0 */
    } else if (c == CAT_TOKEN_EMBD) {
        if (ft == FT_IQ2_XXS || ft == FT_IQ2_XS || iq1) t = QT_Q2_K;
        else if (iq2_sm || ft == FT_IQ3_XXS) t = QT_IQ3_S;
    } else if (iq2) { /* the 1- and 2-bit mixes: a few tensors get Q2_K .. Q5_K, IQ2_XXS or IQ3_S */
        const uint32_t more = iq2_sm ? QT_IQ3_S : QT_Q2_K;
        if (c == CAT_ATTN_V) {
            t = s->n_gqa >= 4 || s->n_expert >= 4 ? QT_Q4_K : more;
            s->i_attn_v++;
        } else if (c == CAT_ATTN_K && s->n_expert == 8) {
            t = QT_Q4_K;
        } else if (c == CAT_FFN_DOWN) {
            if (s->i_ffn_down++ < s->n_layer / 8) t = more; /* the counter, not the layer: as llama.cpp */
        } else if (c == CAT_ATTN_OUT) {
            if (s->n_expert == 8) t = QT_Q5_K;
            else if (iq1) t = QT_IQ2_XXS;
            else if (iq2_sm) t = QT_IQ3_S;
        }
    } else if (c == CAT_ATTN_V) {
        const int i = s->i_attn_v++, n = s->n_attn_v;
        if (ft == FT_Q2_K) t = s->n_gqa >= 4 ? QT_Q4_K : QT_Q3_K;
        else if (ft == FT_Q2_K_S && s->n_gqa >= 4) t = QT_Q4_K;
        else if (ft == FT_IQ3_XXS) t = s->n_gqa >= 4 ? QT_Q4_K : !imat ? QT_IQ3_S : QT_IQ3_XXS;
        else if ((ft == FT_IQ3_XS || ft == FT_IQ3_S) && s->n_gqa >= 4) t = QT_Q4_K;
        else if (ft == FT_IQ3_M) t = QT_Q4_K;
        else if (ft == FT_Q3_K_M) t = i < 2 ? QT_Q5_K : QT_Q4_K;
        else if (ft == FT_Q3_K_L) t = QT_Q5_K;
        else if ((ft == FT_IQ4_NL || ft == FT_IQ4_XS) && s->n_gqa >= 4) t = QT_Q5_K;
        else if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) && more_bits(i, n)) t = QT_Q6_K;
        else if (ft == FT_Q4_K_S && i < 4) t = QT_Q5_K;
        if (s->is_70b && (t == QT_Q3_K || t == QT_Q4_K)) t = QT_Q5_K; /* 8 heads share attn_v */
        if (s->n_expert == 8) t = QT_Q8_0;
    } else if (c == CAT_ATTN_K) {
        if (s->n_expert == 8) t = QT_Q8_0;
        else if (ft == FT_IQ3_XS) t = QT_IQ3_XXS;
        else if (ft == FT_IQ3_XXS) t = QT_IQ2_S;
    } else if (c == CAT_ATTN_Q) {
        if (ft == FT_IQ3_XS) t = QT_IQ3_XXS;
        else if (ft == FT_IQ3_XXS) t = QT_IQ2_S;
    } else if (c == CAT_FFN_GATE || c == CAT_FFN_UP) {
        int i, n = s->n_layer;
        BK_TRY(ffn_layer(s, x->name, c == CAT_FFN_GATE ? s->i_ffn_gate++ : s->i_ffn_up++, &i));
        if (ft == FT_IQ3_XS && middle(i, n)) t = QT_IQ3_XXS;
    } else if (c == CAT_FFN_DOWN) {
        int i, n = s->n_layer;
        BK_TRY(ffn_layer(s, x->name, s->i_ffn_down++, &i));
        if (ft == FT_Q2_K) t = QT_Q3_K;
        else if (ft == FT_Q2_K_S) t = i < n / 8 ? QT_Q4_K : t;
        else if (ft == FT_IQ3_XXS && !imat) t = i < n / 8 ? QT_Q4_K : QT_Q3_K;
        else if (ft == FT_Q3_K_M) t = i < n / 16 ? QT_Q5_K : !s->falcon || more_bits(i, n) ? QT_Q4_K : QT_Q3_K;
        else if (ft == FT_IQ3_M && (i < n / 8 || (s->n_expert == 8 && more_bits(i, n)))) t = QT_Q4_K;
        else if (ft == FT_Q3_K_L) t = s->falcon ? QT_Q4_K : QT_Q5_K;
        else if (ft == FT_Q4_K_M) {
            if (s->falcon) t = i < n / 16 ? QT_Q6_K : more_bits(i, n) ? QT_Q5_K : QT_Q4_K;
            else if (more_bits(i, n)) t = QT_Q6_K;
        } else if ((ft == FT_IQ4_NL || ft == FT_IQ4_XS) && i < n / 8 && !imat) t = QT_Q5_K;
        else if (ft == FT_Q5_K_M && more_bits(i, n)) t = QT_Q6_K;
        else if (ft == FT_Q4_K_S && !s->falcon && i < n / 8) t = QT_Q5_K;
        else if ((ft == FT_Q4_0 || ft == FT_Q5_0) && imat && i < n / 8) t = ft == FT_Q4_0 ? QT_Q4_1 : QT_Q5_1;
    } else if (c == CAT_ATTN_OUT) {
        if (!s->falcon && s->n_expert == 8) {
            if (ft == FT_Q2_K || ft == FT_Q3_K_S || ft == FT_Q3_K_M || ft == FT_IQ4_NL || ft == FT_Q4_K_S ||
                ft == FT_Q4_K_M || ft == FT_IQ4_XS || ft == FT_IQ3_XS || ft == FT_IQ3_XXS || ft == FT_IQ3_S ||
                ft == FT_IQ3_M)
                t = QT_Q5_K;
        } else if (!s->falcon) {
            if (ft == FT_Q2_K) t = QT_Q3_K;
            else if (ft == FT_IQ3_XXS) t = QT_IQ3_S;
            else if (ft == FT_Q3_K_M) t = QT_Q4_K;
            else if (ft == FT_Q3_K_L) t = QT_Q5_K;
            else if (ft == FT_IQ3_M) t = QT_Q4_K;
        } else if (ft == FT_Q3_K_L) {
            t = QT_Q4_K;
        }
    }
    *out = t;
    return BRISK_OK;
}

/* A type whose block does not divide the row: the next one that may, then F16. */
static brisk_status fallback(const gguf_tensor *x, uint32_t t, uint32_t *out, int *n_fallback) {
    *out = t;
    if (x->ne[0] % block_of(t) == 0) return BRISK_OK;
    (*n_fallback)++;
    switch (t) {
    case QT_IQ1_S:
    case QT_IQ1_M:
    case QT_IQ2_XXS:
    case QT_IQ2_XS:
    case QT_IQ2_S:
    case QT_IQ3_XXS:
    case QT_IQ3_S:
    case QT_IQ4_XS: t = QT_IQ4_NL; break;
    case QT_Q2_K:
    case QT_Q3_K: t = QT_Q4_0; break;
    case QT_Q4_K: t = QT_Q5_0; break;
    case QT_Q5_K: t = QT_Q5_1; break;
    case QT_Q6_K: t = QT_Q8_0; break;
    default:
        if (block_of(t) > 32)
            return bk_fail(BRISK_ERR_UNSUPPORTED, "quantize: no fallback type for %s (tensor %s)", quant_type_name(t), x->name);
    }
    *out = x->ne[0] % block_of(t) ? QT_F16 : t;
    return BRISK_OK;
}

/* llama.cpp's order: by layer (tensors outside blk.N first), then by name. */
typedef struct {
    int layer;
    const char *name;
    int64_t index;
} order_key;
static int by_layer_name(const void *a, const void *b) {
    const order_key *x = a, *y = b;
    return x->layer != y->layer ? (x->layer < y->layer ? -1 : 1) : strcmp(x->name, y->name);
}

brisk_status quant_mix_plan(const gguf_file *g, const quant_ftype *ft, const quant_mix_opts *o, uint32_t *types,
                            int *n_fallback) {
    mix_state s;
    BK_TRY(model_facts(g, &s));
    const int64_t nt = gguf_tensor_count(g);
    order_key *order = malloc((size_t)(nt ? nt : 1) * sizeof *order);
    if (!order) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < nt; i++) {
        const char *name = gguf_get_tensor(g, i)->name;
        order[i] = (order_key){-1, name, i};
        if (sscanf(name, "blk.%d.", &order[i].layer) != 1) order[i].layer = -1;
    }
    qsort(order, (size_t)nt, sizeof *order, by_layer_name);
    const bool quantized = ft->base_type != QT_F32 && ft->base_type != QT_F16 && ft->base_type != QT_BF16;
    int nf = 0;
    brisk_status st = BRISK_OK;
    for (int64_t k = 0; k < nt && st == BRISK_OK; k++) {
        const gguf_tensor *x = gguf_get_tensor(g, order[k].index);
        uint32_t t = x->type;
        if (convertible(x)) {
            t = ft->base_type;
            if (quantized) {
                if (!o->pure) st = mix_rule(&s, ft->id, t, x, o->has_imatrix, &t);
                if (st == BRISK_OK) st = fallback(x, t, &t, &nf);
            }
            const category c = category_of(x->name);
            const bool needs_imatrix =
                (t == QT_Q2_K && ft->id == FT_Q2_K_S) || t == QT_IQ3_XXS || t == QT_IQ2_XXS || t == QT_IQ2_XS ||
                t == QT_IQ2_S || t == QT_IQ1_S || t == QT_IQ1_M;
            if (st == BRISK_OK && needs_imatrix && !o->has_imatrix && c != CAT_OUTPUT && c != CAT_TOKEN_EMBD)
                st = bk_fail(BRISK_ERR_INVALID_ARG, "quantize: %s needs an importance matrix (--imatrix) for tensor %s",
                             ft->name, x->name);
        }
        types[order[k].index] = t;
    }
    free(order);
    if (n_fallback) *n_fallback = nf;
    return st;
}

brisk_status quant_mix_plan_shapes(gguf_writer *w, int n, const quant_mix_tensor *t, const quant_ftype *ft,
                                   const quant_mix_opts *o, const char *near_path, uint32_t *types) {
    /* q8_1 is a type no mix produces, so a tensor still q8_1 afterwards is one the mix kept */
    uint32_t *skel = malloc((size_t)(n > 0 ? n : 1) * sizeof *skel);
    void *zeros = NULL;
    size_t max_bytes = 0;
    brisk_status s = w && skel ? BRISK_OK : bk_fail(BRISK_ERR_NOMEM, "out of memory");
    for (int i = 0; s == BRISK_OK && i < n; i++) {
        skel[i] = t[i].keep_f32 || t[i].ne[0] % 32 ? QT_F32 : QT_Q8_1;
        int64_t ne[3] = {t[i].ne[0], t[i].ne[1] > 1 ? 2 : 1, t[i].ne[2] > 1 ? 2 : 1};
        s = gguf_writer_add_tensor(w, t[i].name, skel[i], t[i].n_dims, ne);
        size_t b = quant_row_size(skel[i], ne[0]) * (size_t)(ne[1] * ne[2]);
        if (b > max_bytes) max_bytes = b;
    }
    if (s == BRISK_OK && !(zeros = calloc(1, max_bytes ? max_bytes : 1))) s = bk_fail(BRISK_ERR_NOMEM, "out of memory");
    char *tmp_path = NULL; /* a unique name: two runs writing the same output never share it */
    if (s == BRISK_OK) s = atomic_file_scratch(near_path, &tmp_path);
    if (s == BRISK_OK) s = gguf_writer_begin(w, tmp_path);
    for (int i = 0; s == BRISK_OK && i < n; i++)
        s = gguf_writer_write_tensor(w, zeros, quant_row_size(skel[i], t[i].ne[0]) * (t[i].ne[1] > 1 ? 2 : 1) *
                                                   (t[i].ne[2] > 1 ? 2 : 1));
    if (s == BRISK_OK) s = gguf_writer_finish(w);
    gguf_file *g = NULL;
    if (s == BRISK_OK) s = gguf_open(tmp_path, &g);
    if (s == BRISK_OK) s = quant_mix_plan(g, ft, o, types, NULL);
    for (int i = 0; s == BRISK_OK && i < n; i++)
        if (types[i] == skel[i]) types[i] = QT_COUNT;
    gguf_close(g);
    gguf_writer_free(w);
    atomic_file_scratch_remove(tmp_path);
    free(skel);
    free(zeros);
    return s;
}
