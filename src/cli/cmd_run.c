/* cmd_run.c — `brisk run`: generate a continuation of a prompt, streaming it
 * to stdout; timings go to stderr. Flags follow llama.cpp's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "brisk.h"
#include "cli/cli.h"
#include "cli/common.h"
#include "engine/speculative.h"

/* The speculation `brisk run` does without flags (see the measurements in bench/RESULTS.md). */
#define SPEC_DEFAULT_NAME "none"

static void usage(FILE *f) {
    fprintf(f,
            "usage: brisk run -m FILE | -hf REPO[:QUANT] -p TEXT [options]\n"
            "  -m, --model FILE     GGUF model\n"
            "  -p, --prompt TEXT    prompt (-f, --file FILE reads it from a file)\n"
            "  -n, --n-predict N    tokens to generate (default 128; -1: until end of text or context)\n"
            "  -c, --ctx-size N     context size (default: model's, at most 4096)\n"
            "  -t, --threads N      CPU threads (default: all cores)\n"
            "  -b, --batch-size N   prompt tokens per call (default 2048), run in passes of -ub\n"
            CLI_SAMPLER_HELP
            "  --ignore-eos         keep generating past end-of-text\n"
            CLI_STOP_HELP
            "  -cnv, --conversation a conversation through the model's chat template: `brisk chat`, which takes\n"
            "                       these flags (-p is then the system message)\n"
            "  -sys, --system-prompt TEXT  the same, with TEXT the system message\n"
            CLI_MODEL_HELP
            "  --no-display-prompt  (default) print only the continuation\n"
            "speculative decoding (the output is the model's own; only the speed changes):\n"
            "  -md, --model-draft FILE  a small model of the same vocabulary proposes tokens,\n"
            "                       the target checks them in one batch\n"
            "  --spec-type T        none, ngram-simple (prompt lookup: the text's own repeats), ngram-cache\n"
            "                       (counts of what followed each 1..4-gram of the text), draft (-md) or mtp\n"
            "                       (the model's own multi-token-prediction head: Qwen3.5/3.6 files with\n"
            "                       nextn layers, where the trunk runs; also draft-mtp) or draft-eagle3 (-md FILE an\n"
            "                       EAGLE-3 drafter GGUF for this model: drafts from three of its layers'\n"
            "                       hidden states; where the target runs, all on one device; also eagle3)\n"
            "                       (default: draft with -md, else " SPEC_DEFAULT_NAME ")\n"
            "  --draft-max, --draft N  tokens proposed per round (default 8 for a draft model, 3 for mtp, 2 for\n"
            "                       n-grams; at most 64)\n"
            "  --draft-min N        verify no proposal shorter than N (default 0)\n"
            "  --draft-p-min P      stop a draft model's or mtp's proposals below this probability (default 0.75,\n"
            "                       mtp 0)\n"
            "  --spec-ngram-size-n, --spec-ngram-simple-size-n N  ngram-simple: the longest suffix looked up\n"
            "                       (default 4; down to 2)\n");
}

/* Speculative generation: the emit callback streams text and applies -n and end-of-text. */
typedef struct run_emit {
    const brisk_model *model;
    brisk_detok dt;
    int n_gen, n_predict;
    bool ignore_eos, stopped;
    cli_stop *stop; /* -r */
    double t_first; /* when the first token came: the prompt's end, as plain decoding times it */
} run_emit;

static bool run_emit_token(void *user, brisk_token t) {
    run_emit *e = user;
    if (e->stopped || (e->n_predict >= 0 && e->n_gen >= e->n_predict)) return false;
    if (!e->ignore_eos && brisk_token_is_eog(e->model, t)) return false;
    char out[1100];
    size_t len;
    if (!e->n_gen) e->t_first = cli_now();
    if (brisk_detok_push(e->model, &e->dt, t, out, sizeof out, &len) == BRISK_OK && len) {
        fwrite(out, 1, len, stdout);
        fflush(stdout);
        e->stopped = cli_stop_push(e->stop, out, len);
    }
    e->n_gen++;
    return true;
}

