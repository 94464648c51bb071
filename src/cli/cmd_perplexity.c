#include "cli/cli.h"
int cmd_perplexity(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return cli_error(1, "perplexity: not built yet");
}
