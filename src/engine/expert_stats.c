/* expert_stats.c — the expert activation statistics file that `brisk calibrate`
 * writes and the hot-expert cache (backend/moe.c) reads: JSON,
 *
 *   {"format": "brisk-expert-stats-1", "model": PATH, "n_layer": L, "n_expert": E,
 *    "n_expert_used": K, "tokens": T, "counts": [[c_0_0, ..., c_0_{E-1}], ..., [c_{L-1}_0, ...]]}
 *
 * counts[l][e]: how often expert e of layer l was among a token's top K over
 * T tokens (non-negative integers). See brisk.h. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/atomic_file.h"
#include "base/status.h"
#include "brisk.h"

#define STATS_FORMAT "brisk-expert-stats-1"

brisk_status brisk_expert_stats_write(const char *path, const char *model_path, int n_layer, int n_expert,
                                      int n_expert_used, int64_t tokens, const int64_t *counts) {
    cJSON *root = cJSON_CreateObject(), *rows = cJSON_CreateArray();
    if (!root || !rows) {
        cJSON_Delete(root);
        cJSON_Delete(rows);
        return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    }
    cJSON_AddStringToObject(root, "format", STATS_FORMAT);
    cJSON_AddStringToObject(root, "model", model_path ? model_path : "");
    cJSON_AddNumberToObject(root, "n_layer", n_layer);
    cJSON_AddNumberToObject(root, "n_expert", n_expert);
    cJSON_AddNumberToObject(root, "n_expert_used", n_expert_used);
    cJSON_AddNumberToObject(root, "tokens", (double)tokens);
    for (int l = 0; l < n_layer; l++) {
        cJSON *r = cJSON_CreateArray();
        for (int e = 0; e < n_expert; e++)
            cJSON_AddItemToArray(r, cJSON_CreateNumber((double)counts[(size_t)l * n_expert + e]));
        cJSON_AddItemToArray(rows, r);
    }
    cJSON_AddItemToObject(root, "counts", rows);
    char *txt = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!txt) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    /* beside the path first, then renamed over it: an old statistics file
     * survives a failed write whole */
    atomic_file *af = NULL;
    brisk_status s = atomic_file_open(path, &af);
    if (s == BRISK_OK) {
        FILE *f = atomic_file_stream(af);
        fputs(txt, f);
        fputc('\n', f);
        s = atomic_file_commit(af); /* sees a failed write through the stream's error flag */
    }
    free(txt);
    return s == BRISK_OK ? s : bk_wrap(s, "expert statistics");
}

/* A whole non-negative number below 2^53 (a count JSON carries exactly). */
static bool get_count(const cJSON *o, const char *key, double hi, int64_t *out) {
    const cJSON *v = key ? cJSON_GetObjectItemCaseSensitive(o, key) : o;
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= hi && d == floor(d))) return false;
    *out = (int64_t)d;
    return true;
}

brisk_status brisk_expert_stats_read(const char *path, int *n_layer, int *n_expert, int64_t **counts) {
    *counts = NULL;
    *n_layer = *n_expert = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return bk_fail(BRISK_ERR_IO, "%s: %s", path, strerror(errno));
    char *txt = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 65536;
            char *nt = realloc(txt, cap);
            if (!nt) {
                free(txt);
                fclose(f);
                return bk_fail(BRISK_ERR_NOMEM, "out of memory");
            }
            txt = nt;
        }
        size_t r = fread(txt + len, 1, cap - len - 1, f);
        len += r;
        if (r == 0) break;
    }
    bool rerr = ferror(f);
    fclose(f);
    if (rerr) {
        free(txt);
        return bk_fail(BRISK_ERR_IO, "%s: read failed", path);
    }
    txt[len] = 0;
    cJSON *root = cJSON_ParseWithLength(txt, len);
    free(txt);
    const char *bad = NULL;
    int64_t nl = 0, ne = 0, tokens = 0;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format"),
                *rows = cJSON_GetObjectItemCaseSensitive(root, "counts");
    if (!root) bad = "not JSON (truncated or corrupt?)";
    else if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, STATS_FORMAT))
        bad = "no \"format\": \"" STATS_FORMAT "\" (not a file of `brisk calibrate -o`)";
    else if (!get_count(root, "n_layer", 4096, &nl) || nl < 1 || !get_count(root, "n_expert", 1 << 20, &ne) ||
             ne < 1 || !get_count(root, "tokens", 9007199254740992.0, &tokens))
        bad = "bad or missing n_layer, n_expert or tokens";
    else if (!cJSON_IsArray(rows) || cJSON_GetArraySize(rows) != nl)
        bad = "\"counts\" is not an array of n_layer rows";
    int64_t *c = bad ? NULL : malloc((size_t)nl * (size_t)ne * sizeof *c);
    if (!bad && !c) {
        cJSON_Delete(root);
        return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    }
    for (int64_t l = 0; !bad && l < nl; l++) {
        const cJSON *r = cJSON_GetArrayItem(rows, (int)l);
        if (!cJSON_IsArray(r) || cJSON_GetArraySize(r) != ne) {
            bad = "a row of \"counts\" does not hold n_expert numbers";
            break;
        }
        int64_t e = 0;
        for (const cJSON *v = r->child; v; v = v->next, e++)
            if (!get_count(v, NULL, 9007199254740992.0, &c[l * ne + e])) {
                bad = "a count is not a non-negative integer";
                break;
            }
    }
    cJSON_Delete(root);
    if (bad) {
        free(c);
        return bk_fail(BRISK_ERR_FORMAT, "%s: expert statistics: %s", path, bad);
    }
    *counts = c;
    *n_layer = (int)nl;
    *n_expert = (int)ne;
    return BRISK_OK;
}
