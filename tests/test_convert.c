/* test_convert.c — `brisk convert` (convert_hf) on a tiny Qwen3-Next checkpoint
 * written here (f32, every value distinct and exact), the GGUF read back and
 * checked against llama.cpp's converter (conversion/qwen.py, Qwen3NextModel)
 * restated independently: in_proj_qkvz split into attn_qkv (all q, all k, all
 * v rows) and attn_gate (the z rows), in_proj_ba kept whole as ssm_ba, value
 * heads left in HF's grouped order, A_log -> -exp(A_log), 1 added to every
 * norm but the DeltaNet's, experts stacked, the MTP head kept as llama.cpp's
 * nextn block (and brisk loads and runs it; --no-mtp drops it), the names
 * (HF's post_attention_layernorm is post_attention_norm) and the metadata;
 * then the configs the converter refuses. Then a tiny qwen3 FP8 checkpoint (F8_E4M3
 * weights with 128x128 block scales, every code, edge blocks) whose conversion
 * must equal an independent dequantization exactly, and the FP8 checkpoints
 * the converter refuses. Needs only tests/data/hf/tokenizer. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "brisk.h"
#include "engine/mtp.h"
#include "format/gguf.h"
#include "format/hfconfig.h"
#include "model/convert.h"
#include "model/model.h"
#include "quant/quant.h"
#include "test.h"

/* The shape: 2 layers (DeltaNet, then attention), 2 key heads of 4, 4 value heads of 4. */
enum { V = 4096, D = 16, L = 2, H = 2, KV = 1, HD = 8, FF = 32, E = 4, FFE = 8, FFS = 8 };
enum { NK = 2, NV = 4, HK = 4, HV = 4, CK = 4, R = NV / NK, GROUP = 2 * HK + 2 * R * HV };

static const char *CONFIG =
    "{%s\"architectures\":[\"Qwen3NextForCausalLM\"],\"model_type\":\"qwen3_next\",\"vocab_size\":4096,"
    "\"hidden_size\":16,\"num_hidden_layers\":2,\"num_attention_heads\":2,\"num_key_value_heads\":1,"
    "\"head_dim\":8,\"intermediate_size\":32,\"max_position_embeddings\":512,\"rms_norm_eps\":1e-6,"
    "\"tie_word_embeddings\":false,\"num_experts\":4,\"num_experts_per_tok\":2,\"moe_intermediate_size\":8,"
    "\"shared_expert_intermediate_size\":8,\"norm_topk_prob\":true,\"decoder_sparse_step\":1,"
    "\"mlp_only_layers\":[],\"linear_conv_kernel_dim\":4,\"linear_key_head_dim\":4,\"linear_value_head_dim\":4,"
    "\"linear_num_key_heads\":2,\"linear_num_value_heads\":4,"
    "\"layer_types\":[\"linear_attention\",\"full_attention\"],\"rope_parameters\":{\"rope_type\":\"default\","
    "\"rope_theta\":10000.0,\"partial_rotary_factor\":0.25},\"eos_token_id\":0}";

/* The config with `extra` keys first (cJSON takes a key's first occurrence). */
static char *config(const char *extra) {
    size_t n = strlen(CONFIG) + strlen(extra) + 1;
    char *s = malloc(n);
    snprintf(s, n, CONFIG, extra);
    return s;
}

/* ---- the checkpoint ---- */

typedef struct {
    char name[80];
    int n_dims;
    int64_t shape[3], n;
    float *data;
} src_tensor;

static src_tensor T[96];
static int n_src;

/* Adds a tensor named by fmt whose element k is (id * 65536 + k) / 1024:
 * distinct, and exact in f32 also plus one. Returns its id. */
static int add(int n_dims, int64_t d0, int64_t d1, int64_t d2, const char *fmt, ...) {
    src_tensor *t = &T[n_src];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    t->n_dims = n_dims;
    t->shape[0] = d0, t->shape[1] = d1, t->shape[2] = d2;
    t->n = d0 * (n_dims > 1 ? d1 : 1) * (n_dims > 2 ? d2 : 1);
    t->data = malloc((size_t)t->n * sizeof(float));
    for (int64_t k = 0; k < t->n; k++) t->data[k] = (float)(n_src * 65536 + k) / 1024.0f;
    return n_src++;
}

static int find(const char *name) {
    for (int i = 0; i < n_src; i++)
        if (!strcmp(T[i].name, name)) return i;
    return -1;
}

