/* convert.c — Hugging Face checkpoint -> GGUF (see convert.h): the shards,
 * the name mapping and per-tensor transforms, the metadata, the per-tensor
 * types, and the threaded streaming of rows. The tokenizer keys are written
 * by convert_vocab.c. */
#include "model/convert.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "base/status.h"
#include "format/gguf_rows.h"
#include "format/safetensors.h"
#include "model/model.h"
#include "quant/quant.h"
#include "quant/quant_mix.h"

#define MAX_THREADS 256
#define MAX_SHARDS 4096

/* ---- the shards ---- */

typedef struct {
    st_file **f;
    int n;
} shard_set;

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Shard file names: the index's weight_map values, else model.safetensors, else every *.safetensors. */
static brisk_status shard_names(const char *dir, char ***names, int *n) {
    char path[4096];
    *names = calloc(MAX_SHARDS, sizeof **names);
    *n = 0;
    if (!*names) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(path, "rb");
    if (f) {
        fseek(f, 0, SEEK_END);
        long sz = ftell(f);
        fseek(f, 0, SEEK_SET);
        char *buf = sz > 0 && sz < (256l << 20) ? malloc((size_t)sz) : NULL;
        size_t got = buf ? fread(buf, 1, (size_t)sz, f) : 0;
        fclose(f);
        cJSON *j = buf ? cJSON_ParseWithLength(buf, got) : NULL;
        free(buf);
        const cJSON *wm = cJSON_GetObjectItemCaseSensitive(j, "weight_map"), *it;
        if (!cJSON_IsObject(wm)) {
            cJSON_Delete(j);
            return bk_fail(BRISK_ERR_FORMAT, "%s: no weight_map", path);
        }
        cJSON_ArrayForEach(it, wm) {
            if (!cJSON_IsString(it) || strchr(it->valuestring, '/') || !strcmp(it->valuestring, "..")) {
                cJSON_Delete(j);
                return bk_fail(BRISK_ERR_FORMAT, "%s: bad shard name for '%s'", path, it->string);
            }
            bool seen = false;
            for (int i = 0; i < *n && !seen; i++) seen = !strcmp((*names)[i], it->valuestring);
            if (seen) continue;
            if (*n == MAX_SHARDS || !((*names)[(*n)++] = strdup(it->valuestring))) {
                cJSON_Delete(j);
                return bk_fail(BRISK_ERR_FORMAT, "%s: too many shards", path);
            }
        }
        cJSON_Delete(j);
    } else {
        DIR *d = opendir(dir);
        if (!d) return bk_fail(BRISK_ERR_IO, "cannot open the directory %s", dir);
        struct dirent *e;
        while ((e = readdir(d)) && *n < MAX_SHARDS) {
            size_t l = strlen(e->d_name);
            if (l > 12 && !strcmp(e->d_name + l - 12, ".safetensors") && !((*names)[(*n)++] = strdup(e->d_name))) break;
        }
        closedir(d);
    }
    if (*n == 0) return bk_fail(BRISK_ERR_NOT_FOUND, "%s: no .safetensors files", dir);
    qsort(*names, (size_t)*n, sizeof **names, cmp_str);
    return BRISK_OK;
}

/* The files of the checkpoint that convert reads besides its shards. */
static const char *const side_inputs[] = {"config.json", "model.safetensors.index.json", "tokenizer.json",
                                          "tokenizer_config.json", "chat_template.jinja", "chat_template.json"};

/* Refuses an output that is one of the checkpoint's files: the rename into
 * place would throw that file away. */
static brisk_status check_out(const char *dir, const char *name, const char *out_path) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    const char *in = path;
    return atomic_file_check_distinct("convert", out_path, &in, 1);
}

static brisk_status open_shards(const char *dir, const char *out_path, shard_set *ss) {
    char **names = NULL, path[4096];
    int n = 0;
    brisk_status s = shard_names(dir, &names, &n);
    for (size_t i = 0; s == BRISK_OK && i < sizeof side_inputs / sizeof *side_inputs; i++)
        s = check_out(dir, side_inputs[i], out_path);
    if (s == BRISK_OK && !(ss->f = calloc((size_t)n, sizeof *ss->f))) s = bk_fail(BRISK_ERR_NOMEM, "out of memory");
    for (int i = 0; s == BRISK_OK && i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        s = check_out(dir, names[i], out_path);
        if (s == BRISK_OK) s = st_open(path, &ss->f[i]);
        if (s == BRISK_OK) ss->n++;
    }
    for (int i = 0; names && i < n; i++) free(names[i]);
    free(names);
    return s;
}

static void close_shards(shard_set *ss) {
    for (int i = 0; i < ss->n; i++) st_close(ss->f[i]);
    free(ss->f);
}

typedef struct {
    const st_file *file;
    const st_tensor *t;
    const st_tensor *scale; /* FP8 (F8_E4M3) weights: their block scales ("<name>_scale_inv"); else NULL */
    int64_t block[2];       /* FP8: rows, columns of one scale's block */
} src_ref;

static src_ref find_src(const shard_set *ss, const char *name) {
    for (int i = 0; i < ss->n; i++) {
        const st_tensor *t = st_find(ss->f[i], name);
        if (t) return (src_ref){.file = ss->f[i], .t = t};
    }
    return (src_ref){.file = NULL};
}

/* ---- the plan: one entry per output tensor ---- */

typedef enum { PERM_NONE, PERM_LLAMA, PERM_VHEAD, PERM_UNGROUP } perm_kind;

/* An index map over rows (or, for 1-D tensors and out_proj, columns): out
 * index i reads source index perm_apply(i). UNGROUP is a selection rather
 * than a permutation: the source holds n_k groups of parts laid side by side
 * (Qwen3-Next's in_proj_qkvz: per key head [q | k | v | z]); the output takes
 * parts first .. first+n_parts-1, each part for all groups before the next. */
