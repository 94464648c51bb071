/* cmd_serve.c — `brisk serve`: the OpenAI-compatible server (src/server/).
 * Runs until SIGINT or SIGTERM, then shuts down cleanly. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "brisk.h"
#include "cli/cli.h"
#include "cli/common.h"
#include "server/server.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: brisk serve -m FILE | -hf REPO[:QUANT] [options]\n"
            "  -m, --model FILE     GGUF model\n"
            "  --host ADDR          address to listen on (default 127.0.0.1)\n"
            "  --port N             port (default 8080; 0: any free port)\n"
            "  -c, --ctx-size N     tokens per request, prompt and completion (default: model's, at most 4096)\n"
            "  -np, --parallel N    requests decoded together (default 4); the KV cache holds N x ctx-size\n"
            "  -b, --batch N        prompt tokens per step (default 2048, llama-server's -b): caps how long a\n"
            "                       step stalls the other slots' decodes; smaller batches prefill slower\n"
            "  --queue N            requests waiting for a slot before 429 (default 64)\n"
            "  --ctx-checkpoints N  hybrid (recurrent) models: state snapshots kept per slot for prefix reuse\n"
            "                       (default 4; 0: a prompt reuses a slot's cache only when it extends all of it)\n"
            "  --api-key KEY        require \"Authorization: Bearer KEY\" (or x-api-key: KEY); visible in ps,\n"
            "                       so prefer --api-key-file FILE (its first line) or BRISK_API_KEY\n"
            "  --cors-origin ORIGIN let web pages of ORIGIN (https://app.example; \"*\": any) call the API;\n"
            "                       repeatable. Without it only this server's own page may\n"
            "  --timeout SECONDS    a request's headers and body must arrive within it; idle connections\n"
            "                       close after it (default 30)\n"
            "  --max-conns-per-ip N open connections one client address may hold (default 256)\n"
            "  --http-threads N     threads serving connections (default 4)\n"
            "  --no-access-log      no line per request on stderr\n"
            "  --chat-template FILE a Jinja chat template instead of the model's (\"chatml\": built-in ChatML)\n"
            "  --alias NAME         model name in /v1/models (default: the file name); repeat it for more\n"
            "                       names that requests may give (any other name is a 404)\n"
            "  --max-body BYTES     request body limit (default 8 MiB)\n"
            "  -t, --threads N      CPU threads (default: all cores)\n"
            "  --embeddings, --embedding\n"
            "                       compute embeddings instead of generating: /v1/embeddings, /v1/rerank\n"
            "  --reranking, --rerank\n"
            "                       a reranker (pooling rank: the model's classification head): /v1/rerank\n"
            "  --pooling TYPE       none, mean, cls, last or rank (default: the model's <arch>.pooling_type);\n"
            "                       none: /v1/rerank scores by late interaction (MaxSim of token vectors)\n"
            "speculative decoding, per slot inside the batch (the output is the model's own; only the speed changes):\n"
            "  -md, --model-draft, --spec-draft-model FILE  a small model of the same vocabulary proposes tokens\n"
            "  --spec-type T        none, ngram-simple, ngram-cache, draft (-md; also draft-simple), mtp\n"
            "                       (the model's own multi-token-prediction head: Qwen3.5/3.6 files with\n"
            "                       nextn layers, where the trunk runs; also draft-mtp) or draft-eagle3 (-md FILE an\n"
            "                       EAGLE-3 drafter GGUF for this model, one per slot, where the target runs;\n"
            "                       also eagle3)\n"
            "                       (default: draft with -md, else none)\n"
            "  --draft-max, --draft, --draft-n, --spec-draft-n-max N  tokens proposed per round (default 8 for a\n"
            "                       draft model, 3 for mtp and draft-eagle3, 2 for n-grams; at most 64); a\n"
            "                       request's speculative.n_max lowers it (0: off)\n"
            "  --draft-min, --draft-n-min, --spec-draft-n-min N  verify no proposal shorter than N (default 0)\n"
            "  --draft-p-min, --spec-draft-p-min P  stop a draft model's, mtp's or draft-eagle3's proposals below\n"
            "                       this probability (default 0.75, mtp and draft-eagle3 0)\n"
            "  --spec-ngram-size-n, --spec-ngram-simple-size-n N  ngram-simple: the longest suffix looked up\n"
            "                       (default 4; down to 2)\n"
            "  --draft-rows N       rows (every generating slot's token and drafts) a step holds before drafts\n"
            "                       shrink (default 1 + draft-max: with that many slots generating, none drafts)\n"
            CLI_MODEL_HELP);
}

/* The key: --api-key, else --api-key-file (its first line), else
 * BRISK_API_KEY. An empty key is refused: it would admit "Bearer ". */
