/* cmd_embed.c — `brisk embed -m FILE TEXT...`: each text's embedding (llama.cpp's
 * llama-embedding): one brisk_decode per text, pooled as the model (or --pooling) says and
 * normalised as llama.cpp's --embd-normalize (default 2: euclidean), printed as one JSON array
 * of vectors; with pooling none, a text's entry is its array of token vectors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "brisk.h"
#include "cli/cli.h"
#include "cli/common.h"

static void print_vec(const float *v, float *tmp, int n, int norm) {
    brisk_embd_normalize(v, tmp, n, norm);
    printf("[");
    for (int k = 0; k < n; k++) printf(k ? ",%.9g" : "%.9g", tmp[k]);
    printf("]");
}

int cmd_embed(int argc, char **argv) {
    const char *model_path = NULL, *texts[256];
    int n_texts = 0, pooling = BRISK_POOLING_UNSPECIFIED, norm = 2, n_threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: brisk embed -m FILE [--pooling none|mean|cls|last|rank] [--embd-normalize N] [-t N] TEXT...\n"
                   "  prints a JSON array: each TEXT's vector (pooling none: its token vectors), tokenized with\n"
                   "  the model's special tokens, normalised as llama.cpp's --embd-normalize (-1 none, 2 L2)\n");
            return 0;
        }
        if (a[0] != '-') {
            if (n_texts == 256) return cli_error(2, "embed: at most 256 texts");
            texts[n_texts++] = a;
            continue;
        }
        if (!(v = cli_next(argc, argv, &i))) return 2;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model_path = v;
        else if (!strcmp(a, "--pooling")) {
            if ((pooling = brisk_pooling_from_name(v)) < BRISK_POOLING_NONE)
                return cli_error(2, "embed: --pooling '%s': none, mean, cls, last or rank", v);
        } else if (!strcmp(a, "--embd-normalize")) {
            if (!cli_int(a, v, -1, 64, &norm)) return 2;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!cli_int(a, v, 1, 1024, &n_threads)) return 2;
        } else return cli_error(2, "embed: unknown option '%s'", a);
    }
    if (!model_path || !n_texts) return cli_error(2, "embed: -m FILE and at least one TEXT are required");
    brisk_model *m = NULL;
    brisk_context *c = NULL;
    brisk_token *ids = NULL;
    brisk_batch_entry *b = NULL;
    float *tmp = NULL;
    int rc = 1;
    if (brisk_model_load(model_path, NULL, &m) != BRISK_OK) {
        cli_error(1, "embed: %s", brisk_last_error());
        goto done;
    }
    brisk_context_params cp = brisk_context_default_params();
    cp.embeddings = true;
    cp.pooling = pooling;
    cp.n_threads = n_threads;
    cp.n_batch = 4096;
    if (brisk_context_new(m, &cp, &c) != BRISK_OK) {
        cli_error(1, "embed: %s", brisk_last_error());
        goto done;
    }
    int d = brisk_context_n_embd_out(c);
    bool none = brisk_context_pooling(c) == BRISK_POOLING_NONE;
    if (!(tmp = malloc((size_t)d * sizeof *tmp)) || !(b = malloc(4096 * sizeof *b))) {
        cli_error(1, "embed: out of memory");
        goto done;
    }
    printf("[");
    for (int t = 0; t < n_texts; t++) {
        int64_t n = 0;
        free(ids);
        ids = NULL;
        if (!cli_tokenize(m, texts[t], strlen(texts[t]), true, true, &ids, &n)) goto done;
        if (n < 1 || n > 4096) {
            cli_error(1, "embed: text %d has %lld tokens (1 to 4096)", t, (long long)n);
            goto done;
        }
        for (int i = 0; i < n; i++) b[i] = (brisk_batch_entry){ids[i], i, 0, none};
        if (brisk_seq_clear(c, 0) != BRISK_OK || brisk_decode(c, b, (int)n) != BRISK_OK) {
            cli_error(1, "embed: %s", brisk_last_error());
            goto done;
        }
        printf(t ? "," : "");
        if (!none) print_vec(brisk_get_embeddings_seq(c, 0), tmp, d, norm);
        else {
            printf("[");
            for (int i = 0; i < n; i++) printf(i ? "," : ""), print_vec(brisk_get_embeddings_ith(c, i), tmp, d, norm);
            printf("]");
        }
    }
    printf("]\n");
    rc = 0;
done:
    free(ids);
    free(b);
    free(tmp);
    brisk_context_free(c);
    brisk_model_free(m);
    return rc;
}
