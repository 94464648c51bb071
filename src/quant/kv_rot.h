/* kv_rot.h — the rotation of the q4_0h KV cache (BRISK_KV_Q4_0H): each
 * head's K rows are stored as q4_0 blocks of a rotated copy, V rows as q4_0.
 *
 * Why: keys carry a few channels of large magnitude (RoPE pairs, outlier
 * features); a 4-bit block of 32 values sized for its largest value then
 * rounds every other value in the block coarsely. An orthogonal rotation
 * R = H D / sqrt(L) (D a fixed pattern of signs, H the L x L Walsh-Hadamard
 * matrix) spreads each outlier over L values, so the blocks' scales follow
 * the vector's norm instead of its largest channel (the idea of QuaRot and
 * of TurboQuant's rotated scalar quantization). The scores need no inverse:
 * q . k = (R q) . (R k), so q is rotated as the keys are. Values are not
 * rotated: they have no such channels (KIVI's observation), and a rotation
 * makes bounded values Gaussian-like, whose 4-bit blocks round worse
 * (tests/test_cpu_attn.c: rotating V too raised the error on plain values
 * from 0.065 to 0.087 and cut it on outlier keys only from 0.095 to 0.090;
 * keys alone: 0.066 and 0.070). It also saves the output's inverse.
 *
 * L is the largest power of two dividing head_dim, at most 256 (head_dim is
 * a multiple of 32 for a quantized cache): rows are rotated in independent
 * blocks of L values. The definition is part of the cache's format: every
 * backend rotates exactly so (the signs: kv_rot_sign). */
#ifndef BK_QUANT_KV_ROT_H
#define BK_QUANT_KV_ROT_H

/* Block length of the rotation for head_dim hd (hd % 32 == 0). */
int kv_rot_block(int hd);
/* Sign (+1 or -1) applied to value i (0 <= i < L) of a block before H. */
float kv_rot_sign(int i);
/* x (hd values, one head) := R x, block by block. */
void kv_rot_apply(float *x, int hd);
/* x := R^T x (the inverse; tests and any reader of the keys as values). */
void kv_rot_invert(float *x, int hd);
#endif
