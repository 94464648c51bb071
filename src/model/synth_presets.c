/* synth_presets.c — the shapes `brisk synth --preset` knows: real models
 * (from their config.json, see ../shared/REFERENCE-ARCH.md) and tiny ones
 * for tests. Hybrid tiny presets put full attention on every 2nd layer so
 * that two layers already hold both kinds. */
#include <string.h>

#include "base/status.h"
#include "model/synth.h"
#include "quant/quant.h"

#define QWEN3_COMMON .n_vocab = 151936, .head_dim = 128, .n_ctx = 40960, .rope_base = 1e6f, .rms_eps = 1e-6f
/* Qwen3-Next and Qwen3.5/3.6: head_dim 256 with 64 rotary dims, DeltaNet heads of 128, conv 4, QK heads 16 */
#define HYBRID_COMMON                                                                                          \
    .head_dim = 256, .n_rot = 64, .n_ctx = 262144, .rope_base = 1e7f, .rms_eps = 1e-6f, .ssm_d_conv = 4,        \
    .ssm_d_state = 128, .ssm_n_group = 16, .full_attn_interval = 4
#define QWEN36_COMMON HYBRID_COMMON, .n_vocab = 248320, .rope_sections = {11, 11, 10, 0}
#define TINY_QWEN35                                                                                            \
    .n_embd = 256, .n_layer = 4, .n_head = 4, .n_head_kv = 2, .head_dim = 64, .n_rot = 16, .n_ctx = 4096,       \
    .rope_base = 1e7f, .rms_eps = 1e-6f, .type = QT_F32, .ssm_d_conv = 4, .ssm_d_state = 64, .ssm_n_group = 2,  \
    .ssm_dt_rank = 4, .full_attn_interval = 2, .rope_sections = {3, 3, 2, 0}