static bool resolve_key(server_config *cfg, const char *file, char **buf) {
    if (file && cfg->api_key) return cli_error(2, "serve: give --api-key or --api-key-file, not both"), false;
    if (file) {
        size_t n = 0;
        if (!(*buf = cli_read_all(file, &n))) return false;
        (*buf)[strcspn(*buf, "\r\n")] = 0;
        cfg->api_key = *buf;
    } else if (!cfg->api_key) cfg->api_key = getenv("BRISK_API_KEY");
    if (cfg->api_key && !cfg->api_key[0]) {
        free(*buf);
        *buf = NULL;
        return cli_error(2, "serve: the API key is empty (%s)", file ? file : "--api-key or BRISK_API_KEY"), false;
    }
    return true;
}

/* Speculation settings from the flags. */
typedef struct serve_spec {
    const char *type, *draft_path;
    int n_max, n_min, ngram_n, rows;
    float p_min;
    brisk_model *dm;       /* the draft model (type "draft"; draft_path is the EAGLE-3 file for "draft-eagle3") */
    brisk_context *dctx;   /* its context: slot i's drafter decodes sequence i */
    drafter **dr;          /* (n_parallel) the slots' drafters */
    int n;
} serve_spec;

static void serve_spec_free(serve_spec *sp) {
    for (int i = 0; i < sp->n; i++) drafter_free(sp->dr[i]);
    free(sp->dr);
    brisk_context_free(sp->dctx);
    brisk_model_free(sp->dm);
}

/* One drafter per slot; a draft model's share one context, one sequence of n_ctx_slot tokens each. */
static bool serve_spec_new(serve_spec *sp, brisk_model *model, brisk_context *ctx, const cli_model_opts *mo,
                           const brisk_context_params *cp, int n_parallel, int n_ctx_slot) {
    bool draft = !strcmp(sp->type, "draft");
    if (!(sp->dr = calloc((size_t)n_parallel, sizeof *sp->dr))) return cli_error(1, "out of memory"), false;
    sp->n = n_parallel;
    brisk_context_params dp = brisk_context_default_params();
    if (draft) {
        cli_model_opts dmo = *mo;
        dmo.n_cpu_moe = 0; /* the draft is small: all of it where -ngl puts it */
        dmo.gpu_mem = 0;
        dmo.tp = 0;
        char why[256];
        if (!cli_load_model(sp->draft_path, &dmo, NULL, &sp->dm)) return false;
        if (!drafter_model_compatible(model, sp->dm, why, sizeof why))
            return cli_error(1, "serve: %s cannot draft for the model: %s", sp->draft_path, why), false;
        dp.n_ctx = n_ctx_slot * n_parallel;
        dp.n_seq_max = n_parallel;
        dp.n_batch = DRAFTER_FEED_CHUNK;
        dp.n_threads = cp->n_threads;
        dp.kv_type = cp->kv_type;
        dp.cpu = cp->cpu;
        dp.n_seq_checkpoints = 1; /* a recurrent draft rolls its rejected proposals back from a snapshot */
        dp.keep_recurrent_inputs = true;
        if (!cli_new_context(sp->dm, &dp, &sp->dctx)) return false;
    }
    for (int i = 0; i < n_parallel; i++) {
        brisk_status st;
        if (draft) {
            st = drafter_new_model(sp->dctx, i, brisk_n_vocab(model), sp->p_min, &sp->dr[i]);
        } else if (!strcmp(sp->type, "mtp")) { /* its own MTP context of n_ctx_slot per slot */
            brisk_context_params mp = *cp;
            mp.n_ctx = n_ctx_slot;
            st = drafter_new_mtp(ctx, model, &mp, sp->p_min, &sp->dr[i]);
        } else if (!strcmp(sp->type, "draft-eagle3")) { /* one file, weights and backend; a cache a slot */
            st = drafter_new_eagle3(ctx, model, sp->draft_path, n_ctx_slot, cp->n_threads, sp->p_min,
                                    i ? sp->dr[0] : NULL, &sp->dr[i]);
        } else if (!strcmp(sp->type, "ngram-simple")) {
            st = drafter_new_lookup(sp->ngram_n < 2 ? sp->ngram_n : 2, sp->ngram_n, &sp->dr[i]);
        } else {
            st = drafter_new_cache(n_ctx_slot, &sp->dr[i]);
        }
        if (st != BRISK_OK) return cli_error(1, "serve: %s", brisk_last_error()), false;
    }
    return true;
}

