/* test_hf_ref.c — brisk against Hugging Face transformers, a reference nobody
 * here wrote. tools/train/hf_refs.py ran transformers 5.17 (f32, CPU, eager
 * attention) on
 *   - tiny random-init models of every architecture `brisk convert` reads
 *     (tests/data/hf/rand-*: bf16 safetensors + config, built by transformers
 *     from a config, every 1-D parameter perturbed), and
 *   - brisk's own trained models (the GGUFs under models/, f16 weights),
 * and stored the logits of one prompt at every position and 64 greedy tokens
 * (computed by full recomputation, no KV-cache path on its side).
 * Here: the random models are converted with `convert_hf` to f32, the trained
 * ones re-typed f16 -> f32 (exact), so both sides compute in f32 on identical
 * weights. Checked: brisk's tokenizer gives the prompt's ids; every position's
 * logits have max|brisk - hf| / max|hf| <= 1e-4; the 64 greedy tokens are
 * identical (brisk decodes them one at a time through its KV cache). */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "brisk.h"
#include "model/convert.h"
#include "quant/model_quant.h"
#include "test.h"

#define HF_DIR "tests/data/hf"
#define REL_TOL 1e-4
#define MAX_IDS 256

typedef struct {
    int32_t prompt[MAX_IDS], greedy[MAX_IDS];
    int n_prompt, n_greedy, n_vocab;
    char text[512];
    float *logits; /* [n_prompt][n_vocab] */
} hf_ref;

static int json_ids(const cJSON *a, int32_t *out) {
    int n = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, a) if (n < MAX_IDS && cJSON_IsNumber(v)) out[n++] = (int32_t)v->valueint;
    return n;
}

static bool ref_load(const char *name, hf_ref *r) {
    char path[512];
    snprintf(path, sizeof path, HF_DIR "/%s.json", name);
    char *txt = test_read_file(path, NULL);
    cJSON *j = txt ? cJSON_Parse(txt) : NULL;
    free(txt);
    if (!j) return false;
    r->n_prompt = json_ids(cJSON_GetObjectItem(j, "prompt_ids"), r->prompt);
    r->n_greedy = json_ids(cJSON_GetObjectItem(j, "greedy"), r->greedy);
    const cJSON *nv = cJSON_GetObjectItem(j, "n_vocab"), *pr = cJSON_GetObjectItem(j, "prompt");
    r->n_vocab = cJSON_IsNumber(nv) ? nv->valueint : 0;
    snprintf(r->text, sizeof r->text, "%s", cJSON_IsString(pr) ? pr->valuestring : "");
    cJSON_Delete(j);
    snprintf(path, sizeof path, HF_DIR "/%s.logits", name);
    size_t len = 0;
    r->logits = (float *)test_read_file(path, &len);
    return r->logits && r->n_vocab > 0 && len == (size_t)r->n_prompt * (size_t)r->n_vocab * sizeof(float);
}

/* An f32 GGUF of the model, in a temp file the caller removes. */
static bool f32_model(const char *name, char *out, size_t cap) {
    snprintf(out, cap, "/tmp/brisk-hfref-%d-%s.gguf", (int)getpid(), name);
    if (!strncmp(name, "rand-", 5)) {
        /* the checkpoint's files and the shared tokenizer, linked into one folder */
        char dir[256], src[512], dst[512];
        snprintf(dir, sizeof dir, "/tmp/brisk-hfref-%d-%s.d", (int)getpid(), name);
        if (mkdir(dir, 0700) && access(dir, F_OK)) return false;
        char cwd[256];
        if (!getcwd(cwd, sizeof cwd)) return false;
        const char *files[] = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"};
        for (int i = 0; i < 4; i++) {
            snprintf(src, sizeof src, "%s/" HF_DIR "/%s/%s", cwd, i < 2 ? name : "tokenizer", files[i]);
            snprintf(dst, sizeof dst, "%s/%s", dir, files[i]);
            unlink(dst);
            if (symlink(src, dst)) return false;
        }
        convert_opts o = {.type = "f32", .n_threads = 2}; /* pre-tokenizer: detected */
        convert_stats st;
        brisk_status s = convert_hf(dir, out, &o, &st);
        for (int i = 0; i < 4; i++) {
            snprintf(dst, sizeof dst, "%s/%s", dir, files[i]);
            unlink(dst);
        }
        rmdir(dir);
        if (s != BRISK_OK) fprintf(stderr, "  convert %s: %s\n", name, brisk_last_error());
        return s == BRISK_OK;
    }
    char in[256];
    snprintf(in, sizeof in, "models/%s.gguf", name);
    model_quant_opts o = {0};
    o.ftype = "F32";
    o.n_threads = 2;
    brisk_status s = model_quantize(in, out, &o);
    if (s != BRISK_OK) fprintf(stderr, "  re-type %s: %s\n", name, brisk_last_error());
    return s == BRISK_OK;
}

/* Greedy steps compared. transformers' Qwen3_5MoeForCausalLM is not causal on
 * the CPU for longer inputs: the logits of rand-qwen35moe's prompt positions
 * 5-12 move by up to 22% (relative) when 64 more tokens follow them (its own
 * 13-token and 77-token forwards, compared position by position), while brisk
 * matches its 13-token forward at 1.3e-6. Its greedy tokens, computed by
 * recomputing growing sequences, therefore drift from step 54 (at 67 tokens):
 * only the first 54 are a reference. Every other model: all 64. */