/* A block's tensors, named pre + suffix (pre: "model.layers.%d." or the MTP head's "mtp.layers.%d."). */
#define P "%s"
static void add_block(const char *pre_fmt, int il, bool linear) {
    char pre[64];
    snprintf(pre, sizeof pre, pre_fmt, il);
    add(1, D, 0, 0, P "input_layernorm.weight", pre);
    add(1, D, 0, 0, P "post_attention_layernorm.weight", pre);
    if (linear) {
        add(2, NK * GROUP, D, 0, P "linear_attn.in_proj_qkvz.weight", pre);
        add(2, 2 * NV, D, 0, P "linear_attn.in_proj_ba.weight", pre);
        add(3, 2 * NK * HK + NV * HV, 1, CK, P "linear_attn.conv1d.weight", pre);
        int a = add(1, NV, 0, 0, P "linear_attn.A_log", pre);
        for (int k = 0; k < NV; k++) T[a].data[k] = 0.25f * (float)k - 0.5f; /* -exp of these stays readable */
        add(1, NV, 0, 0, P "linear_attn.dt_bias", pre);
        add(1, HV, 0, 0, P "linear_attn.norm.weight", pre);
        add(2, D, NV * HV, 0, P "linear_attn.out_proj.weight", pre);
    } else {
        add(2, 2 * H * HD, D, 0, P "self_attn.q_proj.weight", pre); /* per head: query rows, then gate rows */
        add(2, KV * HD, D, 0, P "self_attn.k_proj.weight", pre);
        add(2, KV * HD, D, 0, P "self_attn.v_proj.weight", pre);
        add(2, D, H * HD, 0, P "self_attn.o_proj.weight", pre);
        add(1, HD, 0, 0, P "self_attn.q_norm.weight", pre);
        add(1, HD, 0, 0, P "self_attn.k_norm.weight", pre);
    }
    add(2, E, D, 0, P "mlp.gate.weight", pre);
    for (int e = 0; e < E; e++) {
        add(2, FFE, D, 0, P "mlp.experts.%d.gate_proj.weight", pre, e);
        add(2, FFE, D, 0, P "mlp.experts.%d.up_proj.weight", pre, e);
        add(2, D, FFE, 0, P "mlp.experts.%d.down_proj.weight", pre, e);
    }
    add(2, FFS, D, 0, P "mlp.shared_expert.gate_proj.weight", pre);
    add(2, FFS, D, 0, P "mlp.shared_expert.up_proj.weight", pre);
    add(2, D, FFS, 0, P "mlp.shared_expert.down_proj.weight", pre);
    add(2, 1, D, 0, P "mlp.shared_expert_gate.weight", pre);
}
#undef P

static bool write_checkpoint(const char *dir) {
    add(2, V, D, 0, "model.embed_tokens.weight");
    add(1, D, 0, 0, "model.norm.weight");
    add(2, V, D, 0, "lm_head.weight");
    for (int il = 0; il < L; il++) add_block("model.layers.%d.", il, il == 0);
    /* the MTP head: its own four, then one attention block (the config has no mtp_num_hidden_layers,
     * as Qwen3-Next's: the converter counts mtp.layers.N) */
    add(2, D, 2 * D, 0, "mtp.fc.weight");
    add(1, D, 0, 0, "mtp.pre_fc_norm_embedding.weight");
    add(1, D, 0, 0, "mtp.pre_fc_norm_hidden.weight");
    add(1, D, 0, 0, "mtp.norm.weight");
    add_block("mtp.layers.%d.", 0, false);
    size_t cap = 64 << 10, len = 0;
    char *hdr = malloc(cap);
    int64_t off = 0;
    len += (size_t)snprintf(hdr + len, cap - len, "{");
    for (int i = 0; i < n_src; i++) {
        const src_tensor *t = &T[i];
        len += (size_t)snprintf(hdr + len, cap - len, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld", i ? "," : "",
                                t->name, (long long)t->shape[0]);
        for (int k = 1; k < t->n_dims; k++) len += (size_t)snprintf(hdr + len, cap - len, ",%lld", (long long)t->shape[k]);
        len += (size_t)snprintf(hdr + len, cap - len, "],\"data_offsets\":[%lld,%lld]}", (long long)off,
                                (long long)(off + 4 * t->n));
        off += 4 * t->n;
    }
    len += (size_t)snprintf(hdr + len, cap - len, "}");
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    uint64_t hl = len;
    bool ok = f && len < cap && fwrite(&hl, 8, 1, f) == 1 && fwrite(hdr, 1, len, f) == len;
    for (int i = 0; ok && i < n_src; i++) ok = fwrite(T[i].data, sizeof(float), (size_t)T[i].n, f) == (size_t)T[i].n;
    if (f) ok = fclose(f) == 0 && ok;
    free(hdr);
    return ok;
}

static bool write_text(const char *dir, const char *file, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "wb");
    bool ok = f && fputs(text, f) >= 0;
    return f ? fclose(f) == 0 && ok : false;
}

/* ---- checks on the GGUF ---- */

enum { RAW, PLUS1, NEG_EXP };

/* Tensor `name` is f32 of shape ne, and equals `rows` rows (each ne[0] long) of
 * source tensor `src` (rows[r] its row index; NULL: row r), op applied. */
static void check_tensor(const gguf_file *g, const char *name, int n_dims, int64_t ne0, int64_t ne1, const char *src,
                         const int64_t *rows, int op) {
    const gguf_tensor *t = gguf_find_tensor(g, name);
    const int s = find(src);
    CHECK(t && s >= 0);
    if (!t || s < 0) {
        fprintf(stderr, "  missing %s or %s\n", name, src);
        return;
    }
    CHECK(t->type == QT_F32 && t->n_dims == n_dims && t->ne[0] == ne0 && t->ne[1] == ne1);
    if (t->type != QT_F32 || t->ne[0] != ne0 || t->ne[1] != ne1) return;
    const float *got = t->data;
    int bad = 0;
    for (int64_t r = 0; r < ne1; r++)
        for (int64_t k = 0; k < ne0; k++) {
            float want = T[s].data[(rows ? rows[r] : r) * ne0 + k];
            want = op == PLUS1 ? want + 1.0f : op == NEG_EXP ? -expf(want) : want;
            bad += got[r * ne0 + k] != want;
        }
    if (bad) fprintf(stderr, "  %s: %d values differ from %s\n", name, bad, src);
    CHECK(bad == 0);
}

