// llamacpp-ref: the llama.cpp reference harness that brisk is checked against.
//
// It runs the prebuilt CPU llama.cpp (release v0.4.0) that the npm package
// @node-llama-cpp/linux-x64 ships. Nothing is linked: libggml-base, libggml and
// libllama are dlopened from LLAMACPP_LIBDIR (or --libdir) and every function is
// resolved with dlsym into one table; the headers of the matching source tree
// (.deps/llama.cpp) give the types and struct layouts. The libraries carry
// RUNPATH $ORIGIN, so loading them by absolute path needs no LD_LIBRARY_PATH.
// The CPU backend itself (libggml-cpu-<variant>.so, the best one for this CPU)
// is loaded with ggml_backend_load_all_from_path(libdir).
//
// Subcommands (see usage()): tokenize, quantize, eval, embed, perplexity, bench, batched, mtp, eagle3,
// info; mtp and eagle3 (the speculative drafters) live in spec.c, the shared pieces in harness.h.
// Every failure prints one line on stderr and exits non-zero.
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <glob.h>
#include <link.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"
#include "llama.h"
#include "harness.h"
#include "imatrix.h"

// ---------------------------------------------------------------------------
// The function table. Each entry is typed from the real prototype.

struct llamacpp L;

// ---------------------------------------------------------------------------
// Errors and small helpers.

int fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("llamacpp-ref: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double peak_rss_mb(void) { // VmHWM from /proc/self/status, in MiB
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kb = 0;
    if (!f) return 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0) kb = strtod(line + 6, NULL);
    fclose(f);
    return kb / 1024.0;
}

// Physical cores, the way llama-bench's default thread count counts them on a
// non-hybrid x86 Linux host: distinct topology/thread_siblings masks.
static int n_physical_cores(void) {
    enum { MAX_CPUS = 1024 };
    static char seen[MAX_CPUS][64];
    int n = 0;
    for (int cpu = 0; cpu < MAX_CPUS; cpu++) {
        char path[128], buf[64] = {0};
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/thread_siblings", cpu);
        FILE *f = fopen(path, "r");
        if (!f) break;
        if (!fgets(buf, sizeof buf, f)) buf[0] = 0;
        fclose(f);
        int k = 0;
        while (k < n && strcmp(seen[k], buf) != 0) k++;
        if (k == n) memcpy(seen[n++], buf, sizeof buf);
    }
    if (n > 0) return n;
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    return c > 0 ? (int)c : 4;
}

static bool streq_ci(const char *a, const char *b) {
    while (*a && *b && tolower((unsigned char)*a) == tolower((unsigned char)*b)) a++, b++;
    return *a == 0 && *b == 0;
}

static bool parse_int(const char *s, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || end == s || *end || errno || v < lo || v > hi) return false;
    *out = (int)v;
    return true;
}

static bool parse_float(const char *s, float *out) {
    char *end;
    errno = 0;
    float v = s ? strtof(s, &end) : 0;
    if (!s || end == s || *end || errno || !isfinite(v)) return false;
    *out = v;
    return true;
}

// ---------------------------------------------------------------------------
// Logging: llama.cpp and ggml log through one callback. Messages at levels in
// [g_log_min, g_log_max] are shown; the first error is kept for our own one-line
// message, and the first Flash Attention resolution is noted.

static enum ggml_log_level g_log_min = GGML_LOG_LEVEL_NONE, g_log_max = GGML_LOG_LEVEL_NONE;
static enum ggml_log_level g_log_last = GGML_LOG_LEVEL_INFO;
static char g_first_err[512];           // first llama.cpp error since clear_error()
static const char *g_fa_resolved = "?"; // "on"/"off" once llama.cpp resolves it

void clear_error(void) { g_first_err[0] = 0; }

const char *llama_error(void) { return g_first_err[0] ? g_first_err : "no details"; }

static void log_cb(enum ggml_log_level level, const char *text, void *ud) {
    (void)ud;
    if (level == GGML_LOG_LEVEL_CONT) level = g_log_last;
    g_log_last = level;
    if (strstr(text, "Flash Attention enabled")) g_fa_resolved = "on";
    if (strstr(text, "Flash Attention not supported")) g_fa_resolved = "off";
    if (level == GGML_LOG_LEVEL_ERROR && !g_first_err[0]) {
        snprintf(g_first_err, sizeof g_first_err, "%s", text);
        g_first_err[strcspn(g_first_err, "\n")] = 0;
    }
    if (level >= g_log_min && level <= g_log_max) fputs(text, stderr);
}

// ---------------------------------------------------------------------------
// Loading the libraries.

static int find_variant_cb(struct dl_phdr_info *info, size_t size, void *ud) {
    (void)size;
    (void)ud;
    const char *base = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
    if (base && strncmp(base + 1, "libggml-cpu", 11) == 0)
        snprintf(L.cpu_variant, sizeof L.cpu_variant, "%s", base + 1);
    return 0;
}

// Opens dir/name, or the first dir/pattern match (the npm build names its
// libraries libllama.v0.4.0.so and libggml.v0.4.0.so).
static void *open_lib(const char *dir, const char *name, const char *pattern) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (h || !pattern) return h;
    glob_t g;
    snprintf(path, sizeof path, "%s/%s", dir, pattern);
    if (glob(path, 0, NULL, &g) == 0 && g.gl_pathc > 0) h = dlopen(g.gl_pathv[0], RTLD_NOW | RTLD_GLOBAL);
    globfree(&g);
    return h;
}

// Default libdir: $LLAMACPP_LIBDIR, else the npm tree beside build/ when the
// harness sits at <repo>/build/llamacpp-ref.
static const char *default_libdir(void) {
    static char dir[PATH_MAX + 128];
    const char *env = getenv("LLAMACPP_LIBDIR");
    if (env && *env) return env;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return NULL;
    exe[n] = 0;
    for (int up = 0; up < 2; up++) { // strip the file name, then build/
        char *slash = strrchr(exe, '/');
        if (!slash) return NULL;
        *slash = 0;
    }
    snprintf(dir, sizeof dir, "%s/.deps/npm/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64", exe);
    return dir;
}

