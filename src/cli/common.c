#include "cli/common.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "backend/cuda/cuda_backend.h"
#include "brisk.h"
#include "cli/cli.h"
#include "engine/tp.h"
#include "model/model.h"

bool cli_int(const char *flag, const char *s, long lo, long hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        cli_error(2, "%s: expected an integer in [%ld, %ld], got '%s'", flag, lo, hi, s);
        return false;
    }
    *out = (int)v;
    return true;
}

bool cli_u64(const char *flag, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-') {
        cli_error(2, "%s: expected a non-negative integer, got '%s'", flag, s);
        return false;
    }
    *out = v;
    return true;
}

bool cli_float(const char *flag, const char *s, double lo, double hi, float *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        cli_error(2, "%s: expected a number in [%g, %g], got '%s'", flag, lo, hi, s);
        return false;
    }
    *out = (float)v;
    return true;
}

const char *cli_next(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        cli_error(2, "%s needs a value", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

char *cli_read_all(const char *path, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        cli_error(1, "%s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (n + 1 < cap) {
            if (feof(f) || ferror(f)) break;
            continue;
        }
        char *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    bool err = ferror(f);
    if (f != stdin) fclose(f);
    if (!buf || err) {
        free(buf);
        cli_error(1, "%s: read failed", path);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The kernel's high-water mark of resident memory (VmHWM, which cli_peak_rss_reset can lower), or
 * getrusage's where /proc is not there. */
double cli_peak_rss_mb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) kb = strtol(line + 6, NULL, 10);
    if (f) fclose(f);
    if (kb >= 0) return kb / 1024.0;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024.0;
}

void cli_peak_rss_reset(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w"); /* "5": VmHWM back to the current RSS (Linux 4.0+) */
    if (!f) return;
    fputs("5", f);
    fclose(f);
}

int cli_default_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

bool cli_tokenize(const brisk_model *m, const char *text, size_t len, bool add_special, bool parse_special,
                  int32_t **ids, int64_t *n) {
    *ids = NULL;
    *n = 0;
    brisk_status s = brisk_tokenize(m, text, len, add_special, parse_special, NULL, 0, n);
    if (s != BRISK_OK && s != BRISK_ERR_RANGE) {
        cli_error(1, "tokenize: %s", brisk_last_error());
        return false;
    }
    *ids = malloc((size_t)(*n > 0 ? *n : 1) * sizeof **ids);
    if (!*ids) {
        cli_error(1, "out of memory");
        return false;
    }
    if (brisk_tokenize(m, text, len, add_special, parse_special, *ids, *n, n) != BRISK_OK) {
        cli_error(1, "tokenize: %s", brisk_last_error());
        free(*ids);
        *ids = NULL;
        return false;
    }
    return true;
}

int cli_gpu_flag(int argc, char **argv, int *i, int *n_gpu_layers, int *device) {
    const char *a = argv[*i], *v;
    if (!strcmp(a, "-ngl") || !strcmp(a, "--n-gpu-layers"))
        return (v = cli_next(argc, argv, i)) && cli_int(a, v, -1, 1 << 20, n_gpu_layers) ? 1 : -1;
    if (!strcmp(a, "--device")) return (v = cli_next(argc, argv, i)) && cli_int(a, v, 0, 1024, device) ? 1 : -1;
    return 0;
}

int cli_kv_flag(int argc, char **argv, int *i, int *kv_type) {
    const char *a = argv[*i], *v;
    if (!strcmp(a, "--kv-f32")) {
        *kv_type = BRISK_KV_F32;
        return 1;
    }
    /* llama.cpp's -ctk/-ctv name K and V apart; brisk keeps one type for both */
    bool k = !strcmp(a, "-ctk") || !strcmp(a, "--cache-type-k"), vv = !strcmp(a, "-ctv") || !strcmp(a, "--cache-type-v");
    if (!k && !vv && strcmp(a, "--kv-type")) return 0;
    if (!(v = cli_next(argc, argv, i))) return -1;
    int t = brisk_kv_type_from_name(v);
    if (t < 0) {
        cli_error(2, "%s: unknown KV cache type '%s' (f32, f16, q8_0, q4_0 or q4_0h)", a, v);
        return -1;
    }
    static int other = -1; /* the type one of -ctk/-ctv set before */
    if ((k || vv) && other >= 0 && other != t) {
        cli_error(2, "%s %s: brisk keeps K and V in one type; give both the same", a, v);
        return -1;
    }
    if (k || vv) other = t;
    *kv_type = t;
    return 1;
}

int cli_sampler_flag(int argc, char **argv, int *i, brisk_sampler_params *sp, bool *seed_set) {
    const char *a = argv[*i], *v;
    float *f = NULL;
    double lo = 0, hi = 100;
    if (!strcmp(a, "--temp")) f = &sp->temp;
    else if (!strcmp(a, "--top-p")) f = &sp->top_p, hi = 1;
    else if (!strcmp(a, "--min-p")) f = &sp->min_p, hi = 1;
    else if (!strcmp(a, "--repeat-penalty")) f = &sp->repeat_penalty;
    else if (!strcmp(a, "--presence-penalty")) f = &sp->presence_penalty, lo = -100;
    else if (!strcmp(a, "--frequency-penalty")) f = &sp->frequency_penalty, lo = -100;
    if (f) return (v = cli_next(argc, argv, i)) && cli_float(a, v, lo, hi, f) ? 1 : -1;
    if (!strcmp(a, "--top-k")) return (v = cli_next(argc, argv, i)) && cli_int(a, v, 0, 1 << 30, &sp->top_k) ? 1 : -1;
    if (!strcmp(a, "--repeat-last-n"))
        return (v = cli_next(argc, argv, i)) && cli_int(a, v, 0, 1 << 20, &sp->repeat_last_n) ? 1 : -1;
    if (strcmp(a, "--seed") && strcmp(a, "-s")) return 0;
    if (!(v = cli_next(argc, argv, i)) || !cli_u64(a, v, &sp->seed)) return -1;
    *seed_set = true;
    return 1;
}

int cli_stop_flag(int argc, char **argv, int *i, cli_stop *st) {
    const char *a = argv[*i], *v;
    if (strcmp(a, "-r") && strcmp(a, "--reverse-prompt")) return 0;
    if (!(v = cli_next(argc, argv, i))) return -1;
    if (!*v || strlen(v) >= sizeof st->tail / 2)
        return cli_error(2, "%s: expected a text of 1 to %zu bytes", a, sizeof st->tail / 2 - 1), -1;
    if (st->n == CLI_STOP_MAX) return cli_error(2, "%s: at most %d of them", a, CLI_STOP_MAX), -1;
    st->text[st->n++] = v;
    return 1;
}

void cli_stop_reset(cli_stop *st) {
    st->len = 0;
    st->tail[0] = 0;
}

bool cli_stop_push(cli_stop *st, const char *piece, size_t len) {
    if (!st->n) return false;
    /* keep the last half of the buffer's worth: every reverse prompt is shorter than that */
    size_t half = sizeof st->tail / 2;
    if (len > half) piece += len - half, len = half;
    if (st->len + len >= sizeof st->tail) {
        size_t drop = st->len + len - half;
        memmove(st->tail, st->tail + drop, st->len - drop);
        st->len -= drop;
    }
    memcpy(st->tail + st->len, piece, len);
    st->len += len;
    st->tail[st->len] = 0;
    for (int k = 0; k < st->n; k++)
        if (strstr(st->tail, st->text[k])) return true;
    return false;
}

/* A byte count: a number with an optional binary unit K, M, G or T (also KiB, KB, ...). */
static bool cli_size(const char *flag, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    double mul = 1;
    const char *units = "KMGT";
    const char *u = *end ? strchr(units, toupper((unsigned char)*end)) : NULL;
    if (u) {
        for (const char *q = units; q <= u; q++) mul *= 1024;
        end++;
        if (!strcmp(end, "iB") || !strcmp(end, "B")) end += strlen(end);
    }
    if (errno || end == s || *end || !(v > 0) || v * mul > 1e18) {
        cli_error(2, "%s: expected a size such as 20G or 512M, got '%s'", flag, s);
        return false;
    }
    *out = (uint64_t)(v * mul);
    return true;
}

/* A finite value > 0 for flag, or false after printing why. */
static bool cli_positive(const char *flag, const char *s, float *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v > 0 && v <= 1e30)) {
        cli_error(2, "%s: expected a positive number, got '%s'", flag, s);
        return false;
    }
    *out = (float)v;
    return true;
}