static void check_u32(const gguf_file *g, const char *key, uint32_t want) {
    uint32_t v = 0;
    CHECK_OK(gguf_get_u32(g, key, &v));
    if (v != want) fprintf(stderr, "  %s = %u, want %u\n", key, v, want);
    CHECK(v == want);
}

/* The rows of in_proj_qkvz that attn_qkv (gate 0) or attn_gate (gate 1) holds, as
 * llama.cpp's converter derives them: view the rows as (n_k, [q | k | v | z]),
 * split the last axis, flatten each of q, k, v (or z) over the key heads, concatenate. */
static int64_t qkvz_rows(int gate, int64_t *rows) {
    static const int64_t size[4] = {HK, HK, R * HV, R * HV}, at[4] = {0, HK, 2 * HK, 2 * HK + R * HV};
    int64_t n = 0;
    for (int part = gate ? 3 : 0; part < (gate ? 4 : 3); part++)
        for (int64_t h = 0; h < NK; h++)
            for (int64_t d = 0; d < size[part]; d++) rows[n++] = h * GROUP + at[part] + d;
    return n;
}

static void check_metadata(const gguf_file *g) {
    const char *s = NULL;
    size_t n = 0;
    CHECK_OK(gguf_get_str(g, "general.architecture", &s, &n));
    CHECK(s && n == 9 && !memcmp(s, "qwen3next", 9));
    static const struct { const char *key; uint32_t v; } want[] = {
        {"qwen3next.block_count", L + 1}, {"qwen3next.nextn_predict_layers", 1}, {"qwen3next.embedding_length", D}, {"qwen3next.feed_forward_length", FF},
        {"qwen3next.attention.head_count", H}, {"qwen3next.attention.head_count_kv", KV},
        {"qwen3next.attention.key_length", HD}, {"qwen3next.attention.value_length", HD},
        {"qwen3next.expert_count", E}, {"qwen3next.expert_used_count", 2},
        {"qwen3next.expert_feed_forward_length", FFE}, {"qwen3next.expert_shared_feed_forward_length", FFS},
        {"qwen3next.ssm.conv_kernel", CK}, {"qwen3next.ssm.state_size", HK}, {"qwen3next.ssm.group_count", NK},
        {"qwen3next.ssm.time_step_rank", NV}, {"qwen3next.ssm.inner_size", NV * HV},
        {"qwen3next.full_attention_interval", 2}, /* from layer_types alone */
        {"qwen3next.rope.dimension_count", HD / 4}, {"qwen3next.context_length", 512},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) check_u32(g, want[i].key, want[i].v);
    float f = 0;
    CHECK_OK(gguf_get_f32(g, "qwen3next.rope.freq_base", &f));
    CHECK(f == 10000.0f);
    CHECK(gguf_find_key(g, "qwen3next.rope.dimension_sections") < 0); /* no MRoPE in qwen3next */
}