// Loads the libraries from libdir and the CPU backend: the best variant for this
// CPU, or libggml-cpu-<variant>.so when variant is set (to pin the kernels).
static int load_llamacpp(const char *libdir, const char *variant) {
    if (!libdir) return fail("no library directory: set LLAMACPP_LIBDIR or pass --libdir");
    void *base = open_lib(libdir, "libggml-base.so", NULL);
    if (!base) return fail("cannot load %s/libggml-base.so: %s", libdir, dlerror());
    void *ggml = open_lib(libdir, "libggml.so", "libggml.v*.so");
    if (!ggml) return fail("cannot load libggml from %s: %s", libdir, dlerror());
    void *llama = open_lib(libdir, "libllama.so", "libllama.v*.so");
    if (!llama) return fail("cannot load libllama from %s: %s", libdir, dlerror());
    void *handles[3] = {llama, ggml, base};
    L.llama = llama;
#define X(fn)                                                                     \
    for (int i = 0; i < 3 && !L.fn; i++) *(void **)&L.fn = dlsym(handles[i], #fn); \
    if (!L.fn) return fail("symbol %s not found in %s", #fn, libdir);
    LLAMACPP_FUNCS(X)
#undef X
    L.llama_log_set(log_cb, NULL);
    if (variant) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/libggml-cpu-%s.so", libdir, variant);
        if (!L.ggml_backend_load(path)) return fail("cannot load CPU backend %s", path);
    } else {
        L.ggml_backend_load_all_from_path(libdir);
    }
    ggml_backend_dev_t cpu = L.ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (!cpu) return fail("no CPU backend (libggml-cpu-*.so) could be loaded from %s", libdir);
    ggml_backend_reg_t reg = L.ggml_backend_dev_backend_reg(cpu);
    *(void **)&L.ggml_threadpool_new = L.ggml_backend_reg_get_proc_address(reg, "ggml_threadpool_new");
    *(void **)&L.ggml_threadpool_free = L.ggml_backend_reg_get_proc_address(reg, "ggml_threadpool_free");
    if (!L.ggml_threadpool_new || !L.ggml_threadpool_free) return fail("CPU backend lacks ggml_threadpool_new");
    dl_iterate_phdr(find_variant_cb, NULL);
    L.llama_backend_init();
    return 0;
}

// ---------------------------------------------------------------------------
// Options shared by all subcommands.


static bool parse_ggml_type(const char *s, enum ggml_type *out) {
    for (int i = 0; i < GGML_TYPE_COUNT; i++) {
        const char *name = L.ggml_type_name((enum ggml_type)i);
        if (name && streq_ci(name, s)) {
            *out = (enum ggml_type)i;
            return true;
        }
    }
    return false;
}

// Parses argv[2..] into o. Type names need the libraries, so they are kept as
// strings here and resolved in resolve_types().
static const char *g_kv_name = "f32", *g_out_name, *g_emb_name;
static bool g_kv_given; // --kv was passed (perplexity's default is f16, the others' f32)

static int parse_opts(int argc, char **argv, struct opts *o) {
    *o = (struct opts){.n_gen = -1, .n_ctx = 0, .n_threads = 0, .reps = 5, .fa = -2, .repack = -1,
                       .rope_scaling = LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED, .pooling = LLAMA_POOLING_TYPE_UNSPECIFIED, .yarn_ext_factor = -1.0f,
                       .yarn_attn_factor = -1.0f, .yarn_beta_fast = -1.0f, .yarn_beta_slow = -1.0f};
    struct { const char *name; float *dst; bool inverse; } fl[] = {
        {"--rope-scale", &o->rope_freq_scale, true},      {"--rope-freq-scale", &o->rope_freq_scale, false},
        {"--rope-freq-base", &o->rope_freq_base, false},  {"--yarn-ext-factor", &o->yarn_ext_factor, false},
        {"--yarn-attn-factor", &o->yarn_attn_factor, false}, {"--yarn-beta-fast", &o->yarn_beta_fast, false},
        {"--yarn-beta-slow", &o->yarn_beta_slow, false}};
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes = true;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "--libdir")) o->libdir = v;
        else if (!strcmp(a, "--cpu-variant")) o->cpu_variant = v;
        else if (!strcmp(a, "-p")) o->p = v;
        else if (!strcmp(a, "--prompt-text")) o->prompt_text = v;
        else if (!strcmp(a, "--logits-out")) o->logits_out = v;
        else if (!strcmp(a, "--force")) o->force = v;
        else if (!strcmp(a, "--imatrix")) o->imatrix = v;
        else if (!strcmp(a, "-npl")) o->npl = v;
        else if (!strcmp(a, "--kv")) g_kv_name = v, g_kv_given = true;
        else if (!strcmp(a, "-f")) o->text_file = v;
        else if (!strcmp(a, "-o")) o->imatrix_out = v;
        else if (!strcmp(a, "--kl-divergence-base")) o->kl_base = v;
        else if (!strcmp(a, "--chunks")) { if (!parse_int(v, 1, 1 << 24, &o->n_chunks)) return fail("bad --chunks '%s'", v ? v : ""); }
        else if (!strcmp(a, "--output-tensor-type")) g_out_name = v;
        else if (!strcmp(a, "--token-embedding-type")) g_emb_name = v;
        else if (!strcmp(a, "-n")) { if (!parse_int(v, 0, 1 << 24, &o->n_gen)) return fail("bad -n '%s'", v ? v : ""); }
        else if (!strcmp(a, "-c")) { if (!parse_int(v, 0, 1 << 24, &o->n_ctx)) return fail("bad -c '%s'", v ? v : ""); }
        else if (!strcmp(a, "-d")) { if (!parse_int(v, 0, 1 << 24, &o->depth)) return fail("bad -d '%s'", v ? v : ""); }
        else if (!strcmp(a, "-t")) { if (!parse_int(v, 1, 4096, &o->n_threads)) return fail("bad -t '%s'", v ? v : ""); }
        else if (!strcmp(a, "-r")) { if (!parse_int(v, 1, 1000000, &o->reps)) return fail("bad -r '%s'", v ? v : ""); }
        else if (!strcmp(a, "--top")) { if (!parse_int(v, 0, 1 << 24, &o->top)) return fail("bad --top '%s'", v ? v : ""); }
        else if (!strcmp(a, "--yarn-orig-ctx")) { if (!parse_int(v, 0, 1 << 30, &o->yarn_orig_ctx)) return fail("bad --yarn-orig-ctx '%s'", v ? v : ""); }
        else if (!strcmp(a, "--rope-scaling")) {
            if (v && !strcmp(v, "none")) o->rope_scaling = LLAMA_ROPE_SCALING_TYPE_NONE;
            else if (v && !strcmp(v, "linear")) o->rope_scaling = LLAMA_ROPE_SCALING_TYPE_LINEAR;
            else if (v && !strcmp(v, "yarn")) o->rope_scaling = LLAMA_ROPE_SCALING_TYPE_YARN;
            else return fail("bad --rope-scaling '%s' (none|linear|yarn)", v ? v : "");
        } else if (!strcmp(a, "--pooling")) {
            static const char *const pn[] = {"none", "mean", "cls", "last", "rank"}; // llama_pooling_type 0..4
            o->pooling = -2;
            for (int k = 0; v && k < 5; k++)
                if (!strcmp(v, pn[k])) o->pooling = k;
            if (o->pooling == -2) return fail("bad --pooling '%s' (none|mean|cls|last|rank)", v ? v : "");
        } else if (!strcmp(a, "--fa") || !strcmp(a, "-fa")) {
            if (v && !strcmp(v, "on")) o->fa = LLAMA_FLASH_ATTN_TYPE_ENABLED;
            else if (v && !strcmp(v, "off")) o->fa = LLAMA_FLASH_ATTN_TYPE_DISABLED;
            else if (v && !strcmp(v, "auto")) o->fa = LLAMA_FLASH_ATTN_TYPE_AUTO;
            else return fail("bad --fa '%s' (on|off|auto)", v ? v : "");
        } else {
            size_t k = 0;
            while (k < sizeof fl / sizeof fl[0] && strcmp(a, fl[k].name)) k++;
            if (k < sizeof fl / sizeof fl[0]) {
                if (!parse_float(v, fl[k].dst) || (fl[k].inverse && *fl[k].dst == 0.0f))
                    return fail("bad %s '%s'", a, v ? v : "");
                if (fl[k].inverse) *fl[k].dst = 1.0f / *fl[k].dst; // arg.cpp: freq_scale = 1/N
                i++;
                continue;
            }
            takes = false;
            if (!strcmp(a, "--add-special")) o->add_special = true;
            else if (!strcmp(a, "--parse-special")) o->parse_special = true;
            else if (!strcmp(a, "--pure")) o->pure = true;
            else if (!strcmp(a, "--kl-divergence")) o->kl = true;
            else if (!strcmp(a, "--allow-requantize")) o->allow_requant = true;
            else if (!strcmp(a, "--leave-output-tensor")) o->leave_output = true;
            else if (!strcmp(a, "--no-repack")) o->repack = 0;
            else if (!strcmp(a, "--repack")) o->repack = 1;
            else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) o->verbose = true;
            else if (a[0] == '-' && a[1]) return fail("unknown option '%s'", a);
            else if (o->n_pos < 4) o->pos[o->n_pos++] = a;
            else return fail("too many arguments ('%s')", a);
        }
        if (takes) {
            if (!v) return fail("option %s needs a value", a);
            i++;
        }
    }
    return 0;
}

static int resolve_types(struct opts *o) {
    o->out_type = o->emb_type = GGML_TYPE_COUNT; // GGML_TYPE_COUNT = "not set"
    if (!parse_ggml_type(g_kv_name, &o->kv_type)) return fail("unknown KV cache type '%s'", g_kv_name);
    if (g_out_name && !parse_ggml_type(g_out_name, &o->out_type)) return fail("unknown ggml type '%s'", g_out_name);
    if (g_emb_name && !parse_ggml_type(g_emb_name, &o->emb_type)) return fail("unknown ggml type '%s'", g_emb_name);
    if (o->n_threads == 0) o->n_threads = n_physical_cores();
    return 0;
}

// Loads a model on the CPU, memory-mapped, with weight repacking (llama.cpp's
// default: e.g. Q4_0 -> q4_0_8x8 interleaved kernels) when repack is set.
// Returns NULL after printing an error.
static struct llama_model *load_model(const struct opts *o, bool vocab_only, bool repack) {
    if (!o->model) {
        fail("missing -m FILE");
        return NULL;
    }
    struct llama_model_params mp = L.llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.vocab_only = vocab_only;
    mp.load_mode = LLAMA_LOAD_MODE_MMAP;
    mp.use_extra_bufts = repack;
    clear_error();
    struct llama_model *m = L.llama_model_load_from_file(o->model, mp);
    if (!m) fail("cannot load model '%s': %s", o->model, llama_error());
    return m;
}

// Tokenizes text into a malloc'd array; *n gets the count. NULL on failure.
static llama_token *tokenize(const struct llama_vocab *vocab, const char *text, size_t len, bool add_special,
                             bool parse_special, int *n) {
    if (len > INT32_MAX / 2) {
        fail("input too long (%zu bytes)", len);
        return NULL;
    }
    int cap = (int)len + 16;
    llama_token *ids = malloc(sizeof *ids * (size_t)cap);
    if (!ids) return NULL;
    int r = L.llama_tokenize(vocab, text, (int32_t)len, ids, cap, add_special, parse_special);
    if (r < 0 && r != INT32_MIN) {
        cap = -r;
        llama_token *bigger = realloc(ids, sizeof *ids * (size_t)cap);
        if (!bigger) return free(ids), NULL;
        ids = bigger;
        r = L.llama_tokenize(vocab, text, (int32_t)len, ids, cap, add_special, parse_special);
    }
    if (r < 0) {
        free(ids);
        fail("llama_tokenize failed (%d)", r);
        return NULL;
    }
    *n = r;
    return ids;
}

static char *read_all(FILE *f, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *bigger = realloc(buf, cap *= 2);
        if (!bigger) free(buf);
        buf = bigger;
    }
    if (!buf || ferror(f)) return free(buf), NULL;
    *len = n;
    return buf;
}

