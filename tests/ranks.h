/* ranks.h — what tests/test_tp.c and tests/test_pp.c share: ranks of one model run as threads
 * in one process, each greedy-decoding and compared with the whole model. */
#ifndef BK_TEST_RANKS_H
#define BK_TEST_RANKS_H
#include <math.h>
#include <unistd.h>

#include "brisk.h"
#include "model/synth.h"
#include "test.h"

static inline int ranks_argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* A CPU-sized context: 256 positions of f32 KV cache, n_seq sequences, one thread. */
static inline brisk_context *ranks_new_ctx(brisk_model *m, int n_seq) {
    brisk_context_params cp = brisk_context_default_params();
    cp.n_ctx = 256;
    cp.n_seq_max = n_seq;
    cp.n_threads = 1;
    cp.kv_type = BRISK_KV_F32;
    brisk_context *c = NULL;
    CHECK_OK(brisk_context_new(m, &cp, &c));
    return c;
}

/* The worst over n_steps steps of max |a - b| / max |b| over a step's n_vocab logits. */
static inline double ranks_logit_diff(const float *a, const float *b, int n_steps, int n_vocab) {
    double worst = 0;
    for (int t = 0; t < n_steps; t++) {
        double num = 0, den = 0;
        for (int i = 0; i < n_vocab; i++) {
            num = fmax(num, fabs((double)a[(size_t)t * n_vocab + i] - b[(size_t)t * n_vocab + i]));
            den = fmax(den, fabs((double)b[(size_t)t * n_vocab + i]));
        }
        worst = fmax(worst, num / (den > 0 ? den : 1));
    }
    return worst;
}

/* ../shared's stories260K into p (room for 1024); false, the test skipped as missing a required
 * file, when it is not there. */
static inline bool ranks_stories(char *p) {
    snprintf(p, 1024, "%s/data/stories260K/stories260K.gguf", test_shared_dir());
    return test_need_file(p);
}

/* Writes the tiny model c to /tmp/brisk-test-<who>-<pid>-<tag>.gguf (path: room for 256). */
static inline brisk_status ranks_write_model(synth_config *c, const char *who, const char *tag, char *path) {
    snprintf(path, 256, "/tmp/brisk-test-%s-%d-%s.gguf", who, (int)getpid(), tag);
    c->n_threads = 2;
    c->slab_bytes = 1 << 20;
    return synth_write(c, NULL, path, false);
}
#endif
