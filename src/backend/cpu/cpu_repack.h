/* cpu_repack.h — weights repacked at load into an interleaved layout for
 * decode and short batches (the matmul path below cpu_pgemm's 16 tokens).
 *
 * Each ISA has its own layouts (cpu_repack_isa.h): AVX-512 VNNI repacks
 * Q4_0, Q8_0 and Q4_K as below; AVX2 repacks Q4_0, Q4_K, Q6_K and IQ4_XS
 * (cpu_repack_avx2.c, whose comments give the layouts): 8 rows a group, one
 * row per 32-bit lane, so a 4-byte group of the activations is broadcast to
 * the 8 rows; the scales unpacked where they are packed in the block.
 *
 * Q4_0 ("q4_0x8"): eight rows are interleaved so that one 64-byte load feeds
 * eight rows and two blocks, and vpdpbusd (AVX-512 VNNI) takes the nibbles as
 * unsigned bytes against the int8 activations; the -8 offset of Q4_0 enters
 * as -8 * sum(activations) per block, so the integer sums are exact. Per
 * group of 8 rows and pair of blocks (64 elements) the layout is
 *   f16 d[16]       scales: lanes 0-7 rows 0-7 of block 2p, 8-15 of block 2p+1
 *   u8  qs[4][64]   qs[k] lane L (4 bytes): bytes 4k..4k+3 of that block's qs
 * (288 bytes, the size of the 16 blocks it holds). An odd last block is
 * padded with a zero block.
 *
 * Q8_0 ("q8_0x8"): the same interleave with the 32 quant bytes of a block
 * stored as q + 128 (unsigned for vpdpbusd), so the offset enters as
 * -128 * sum(activations):
 *   f16 d[16]       as above
 *   u8  qs[8][64]   qs[k] lane L: bytes 4k..4k+3 of that block's qs, each + 128
 * (544 bytes, 16 blocks of 34).
 *
 * Q4_K ("q4_Kx16"): sixteen rows, one per 32-bit lane, so that a 4-byte
 * group of the Q8_K activations meets all 16 rows through a broadcast and
 * the activations need no expansion (cpu_repack_act copies the Q8_K row,
 * padded to 64 bytes). Per group of 16 rows and super-block (256 elements):
 *   f16 d[16], dmin[16]      per row
 *   u8  sc[8][16], m[8][16]  the 6-bit sub-block scales and mins, unpacked
 *   u8  qs[4][8][16][4]      chunk c, group k, row r: bytes 32c+4k..+3 of its qs
 * (2368 bytes for the 2304 of 16 blocks: the unpacked scales cost 2.8% more
 * reads and save decoding them in the loop). The integer sums
 * Σ sc Σ q y and Σ m bsum are exact in int32, as in ggml's kernel. Only
 * whole super-blocks (n_in a multiple of 256) are repacked.
 *
 * For Q4_0 and Q8_0 the activations are expanded once per token
 * (cpu_repack_act) so that each vpdpbusd reads its 64 bytes as one load: per block pair, 8 vectors of the
 * two blocks' 4-byte groups, each broadcast to its 8 lanes, then -8*sum and
 * the scale per lane.
 *
 * The sums run in another float order than ggml's vec_dot (each block's int
 * sum is scaled and added per lane; the two halves are added at the end), as
 * llama.cpp's own repacked kernels do; tests hold them to the same tolerance.
 * AVX2's Q6_K layout alone keeps ggml's order, bitwise the plain kernel's
 * (test_cpu_dot repack_bitwise): another order flipped near-tied MoE routings.
 * Only rows in whole groups are repacked: the caller runs the rows after the
 * last group with the plain kernels on the mapped rows.
 *
 * The copy is the caller's (cpu_backend frees it with the backend); the
 * mapped file is never written. */
#ifndef BK_CPU_REPACK_H
#define BK_CPU_REPACK_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Rows per interleaved group of a type (8 for Q4_0 and Q8_0, 16 for Q4_K), 0 if none. */
int cpu_repack_rows(uint32_t type);

/* Bytes of the repacked copy of an n_out x n_in matrix, or 0 when this type
 * or shape is not repacked on this CPU (no layout for the type on this ISA,
 * BRISK_CPU_REPACK=0, fewer rows than a group). */
size_t cpu_repack_bytes(uint32_t type, int64_t n_in, int64_t n_out);
/* Writes the repacked copy of the whole groups of rows of w (row stride ws)
 * into dst (cpu_repack_bytes() bytes, 64-byte aligned). */
void cpu_repack_weights(uint32_t type, int64_t n_in, int64_t n_out, const void *w, size_t ws, void *dst);
/* Bytes of one token's expanded activations. */
size_t cpu_repack_act_bytes(uint32_t type, int64_t n_in);
/* Expands one activation row, already in the type's vec_dot_type (Q8_0 for
 * Q4_0 and Q8_0, Q8_K for Q4_K), into xa (cpu_repack_act_bytes() bytes, 64-byte aligned). */
void cpu_repack_act(uint32_t type, int64_t n_in, const void *xq, void *xa);
/* s[(g*R + r - g0*R) * ss + j] = dot(row g*R + r, token j) for groups g in
 * [g0, g1), r in [0, R = cpu_repack_rows()), j in [0, nx); xa: expanded
 * tokens, xs bytes apart. */
void cpu_repack_gemm(uint32_t type, int64_t n_in, const void *wr, int64_t g0, int64_t g1, const void *xa, size_t xs,
                     int nx, float *s, size_t ss);
#endif
