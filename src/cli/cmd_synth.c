/* cmd_synth.c — `brisk synth --preset NAME [--vocab VOCAB.gguf] [--type T] -o OUT.gguf`. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "brisk.h"
#include "cli/cli.h"
#include "cli/common.h"
#include "model/synth.h"
#include "quant/quant.h"

static void usage(FILE *f) {
    fprintf(f, "usage: brisk synth --preset NAME [--vocab VOCAB.gguf] [--type f32|f16|bf16|q8_0|q4_0|...]\n"
               "                   [--layers N] [--seed S] -o OUT.gguf\npresets:");
    for (const char *const *p = synth_preset_names(); *p; p++) fprintf(f, " %s", *p);
    fprintf(f, "\n");
}

int cmd_synth(int argc, char **argv) {
    const char *preset = NULL, *vocab = NULL, *out = NULL, *type = NULL;
    int layers = 0;
    uint64_t seed = 0;
    bool seed_set = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!(v = cli_next(argc, argv, &i))) return 2;
        if (!strcmp(a, "--preset")) preset = v;
        else if (!strcmp(a, "--vocab")) vocab = v;
        else if (!strcmp(a, "-o")) out = v;
        else if (!strcmp(a, "--type")) type = v;
        else if (!strcmp(a, "--layers")) {
            if (!cli_int(a, v, 1, 4096, &layers)) return 2;
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
    if (seed_set) c.seed = seed;
    if (type) {
        bool found = false;
        for (uint32_t t = 0; t < QT_COUNT; t++) {
            const quant_traits *qt = quant_get_traits(t);
            if (qt && !strcasecmp(qt->name, type)) {
                c.type = t;
                found = true;
            }
        }
        if (!found) return cli_error(2, "synth: unknown type '%s'", type);
    }
    if (synth_write(&c, vocab, out, true) != BRISK_OK) return cli_error(1, "%s", brisk_last_error());
    return 0;
}
