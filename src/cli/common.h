/* common.h — helpers shared by the subcommands: strict number parsing,
 * reading files, time, memory. */
#ifndef BK_CLI_COMMON_H
#define BK_CLI_COMMON_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "brisk.h"

/* Parse the value of flag `flag`; on failure print an error and return false. */
bool cli_int(const char *flag, const char *s, long lo, long hi, int *out);
bool cli_u64(const char *flag, const char *s, uint64_t *out);
bool cli_float(const char *flag, const char *s, double lo, double hi, float *out);
/* Returns the next argument after argv[*i] or NULL (and prints an error). */
const char *cli_next(int argc, char **argv, int *i);
/* Reads a whole file or stdin (path "-") into a NUL-terminated buffer; caller frees. */
char *cli_read_all(const char *path, size_t *len);
/* Tokenizes text into a new array (caller frees *ids); prints the error and
 * returns false on failure. */
struct brisk_model;
struct brisk_context_params;
bool cli_tokenize(const struct brisk_model *m, const char *text, size_t len, bool add_special,
                  bool parse_special, int32_t **ids, int64_t *n);
/* -ngl N / --n-gpu-layers N / --device I: 1 if argv[*i] was one of them (value
 * consumed), 0 if not, -1 on a bad value (error printed). */
int cli_gpu_flag(int argc, char **argv, int *i, int *n_gpu_layers, int *device);
/* KV cache type flags: --kv-type T, llama.cpp's -ctk/-ctv T (one type for
 * both), and --kv-f32. Same returns as cli_gpu_flag; *kv_type is a brisk_kv_type. */
int cli_kv_flag(int argc, char **argv, int *i, int *kv_type);
/* Where and how a model runs: -ngl/--device, --n-cpu-moe N and the KV cache type flags in one. */
typedef struct cli_model_opts {
    int n_gpu_layers; /* -1: all when a GPU is present */
    int device;
    int kv_type;      /* brisk_kv_type */
    int n_cpu_moe;    /* MoE: the first N layers keep their experts in host memory; 0: none */
    uint64_t gpu_mem; /* MoE, --gpu-mem: bytes the model and its context may take on the GPU (picks n_cpu_moe); 0: off */
    bool no_mmap;     /* --no-mmap: read the model into memory */
    int cache_experts;        /* --cache-experts N: hot experts cached on the GPU per host-expert layer; -1: auto
                                 (from --gpu-mem); 0 (off): none; CLI_CACHE_UNSET: not given, auto where
                                 --gpu-mem alone leaves experts on the host (cache_params) */
    const char *expert_stats; /* --expert-stats FILE (`brisk calibrate -o`): picks the first cached experts */
    int tp;                   /* --tp N: tensor parallelism over N GPUs (engine/tp.h); 0: off */
    int pp;                   /* --pp N: pipeline parallelism over N GPUs (engine/context.c's pp_forward) */
    brisk_rope_overrides rope; /* --rope-scaling, --rope-scale, --yarn-*: over the file's rope keys */
    bool device_set;          /* --device was given (a GPU asked for, as by -ngl N > 0) */
    bool mlock;               /* --mlock: lock the loaded model's host pages in memory (mlockall) */
    const char *hf;           /* -hf REPO[:QUANT]: the model from the Hugging Face cache (cli_model_path) */
    char hf_path[4096];       /* where -hf resolved to */
    int attn_sparse;          /* --attn-sparse K: block-sparse attention reading K KV pages per query group; 0: dense */
    brisk_cpu_placement cpu;  /* -C/--cpu-mask, -Cr/--cpu-range, --cpu-strict, --prio, --poll (llama.cpp's) */
    int n_ubatch;             /* -ub N: entries in one forward pass (brisk_context_params.n_ubatch); 0: default */
} cli_model_opts;
enum { CLI_CACHE_UNSET = -2 };
#define CLI_MODEL_OPTS_DEFAULT \
    {-1, 0, BRISK_KV_F16, 0, 0, false, CLI_CACHE_UNSET, NULL, 0, 0, {BRISK_ROPE_SCALING_MODEL, 0, 0, 0, -1, -1, -1, -1}, false, false, NULL, {0}, 0, \
     {{0}, false, 0, 50, 0}, 0}
/* llama.cpp's RoPE flags (common/arg.cpp), the same meanings; default: the model file's */
#define CLI_ROPE_HELP                                                                                         \
    "  --rope-scaling none|linear|yarn  RoPE frequency scaling (default: the model's, else linear)\n"        \
    "  --rope-scale N       context scaling factor: positions stretch N times (--rope-freq-scale 1/N)\n"   \
    "  --rope-freq-base N   RoPE base frequency theta (default: the model's)\n"                            \
    "  --rope-freq-scale N  RoPE frequency scaling factor, expands the context by 1/N\n"                   \
    "  --yarn-orig-ctx N    YaRN: the model's original context (default: the model's, else its training ctx)\n" \
    "  --yarn-ext-factor N  YaRN: extrapolation mix in [0, 1] (default: 1 with yarn; 0: full interpolation)\n" \
    "  --yarn-attn-factor N YaRN: attention magnitude scale; as in llama.cpp, used only with ext-factor 0\n" \
    "  --yarn-beta-fast N   YaRN: low correction dim, rotations per original context (default 32)\n"        \
    "  --yarn-beta-slow N   YaRN: high correction dim (default 1)\n"