/* Speculative generation with a drafter of spec_type ("draft": the model at draft_path). */
static int run_speculative(brisk_model *model, brisk_context *ctx, const brisk_context_params *cp,
                           const cli_model_opts *mo, const char *spec_type, const char *draft_path, int n_draft,
                           int n_draft_min, float p_min, int ngram_n, brisk_sampler *smp, const brisk_token *toks,
                           int64_t n_prompt, int ctx_size, int n_predict, bool ignore_eos,
                           cli_stop *stop) {
    brisk_model *dm = NULL;
    brisk_context *dc = NULL;
    drafter *dr = NULL;
    int rc = 1;
    char why[256];
    brisk_status s;
    if (!strcmp(spec_type, "draft")) {
        cli_model_opts dmo = *mo;
        dmo.n_cpu_moe = 0; /* the draft is small: all of it where -ngl puts it */
        dmo.gpu_mem = 0;
        dmo.tp = 0; /* the draft runs whole on rank 0's GPU */
        if (!cli_load_model(draft_path, &dmo, NULL, &dm)) goto done;
        if (!drafter_model_compatible(model, dm, why, sizeof why)) {
            cli_error(1, "run: %s cannot draft for %s: %s", draft_path, "the model", why);
            goto done;
        }
        if (!cli_new_context(dm, cp, &dc)) goto done;
        s = drafter_new_model(dc, 0, brisk_n_vocab(model), p_min, &dr);
    } else if (!strcmp(spec_type, "mtp")) {
        s = drafter_new_mtp(ctx, model, cp, p_min, &dr);
    } else if (!strcmp(spec_type, "draft-eagle3")) {
        s = drafter_new_eagle3(ctx, model, draft_path, ctx_size, cp->n_threads, p_min, NULL, &dr);
    } else if (!strcmp(spec_type, "ngram-simple")) {
        s = drafter_new_lookup(ngram_n < 2 ? ngram_n : 2, ngram_n, &dr);
    } else {
        s = drafter_new_cache(ctx_size, &dr);
    }
    if (s != BRISK_OK) {
        cli_error(1, "%s", brisk_last_error());
        goto done;
    }
    run_emit e = {.model = model, .n_predict = n_predict, .ignore_eos = ignore_eos, .stop = stop};
    spec_stats st;
    double t0 = cli_now();
    s = spec_generate(ctx, dr, smp, toks, n_prompt, n_draft, n_draft_min, ctx_size, run_emit_token, &e, &st);
    double t1 = cli_now();
    fputc('\n', stdout);
    if (s != BRISK_OK) {
        cli_error(1, "%s", brisk_last_error());
        goto done;
    }
    /* the same clock as plain decoding's: the prompt up to the first token, then the rest */
    double tf = e.n_gen ? e.t_first : t1;
    fprintf(stderr, "\nprompt: %lld tokens in %.3f s (%.2f tokens/s)\n", (long long)n_prompt, tf - t0,
            n_prompt / (tf - t0));
    fprintf(stderr, "generation: %d tokens in %.3f s (%.2f tokens/s)\n", e.n_gen, t1 - tf,
            e.n_gen > 1 ? (e.n_gen - 1) / (t1 - tf) : 0.0);
    fprintf(stderr,
            "%s: %lld rounds (%lld with proposals), %lld proposed, %lld accepted (%.1f%%), "
            "%.2f tokens per target step\n",
            spec_type, (long long)st.rounds, (long long)st.draft_rounds, (long long)st.drafted,
            (long long)st.accepted, st.drafted ? 100.0 * st.accepted / st.drafted : 0.0,
            st.rounds ? (double)(st.emitted - 1) / st.rounds : 0.0);
    rc = 0;
done:
    drafter_free(dr);
    brisk_context_free(dc);
    brisk_model_free(dm);
    return rc;
}

int cmd_run(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL, *prompt_file = NULL, *draft_path = NULL, *spec_type = NULL;
    int n_predict = 128, n_ctx = 0, n_threads = 0, n_draft = -1, n_draft_min = 0, ngram_n = 4, n_batch = 2048;
    float draft_p_min = -1; /* -1: the drafter's default */
    bool ignore_eos = false, seed_set = false;
    brisk_sampler_params sp = brisk_sampler_default_params();
    cli_model_opts mo = CLI_MODEL_OPTS_DEFAULT;
    cli_stop stop = {0};
    /* -cnv / -sys (llama.cpp's conversation mode): `brisk chat` with these same flags */
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-cnv") || !strcmp(argv[i], "--conversation") || !strcmp(argv[i], "-sys") ||
            !strcmp(argv[i], "--system-prompt"))
            return cmd_chat(argc, argv);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int g = cli_model_flag(argc, argv, &i, &mo);
        if (!g) g = cli_sampler_flag(argc, argv, &i, &sp, &seed_set);
        if (!g) g = cli_stop_flag(argc, argv, &i, &stop);
        if (g) {
            if (g < 0) return 2;
            continue;
        }