typedef struct {
    perm_kind kind;
    int64_t n_head, hd; /* LLAMA: heads, head dim */
    int64_t n_k, r;     /* VHEAD: key heads, value heads per key head, hd = value head dim; UNGROUP: groups */
    int64_t skip;       /* VHEAD: indices below this are unchanged (qkv: the q and k rows) */
    int64_t part[4];    /* UNGROUP: the size of each part within a group */
    int first, n_parts; /* UNGROUP: the parts taken, in order */
} perm;

/* UNGROUP: the size of parts from .. to-1 of one group. */
static int64_t part_sum(const perm *p, int from, int to) {
    int64_t n = 0;
    for (int k = from; k < to; k++) n += p->part[k];
    return n;
}

static int64_t perm_apply(const perm *p, int64_t i) {
    if (p->kind == PERM_LLAMA) { /* (h, hd/2, 2) <- (h, 2, hd/2) */
        int64_t h = i / p->hd, w = i % p->hd;
        return h * p->hd + (w % 2) * (p->hd / 2) + w / 2;
    }
    if (p->kind == PERM_VHEAD && i >= p->skip) { /* tiled head o = j*n_k + k <- grouped head k*r + j */
        int64_t v = i - p->skip, o = v / p->hd, d = v % p->hd;
        return p->skip + ((o % p->n_k) * p->r + o / p->n_k) * p->hd + d;
    }
    if (p->kind == PERM_UNGROUP) { /* part k of group g <- source group g, offset of part k */
        for (int k = p->first; k < p->first + p->n_parts; k++) {
            const int64_t n = p->part[k];
            if (i < p->n_k * n) return (i / n) * part_sum(p, 0, 4) + part_sum(p, 0, k) + i % n;
            i -= p->n_k * n;
        }
        return -1; /* past the selection: the output's shape rules it out */
    }
    return i;
}

typedef enum { OP_NONE, OP_PLUS1, OP_NEG_EXP } elem_op;

typedef struct {
    char name[64];
    int n_dims;
    int64_t ne[3];              /* output shape, ne[0] contiguous */
    uint32_t type;
    bool force_f32;             /* norms, biases, routers, the conv */
    src_ref *src;               /* (n_src) one, or one per expert */
    int n_src;
    int64_t src_rows_per_exp;   /* rows of one expert in a fused source (gate_up: 2*n_ff) */
    int64_t row_off;            /* first source row (up half of gate_up) */
    perm row_perm, col_perm;
    elem_op op;
    float *gen;                 /* generated data (rope_freqs) instead of sources */
} out_tensor;

typedef struct {
    out_tensor *t;
    int n, cap;
} plan;

static out_tensor *plan_add(plan *p, const char *name) {
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 256;
        out_tensor *t = realloc(p->t, (size_t)cap * sizeof *t);
        if (!t) return NULL;
        p->t = t;
        p->cap = cap;
    }
    out_tensor *o = &p->t[p->n++];
    memset(o, 0, sizeof *o);
    snprintf(o->name, sizeof o->name, "%s", name);
    return o;
}

static void plan_free(plan *p) {
    for (int i = 0; i < p->n; i++) {
        free(p->t[i].src);
        free(p->t[i].gen);
    }
    free(p->t);
}

static bool is_qwen35(const hf_config *c) { return c->arch == HF_QWEN35 || c->arch == HF_QWEN35_MOE; }
static bool is_hybrid(const hf_config *c) { return is_qwen35(c) || c->arch == HF_QWEN3_NEXT; }

