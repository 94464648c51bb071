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

static bool is_loopback(const char *host) {
    return !strncmp(host, "127.", 4) || !strcmp(host, "::1") || !strcmp(host, "localhost");
}

int cmd_serve(int argc, char **argv) {
    const char *model_path = NULL, *template_path = NULL, *key_file = NULL;
    const char *aliases[32], *cors[32];
    int n_alias = 0, n_cors = 0;
    int n_ctx = 0, n_threads = 0, max_body_mb = 8, max_body = -1, n_ckpt = 4, pooling = BRISK_POOLING_UNSPECIFIED;
    bool embeddings = false;
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
        } else return cli_error(2, "serve: unknown option '%s' (try `brisk serve --help`)", a);
    }
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
    cp.n_batch = cfg.n_parallel + cfg.prefill_chunk;
    cp.n_threads = n_threads;
    cp.kv_type = (brisk_kv_type)mo.kv_type;
    cp.attn_sparse_k = mo.attn_sparse;
    cp.n_seq_checkpoints = n_ckpt;
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
    if (server_start(model, ctx, &cfg, &srv) != BRISK_OK) {
        cli_error(1, "serve: %s", brisk_last_error());
        goto done;
    }
    fprintf(stderr, "brisk serve: %s on http://%s%s%s:%d (%d slots of %d tokens%s%s)\n", cfg.model_id,
            strchr(cfg.host, ':') ? "[" : "", cfg.host, strchr(cfg.host, ':') ? "]" : "", server_port(srv),
            cfg.n_parallel, cfg.n_ctx_slot, embeddings ? "; embeddings, pooling " : "",
            embeddings ? brisk_pooling_name(brisk_context_pooling(ctx)) : "");
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "brisk serve: %s, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    rc = 0;
done:
    server_stop(srv);
    brisk_context_free(ctx);
    brisk_model_free(model);
    free(template_src);
    free(key_buf);
    return rc;
}