/* llama.cpp's RoPE flags (common/arg.cpp) into o; same returns as cli_model_flag. */
static int cli_rope_flag(int argc, char **argv, int *i, brisk_rope_overrides *o) {
    const char *a = argv[*i], *v;
    if (strncmp(a, "--rope-", 7) && strncmp(a, "--yarn-", 7)) return 0;
    if (!strcmp(a, "--rope-scaling")) {
        if (!(v = cli_next(argc, argv, i))) return -1;
        if (!strcmp(v, "none")) o->scaling = BRISK_ROPE_SCALING_NONE;
        else if (!strcmp(v, "linear")) o->scaling = BRISK_ROPE_SCALING_LINEAR;
        else if (!strcmp(v, "yarn")) o->scaling = BRISK_ROPE_SCALING_YARN;
        else return cli_error(2, "%s: expected none, linear or yarn, got '%s'", a, v), -1;
        return 1;
    }
    if (!strcmp(a, "--yarn-orig-ctx")) /* 0: the model's, as llama.cpp */
        return (v = cli_next(argc, argv, i)) && cli_int(a, v, 0, 1 << 30, &o->orig_ctx) ? 1 : -1;
    if (!strcmp(a, "--yarn-ext-factor"))
        return (v = cli_next(argc, argv, i)) && cli_float(a, v, 0, 1, &o->ext_factor) ? 1 : -1;
    float *dst = !strcmp(a, "--rope-freq-base")     ? &o->freq_base
                 : !strcmp(a, "--rope-freq-scale")  ? &o->freq_scale
                 : !strcmp(a, "--yarn-attn-factor") ? &o->attn_factor
                 : !strcmp(a, "--yarn-beta-fast")   ? &o->beta_fast
                 : !strcmp(a, "--yarn-beta-slow")   ? &o->beta_slow
                                                    : NULL;
    if (dst) return (v = cli_next(argc, argv, i)) && cli_positive(a, v, dst) ? 1 : -1;
    if (!strcmp(a, "--rope-scale")) { /* llama.cpp: freq_scale = 1/N */
        float n;
        if (!(v = cli_next(argc, argv, i)) || !cli_positive(a, v, &n)) return -1;
        o->freq_scale = 1.0f / n;
        return 1;
    }
    return 0;
}

