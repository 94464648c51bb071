/* cmd_perplexity.c — `brisk perplexity -m FILE -f TEXT [-c 512]`, llama.cpp's
 * method: the text is cut into chunks of n_ctx tokens (the first replaced by
 * BOS when the model adds one), and each chunk scores the tokens of its
 * second half. Prints the running estimate per chunk, then the final value. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "brisk.h"
#include "cli/cli.h"
#include "cli/common.h"

int cmd_perplexity(int argc, char **argv) {
    cli_text_opts to = CLI_TEXT_OPTS_DEFAULT;
    cli_model_opts mo = CLI_MODEL_OPTS_DEFAULT;
    for (int i = 1; i < argc; i++) {
        int g = cli_model_flag(argc, argv, &i, &mo);
        if (!g) g = cli_text_flag(argc, argv, &i, &to);
        if (g) {
            if (g < 0) return 2;
            continue;
        }
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: brisk perplexity -m FILE -f TEXT [-c 512] [-t N] [--chunks N] [--kv-type f16|q8_0|q4_0|f32] [-ngl N] [--device I]\n"
                   "                        [--n-cpu-moe N | --gpu-mem SIZE] [--no-mmap]\n");
            return 0;
        }
        return cli_error(2, "perplexity: unknown option '%s'", argv[i]);
    }
    const char *model_path = to.model_path, *text_path = to.text_path;
    int n_ctx = to.n_ctx, n_threads = to.n_threads, n_chunks_max = to.n_chunks_max;
    if (!model_path || !text_path) return cli_error(2, "perplexity: -m FILE and -f TEXT are required");
    size_t len;
    char *text = cli_read_all(text_path, &len);
    if (!text) return 1;
    int rc = 1;
    brisk_model *m = NULL;
    brisk_context *ctx = NULL;
    brisk_token *toks = NULL;
    brisk_batch_entry *batch = NULL;
    brisk_context_params cp = brisk_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = n_ctx;
    cp.n_outputs_max = n_ctx; /* every position's logits, a pass of up to 512 at a time */
    cp.n_threads = n_threads;
    cp.kv_type = (brisk_kv_type)mo.kv_type;
    if (!cli_load_model(model_path, &mo, &cp, &m)) goto done;
    int64_t n = 0;
    if (!cli_tokenize(m, text, len, false, false, &toks, &n)) goto done;
    int64_t n_chunks = n / n_ctx;
    if (n_chunks_max > 0 && n_chunks > n_chunks_max) n_chunks = n_chunks_max;
    if (n_chunks < 1) {
        cli_error(1, "perplexity: the text has %lld tokens, fewer than one chunk of %d (lower -c)",
                  (long long)n, n_ctx);
        goto done;
    }
    if (!cli_new_context(m, &cp, &ctx)) goto done;
    batch = malloc((size_t)n_ctx * sizeof *batch);
    if (!batch) goto done;
    int n_vocab = brisk_n_vocab(m), first = n_ctx / 2;
    bool bos = brisk_add_bos(m) && brisk_token_bos(m) >= 0;
    double nll = 0;
    int64_t count = 0;
    double t0 = cli_now();
    fprintf(stderr, "perplexity: %lld tokens, %lld chunks of %d\n", (long long)n, (long long)n_chunks, n_ctx);
    for (int64_t c = 0; c < n_chunks; c++) {
        const brisk_token *ct = toks + c * n_ctx;
        brisk_seq_clear(ctx, 0);
        for (int i = 0; i < n_ctx; i++)
            batch[i] = (brisk_batch_entry){i == 0 && bos ? brisk_token_bos(m) : ct[i], i, 0, i >= first && i < n_ctx - 1};
        if (brisk_decode(ctx, batch, n_ctx) != BRISK_OK) {
            cli_error(1, "%s", brisk_last_error());
            goto done;
        }
        for (int i = first; i < n_ctx - 1; i++) {
            const float *lg = brisk_get_logits(ctx, i);
            float mx = lg[0];
            for (int v = 1; v < n_vocab; v++) mx = lg[v] > mx ? lg[v] : mx;
            double sum = 0;
            for (int v = 0; v < n_vocab; v++) sum += exp((double)lg[v] - mx);
            nll += -((double)lg[ct[i + 1]] - mx - log(sum));
            count++;
        }
        printf("[%lld]%.4f%s", (long long)c + 1, exp(nll / count), c + 1 < n_chunks ? "," : "\n");
        fflush(stdout);
    }
    printf("Final estimate: PPL = %.4f over %lld tokens (%.1f s)\n", exp(nll / count), (long long)count,
           cli_now() - t0);
    rc = 0;
done:
    free(batch);
    free(toks);
    free(text);
    brisk_context_free(ctx);
    brisk_model_free(m);
    return rc;
}
