/*
 * cu_pool.cuh — the poolings: the host glue of kernels/pool.cl (which fl_conv_geom comes from).
 * Part of the CUDA plugin's one translation unit: cuda_backend.cu includes it after the state and
 * helpers it uses (no separate object, so the CUDA 12 build by clang stays one compile).
 */
/* -------------------------------------------------------------- pooling */

static void cu_maxpool_fwd(const fl_conv_desc *d, const float *x, float *y, int32_t *argmax) {
    const fl_conv_geom g = fl_conv_geom_of(d, d->n);
    k_maxpool_fwd<<<blocks_for(g.n * g.oh * g.ow * g.c, 256), 256, 0, g_stream>>>(g, x, y, argmax);
    LAUNCHED();
}
static void cu_maxpool_bwd(const fl_conv_desc *d, const float *dy, const int32_t *argmax, float *dx, float beta) {
    const fl_conv_geom g = fl_conv_geom_of(d, d->n);
    k_maxpool_bwd<<<blocks_for(g.n * g.h * g.w * g.c, 256), 256, 0, g_stream>>>(g, dy, argmax, dx, beta);
    LAUNCHED();
}
static void cu_avgpool_fwd(const fl_conv_desc *d, const float *x, float *y) {
    const fl_conv_geom g = fl_conv_geom_of(d, d->n);
    k_avgpool_fwd<<<blocks_for(g.n * g.oh * g.ow * g.c, 256), 256, 0, g_stream>>>(g, x, y);
    LAUNCHED();
}
static void cu_avgpool_bwd(const fl_conv_desc *d, const float *dy, float *dx, float beta) {
    const fl_conv_geom g = fl_conv_geom_of(d, d->n);
    k_avgpool_bwd<<<blocks_for(g.n * g.h * g.w * g.c, 256), 256, 0, g_stream>>>(g, dy, dx, beta);
    LAUNCHED();
}

static void cu_gap_fwd(int64_t n, int64_t hw, int c, const float *x, float *y) {
    k_gap_fwd<<<blocks_for(n * c, 256), 256, 0, g_stream>>>(n, hw, c, x, y);
    LAUNCHED();
}
static void cu_gap_bwd(int64_t n, int64_t hw, int c, const float *dy, float *dx, float beta) {
    k_gap_bwd<<<blocks_for(n * hw * c, 256), 256, 0, g_stream>>>(n, hw, c, dy, dx, beta);
    LAUNCHED();
}