void print_ids(const llama_token *ids, int n) {
    for (int i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
    putchar('\n');
}

// ---------------------------------------------------------------------------
// tokenize

static int cmd_tokenize(const struct opts *o) {
    struct llama_model *m = load_model(o, true, false);
    if (!m) return 1;
    size_t len;
    char *text = read_all(stdin, &len);
    if (!text) return L.llama_model_free(m), fail("cannot read stdin");
    int n = 0;
    llama_token *ids = tokenize(L.llama_model_get_vocab(m), text, len, o->add_special, o->parse_special, &n);
    free(text);
    L.llama_model_free(m);
    if (!ids) return 1;
    print_ids(ids, n);
    free(ids);
    return 0;
}

// ---------------------------------------------------------------------------
// quantize

static const struct {
    const char *name;
    enum llama_ftype ftype;
} FTYPES[] = { // the names llama-quantize accepts
    {"Q4_0", LLAMA_FTYPE_MOSTLY_Q4_0},       {"Q4_1", LLAMA_FTYPE_MOSTLY_Q4_1},
    {"Q5_0", LLAMA_FTYPE_MOSTLY_Q5_0},       {"Q5_1", LLAMA_FTYPE_MOSTLY_Q5_1},
    {"Q8_0", LLAMA_FTYPE_MOSTLY_Q8_0},       {"Q2_K", LLAMA_FTYPE_MOSTLY_Q2_K},
    {"Q2_K_S", LLAMA_FTYPE_MOSTLY_Q2_K_S},   {"Q3_K", LLAMA_FTYPE_MOSTLY_Q3_K_M},
    {"Q3_K_S", LLAMA_FTYPE_MOSTLY_Q3_K_S},   {"Q3_K_M", LLAMA_FTYPE_MOSTLY_Q3_K_M},
    {"Q3_K_L", LLAMA_FTYPE_MOSTLY_Q3_K_L},   {"Q4_K", LLAMA_FTYPE_MOSTLY_Q4_K_M},
    {"Q4_K_S", LLAMA_FTYPE_MOSTLY_Q4_K_S},   {"Q4_K_M", LLAMA_FTYPE_MOSTLY_Q4_K_M},
    {"Q5_K", LLAMA_FTYPE_MOSTLY_Q5_K_M},     {"Q5_K_S", LLAMA_FTYPE_MOSTLY_Q5_K_S},
    {"Q5_K_M", LLAMA_FTYPE_MOSTLY_Q5_K_M},   {"Q6_K", LLAMA_FTYPE_MOSTLY_Q6_K},
    {"IQ4_NL", LLAMA_FTYPE_MOSTLY_IQ4_NL},   {"IQ4_XS", LLAMA_FTYPE_MOSTLY_IQ4_XS},
    {"MXFP4_MOE", LLAMA_FTYPE_MOSTLY_MXFP4_MOE}, {"TQ1_0", LLAMA_FTYPE_MOSTLY_TQ1_0},
    {"TQ2_0", LLAMA_FTYPE_MOSTLY_TQ2_0},     {"F16", LLAMA_FTYPE_MOSTLY_F16},
    {"BF16", LLAMA_FTYPE_MOSTLY_BF16},       {"F32", LLAMA_FTYPE_ALL_F32},
    {"IQ2_XXS", LLAMA_FTYPE_MOSTLY_IQ2_XXS}, {"IQ2_XS", LLAMA_FTYPE_MOSTLY_IQ2_XS},
    {"IQ2_S", LLAMA_FTYPE_MOSTLY_IQ2_S},     {"IQ2_M", LLAMA_FTYPE_MOSTLY_IQ2_M},
    {"IQ3_XXS", LLAMA_FTYPE_MOSTLY_IQ3_XXS}, {"IQ3_XS", LLAMA_FTYPE_MOSTLY_IQ3_XS},
    {"IQ3_S", LLAMA_FTYPE_MOSTLY_IQ3_S},     {"IQ3_M", LLAMA_FTYPE_MOSTLY_IQ3_M},
    {"IQ1_S", LLAMA_FTYPE_MOSTLY_IQ1_S},     {"IQ1_M", LLAMA_FTYPE_MOSTLY_IQ1_M},
    {"NVFP4", LLAMA_FTYPE_MOSTLY_NVFP4},     {"Q1_0", LLAMA_FTYPE_MOSTLY_Q1_0},
    {"Q2_0", LLAMA_FTYPE_MOSTLY_Q2_0},
};

// A legacy llama-imatrix .dat file as llama-quantize hands it to the library:
// i32 n; n x {i32 len; name; i32 ncall; i32 nval; f32 x nval}, values / ncall.
// Returns a list ending in a NULL name (and the number of entries), or NULL.
static struct llama_model_imatrix_data *load_imatrix_dat(const char *path) {
    FILE *f = fopen(path, "rb");
    int32_t n = 0;
    if (!f || fread(&n, 4, 1, f) != 1 || n < 1 || n > 1000000) {
        if (f) fclose(f);
        return NULL;
    }
    struct llama_model_imatrix_data *e = calloc((size_t)n + 1, sizeof *e);
    for (int32_t i = 0; e && i < n; i++) {
        int32_t len = 0, ncall = 0, nval = 0;
        char *name = NULL;
        float *v = NULL;
        bool ok = fread(&len, 4, 1, f) == 1 && len > 0 && len < 4096 && (name = calloc(1, (size_t)len + 1)) &&
                  fread(name, 1, (size_t)len, f) == (size_t)len && fread(&ncall, 4, 1, f) == 1 &&
                  fread(&nval, 4, 1, f) == 1 && nval > 0 && (v = malloc((size_t)nval * 4)) &&
                  fread(v, 4, (size_t)nval, f) == (size_t)nval;
        if (!ok) {
            free(name);
            free(v);
            e = NULL; // (a test tool: the partial list leaks)
            break;
        }
        if (ncall > 0)
            for (int32_t k = 0; k < nval; k++) v[k] = v[k] / (float)(int64_t)ncall;
        e[i] = (struct llama_model_imatrix_data){name, v, (size_t)nval};
    }
    fclose(f);
    return e;
}

static int cmd_quantize(const struct opts *o) {
    if (o->n_pos != 3) return fail("usage: quantize IN.gguf OUT.gguf TYPE [-t N] [--pure] ...");
    const char *type = o->pos[2];
    int k = 0, n_ftypes = (int)(sizeof FTYPES / sizeof FTYPES[0]);
    while (k < n_ftypes && !streq_ci(FTYPES[k].name, type)) k++;
    if (k == n_ftypes) return fail("unknown quantization type '%s'", type);
    llama_model_quantize_params qp = L.llama_model_quantize_default_params();
    qp.nthread = o->n_threads;
    qp.ftype = FTYPES[k].ftype;
    qp.pure = o->pure;
    qp.allow_requantize = o->allow_requant;
    qp.quantize_output_tensor = !o->leave_output;
    if (o->out_type != GGML_TYPE_COUNT) qp.output_tensor_type = o->out_type;
    if (o->emb_type != GGML_TYPE_COUNT) qp.token_embedding_type = o->emb_type;
    if (o->imatrix && !(qp.imatrix = load_imatrix_dat(o->imatrix)))
        return fail("cannot read imatrix %s (legacy .dat format only)", o->imatrix);
    double t0 = now_s();
    clear_error();
    uint32_t r = L.llama_model_quantize(o->pos[0], o->pos[1], &qp);
    if (r != 0) return fail("quantize %s -> %s (%s) failed: %s", o->pos[0], o->pos[1], type, llama_error());
    fprintf(stderr, "llamacpp-ref: quantized %s -> %s as %s%s in %.2f s\n", o->pos[0], o->pos[1],
            L.llama_ftype_name(qp.ftype), o->pure ? " (pure)" : "", now_s() - t0);
    return 0;
}

// ---------------------------------------------------------------------------
// eval

int parse_id_list(const char *s, llama_token **out, int *n) {
    int cap = 16, k = 0;
    llama_token *ids = malloc(sizeof *ids * (size_t)cap);
    while (ids) {
        while (*s == ' ' || *s == ',' || *s == '\t' || *s == '\n') s++;
        if (!*s) break;
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < 0 || v > INT32_MAX) return free(ids), fail("bad token id list near '%.20s'", s);
        s = end;
        if (k == cap) {
            llama_token *bigger = realloc(ids, sizeof *ids * (size_t)(cap *= 2));
            if (!bigger) free(ids);
            ids = bigger;
            if (!ids) break;
        }
        ids[k++] = (llama_token)v;
    }
    if (!ids) return fail("out of memory");
    if (k == 0) return free(ids), fail("empty prompt");
    *out = ids;
    *n = k;
    return 0;
}

// Greedy pick: the first (lowest) id among equal maxima.
llama_token argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

// Prints the k best (id, logit) pairs of a row on stderr, ties to the lower id.
static void print_top(int row, const float *x, int n, int k) {
    int best[64], m = 0; // ids, best first
    if (k > 64) k = 64;
    for (int i = 0; i < n; i++) {
        int j;
        if (m < k) j = m++;
        else if (x[i] > x[best[k - 1]]) j = k - 1;
        else continue;
        while (j > 0 && x[i] > x[best[j - 1]]) best[j] = best[j - 1], j--;
        best[j] = i;
    }
    fprintf(stderr, "top row %d:", row);
    for (int j = 0; j < m; j++) fprintf(stderr, " %d:%.6f", best[j], x[best[j]]);
    fputc('\n', stderr);
}