static int greedy_trusted(const char *name) { return !strcmp(name, "rand-qwen35moe") ? 54 : 64; }

static void check_model(const char *name) {
    hf_ref r = {0};
    CHECK(ref_load(name, &r));
    char path[512];
    if (!r.logits || !f32_model(name, path, sizeof path)) {
        test_failed_ = 1;
        free(r.logits);
        return;
    }
    brisk_model *m = NULL;
    CHECK_OK(brisk_model_load(path, NULL, &m));
    unlink(path);
    if (!m) {
        free(r.logits);
        return;
    }
    CHECK(brisk_n_vocab(m) == r.n_vocab);
    brisk_token ids[MAX_IDS];
    int64_t n_ids = 0;
    CHECK(brisk_tokenize(m, r.text, strlen(r.text), false, false, ids, MAX_IDS, &n_ids) == BRISK_OK);
    CHECK(n_ids == r.n_prompt && !memcmp(ids, r.prompt, sizeof(int32_t) * (size_t)r.n_prompt));

    brisk_context_params cp = brisk_context_default_params();
    cp.n_ctx = 256;
    cp.kv_type = BRISK_KV_F32;
    cp.n_threads = 2;
    brisk_context *c = NULL;
    CHECK_OK(brisk_context_new(m, &cp, &c));
    if (!c || brisk_n_vocab(m) != r.n_vocab) goto out;
    brisk_batch_entry b[MAX_IDS];
    for (int i = 0; i < r.n_prompt; i++) b[i] = (brisk_batch_entry){r.prompt[i], i, 0, true};
    CHECK_OK(brisk_decode(c, b, r.n_prompt));
    double worst = 0;
    for (int i = 0; i < r.n_prompt; i++) {
        const float *lg = brisk_get_logits(c, i), *hf = r.logits + (size_t)i * (size_t)r.n_vocab;
        double d = 0, mx = 0;
        for (int v = 0; lg && v < r.n_vocab; v++) {
            d = fmax(d, fabs((double)lg[v] - hf[v]));
            mx = fmax(mx, fabs((double)hf[v]));
        }
        if (!lg) d = INFINITY;
        if (getenv("HFREF_VERBOSE")) printf("    pos %d: max abs err %.3e, max |hf| %.3f\n", i, d, mx);
        if (d / mx > worst) worst = d / mx;
    }
    int nv = r.n_vocab, same = 0;
    const float *lg = brisk_get_logits(c, r.n_prompt - 1);
    int n_greedy = r.n_greedy < greedy_trusted(name) ? r.n_greedy : greedy_trusted(name);
    for (int step = 0; lg && step < n_greedy; step++) {
        int best = 0;
        for (int v = 1; v < nv; v++)
            if (lg[v] > lg[best]) best = v;
        if (best != r.greedy[step]) {
            float second = -INFINITY;
            for (int v = 0; v < nv; v++)
                if (v != best && lg[v] > second) second = lg[v];
            printf("    step %d: brisk %d (margin %.2e) vs hf %d (brisk logit %.6f vs %.6f)\n", step, best,
                   lg[best] - second, r.greedy[step], lg[best], lg[r.greedy[step]]);
            break;
        }
        same++;
        brisk_batch_entry e = {best, r.n_prompt + step, 0, true};
        if (brisk_decode(c, &e, 1) != BRISK_OK) break;
        lg = brisk_get_logits(c, 0);
    }
    printf("  %-18s prompt %2d tokens: max rel logit err %.2e (tol %.0e), greedy %d/%d equal\n", name,
           r.n_prompt, worst, REL_TOL, same, n_greedy);
    CHECK(worst <= REL_TOL);
    CHECK(same == n_greedy && r.n_greedy == 64);
out:
    brisk_context_free(c);
    brisk_model_free(m);
    free(r.logits);
}

#define HF_CASE(fn, name) \
    static void fn(void) { check_model(name); }
HF_CASE(t_rand_llama, "rand-llama")
HF_CASE(t_rand_qwen2, "rand-qwen2")
HF_CASE(t_rand_qwen3, "rand-qwen3")
HF_CASE(t_rand_qwen3moe, "rand-qwen3moe")
HF_CASE(t_rand_qwen35, "rand-qwen35")
HF_CASE(t_rand_qwen35moe, "rand-qwen35moe")
HF_CASE(t_rand_qwen3next, "rand-qwen3next")
HF_CASE(t_kjv_6m, "brisk-kjv-6m")
HF_CASE(t_kjv_draft, "brisk-kjv-draft")
HF_CASE(t_kjv_moe, "brisk-kjv-moe")
HF_CASE(t_kjv_hybrid, "brisk-kjv-hybrid")

int main(int argc, char **argv) {
    const test_case cases[] = {
        {"hf_rand_llama", t_rand_llama},     {"hf_rand_qwen2", t_rand_qwen2},
        {"hf_rand_qwen3", t_rand_qwen3},     {"hf_rand_qwen3moe", t_rand_qwen3moe},
        {"hf_rand_qwen35", t_rand_qwen35},   {"hf_rand_qwen35moe", t_rand_qwen35moe},
        {"hf_rand_qwen3next", t_rand_qwen3next},
        {"hf_kjv_6m", t_kjv_6m},             {"hf_kjv_draft", t_kjv_draft},
        {"hf_kjv_moe", t_kjv_moe},           {"hf_kjv_hybrid", t_kjv_hybrid},
    };
    return test_main(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}
