/* kv_rot.c — the q4_0h cache's rotation (kv_rot.h). */
#include "quant/kv_rot.h"

#include <math.h>
#include <stdint.h>

int kv_rot_block(int hd) {
    int l = hd & -hd; /* the largest power of two dividing hd */
    return l > 256 ? 256 : l;
}

/* A fixed pattern, not a property of any model: the top bit of a multiplicative hash of i. */
float kv_rot_sign(int i) { return ((uint32_t)(i + 1) * 2654435761u) >> 31 ? -1.0f : 1.0f; }

/* In place: x := H x for one block of l values (H unnormalized, H H = l I). */
static void fwht(float *x, int l) {
    for (int h = 1; h < l; h *= 2)
        for (int i = 0; i < l; i += 2 * h)
            for (int j = i; j < i + h; j++) {
                const float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
}

void kv_rot_apply(float *x, int hd) {
    const int l = kv_rot_block(hd);
    const float s = 1.0f / sqrtf((float)l);
    for (int b = 0; b < hd; b += l) {
        for (int i = 0; i < l; i++) x[b + i] *= kv_rot_sign(i);
        fwht(x + b, l);
        for (int i = 0; i < l; i++) x[b + i] *= s;
    }
}

void kv_rot_invert(float *x, int hd) {
    const int l = kv_rot_block(hd);
    const float s = 1.0f / sqrtf((float)l);
    for (int b = 0; b < hd; b += l) {
        fwht(x + b, l);
        for (int i = 0; i < l; i++) x[b + i] *= s * kv_rot_sign(i);
    }
}
