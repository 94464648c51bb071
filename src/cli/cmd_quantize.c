/* cmd_quantize.c — `brisk quantize IN.gguf OUT.gguf TYPE [-t N] [--imatrix FILE] [--pure]`. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "cli/cli.h"
#include "cli/common.h"
#include "quant/model_quant.h"
#include "quant/quant_mix.h"

#define USAGE "usage: brisk quantize IN.gguf OUT.gguf TYPE [-t N] [--imatrix FILE] [--pure] [--allow-requantize]"

int cmd_quantize(int argc, char **argv) {
    const char *pos[3] = {0};
    int n_pos = 0;
    model_quant_opts o = {0};
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf(USAGE "\n"
                   "TYPE is a llama-quantize mix; each tensor gets the type llama.cpp would give it:\n ");
            for (int k = 0; quant_ftype_at(k); k++) printf(" %s", quant_ftype_at(k)->name);
            printf("\n  (Q3_K, Q4_K, Q5_K mean Q3_K_M, Q4_K_M, Q5_K_M)\n"
                   "  --pure          every matrix gets the base type (no per-tensor bumps)\n"
                   "  --imatrix FILE  importance matrix from llama-imatrix (GGUF or legacy .dat)\n"
                   "  -t, --threads N threads (default: all cores)\n"
                   "  --allow-requantize  quantize tensors that are quantized already (refused without it: a\n"
                   "                  second rounding error; quantize the f16/bf16/f32 model instead)\n"
                   "OUT is written beside itself as OUT.tmp.XXXXXX and renamed over OUT when done: OUT may be\n"
                   "a model that a running brisk serves (it keeps the old one); it may not be IN.\n");
            return 0;
        } else if (!strcmp(argv[i], "-t") || !strcmp(argv[i], "--threads")) {
            if (!(v = cli_next(argc, argv, &i)) || !cli_int(argv[i - 1], v, 1, 256, &o.n_threads)) return 2;
        } else if (!strcmp(argv[i], "--imatrix")) {
            if (!(o.imatrix_path = cli_next(argc, argv, &i))) return 2;
        } else if (!strcmp(argv[i], "--pure")) {
            o.pure = true;
        } else if (!strcmp(argv[i], "--allow-requantize")) {
            o.allow_requantize = true;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return cli_error(2, "quantize: unknown option '%s'", argv[i]);
        } else if (n_pos < 3) {
            pos[n_pos++] = argv[i];
        } else {
            return cli_error(2, "quantize: too many arguments");
        }
    }
    if (n_pos != 3) return cli_error(2, "quantize: " USAGE);
    if (!quant_ftype_find(pos[2])) return cli_error(2, "quantize: unknown type '%s' (see brisk quantize --help)", pos[2]);
    o.ftype = pos[2];
    o.progress = true; /* a live line on a terminal, a summary line in any case */
    atomic_file_remove_on_signal(); /* an interrupted run leaves no temporary file */
    if (model_quantize(pos[0], pos[1], &o) != BRISK_OK) return cli_error(1, "%s", brisk_last_error());
    return 0;
}
