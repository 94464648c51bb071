/* cmd_quantize.c — `brisk quantize IN.gguf OUT.gguf TYPE [-t N]`. */
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/common.h"
#include "quant/model_quant.h"
#include "quant/quant.h"

int cmd_quantize(int argc, char **argv) {
    const char *pos[3] = {0};
    int n_pos = 0, n_threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: brisk quantize IN.gguf OUT.gguf TYPE [-t N]\n"
                   "types: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl mxfp4 (every 2-D weight, like --pure)\n");
            return 0;
        } else if (!strcmp(argv[i], "-t") || !strcmp(argv[i], "--threads")) {
            if (!(v = cli_next(argc, argv, &i)) || !cli_int(argv[i - 1], v, 1, 1024, &n_threads)) return 2;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return cli_error(2, "quantize: unknown option '%s'", argv[i]);
        } else if (n_pos < 3) {
            pos[n_pos++] = argv[i];
        } else {
            return cli_error(2, "quantize: too many arguments");
        }
    }
    if (n_pos != 3) return cli_error(2, "quantize: usage: brisk quantize IN.gguf OUT.gguf TYPE [-t N]");
    int type = -1;
    for (uint32_t t = 0; t < QT_COUNT; t++) {
        const quant_traits *qt = quant_get_traits(t);
        if (qt && !strcasecmp(qt->name, pos[2])) type = (int)t;
    }
    if (type < 0) return cli_error(2, "quantize: unknown type '%s'", pos[2]);
    if (model_quantize(pos[0], pos[1], (uint32_t)type, n_threads, isatty(2)) != BRISK_OK)
        return cli_error(1, "%s", brisk_last_error());
    return 0;
}