static void check_tensors(const gguf_file *g) {
    int64_t rows[NK * GROUP];
    const char *p = "model.layers.0.";
    char src[128];
#define SRC(x) (snprintf(src, sizeof src, "%s%s", p, x), src)
    CHECK(qkvz_rows(0, rows) == 2 * NK * HK + NV * HV);
    CHECK(rows[4] == GROUP && rows[8] == HK && rows[16] == 2 * HK && rows[24] == GROUP + 2 * HK); /* spot checks */
    check_tensor(g, "blk.0.attn_qkv.weight", 2, D, 2 * NK * HK + NV * HV, SRC("linear_attn.in_proj_qkvz.weight"),
                 rows, RAW);
    CHECK(qkvz_rows(1, rows) == NV * HV && rows[0] == 2 * HK + R * HV && rows[8] == GROUP + 2 * HK + R * HV);
    check_tensor(g, "blk.0.attn_gate.weight", 2, D, NV * HV, SRC("linear_attn.in_proj_qkvz.weight"), rows, RAW);
    check_tensor(g, "blk.0.ssm_ba.weight", 2, D, 2 * NV, SRC("linear_attn.in_proj_ba.weight"), NULL, RAW);
    check_tensor(g, "blk.0.ssm_conv1d.weight", 2, CK, 2 * NK * HK + NV * HV, SRC("linear_attn.conv1d.weight"), NULL,
                 RAW);
    check_tensor(g, "blk.0.ssm_a", 1, NV, 1, SRC("linear_attn.A_log"), NULL, NEG_EXP);
    check_tensor(g, "blk.0.ssm_dt.bias", 1, NV, 1, SRC("linear_attn.dt_bias"), NULL, RAW);
    check_tensor(g, "blk.0.ssm_norm.weight", 1, HV, 1, SRC("linear_attn.norm.weight"), NULL, RAW);
    check_tensor(g, "blk.0.ssm_out.weight", 2, NV * HV, D, SRC("linear_attn.out_proj.weight"), NULL, RAW);
    check_tensor(g, "blk.0.attn_norm.weight", 1, D, 1, SRC("input_layernorm.weight"), NULL, PLUS1);
    check_tensor(g, "blk.0.post_attention_norm.weight", 1, D, 1, SRC("post_attention_layernorm.weight"), NULL, PLUS1);
    check_tensor(g, "blk.0.ffn_gate_inp.weight", 2, D, E, SRC("mlp.gate.weight"), NULL, RAW);
    check_tensor(g, "blk.0.ffn_gate_inp_shexp.weight", 2, D, 1, SRC("mlp.shared_expert_gate.weight"), NULL, RAW);
    check_tensor(g, "blk.0.ffn_up_shexp.weight", 2, D, FFS, SRC("mlp.shared_expert.up_proj.weight"), NULL, RAW);
    check_tensor(g, "blk.0.ffn_down_shexp.weight", 2, FFS, D, SRC("mlp.shared_expert.down_proj.weight"), NULL, RAW);
    const gguf_tensor *x = gguf_find_tensor(g, "blk.0.ffn_down_exps.weight");
    const int e2 = find("model.layers.0.mlp.experts.2.down_proj.weight");
    CHECK(x && x->n_dims == 3 && x->ne[0] == FFE && x->ne[1] == D && x->ne[2] == E && e2 >= 0);
    if (x && e2 >= 0) CHECK(!memcmp((const float *)x->data + 2 * D * FFE, T[e2].data, sizeof(float) * D * FFE));
    p = "model.layers.1.";
    check_tensor(g, "blk.1.attn_q.weight", 2, D, 2 * H * HD, SRC("self_attn.q_proj.weight"), NULL, RAW);
    check_tensor(g, "blk.1.attn_q_norm.weight", 1, HD, 1, SRC("self_attn.q_norm.weight"), NULL, PLUS1);
    check_tensor(g, "blk.1.attn_k_norm.weight", 1, HD, 1, SRC("self_attn.k_norm.weight"), NULL, PLUS1);
    check_tensor(g, "blk.1.attn_output.weight", 2, H * HD, D, SRC("self_attn.o_proj.weight"), NULL, RAW);
    check_tensor(g, "blk.1.post_attention_norm.weight", 1, D, 1, SRC("post_attention_layernorm.weight"), NULL, PLUS1);
#undef SRC
    check_tensor(g, "output_norm.weight", 1, D, 1, "model.norm.weight", NULL, PLUS1);
    check_tensor(g, "output.weight", 2, D, V, "lm_head.weight", NULL, RAW);
    /* the MTP head, as llama.cpp's converter keeps it: block L, eh_proj = fc ([embedding ; hidden] columns as
     * stored), its three norms + 1, then mtp.layers.0 as an ordinary attention block */
    check_tensor(g, "blk.2.nextn.eh_proj.weight", 2, 2 * D, D, "mtp.fc.weight", NULL, RAW);
    check_tensor(g, "blk.2.nextn.enorm.weight", 1, D, 1, "mtp.pre_fc_norm_embedding.weight", NULL, PLUS1);
    check_tensor(g, "blk.2.nextn.hnorm.weight", 1, D, 1, "mtp.pre_fc_norm_hidden.weight", NULL, PLUS1);
    check_tensor(g, "blk.2.nextn.shared_head_norm.weight", 1, D, 1, "mtp.norm.weight", NULL, PLUS1);
    p = "mtp.layers.0.";
#define SRC(x) (snprintf(src, sizeof src, "%s%s", p, x), src)
    check_tensor(g, "blk.2.attn_norm.weight", 1, D, 1, SRC("input_layernorm.weight"), NULL, PLUS1);
    check_tensor(g, "blk.2.attn_q.weight", 2, D, 2 * H * HD, SRC("self_attn.q_proj.weight"), NULL, RAW);
    check_tensor(g, "blk.2.attn_k_norm.weight", 1, HD, 1, SRC("self_attn.k_norm.weight"), NULL, PLUS1);
    check_tensor(g, "blk.2.post_attention_norm.weight", 1, D, 1, SRC("post_attention_layernorm.weight"), NULL, PLUS1);
    check_tensor(g, "blk.2.ffn_gate_inp_shexp.weight", 2, D, 1, SRC("mlp.shared_expert_gate.weight"), NULL, RAW);
#undef SRC
    const gguf_tensor *mx = gguf_find_tensor(g, "blk.2.ffn_up_exps.weight");
    const int m3 = find("mtp.layers.0.mlp.experts.3.up_proj.weight");
    CHECK(mx && mx->n_dims == 3 && mx->ne[0] == D && mx->ne[1] == FFE && mx->ne[2] == E && m3 >= 0);
    if (mx && m3 >= 0) CHECK(!memcmp((const float *)mx->data + 3 * D * FFE, T[m3].data, sizeof(float) * D * FFE));
    /* 3 global, 10 per layer, 8 for DeltaNet, 6 for attention, 4 of the MTP head; no fused qkvz, no qwen35 names */
    CHECK(gguf_tensor_count(g) == 3 + (L + 1) * 10 + 8 + 2 * 6 + 4);
    CHECK(!gguf_find_tensor(g, "blk.0.ssm_in.weight") && !gguf_find_tensor(g, "blk.0.ssm_beta.weight") &&
          !gguf_find_tensor(g, "blk.0.attn_post_norm.weight") && !gguf_find_tensor(g, "blk.2.nextn.embed_tokens.weight"));
}

