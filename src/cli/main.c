/* main.c — `brisk <command> [options]`: dispatch to the subcommands. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_plan.h"
#include "cli/cli.h"
#include "engine/tp.h"

#ifndef BRISK_COMMIT /* the Makefile passes git's short hash; "unknown" outside a git checkout */
#define BRISK_COMMIT "unknown"
#endif

int cli_error(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("brisk: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return code;
}

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} commands[] = {
    {"run", cmd_run, "generate text from a prompt"},
    {"chat", cmd_chat, "a conversation with the model through its chat template"},
    {"serve", cmd_serve, "an OpenAI-compatible HTTP server"},
    {"bench", cmd_bench, "measure prompt and generation speed"},
    {"perplexity", cmd_perplexity, "perplexity of a text file"},
    {"calibrate", cmd_calibrate, "count an MoE model's expert routings over a text"},
    {"tokenize", cmd_tokenize, "print the token ids of stdin"},
    {"embed", cmd_embed, "print the embeddings of texts (JSON)"},
    {"info", cmd_info, "print a GGUF file's metadata and tensors"},
    {"synth", cmd_synth, "write a random-weight model of a given shape"},
    {"quantize", cmd_quantize, "convert a model's weights to another type"},
    {"convert", cmd_convert, "a Hugging Face checkpoint (safetensors) to GGUF"},
    {"pull", cmd_pull, "fetch a GGUF model from Hugging Face (REPO[:QUANT]) into the cache"},
    {"ls", cmd_ls, "list the models in the Hugging Face cache"},
    {"rm", cmd_rm, "remove a model from the Hugging Face cache"},
};

/* `brisk --version`: the version, the commit and CUDA; with CUDA the runtime and driver versions,
 * then a line per GPU with its name and compute capability. */
static int version(void) {
    printf("brisk %s\ncommit: %s\n", BRISK_VERSION, BRISK_COMMIT);
#ifdef BRISK_HAVE_CUDA
    int n = bk_cuda_device_count(), rt = bk_cuda_runtime_version(), drv = bk_cuda_driver_version();
    printf("CUDA: compiled in, runtime %d.%d, driver %d.%d, %d device%s\n", rt / 1000, rt % 1000 / 10, drv / 1000,
           drv % 1000 / 10, n, n == 1 ? "" : "s");
    for (int d = 0; d < n; d++) {
        char name[256];
        int major, minor;
        if (bk_cuda_device_name(d, name, sizeof name, &major, &minor) == BRISK_OK)
            printf("GPU %d: %s, compute capability %d.%d\n", d, name, major, minor);
    }
#else
    printf("CUDA: not compiled in\n");
#endif
    return fflush(stdout) ? cli_error(1, "write error on stdout") : 0;
}

static void usage(FILE *f) {
    fprintf(f, "usage: brisk <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-11s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "  %-11s %s\n", "version", "the version, git commit and CUDA support (also --version)");
    fprintf(f, "\n`brisk <command> --help` for a command's options.\n");
}

int main(int argc, char **argv) {
    cuda_plan_warn_unknown_once(); /* a misspelt BRISK_* name, said once */
    /* a tensor-parallel worker rank (engine/tp.h): serves rank 0, whatever the command line */
    if (tp_env_is_worker()) return tp_worker_main() == BRISK_OK ? 0 : 1;
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) return version();
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    return cli_error(2, "unknown command '%s' (try `brisk --help`)", argv[1]);
}