/* llama.cpp's habitual flags (CLI_LLAMACPP_HELP) into o; same returns as cli_model_flag. */
static int cli_llamacpp_flag(int argc, char **argv, int *i, cli_model_opts *o) {
    const char *a = argv[*i], *v;
    if (!strcmp(a, "--mlock")) {
        o->mlock = true;
        return 1;
    }
    if (!strcmp(a, "--jinja")) return 1; /* brisk's chats always go through the model's template */
    if (!strcmp(a, "-ub") || !strcmp(a, "--ubatch-size"))
        return (v = cli_next(argc, argv, i)) && cli_int(a, v, 1, 1 << 16, &o->n_ubatch) ? 1 : -1;
    if (strcmp(a, "-fa") && strcmp(a, "--flash-attn")) return 0;
    /* llama.cpp takes on|off|auto (older builds: a bare switch, meaning on) */
    v = *i + 1 < argc ? argv[*i + 1] : "";
    if (!strcmp(v, "on") || !strcmp(v, "auto") || !strcmp(v, "off")) ++*i;
    else v = "on";
    if (!strcmp(v, "off"))
        return cli_error(2, "%s off: brisk's attention is always fused (flash-style); it has no other to pick", a), -1;
    return 1;
}

/* -C's hex digits into mask (bit i: CPU i; the last digit holds CPUs 0-3), as llama.cpp's
 * parse_cpu_mask; false for a non-hex character or more CPUs than the mask holds. */
static bool parse_cpu_mask(const char *s, uint64_t *mask) {
    if (!strncmp(s, "0x", 2) || !strncmp(s, "0X", 2)) s += 2;
    size_t n = strlen(s);
    if (n == 0) return false;
    for (size_t d = 0; d < n; d++) { /* digit d from the right holds CPUs 4d..4d+3 */
        const char c = s[n - 1 - d];
        const int x = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (x < 0) return false;
        if (x && 4 * d >= BRISK_CPU_MASK_WORDS * 64) return false;
        if (x) mask[4 * d / 64] |= (uint64_t)x << (4 * d % 64);
    }
    return true;
}

