#include "cli/cli.h"
int cmd_info(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return cli_error(1, "info: not built yet");
}
