/* cpu_scratch.h — the CPU backend's reusable buffers (cpu_backend.c, cpu_moe.c): grown to the
 * largest request seen, never shrunk, so that a step allocates nothing once the largest batch
 * has run. A failure is BRISK_ERR_NOMEM with a message and leaves the old buffer. */
#ifndef BK_CPU_SCRATCH_H
#define BK_CPU_SCRATCH_H
#include <stddef.h>
#include <stdlib.h>

#include "base/status.h"

/* *p holds at least want bytes (*cap: what it holds), its contents kept. */
static inline brisk_status cpu_grow(void **p, size_t *cap, size_t want) {
    if (want <= *cap) return BRISK_OK;
    void *np = realloc(*p, want);
    if (!np) return bk_fail(BRISK_ERR_NOMEM, "cpu backend: out of memory (%zu bytes)", want);
    *p = np;
    *cap = want;
    return BRISK_OK;
}

/* As cpu_grow(), 64-byte aligned (whole 64-byte lines, as aligned_alloc wants) and without
 * keeping the contents (a failure leaves none: *p NULL, *cap 0). */
static inline brisk_status cpu_grow_aligned(void **p, size_t *cap, size_t want) {
    if (want <= *cap) return BRISK_OK;
    free(*p);
    *cap = 0;
    *p = aligned_alloc(64, (want + 63) & ~(size_t)63);
    if (!*p) return bk_fail(BRISK_ERR_NOMEM, "cpu backend: out of memory (%zu bytes)", want);
    *cap = want;
    return BRISK_OK;
}
#endif