/* -C, -Cr, --cpu-strict, --prio, --poll into o->cpu (llama.cpp's meanings); its -batch forms are
 * refused: brisk runs prompts and generation on one pool of threads. Same returns as cli_model_flag. */
static int cli_place_flag(int argc, char **argv, int *i, cli_model_opts *o) {
    const char *a = argv[*i], *v;
    brisk_cpu_placement *p = &o->cpu;
    const int max_cpu = BRISK_CPU_MASK_WORDS * 64 - 1;
    if (!strcmp(a, "-C") || !strcmp(a, "--cpu-mask")) {
        if (!(v = cli_next(argc, argv, i))) return -1;
        uint64_t m[BRISK_CPU_MASK_WORDS] = {0};
        bool any = false;
        if (!parse_cpu_mask(v, m))
            return cli_error(2, "%s %s: expects a hex mask of CPUs 0-%d (e.g. 0xff: CPUs 0-7)", a, v, max_cpu), -1;
        for (int w = 0; w < BRISK_CPU_MASK_WORDS; w++) {
            any |= m[w] != 0;
            p->mask[w] |= m[w];
        }
        if (!any) return cli_error(2, "%s %s: the mask names no CPU", a, v), -1;
        return 1;
    }
    if (!strcmp(a, "-Cr") || !strcmp(a, "--cpu-range")) {
        if (!(v = cli_next(argc, argv, i))) return -1;
        const char *dash = strchr(v, '-');
        char lo_s[32] = "", hi_s[32] = "";
        int lo = 0, hi = max_cpu;
        if (!dash || (size_t)(dash - v) >= sizeof lo_s || strlen(dash + 1) >= sizeof hi_s)
            return cli_error(2, "%s %s: expects lo-hi (either may be left out: 4-, -7)", a, v), -1;
        memcpy(lo_s, v, (size_t)(dash - v));
        strcpy(hi_s, dash + 1);
        if ((*lo_s && !cli_int(a, lo_s, 0, max_cpu, &lo)) || (*hi_s && !cli_int(a, hi_s, 0, max_cpu, &hi))) return -1;
        if (lo > hi) return cli_error(2, "%s %s: the range is empty (%d > %d)", a, v, lo, hi), -1;
        for (int c = lo; c <= hi; c++) p->mask[c / 64] |= (uint64_t)1 << (c % 64);
        return 1;
    }
    if (!strcmp(a, "--cpu-strict")) {
        int x;
        if (!(v = cli_next(argc, argv, i)) || !cli_int(a, v, 0, 1, &x)) return -1;
        p->strict = x;
        return 1;
    }
    if (!strcmp(a, "--prio")) return (v = cli_next(argc, argv, i)) && cli_int(a, v, -1, 3, &p->prio) ? 1 : -1;
    if (!strcmp(a, "--numa")) {
        if (!(v = cli_next(argc, argv, i))) return -1;
        p->numa = !strcmp(v, "distribute") ? BRISK_NUMA_DISTRIBUTE : !strcmp(v, "isolate") ? BRISK_NUMA_ISOLATE
                  : !strcmp(v, "numactl")  ? BRISK_NUMA_NUMACTL : -1;
        if (p->numa < 0) return cli_error(2, "%s %s: distribute, isolate or numactl", a, v), -1;
        return 1;
    }
    if (!strcmp(a, "--poll")) return (v = cli_next(argc, argv, i)) && cli_int(a, v, 0, 100, &p->poll) ? 1 : -1;
    static const char *const batch[] = {"-Cb", "--cpu-mask-batch", "-Crb", "--cpu-range-batch", "--cpu-strict-batch",
                                        "--prio-batch", "--poll-batch"};
    for (size_t k = 0; k < sizeof batch / sizeof batch[0]; k++)
        if (!strcmp(a, batch[k]))
            return cli_error(2, "%s: brisk runs prompts and generation on one pool of threads: place it with "
                                "-C/-Cr/--cpu-strict/--prio/--poll", a), -1;
    return 0;
}