static int run_eval(const struct opts *o, struct llama_model *m, llama_token *prompt, int n_prompt) {
    const struct llama_vocab *vocab = L.llama_model_get_vocab(m);
    const int n_vocab = L.llama_vocab_n_tokens(vocab);
    const int n_gen = o->n_gen < 0 ? 16 : o->n_gen;
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] >= n_vocab) return fail("prompt token %d is outside the vocabulary (%d)", prompt[i], n_vocab);

    struct llama_context_params cp = L.llama_context_default_params();
    cp.n_ctx = o->n_ctx ? (uint32_t)o->n_ctx : (uint32_t)(n_prompt + n_gen);
    cp.n_batch = cp.n_ubatch = (uint32_t)(n_prompt > 512 ? n_prompt : 512); // the prompt is one ubatch
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = o->n_threads;
    cp.flash_attn_type = o->fa == -2 ? LLAMA_FLASH_ATTN_TYPE_DISABLED : (enum llama_flash_attn_type)o->fa;
    cp.type_k = cp.type_v = o->kv_type;
    cp.no_perf = true;
    cp.rope_scaling_type = (enum llama_rope_scaling_type)o->rope_scaling;
    cp.rope_freq_base = o->rope_freq_base;
    cp.rope_freq_scale = o->rope_freq_scale;
    cp.yarn_ext_factor = o->yarn_ext_factor;
    cp.yarn_attn_factor = o->yarn_attn_factor;
    cp.yarn_beta_fast = o->yarn_beta_fast;
    cp.yarn_beta_slow = o->yarn_beta_slow;
    cp.yarn_orig_ctx = (uint32_t)o->yarn_orig_ctx;
    if ((int64_t)n_prompt + n_gen > (int64_t)cp.n_ctx) return fail("n_ctx %u < prompt %d + generated %d", cp.n_ctx, n_prompt, n_gen);
    clear_error();
    struct llama_context *ctx = L.llama_init_from_model(m, cp);
    if (!ctx) return fail("cannot create context (n_ctx %u, kv %s): %s", cp.n_ctx, L.ggml_type_name(o->kv_type), llama_error());

    FILE *lf = NULL;
    int rc = 0;
    if (o->logits_out) {
        int32_t hdr[2] = {n_vocab, n_gen};
        lf = fopen(o->logits_out, "wb");
        if (!lf || fwrite(hdr, sizeof hdr, 1, lf) != 1) rc = fail("cannot write %s: %s", o->logits_out, strerror(errno));
    }
    llama_token *out = malloc(sizeof *out * (size_t)(n_gen + 1));
    if (!out) rc = fail("out of memory");
    // --force: teacher forcing, so that two files' logits can be compared row by row on the same
    // tokens (test_conformance measures llama.cpp's own quantization error with it)
    llama_token *forced = NULL;
    int n_forced = 0;
    if (rc == 0 && o->force && parse_id_list(o->force, &forced, &n_forced) == 0) {
        if (n_forced < n_gen - 1) rc = fail("--force gives %d tokens, -n %d needs %d", n_forced, n_gen, n_gen - 1);
        for (int i = 0; i < n_forced && rc == 0; i++)
            if (forced[i] >= n_vocab) rc = fail("forced token %d is outside the vocabulary (%d)", forced[i], n_vocab);
    } else if (o->force) rc = 1;
    double t0 = now_s(), t_prompt = 0;
    llama_token tok = 0;
    for (int i = 0; i < n_gen && rc == 0; i++) {
        // step 0 decodes the whole prompt; step i decodes generated token i
        struct llama_batch b = i == 0 ? L.llama_batch_get_one(prompt, n_prompt) : L.llama_batch_get_one(&tok, 1);
        int r = L.llama_decode(ctx, b);
        if (r != 0) {
            rc = fail("llama_decode failed (%d) at step %d", r, i);
            break;
        }
        if (i == 0) t_prompt = now_s() - t0;
        const float *logits = L.llama_get_logits_ith(ctx, -1);
        if (!logits) {
            rc = fail("no logits at step %d", i);
            break;
        }
        out[i] = argmax(logits, n_vocab);
        tok = forced ? forced[i < n_forced ? i : n_forced - 1] : out[i];
        if (o->top > 0) print_top(i, logits, n_vocab, o->top);
        if (lf && fwrite(logits, sizeof *logits, (size_t)n_vocab, lf) != (size_t)n_vocab)
            rc = fail("cannot write %s: %s", o->logits_out, strerror(errno));
    }
    free(forced);
    double t_all = now_s() - t0;
    if (lf && fclose(lf) != 0 && rc == 0) rc = fail("cannot write %s: %s", o->logits_out, strerror(errno));
    if (rc == 0) {
        print_ids(out, n_gen);
        fprintf(stderr,
                "llamacpp-ref: eval n_prompt=%d n_gen=%d n_ctx=%u threads=%d kv=%s flash_attn=%s repack=%s cpu=%s "
                "prompt=%.1f ms gen=%.2f ms/tok\n",
                n_prompt, n_gen, L.llama_n_ctx(ctx), o->n_threads, L.ggml_type_name(o->kv_type),
                cp.flash_attn_type == LLAMA_FLASH_ATTN_TYPE_AUTO ? g_fa_resolved
                : cp.flash_attn_type == LLAMA_FLASH_ATTN_TYPE_ENABLED ? "on" : "off",
                o->repack == 1 ? "on" : "off", L.cpu_variant, 1e3 * t_prompt,
                n_gen > 1 ? 1e3 * (t_all - t_prompt) / (n_gen - 1) : 0.0);
    }
    free(out);
    L.llama_free(ctx);
    return rc;
}

static int cmd_eval(const struct opts *o) {
    if (!o->p == !o->prompt_text) return fail("eval needs exactly one of -p \"IDS\" or --prompt-text TEXT");
    // Plain per-type vec_dot kernels unless --repack: the repacked kernels sum in
    // another order, and quantizing activations to Q8 turns that into logit
    // differences of ~0.1 after a few dozen tokens.
    struct llama_model *m = load_model(o, false, o->repack == 1);
    if (!m) return 1;
    llama_token *prompt = NULL;
    int n_prompt = 0, rc;
    if (o->p) rc = parse_id_list(o->p, &prompt, &n_prompt);
    else {
        prompt = tokenize(L.llama_model_get_vocab(m), o->prompt_text, strlen(o->prompt_text), true, false, &n_prompt);
        rc = !prompt ? 1 : n_prompt == 0 ? fail("prompt text gives no tokens") : 0;
    }
    if (rc == 0) rc = run_eval(o, m, prompt, n_prompt);
    free(prompt);
    L.llama_model_free(m);
    return rc;
}

// ---------------------------------------------------------------------------
// embed: llama.cpp's embeddings of one prompt (tokenized with add_special, as its server
// does), in one batch with every token an output. --logits-out writes int32 n, int32 n_rows
// and the rows: with pooling, 1 row of llama_get_embeddings_seq (n_embd, or n_cls_out for
// rank), raw, not normalised; pooling none, one row per token (llama_get_embeddings_ith).


static int cmd_embed(const struct opts *o) {
    if (!o->p == !o->prompt_text) return fail("embed needs exactly one of -p \"IDS\" or --prompt-text TEXT");
    if (!o->logits_out) return fail("embed needs --logits-out PATH");
    struct llama_model *m = load_model(o, false, false);
    if (!m) return 1;
    llama_token *prompt = NULL;
    int n_prompt = 0, rc;
    if (o->p) rc = parse_id_list(o->p, &prompt, &n_prompt);
    else {
        prompt = tokenize(L.llama_model_get_vocab(m), o->prompt_text, strlen(o->prompt_text), true, o->parse_special,
                          &n_prompt);
        rc = !prompt ? 1 : n_prompt == 0 ? fail("prompt text gives no tokens") : 0;
    }
    struct llama_context *ctx = NULL;
    struct llama_batch b = {0};
    if (rc == 0) {
        struct llama_context_params cp = L.llama_context_default_params();
        cp.n_ctx = (uint32_t)(o->n_ctx ? o->n_ctx : n_prompt);
        cp.n_batch = cp.n_ubatch = (uint32_t)(n_prompt > 512 ? n_prompt : 512);
        cp.n_seq_max = 1;
        cp.n_threads = cp.n_threads_batch = o->n_threads;
        cp.flash_attn_type = o->fa == -2 ? LLAMA_FLASH_ATTN_TYPE_DISABLED : (enum llama_flash_attn_type)o->fa;
        cp.type_k = cp.type_v = o->kv_type;
        cp.no_perf = true;
        cp.embeddings = true;
        cp.pooling_type = (enum llama_pooling_type)o->pooling;
        clear_error();
        ctx = L.llama_init_from_model(m, cp);
        if (!ctx) rc = fail("cannot create an embeddings context: %s", llama_error());
    }
    if (rc == 0) {
        b = L.llama_batch_init(n_prompt, 0, 1);
        for (int i = 0; i < n_prompt; i++) batch_put(&b, prompt[i], i, 0, true);
        if (L.llama_decode(ctx, b) != 0) rc = fail("llama_decode failed: %s", llama_error());
    }
    if (rc == 0) {
        bool pooled = L.llama_pooling_type(ctx) != LLAMA_POOLING_TYPE_NONE;
        int32_t hdr[2] = {L.llama_model_n_embd(m), pooled ? 1 : n_prompt};
        if (L.llama_pooling_type(ctx) == LLAMA_POOLING_TYPE_RANK) hdr[0] = (int32_t)L.llama_model_n_cls_out(m);
        FILE *f = fopen(o->logits_out, "wb");
        if (!f || fwrite(hdr, sizeof hdr, 1, f) != 1) rc = fail("cannot write %s", o->logits_out);
        for (int r = 0; rc == 0 && r < hdr[1]; r++) {
            const float *x = pooled ? L.llama_get_embeddings_seq(ctx, 0) : L.llama_get_embeddings_ith(ctx, r);
            if (!x) rc = fail("no embeddings for row %d", r);
            else if (fwrite(x, sizeof *x, (size_t)hdr[0], f) != (size_t)hdr[0]) rc = fail("cannot write %s", o->logits_out);
        }
        if (f && fclose(f) != 0 && rc == 0) rc = fail("cannot write %s", o->logits_out);
        if (rc == 0) fprintf(stderr, "llamacpp-ref: embed n_prompt=%d pooling=%d rows=%d\n", n_prompt,
                             (int)L.llama_pooling_type(ctx), hdr[1]);
    }
    if (b.token) L.llama_batch_free(b);
    if (ctx) L.llama_free(ctx);
    free(prompt);
    L.llama_model_free(m);
    return rc;
}