#define CLI_TP_HELP                                                                                           \
    "  --tp N               tensor parallelism: llama/qwen2/qwen3 split over N GPUs (--device, --device + 1, ...),\n" \
    "                       one process each (across hosts: docs/multi-gpu.md)\n" \
    "  --pp N               pipeline parallelism: any architecture's layers in N runs over N GPUs\n"
/* -ngl and --device (cli_gpu_flag) */
#define CLI_GPU_HELP                                                                                          \
    "  -ngl, --n-gpu-layers N  layers on the GPU, the last ones (-1: all when one is present, 0: CPU)\n"      \
    "  --device I           GPU index (default 0)\n"
#define CLI_CPU_MOE_HELP                                                                                      \
    "  --n-cpu-moe, -ncmoe N  MoE: the experts of the first N layers stay in host memory, run by the CPU\n"  \
    "  --gpu-mem SIZE       MoE: keep as few layers' experts in host memory as fit SIZE (e.g. 20G) on the GPU\n" \
    "  --no-mmap            read the model into memory (huge pages) instead of mapping it: faster CPU decode\n" \
    "  --cache-experts N|auto|off  MoE: cache the N most used experts of each host-expert layer on the GPU\n" \
    "                       (misses run on the CPU); with --gpu-mem every expert stays on the host and auto\n" \
    "                       sizes the cache from what the budget leaves. Default: auto when --gpu-mem alone\n" \
    "                       cannot hold every expert; off: whole layers' experts on the host instead\n" \
    "  --expert-stats FILE  MoE: fill that cache from `brisk calibrate -o FILE` counts (else from the first batches)\n"
/* Where the CPU threads run (cli_model_flag; llama.cpp's flags and meanings) */
#define CLI_PLACE_HELP                                                                                         \
    "  -C, --cpu-mask M     CPU affinity mask, hex of any length (bit i: CPU i); adds to --cpu-range\n"          \
    "  -Cr, --cpu-range lo-hi  CPUs lo..hi for the threads (either end may be left out); adds to --cpu-mask\n"  \
    "  --cpu-strict 0|1     1: thread j alone on the j-th CPU of the mask, round robin (default 0)\n"           \
    "  --prio N             threads' priority: -1 low, 0 normal (default), 1 medium, 2 high, 3 realtime\n"     \
    "  --poll 0..100        how long idle threads poll for work before sleeping (default 50; 0: no polling)\n"   \
    "  --numa distribute|isolate|numactl  threads by NUMA node: spread over all, on the starting one, or\n"   \
    "                       numactl's CPUs (instead of -C/-Cr/--cpu-strict)\n"
/* llama.cpp's habitual flags that cli_model_flag takes, and what each means here */
#define CLI_LLAMACPP_HELP                                                                                      \
    "  --mlock              lock the model's host memory in RAM (mlockall; a warning if `ulimit -l` is too low)\n" \
    "  -fa, --flash-attn [on|auto]  accepted: brisk's attention is always fused (flash-style); off is refused\n" \
    "  -ub, --ubatch-size N entries in one forward pass, at most -b (default 2048 on a GPU, 512 on the CPU)\n" \
    "  --jinja              accepted: brisk always formats chats with the model's Jinja template\n"
/* 1: argv[*i] (and its value) was one of them; 0: not one; -1: bad (message printed). Also --tp N, --pp N,
 * -hf REPO[:QUANT], the RoPE flags of CLI_ROPE_HELP and llama.cpp's of CLI_LLAMACPP_HELP. */
int cli_model_flag(int argc, char **argv, int *i, cli_model_opts *o);
#define CLI_HF_HELP                                                                                           \
    "  -hf, -hfr, --hf-repo REPO[:QUANT]  a GGUF from Hugging Face instead of -m: the cached one, else pulled first\n" \
    "                       (`brisk pull --help`; QUANT as in llama.cpp, default Q4_K_M)\n"
/* The model file of a command: model_path (-m), or with -hf the file in the Hugging Face cache,
 * fetched when missing (into o->hf_path). 0, or the exit code after a one-line error (both or
 * neither of -m and -hf: 2). cmd names the command for the messages. */
int cli_model_path(cli_model_opts *o, const char *cmd, const char **model_path);
/* -hf's resolution (cmd_pull.c): spec's file in the cache (pulled when absent) into out. 0 or an exit code. */
int cli_hf_resolve(const char *spec, char *out, size_t cap);
/* The flags of the commands that run a model over a text file (perplexity,
 * calibrate): -m FILE, -f TEXT, -c N, -t N, --chunks N. Same returns as above. */
