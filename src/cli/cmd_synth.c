#include "cli/cli.h"
int cmd_synth(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return cli_error(1, "synth: not built yet");
}
