/* hfconfig.c — config.json -> hf_config (see hfconfig.h). */
#include "format/hfconfig.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

static const struct {
    const char *hf_class, *model_type, *gguf;
    hf_arch arch;
} archs[] = {
    {"LlamaForCausalLM", "llama", "llama", HF_LLAMA},
    {"Qwen2ForCausalLM", "qwen2", "qwen2", HF_QWEN2},
    {"Qwen3ForCausalLM", "qwen3", "qwen3", HF_QWEN3},
    {"Qwen3MoeForCausalLM", "qwen3_moe", "qwen3moe", HF_QWEN3_MOE},
    {"Qwen3_5ForConditionalGeneration", "qwen3_5", "qwen35", HF_QWEN35},
    {"Qwen3_5ForCausalLM", "qwen3_5_text", "qwen35", HF_QWEN35},
    {"Qwen3_5MoeForConditionalGeneration", "qwen3_5_moe", "qwen35moe", HF_QWEN35_MOE},
    {"Qwen3_5MoeForCausalLM", "qwen3_5_moe_text", "qwen35moe", HF_QWEN35_MOE},
    {"Qwen3NextForCausalLM", "qwen3_next", "qwen3next", HF_QWEN3_NEXT},
};

/* Looks key up in the text config first, then at the top level. */
static const cJSON *get(const cJSON *text, const cJSON *root, const char *key) {
    const cJSON *v = text ? cJSON_GetObjectItemCaseSensitive(text, key) : NULL;
    return v ? v : cJSON_GetObjectItemCaseSensitive(root, key);
}

static int64_t get_int(const cJSON *text, const cJSON *root, const char *key) {
    const cJSON *v = get(text, root, key);
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || fabs(v->valuedouble) > 1e15) return -1;
    return (int64_t)v->valuedouble;
}

static double get_num(const cJSON *obj, const char *key) {
    const cJSON *v = obj ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static void read_rope(hf_config *c, const cJSON *text, const cJSON *root) {
    const cJSON *rp = get(text, root, "rope_parameters");
    if (!cJSON_IsObject(rp)) rp = get(text, root, "rope_scaling");
    if (!cJSON_IsObject(rp)) rp = NULL;
    const cJSON *fa = rp ? cJSON_GetObjectItemCaseSensitive(rp, "full_attention") : NULL;
    const cJSON *p = cJSON_IsObject(fa) ? fa : rp;
    const cJSON *ty = p ? cJSON_GetObjectItemCaseSensitive(p, "rope_type") : NULL;
    if (!cJSON_IsString(ty) && p) ty = cJSON_GetObjectItemCaseSensitive(p, "type");
    if (cJSON_IsString(ty) && strcmp(ty->valuestring, "default"))
        snprintf(c->rope_type, sizeof c->rope_type, "%s", ty->valuestring);
    c->rope_theta = get_num(p, "rope_theta");
    if (isnan(c->rope_theta)) c->rope_theta = get_num(text, "rope_theta");
    if (isnan(c->rope_theta)) c->rope_theta = get_num(root, "rope_theta");
    c->rope_factor = get_num(p, "factor");
    c->rope_low_freq = get_num(p, "low_freq_factor");
    c->rope_high_freq = get_num(p, "high_freq_factor");
    c->yarn_ext_factor = get_num(p, "extrapolation_factor");
    c->yarn_attn_factor = get_num(p, "attention_factor");
    if (isnan(c->yarn_attn_factor)) c->yarn_attn_factor = get_num(p, "attn_factor");
    c->yarn_beta_fast = get_num(p, "beta_fast");
    c->yarn_beta_slow = get_num(p, "beta_slow");
    double o = get_num(p, "original_max_position_embeddings");
    c->rope_orig_ctx = isnan(o) ? get_int(text, root, "original_max_position_embeddings") : (int64_t)o;
    c->partial_rotary = get_num(rp, "partial_rotary_factor");
    if (isnan(c->partial_rotary)) c->partial_rotary = get_num(text, "partial_rotary_factor");
    if (isnan(c->partial_rotary)) c->partial_rotary = get_num(root, "partial_rotary_factor");
    const cJSON *ms = rp ? cJSON_GetObjectItemCaseSensitive(rp, "mrope_section") : NULL;
    if (cJSON_IsArray(ms) && cJSON_GetArraySize(ms) <= 4) {
        int k = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, ms) c->mrope[k++] = cJSON_IsNumber(it) ? it->valueint : 0;
        c->has_mrope = true;
    }
}

