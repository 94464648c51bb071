/* cmd_tokenize.c — `brisk tokenize -m FILE`: ids of the text on stdin, space-separated. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "brisk.h"
#include "cli/cli.h"
#include "cli/common.h"

int cmd_tokenize(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL;
    bool add_special = false, parse_special = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) {
            if (!(model_path = cli_next(argc, argv, &i))) return 2;
        } else if (!strcmp(argv[i], "-p") || !strcmp(argv[i], "--prompt")) {
            if (!(prompt = cli_next(argc, argv, &i))) return 2;
        } else if (!strcmp(argv[i], "--add-special")) {
            add_special = true;
        } else if (!strcmp(argv[i], "--parse-special")) {
            parse_special = true;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: brisk tokenize -m, --model FILE [-p, --prompt TEXT] [--add-special] [--parse-special] < text\n");
            return 0;
        } else {
            return cli_error(2, "tokenize: unknown option '%s'", argv[i]);
        }
    }
    if (!model_path) return cli_error(2, "tokenize: -m FILE is required");
    size_t len = 0;
    char *text = prompt ? strdup(prompt) : cli_read_all("-", &len);
    if (!text) return 1;
    if (prompt) len = strlen(prompt);
    brisk_model_params mp = brisk_model_default_params();
    mp.vocab_only = true;
    brisk_model *m = NULL;
    int rc = 1;
    brisk_token *ids = NULL;
    int64_t n = 0;
    if (brisk_model_load(model_path, &mp, &m) != BRISK_OK) {
        cli_error(1, "%s", brisk_last_error());
        goto done;
    }
    if (!cli_tokenize(m, text, len, add_special, parse_special, &ids, &n)) goto done;
    for (int64_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
    printf("\n");
    rc = 0;
done:
    free(ids);
    free(text);
    brisk_model_free(m);
    return rc;
}
