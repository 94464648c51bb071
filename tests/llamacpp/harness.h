/* harness.h — what llamacpp-ref's files share (harness.c: the function table, options and helpers;
 * spec.c: the speculative drafters' commands). The table is typed from the real prototypes of the
 * matching source tree's headers (.deps/llama.cpp). */
#ifndef LLAMACPP_HARNESS_H
#define LLAMACPP_HARNESS_H
#include <stdbool.h>
#include <stdint.h>

#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"
#include "llama.h"

// The function table. Each entry is typed from the real prototype.
#define LLAMACPP_FUNCS(X)                                                        \
    X(ggml_backend_load_all_from_path) X(ggml_backend_load) X(ggml_backend_dev_by_type)               \
    X(ggml_backend_dev_backend_reg) X(ggml_backend_dev_description)              \
    X(ggml_backend_reg_get_proc_address) X(ggml_type_name)                       \
    X(ggml_threadpool_params_default) X(llama_backend_init) X(llama_backend_free) \
    X(llama_log_set) X(llama_model_default_params) X(llama_context_default_params) \
    X(llama_model_quantize_default_params) X(llama_model_quantize)               \
    X(llama_model_load_from_file) X(llama_model_free) X(llama_model_get_vocab)   \
    X(llama_model_desc) X(llama_model_n_ctx_train) X(llama_model_n_embd)         \
    X(llama_model_n_layer) X(llama_model_n_params) X(llama_model_size)           \
    X(llama_vocab_n_tokens) X(llama_vocab_bos) X(llama_vocab_get_add_bos)        \
    X(llama_tokenize) X(llama_init_from_model) X(llama_free) X(llama_n_ctx)      \
    X(llama_attach_threadpool) X(llama_set_n_threads) X(llama_get_memory)        \
    X(llama_memory_clear) X(llama_batch_get_one) X(llama_decode)                 \
    X(llama_synchronize) X(llama_get_logits_ith) X(llama_ftype_name)             \
    X(llama_batch_init) X(llama_batch_free) X(llama_vocab_get_add_eos)          \
    X(llama_get_embeddings_ith) X(llama_get_embeddings_seq) X(llama_pooling_type) X(llama_model_n_cls_out)

struct llamacpp {
#define X(fn) __typeof__(&fn) fn;
    LLAMACPP_FUNCS(X)
#undef X
    __typeof__(&ggml_threadpool_new) ggml_threadpool_new;   // from the CPU backend
    __typeof__(&ggml_threadpool_free) ggml_threadpool_free; // from the CPU backend
    char cpu_variant[256]; // file name of the libggml-cpu-*.so that got loaded
    void *llama;           // libllama's handle (mtp resolves its staging API from it)
};
extern struct llamacpp L; // harness.c

// Options shared by all subcommands.
struct opts {
    const char *model, *libdir, *cpu_variant, *p, *prompt_text, *logits_out, *imatrix, *npl;
    const char *text_file, *kl_base; // perplexity: -f, --kl-divergence-base
    const char *imatrix_out; // imatrix: -o (perplexity gathering llama-imatrix's statistics)
    const char *force; // eval --force "IDS": the tokens fed after the prompt instead of the greedy ones
    const char *pos[4]; // positional arguments, in order
    int n_pos;
    int n_gen, n_ctx, n_threads, reps, top, n_chunks;
    int depth; // bench -d: tokens prefilled (untimed) before each repetition, llama-bench's -d
    int fa; // enum llama_flash_attn_type
    int pooling; // embed: enum llama_pooling_type (UNSPECIFIED: the model's)
    enum ggml_type kv_type, out_type, emb_type;
    int repack; // weight repacking (CPU_REPACK buffers): 1 on, 0 off, -1 the command's default
    bool add_special, parse_special, pure, allow_requant, leave_output, verbose, kl;
    // eval's RoPE overrides, common/arg.cpp's flags with their "not set" values (0 or -1, as
    // llama_context_default_params): --rope-scaling, --rope-scale N (freq_scale 1/N), ...
    int rope_scaling; // enum llama_rope_scaling_type
    float rope_freq_base, rope_freq_scale, yarn_ext_factor, yarn_attn_factor, yarn_beta_fast, yarn_beta_slow;
    int yarn_orig_ctx;
};

// Helpers (harness.c).
int fail(const char *fmt, ...);                 // one line on stderr; returns 1
void clear_error(void);                         // forgets llama.cpp's first error since the last call
const char *llama_error(void);                  // llama.cpp's first error since clear_error()
int parse_id_list(const char *s, llama_token **out, int *n); // "1 2 3" -> malloc'd ids
llama_token argmax(const float *x, int n);
void print_ids(const llama_token *ids, int n);  // one line of ids on stdout
void batch_put(struct llama_batch *b, llama_token t, int pos, int seq, bool logits);

// The speculative drafters' commands (spec.c).
int cmd_mtp(const struct opts *o);
int cmd_eagle3(const struct opts *o);
#endif