int cli_model_flag(int argc, char **argv, int *i, cli_model_opts *o) {
    const char *a = argv[*i], *v;
    int rope = cli_rope_flag(argc, argv, i, &o->rope);
    if (rope) return rope;
    int place = cli_place_flag(argc, argv, i, o);
    if (place) return place;
    int lc = cli_llamacpp_flag(argc, argv, i, o);
    if (lc) return lc;
    if (!strcmp(a, "--n-cpu-moe") || !strcmp(a, "-ncmoe"))
        return (v = cli_next(argc, argv, i)) && cli_int(a, v, 0, 1 << 20, &o->n_cpu_moe) ? 1 : -1;
    if (!strcmp(a, "--no-mmap")) {
        o->no_mmap = true;
        return 1;
    }
    if (!strcmp(a, "--gpu-mem")) return (v = cli_next(argc, argv, i)) && cli_size(a, v, &o->gpu_mem) ? 1 : -1;
    if (!strcmp(a, "--cache-experts")) {
        if (!(v = cli_next(argc, argv, i))) return -1;
        if (!strcmp(v, "auto") || !strcmp(v, "off")) {
            o->cache_experts = v[0] == 'a' ? -1 : 0;
            return 1;
        }
        return cli_int(a, v, 0, 1 << 20, &o->cache_experts) ? 1 : -1;
    }
    if (!strcmp(a, "--expert-stats")) return (o->expert_stats = cli_next(argc, argv, i)) ? 1 : -1;
    if (!strcmp(a, "-hf") || !strcmp(a, "-hfr") || !strcmp(a, "--hf-repo")) return (o->hf = cli_next(argc, argv, i)) ? 1 : -1;
    if (!strcmp(a, "--attn-sparse")) return (v = cli_next(argc, argv, i)) && cli_int(a, v, 1, 1 << 24, &o->attn_sparse) ? 1 : -1;
    if (!strcmp(a, "--tp")) return (v = cli_next(argc, argv, i)) && cli_int(a, v, 1, 1024, &o->tp) ? 1 : -1;
    if (!strcmp(a, "--pp")) return (v = cli_next(argc, argv, i)) && cli_int(a, v, 1, 1024, &o->pp) ? 1 : -1;
    if (!strcmp(a, "--device")) o->device_set = true;
    int r = cli_gpu_flag(argc, argv, i, &o->n_gpu_layers, &o->device);
    return r ? r : cli_kv_flag(argc, argv, i, &o->kv_type);
}

int cli_model_path(cli_model_opts *o, const char *cmd, const char **model_path) {
    if (o->hf && *model_path) return cli_error(2, "%s: -m and -hf both name a model; give one", cmd);
    if (!o->hf && !*model_path) return cli_error(2, "%s: -m FILE (or -hf REPO[:QUANT]) is required", cmd);
    if (!o->hf) return 0;
    int rc = cli_hf_resolve(o->hf, o->hf_path, sizeof o->hf_path);
    if (!rc) *model_path = o->hf_path;
    return rc;
}

int cli_text_flag(int argc, char **argv, int *i, cli_text_opts *o) {
    const char *a = argv[*i], *v;
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) return (o->model_path = cli_next(argc, argv, i)) ? 1 : -1;
    if (!strcmp(a, "-f") || !strcmp(a, "--file")) return (o->text_path = cli_next(argc, argv, i)) ? 1 : -1;
    if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size"))
        return (v = cli_next(argc, argv, i)) && cli_int(a, v, 16, 1 << 20, &o->n_ctx) ? 1 : -1;
    if (!strcmp(a, "-t") || !strcmp(a, "--threads"))
        return (v = cli_next(argc, argv, i)) && cli_int(a, v, 1, 1024, &o->n_threads) ? 1 : -1;
    if (!strcmp(a, "--chunks"))
        return (v = cli_next(argc, argv, i)) && cli_int(a, v, 1, 1 << 30, &o->n_chunks_max) ? 1 : -1;
    return 0;
}

void cli_context_opts(const cli_model_opts *mo, brisk_context_params *cp) {
    cp->kv_type = (brisk_kv_type)mo->kv_type;
    cp->n_ubatch = mo->n_ubatch;
    cp->attn_sparse_k = mo->attn_sparse;
    cp->cpu = mo->cpu;
}

void cli_free_expert_stats(brisk_context_params *cp) {
    if (!cp) return;
    free((void *)cp->expert_stats);
    cp->expert_stats = NULL;
}

/* The --cache-experts in effect: as given, else auto with --gpu-mem alone (cli_load_model drops the
 * cache again where every expert fits), else none. */