static bool is_loopback(const char *host) {
    return !strncmp(host, "127.", 4) || !strcmp(host, "::1") || !strcmp(host, "localhost");
}

int cmd_serve(int argc, char **argv) {
    const char *model_path = NULL, *template_path = NULL, *key_file = NULL;
    const char *aliases[32], *cors[32];
    int n_alias = 0, n_cors = 0;
    int n_ctx = 0, n_threads = 0, max_body_mb = 8, max_body = -1, n_ckpt = 4, pooling = BRISK_POOLING_UNSPECIFIED;
    bool embeddings = false;
    serve_spec spec = {.n_max = -1, .ngram_n = 4, .p_min = 0.75f};
    bool p_min_set = false;
    server_config cfg = {.host = "127.0.0.1", .port = 8080, .n_parallel = 4, .prefill_chunk = 2048, .max_queue = 64,
                         .access_log = true};
    cli_model_opts mo = CLI_MODEL_OPTS_DEFAULT;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int g = cli_model_flag(argc, argv, &i, &mo);
        if (g) {
            if (g < 0) return 2;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--no-access-log")) {
            cfg.access_log = false;
            continue;
        }
        if (!strcmp(a, "--embeddings") || !strcmp(a, "--embedding") || !strcmp(a, "--reranking") ||
            !strcmp(a, "--rerank")) {
            embeddings = true;
            if (a[2] == 'r') pooling = BRISK_POOLING_RANK;
            continue;
        }
        if (!(v = cli_next(argc, argv, &i))) return 2;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model_path = v;
        else if (!strcmp(a, "--host")) cfg.host = v;
        else if (!strcmp(a, "--api-key")) cfg.api_key = v;
        else if (!strcmp(a, "--api-key-file")) key_file = v;
        else if (!strcmp(a, "--alias") || !strcmp(a, "--cors-origin")) {
            bool al = a[2] == 'a';
            if ((al ? n_alias : n_cors) == 32) return cli_error(2, "serve: at most 32 %s", a);
            if (al) aliases[n_alias++] = v;
            else cors[n_cors++] = v;
        } else if (!strcmp(a, "--timeout")) {
            if (!cli_int(a, v, 1, 3600, &cfg.timeout_s)) return 2;
        } else if (!strcmp(a, "--max-conns-per-ip")) {
            if (!cli_int(a, v, 1, 1 << 20, &cfg.per_ip_limit)) return 2;
        } else if (!strcmp(a, "--http-threads")) {
            if (!cli_int(a, v, 1, 256, &cfg.http_threads)) return 2;
        }
        else if (!strcmp(a, "--chat-template")) template_path = v;
        else if (!strcmp(a, "--port")) {
            if (!cli_int(a, v, 0, 65535, &cfg.port)) return 2;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
            if (!cli_int(a, v, 0, 1 << 24, &n_ctx)) return 2;
        } else if (!strcmp(a, "--parallel") || !strcmp(a, "-np")) {
            if (!cli_int(a, v, 1, 1024, &cfg.n_parallel)) return 2;
        } else if (!strcmp(a, "--batch") || !strcmp(a, "-b")) {
            if (!cli_int(a, v, 1, 1 << 16, &cfg.prefill_chunk)) return 2;
        } else if (!strcmp(a, "--ctx-checkpoints")) {
            if (!cli_int(a, v, 0, 256, &n_ckpt)) return 2;
        } else if (!strcmp(a, "--queue")) {
            if (!cli_int(a, v, 1, 1 << 20, &cfg.max_queue)) return 2;
        } else if (!strcmp(a, "--max-body")) {
            if (!cli_int(a, v, 1024, 1 << 30, &max_body)) return 2;
        } else if (!strcmp(a, "--pooling")) {
            if ((pooling = brisk_pooling_from_name(v)) < BRISK_POOLING_NONE)
                return cli_error(2, "serve: --pooling '%s': none, mean, cls, last or rank", v);
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!cli_int(a, v, 1, 1024, &n_threads)) return 2;
        } else if (!strcmp(a, "-md") || !strcmp(a, "--model-draft") || !strcmp(a, "--spec-draft-model")) {
            spec.draft_path = v;
        } else if (!strcmp(a, "--spec-type")) {
            if (!strcmp(v, "draft-simple")) v = "draft"; /* llama.cpp's name */
            if (!strcmp(v, "draft-mtp")) v = "mtp"; /* llama.cpp's name */
            if (!strcmp(v, "eagle3")) v = "draft-eagle3";
            if (strcmp(v, "none") && strcmp(v, "ngram-simple") && strcmp(v, "ngram-cache") && strcmp(v, "draft") &&
                strcmp(v, "mtp") && strcmp(v, "draft-eagle3"))
                return cli_error(2, "serve: --spec-type %s (want none, ngram-simple, ngram-cache, draft, mtp or "
                                 "draft-eagle3)", v);
            spec.type = v;
        } else if (!strcmp(a, "--draft-max") || !strcmp(a, "--draft") || !strcmp(a, "--draft-n") ||
                   !strcmp(a, "--spec-draft-n-max")) {
            if (!cli_int(a, v, 1, DRAFTER_MAX_DRAFT, &spec.n_max)) return 2;
        } else if (!strcmp(a, "--draft-min") || !strcmp(a, "--draft-n-min") || !strcmp(a, "--spec-draft-n-min")) {
            if (!cli_int(a, v, 0, DRAFTER_MAX_DRAFT, &spec.n_min)) return 2;
        } else if (!strcmp(a, "--draft-p-min") || !strcmp(a, "--spec-draft-p-min")) {
            if (!cli_float(a, v, 0, 1, &spec.p_min)) return 2;
            p_min_set = true;
        } else if (!strcmp(a, "--spec-ngram-size-n") || !strcmp(a, "--spec-ngram-simple-size-n")) {
            if (!cli_int(a, v, 1, DRAFTER_NGRAM_MAX, &spec.ngram_n)) return 2;
        } else if (!strcmp(a, "--draft-rows")) {
            if (!cli_int(a, v, 1, 1 << 16, &spec.rows)) return 2;
        } else return cli_error(2, "serve: unknown option '%s' (try `brisk serve --help`)", a);
    }
    if (!spec.type) spec.type = spec.draft_path ? "draft" : "none";
    if (!strcmp(spec.type, "draft") && !spec.draft_path) return cli_error(2, "serve: --spec-type draft needs -md FILE");
    if (!strcmp(spec.type, "draft-eagle3") && !spec.draft_path)
        return cli_error(2, "serve: --spec-type draft-eagle3 needs -md FILE (the EAGLE-3 drafter)");
    bool speculate = strcmp(spec.type, "none") != 0;
    if (speculate && embeddings) return cli_error(2, "serve: speculative decoding is for generation, not --embeddings");
    if (!strcmp(spec.type, "draft") && cfg.n_parallel > DRAFTER_FEED_CHUNK) /* drafter_draft_models' lockstep */
        return cli_error(2, "serve: a draft model drafts for at most %d slots (--parallel)", DRAFTER_FEED_CHUNK);
    bool mtp = !strcmp(spec.type, "mtp") || !strcmp(spec.type, "draft-eagle3"); /* both draft from the target */
    if (spec.n_max < 0) spec.n_max = mtp ? 3 : strcmp(spec.type, "draft") ? 2 : 8; /* as brisk run */
    if (mtp && !p_min_set) spec.p_min = 0; /* llama.cpp's default for mtp */
    int hf_rc = cli_model_path(&mo, "serve", &model_path);
    if (hf_rc) return hf_rc;
    cfg.max_body = max_body > 0 ? (size_t)max_body : (size_t)max_body_mb << 20;
    const char *base = strrchr(model_path, '/'), *names[33];
    base = base ? base + 1 : model_path;
    cfg.model_id = n_alias ? aliases[0] : mo.hf ? mo.hf : base; /* -hf: the name it was asked by */
    for (int i = 1; i < n_alias; i++) names[cfg.n_model_names++] = aliases[i];
    names[cfg.n_model_names++] = base;
    if (mo.hf && n_alias) names[cfg.n_model_names++] = mo.hf;
    cfg.model_names = names;
    cfg.cors_origins = cors;
    cfg.n_cors_origins = n_cors;
    char *key_buf = NULL;
    if (!resolve_key(&cfg, key_file, &key_buf)) return 2;
    if (!cfg.api_key && !is_loopback(cfg.host))
        fprintf(stderr, "brisk serve: warning: listening on %s without an API key: anyone who can reach this "
                        "address can use the model (set BRISK_API_KEY or --api-key-file)\n", cfg.host);

    /* Signals go to sigwait below, not to whichever thread runs. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    int rc = 1;
    char *template_src = NULL;
    size_t template_len = 0;
    if (template_path && strcmp(template_path, "chatml")) {
        if (!(template_src = cli_read_all(template_path, &template_len))) {
            free(key_buf);
            return 1;
        }
        cfg.chat_template = template_src;
    } else cfg.chat_template = template_path;
    brisk_model *model = NULL;
    brisk_context *ctx = NULL;
    server *srv = NULL;
    brisk_context_params cp = brisk_context_default_params();
    cp.n_ctx = (n_ctx > 0 ? n_ctx : 4096) * cfg.n_parallel; /* --gpu-mem's estimate: at most this */
    cp.n_seq_max = cfg.n_parallel;
    cp.n_batch = cfg.n_parallel * (1 + (speculate ? spec.n_max : 0)) + cfg.prefill_chunk; /* scheduler.h */
    /* logits rows a step may want: the generating slots' tokens and drafts (at most max(--draft-rows,
     * slots)) and the prompts ending in it (other slots); past n_outputs_max a step is several passes */
    int spec_rows = spec.rows ? spec.rows : 1 + spec.n_max, outs = cfg.n_parallel + spec_rows;
    if (speculate && outs > (cfg.n_parallel > 64 ? cfg.n_parallel : 64)) cp.n_outputs_max = outs;
    cp.n_threads = n_threads;
    cli_context_opts(&mo, &cp);
    /* speculation snapshots a recurrent state before each round that may be cut back */
    cp.n_seq_checkpoints = speculate && n_ckpt < 1 ? 1 : n_ckpt;
    cp.keep_recurrent_inputs = speculate; /* a rejected draft's cut replays the kept inputs (brisk.h) */
    cp.embeddings = embeddings;
    cp.pooling = pooling;
    if (pooling != BRISK_POOLING_UNSPECIFIED && !embeddings)
        return free(key_buf), free(template_src), cli_error(2, "serve: --pooling needs --embeddings");
    if (!cli_load_model(model_path, &mo, &cp, &model)) goto done;
    brisk_model_info info;
    brisk_model_get_info(model, &info);
    cfg.n_ctx_slot = n_ctx > 0 ? n_ctx : (info.n_ctx_train < 4096 ? info.n_ctx_train : 4096);
    cp.n_ctx = cfg.n_ctx_slot * cfg.n_parallel;
    cfg.ckpt_interval = cp.kv_block_size;
    if (!cli_new_context(model, &cp, &ctx)) goto done;
    if (speculate) {
        if (!serve_spec_new(&spec, model, ctx, &mo, &cp, cfg.n_parallel, cfg.n_ctx_slot)) goto done;
        cfg.spec = (sched_spec){spec.type, spec.dr, spec.n_max, spec.n_min, spec.p_min, spec.rows};
    }
    if (server_start(model, ctx, &cfg, &srv) != BRISK_OK) {
        cli_error(1, "serve: %s", brisk_last_error());
        goto done;
    }
    char spec_note[96] = "";
    if (speculate) snprintf(spec_note, sizeof spec_note, "; speculative %s, up to %d drafts", spec.type, spec.n_max);
    fprintf(stderr, "brisk serve: %s on http://%s%s%s:%d (%d slots of %d tokens%s%s%s)\n", cfg.model_id,
            strchr(cfg.host, ':') ? "[" : "", cfg.host, strchr(cfg.host, ':') ? "]" : "", server_port(srv),
            cfg.n_parallel, cfg.n_ctx_slot, embeddings ? "; embeddings, pooling " : "",
            embeddings ? brisk_pooling_name(brisk_context_pooling(ctx)) : "", spec_note);
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "brisk serve: %s, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    rc = 0;
done:
    server_stop(srv);
    serve_spec_free(&spec); /* after the scheduler, before the model */
    brisk_context_free(ctx);
    brisk_model_free(model);
    free(template_src);
    free(key_buf);
    return rc;
}
