/*
 * cu_act.cuh — the activations, the parametrized ones, Dropout (Softmax(axis), PReLU, Normalization: cu_norm.cuh).
 * Part of the CUDA plugin's one translation unit: cuda_backend.cu includes it after the state and
 * helpers it uses (no separate object, so the CUDA 12 build by clang stays one compile).
 */
/* ---------------------------------------------------------- activations */

/* Row reductions (dialect.h's row groups): a warp per row, ROW_WARPS rows a block. */
#define ROW_WARPS 8 /* warps per block */
static int row_blocks(int64_t rows) { return blocks_for(rows, ROW_WARPS); }

static void cu_act_fwd(int act, int64_t rows, int c, const float *x, float *y) {
    if (act == FL_ACT_SOFTMAX) k_softmax_fwd<<<row_blocks(rows), 32 * ROW_WARPS, 0, g_stream>>>(rows, c, x, y);
    else k_act_fwd<<<blocks_for(rows * c, 256), 256, 0, g_stream>>>(rows * c, act, x, y);
    LAUNCHED();
}
static void cu_act_bwd(int act, int64_t rows, int c, const float *x, const float *y, const float *dy, float *dx,
                       float beta) {
    if (act == FL_ACT_SOFTMAX) k_softmax_bwd<<<row_blocks(rows), 32 * ROW_WARPS, 0, g_stream>>>(rows, c, y, dy, dx, beta);
    else k_act_bwd<<<blocks_for(rows * c, 256), 256, 0, g_stream>>>(rows * c, act, x, y, dy, dx, beta);
    LAUNCHED();
}

/* ------------------------ parametrized activations: cpu_pact.c's twins,
 * calling the same math.h formulas */

/* ReLU(max_value, negative_slope, threshold), LeakyReLU, ELU, Rescaling */
static void cu_pact_fwd(const fl_pact_desc *d, int64_t n, const float *x, float *y) {
    k_pact_fwd<<<blocks_for(n, 256), 256, 0, g_stream>>>(*d, n, x, y);
    LAUNCHED();
}
static void cu_pact_bwd(const fl_pact_desc *d, int64_t n, const float *x, const float *y, const float *dy, float *dx,
                        float beta) {
    k_pact_bwd<<<blocks_for(n, 256), 256, 0, g_stream>>>(*d, n, x, y, dy, dx, beta);
    LAUNCHED();
}

/* ------------------------------------------------------------- dropout */

/* k_dropout_fwd (kernels/act.cl): while a graph is captured, the stream given is the layer's base stream and
 * the step is read from the device (g_dsteps[1]) */
static void cu_dropout_fwd(int64_t n, float rate, uint64_t seed, uint64_t stream, int64_t offset, const float *x,
                           float *y, uint8_t *mask) {
    const int64_t blocks = (offset + n + 3) / 4 - offset / 4;
    if (g_capturing) /* back to the base stream: replays mix in the device's step (the offset is baked in) */
        k_dropout_fwd<<<blocks_for(blocks, 256), 256, 0, g_stream>>>(n, rate, seed,
                                                                     fl_dropout_stream(stream, g_cap_gstep), offset,
                                                                     g_dsteps + 1, x, y, mask);
    else
        k_dropout_fwd<<<blocks_for(blocks, 256), 256, 0, g_stream>>>(n, rate, seed, stream, offset, NULL, x, y, mask);
    LAUNCHED();
}
static void cu_dropout_bwd(int64_t n, float rate, const uint8_t *mask, const float *dy, float *dx, float beta) {
    k_dropout_bwd<<<blocks_for(n, 256), 256, 0, g_stream>>>(n, 1.0f / (1.0f - rate), mask, dy, dx, beta);
    LAUNCHED();
}
