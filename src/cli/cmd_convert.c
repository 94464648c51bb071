/* cmd_convert.c — `brisk convert HF_DIR -o OUT.gguf [--type T] [-t N] [--pre NAME]`. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "brisk.h"
#include "cli/cli.h"
#include "cli/common.h"
#include "model/convert.h"
#include "quant/quant_mix.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: brisk convert HF_DIR -o OUT.gguf [--type T] [-t, --threads N] [--pre NAME] [--no-mtp] [--slab-kb N]\n"
            "  a Hugging Face checkpoint (config.json, tokenizer.json, tokenizer_config.json,\n"
            "  model.safetensors or shards with model.safetensors.index.json; f32/f16/bf16) to GGUF with\n"
            "  llama.cpp's names and metadata: llama, qwen2, qwen3, qwen3_moe, qwen3_5, qwen3_5_moe,\n"
            "  qwen3_next.\n"
            "  Streams with N threads (default: all cores); written beside OUT as OUT.tmp.XXXXXX and\n"
            "  renamed over OUT when done (OUT may be a model being served; never one of the inputs).\n"
            "  --type: f32, f16 (default), bf16, q8_0 for every matrix, or a llama-quantize mix:");
    for (int i = 0; quant_ftype_at(i); i++) fprintf(f, " %s", quant_ftype_at(i)->name);
    fprintf(f, "\n  --pre NAME: the tokenizer's pre-tokenizer (qwen2, llama-bpe, qwen35, ...) when it is not recognized\n"
            "  --no-mtp: leave out the multi-token-prediction head (Qwen3.5/3.6, Qwen3-Next mtp.*), which is\n"
            "     kept by default as llama.cpp's nextn layers (brisk run --spec-type mtp drafts with it)\n"
            "  --slab-kb N: output bytes converted per step, in KiB (for tests)\n");
}

int cmd_convert(int argc, char **argv) {
    const char *dir = NULL, *out = NULL;
    convert_opts o = {0};
    int slab_kb = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--no-mtp")) {
            o.no_mtp = true;
            continue;
        }
        if (a[0] != '-') {
            if (dir) return cli_error(2, "convert: more than one input directory ('%s', '%s')", dir, a);
            dir = a;
            continue;
        }
        if (!(v = cli_next(argc, argv, &i))) return 2;
        if (!strcmp(a, "-o")) out = v;
        else if (!strcmp(a, "--type")) o.type = v;
        else if (!strcmp(a, "--pre")) o.pre = v;
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!cli_int(a, v, 1, 256, &o.n_threads)) return 2;
        } else if (!strcmp(a, "--slab-kb")) { /* output converted per step; for tests */
            if (!cli_int(a, v, 1, 1 << 20, &slab_kb)) return 2;
        } else return cli_error(2, "convert: unknown option '%s'", a);
    }
    if (!dir || !out) return cli_error(2, "convert: need HF_DIR and -o OUT.gguf (see brisk convert --help)");
    o.slab_bytes = (size_t)slab_kb << 10;
    o.progress = isatty(2);
    atomic_file_remove_on_signal(); /* an interrupted run leaves no temporary file */
    convert_stats st;
    brisk_status s = convert_hf(dir, out, &o, &st);
    if (s != BRISK_OK) return cli_error(s == BRISK_ERR_INVALID_ARG ? 2 : 1, "%s", brisk_last_error());
    fprintf(stderr, "wrote %s: %lld tensors, %.1f MB in %.2f s (%.1f MB/s, %d threads), pre-tokenizer %s\n", out,
            (long long)st.n_tensors, st.bytes / 1e6, st.seconds, st.bytes / 1e6 / (st.seconds > 0 ? st.seconds : 1e-9),
            st.n_threads, st.pre);
    return 0;
}