#define VAL() \
    if (!(v = cli_next(argc, argv, &i))) return 2
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            VAL();
            model_path = v;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            VAL();
            prompt = v;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            VAL();
            prompt_file = v;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            VAL();
            if (!cli_int(a, v, -1, 1 << 30, &n_predict)) return 2;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
            VAL();
            if (!cli_int(a, v, 0, 1 << 24, &n_ctx)) return 2;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            VAL();
            if (!cli_int(a, v, 1, 1024, &n_threads)) return 2;
        } else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) {
            VAL();
            if (!cli_int(a, v, 1, 1 << 16, &n_batch)) return 2;
        } else if (!strcmp(a, "-md") || !strcmp(a, "--model-draft")) {
            VAL();
            draft_path = v;
        } else if (!strcmp(a, "--draft-max") || !strcmp(a, "--draft")) {
            VAL();
            if (!cli_int(a, v, 1, 64, &n_draft)) return 2;
        } else if (!strcmp(a, "--draft-min")) {
            VAL();
            if (!cli_int(a, v, 0, 64, &n_draft_min)) return 2;
        } else if (!strcmp(a, "--spec-type")) {
            VAL();
            if (!strcmp(v, "draft-mtp")) v = "mtp"; /* llama.cpp's name */
            if (!strcmp(v, "eagle3")) v = "draft-eagle3";
            if (strcmp(v, "none") && strcmp(v, "ngram-simple") && strcmp(v, "ngram-cache") && strcmp(v, "draft") &&
                strcmp(v, "mtp") && strcmp(v, "draft-eagle3"))
                return cli_error(2, "run: --spec-type %s (want none, ngram-simple, ngram-cache, draft, mtp or "
                                 "draft-eagle3)", v);
            spec_type = v;
        } else if (!strcmp(a, "--spec-ngram-size-n") || !strcmp(a, "--spec-ngram-simple-size-n")) {
            VAL();
            if (!cli_int(a, v, 1, 64, &ngram_n)) return 2;
        } else if (!strcmp(a, "--draft-p-min")) {
            VAL();
            if (!cli_float(a, v, 0, 1, &draft_p_min)) return 2;
        } else if (!strcmp(a, "--ignore-eos")) {
            ignore_eos = true;
        } else if (!strcmp(a, "--no-display-prompt")) {
        } else {
            return cli_error(2, "run: unknown option '%s' (try `brisk run --help`)", a);
        }
