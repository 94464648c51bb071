#include "cli/cli.h"
int cmd_tokenize(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return cli_error(1, "tokenize: not built yet");
}
