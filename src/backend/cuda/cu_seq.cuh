/*
 * cu_seq.cuh — Embedding, the sequence masks, the masked pooling and loss masks: the launches of
 * kernels/seq.cl's kernels (shared with the OpenCL plugin; cpu_seq.c has their CPU twins).
 * Part of the CUDA plugin's one translation unit: cuda_backend.cu includes it after the state and
 * helpers it uses (no separate object, so the CUDA 12 build by clang stays one compile).
 */
/* ------------------------------------------------------------ sequences */

static void cu_embedding_fwd(int64_t n, int d, int64_t v, int x_int, const float *x, const float *w, float *y) {
    k_embedding_fwd<<<blocks_for(n * d, 256), 256, 0, g_stream>>>(n, d, v, x_int, x, w, y);
    LAUNCHED();
}
/* the kernel zeroes dw itself (each thread its own rows and column) before it adds */
static void cu_embedding_bwd(int64_t n, int d, int64_t v, int x_int, const float *x, const float *dy, float *dw) {
    k_embedding_bwd<<<blocks_for((int64_t)FL_EMB_PARTS * d, 128), 128, 0, g_stream>>>(n, d, v, x_int, x, dy, dw);
    LAUNCHED();
}

static void cu_seq_mask(int64_t rows, int c, int x_int, const float *x, float value, float *m) {
    k_seq_mask<<<blocks_for(rows, 256), 256, 0, g_stream>>>(rows, c, x_int, x, value, m);
    LAUNCHED();
}

static void cu_masked_gap1d_fwd(int64_t n, int64_t t, int c, const float *x, const float *m, float *y) {
    k_masked_gap1d_fwd<<<blocks_for(n * c, 256), 256, 0, g_stream>>>(n, t, c, x, m, y);
    LAUNCHED();
}
static void cu_masked_gap1d_bwd(int64_t n, int64_t t, int c, const float *m, const float *dy, float *dx, float beta) {
    k_masked_gap1d_bwd<<<blocks_for(n * t * c, 256), 256, 0, g_stream>>>(n, t, c, m, dy, dx, beta);
    LAUNCHED();
}

/* blocks of 256: the kernel's count of the valid rows is a tree over 256 threads */
static void cu_loss_mask(int64_t rows, int c, const float *m, float *row_loss, float *grad, double *acc) {
    k_loss_mask<<<blocks_for(grad ? rows * c : rows, 256), 256, 0, g_stream>>>(rows, c, m, row_loss, grad, acc);
    LAUNCHED();
}

static void cu_loss_weight(int64_t rows, int c, const float *w, float *row_loss, float *grad) {
    k_loss_weight<<<blocks_for(grad ? rows * c : rows, 256), 256, 0, g_stream>>>(rows, c, w, row_loss, grad);
    LAUNCHED();
}