/* Every layer MoE: the GGUF has no way to say a layer is dense (transformers'
 * decoder_sparse_step and mlp_only_layers). */
static brisk_status check_all_moe(const cJSON *text, const cJSON *root) {
    const cJSON *step = get(text, root, "decoder_sparse_step"), *dense = get(text, root, "mlp_only_layers");
    if ((cJSON_IsNumber(step) && step->valuedouble != 1) || (cJSON_IsArray(dense) && cJSON_GetArraySize(dense)))
        return bk_fail(BRISK_ERR_UNSUPPORTED, "config.json: dense layers in a MoE model (decoder_sparse_step != 1 or "
                                              "mlp_only_layers) are not supported");
    return BRISK_OK;
}

/* 1: a full attention layer, 0: a linear (DeltaNet) one, -1: neither
 * (transformers' legacy names "attention" and "mamba" included). */
static int layer_is_full(const cJSON *t) {
    const char *s = cJSON_IsString(t) ? t->valuestring : "";
    if (!strcmp(s, "full_attention") || !strcmp(s, "attention")) return 1;
    if (!strcmp(s, "linear_attention") || !strcmp(s, "mamba")) return 0;
    return -1;
}

/* The DeltaNet shape with its defaults, and the attention interval: from
 * full_attention_interval, else from layer_types (transformers 5 saves only
 * that for Qwen3-Next), which must then follow it layer by layer since the
 * GGUF stores only the interval. */
static brisk_status read_hybrid(hf_config *c, const cJSON *text, const cJSON *root) {
    if (c->ssm_conv < 0) c->ssm_conv = 4;
    if (isnan(c->partial_rotary)) c->partial_rotary = 0.25;
    const cJSON *lt = get(text, root, "layer_types"), *t;
    if (cJSON_IsArray(lt) && cJSON_GetArraySize(lt) != c->n_layer)
        return bk_fail(BRISK_ERR_FORMAT, "config.json: layer_types has %d entries for %lld layers",
                       cJSON_GetArraySize(lt), (long long)c->n_layer);
    if (c->full_attn_interval < 0 && cJSON_IsArray(lt)) {
        int i = 0;
        cJSON_ArrayForEach(t, lt) {
            i++;
            if (layer_is_full(t) == 1 && c->full_attn_interval < 0) c->full_attn_interval = i;
        }
    }
    if (c->full_attn_interval < 0) c->full_attn_interval = 4;
    if (c->ssm_k_dim <= 0 || c->ssm_v_dim <= 0 || c->ssm_n_k <= 0 || c->ssm_n_v <= 0 || c->ssm_n_v % c->ssm_n_k ||
        c->ssm_conv <= 0 || c->full_attn_interval <= 0)
        return bk_fail(BRISK_ERR_FORMAT, "config.json: inconsistent linear attention (DeltaNet) shape");
    if (c->arch != HF_QWEN35 && c->n_ff_shexp <= 0)
        return bk_fail(BRISK_ERR_FORMAT, "config.json: shared_expert_intermediate_size missing");
    if (!cJSON_IsArray(lt)) return BRISK_OK;
    int64_t i = 0;
    cJSON_ArrayForEach(t, lt) {
        if (layer_is_full(t) != ((i + 1) % c->full_attn_interval == 0))
            return bk_fail(BRISK_ERR_UNSUPPORTED, "config.json: layer_types[%lld] does not follow a full attention "
                           "layer every %lld layers", (long long)i, (long long)c->full_attn_interval);
        i++;
    }
    return BRISK_OK;
}

/* quantization_config: only fine-grained FP8 (E4M3 weights, a scale per block)
 * is read; other methods (GPTQ, AWQ, ...) store weights brisk cannot dequantize. */