static void test_qwen3next(void) {
    char dir[] = "/tmp/brisk-convert-XXXXXX", cwd[256], a[512], b[512], out[600];
    CHECK(mkdtemp(dir) && getcwd(cwd, sizeof cwd));
    static const char *tok[] = {"tokenizer.json", "tokenizer_config.json"};
    for (int i = 0; i < 2; i++) {
        snprintf(a, sizeof a, "%s/tests/data/hf/tokenizer/%s", cwd, tok[i]);
        snprintf(b, sizeof b, "%s/%s", dir, tok[i]);
        CHECK(symlink(a, b) == 0);
    }
    char *cfg = config("");
    CHECK(write_checkpoint(dir) && write_text(dir, "config.json", cfg));
    free(cfg);
    snprintf(out, sizeof out, "%s/out.gguf", dir);
    convert_opts o = {.type = "f32", .n_threads = 2, .pre = "qwen2"};
    CHECK_OK(convert_hf(dir, out, &o, NULL));
    gguf_file *g = NULL;
    CHECK_OK(gguf_open(out, &g));
    if (g) {
        check_metadata(g);
        check_tensors(g);
    }
    gguf_close(g);
    /* brisk loads the head and runs it (engine/mtp.h) */
    brisk_model *m = NULL;
    CHECK_OK(brisk_model_load(out, NULL, &m));
    brisk_context *mc = NULL;
    if (m) {
        CHECK(m->hp.n_layer == L && m->n_mtp == 1);
        brisk_context_params cp = brisk_context_default_params();
        cp.n_ctx = 64;
        cp.n_threads = 2;
        CHECK_OK(mtp_context_new(m, &cp, &mc));
        float h[D] = {0};
        brisk_batch_entry e = {5, 0, 0, true};
        if (mc) CHECK_OK(mtp_decode(mc, &e, h, 1));
        CHECK(mc && brisk_get_logits(mc, 0) && mtp_hidden(mc, 0));
    }
    brisk_context_free(mc);
    brisk_model_free(m);
    unlink(out);

    /* --no-mtp: the head left out, as llama.cpp's converter's --no-mtp */
    o.no_mtp = true;
    CHECK_OK(convert_hf(dir, out, &o, NULL));
    g = NULL;
    CHECK_OK(gguf_open(out, &g));
    if (g) {
        check_u32(g, "qwen3next.block_count", L);
        CHECK(gguf_find_key(g, "qwen3next.nextn_predict_layers") < 0);
        CHECK(gguf_tensor_count(g) == 3 + L * 10 + 8 + 6 && !gguf_find_tensor(g, "blk.2.nextn.eh_proj.weight"));
    }
    gguf_close(g);
    unlink(out);
    o.no_mtp = false;

    /* in_proj_qkvz rows the config does not explain: an error, no file */
    cfg = config("\"linear_key_head_dim\":2,");
    CHECK(write_text(dir, "config.json", cfg));
    free(cfg);
    CHECK(convert_hf(dir, out, &o, NULL) == BRISK_ERR_FORMAT);
    CHECK(access(out, F_OK) != 0);

    static const char *files[] = {"tokenizer.json", "tokenizer_config.json", "config.json", "model.safetensors"};
    for (int i = 0; i < 4; i++) {
        snprintf(b, sizeof b, "%s/%s", dir, files[i]);
        unlink(b);
    }
    rmdir(dir);
    for (int i = 0; i < n_src; i++) free(T[i].data);
    n_src = 0;
}