/* HF suffix -> GGUF suffix within a block (experts and DeltaNet handled apart). */
static const char *block_name(const hf_config *c, const char *rest) {
    static const char *map[][2] = {
        {"input_layernorm.weight", "attn_norm.weight"},
        {"self_attn.q_proj.weight", "attn_q.weight"}, {"self_attn.q_proj.bias", "attn_q.bias"},
        {"self_attn.k_proj.weight", "attn_k.weight"}, {"self_attn.k_proj.bias", "attn_k.bias"},
        {"self_attn.v_proj.weight", "attn_v.weight"}, {"self_attn.v_proj.bias", "attn_v.bias"},
        {"self_attn.o_proj.weight", "attn_output.weight"}, {"self_attn.o_proj.bias", "attn_output.bias"},
        {"self_attn.q_norm.weight", "attn_q_norm.weight"}, {"self_attn.k_norm.weight", "attn_k_norm.weight"},
        {"mlp.gate_proj.weight", "ffn_gate.weight"}, {"mlp.up_proj.weight", "ffn_up.weight"},
        {"mlp.down_proj.weight", "ffn_down.weight"}, {"mlp.gate.weight", "ffn_gate_inp.weight"},
        {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
        {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
        {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
        {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
        {"linear_attn.in_proj_qkv.weight", "attn_qkv.weight"}, {"linear_attn.in_proj_z.weight", "attn_gate.weight"},
        {"linear_attn.in_proj_b.weight", "ssm_beta.weight"}, {"linear_attn.in_proj_a.weight", "ssm_alpha.weight"},
        {"linear_attn.in_proj_ba.weight", "ssm_ba.weight"}, /* qwen3next: per key head [b x r | a x r], as is */
        {"linear_attn.conv1d.weight", "ssm_conv1d.weight"}, {"linear_attn.A_log", "ssm_a"},
        {"linear_attn.dt_bias", "ssm_dt.bias"}, {"linear_attn.norm.weight", "ssm_norm.weight"},
        {"linear_attn.out_proj.weight", "ssm_out.weight"},
    };
    if (!strcmp(rest, "post_attention_layernorm.weight"))
        return is_hybrid(c) ? "post_attention_norm.weight" : "ffn_norm.weight";
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(rest, map[i][0])) return map[i][1];
    return NULL;
}

/* The HF name as llama.cpp's converter sees it: "model.language_model.x" -> "model.x". */
static void canonical(const char *in, char *out, size_t cap) {
    const char *lm = strstr(in, "language_model.");
    if (lm) snprintf(out, cap, "%.*s%s", (int)(lm - in), in, lm + 15);
    else snprintf(out, cap, "%s", in);
}

/* The multi-token-prediction head's name with "model." dropped ("mtp.fc.weight", "mtp.layers.0. ..."), or NULL. */
static const char *mtp_name(const char *canon) {
    if (!strncmp(canon, "model.mtp.", 10)) return canon + 6;
    return !strncmp(canon, "mtp.", 4) ? canon : NULL;
}

/* keep_mtp: the hybrids' MTP head is converted (n_mtp > 0), else dropped with the vision tower. */
static bool dropped(const char *name, bool keep_mtp) {
    return strstr(name, "visual.") || strstr(name, "vision") || (mtp_name(name) && !keep_mtp) ||
           strstr(name, "rotary_emb.inv_freq");
}

/* The MTP head's own tensors, as llama.cpp's converter renames them into block n_layer: mtp.fc is
 * eh_proj (input columns [embedding ; hidden]); the three norms keep HF's (1 + w) as stored, so they
 * take the +1 as every hybrid norm (set_transforms sees these names). */
static const char *nextn_name(const char *rest) {
    static const char *map[][2] = {{"fc.weight", "eh_proj.weight"},
                                   {"pre_fc_norm_embedding.weight", "enorm.weight"},
                                   {"pre_fc_norm_hidden.weight", "hnorm.weight"},
                                   {"norm.weight", "shared_head_norm.weight"}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(rest, map[i][0])) return map[i][1];
    return NULL;
}

/* MTP blocks: config.json's mtp_num_hidden_layers, else (Qwen3-Next's configs lack it) as many as the
 * checkpoint's mtp.layers.N name, as llama.cpp's converter counts them. */
static int64_t count_mtp_layers(const hf_config *c, const shard_set *ss) {
    if (c->n_mtp > 0) return c->n_mtp;
    int64_t n = 0;
    char canon[256];
    for (int i = 0; i < ss->n; i++)
        for (int64_t j = 0; j < st_count(ss->f[i]); j++) {
            canonical(st_get(ss->f[i], j)->name, canon, sizeof canon);
            const char *m = mtp_name(canon);
            if (m && !strncmp(m, "mtp.layers.", 11) && atoll(m + 11) + 1 > n) n = atoll(m + 11) + 1;
        }
    return n;
}

/* Fills the transform fields of o for its HF name (rest: after "model.layers.N."). */
static void set_transforms(const hf_config *c, out_tensor *o, const char *rest, const st_tensor *t) {
    const int64_t hd = c->head_dim > 0 ? c->head_dim : c->n_embd / c->n_head;
    if (c->arch == HF_LLAMA && (!strncmp(rest, "self_attn.q_proj.", 17) || !strncmp(rest, "self_attn.k_proj.", 17))) {
        perm p = {.kind = PERM_LLAMA, .n_head = rest[10] == 'q' ? c->n_head : c->n_head_kv, .hd = hd};
        if (t->n_dims == 1) o->col_perm = p;
        else o->row_perm = p;
    }
    if (!is_hybrid(c)) return;
    size_t l = strlen(rest);
    if (l >= 11 && !strcmp(rest + l - 11, "norm.weight") && strcmp(rest, "linear_attn.norm.weight")) o->op = OP_PLUS1;
    if (!strcmp(rest, "linear_attn.A_log")) o->op = OP_NEG_EXP;
    /* llama.cpp's qwen35 graph wants value heads tiled; its qwen3next graph takes HF's grouped order */
    if (!is_qwen35(c) || c->ssm_n_k == c->ssm_n_v || strncmp(rest, "linear_attn.", 12)) return;
    const int64_t key_dim = c->ssm_n_k * c->ssm_k_dim;
    perm v = {.kind = PERM_VHEAD, .hd = c->ssm_v_dim, .n_k = c->ssm_n_k, .r = c->ssm_n_v / c->ssm_n_k};
    const char *r = rest + 12;
    if (!strcmp(r, "in_proj_qkv.weight")) v.skip = 2 * key_dim, o->row_perm = v;
    else if (!strcmp(r, "conv1d.weight")) v.skip = 2 * key_dim, o->row_perm = v;
    else if (!strcmp(r, "in_proj_z.weight")) o->row_perm = v;
    else if (!strcmp(r, "in_proj_b.weight") || !strcmp(r, "in_proj_a.weight")) v.hd = 1, o->row_perm = v;
    else if (!strcmp(r, "A_log") || !strcmp(r, "dt_bias")) v.hd = 1, o->col_perm = v;
    else if (!strcmp(r, "out_proj.weight")) o->col_perm = v;
}

static brisk_status add_simple(plan *p, const hf_config *c, const char *gname, const char *rest, src_ref s) {
    out_tensor *o = plan_add(p, gname);
    if (!o || !(o->src = malloc(sizeof *o->src))) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    o->src[0] = s;
    o->n_src = 1;
    const st_tensor *t = s.t;
    int nd = t->n_dims;
    int64_t shp[ST_MAX_DIMS];
    memcpy(shp, t->shape, sizeof shp);
    if (strstr(gname, "ssm_conv1d") && nd == 3 && shp[1] == 1) shp[1] = shp[2], nd = 2; /* squeeze [C,1,K] */
    if (nd > 3 || nd < 1) return bk_fail(BRISK_ERR_UNSUPPORTED, "convert: '%s' has %d dims", t->name, t->n_dims);
    o->n_dims = nd;
    for (int k = 0; k < 3; k++) o->ne[k] = k < nd ? shp[nd - 1 - k] : 1;
    o->src_rows_per_exp = o->ne[1];
    set_transforms(c, o, rest ? rest : "", t);
    return BRISK_OK;
}

/* Qwen3-Next's in_proj_qkvz: per key head [q (hk) | k (hk) | v (r*hv) | z (r*hv)]
 * rows. As llama.cpp's converter: attn_qkv takes every head's q, then k, then v
 * rows (value heads grouped by key head, as HF's conv channels), attn_gate the z rows. */
static brisk_status add_qkvz(plan *p, const hf_config *c, int il, src_ref s) {
    const int64_t hk = c->ssm_k_dim, vr = c->ssm_n_v / c->ssm_n_k * c->ssm_v_dim;
    char gname[64];
    for (int gate = 0; gate < 2; gate++) {
        snprintf(gname, sizeof gname, "blk.%d.%s", il, gate ? "attn_gate.weight" : "attn_qkv.weight");
        BK_TRY(add_simple(p, c, gname, NULL, s));
        out_tensor *o = &p->t[p->n - 1];
        o->row_perm = (perm){.kind = PERM_UNGROUP, .n_k = c->ssm_n_k, .part = {hk, hk, vr, vr},
                             .first = gate ? 3 : 0, .n_parts = gate ? 1 : 3};
        o->ne[1] = c->ssm_n_k * part_sum(&o->row_perm, o->row_perm.first, o->row_perm.first + o->row_perm.n_parts);
    }
    return BRISK_OK;
}

/* Experts of layer il: per-expert tensors "...experts.E.<w>_proj.weight" or fused
 * "...experts.gate_up_proj" / "...experts.down_proj" ([E, rows, cols]). */
static brisk_status add_experts(plan *p, const hf_config *c, const shard_set *ss, const char *prefix, int il) {
    static const char *w[3] = {"gate", "up", "down"};
    char nm[512], gname[64];
    for (int k = 0; k < 3; k++) {
        snprintf(gname, sizeof gname, "blk.%d.ffn_%s_exps.weight", il, w[k]);
        out_tensor *o = plan_add(p, gname);
        if (!o) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
        snprintf(nm, sizeof nm, "%s.mlp.experts.%s_proj", prefix, k == 2 ? "down" : "gate_up");
        src_ref fused = find_src(ss, nm);
        if (!fused.t) {
            snprintf(nm + strlen(nm), sizeof nm - strlen(nm), ".weight");
            fused = find_src(ss, nm);
        }
        if (fused.t) {
            if (fused.t->n_dims != 3 || fused.t->shape[0] != c->n_expert || (k < 2 && fused.t->shape[1] % 2))
                return bk_fail(BRISK_ERR_FORMAT, "convert: '%s' has an unexpected shape", nm);
            if (!(o->src = malloc(sizeof *o->src))) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
            o->src[0] = fused;
            o->n_src = 1;
            o->src_rows_per_exp = fused.t->shape[1];
            int64_t rows = k < 2 ? fused.t->shape[1] / 2 : fused.t->shape[1];
            o->row_off = k == 1 ? rows : 0;
            o->n_dims = 3;
            o->ne[0] = fused.t->shape[2], o->ne[1] = rows, o->ne[2] = c->n_expert;
            continue;
        }
        if (!(o->src = calloc((size_t)c->n_expert, sizeof *o->src))) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
        o->n_src = (int)c->n_expert;
        for (int64_t e = 0; e < c->n_expert; e++) {
            snprintf(nm, sizeof nm, "%s.mlp.experts.%lld.%s_proj.weight", prefix, (long long)e, w[k]);
            o->src[e] = find_src(ss, nm);
            const st_tensor *t = o->src[e].t, *t0 = o->src[0].t;
            if (!t) return bk_fail(BRISK_ERR_NOT_FOUND, "convert: expert tensor '%s' is missing", nm);
            if (t->n_dims != 2 || t->shape[0] != t0->shape[0] || t->shape[1] != t0->shape[1])
                return bk_fail(BRISK_ERR_FORMAT, "convert: '%s' differs in shape from expert 0", nm);
        }
        o->n_dims = 3;
        o->ne[0] = o->src[0].t->shape[1], o->ne[1] = o->src[0].t->shape[0], o->ne[2] = c->n_expert;
        o->src_rows_per_exp = o->ne[1];
    }
    return BRISK_OK;
}

/* Is this HF name an expert weight (collected by add_experts)? */
static bool is_expert(const char *rest) { return !strncmp(rest, "mlp.experts.", 12); }

/* An MTP tensor (m: its name from "mtp."; layer: n_layer + its block) of the hybrids: the head's own four,
 * or a block tensor of mtp.layers.J, mapped as a trunk layer's. raw: the source name (the experts are
 * looked up by its prefix). */
static brisk_status add_mtp(plan *p, const hf_config *c, const shard_set *ss, const char *m, const char *raw, int layer,
                            src_ref s, int *last_exp_layer) {
    char gname[96], rest[128];
    if (strncmp(m, "mtp.layers.", 11)) {
        const char *g = nextn_name(m + 4);
        if (!g) return bk_fail(BRISK_ERR_UNSUPPORTED, "convert: cannot map tensor '%s'", raw);
        snprintf(gname, sizeof gname, "blk.%d.nextn.%s", layer, g);
        snprintf(rest, sizeof rest, "%s", g); /* enorm / hnorm / shared_head_norm: the +1 of the hybrids' norms */
        return add_simple(p, c, gname, rest, s);
    }
    const char *r = strchr(m + 11, '.');
    if (!r) return bk_fail(BRISK_ERR_UNSUPPORTED, "convert: cannot map tensor '%s'", raw);
    r++;
    if (is_expert(r)) {
        if (layer == *last_exp_layer) return BRISK_OK;
        *last_exp_layer = layer;
        char prefix[256];
        snprintf(prefix, sizeof prefix, "%.*s", (int)(strlen(raw) - strlen(r) - 1), raw);
        return add_experts(p, c, ss, prefix, layer);
    }
    const char *g = block_name(c, r);
    if (!g) return bk_fail(BRISK_ERR_UNSUPPORTED, "convert: cannot map tensor '%s'", raw);
    snprintf(gname, sizeof gname, "blk.%d.%s", layer, g);
    return add_simple(p, c, gname, r, s);
}

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* Collects every source name, canonical, sorted, and maps it. */
static brisk_status build_plan(const hf_config *c, const shard_set *ss, plan *p) {
    int64_t total = 0;
    for (int i = 0; i < ss->n; i++) total += st_count(ss->f[i]);
    typedef struct { char canon[256]; int layer; src_ref s; } item;
    item *it = calloc((size_t)total + 1, sizeof *it);
    if (!it) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    int64_t n = 0;
    for (int i = 0; i < ss->n; i++)
        for (int64_t j = 0; j < st_count(ss->f[i]); j++) {
            const st_tensor *t = st_get(ss->f[i], j);
            canonical(t->name, it[n].canon, sizeof it[n].canon);
            if (dropped(it[n].canon, c->n_mtp > 0 && is_hybrid(c)) || ends_with(it[n].canon, "_scale_inv"))
                continue; /* FP8 scales: see attach_scales */
            it[n].s = (src_ref){.file = ss->f[i], .t = t};
            it[n].layer = -1;
            const char *m = mtp_name(it[n].canon);
            if (!strncmp(it[n].canon, "model.layers.", 13)) it[n].layer = atoi(it[n].canon + 13);
            else if (m) /* after the trunk: mtp.layers.J is block n_layer + J, the head's own tensors block n_layer */
                it[n].layer = (int)c->n_layer + (!strncmp(m, "mtp.layers.", 11) ? atoi(m + 11) : 0);
            n++;
        }
    /* order: the global tensors, then block by block (names sorted within) */
    for (int64_t a = 1; a < n; a++) { /* insertion sort by (layer, name): a few thousand entries */
        item x = it[a];
        int64_t b = a - 1;
        while (b >= 0 && (it[b].layer > x.layer || (it[b].layer == x.layer && strcmp(it[b].canon, x.canon) > 0))) {
            it[b + 1] = it[b];
            b--;
        }
        it[b + 1] = x;
    }
    brisk_status s = BRISK_OK;
    char gname[64], prefix[64];
    int last_exp_layer = -1;
    bool have_embd = false;
    for (int64_t i = 0; s == BRISK_OK && i < n; i++) {
        const char *cn = it[i].canon;
        if (!strcmp(cn, "model.embed_tokens.weight")) {
            s = add_simple(p, c, "token_embd.weight", NULL, it[i].s);
            have_embd = true;
        } else if (!strcmp(cn, "model.norm.weight")) {
            s = add_simple(p, c, "output_norm.weight", "norm.weight", it[i].s);
        } else if (!strcmp(cn, "lm_head.weight")) {
            s = add_simple(p, c, "output.weight", NULL, it[i].s);
        } else if (mtp_name(cn) && it[i].layer < c->n_layer + c->n_mtp) {
            s = add_mtp(p, c, ss, mtp_name(cn), it[i].s.t->name, it[i].layer, it[i].s, &last_exp_layer);
        } else if (it[i].layer >= 0 && it[i].layer < c->n_layer) {
            int il = it[i].layer;
            snprintf(prefix, sizeof prefix, "model.layers.%d", il);
            const char *rest = cn + strlen(prefix) + 1;
            if (is_expert(rest)) {
                if (il != last_exp_layer) s = add_experts(p, c, ss, prefix, il);
                last_exp_layer = il;
                continue;
            }
            if (c->arch == HF_QWEN3_NEXT && !strcmp(rest, "linear_attn.in_proj_qkvz.weight")) {
                s = add_qkvz(p, c, il, it[i].s);
                continue;
            }
            const char *g = block_name(c, rest);
            if (!g) {
                s = bk_fail(BRISK_ERR_UNSUPPORTED, "convert: cannot map tensor '%s'", it[i].s.t->name);
                break;
            }
            snprintf(gname, sizeof gname, "blk.%d.%s", il, g);
            s = add_simple(p, c, gname, rest, it[i].s);
        } else {
            s = bk_fail(BRISK_ERR_UNSUPPORTED, "convert: cannot map tensor '%s'", it[i].s.t->name);
        }
    }
    free(it);
    if (s == BRISK_OK && !have_embd) s = bk_fail(BRISK_ERR_NOT_FOUND, "convert: no model.embed_tokens.weight");
    return s;
}

/* FP8 checkpoints: every F8_E4M3 source gets its "<name>_scale_inv" (same shard
 * or another), checked against the config's block size. */
static brisk_status attach_scales(const hf_config *c, const shard_set *ss, plan *p) {
    char nm[512];
    for (int i = 0; i < p->n; i++)
        for (int k = 0; k < p->t[i].n_src; k++) {
            src_ref *s = &p->t[i].src[k];
            if (s->t->dtype != ST_F8_E4M3) continue;
            if (!c->fp8_block[0])
                return bk_fail(BRISK_ERR_FORMAT, "convert: '%s' is F8_E4M3 but config.json has no fp8 "
                                                 "quantization_config (weight_block_size)", s->t->name);
            snprintf(nm, sizeof nm, "%s_scale_inv", s->t->name);
            src_ref sc = find_src(ss, nm);
            if (!sc.t) return bk_fail(BRISK_ERR_NOT_FOUND, "convert: FP8 tensor '%s' has no scale '%s'", s->t->name, nm);
            BK_TRY(st_check_block_scale(s->t, sc.t, c->fp8_block[0], c->fp8_block[1]));
            s->scale = sc.t;
            s->block[0] = c->fp8_block[0], s->block[1] = c->fp8_block[1];
        }
    return BRISK_OK;
}

/* llama3 RoPE scaling: per-frequency factors as the rope_freqs tensor. */
static brisk_status add_rope_freqs(plan *p, const hf_config *c) {
    if (c->arch != HF_LLAMA || strcmp(c->rope_type, "llama3")) return BRISK_OK;
    const int64_t dim = c->head_dim > 0 ? c->head_dim : c->n_embd / c->n_head;
    const double base = isnan(c->rope_theta) ? 10000.0 : c->rope_theta;
    const double factor = isnan(c->rope_factor) ? 8.0 : c->rope_factor;
    const double lo = isnan(c->rope_low_freq) ? 1.0 : c->rope_low_freq;
    const double hi = isnan(c->rope_high_freq) ? 4.0 : c->rope_high_freq;
    const double old = c->rope_orig_ctx > 0 ? (double)c->rope_orig_ctx : 8192.0;
    out_tensor *o = plan_add(p, "rope_freqs.weight");
    if (!o || !(o->gen = malloc((size_t)(dim / 2) * sizeof(float)))) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    o->n_dims = 1;
    o->ne[0] = dim / 2, o->ne[1] = o->ne[2] = 1;
    for (int64_t i = 0; i < dim / 2; i++) o->gen[i] = model_rope_llama3_factor(i, dim, base, factor, lo, hi, old);
    return BRISK_OK;
}

/* ---- types ---- */


static void base_types(plan *p, uint32_t type) {
    for (int i = 0; i < p->n; i++) {
        out_tensor *o = &p->t[i];
        o->force_f32 = o->n_dims <= 1 || ends_with(o->name, "_norm.weight") || !ends_with(o->name, ".weight") ||
                       strstr(o->name, "ffn_gate_inp") || strstr(o->name, "ssm_conv1d");
        o->type = o->force_f32 ? QT_F32 : type;
        if (o->ne[0] % quant_get_traits(o->type)->block_elems) o->type = QT_F16; /* the converter's fallback */
    }
}

static brisk_status set_meta(gguf_writer *w, const hf_config *c, const char *name, uint32_t file_type);

/* A llama-quantize mix: quant_mix_plan_shapes plans the tensors from their
 * shapes; what the mix leaves alone stays f32 (norms, routers) or f16, as the
 * converter writes it otherwise. */
static brisk_status mix_types(plan *p, const hf_config *c, const quant_ftype *ft, const char *out_path) {
    gguf_writer *w = gguf_writer_new();
    uint32_t *types = malloc((size_t)p->n * sizeof *types);
    quant_mix_tensor *mt = malloc((size_t)p->n * sizeof *mt);
    brisk_status s = w && types && mt ? set_meta(w, c, "skeleton", ft->id) : bk_fail(BRISK_ERR_NOMEM, "out of memory");
    base_types(p, QT_F16);
    for (int i = 0; i < p->n && mt; i++) {
        const out_tensor *o = &p->t[i];
        mt[i] = (quant_mix_tensor){o->name, o->n_dims, {o->ne[0], o->ne[1], o->ne[2]}, o->force_f32};
    }
    quant_mix_opts mo = {0};
    if (s == BRISK_OK) {
        s = quant_mix_plan_shapes(w, p->n, mt, ft, &mo, out_path, types);
        w = NULL; /* consumed */
    }
    for (int i = 0; s == BRISK_OK && i < p->n; i++)
        p->t[i].type = types[i] != QT_COUNT ? types[i] : p->t[i].force_f32 ? QT_F32 : QT_F16;
    gguf_writer_free(w);
    free(types);
    free(mt);
    return s;
}

/* ---- metadata ---- */

static brisk_status set_meta(gguf_writer *w, const hf_config *c, const char *name, uint32_t file_type) {
    char k[128];
    const char *a = c->gguf_arch;
    const int64_t hd = c->head_dim > 0 ? c->head_dim : c->n_embd / c->n_head;
#define KEY(s) (snprintf(k, sizeof k, "%s.%s", a, s), k)
#define U32(s, v) BK_TRY(gguf_writer_set_u32(w, KEY(s), (uint32_t)(v)))
#define F32(s, v) BK_TRY(gguf_writer_set_f32(w, KEY(s), (float)(v)))
    BK_TRY(gguf_writer_set_str(w, "general.architecture", a));
    BK_TRY(gguf_writer_set_str(w, "general.type", "model"));
    BK_TRY(gguf_writer_set_str(w, "general.name", name));
    U32("block_count", c->n_layer + c->n_mtp); /* the MTP blocks after the trunk (hybrids; else 0) */
    if (c->n_mtp > 0) U32("nextn_predict_layers", c->n_mtp);
    if (c->n_ctx > 0) U32("context_length", c->n_ctx);
    U32("embedding_length", c->n_embd);
    if (c->n_ff > 0) U32("feed_forward_length", c->n_ff);
    U32("attention.head_count", c->n_head);
    U32("attention.head_count_kv", c->n_head_kv);
    if (!strcmp(c->rope_type, "linear") && !isnan(c->rope_factor)) {
        BK_TRY(gguf_writer_set_str(w, KEY("rope.scaling.type"), "linear"));
        F32("rope.scaling.factor", c->rope_factor);
    } else if (!strcmp(c->rope_type, "yarn") && !isnan(c->rope_factor)) {
        BK_TRY(gguf_writer_set_str(w, KEY("rope.scaling.type"), "yarn"));
        F32("rope.scaling.factor", c->rope_factor);
        if (c->rope_orig_ctx > 0) U32("rope.scaling.original_context_length", c->rope_orig_ctx);
        if (!isnan(c->yarn_ext_factor)) F32("rope.scaling.yarn_ext_factor", c->yarn_ext_factor);
        if (!isnan(c->yarn_attn_factor)) F32("rope.scaling.yarn_attn_factor", c->yarn_attn_factor);
        if (!isnan(c->yarn_beta_fast)) F32("rope.scaling.yarn_beta_fast", c->yarn_beta_fast);
        if (!isnan(c->yarn_beta_slow)) F32("rope.scaling.yarn_beta_slow", c->yarn_beta_slow);
    }
    if (c->has_mrope || is_qwen35(c)) { /* qwen35's loader needs the sections; qwen3next has none */
        int32_t sec[4] = {11, 11, 10, 0};
        if (c->has_mrope) memcpy(sec, c->mrope, sizeof sec);
        BK_TRY(gguf_writer_set_arr(w, KEY("rope.dimension_sections"), GGUF_TYPE_INT32, sec, 4));
    }
    if (!isnan(c->rope_theta)) F32("rope.freq_base", c->rope_theta);
    if (!isnan(c->rms_eps)) F32("attention.layer_norm_rms_epsilon", c->rms_eps);
    if (c->n_expert > 0) U32("expert_count", c->n_expert);
    if (c->n_expert_used > 0) U32("expert_used_count", c->n_expert_used);
    if (c->head_dim > 0 || c->arch == HF_LLAMA) { /* transformers fills head_dim in for llama */
        U32("attention.key_length", hd);
        U32("attention.value_length", hd);
    }
    BK_TRY(gguf_writer_set_u32(w, "general.file_type", file_type));
    if (c->arch == HF_LLAMA) {
        U32("vocab_size", c->n_vocab);
        U32("rope.dimension_count", hd);
    }
    if (c->n_ff_exp > 0 && c->arch != HF_LLAMA) U32("expert_feed_forward_length", c->n_ff_exp);
    if (c->n_ff_shexp > 0 && c->arch != HF_LLAMA) U32("expert_shared_feed_forward_length", c->n_ff_shexp);
    if (is_hybrid(c)) {
        U32("ssm.conv_kernel", c->ssm_conv);
        U32("ssm.state_size", c->ssm_k_dim);
        U32("ssm.group_count", c->ssm_n_k);
        U32("ssm.time_step_rank", c->ssm_n_v);
        U32("ssm.inner_size", c->ssm_v_dim * c->ssm_n_v);
        U32("full_attention_interval", c->full_attn_interval);
        U32("rope.dimension_count", (int64_t)((double)hd * c->partial_rotary));
    }
    BK_TRY(gguf_writer_set_u32(w, "general.quantization_version", 2));
    return BRISK_OK;
#undef KEY
#undef U32
#undef F32
}

/* ---- streaming ---- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Output row r of tensor ctx as floats in x (tmp: ne[0] scratch): a gguf_row_fn. */
static brisk_status gather_row(void *ctx, int64_t r, float *x, float *tmp) {
    const out_tensor *t = ctx;
    const int64_t ne0 = t->ne[0];
    if (t->gen) {
        memcpy(x, t->gen + r * ne0, (size_t)ne0 * sizeof *x);
        return BRISK_OK;
    }
    const int64_t e = r / t->ne[1], j = perm_apply(&t->row_perm, r % t->ne[1]);
    const src_ref *s = &t->src[t->n_src == 1 ? 0 : e];
    const int64_t src_row = (t->n_src == 1 ? e * t->src_rows_per_exp : 0) + t->row_off + j;
    float *dst = t->col_perm.kind != PERM_NONE ? tmp : x;
    if (s->scale) BK_TRY(st_read_f8_scaled(s->t, s->scale, s->block[0], s->block[1], src_row * ne0, ne0, dst));
    else BK_TRY(st_read_f32(s->t, src_row * ne0, ne0, dst));
    if (t->col_perm.kind != PERM_NONE)
        for (int64_t k = 0; k < ne0; k++) x[k] = tmp[perm_apply(&t->col_perm, k)];
    if (t->op == OP_PLUS1)
        for (int64_t k = 0; k < ne0; k++) x[k] += 1.0f;
    else if (t->op == OP_NEG_EXP)
        for (int64_t k = 0; k < ne0; k++) x[k] = -expf(x[k]);
    return BRISK_OK;
}

static brisk_status write_all(gguf_rows *rs, const plan *p) {
    for (int i = 0; i < p->n; i++) {
        const out_tensor *t = &p->t[i];
        BK_TRY(gguf_rows_tensor(rs, t->type, t->ne[0], t->ne[1] * t->ne[2], gather_row, (void *)t));
        for (int k = 0; k < t->n_src; k++) st_release(t->src[k].file, t->src[k].t); /* drop its pages */
    }
    return gguf_rows_finish(rs);
}

/* ---- the whole conversion ---- */

static brisk_status pick_type(const char *name, uint32_t *type, const quant_ftype **mix, uint32_t *file_type) {
    static const struct { const char *n; uint32_t t, ft; } plain[] = {
        {"f32", QT_F32, 0}, {"f16", QT_F16, 1}, {"bf16", QT_BF16, 32}, {"q8_0", QT_Q8_0, 7}};
    *mix = NULL;
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
        if (!strcasecmp(name, plain[i].n)) {
            *type = plain[i].t;
            *file_type = plain[i].ft;
            return BRISK_OK;
        }
    if (!(*mix = quant_ftype_find(name))) return bk_fail(BRISK_ERR_INVALID_ARG, "convert: unknown type '%s'", name);
    *file_type = (*mix)->id;
    return BRISK_OK;
}

static brisk_status check_shapes(const hf_config *c, const plan *p) {
    for (int i = 0; i < p->n; i++) {
        const out_tensor *o = &p->t[i];
        if ((!strcmp(o->name, "token_embd.weight") || !strcmp(o->name, "output.weight")) &&
            (o->ne[0] != c->n_embd || o->ne[1] > c->n_vocab))
            return bk_fail(BRISK_ERR_FORMAT, "convert: %s is %lld x %lld, config.json says %lld x %lld", o->name,
                           (long long)o->ne[1], (long long)o->ne[0], (long long)c->n_vocab, (long long)c->n_embd);
        if (o->ne[0] <= 0 || (o->col_perm.kind == PERM_VHEAD && o->ne[0] != o->col_perm.skip + c->ssm_n_v * o->col_perm.hd) ||
            (o->row_perm.kind == PERM_VHEAD && o->ne[1] != o->row_perm.skip + c->ssm_n_v * o->row_perm.hd) ||
            (o->row_perm.kind == PERM_LLAMA && o->ne[1] != o->row_perm.n_head * o->row_perm.hd) ||
            (o->col_perm.kind == PERM_LLAMA && o->ne[0] != o->col_perm.n_head * o->col_perm.hd) ||
            (o->row_perm.kind == PERM_UNGROUP &&
             (o->src[0].t->n_dims != 2 || o->src[0].t->shape[0] != o->row_perm.n_k * part_sum(&o->row_perm, 0, 4))))
            return bk_fail(BRISK_ERR_FORMAT, "convert: %s has a shape the config does not explain", o->name);
    }
    return BRISK_OK;
}

brisk_status convert_hf(const char *dir, const char *out_path, const convert_opts *o, convert_stats *stats) {
    const double t0 = now_s();
    char path[4096];
    hf_config c;
    snprintf(path, sizeof path, "%s/config.json", dir);
    BK_TRY(hf_config_load(path, &c));
    uint32_t type = QT_F16, file_type = 1;
    const quant_ftype *mix = NULL;
    BK_TRY(pick_type(o->type ? o->type : "f16", &type, &mix, &file_type));
    int n_threads = o->n_threads > 0 ? o->n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    n_threads = n_threads < 1 ? 1 : n_threads > MAX_THREADS ? MAX_THREADS : n_threads;

    const char *base = strrchr(dir, '/');
    char name[256];
    snprintf(name, sizeof name, "%s", base && base[1] ? base + 1 : dir);
    shard_set ss = {0};
    plan p = {0};
    convert_stats st = {.n_threads = n_threads};
    gguf_writer *w = NULL;
    gguf_rows *rs = NULL;
    uint64_t total = 0;
    brisk_status s = open_shards(dir, out_path, &ss);
    if (s == BRISK_OK) c.n_mtp = is_hybrid(&c) && !o->no_mtp ? count_mtp_layers(&c, &ss) : 0;
    if (s == BRISK_OK) s = build_plan(&c, &ss, &p);
    if (s == BRISK_OK) s = attach_scales(&c, &ss, &p);
    if (s == BRISK_OK) s = add_rope_freqs(&p, &c);
    if (s == BRISK_OK) s = check_shapes(&c, &p);
    if (s == BRISK_OK) {
        if (mix) s = mix_types(&p, &c, mix, out_path);
        else base_types(&p, type);
    }
    if (s == BRISK_OK && !(w = gguf_writer_new())) s = bk_fail(BRISK_ERR_NOMEM, "out of memory");
    if (s == BRISK_OK) s = set_meta(w, &c, name, file_type);
    if (s == BRISK_OK) s = convert_write_vocab(w, dir, &c, o->pre, st.pre, sizeof st.pre);
    size_t max_row = 0;
    int64_t max_ne0 = 0;
    for (int i = 0; s == BRISK_OK && i < p.n; i++) {
        const out_tensor *t = &p.t[i];
        s = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne);
        size_t rb = quant_row_size(t->type, t->ne[0]);
        total += rb * (uint64_t)(t->ne[1] * t->ne[2]);
        if (rb > max_row) max_row = rb;
        if (t->ne[0] > max_ne0) max_ne0 = t->ne[0];
    }
    gguf_rows_opts ro = {.n_threads = n_threads, .slab_bytes = o->slab_bytes, .max_ne0 = max_ne0,
                         .max_row_bytes = max_row, .label = o->progress ? "convert" : NULL, .total_bytes = total,
                         .n_tensors = p.n};
    if (s == BRISK_OK) s = gguf_writer_begin(w, out_path); /* beside it first: see gguf_writer_finish */
    if (s == BRISK_OK) s = gguf_rows_new(w, &ro, &rs);
    if (s == BRISK_OK) s = write_all(rs, &p);
    if (s == BRISK_OK) s = gguf_writer_finish(w);
    st.n_tensors = p.n;
    st.bytes = total;
    st.seconds = now_s() - t0;
    if (s == BRISK_OK && stats) *stats = st;
    gguf_rows_free(rs);
    gguf_writer_free(w); /* removes the temporary file if unfinished */
    plan_free(&p);
    close_shards(&ss);
    return s;
}