// Appends one token of one sequence to a batch (llama_batch_init'ed with room for it).
void batch_put(struct llama_batch *b, llama_token t, int pos, int seq, bool logits) {
    int i = b->n_tokens++;
    b->token[i] = t;
    b->pos[i] = pos;
    b->n_seq_id[i] = 1;
    b->seq_id[i][0] = seq;
    b->logits[i] = logits;
}

// ---------------------------------------------------------------------------
// perplexity: llama-perplexity's perplexity and KL-divergence modes
// (tools/perplexity/perplexity.cpp, v0.4.0), with its arithmetic. The text is
// tokenized as it does (common_tokenize(ctx, text, true): BOS first when the
// vocab adds one, special tokens not parsed) and cut into n_chunk = n / c
// chunks of c tokens. Each chunk is decoded from a cleared cache with its
// first token replaced by BOS (when the vocab adds one); the logits of
// positions [c/2, c-1) score the next token. Defaults are llama-perplexity's:
// c 512, F16 KV cache, flash attention auto, repacking on. One difference of
// form: one chunk per llama_decode (llama-perplexity packs n_batch / c chunks
// into one batch as separate sequences; each position sees the same tokens).
//
// --kl-divergence-base FILE writes llama-perplexity's logits file (layout in
// src/cli/kld.h: header, the tokens, then per scored position log-probabilities
// as 16-bit steps over the 16 nats under the top one). --kl-divergence reads one
// (from llama-perplexity, this command or `brisk perplexity`: a trailer after
// the records is ignored), runs its tokens and reports llama-perplexity's
// statistics against it.

#define PPL_SPAN 16.0f // nats under the top log-probability that a record keeps

