/* cmd_info.c — `brisk info FILE`: a GGUF file's header, metadata and tensor table;
 * `brisk info --gpu`: the CUDA backend's settings in effect (backend/cuda/cuda_plan.h). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_plan.h"
#include "brisk.h"
#include "cli/cli.h"
#include "format/gguf.h"
#include "quant/quant.h"

static void usage(FILE *f) {
    fprintf(f, "usage: brisk info [--no-tensors] [-m, --model] FILE\n"
               "  prints a GGUF file's version, alignment, metadata and tensor table\n"
               "       brisk info --gpu [--markdown]\n"
               "  prints the CUDA backend's settings (BRISK_CUDA_*) in effect, or as docs/gpu-switches.md\n");
}

static void print_tensors(const gguf_file *g) {
    int64_t n = gguf_tensor_count(g);
    printf("\ntensors (%" PRId64 "):\n", n);
    if (n == 0) return;
    printf("  %5s  %-36s %-7s %-22s %12s %12s\n", "#", "name", "type", "shape", "bytes", "offset");
    int64_t params = 0;
    uint64_t bytes = 0;
    for (int64_t i = 0; i < n; i++) {
        const gguf_tensor *t = gguf_get_tensor(g, i);
        char shape[96];
        int len = snprintf(shape, sizeof shape, "[");
        int64_t nel = 1;
        for (int d = 0; d < t->n_dims; d++) {
            len += snprintf(shape + len, sizeof shape - (size_t)len, "%s%" PRId64, d ? ", " : "", t->ne[d]);
            nel *= t->ne[d]; /* fits: the reader checked the product */
        }
        snprintf(shape + len, sizeof shape - (size_t)len, "]");
        printf("  %5" PRId64 "  %-36s %-7s %-22s %12" PRIu64 " %12" PRIu64 "\n", i, t->name,
               quant_type_name(t->type), shape, t->nbytes, t->offset);
        params += nel;
        bytes += t->nbytes;
    }
    printf("total: %" PRId64 " params, %" PRIu64 " bytes (%.2f MiB), %.2f bits per weight\n", params, bytes,
           (double)bytes / (1024.0 * 1024.0), params ? 8.0 * (double)bytes / (double)params : 0.0);
}

/* The plan this environment gives a CUDA backend; 1 when some setting is malformed (the table is
 * printed all the same, malformed values at their defaults). */
static int print_gpu(int markdown) {
    if (markdown) {
        cuda_plan_print_markdown(stdout);
        return fflush(stdout) ? cli_error(1, "info: write error on stdout") : 0;
    }
    cuda_plan plan;
    char why[400];
    brisk_status s = cuda_plan_read(&plan, NULL, NULL, why, sizeof why);
    int n = bk_cuda_device_count();
    if (n > 0) printf("CUDA: %d device%s; the settings a backend made now takes:\n\n", n, n == 1 ? "" : "s");
    else printf("CUDA: no device (or a build without CUDA); the settings a backend would take:\n\n");
    cuda_plan_print(stdout, &plan);
    if (fflush(stdout)) return cli_error(1, "info: write error on stdout");
    return s == BRISK_OK ? 0 : cli_error(1, "info: %s", why);
}

int cmd_info(int argc, char **argv) {
    const char *path = NULL;
    int tensors = 1, gpu = 0, markdown = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--no-tensors")) {
            tensors = 0;
        } else if (!strcmp(argv[i], "--gpu")) {
            gpu = 1;
        } else if (!strcmp(argv[i], "--markdown")) {
            markdown = 1;
        } else if (!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) { /* as the other commands take it */
            if (i + 1 >= argc) return cli_error(2, "info: %s needs a value", argv[i]);
            if (path) {
                usage(stderr);
                return cli_error(2, "info: one file at a time");
            }
            path = argv[++i];
        } else if (argv[i][0] == '-' && argv[i][1]) {
            usage(stderr);
            return cli_error(2, "info: unknown option '%s'", argv[i]);
        } else if (path) {
            usage(stderr);
            return cli_error(2, "info: one file at a time");
        } else {
            path = argv[i];
        }
    }
    if (gpu && !path) return print_gpu(markdown);
    if (gpu || markdown) {
        usage(stderr);
        return cli_error(2, "info: --gpu takes no file");
    }
    if (!path) {
        usage(stderr);
        return cli_error(2, "info: no file given");
    }
    gguf_file *g;
    if (gguf_open(path, &g) != BRISK_OK) return cli_error(1, "%s", brisk_last_error());

    printf("%s: GGUF v%" PRIu32 ", %zu bytes, alignment %" PRIu32 ", tensor data at byte %" PRIu64 "\n", path,
           gguf_version(g), gguf_file_size(g), gguf_alignment(g), gguf_data_offset(g));
    int64_t n_kv = gguf_kv_count(g);
    printf("\nmetadata (%" PRId64 " keys):\n", n_kv);
    char value[512];
    for (int64_t i = 0; i < n_kv; i++) {
        gguf_kv_format(g, i, value, sizeof value);
        printf("  %-44s %-6s %s\n", gguf_kv_key(g, i), gguf_type_name(gguf_kv_type(g, i)), value);
    }
    if (tensors) print_tensors(g);
    gguf_close(g);
    if (fflush(stdout) != 0) return cli_error(1, "info: write error on stdout");
    return 0;
}
