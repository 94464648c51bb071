/* cuda_plan.h — every setting of the CUDA backend that the environment can change, declared once.
 *
 * One table (cuda_plan.c) holds a row per environment name: its class (a path on the default
 * route that can be turned off or an experimental one that can be turned on, a numeric tuning, a
 * debugging aid), its parser, default, range, one line of documentation and the cuda_plan field it
 * fills. cuda_plan_read() reads the environment once into a cuda_plan, a plain struct the caller
 * owns: a CUDA backend reads one when it is created (cuda_backend.cu's cuda_init) and copies it
 * into its context. `brisk info --gpu` prints the table with the effective values and
 * docs/gpu-switches.md is generated from it (`make docs`; tests/t_gpu_switches.sh fails when the
 * committed page differs).
 *
 * Paths are turned off through one list, BRISK_CUDA_DISABLE=mmvs,graphs,...; every path is on by
 * default (BRISK_CUDA_ENABLE, for the last one that was not, is refused with a message). The paths
 * are not environment names of their own: only the numeric tunings and the debugging aids are.
 * A path's old own name (BRISK_CUDA_MMVS=0) and the names of settings that were removed (their
 * paths lost their measurements: docs/experiments.md) are refused, naming what to set instead.
 *
 * Malformed values (BRISK_CUDA_MMVS_PRE=abc, a number out of its range, a bool other than 0 or 1,
 * an unknown name in a list) are errors, not warnings: cuda_plan_read returns
 * BRISK_ERR_INVALID_ARG and a message that names the variable, the value and what it takes, and
 * the backend is not created. An A/B run with a typo must not silently measure the default. The
 * plan is filled all the same (the default where a value was malformed), for callers that only
 * size memory. An empty value counts as unset.
 *
 * BRISK_* names that no module reads are warned about once a process, on stderr
 * (cuda_plan_warn_unknown_once; the table of the other modules' names is here too, so that the
 * CPU side's names are not flagged).
 *
 * Plain C, built with or without CUDA: the CPU-only build prints the plan too, and
 * tests/test_cuda_plan.c checks it on the CPU. */
#ifndef BK_CUDA_PLAN_H
#define BK_CUDA_PLAN_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "brisk.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Defaults that cuda_internal.cuh and cuda_blas.cu also name (their static_asserts keep both equal). */
enum {
    CUDA_PLAN_MMQ_MIN = 8,      /* MMQ_MIN_TOK */
    CUDA_PLAN_CUBLAS_MIN = 48,  /* BLAS_MIN_TOK, and MMQ_MAX_TOK */
    CUDA_PLAN_MMQH_MIN = 17,    /* MMQH_MIN_TOK */
    CUDA_PLAN_MOE_MMQ_MIN = 64, /* MOE_MMQ_MIN_ENT */
    CUDA_PLAN_CUBLAS_MB = 64,   /* BLAS_SCRATCH_MB */
};

/* The settings, in the terms of the environment (MiB, positions): cuda_init converts. The field
 * names are the cuda_backend fields they end up in. A path's bool is true when it is off (x_off). */
typedef struct cuda_plan {
    /* paths on by default (BRISK_CUDA_DISABLE=name) */
    bool graphs_off, pdl_off, mma_off, mmq_off, mmqh_off, moe_mmq_off, moe_q8_off, moe_vec_off;
    bool moe_comb_off, moe_shared_off, router_fuse_off, router_join_off, router_pf_off, route_warp_off;
    bool fa_off, attn_gqa_off, attn_fuse_off, attn_adapt_off, attn_gadapt_off, attn_merge_off;
    bool attn_rope_off, attn_gate_off, attnq_off, kvfuse_off, qkrope_off, glu_off, normq_off;
    bool mmvq_slices_off, mmvq_multi_off, mmvs_off, mmvs_wide_off, dec_qtypes_off;
    bool gd_chunk_off, gd_fuse_off, gd_conv_off, weight_pool_off;
    bool cublas_off, attn_mma_off, q6k_quad_off, mmvf_off, attn_wgmma_off;
    /* tuning */
    int64_t mmvs_min_in;        /* columns */
    int mmvs_pre;               /* stages */
    int mmvs_seg_bytes;         /* -1: auto */
    int attn_min_chunk;         /* positions */
    int cublas_min_tok, cublas_scratch_mb;
    int mmq_min, mmq_max, mmq_mt;
    int mmqh_min, mmqh_max;     /* tokens; cuda_init caps mmqh_max at MMQH_MAX_N + 1 */
    int moe_mmq_min;
    /* debugging */
    unsigned ablate;            /* bits: classes of ops that launch nothing (CU_ABLATE) */
    bool graph_info;
    const char *trace;          /* a file, or NULL; points into the environment: copy it at once */
    int trace_step;
} cuda_plan;

typedef enum { CUDA_PLAN_PATH, CUDA_PLAN_TUNING, CUDA_PLAN_DEBUG } cuda_plan_class;

/* How cuda_plan_read looks a name up (ud: its context); NULL stands for getenv. */
typedef const char *(*cuda_plan_getenv_fn)(void *ud, const char *name);

/* The defaults, as if the environment were empty. */
void cuda_plan_defaults(cuda_plan *p);

/* Fills *p from the environment seen through get (NULL: getenv). BRISK_ERR_INVALID_ARG on a
 * malformed value, with the message in err (err_cap bytes, may be NULL); *p is complete either way. */
brisk_status cuda_plan_read(cuda_plan *p, cuda_plan_getenv_fn get, void *ud, char *err, size_t err_cap);

/* cuda_plan_read on the process's environment, the failure recorded with bk_fail, and the
 * once-a-process warning about unknown BRISK_* names: what a backend calls when it is created. */
brisk_status cuda_plan_read_env(cuda_plan *p);

/* True when some module of brisk (CUDA or not, or a test harness) reads this BRISK_* name. */
bool cuda_plan_known_name(const char *name);

/* Counts the BRISK_* names in env (NAME=VALUE strings, NULL-terminated) that no module reads and,
 * when warn is set, writes a line about each to it. */
int cuda_plan_check_names(char *const *env, FILE *warn);

/* cuda_plan_check_names(environ, stderr), the first time it is called in the process. */
void cuda_plan_warn_unknown_once(void);

/* The table with p's values (name, value, default, class, doc), as `brisk info --gpu` prints it. */
void cuda_plan_print(FILE *f, const cuda_plan *p);

/* docs/gpu-switches.md: every name of the table and of the other modules, with defaults. */
void cuda_plan_print_markdown(FILE *f);

/* Rows of the table (tests): the number, and row i's environment name (NULL for a path), list name
 * (NULL where none) and class; false past the end. */
int cuda_plan_rows(void);
bool cuda_plan_row(int i, const char **env, const char **flag, cuda_plan_class *cls);

#ifdef __cplusplus
}
#endif
#endif