static brisk_status read_quant(hf_config *c, const cJSON *text, const cJSON *root) {
    const cJSON *q = get(text, root, "quantization_config");
    if (!q) return BRISK_OK;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(q, "quant_method");
    const char *method = cJSON_IsString(m) ? m->valuestring : "?";
    if (!cJSON_IsObject(q) || strcmp(method, "fp8"))
        return bk_fail(BRISK_ERR_UNSUPPORTED, "config.json: quantization_config quant_method '%s' is not supported "
                                              "(fp8 is; or convert the unquantized checkpoint)", method);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(q, "fmt");
    if (fmt && (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "e4m3")))
        return bk_fail(BRISK_ERR_UNSUPPORTED, "config.json: fp8 fmt '%s' is not supported (e4m3 is)",
                       cJSON_IsString(fmt) ? fmt->valuestring : "?");
    const cJSON *bs = cJSON_GetObjectItemCaseSensitive(q, "weight_block_size");
    bool ok = cJSON_IsArray(bs) && cJSON_GetArraySize(bs) == 2;
    for (int k = 0; ok && k < 2; k++) {
        const cJSON *v = cJSON_GetArrayItem(bs, k);
        ok = cJSON_IsNumber(v) && v->valuedouble >= 1 && v->valuedouble <= 65536 && v->valuedouble == floor(v->valuedouble);
        if (ok) c->fp8_block[k] = (int64_t)v->valuedouble;
    }
    if (!ok)
        return bk_fail(BRISK_ERR_UNSUPPORTED, "config.json: fp8 quantization_config needs weight_block_size [rows, "
                                              "cols] (per-tensor and per-channel FP8 are not supported)");
    return BRISK_OK;
}