static const struct {
    const char *name;
    synth_config c;
} presets[] = {
    {"qwen3-0.6b", {.arch = "qwen3", .name = "synthetic Qwen3-0.6B", QWEN3_COMMON, .n_embd = 1024, .n_layer = 28,
                    .n_head = 16, .n_head_kv = 8, .n_ff = 3072, .tied = true, .type = QT_BF16}},
    {"qwen3-8b", {.arch = "qwen3", .name = "synthetic Qwen3-8B", QWEN3_COMMON, .n_embd = 4096, .n_layer = 36,
                  .n_head = 32, .n_head_kv = 8, .n_ff = 12288, .type = QT_BF16}},
    {"llama3-8b", {.arch = "llama", .name = "synthetic Llama-3-8B", .n_vocab = 128256, .n_embd = 4096, .n_layer = 32,
                   .n_head = 32, .n_head_kv = 8, .head_dim = 128, .n_ff = 14336, .n_ctx = 8192, .rope_base = 5e5f,
                   .rms_eps = 1e-5f, .type = QT_BF16}},
    {"qwen3-30b-a3b", {.arch = "qwen3moe", .name = "synthetic Qwen3-30B-A3B", QWEN3_COMMON, .n_embd = 2048,
                       .n_layer = 48, .n_head = 32, .n_head_kv = 4, .n_ff = 6144, .n_expert = 128,
                       .n_expert_used = 8, .n_ff_exp = 768, .type = QT_BF16}},
    {"qwen3.6-27b", {.arch = "qwen35", .name = "synthetic Qwen3.6-27B", QWEN36_COMMON, .n_embd = 5120, .n_layer = 64,
                     .n_head = 24, .n_head_kv = 4, .n_ff = 17408, .ssm_dt_rank = 48, .type = QT_BF16}},
    {"qwen3.6-35b-a3b", {.arch = "qwen35moe", .name = "synthetic Qwen3.6-35B-A3B", QWEN36_COMMON, .n_embd = 2048,
                         .n_layer = 40, .n_head = 16, .n_head_kv = 2, .ssm_dt_rank = 32, .n_expert = 256,
                         .n_expert_used = 8, .n_ff_exp = 512, .n_ff_shexp = 512, .type = QT_BF16}},
    {"qwen3-next-80b-a3b", {.arch = "qwen3next", .name = "synthetic Qwen3-Next-80B-A3B", HYBRID_COMMON,
                            .n_vocab = 151936, .n_embd = 2048, .n_layer = 48, .n_head = 16, .n_head_kv = 2,
                            .ssm_dt_rank = 32, .n_expert = 512, .n_expert_used = 10, .n_ff_exp = 512,
                            .n_ff_shexp = 512, .type = QT_BF16}},
    {"tiny-llama", {.arch = "llama", .name = "synthetic tiny llama", .n_embd = 256, .n_layer = 4, .n_head = 8,
                    .n_head_kv = 4, .head_dim = 32, .n_ff = 768, .n_ctx = 2048, .rope_base = 1e4f, .rms_eps = 1e-5f,
                    .type = QT_F32}},
    {"tiny-qwen3", {.arch = "qwen3", .name = "synthetic tiny qwen3", .n_embd = 256, .n_layer = 4, .n_head = 8,
                    .n_head_kv = 4, .head_dim = 64, .n_ff = 768, .n_ctx = 4096, .rope_base = 1e6f, .rms_eps = 1e-6f,
                    .tied = true, .type = QT_F32}},
    /* an EAGLE-3 drafter for tiny-llama (same vocabulary: synthesize both with the same --vocab) */
    {"tiny-llama-eagle3", {.arch = "eagle3", .name = "synthetic tiny llama eagle3", .n_embd = 256, .n_layer = 1,
                           .n_head = 8, .n_head_kv = 4, .head_dim = 32, .n_ff = 512, .n_ctx = 2048,
                           .rope_base = 1e4f, .rms_eps = 1e-5f, .type = QT_F32, .eagle3_layers = {1, 2, 3},
                           .eagle3_target_embd = 256}},
    /* the same with a draft vocabulary of 200 tokens (d2t), as EAGLE-3 checkpoints for Llama 3.1 (32K of 128K) */
    {"tiny-llama-eagle3-d2t", {.arch = "eagle3", .name = "synthetic tiny llama eagle3 d2t", .n_embd = 256,
                               .n_layer = 1, .n_head = 8, .n_head_kv = 4, .head_dim = 32, .n_ff = 512, .n_ctx = 2048,
                               .rope_base = 1e4f, .rms_eps = 1e-5f, .type = QT_F32, .eagle3_layers = {1, 2, 3},
                               .eagle3_target_embd = 256, .eagle3_draft_vocab = 200}},
    /* the same vocabulary as its target, Llama 3's RoPE scaling (rope_freqs.weight) */
    {"tiny-llama-eagle3-rf", {.arch = "eagle3", .name = "synthetic tiny llama eagle3 rope_freqs", .n_embd = 256,
                              .n_layer = 1, .n_head = 8, .n_head_kv = 4, .head_dim = 32, .n_ff = 512, .n_ctx = 2048,
                              .rope_base = 1e4f, .rms_eps = 1e-5f, .type = QT_F32, .eagle3_layers = {1, 2, 3},
                              .eagle3_target_embd = 256, .eagle3_rope_llama3 = true}},
    /* the same vocabulary as its target, YaRN (factor 4 over an original context of 512) */
    {"tiny-llama-eagle3-yarn", {.arch = "eagle3", .name = "synthetic tiny llama eagle3 yarn", .n_embd = 256,
                                .n_layer = 1, .n_head = 8, .n_head_kv = 4, .head_dim = 32, .n_ff = 512, .n_ctx = 2048,
                                .rope_base = 1e4f, .rms_eps = 1e-5f, .type = QT_F32, .eagle3_layers = {1, 2, 3},
                                .eagle3_target_embd = 256, .rope_scaling = "yarn", .rope_factor = 4.0f,
                                .rope_orig_ctx = 512}},
    /* 8 experts (llama.cpp's mixes treat 8-expert models specially), top-2 */
    {"tiny-qwen3moe", {.arch = "qwen3moe", .name = "synthetic tiny qwen3moe", .n_embd = 256, .n_layer = 4,
                       .n_head = 8, .n_head_kv = 4, .head_dim = 64, .n_ff = 512, .n_ctx = 4096, .rope_base = 1e6f,
                       .rms_eps = 1e-6f, .type = QT_F32, .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 256}},
    {"tiny-qwen35", {.arch = "qwen35", .name = "synthetic tiny qwen35", TINY_QWEN35, .n_ff = 512}},
    {"tiny-qwen35moe", {.arch = "qwen35moe", .name = "synthetic tiny qwen35moe", TINY_QWEN35, .n_expert = 8,
                        .n_expert_used = 2, .n_ff_exp = 256, .n_ff_shexp = 256}},
    /* value heads in HF's grouped order, beta/alpha in one ssm_ba; -legacy: the fused ssm_in */
    {"tiny-qwen3next", {.arch = "qwen3next", .name = "synthetic tiny qwen3next", TINY_QWEN35, .n_expert = 8,
                        .n_expert_used = 2, .n_ff_exp = 256, .n_ff_shexp = 256}},
    {"tiny-qwen3next-legacy", {.arch = "qwen3next", .name = "synthetic tiny qwen3next (ssm_in)", TINY_QWEN35,
                               .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 256, .n_ff_shexp = 256,
                               .ssm_in = true}},
    /* qwen2 with q/k/v biases and YaRN context extension (x4 over an original 64 positions) */
    {"tiny-qwen2-yarn", {.arch = "qwen2", .name = "synthetic tiny qwen2 yarn", .n_embd = 256, .n_layer = 3,
                         .n_head = 4, .n_head_kv = 2, .head_dim = 64, .n_ff = 512, .n_ctx = 256, .rope_base = 1e4f,
                         .rms_eps = 1e-6f, .type = QT_F32, .rope_scaling = "yarn", .rope_factor = 4.0f,
                         .rope_orig_ctx = 64}},
    /* llama with linear RoPE scaling (x2) */
    {"tiny-llama-linear", {.arch = "llama", .name = "synthetic tiny llama linear rope", .n_embd = 256, .n_layer = 3,
                           .n_head = 8, .n_head_kv = 8, .head_dim = 32, .n_ff = 512, .n_ctx = 4096,
                           .rope_base = 1e4f, .rms_eps = 1e-5f, .type = QT_F32, .rope_scaling = "linear",
                           .rope_factor = 2.0f, .rope_orig_ctx = 2048}},
};
#define N_PRESETS (sizeof presets / sizeof presets[0])

const char *const *synth_preset_names(void) {
    static const char *names[N_PRESETS + 1];
    for (size_t i = 0; i < N_PRESETS; i++) names[i] = presets[i].name;
    return names;
}

brisk_status synth_preset(const char *name, synth_config *c) {
    for (size_t i = 0; i < N_PRESETS; i++)
        if (!strcmp(name, presets[i].name)) {
            *c = presets[i].c;
            c->seed = 1;
            return BRISK_OK;
        }
    return bk_fail(BRISK_ERR_NOT_FOUND, "unknown preset '%s'", name);
}