static int cache_experts_of(const cli_model_opts *mo) {
    if (mo->cache_experts != CLI_CACHE_UNSET) return mo->cache_experts;
    return mo->gpu_mem && !mo->n_cpu_moe ? -1 : 0;
}

/* --cache-experts / --expert-stats into cp: a fixed size, or (auto, or stats alone) the --gpu-mem budget. */
static bool cache_params(const cli_model_opts *mo, brisk_context_params *cp) {
    const int ce = cache_experts_of(mo);
    bool want = ce != 0 || mo->expert_stats;
    if (!want) return true;
    if (!mo->n_cpu_moe && !mo->gpu_mem) {
        cli_error(2, "--cache-experts/--expert-stats: the cache is for experts in host memory: add --gpu-mem SIZE "
                     "(or --n-cpu-moe N)");
        return false;
    }
    if (ce > 0) cp->cache_experts = ce;
    else if (mo->gpu_mem) cp->cache_gpu_mem = mo->gpu_mem;
    else {
        cli_error(2, "--cache-experts auto sizes the cache from --gpu-mem SIZE; give one, or a number");
        return false;
    }
    if (!mo->expert_stats) return true;
    int64_t *counts = NULL;
    if (brisk_expert_stats_read(mo->expert_stats, &cp->expert_stats_layers, &cp->expert_stats_experts, &counts) !=
        BRISK_OK) {
        cli_error(1, "--expert-stats: %s", brisk_last_error());
        return false;
    }
    cp->expert_stats = counts;
    return true;
}