static brisk_status parse_root(const cJSON *root, hf_config *c) {
    if (!cJSON_IsObject(root)) return bk_fail(BRISK_ERR_FORMAT, "config.json: not a JSON object");
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    if (!cJSON_IsObject(text)) text = NULL;
    const cJSON *ar = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    const cJSON *a0 = cJSON_IsArray(ar) ? cJSON_GetArrayItem(ar, 0) : NULL;
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    const char *cls = cJSON_IsString(a0) ? a0->valuestring : "";
    const char *mtype = cJSON_IsString(mt) ? mt->valuestring : "";
    snprintf(c->hf_class, sizeof c->hf_class, "%s", cls);
    int found = -1;
    for (int i = 0; i < (int)(sizeof archs / sizeof archs[0]) && found < 0; i++)
        if (!strcmp(cls, archs[i].hf_class)) found = i;
    for (int i = 0; i < (int)(sizeof archs / sizeof archs[0]) && found < 0 && !*cls; i++)
        if (!strcmp(mtype, archs[i].model_type)) found = i;
    if (found < 0)
        return bk_fail(BRISK_ERR_UNSUPPORTED,
                       "config.json: architecture '%s' (model_type '%s') is not supported (llama, qwen2, qwen3, "
                       "qwen3_moe, qwen3_5, qwen3_5_moe, qwen3_next)", cls, mtype);
    c->arch = archs[found].arch;
    c->gguf_arch = archs[found].gguf;
    if (!*c->hf_class) snprintf(c->hf_class, sizeof c->hf_class, "%s", archs[found].hf_class);

#define INT(field, key) c->field = get_int(text, root, key)
    INT(n_vocab, "vocab_size");
    INT(n_embd, "hidden_size");
    INT(n_layer, "num_hidden_layers");
    INT(n_head, "num_attention_heads");
    INT(n_head_kv, "num_key_value_heads");
    INT(head_dim, "head_dim");
    INT(n_ff, "intermediate_size");
    INT(n_ctx, "max_position_embeddings");
    INT(n_expert, "num_experts");
    INT(n_expert_used, "num_experts_per_tok");
    INT(n_ff_exp, "moe_intermediate_size");
    INT(n_ff_shexp, "shared_expert_intermediate_size");
    INT(ssm_conv, "linear_conv_kernel_dim");
    INT(ssm_k_dim, "linear_key_head_dim");
    INT(ssm_v_dim, "linear_value_head_dim");
    INT(ssm_n_k, "linear_num_key_heads");
    INT(ssm_n_v, "linear_num_value_heads");
    INT(full_attn_interval, "full_attention_interval");
    INT(n_mtp, "mtp_num_hidden_layers");
#undef INT
    if (c->n_expert < 0) c->n_expert = get_int(text, root, "num_local_experts");
    static const char *tok_keys[HF_TOK_COUNT] = {"bos_token_id", "eos_token_id", "unk_token_id", "sep_token_id",
                                                 "pad_token_id", "cls_token_id", "mask_token_id"};
    for (int k = 0; k < HF_TOK_COUNT; k++) c->token_id[k] = get_int(text, root, tok_keys[k]);
    c->rms_eps = get_num(text, "rms_norm_eps");
    if (isnan(c->rms_eps)) c->rms_eps = get_num(root, "rms_norm_eps");
    const cJSON *tie = get(text, root, "tie_word_embeddings");
    /* transformers' default: tied unless the config says otherwise (Qwen3.5 configs say false) */
    c->tied = tie ? cJSON_IsTrue(tie) : false;
    read_rope(c, text, root);
    if (c->n_mtp < 0) c->n_mtp = 0;
    if (c->n_head_kv < 0) c->n_head_kv = c->n_head;
    BK_TRY(read_quant(c, text, root));

    if (c->n_vocab <= 0 || c->n_embd <= 0 || c->n_layer <= 0 || c->n_layer > 4096 || c->n_head <= 0 ||
        c->n_head_kv <= 0 || c->n_head % c->n_head_kv)
        return bk_fail(BRISK_ERR_FORMAT,
                       "config.json: vocab_size, hidden_size, num_hidden_layers, num_attention_heads and "
                       "num_key_value_heads must be positive (heads a multiple of kv heads)");
    if (c->head_dim <= 0 && c->n_embd % c->n_head)
        return bk_fail(BRISK_ERR_FORMAT, "config.json: hidden_size is no multiple of num_attention_heads");
    bool moe = c->arch == HF_QWEN3_MOE || c->arch == HF_QWEN35_MOE || c->arch == HF_QWEN3_NEXT;
    if (moe && (c->n_expert <= 0 || c->n_expert_used <= 0 || c->n_expert_used > c->n_expert || c->n_ff_exp <= 0))
        return bk_fail(BRISK_ERR_FORMAT, "config.json: num_experts, num_experts_per_tok, moe_intermediate_size");
    if (moe) BK_TRY(check_all_moe(text, root));
    if (!moe && c->n_ff <= 0) return bk_fail(BRISK_ERR_FORMAT, "config.json: intermediate_size missing");
    bool hybrid = c->arch == HF_QWEN35 || c->arch == HF_QWEN35_MOE || c->arch == HF_QWEN3_NEXT;
    if (hybrid) BK_TRY(read_hybrid(c, text, root));
    if (c->arch == HF_QWEN3_NEXT && cJSON_IsFalse(get(text, root, "norm_topk_prob")))
        return bk_fail(BRISK_ERR_UNSUPPORTED, "config.json: norm_topk_prob false (llama.cpp's qwen3next always "
                                              "renormalizes the top-k expert weights)");
    return BRISK_OK;
}

brisk_status hf_config_parse(const char *json, size_t len, hf_config *c) {
    memset(c, 0, sizeof *c);
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) return bk_fail(BRISK_ERR_FORMAT, "config.json: invalid JSON");
    brisk_status s = parse_root(root, c);
    cJSON_Delete(root);
    return s;
}

brisk_status hf_config_load(const char *path, hf_config *c) {
    FILE *f = fopen(path, "rb");
    if (!f) return bk_fail(BRISK_ERR_IO, "cannot open %s", path);
    char *buf = NULL;
    size_t n = 0, cap = 0;
    brisk_status s = BRISK_OK;
    for (;;) {
        if (n == cap) {
            char *b = cap < (64u << 20) ? realloc(buf, cap = cap ? 2 * cap : 65536) : NULL;
            if (!b) {
                s = bk_fail(BRISK_ERR_FORMAT, "%s: too large for a config", path);
                break;
            }
            buf = b;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    if (s == BRISK_OK && ferror(f)) s = bk_fail(BRISK_ERR_IO, "read error on %s", path);
    fclose(f);
    if (s == BRISK_OK) s = hf_config_parse(buf, n, c);
    free(buf);
    return s == BRISK_OK ? s : bk_wrap(s, "%s", path);
}