static int nearest_int(float fval) { // llama-perplexity's rounding (to nearest, ties to even)
    float val = fval + 12582912.f;
    int i;
    memcpy(&i, &val, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

// One position's record (nv uint16: float scale, float min_lp, then n_vocab steps) from its
// logits; returns -log p(tok). llama-perplexity's log_softmax with a log_prob output.
static double ppl_encode(int n_vocab, const float *logits, uint16_t *rec, int tok) {
    float mx = logits[0], mn = logits[0];
    for (int i = 1; i < n_vocab; i++) {
        mx = logits[i] > mx ? logits[i] : mx;
        mn = logits[i] < mn ? logits[i] : mn;
    }
    mn = mn > mx - PPL_SPAN ? mn : mx - PPL_SPAN;
    double sum_exp = 0;
    for (int i = 0; i < n_vocab; i++) sum_exp += expf(logits[i] - mx);
    const float lse = (float)log(sum_exp), min_lp = mn - mx - lse, scale = (mx - mn) / 65535.f;
    memcpy(rec, &scale, sizeof scale);
    memcpy(rec + 2, &min_lp, sizeof min_lp);
    uint16_t *q = rec + 4;
    const float inv = scale != 0 ? 1 / scale : 0;
    for (int i = 0; i < n_vocab; i++) q[i] = scale != 0 && logits[i] > mn ? (uint16_t)nearest_int(inv * (logits[i] - mn)) : 0;
    return mx + lse - logits[tok];
}

struct kld_sums { // llama-perplexity's kl_divergence_result
    double nll, nll2, nll_b, nll_b2, nll_nll_b, kld, kld2, dp, dp2, dp4;
    long same_top, count;
};

// One position against the base's record: llama-perplexity's KL log_softmax. Returns its KLD;
// *dp gets p(tok) - p_base(tok).
static double ppl_kld(int n_vocab, const float *logits, const uint16_t *rec, int tok, struct kld_sums *s, float *dp) {
    float mx = logits[0];
    int imax = 0;
    for (int i = 1; i < n_vocab; i++)
        if (logits[i] > mx) mx = logits[i], imax = i;
    double sum_exp = 0;
    for (int i = 0; i < n_vocab; i++) sum_exp += expf(logits[i] - mx);
    const float lse = (float)log(sum_exp);
    float scale, min_lp;
    memcpy(&scale, rec, sizeof scale);
    memcpy(&min_lp, rec + 2, sizeof min_lp);
    const uint16_t *q = rec + 4;
    const float nll = mx + lse - logits[tok], nll_b = -(scale * q[tok] + min_lp);
    s->nll += nll, s->nll2 += nll * nll;
    s->nll_b += nll_b, s->nll_b2 += nll_b * nll_b, s->nll_nll_b += nll * nll_b;
    mx += lse;
    double kld = 0;
    int imax_b = 0;
    float lp_b_max = 0;
    for (int i = 0; i < n_vocab; i++) {
        const float lp_b = scale * q[i] + min_lp;
        if (i == 0 || lp_b > lp_b_max) lp_b_max = lp_b, imax_b = i;
        if (lp_b > -PPL_SPAN) kld += expf(lp_b) * (lp_b - logits[i] + mx);
    }
    s->kld += kld, s->kld2 += kld * kld;
    s->count++;
    s->same_top += imax == imax_b;
    *dp = expf(-nll) - expf(-nll_b);
    const double d2 = (double)*dp * *dp;
    s->dp += *dp, s->dp2 += d2, s->dp4 += d2 * d2;
    return kld;
}

static void mean_unc(double sum, double sum2, long n, double *mean, double *unc) {
    *mean = n > 0 ? sum / n : 0;
    double v = n > 0 ? sum2 / n - *mean * *mean : 0;
    *unc = v > 0 && n > 10 ? sqrt(v / (n - 1)) : 0;
}

static int cmp_f32(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static float pct(const float *v, long n, float f) { // llama-perplexity's percentile of sorted v
    if (f <= 0) return v[0];
    if (f >= 1) return v[n - 1];
    float p = f * (float)(n - 1);
    long i = (long)p;
    p -= (float)i;
    return (1 - p) * v[i] + p * v[i + 1 < n ? i + 1 : n - 1];
}

// llama-perplexity's final KL-divergence report (the lines the bench scripts read).
static void ppl_kld_report(const struct kld_sums *s, float *klds, float *dps) {
    double lp, elp, lb, elb, kl, ekl, d2, ed2;
    mean_unc(s->nll, s->nll2, s->count, &lp, &elp);
    mean_unc(s->nll_b, s->nll_b2, s->count, &lb, &elb);
    mean_unc(s->kld, s->kld2, s->count, &kl, &ekl);
    mean_unc(s->dp2, s->dp4, s->count, &d2, &ed2);
    const double n = (double)s->count, cov = s->count < 10 ? 0 : (s->nll_nll_b / n - (s->nll / n) * (s->nll_b / n)) / (n - 1);
    const double lr = lp - lb, elr = sqrt(fmax(0, elp * elp + elb * elb - 2 * cov)), top = s->same_top / n;
    qsort(klds, (size_t)s->count, sizeof *klds, cmp_f32);
    qsort(dps, (size_t)s->count, sizeof *dps, cmp_f32);
    printf("\n====== Perplexity statistics (%ld positions) ======\n", s->count);
    printf("Mean PPL(Q)                   : %10.6f ± %10.6f\n", exp(lp), exp(lp) * elp);
    printf("Mean PPL(base)                : %10.6f ± %10.6f\n", exp(lb), exp(lb) * elb);
    printf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", elp > 0 && elb > 0 ? 100 * cov / (elp * elb) : 0);
    printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", lr, elr);
    printf("Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n", exp(lr), exp(lr) * elr);
    printf("\n====== KL divergence statistics ======\n");
    printf("Mean    KLD: %10.6f ± %10.6f\n", kl, ekl);
    printf("Maximum KLD: %10.6f\n99.9%%   KLD: %10.6f\n99.0%%   KLD: %10.6f\nMedian  KLD: %10.6f\n",
           klds[s->count - 1], pct(klds, s->count, 0.999f), pct(klds, s->count, 0.99f), pct(klds, s->count, 0.5f));
    printf("\n====== Token probability statistics ======\n");
    printf("Maximum Δp: %6.3f%%\nMinimum Δp: %6.3f%%\n", 100 * dps[s->count - 1], 100 * dps[0]);
    printf("RMS Δp    : %6.3f ± %5.3f %%\n", 100 * sqrt(d2), d2 > 0 ? 100 * 0.5 / sqrt(d2) * ed2 : 0);
    printf("Same top p: %6.3f ± %5.3f %%\n", 100 * top, 100 * sqrt(top * (1 - top) / (n - 1)));
}

// Reads a logits file's header and tokens (the first n_chunks_max chunks when > 0), leaving f
// at the first record. 0 or an error.
static int ppl_read_base(FILE *f, const char *path, int n_chunks_max, int *n_ctx, int *n_vocab, int *n_chunk,
                         llama_token **tokens) {
    char magic[8];
    uint32_t c;
    int32_t hv[2];
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, "_logits_", 8) || fread(&c, 4, 1, f) != 1 || fread(hv, 4, 2, f) != 2)
        return fail("%s is not a logits file (llama-perplexity's, starting \"_logits_\")", path);
    if (c < 4 || c > (1u << 20) || hv[0] < 1 || hv[1] < 1) return fail("%s: bad header", path);
    *n_ctx = (int)c, *n_vocab = hv[0], *n_chunk = hv[1];
    size_t nt = (size_t)c * (size_t)hv[1];
    if (!(*tokens = malloc(nt * sizeof **tokens)) || fread(*tokens, sizeof **tokens, nt, f) != nt)
        return fail("%s: truncated in its tokens", path);
    if (n_chunks_max > 0 && n_chunks_max < *n_chunk) *n_chunk = n_chunks_max;
    return 0;
}

static int cmd_perplexity(const struct opts *o) {
    if (o->kl ? !o->kl_base || o->text_file : !o->text_file)
        return fail(o->kl ? "--kl-divergence needs --kl-divergence-base FILE and no -f (the file holds the tokens)"
                          : "perplexity needs -f TEXT");
    struct llama_model *m = load_model(o, false, o->repack != 0);
    if (!m) return 1;
    const struct llama_vocab *vocab = L.llama_model_get_vocab(m);
    const int n_vocab = L.llama_vocab_n_tokens(vocab);
    const bool add_bos = L.llama_vocab_get_add_bos(vocab);
    int n_ctx = o->n_ctx ? o->n_ctx : 512, n_chunk = 0, n_tok = 0, rc = 0, fv = 0;
    llama_token *tokens = NULL;
    FILE *bf = NULL; // the logits file: written, or read (--kl-divergence)
    if (L.llama_vocab_get_add_eos(vocab)) rc = fail("the vocab adds EOS (llama-perplexity refuses it too)");
    else if (o->kl) {
        if (!(bf = fopen(o->kl_base, "rb"))) rc = fail("cannot open %s: %s", o->kl_base, strerror(errno));
        else if (!(rc = ppl_read_base(bf, o->kl_base, o->n_chunks, &n_ctx, &fv, &n_chunk, &tokens)) && fv != n_vocab)
            rc = fail("%s holds %d logits per position, the model %d", o->kl_base, fv, n_vocab);
    } else {
        FILE *tf = fopen(o->text_file, "rb");
        size_t len = 0;
        char *text = tf ? read_all(tf, &len) : NULL;
        if (tf) fclose(tf);
        if (!text) rc = fail("cannot read %s", o->text_file);
        else if (!(tokens = tokenize(vocab, text, len, true, false, &n_tok))) rc = 1;
        else if (n_tok < 2 * n_ctx) rc = fail("%s has %d tokens: fewer than 2 x -c %d (llama-perplexity's minimum)", o->text_file, n_tok, n_ctx);
        free(text);
        n_chunk = n_tok / n_ctx;
        if (o->n_chunks > 0 && o->n_chunks < n_chunk) n_chunk = o->n_chunks;
    }
    const int first = n_ctx / 2, scored = n_ctx - 1 - first, nv = 2 * ((n_vocab + 1) / 2) + 4;
    struct llama_context *ctx = NULL;
    imx *im = NULL; // imatrix: llama-imatrix's statistics, gathered through cb_eval
    if (rc == 0 && o->imatrix_out && (o->kl || !(im = imx_new(n_ctx)))) rc = fail(o->kl ? "imatrix takes no --kl-divergence" : "out of memory");
    if (rc == 0) {
        struct llama_context_params cp = L.llama_context_default_params();
        cp.cb_eval = im ? imx_collect : NULL;
        cp.cb_eval_user_data = im;
        cp.n_ctx = cp.n_batch = cp.n_ubatch = (uint32_t)n_ctx;
        cp.n_seq_max = 1;
        cp.n_threads = cp.n_threads_batch = o->n_threads;
        cp.flash_attn_type = o->fa == -2 ? LLAMA_FLASH_ATTN_TYPE_AUTO : (enum llama_flash_attn_type)o->fa;
        cp.type_k = cp.type_v = o->kv_type;
        cp.no_perf = true;
        clear_error();
        if (!(ctx = L.llama_init_from_model(m, cp)))
            rc = fail("cannot create context (n_ctx %d, kv %s): %s", n_ctx, L.ggml_type_name(o->kv_type), llama_error());
    }
    if (rc == 0 && !o->kl && o->kl_base) {
        int32_t hv[2] = {n_vocab, n_chunk};
        uint32_t c = (uint32_t)n_ctx;
        if (!(bf = fopen(o->kl_base, "wb")) || fwrite("_logits_", 1, 8, bf) != 8 || fwrite(&c, 4, 1, bf) != 1 ||
            fwrite(hv, 4, 2, bf) != 2 || fwrite(tokens, 4, (size_t)n_chunk * n_ctx, bf) != (size_t)n_chunk * n_ctx)
            rc = fail("cannot write %s: %s", o->kl_base, strerror(errno));
    }
    struct llama_batch b = L.llama_batch_init(n_ctx, 0, 1);
    uint16_t *recs = malloc((size_t)scored * nv * sizeof *recs); // one chunk's records
    float *klds = o->kl ? malloc((size_t)n_chunk * scored * sizeof *klds) : NULL;
    float *dps = o->kl ? malloc((size_t)n_chunk * scored * sizeof *dps) : NULL;
    if (rc == 0 && (!recs || (o->kl && (!klds || !dps)))) rc = fail("out of memory");
    struct kld_sums ks = {0};
    double nll = 0, nll2 = 0, t0 = now_s();
    long count = 0;
    fprintf(stderr, "llamacpp-ref: perplexity %d chunks of %d, kv %s, flash_attn %s, threads %d%s%s\n", n_chunk, n_ctx,
            L.ggml_type_name(o->kv_type), o->fa == -2 ? "auto" : o->fa == LLAMA_FLASH_ATTN_TYPE_ENABLED ? "on" : "off",
            o->n_threads, o->kl ? ", against " : "", o->kl ? o->kl_base : "");
    for (int c = 0; c < n_chunk && rc == 0; c++) {
        const llama_token *ct = tokens + (size_t)c * n_ctx;
        L.llama_memory_clear(L.llama_get_memory(ctx), true);
        b.n_tokens = 0;
        for (int k = 0; k < n_ctx; k++)
            batch_put(&b, k == 0 && add_bos ? L.llama_vocab_bos(vocab) : ct[k], k, 0, k >= first);
        if (L.llama_decode(ctx, b) != 0) {
            rc = fail("llama_decode failed at chunk %d: %s", c, llama_error());
            break;
        }
        if (o->kl && fread(recs, sizeof *recs * nv, (size_t)scored, bf) != (size_t)scored) {
            rc = fail("%s: truncated at chunk %d", o->kl_base, c);
            break;
        }
        for (int i = first; i < n_ctx - 1; i++) {
            const float *lg = L.llama_get_logits_ith(ctx, i);
            uint16_t *rec = recs + (size_t)(i - first) * nv;
            if (o->kl) {
                long k = (long)c * scored + (i - first);
                klds[k] = (float)ppl_kld(n_vocab, lg, rec, ct[i + 1], &ks, &dps[k]);
            } else {
                const double v = ppl_encode(n_vocab, lg, rec, ct[i + 1]);
                nll += v, nll2 += v * v, count++;
            }
        }
        if (!o->kl && bf && fwrite(recs, sizeof *recs * nv, (size_t)scored, bf) != (size_t)scored)
            rc = fail("cannot write %s: %s", o->kl_base, strerror(errno));
        if (o->kl) fprintf(stderr, "[%d]%.4f%s", c + 1, exp(ks.nll / ks.count), c + 1 < n_chunk ? "," : "\n");
        else printf("[%d]%.4f%s", c + 1, exp(nll / count), c + 1 < n_chunk ? "," : "\n");
        fflush(stdout);
    }
    if (bf && fclose(bf) != 0 && !o->kl && rc == 0) rc = fail("cannot write %s: %s", o->kl_base, strerror(errno));
    if (bf && !o->kl && rc != 0) remove(o->kl_base); // no half-written base left behind
    if (rc == 0 && o->kl) ppl_kld_report(&ks, klds, dps);
    if (rc == 0 && !o->kl) {
        double mean = nll / count, var = nll2 / count - mean * mean;
        printf("Final estimate: PPL = %.4f +/- %.5f over %ld tokens (%.1f s)\n", exp(mean),
               var > 0 ? sqrt(var / (count - 1)) * exp(mean) : 0, count, now_s() - t0);
    }
    if (rc == 0 && im) rc = imx_write(im, o->imatrix_out, n_chunk, o->text_file);
    imx_free(im);
    free(recs);
    free(klds);
    free(dps);
    free(tokens);
    L.llama_batch_free(b);
    if (ctx) L.llama_free(ctx);
    L.llama_model_free(m);
    return rc;
}

// ---------------------------------------------------------------------------
// bench: llama-bench's methodology (tools/llama-bench/llama-bench.cpp, v0.4.0).
// One context per test with n_ctx = n_prompt + n_gen of that test, n_batch
// 2048, n_ubatch 512, F16 KV cache (--kv T: T), flash attention auto, a ggml threadpool of
// t threads (poll 50) attached, one warmup run, then r timed repetitions on a
// cleared cache. Token ids come from rand() with the default seed, the first
// prompt token being BOS when the vocab adds one, exactly as llama-bench does.
// -d N (llama-bench's depth): each run, warmup included, first decodes N random
// tokens untimed, so the timed tokens attend to N earlier positions.

struct bench_result {
    double mean, sd; // tokens per second over the repetitions
};

static int bench_prompt(struct llama_context *ctx, const struct llama_vocab *vocab, int n_prompt, int n_batch,
                        llama_token *buf) {
    int n_vocab = L.llama_vocab_n_tokens(vocab);
    for (int done = 0; done < n_prompt;) {
        int n = n_prompt - done < n_batch ? n_prompt - done : n_batch;
        buf[0] = done == 0 && L.llama_vocab_get_add_bos(vocab) ? L.llama_vocab_bos(vocab) : rand() % n_vocab;
        for (int i = 1; i < n; i++) buf[i] = rand() % n_vocab;
        if (L.llama_decode(ctx, L.llama_batch_get_one(buf, n)) != 0) return fail("decode of a prompt batch failed");
        done += n;
    }
    L.llama_synchronize(ctx);
    return 0;
}

static int bench_gen(struct llama_context *ctx, const struct llama_vocab *vocab, int n_gen, bool after_depth) {
    int n_vocab = L.llama_vocab_n_tokens(vocab);
    llama_token tok = !after_depth && L.llama_vocab_get_add_bos(vocab) ? L.llama_vocab_bos(vocab) : rand() % n_vocab;
    for (int i = 0; i < n_gen; i++) {
        if (L.llama_decode(ctx, L.llama_batch_get_one(&tok, 1)) != 0) return fail("decode of a generated token failed");
        L.llama_synchronize(ctx);
        tok = rand() % n_vocab;
    }
    return 0;
}

static int bench_one(const struct opts *o, struct llama_model *m, int n_prompt, int n_gen, struct bench_result *res) {
    const struct llama_vocab *vocab = L.llama_model_get_vocab(m);
    struct llama_context_params cp = L.llama_context_default_params();
    cp.n_ctx = o->n_ctx ? (uint32_t)o->n_ctx : (uint32_t)(o->depth + n_prompt + n_gen);
    cp.n_batch = 2048;
    cp.n_ubatch = 512;
    cp.type_k = cp.type_v = g_kv_given ? o->kv_type : GGML_TYPE_F16; // --kv T: llama-bench's -ctk/-ctv T
    cp.flash_attn_type = o->fa == -2 ? LLAMA_FLASH_ATTN_TYPE_AUTO : (enum llama_flash_attn_type)o->fa;
    cp.swa_full = false;
    cp.n_threads = cp.n_threads_batch = o->n_threads;
    clear_error();
    struct llama_context *ctx = L.llama_init_from_model(m, cp);
    if (!ctx) return fail("cannot create context (n_ctx %u): %s", cp.n_ctx, llama_error());
    struct ggml_threadpool_params tpp = L.ggml_threadpool_params_default(o->n_threads);
    tpp.poll = 50;
    struct ggml_threadpool *tp = L.ggml_threadpool_new(&tpp);
    double *tps = malloc(sizeof *tps * (size_t)o->reps);
    llama_token *buf = malloc(sizeof *buf * 2048);
    int rc = !tp || !tps || !buf ? fail("cannot create threadpool or buffers") : 0;
    if (rc == 0) {
        L.llama_attach_threadpool(ctx, tp, NULL);
        L.llama_set_n_threads(ctx, o->n_threads, o->n_threads);
        L.llama_memory_clear(L.llama_get_memory(ctx), false);
        if (o->depth) rc = bench_prompt(ctx, vocab, o->depth, 2048, buf);
        if (rc == 0) // warmup
            rc = n_prompt > 0 ? bench_prompt(ctx, vocab, n_prompt, 2048, buf) : bench_gen(ctx, vocab, 1, o->depth > 0);
    }
    for (int r = 0; r < o->reps && rc == 0; r++) {
        L.llama_memory_clear(L.llama_get_memory(ctx), false);
        if (o->depth && (rc = bench_prompt(ctx, vocab, o->depth, 2048, buf))) break;
        double t0 = now_s();
        rc = n_prompt > 0 ? bench_prompt(ctx, vocab, n_prompt, 2048, buf) : bench_gen(ctx, vocab, n_gen, o->depth > 0);
        tps[r] = (n_prompt + n_gen) / (now_s() - t0);
    }
    if (rc == 0) {
        double sum = 0, sq = 0;
        for (int r = 0; r < o->reps; r++) sum += tps[r];
        res->mean = sum / o->reps;
        for (int r = 0; r < o->reps; r++) sq += (tps[r] - res->mean) * (tps[r] - res->mean);
        res->sd = o->reps > 1 ? sqrt(sq / (o->reps - 1)) : 0;
    }
    free(buf);
    free(tps);
    L.llama_free(ctx);
    if (tp) L.ggml_threadpool_free(tp);
    return rc;
}

static void json_str(const char *s) { // prints s as a JSON string
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

static int cmd_bench(const struct opts *o) {
    int n_prompt = 512, n_gen = o->n_gen < 0 ? 128 : o->n_gen;
    if (o->p && !parse_int(o->p, 0, 1 << 20, &n_prompt)) return fail("bad -p '%s' (a token count)", o->p);
    struct llama_model *m = load_model(o, false, o->repack != 0);
    if (!m) return 1;
    char desc[256];
    L.llama_model_desc(m, desc, sizeof desc);
    srand(1); // std::rand()'s sequence without a seed, as in llama-bench
    int rc = 0;
    for (int k = 0; k < 2 && rc == 0; k++) {
        int np = k == 0 ? n_prompt : 0, ng = k == 0 ? 0 : n_gen;
        if (np + ng == 0) continue;
        g_fa_resolved = "?";
        struct bench_result res = {0};
        rc = bench_one(o, m, np, ng, &res);
        if (rc) break;
        printf("{\"test\":\"%s%d\",\"depth\":%d,\"kv\":\"%s\",\"t\":%d,\"tps_mean\":%.3f,\"tps_sd\":%.3f,\"peak_rss_mb\":%.1f,\"reps\":%d,"
               "\"flash_attn\":\"%s\",\"repack\":%s,\"cpu\":",
               np ? "pp" : "tg", np ? np : ng, o->depth, L.ggml_type_name(g_kv_given ? o->kv_type : GGML_TYPE_F16),
               o->n_threads, res.mean, res.sd, peak_rss_mb(), o->reps,
               o->fa == LLAMA_FLASH_ATTN_TYPE_DISABLED  ? "off"
               : o->fa == LLAMA_FLASH_ATTN_TYPE_ENABLED ? "on" : g_fa_resolved, o->repack != 0 ? "true" : "false");
        json_str(L.cpu_variant);
        printf(",\"model\":");
        json_str(desc);
        printf("}\n");
        fflush(stdout);
    }
    L.llama_model_free(m);
    return rc;
}

// ---------------------------------------------------------------------------
// batched: llama.cpp's batched-bench (tools/batched-bench, v0.4.0) for the
// server comparison: one context with n_seq_max = the largest B, n_ctx =
// B_max * (P + N) unless -c, n_batch 2048, n_ubatch 512, F16 KV cache (not
// unified), flash attention auto. For each B: the cache cleared, B prompts of
// P random tokens decoded together (logits for each last one), then N steps
// of one token per sequence. Prints one JSON line per B: prompt and
// generation tokens/s of all sequences together (S_PP, S_TG), as batched-bench.

static int batched_decode(struct llama_context *ctx, struct llama_batch *b, int n_batch) {
    for (int i = 0; i < b->n_tokens; i += n_batch) {
        int n = b->n_tokens - i < n_batch ? b->n_tokens - i : n_batch;
        struct llama_batch v = {n, b->token + i, NULL, b->pos + i, b->n_seq_id + i, b->seq_id + i, b->logits + i};
        if (L.llama_decode(ctx, v) != 0) return fail("batched: decode of %d tokens failed: %s", n, llama_error());
    }
    L.llama_synchronize(ctx);
    return 0;
}

static int cmd_batched(const struct opts *o) {
    int pp = 128, tg = o->n_gen < 0 ? 128 : o->n_gen, pl[16], n_pl = 0, pl_max = 0;
    if (o->p && !parse_int(o->p, 1, 1 << 20, &pp)) return fail("bad -p '%s' (a token count)", o->p);
    char list[256];
    snprintf(list, sizeof list, "%s", o->npl ? o->npl : "1,8,32,64");
    for (char *save = NULL, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (n_pl == 16 || !parse_int(t, 1, 4096, &pl[n_pl])) return fail("bad -npl '%s' (up to 16 counts)", o->npl);
        if (pl[n_pl] > pl_max) pl_max = pl[n_pl];
        n_pl++;
    }
    struct llama_model *m = load_model(o, false, o->repack != 0);
    if (!m) return 1;
    const struct llama_vocab *vocab = L.llama_model_get_vocab(m);
    int n_vocab = L.llama_vocab_n_tokens(vocab);
    char desc[256];
    L.llama_model_desc(m, desc, sizeof desc);
    struct llama_context_params cp = L.llama_context_default_params();
    cp.n_ctx = o->n_ctx ? (uint32_t)o->n_ctx : (uint32_t)(pl_max * (pp + tg));
    cp.n_batch = 2048;
    cp.n_ubatch = 512;
    cp.n_seq_max = (uint32_t)pl_max;
    cp.kv_unified = false;
    cp.type_k = cp.type_v = GGML_TYPE_F16;
    cp.flash_attn_type = o->fa == -2 ? LLAMA_FLASH_ATTN_TYPE_AUTO : (enum llama_flash_attn_type)o->fa;
    cp.n_threads = cp.n_threads_batch = o->n_threads;
    clear_error();
    struct llama_context *ctx = L.llama_init_from_model(m, cp);
    if (!ctx) {
        L.llama_model_free(m);
        return fail("cannot create context (n_ctx %u, %d sequences): %s", cp.n_ctx, pl_max, llama_error());
    }
    struct ggml_threadpool_params tpp = L.ggml_threadpool_params_default(o->n_threads);
    tpp.poll = 50;
    struct ggml_threadpool *tp = L.ggml_threadpool_new(&tpp);
    int cap = pl_max * pp > pl_max ? pl_max * pp : pl_max;
    struct llama_batch b = L.llama_batch_init(cap < 16 ? 16 : cap, 0, 1);
    int rc = tp ? 0 : fail("cannot create a threadpool");
    if (rc == 0) {
        L.llama_attach_threadpool(ctx, tp, NULL);
        L.llama_set_n_threads(ctx, o->n_threads, o->n_threads);
        b.n_tokens = 0; // warmup, as batched-bench: 16 tokens of sequence 0
        for (int i = 0; i < 16; i++) batch_put(&b, rand() % n_vocab, i, 0, false);
        rc = batched_decode(ctx, &b, 2048);
    }
    for (int k = 0; k < n_pl && rc == 0; k++) {
        int B = pl[k];
        if ((uint32_t)(B * (pp + tg)) > L.llama_n_ctx(ctx)) continue;
        double spp = 0, stg = 0, tpp_s = 0, ttg_s = 0;
        for (int r = 0; r < o->reps && rc == 0; r++) {
            L.llama_memory_clear(L.llama_get_memory(ctx), false);
            b.n_tokens = 0;
            for (int j = 0; j < B; j++)
                for (int i = 0; i < pp; i++) batch_put(&b, rand() % n_vocab, i, j, i == pp - 1);
            double t0 = now_s();
            rc = batched_decode(ctx, &b, 2048);
            double t1 = now_s();
            for (int i = 0; i < tg && rc == 0; i++) {
                b.n_tokens = 0;
                for (int j = 0; j < B; j++) batch_put(&b, rand() % n_vocab, pp + i, j, true);
                rc = batched_decode(ctx, &b, 2048);
            }
            double t2 = now_s();
            tpp_s += t1 - t0;
            ttg_s += t2 - t1;
            spp += B * pp / (t1 - t0);
            stg += B * tg / (t2 - t1);
        }
        if (rc) break;
        printf("{\"test\":\"batched\",\"pp\":%d,\"tg\":%d,\"pl\":%d,\"t\":%d,\"reps\":%d,\"t_pp\":%.4f,\"speed_pp\":%.3f,"
               "\"t_tg\":%.4f,\"speed_tg\":%.3f,\"flash_attn\":\"%s\",\"cpu\":",
               pp, tg, B, o->n_threads, o->reps, tpp_s / o->reps, spp / o->reps, ttg_s / o->reps, stg / o->reps,
               o->fa == LLAMA_FLASH_ATTN_TYPE_DISABLED  ? "off"
               : o->fa == LLAMA_FLASH_ATTN_TYPE_ENABLED ? "on" : g_fa_resolved);
        json_str(L.cpu_variant);
        printf(",\"model\":");
        json_str(desc);
        printf("}\n");
        fflush(stdout);
    }
    L.llama_batch_free(b);
    L.llama_free(ctx);
    if (tp) L.ggml_threadpool_free(tp);
    L.llama_model_free(m);
    return rc;
}

// ---------------------------------------------------------------------------
// info

static int cmd_info(const struct opts *o) {
    struct llama_model *m = load_model(o, false, false);
    if (!m) return 1;
    char desc[256];
    L.llama_model_desc(m, desc, sizeof desc);
    printf("n_vocab %d\nn_ctx_train %d\nn_embd %d\nn_layer %d\nn_params %llu\nsize_bytes %llu\ndesc %s\ncpu %s\n",
           L.llama_vocab_n_tokens(L.llama_model_get_vocab(m)), L.llama_model_n_ctx_train(m), L.llama_model_n_embd(m),
           L.llama_model_n_layer(m), (unsigned long long)L.llama_model_n_params(m),
           (unsigned long long)L.llama_model_size(m), desc, L.cpu_variant);
    L.llama_model_free(m);
    return 0;
}

// ---------------------------------------------------------------------------

static void usage(void) {
    fputs("usage: llamacpp-ref COMMAND [--libdir DIR] [--cpu-variant V] [-v] ...\n"
          "  DIR defaults to $LLAMACPP_LIBDIR; V pins libggml-cpu-V.so (haswell, zen4, ...)\n"
          "  tokenize -m FILE [--add-special] [--parse-special]       < text   -> ids on stdout\n"
          "  quantize IN.gguf OUT.gguf TYPE [-t N] [--pure] [--output-tensor-type T]\n"
          "           [--token-embedding-type T] [--allow-requantize] [--leave-output-tensor]\n"
          "           [--imatrix FILE.dat]\n"
          "  eval -m FILE (-p \"1 2 3\" | --prompt-text TEXT) [-n 16] [-c N] [-t N] [--kv f32]\n"
          "       [--fa off|on|auto] [--repack] [--logits-out PATH] [--top K] [--force \"IDS\"]\n"
          "       (--force: the tokens fed after the prompt, instead of the greedy picks)\n"
          "       [--rope-scaling none|linear|yarn] [--rope-scale N] [--rope-freq-base N] [--rope-freq-scale N]\n"
          "       [--yarn-orig-ctx N] [--yarn-ext-factor N] [--yarn-attn-factor N] [--yarn-beta-fast N]\n"
          "       [--yarn-beta-slow N]   (llama.cpp's flags, into llama_context_params)\n"
          "  embed -m FILE (-p \"1 2 3\" | --prompt-text TEXT) --logits-out PATH [--pooling none|mean|cls|last|rank]\n"
          "       [--parse-special]   (pooled row, or one row per token; raw, not normalised)\n"
          "  perplexity -m FILE -f TEXT [-c 512] [--chunks N] [--kv f16] [--fa auto|on|off] [--no-repack] [-t N]\n"
          "       [--kl-divergence-base FILE]   (llama-perplexity; FILE: its logits file, written)\n"
          "  perplexity -m FILE --kl-divergence --kl-divergence-base FILE [--chunks N] [--kv T] ...\n"
          "       (FILE's tokens and -c; KL divergence, PPL ratio and same top token against it)\n"
          "  imatrix -m FILE -f TEXT -o OUT.dat [-c 512] [--chunks N] [-t N]\n"
          "       (perplexity's run gathering llama-imatrix's statistics; OUT: its legacy .dat)\n"
          "  bench -m FILE [-p 512] [-n 128] [-d 0] [-t N] [-r 5] [-c N] [--kv f16] [--fa auto|on|off] [--no-repack]\n"
          "  batched -m FILE [-p 128] [-n 128] [-npl 1,8,32,64] [-t N] [-r 5] [-c N] [--fa auto|on|off]\n"
          "  mtp -m FILE -p \"1 2 3\" [-n 4] [-t N] [--kv f32] [--logits-out PATH]\n"
          "       (the MTP head as --spec-type draft-mtp drives it: logits of the catch-up over the prompt,\n"
          "       then of n chained greedy drafts after the target's greedy token)\n"
          "  eagle3 -m TARGET DRAFT -p \"1 2 3\" [-n 4] [-t N] [--kv f32] [--logits-out PATH]\n"
          "       (an EAGLE-3 drafter as --spec-type draft-eagle3 drives it: logits of the catch-up over the\n"
          "       prompt's pairs, then of n chained greedy drafts after the target's greedy token)\n"
          "  info -m FILE\n",
          stderr);
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage();
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    int (*run)(const struct opts *) = !strcmp(cmd, "tokenize") ? cmd_tokenize
                                      : !strcmp(cmd, "quantize") ? cmd_quantize
                                      : !strcmp(cmd, "eval")     ? cmd_eval
                                      : !strcmp(cmd, "embed")    ? cmd_embed
                                      : !strcmp(cmd, "perplexity") ? cmd_perplexity
                                      : !strcmp(cmd, "imatrix")  ? cmd_perplexity
                                      : !strcmp(cmd, "bench")    ? cmd_bench
                                      : !strcmp(cmd, "batched")  ? cmd_batched
                                      : !strcmp(cmd, "mtp")      ? cmd_mtp
                                      : !strcmp(cmd, "eagle3")   ? cmd_eagle3
                                      : !strcmp(cmd, "info")     ? cmd_info : NULL;
    if (!run) return usage(), fail("unknown command '%s'", cmd);
    struct opts o;
    if (parse_opts(argc, argv, &o)) return 1;
    if (!strcmp(cmd, "imatrix") && !o.imatrix_out) return fail("imatrix needs -o OUT.dat");
    if (strcmp(cmd, "imatrix")) o.imatrix_out = NULL;
    if ((!strcmp(cmd, "perplexity") || !strcmp(cmd, "imatrix")) && !g_kv_given) g_kv_name = "f16"; // llama-perplexity's default
    // quiet by default; quantize shows its warnings (which tensors fell back to another type)
    if (o.verbose) g_log_min = GGML_LOG_LEVEL_DEBUG, g_log_max = GGML_LOG_LEVEL_ERROR;
    else if (!strcmp(cmd, "quantize")) g_log_min = g_log_max = GGML_LOG_LEVEL_WARN;
    if (load_llamacpp(o.libdir ? o.libdir : default_libdir(), o.cpu_variant) || resolve_types(&o)) return 1;
    int rc = run(&o);
    L.llama_backend_free();
    return rc;
}
