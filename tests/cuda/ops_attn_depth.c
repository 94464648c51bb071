/* ops_attn_depth.c — test_cuda_ops's checks of the decode attention deep in a sequence (issue 28:
 * at least 64K positions, every KV type, GQA groups of 1-16 query heads, head dims 64-256), and of
 * the warp-per-row decode kernel (cuda_attn_decode.cu) on the cases the tensor-core kernel takes by
 * default. Not a translation unit of its own: tests/test_cuda_ops.c includes it after
 * check_attention_ex and attention_cases. */

/* Shapes of the supported models and the group sizes around them: qwen3.6-35b-a3b (16/2 heads of
 * 256), qwen3.6-27b (24/4: a group of 6), qwen3-8b (32/8 of 128), a group of 16 at 64, one of 1. */
static void depth_cases(void) {
    static const int shapes[][3] = {{16, 2, 256}, {24, 4, 256}, {32, 8, 128}, {32, 2, 64}, {8, 8, 128}};
    int32_t pos[4];
    int seq[4];
    for (int kt = BRISK_KV_F32; kt <= BRISK_KV_Q4_0H; /* (q4_0h: q and k rotated before the kernels) */ kt++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            const int nh = shapes[s][0], nkv = shapes[s][1], hd = shapes[s][2];
            /* one token at 70,000 positions: all splits full, the last tile partial */
            pos[0] = 70001; seq[0] = 1;
            check_attention(kt, nh, nkv, hd, 1, pos, seq);
            /* a deep and a short sequence in one launch: the short one's splits mostly empty */
            if (s < 3) {
                pos[0] = 65600; seq[0] = 0; pos[1] = 300; seq[1] = 1;
                check_attention(kt, nh, nkv, hd, 2, pos, seq);
            }
        }
    /* the step's own row made in the launch (QK-norm, rope, cache write) at depth (not q4_0h: its keys
     * are rotated before the cache write, which then stays the attention's) */
    for (int kt = BRISK_KV_F32; kt <= BRISK_KV_Q4_0; kt++) {
        pos[0] = 66000; seq[0] = 1;
        check_attention_ex(kt, 16, 2, 256, 1, pos, seq, true);
        pos[0] = 65537; seq[0] = 0; pos[1] = 1000; seq[1] = 1;
        check_attention_ex(kt, 24, 4, 256, 2, pos, seq, true);
    }
}
static void test_attention_depth(void) { depth_cases(); }

/* BRISK_CUDA_DISABLE=attn_mma: every decode case on the warp-per-row kernel, at its own tolerance */
static void warp_cases(void) {
    attention_cases();
    test_attention_kv_fused();
    depth_cases();
}
static void test_attention_warp(void) { on_backend_with("BRISK_CUDA_DISABLE", "attn_mma", warp_cases); }
