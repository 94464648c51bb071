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
            CLI_HF_HELP
            "  --host ADDR          address to listen on (default 127.0.0.1)\n"
            "  --port N             port (default 8080; 0: any free port)\n"
            "  -c, --ctx-size N     tokens per request, prompt and completion (default: model's, at most 4096)\n"
            "  --parallel N         requests decoded together (default 4); the KV cache holds N x ctx-size\n"
            "  -b, --batch N        prompt tokens per step (default 2048, llama-server's -b): caps how long a\n"
            "                       step stalls the other slots' decodes; smaller batches prefill slower\n"
            "  --queue N            requests waiting for a slot before 429 (default 64)\n"
            "  --ctx-checkpoints N  hybrid (recurrent) models: state snapshots kept per slot for prefix reuse\n"
            "                       (default 4; 0: a prompt reuses a slot's cache only when it extends all of it)\n"
            "  --api-key KEY        require \"Authorization: Bearer KEY\"\n"
            "  --chat-template FILE a Jinja chat template instead of the model's (\"chatml\": built-in ChatML)\n"
            "  --alias NAME         model name in /v1/models (default: the file name)\n"
            "  --max-body BYTES     request body limit (default 8 MiB)\n"
            "  -t, --threads N      CPU threads (default: all cores)\n"
            CLI_KV_HELP
            "  -ngl N               layers on the GPU, the last ones (-1: all when one is present, 0: CPU)\n"
            CLI_CPU_MOE_HELP
            "  --device I           GPU index (default 0)\n"
            CLI_TP_HELP
            CLI_ROPE_HELP CLI_LLAMACPP_HELP);
}

int cmd_serve(int argc, char **argv) {
    const char *model_path = NULL, *alias = NULL, *template_path = NULL;
    int n_ctx = 0, n_threads = 0, max_body_mb = 8, max_body = -1, n_ckpt = 4;
    server_config cfg = {.host = "127.0.0.1", .port = 8080, .n_parallel = 4, .prefill_chunk = 2048, .max_queue = 64};
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
        if (!(v = cli_next(argc, argv, &i))) return 2;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model_path = v;
        else if (!strcmp(a, "--host")) cfg.host = v;
        else if (!strcmp(a, "--api-key")) cfg.api_key = v;
        else if (!strcmp(a, "--alias")) alias = v;
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
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!cli_int(a, v, 1, 1024, &n_threads)) return 2;
        } else return cli_error(2, "serve: unknown option '%s' (try `brisk serve --help`)", a);
    }
    int hf_rc = cli_model_path(&mo, "serve", &model_path);
    if (hf_rc) return hf_rc;
    cfg.max_body = max_body > 0 ? (size_t)max_body : (size_t)max_body_mb << 20;
    const char *base = strrchr(model_path, '/');
    cfg.model_id = alias ? alias : mo.hf ? mo.hf : base ? base + 1 : model_path; /* -hf: the name it was asked by */

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
        if (!(template_src = cli_read_all(template_path, &template_len))) return 1;
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
    cp.n_seq_checkpoints = n_ckpt;
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
    fprintf(stderr, "brisk serve: %s on http://%s%s%s:%d (%d slots of %d tokens)\n", cfg.model_id,
            strchr(cfg.host, ':') ? "[" : "", cfg.host, strchr(cfg.host, ':') ? "]" : "", server_port(srv),
            cfg.n_parallel, cfg.n_ctx_slot);
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "brisk serve: %s, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    rc = 0;
done:
    server_stop(srv);
    brisk_context_free(ctx);
    brisk_model_free(model);
    free(template_src);
    return rc;
}