#undef VAL
    }
    if (!prompt && !prompt_file) return cli_error(2, "run: -p TEXT or -f FILE is required");
    if (!spec_type) spec_type = draft_path ? "draft" : SPEC_DEFAULT_NAME;
    if (!strcmp(spec_type, "draft") && !draft_path) return cli_error(2, "run: --spec-type draft needs -md FILE");
    if (!strcmp(spec_type, "draft-eagle3") && !draft_path)
        return cli_error(2, "run: --spec-type draft-eagle3 needs -md FILE (the EAGLE-3 drafter)");
    bool spec = strcmp(spec_type, "none") != 0;
    /* a CPU verify step of 1 + k tokens costs ~1x a one-token step at k = 1, 1.3x at 2, 1.6x at 3
     * (brisk bench --spec-replay, brisk-kjv-6m): n-gram drafts, mostly short-lived, pay at k = 2 */
    bool mtp = !strcmp(spec_type, "mtp") || !strcmp(spec_type, "draft-eagle3"); /* both draft from the target */
    if (n_draft < 0) n_draft = mtp ? 3 : strcmp(spec_type, "draft") ? 2 : 8; /* mtp: llama.cpp's default */
    if (draft_p_min < 0) draft_p_min = mtp ? 0.0f : 0.75f;
    int hf_rc = cli_model_path(&mo, "run", &model_path);
    if (hf_rc) return hf_rc;
    if (!seed_set) sp.seed = (uint64_t)(cli_now() * 1e9);

    char *file_text = NULL;
    size_t plen = 0;
    if (prompt_file) {
        if (!(file_text = cli_read_all(prompt_file, &plen))) return 1;
        prompt = file_text;
    } else {
        plen = strlen(prompt);
    }

    int rc = 1;
    brisk_model *model = NULL;
    brisk_context *ctx = NULL;
    brisk_sampler *smp = NULL;
    brisk_token *toks = NULL;
    brisk_batch_entry *batch = NULL;
    brisk_context_params cp = brisk_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_threads = n_threads;
    cp.n_batch = n_batch;
    cli_context_opts(&mo, &cp);
    if (spec) { /* recurrent models roll a rejected draft back from a snapshot, replaying the kept inputs */
        cp.n_seq_checkpoints = 2;
        cp.keep_recurrent_inputs = true;
    }
    if (!cli_load_model(model_path, &mo, &cp, &model)) goto done;
    if (!cli_new_context(model, &cp, &ctx)) goto done;
    brisk_model_info info;
    brisk_model_get_info(model, &info);
    int ctx_size = n_ctx > 0 ? n_ctx : (info.n_ctx_train < 4096 ? info.n_ctx_train : 4096);
    int64_t n_prompt = 0;
    if (!cli_tokenize(model, prompt, plen, true, true, &toks, &n_prompt)) goto done;
    if (n_prompt == 0) {
        cli_error(1, "run: the prompt is empty");
        goto done;
    }
    if (n_prompt >= ctx_size) {
        cli_error(1, "run: the prompt has %lld tokens, more than the context size %d (use -c)",
                  (long long)n_prompt, ctx_size);
        goto done;
    }
    batch = malloc((size_t)n_batch * sizeof *batch);
    if (!batch) {
        cli_error(1, "out of memory");
        goto done;
    }
    if (brisk_sampler_new(&sp, brisk_n_vocab(model), &smp) != BRISK_OK) {
        cli_error(1, "%s", brisk_last_error());
        goto done;
    }
    if (spec) {
        rc = run_speculative(model, ctx, &cp, &mo, spec_type, draft_path, n_draft, n_draft_min, draft_p_min, ngram_n,
                             smp, toks, n_prompt, ctx_size, n_predict, ignore_eos, &stop);
        goto done;
    }
    double t0 = cli_now();
    for (int64_t i = 0; i < n_prompt; i += n_batch) {
        int nb = n_prompt - i < n_batch ? (int)(n_prompt - i) : n_batch;
        for (int j = 0; j < nb; j++) {
            batch[j] = (brisk_batch_entry){toks[i + j], (int32_t)(i + j), 0, i + j == n_prompt - 1};
            brisk_sampler_accept(smp, toks[i + j]);
        }
        if (brisk_decode(ctx, batch, nb) != BRISK_OK) {
            cli_error(1, "%s", brisk_last_error());
            goto done;
        }
    }
    double t1 = cli_now();
    int n_gen = 0;
    int32_t pos = (int32_t)n_prompt;
    brisk_detok dt = {0};
    char out[1100];
    const float *logits = brisk_get_logits(ctx, (int)((n_prompt - 1) % n_batch));
    while (n_predict < 0 || n_gen < n_predict) {
        brisk_token t = brisk_sampler_sample(smp, logits);
        if (!ignore_eos && brisk_token_is_eog(model, t)) break;
        brisk_sampler_accept(smp, t);
        size_t len;
        bool stopped = false;
        if (brisk_detok_push(model, &dt, t, out, sizeof out, &len) == BRISK_OK && len) {
            fwrite(out, 1, len, stdout);
            fflush(stdout);
            stopped = cli_stop_push(&stop, out, len);
        }
        n_gen++;
        if (pos >= ctx_size || stopped) break;
        batch[0] = (brisk_batch_entry){t, pos++, 0, true};
        if (brisk_decode(ctx, batch, 1) != BRISK_OK) {
            cli_error(1, "%s", brisk_last_error());
            goto done;
        }
        logits = brisk_get_logits(ctx, 0);
    }
    double t2 = cli_now();
    fputc('\n', stdout);
    fprintf(stderr, "\nprompt: %lld tokens in %.3f s (%.2f tokens/s)\n", (long long)n_prompt, t1 - t0,
            n_prompt / (t1 - t0));
    fprintf(stderr, "generation: %d tokens in %.3f s (%.2f tokens/s)\n", n_gen, t2 - t1,
            n_gen > 0 ? n_gen / (t2 - t1) : 0.0);
    cli_report_expert_cache(model, ctx);
    rc = 0;
done:
    cli_free_expert_stats(&cp);
    free(batch);
    free(toks);
    free(file_text);
    brisk_sampler_free(smp);
    brisk_context_free(ctx);
    brisk_model_free(model);
    return rc;
}