bool cli_load_model(const char *path, const cli_model_opts *mo, brisk_context_params *cp, brisk_model **out) {
    brisk_model_params mp = brisk_model_default_params();
    mp.n_gpu_layers = mo->n_gpu_layers;
    mp.device = mo->device;
    mp.n_cpu_moe = mo->n_cpu_moe;
    mp.no_mmap = mo->no_mmap;
    mp.rope = mo->rope;
    mp.progress = true; /* base/progress.h: a live line on a terminal, a summary after a slow load */
    if (cp && !cache_params(mo, cp)) return false;
    bool cache = cp && (cp->cache_experts > 0 || cp->cache_gpu_mem > 0);
    if (mo->gpu_mem && !mo->n_cpu_moe && brisk_model_fit_n_cpu_moe(path, &mp, cp, mo->gpu_mem, &mp.n_cpu_moe) != BRISK_OK) {
        cli_error(1, "--gpu-mem: %s", brisk_last_error());
        cli_free_expert_stats(cp);
        return false;
    }
    /* With the cache, a model that does not fit keeps every expert on the host and the GPU's room
     * beyond the rest goes to the cache: the hot experts of every layer rather than all experts of
     * some (the fit above still refuses a budget that not even the rest fits; one that fits whole
     * needs no cache). */
    if (cache && mo->gpu_mem && !mo->n_cpu_moe && mp.n_cpu_moe > 0) mp.n_cpu_moe = 1 << 20;
    /* Not asked for: the cache is the default where the budget cannot hold every expert (measured on
     * an H100: qwen3.6-35b-a3b at --gpu-mem 16G, 265 tokens/s with it against 46 with whole layers'
     * experts on the host), and nothing where it can. */
    if (cache && mo->cache_experts == CLI_CACHE_UNSET && !mo->expert_stats) {
        if (mp.n_cpu_moe == 0) {
            cp->cache_gpu_mem = 0;
            cache = false;
        } else {
            fprintf(stderr, "brisk: notice: the experts do not all fit --gpu-mem: every layer keeps them in host "
                    "memory and the GPU caches the most used (--cache-experts auto; --cache-experts off: whole "
                    "layers' experts on the host instead)\n");
        }
    }
    if (mo->pp > 1 && mo->tp > 1) {
        cli_error(2, "--tp %d --pp %d: pipeline and tensor parallelism together are not supported yet", mo->tp,
                  mo->pp);
        cli_free_expert_stats(cp);
        return false;
    }
    /* --pp N: the ranks are started and linked as for --tp; each loads its run of layers */
    int ranks = mo->pp > 1 ? mo->pp : mo->tp;
    if (mo->pp > 1) mp.pp_size = mo->pp;
    tp_link *tp = NULL;
    if (ranks > 0 && tp_launch(ranks, mo->device, &tp) != BRISK_OK) {
        cli_error(1, "--%s %d: %s", mo->pp > 1 ? "pp" : "tp", ranks, brisk_last_error());
        cli_free_expert_stats(cp);
        return false;
    }
    /* --tp: every rank loads its shard; the model owns the workers from here on */
    if ((tp ? tp_model_load(tp, path, &mp, out) : brisk_model_load(path, &mp, out)) != BRISK_OK) {
        cli_error(1, "%s", brisk_last_error());
        tp_link_free(tp);
        cli_free_expert_stats(cp);
        return false;
    }
    if (tp && mo->pp > 1) {
        int l0, l1;
        model_pp_layers((*out)->hp.n_layer, 0, mo->pp, &l0, &l1);
        fprintf(stderr, "pipeline parallelism: %d ranks, each with a run of the layers (rank 0 here: layers %d-%d, "
                "the embedding and the LM head); batches go round in up to %d micro-batches\n", mo->pp, l0, l1 - 1,
                mo->pp);
    } else if (tp)
        fprintf(stderr, "tensor parallelism: %d ranks, each with 1/%d of the %s and %s "
                "(rank 0 here on device %d; the LM head is replicated)\n", mo->tp, mo->tp,
                (*out)->tp_ssm_n_k_heads ? "attention and DeltaNet heads" : "attention heads",
                (*out)->tp_n_expert_local ? "of the experts (whole experts)" : "FFN columns", mo->device);
    /* A GPU asked for and none there: the load fell back to the CPU; say so once. */
    if ((mo->n_gpu_layers > 0 || mo->device_set) && !tp && !model_split_cpu(&mp) && bk_cuda_device_count() == 0)
        fprintf(stderr, "brisk: notice: %s%d asks for a GPU, but there is none (or brisk was built without CUDA): "
                "running on the CPU\n", mo->device_set ? "--device " : "-ngl ",
                mo->device_set ? mo->device : mo->n_gpu_layers);
    /* --mlock: the mapped (or read) weights and the rest of the process stay in RAM, as llama.cpp's
     * --mlock; like it, a warning and no failure when the lock limit is too low */
    if (mo->mlock && mlockall(MCL_CURRENT) != 0)
        fprintf(stderr, "brisk: warning: --mlock: %s (raise the limit: ulimit -l)\n", strerror(errno));
    /* Where the layers run, as llama.cpp says it ("offloaded 20/36 layers to GPU"). */
    brisk_model_info in;
    brisk_model_get_info(*out, &in);
    int ng = in.n_gpu_layers, nc = in.n_layer - ng;
    char where[32];
    if (in.gpu_device >= 0) snprintf(where, sizeof where, "CUDA device %d", in.gpu_device);
    else snprintf(where, sizeof where, "a second CPU backend");
    if (ng > 0 && nc > 0)
        fprintf(stderr, "offloaded %d/%d layers to %s: layers %d-%d and the output layer there, the embedding and "
                "layers 0-%d on the CPU\n", ng, in.n_layer, where, nc, in.n_layer - 1, nc - 1);
    else if (ng > 0 && in.gpu_device >= 0)
        fprintf(stderr, "offloaded %d/%d layers to %s\n", ng, in.n_layer, where);
    if (in.n_cpu_moe > 0) {
        double gib = in.cpu_moe_bytes / 1073741824.0;
        fprintf(stderr, "experts of layers 0-%d in host memory (--n-cpu-moe %d%s): %.*f %s stay off %s\n",
                in.n_cpu_moe - 1, in.n_cpu_moe,
                mo->n_cpu_moe ? "" : cache ? ", all of them, for the expert cache" : ", fit to --gpu-mem",
                gib >= 1 ? 1 : 0, gib >= 1 ? gib : gib * 1024, gib >= 1 ? "GiB" : "MiB", where);
    }
    return true;
}

/* A context per sequence beyond the trained one, with RoPE as trained (no linear/YaRN scale, the
 * file's theta): positions the model never saw, said once. YaRN's stretch is in n_ctx_train already. */
