#include "cli/cli.h"
int cmd_run(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return cli_error(1, "run: not built yet");
}