typedef struct cli_text_opts {
    const char *model_path, *text_path;
    int n_ctx, n_threads, n_chunks_max; /* 512, 0 (all cores), -1 (all) */
} cli_text_opts;
#define CLI_TEXT_OPTS_DEFAULT {NULL, NULL, 512, 0, -1}
int cli_text_flag(int argc, char **argv, int *i, cli_text_opts *o);
/* The sampling flags of run and chat (llama.cpp's names): --temp, --top-k, --top-p, --min-p, the
 * penalties, --seed/-s. Same returns as cli_gpu_flag; *seed_set says --seed was given. */
int cli_sampler_flag(int argc, char **argv, int *i, brisk_sampler_params *sp, bool *seed_set);
#define CLI_SAMPLER_HELP                                                                            \
    "  --temp T             temperature (default 0.8; 0: greedy)\n"                                 \
    "  --top-k K            (default 40)   --top-p P (default 0.95)   --min-p P (default 0.05)\n"  \
    "  --repeat-penalty F   (default 1.0)  --repeat-last-n N (default 64)\n"                        \
    "  --presence-penalty F --frequency-penalty F\n"                                                \
    "  -s, --seed S         RNG seed (default: random)\n"
/* -r/--reverse-prompt TEXT (llama.cpp's): generation stops once the text has appeared. Up to
 * CLI_STOP_MAX of them; the tail of the output is kept to find one split over tokens. */
#define CLI_STOP_MAX 8
typedef struct cli_stop {
    const char *text[CLI_STOP_MAX];
    int n;
    char tail[512]; /* the last bytes of the output, NUL-terminated */
    size_t len;
} cli_stop;
/* 1 if argv[*i] was -r/--reverse-prompt (value taken), 0 if not, -1 on error (printed). */
int cli_stop_flag(int argc, char **argv, int *i, cli_stop *st);
/* Forgets the output seen so far (a new answer). */
void cli_stop_reset(cli_stop *st);
/* Adds a piece of output; true when a reverse prompt ends within what was seen. */
bool cli_stop_push(cli_stop *st, const char *piece, size_t len);
#define CLI_STOP_HELP "  -r, --reverse-prompt TEXT  stop generating once TEXT appears (printed; may repeat)\n"
#define CLI_KV_HELP                                                                                           \
    "  --kv-type T          KV cache type: f16 (default), q8_0, q4_0, q4_0h (q4_0, keys rotated) or f32\n" \
    "                       (also -ctk/-ctv T,\n"                                                          \
    "                       --cache-type-k/--cache-type-v T: one type for both; --kv-f32)\n"                  \
    "  --attn-sparse K      block-sparse attention (CPU): each query group reads K KV pages of 16 tokens, the\n" \
    "                       first and the local window always, the rest by a key min/max bound (default: dense)\n"
/* Every flag cli_model_flag takes, for a command's --help (-m FILE is the command's to list). */
#define CLI_MODEL_HELP CLI_HF_HELP CLI_KV_HELP CLI_GPU_HELP CLI_CPU_MOE_HELP CLI_TP_HELP CLI_ROPE_HELP CLI_PLACE_HELP CLI_LLAMACPP_HELP
/* cli_text_flag's */
#define CLI_TEXT_HELP                                                                                         \
    "  -m, --model FILE     GGUF model\n"                                                                     \
    "  -f, --file TEXT      the text file\n"                                                                  \
    "  -c, --ctx-size N     tokens per chunk (default 512)\n"                                                 \
    "  -t, --threads N      CPU threads (default: all cores)\n"                                               \
    "  --chunks N           at most N chunks (default: all of the text)\n"
/* Model load and context creation that print the library's error on failure. */
struct brisk_context;
/* Loads with mo's placement (-ngl, --device, --n-cpu-moe, or --gpu-mem for the context cp will
 * make; cp may be NULL without --gpu-mem) and says where the layers went, or that a GPU asked
 * for (-ngl N > 0, --device I) is not there and the model runs on the CPU. */
bool cli_load_model(const char *path, const cli_model_opts *mo, struct brisk_context_params *cp,
                    struct brisk_model **out);
/* With --cache-experts / --expert-stats, cli_load_model also sets cp's cache fields; the counts it
 * read (cp->expert_stats) are the caller's to free with this, once the context is made. */
void cli_free_expert_stats(struct brisk_context_params *cp);
/* The context settings of the model flags into cp: --kv-type, -ub, --attn-sparse, the CPU placement. */
void cli_context_opts(const cli_model_opts *mo, struct brisk_context_params *cp);
/* The hot-expert cache's hits and misses on stderr, a short table (nothing without a cache). */
void cli_report_expert_cache(const struct brisk_model *m, const struct brisk_context *ctx);
/* Makes the context and says what it took on the GPU; a notice when a sequence's share of the
 * context (n_ctx / n_seq_max) is beyond the model's trained context with no RoPE scaling. */
bool cli_new_context(struct brisk_model *m, const struct brisk_context_params *cp, struct brisk_context **out);
double cli_now(void);         /* seconds, monotonic */
double cli_peak_rss_mb(void);
/* Lowers the peak to the current resident size (Linux; a no-op where it cannot). */
void cli_peak_rss_reset(void); /* peak resident set size */
int cli_default_threads(void);
#endif