static void ctx_notice(const brisk_model *m, const brisk_context_params *cp) {
    if (!cp || cp->n_ctx <= 0) return; /* 0: the trained context, capped */
    int per_seq = cp->n_ctx / (cp->n_seq_max > 0 ? cp->n_seq_max : 1);
    const bk_rope_params *rp = &m->hp.rope;
    bool scaled = rp->freq_scale != 1.0f || rp->freq_base != m->hp.rope_file.freq_base;
    if (per_seq > m->hp.n_ctx_train && !scaled)
        fprintf(stderr, "brisk: notice: a context of %d tokens is beyond the model's trained %d, without RoPE "
                "scaling: output may degrade past %d (--rope-scaling yarn --rope-scale N extends it)\n", per_seq,
                m->hp.n_ctx_train, m->hp.n_ctx_train);
}

bool cli_new_context(brisk_model *m, const brisk_context_params *cp, brisk_context **out) {
    if (brisk_context_new(m, cp, out) == BRISK_OK) {
        ctx_notice(m, cp);
        brisk_memory_report r;
        brisk_context_memory(*out, &r);
        if (r.device >= 0)
            fprintf(stderr, "CUDA device %d: weights %.0f MiB, KV cache %.0f MiB, scratch %.0f MiB (%.0f of %.0f MiB were free)\n",
                    r.device, r.weight_bytes / 1048576.0, r.kv_bytes / 1048576.0, r.scratch_bytes / 1048576.0,
                    r.device_free / 1048576.0, r.device_total / 1048576.0);
        brisk_expert_cache_stats st;
        if (brisk_context_expert_cache_stats(*out, -1, &st) == BRISK_OK && st.n_layers)
            fprintf(stderr, "expert cache: %d experts in each of %d layers, %d spare slots, %.0f MiB%s\n", st.slots,
                    st.n_layers, st.spare_slots, r.expert_cache_bytes / 1048576.0,
                    cp && cp->expert_stats ? ", filled from --expert-stats" : ", filled by the first batches");
        else if (cp && (cp->cache_experts > 0 || cp->cache_gpu_mem > 0))
            fprintf(stderr, "expert cache: none (no layer keeps its experts on the host of a GPU stage, or no room)\n");
        return true;
    }
    cli_error(1, "%s", brisk_last_error());
    return false;
}

void cli_report_expert_cache(const brisk_model *m, const brisk_context *ctx) {
    brisk_expert_cache_stats all, one;
    if (!ctx || brisk_context_expert_cache_stats(ctx, -1, &all) != BRISK_OK || !all.n_layers) return;
    fflush(stdout); /* after the command's own table */
    brisk_model_info in;
    brisk_model_get_info(m, &in);
    /* the whole, then the layers with the lowest and highest hit rates */
    int lo = -1, hi = -1;
    double rlo = 2, rhi = -1;
    for (int l = 0; l < in.n_layer; l++) {
        if (brisk_context_expert_cache_stats(ctx, l, &one) != BRISK_OK) break;
        int64_t n = one.hits + one.misses;
        if (!n) continue;
        double r = (double)one.hits / (double)n;
        if (r < rlo) rlo = r, lo = l;
        if (r > rhi) rhi = r, hi = l;
    }
    int64_t n = all.hits + all.misses;
    fprintf(stderr, "expert cache (%d layers x %d experts, %d spare):\n", all.n_layers, all.slots, all.spare_slots);
    fprintf(stderr, "| layers | hits | misses | hit rate | misses copied for their batch | refresh copies "
                    "| batch copies |\n|---|---|---|---|---|---|---|\n");
    fprintf(stderr, "| all | %lld | %lld | %.1f%% | %lld | %lld | %lld |\n", (long long)all.hits, (long long)all.misses,
            n ? 100.0 * all.hits / n : 0.0, (long long)all.miss_copied, (long long)all.copies,
            (long long)all.miss_copies);
    for (int i = 0; i < 2 && lo >= 0; i++) {
        int l = i ? hi : lo;
        if (i && hi == lo) break;
        brisk_context_expert_cache_stats(ctx, l, &one);
        int64_t nl = one.hits + one.misses;
        fprintf(stderr, "| %d (%s) | %lld | %lld | %.1f%% | %lld | %lld | %lld |\n", l, i ? "best" : "worst",
                (long long)one.hits, (long long)one.misses, nl ? 100.0 * one.hits / nl : 0.0,
                (long long)one.miss_copied, (long long)one.copies, (long long)one.miss_copies);
    }
}