/* What config.json reading makes of Qwen3-Next, and what it refuses. */
static void test_qwen3next_config(void) {
    static const struct { const char *extra; brisk_status want; int64_t interval; } cases[] = {
        {"", BRISK_OK, 2},
        {"\"layer_types\":[\"mamba\",\"attention\"],", BRISK_OK, 2},  /* transformers' legacy names */
        {"\"full_attention_interval\":2,", BRISK_OK, 2},
        {"\"full_attention_interval\":4,", BRISK_ERR_UNSUPPORTED, 0}, /* layer_types say otherwise */
        {"\"layer_types\":[\"full_attention\",\"linear_attention\"],", BRISK_ERR_UNSUPPORTED, 0},
        {"\"layer_types\":[\"linear_attention\",\"sliding_attention\"],", BRISK_ERR_UNSUPPORTED, 0},
        {"\"layer_types\":[\"full_attention\"],", BRISK_ERR_FORMAT, 0},
        {"\"decoder_sparse_step\":2,", BRISK_ERR_UNSUPPORTED, 0},
        {"\"mlp_only_layers\":[1],", BRISK_ERR_UNSUPPORTED, 0},
        {"\"norm_topk_prob\":false,", BRISK_ERR_UNSUPPORTED, 0},
        {"\"linear_num_value_heads\":3,", BRISK_ERR_FORMAT, 0},
        {"\"shared_expert_intermediate_size\":0,", BRISK_ERR_FORMAT, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *js = config(cases[i].extra);
        hf_config c;
        brisk_status s = hf_config_parse(js, strlen(js), &c);
        free(js);
        if (s != cases[i].want) fprintf(stderr, "  '%s': status %d: %s\n", cases[i].extra, (int)s, brisk_last_error());
        CHECK(s == cases[i].want);
        if (s != BRISK_OK) continue;
        CHECK(c.arch == HF_QWEN3_NEXT && !strcmp(c.gguf_arch, "qwen3next") && !c.tied && !c.has_mrope);
        CHECK(c.full_attn_interval == cases[i].interval && c.partial_rotary == 0.25 && c.ssm_conv == 4);
        CHECK(c.n_ff_shexp == FFS && c.ssm_n_k == NK && c.ssm_n_v == NV);
    }
}

/* ---- FP8 ---- */

/* The FP8 shape: 160 columns (a 32-column edge block), 200 FFN rows (a 72-row edge block). */
enum { F_V = 4096, F_D = 160, F_H = 2, F_HD = 80, F_FF = 200, F_BLK = 128 };

static const char *FP8_CONFIG =
    "{\"architectures\":[\"Qwen3ForCausalLM\"],\"model_type\":\"qwen3\",\"vocab_size\":4096,\"hidden_size\":160,"
    "\"num_hidden_layers\":1,\"num_attention_heads\":2,\"num_key_value_heads\":1,\"head_dim\":80,"
    "\"intermediate_size\":200,\"max_position_embeddings\":512,\"rms_norm_eps\":1e-6,\"rope_theta\":10000.0,"
    "\"tie_word_embeddings\":true,\"eos_token_id\":0%s}";

typedef struct {
    char name[80];
    const char *dtype;  /* safetensors dtype */
    int64_t shape[2];
    int n_dims;
    unsigned char *bytes;
    size_t nbytes;
    float *want;        /* (shape) the dequantized values (FP8 weights), or the values */
} st_entry;

static st_entry F[32];
static int n_f;

/* E4M3 restated: exponent field e, mantissa m; e = 0 is m * 2^-9, else (8 + m) * 2^(e - 10). */
static float e4m3(unsigned b) {
    const unsigned e = b >> 3 & 15, m = b & 7;
    if ((b & 0x7F) == 0x7F) return NAN;
    float v = e ? ldexpf((float)(8 + m), (int)e - 10) : ldexpf((float)m, -9);
    return b & 0x80 ? -v : v;
}

static st_entry *f_add(const char *name, const char *dtype, int n_dims, int64_t d0, int64_t d1, size_t esize) {
    st_entry *t = &F[n_f++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dtype, t->n_dims = n_dims, t->shape[0] = d0, t->shape[1] = n_dims > 1 ? d1 : 1;
    t->nbytes = (size_t)(t->shape[0] * t->shape[1]) * esize;
    t->bytes = calloc(t->nbytes, 1);
    t->want = calloc((size_t)(t->shape[0] * t->shape[1]), sizeof(float));
    return t;
}

/* A plain f32 (or bf16) tensor of small distinct values. */
static void f_plain(const char *name, int n_dims, int64_t d0, int64_t d1, bool bf16) {
    st_entry *t = f_add(name, bf16 ? "BF16" : "F32", n_dims, d0, d1, bf16 ? 2 : 4);
    for (int64_t k = 0; k < t->shape[0] * t->shape[1]; k++) {
        float v = (float)((k * 7 + n_f) % 509 - 254) / 256.0f; /* exact in bf16 */
        t->want[k] = v;
        if (bf16) {
            uint16_t h = quant_f32_to_bf16(v);
            memcpy(t->bytes + 2 * k, &h, 2);
        } else {
            memcpy(t->bytes + 4 * k, &v, 4);
        }
    }
}

/* An FP8 weight [d0, d1]: element k is code (37k + 11 id) mod 256 (every code,
 * NaNs and the subnormals included), block (i, j) scaled by 0.75 + 0.3 (3i + j)
 * + id / 64, stored as f32 or bf16 in "<name>_scale_inv". */
static void f_fp8(const char *name, int64_t d0, int64_t d1, bool bf16_scale) {
    const int id = n_f;
    st_entry *t = f_add(name, "F8_E4M3", 2, d0, d1, 1);
    char sn[96];
    snprintf(sn, sizeof sn, "%s_scale_inv", name);
    const int64_t br = (d0 + F_BLK - 1) / F_BLK, bc = (d1 + F_BLK - 1) / F_BLK;
    st_entry *s = f_add(sn, bf16_scale ? "BF16" : "F32", 2, br, bc, bf16_scale ? 2 : 4);
    for (int64_t k = 0; k < br * bc; k++) {
        float v = 0.75f + 0.3f * (float)(3 * (k / bc) + k % bc) + (float)id / 64.0f;
        if (bf16_scale) {
            uint16_t h = quant_f32_to_bf16(v);
            memcpy(s->bytes + 2 * k, &h, 2);
            v = quant_bf16_to_f32(h);
        } else {
            memcpy(s->bytes + 4 * k, &v, 4);
        }
        s->want[k] = v;
    }
    for (int64_t r = 0; r < d0; r++)
        for (int64_t c = 0; c < d1; c++) {
            const int64_t k = r * d1 + c;
            t->bytes[k] = (unsigned char)((37 * k + 11 * id) % 256);
            t->want[k] = e4m3(t->bytes[k]) * s->want[(r / F_BLK) * bc + c / F_BLK];
        }
}

static void fp8_checkpoint(void) {
    f_plain("model.embed_tokens.weight", 2, F_V, F_D, true);
    f_plain("model.norm.weight", 1, F_D, 0, false);
    f_plain("model.layers.0.input_layernorm.weight", 1, F_D, 0, false);
    f_plain("model.layers.0.post_attention_layernorm.weight", 1, F_D, 0, false);
    f_plain("model.layers.0.self_attn.q_norm.weight", 1, F_HD, 0, false);
    f_plain("model.layers.0.self_attn.k_norm.weight", 1, F_HD, 0, false);
    f_fp8("model.layers.0.self_attn.q_proj.weight", F_H * F_HD, F_D, false);
    f_fp8("model.layers.0.self_attn.k_proj.weight", F_HD, F_D, false);
    f_fp8("model.layers.0.self_attn.v_proj.weight", F_HD, F_D, true);
    f_fp8("model.layers.0.self_attn.o_proj.weight", F_D, F_H * F_HD, false);
    f_fp8("model.layers.0.mlp.gate_proj.weight", F_FF, F_D, true);
    f_fp8("model.layers.0.mlp.up_proj.weight", F_FF, F_D, false);
    f_fp8("model.layers.0.mlp.down_proj.weight", F_D, F_FF, true);
}

/* Writes F as dir/model.safetensors, skipping the tensor named `skip` and
 * giving tensor `reshape` a first dimension one too large (a bad scale). */
static bool fp8_write(const char *dir, const char *skip, const char *reshape) {
    size_t cap = 16 << 10, len = 0;
    char *hdr = malloc(cap);
    uint64_t off = 0;
    len += (size_t)snprintf(hdr + len, cap - len, "{");
    for (int i = 0; i < n_f; i++) {
        const st_entry *t = &F[i];
        if (skip && !strcmp(t->name, skip)) continue;
        int64_t d0 = t->shape[0] + (reshape && !strcmp(t->name, reshape));
        uint64_t nb = t->nbytes / (size_t)t->shape[0] * (size_t)d0;
        len += (size_t)snprintf(hdr + len, cap - len, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld", len > 1 ? "," : "",
                                t->name, t->dtype, (long long)d0);
        if (t->n_dims > 1) len += (size_t)snprintf(hdr + len, cap - len, ",%lld", (long long)t->shape[1]);
        len += (size_t)snprintf(hdr + len, cap - len, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                                (unsigned long long)(off + nb));
        off += nb;
    }
    len += (size_t)snprintf(hdr + len, cap - len, "}");
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    uint64_t hl = len;
    bool ok = f && len < cap && fwrite(&hl, 8, 1, f) == 1 && fwrite(hdr, 1, len, f) == len;
    for (int i = 0; ok && i < n_f; i++) {
        const st_entry *t = &F[i];
        if (skip && !strcmp(t->name, skip)) continue;
        ok = fwrite(t->bytes, 1, t->nbytes, f) == t->nbytes;
        if (ok && reshape && !strcmp(t->name, reshape)) /* the extra row */
            ok = fwrite(t->bytes, 1, t->nbytes / (size_t)t->shape[0], f) == t->nbytes / (size_t)t->shape[0];
    }
    if (f) ok = fclose(f) == 0 && ok;
    free(hdr);
    return ok;
}

static const char *gguf_name(const char *hf) {
    static const char *map[][2] = {
        {"model.embed_tokens.weight", "token_embd.weight"},
        {"model.layers.0.self_attn.q_proj.weight", "blk.0.attn_q.weight"},
        {"model.layers.0.self_attn.k_proj.weight", "blk.0.attn_k.weight"},
        {"model.layers.0.self_attn.v_proj.weight", "blk.0.attn_v.weight"},
        {"model.layers.0.self_attn.o_proj.weight", "blk.0.attn_output.weight"},
        {"model.layers.0.mlp.gate_proj.weight", "blk.0.ffn_gate.weight"},
        {"model.layers.0.mlp.up_proj.weight", "blk.0.ffn_up.weight"},
        {"model.layers.0.mlp.down_proj.weight", "blk.0.ffn_down.weight"},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(map[i][0], hf)) return map[i][1];
    return NULL;
}

/* Every matrix of the conversion (f32 or bf16) equals the dequantized values
 * (rounded to bf16 for bf16), NaN where the code is NaN. */
static void fp8_check(const gguf_file *g, uint32_t type) {
    int n_checked = 0;
    for (int i = 0; i < n_f; i++) {
        const char *name = gguf_name(F[i].name);
        if (!name) continue;
        const gguf_tensor *t = gguf_find_tensor(g, name);
        CHECK(t && t->type == type && t->ne[0] == F[i].shape[1] && t->ne[1] == F[i].shape[0]);
        if (!t || t->type != type || t->ne[0] != F[i].shape[1] || t->ne[1] != F[i].shape[0]) continue;
        int64_t bad = 0, n_nan = 0;
        for (int64_t k = 0; k < F[i].shape[0] * F[i].shape[1]; k++) {
            float want = F[i].want[k], got;
            if (type == QT_BF16) {
                uint16_t h;
                memcpy(&h, (const unsigned char *)t->data + 2 * k, 2);
                got = quant_bf16_to_f32(h);
                want = quant_bf16_to_f32(quant_f32_to_bf16(want));
            } else {
                memcpy(&got, (const unsigned char *)t->data + 4 * k, 4);
            }
            n_nan += isnan(want);
            bad += isnan(want) ? !isnan(got) : got != want;
        }
        if (bad) fprintf(stderr, "  %s: %lld of %lld values differ\n", name, (long long)bad,
                         (long long)(F[i].shape[0] * F[i].shape[1]));
        CHECK(bad == 0 && (!strcmp(F[i].dtype, "BF16") || n_nan > 0));
        n_checked++;
    }
    CHECK(n_checked == 8);
}

static void test_fp8(void) {
    char dir[] = "/tmp/brisk-convert-XXXXXX", cwd[256], a[512], b[512], out[600], cfg[2048];
    CHECK(mkdtemp(dir) && getcwd(cwd, sizeof cwd));
    static const char *tok[] = {"tokenizer.json", "tokenizer_config.json"};
    for (int i = 0; i < 2; i++) {
        snprintf(a, sizeof a, "%s/tests/data/hf/tokenizer/%s", cwd, tok[i]);
        snprintf(b, sizeof b, "%s/%s", dir, tok[i]);
        CHECK(symlink(a, b) == 0);
    }
    /* every code occurs, the subnormals and +-448 dequantize as restated */
    CHECK(e4m3(0x01) == 0x1p-9f && e4m3(0x07) == 7 * 0x1p-9f && e4m3(0x08) == 0x1p-6f && e4m3(0x7E) == 448.0f &&
          e4m3(0xFE) == -448.0f && isnan(e4m3(0xFF)));
    fp8_checkpoint();
    static const char *quant = ",\"quantization_config\":{\"activation_scheme\":\"dynamic\",\"fmt\":\"e4m3\","
                               "\"quant_method\":\"fp8\",\"weight_block_size\":[128,128]}";
    snprintf(cfg, sizeof cfg, FP8_CONFIG, quant);
    CHECK(fp8_write(dir, NULL, NULL) && write_text(dir, "config.json", cfg));
    snprintf(out, sizeof out, "%s/out.gguf", dir);
    static const struct { const char *type; uint32_t qt; } outs[] = {{"f32", QT_F32}, {"bf16", QT_BF16}};
    for (int k = 0; k < 2; k++) {
        convert_opts o = {.type = outs[k].type, .n_threads = 2, .pre = "qwen2"};
        CHECK_OK(convert_hf(dir, out, &o, NULL));
        gguf_file *g = NULL;
        CHECK_OK(gguf_open(out, &g));
        if (g) fp8_check(g, outs[k].qt);
        gguf_close(g);
        unlink(out);
    }
    /* q8_0 (a block type) takes the dequantized rows too */
    convert_opts o = {.type = "q8_0", .n_threads = 1, .pre = "qwen2"};
    CHECK_OK(convert_hf(dir, out, &o, NULL));
    unlink(out);

    /* refused: a missing scale, a scale of the wrong shape, FP8 without the
     * config's block size, another quantization method; never a file */
    static const struct { const char *skip, *reshape, *quant; brisk_status want; } bad[] = {
        {"model.layers.0.mlp.up_proj.weight_scale_inv", NULL, NULL, BRISK_ERR_NOT_FOUND},
        {NULL, "model.layers.0.mlp.down_proj.weight_scale_inv", NULL, BRISK_ERR_FORMAT},
        {NULL, NULL, "", BRISK_ERR_FORMAT},
        {NULL, NULL, ",\"quantization_config\":{\"quant_method\":\"gptq\",\"bits\":4}", BRISK_ERR_UNSUPPORTED},
        {NULL, NULL, ",\"quantization_config\":{\"quant_method\":\"fp8\",\"fmt\":\"e5m2\",\"weight_block_size\":[128,128]}",
         BRISK_ERR_UNSUPPORTED},
        {NULL, NULL, ",\"quantization_config\":{\"quant_method\":\"fp8\",\"fmt\":\"e4m3\",\"weight_block_size\":[64,64]}",
         BRISK_ERR_FORMAT},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cfg, sizeof cfg, FP8_CONFIG, bad[i].quant ? bad[i].quant : quant);
        CHECK(fp8_write(dir, bad[i].skip, bad[i].reshape) && write_text(dir, "config.json", cfg));
        brisk_status s = convert_hf(dir, out, &o, NULL);
        if (s != bad[i].want) fprintf(stderr, "  case %zu: status %d: %s\n", i, (int)s, brisk_last_error());
        CHECK(s == bad[i].want && strlen(brisk_last_error()) > 0);
        CHECK(access(out, F_OK) != 0);
    }
    static const char *files[] = {"tokenizer.json", "tokenizer_config.json", "config.json", "model.safetensors"};
    for (int i = 0; i < 4; i++) {
        snprintf(b, sizeof b, "%s/%s", dir, files[i]);
        unlink(b);
    }
    rmdir(dir);
    for (int i = 0; i < n_f; i++) free(F[i].bytes), free(F[i].want);
    n_f = 0;
}

int main(int argc, char **argv) {
    static const test_case cases[] = {
        {"qwen3next", test_qwen3next},
        {"qwen3next_config", test_qwen3next_config},
        {"fp8", test_fp8},
    };
    return test_main(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}
