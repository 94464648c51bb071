/* cmd_synth.c — `brisk synth --preset NAME [--vocab VOCAB.gguf] [--type T] -o OUT.gguf`. */
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "brisk.h"
#include "cli/cli.h"
#include "cli/common.h"
#include "model/synth.h"
#include "quant/quant.h"
#include "quant/quant_mix.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: brisk synth --preset NAME -o OUT.gguf [--vocab VOCAB.gguf] [--type T] [--pure]\n"
            "                   [--layers N] [--mtp N] [--bigram] [--seed S] [--expert-skew S] [--repeat-rows N]\n"
            "                   [-t, --threads N]\n"
            "                   [--slab-kb N: output bytes per step, KiB; for tests]\n"
            "  random-weight model of a real shape, written streaming with N threads (default: all cores);\n"
            "  the same --seed gives the same bytes for any -t. Written beside OUT as OUT.tmp.XXXXXX,\n"
            "  renamed over OUT when done (OUT may be a model being served; never one of the inputs).\n"
            "  --type: a llama-quantize mix (each tensor gets the type llama-quantize would give it):");
    for (int i = 0; quant_ftype_at(i); i++) fprintf(f, " %s", quant_ftype_at(i)->name);
    fprintf(f, "\n          or a ggml type for every matrix (q8_1, mxfp4, ...); default: the preset's (bf16 or f32)\n"
               "  --pure: every matrix gets the mix's base type (llama-quantize --pure)\n"
               "  --mtp N: N multi-token-prediction blocks after the layers (qwen35, qwen35moe, qwen3next: the\n"
               "     nextn_predict_layers of Qwen3.5/3.6, for `brisk run --spec-type mtp`)\n"
               "  --bigram: nearly a bigram model of its embedding (embedding std 1, the trunk's residual\n"
               "     branches at a quarter), its MTP blocks that bigram exactly (eh_proj [I | 0], no branches): greedy\n"
               "     text with wide margins and MTP drafts that are often right, for speculation's acceptance\n"
               "  --expert-skew S: MoE routers favour some experts (router rows scaled by rank^(-S/4));\n"
               "     128 experts top-8: the top 10%% of experts get 18%%/27%%/41%% of picks at S=0.5/1/2\n"
               "  --repeat-rows N: each matrix repeats its first N rows (generated once: fast files for speed\n"
               "     benchmarks, same shapes and types; the router keeps distinct rows)\n"
               "presets:");
    for (const char *const *p = synth_preset_names(); *p; p++) fprintf(f, " %s", *p);
    fprintf(f, "\n");
}

int cmd_synth(int argc, char **argv) {
    const char *preset = NULL, *vocab = NULL, *out = NULL, *type = NULL;
    int layers = 0, threads = 0, slab_kb = 0, repeat = 0, mtp = 0;
    float skew = 0;
    uint64_t seed = 0;
    bool seed_set = false, pure = false, bigram = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--pure") || !strcmp(a, "--bigram")) {
            *(!strcmp(a, "--pure") ? &pure : &bigram) = true;
            continue;
        }
        if (!(v = cli_next(argc, argv, &i))) return 2;
        if (!strcmp(a, "--preset")) preset = v;
        else if (!strcmp(a, "--vocab")) vocab = v;
        else if (!strcmp(a, "-o")) out = v;
        else if (!strcmp(a, "--type")) type = v;
        else if (!strcmp(a, "--layers")) {
            if (!cli_int(a, v, 1, 4096, &layers)) return 2;
        } else if (!strcmp(a, "--mtp")) {
            if (!cli_int(a, v, 0, 4, &mtp)) return 2;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!cli_int(a, v, 1, 256, &threads)) return 2;
        } else if (!strcmp(a, "--slab-kb")) { /* output generated per step; for tests */
            if (!cli_int(a, v, 1, 1 << 20, &slab_kb)) return 2;
        } else if (!strcmp(a, "--repeat-rows")) {
            if (!cli_int(a, v, 1, 1 << 30, &repeat)) return 2;
        } else if (!strcmp(a, "--expert-skew")) {
            if (!cli_float(a, v, 0, 64, &skew)) return 2;
        } else if (!strcmp(a, "--seed")) {
            if (!cli_u64(a, v, &seed)) return 2;
            seed_set = true;
        } else return cli_error(2, "synth: unknown option '%s'", a);
    }
    if (!preset || !out) {
        usage(stderr);
        return 2;
    }
    synth_config c;
    if (synth_preset(preset, &c) != BRISK_OK) return cli_error(2, "synth: %s", brisk_last_error());
    if (layers) c.n_layer = layers;
    c.n_mtp = mtp;
    if (seed_set) c.seed = seed;
    c.n_threads = threads;
    c.expert_skew = skew;
    c.slab_bytes = (size_t)slab_kb << 10;
    c.repeat_rows = repeat;
    c.bigram = bigram;
    if (skew > 0 && c.n_expert == 0) return cli_error(2, "synth: --expert-skew needs a MoE preset, not %s", preset);
    if (type && quant_ftype_find(type)) c.ftype = type;
    else if (type) {
        bool found = false;
        for (uint32_t t = 0; t < QT_COUNT && !found; t++) {
            const quant_traits *qt = quant_get_traits(t);
            if (qt && qt->can_quantize && !strcasecmp(qt->name, type)) {
                c.type = t;
                found = true;
            }
        }
        if (!found) return cli_error(2, "synth: unknown type '%s' (see brisk synth --help)", type);
    }
    if (pure && !c.ftype) return cli_error(2, "synth: --pure needs a llama-quantize type (--type Q4_K_M, ...)");
    c.pure = pure;
    atomic_file_remove_on_signal(); /* an interrupted run leaves no temporary file */
    synth_stats st;
    brisk_status s = synth_write_ex(&c, vocab, out, isatty(2), &st);
    if (s != BRISK_OK) return cli_error(1, "%s", brisk_last_error());
    fprintf(stderr, "wrote %s: %lld tensors, %.1f MB in %.2f s (%.1f MB/s, %d threads)\n", out, (long long)st.n_tensors,
            st.bytes / 1e6, st.seconds, st.bytes / 1e6 / (st.seconds > 0 ? st.seconds : 1e-9), st.n_threads);
    return 0;
}
