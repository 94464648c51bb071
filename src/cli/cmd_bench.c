#include "cli/cli.h"
int cmd_bench(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return cli_error(1, "bench: not built yet");
}
