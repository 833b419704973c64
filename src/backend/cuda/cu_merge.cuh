/*
 * cu_merge.cuh — the merge layers, the losses, metrics and sums.
 * Part of the CUDA plugin's one translation unit: cuda_backend.cu includes it after the state and
 * helpers it uses (no separate object, so the CUDA 12 build by clang stays one compile).
 */
/* --------------------------------------------------------- merge layers */

static void cu_mul(int64_t n, const float *a, const float *b, float *dst) {
    k_mul<<<blocks_for(n, 256), 256, 0, g_stream>>>(n, a, b, dst);
    LAUNCHED();
}
static void cu_concat_fwd(int64_t rows, int64_t cin, int64_t cout, int64_t off, const float *x, float *y) {
    k_concat_fwd<<<blocks_for(rows * cin, 256), 256, 0, g_stream>>>(rows, cin, cout, off, x, y);
    LAUNCHED();
}
static void cu_concat_bwd(int64_t rows, int64_t cin, int64_t cout, int64_t off, const float *dy, float *dx, float beta) {
    k_concat_bwd<<<blocks_for(rows * cin, 256), 256, 0, g_stream>>>(rows, cin, cout, off, dy, dx, beta);
    LAUNCHED();
}

/* Subtract, Maximum, Minimum, Add (and Add with the ReLU after it); Average's scaling; max/min gradients
 * (the cpu_merge.c twins) */
static void cu_fill(int64_t n, float v, float *y) {
    k_fill<<<blocks_for(n, 256), 256, 0, g_stream>>>(n, v, y);
    LAUNCHED();
}
static void cu_binary(int mode, int64_t n, const float *a, const float *b, float *y) {
    k_binary<<<blocks_for(n, 256), 256, 0, g_stream>>>(mode, n, a, b, y);
    LAUNCHED();
}
static void cu_axpby(int64_t n, float alpha, const float *x, float beta, float *y) {
    k_axpby<<<blocks_for(n, 256), 256, 0, g_stream>>>(n, alpha, x, beta, y);
    LAUNCHED();
}
static void cu_minmax_grad(int is_max, int64_t n, const float *x, const float *other, const float *dy, float *dx,
                           float beta) {
    k_minmax_grad<<<blocks_for(n, 256), 256, 0, g_stream>>>(is_max, n, x, other, dy, dx, beta);
    LAUNCHED();
}

/* Add/Multiply with broadcasting (kernels/merge.cl) */
static void cu_bmerge_fwd(int mode, const fl_bcast_desc *d, const float *x, const float *b, float *y) {
    k_bmerge_fwd<<<blocks_for(d->n * d->size, 256), 256, 0, g_stream>>>(mode, *d, x, b, y);
    LAUNCHED();
}
static void cu_bmerge_bwd(int mode, const fl_bcast_desc *d, const float *x, const float *b, const float *dy, float *dx,
                          float beta_x, float *db, float beta_b) {
    k_bmerge_bwd<<<blocks_for(d->n * d->psize, 128), 128, 0, g_stream>>>(mode, *d, x, b, dy, dx, beta_x, db, beta_b);
    LAUNCHED();
}

/* ------------------------------------------------- losses, metrics, sums */

static void cu_accumulate(int64_t n, const float *src, float *dst, float beta) {
    k_accumulate<<<blocks_for(n, 256), 256, 0, g_stream>>>(n, src, dst, beta);
    LAUNCHED();
}


static void cu_loss(const fl_loss_desc *d, const float *pred, const float *target, float *row_loss, float *grad) {
    k_loss<<<row_blocks(d->rows), 32 * ROW_WARPS, 0, g_stream>>>(*d, pred, target, row_loss, grad);
    LAUNCHED();
}

/* the metrics and the loss's sum (kernels/loss.cl) */
static void cu_metric(int code, int64_t rows, int c, const float *pred, const float *target, float *score) {
    k_metric<<<row_blocks(rows), 32 * ROW_WARPS, 0, g_stream>>>(code, rows, c, pred, target, score);
    LAUNCHED();
}

static void cu_sum_into(int64_t n, const float *x, double scale, double *acc) {
    k_sum_into<<<1, 256, 0, g_stream>>>(n, x, scale, acc);
    LAUNCHED();
}
