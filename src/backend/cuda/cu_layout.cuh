/*
 * cu_layout.cuh — ZeroPadding2D/Cropping2D, UpSampling2D/Resizing, Permute: the host glue of kernels/layout.cl.
 * Part of the CUDA plugin's one translation unit: cuda_backend.cu includes it after the state and
 * helpers it uses (no separate object, so the CUDA 12 build by clang stays one compile).
 */
/* ------------------------------------- padding, upsampling, transposition */

static void cu_pad2d(const fl_conv_desc *d, const float *x, float *y, float beta) {
    const fl_conv_geom g = fl_conv_geom_of(d, d->n);
    k_pad2d<<<blocks_for(g.n * g.oh * g.ow * g.c, 256), 256, 0, g_stream>>>(g, x, y, beta);
    LAUNCHED();
}

static void cu_upsample2d_fwd(const fl_conv_desc *d, int bilinear, const float *x, float *y) {
    const fl_conv_geom g = fl_conv_geom_of(d, d->n);
    k_upsample2d_fwd<<<blocks_for(g.n * g.oh * g.ow * g.c, 256), 256, 0, g_stream>>>(g, bilinear, x, y);
    LAUNCHED();
}
static void cu_upsample2d_bwd(const fl_conv_desc *d, int bilinear, const float *dy, float *dx, float beta) {
    const fl_conv_geom g = fl_conv_geom_of(d, d->n);
    k_upsample2d_bwd<<<blocks_for(g.n * g.h * g.w * g.c, 256), 256, 0, g_stream>>>(g, bilinear, dy, dx, beta);
    LAUNCHED();
}

static void cu_permute(int ndim, const int64_t *shape, const int *perm, const float *x, float *y, float beta) {
    fl_perm_desc p;
    const int64_t total = fl_perm_desc_of(ndim, shape, perm, &p);
    if (total <= 0) return;
    k_permute<<<blocks_for(total, 256), 256, 0, g_stream>>>(total, p, x, y, beta);
    LAUNCHED();
}
