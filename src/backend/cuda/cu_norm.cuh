/*
 * cu_norm.cuh — BatchNormalization, LayerNormalization, Softmax(axis), PReLU, Normalization: the launches of
 * the kernels of kernels/norm.cl, which the OpenCL plugin runs too (ocl_norm.c). The sums over the batch are
 * reduce.cl's column sums, the partial stage a summand kernel of norm.cl (colsum_by).
 * Part of the CUDA plugin's one translation unit: cuda_backend.cu includes it after the state and
 * helpers it uses (no separate object, so the CUDA 12 build by clang stays one compile).
 */

/* out[j] = sum_r f(r, j) over j < n, overwritten: `partial(grid, block, p)` launches the summand kernel (its
 * FL_COLSUM_BODY) into the partial sums p, then the chunks are added in order */
template <typename L>
static void colsum_by(int n, int chunks, float *out, L partial) {
    float *p = partial_buf(n, chunks);
    if (!p) return;
    partial(dim3((n + 31) / 32, chunks), dim3(32, 8), p);
    k_colsum_final<<<(n + 255) / 256, 256, 0, g_stream>>>(n, chunks, p, out, 0.0f);
    LAUNCHED();
}

/* ---------------------------------------------------------- batch norm */

/* Keras semantics (biased batch variance, moving = moving*momentum + batch*(1-momentum)), which cuDNN's batch
 * norm does not follow: norm.cl's kernels. g_bn_tmp: s, t (2c floats) and the squared deviations' sums (c)
 * in the forward; the sums of g and g (x - mean) (2c) and s, t, u (3c) in the backward. */
static float *g_bn_tmp;
static int g_bn_tmp_c;
static float *bn_tmp(int c) {
    if (c > g_bn_tmp_c) {
        cu_free_retire(g_bn_tmp);
        g_bn_tmp = (float *)cu_alloc((size_t)c * 5 * sizeof(float));
        g_bn_tmp_c = g_bn_tmp ? c : 0;
    }
    return g_bn_tmp;
}

static void cu_bn_fwd_train(const fl_bn_desc *d, const float *x, const float *gamma, const float *beta, float *y,
                            float *save_mean, float *save_invstd, float *mm, float *mv) {
    const int c = d->c;
    const int64_t m = d->m;
    float *st = bn_tmp(c), *dev2 = st ? st + 2 * c : NULL;
    if (!st) return;
    colsum_rows(m, c, x, c, save_mean);
    k_axpby<<<(c + 255) / 256, 256, 0, g_stream>>>(c, 1.0f / (float)m, save_mean, 0.0f, save_mean);
    colsum_by(c, COLSUM_CHUNKS, dev2, [&](dim3 g, dim3 b, float *p) {
        k_colsum_bn_dev2<<<g, b, 0, g_stream>>>(m, c, COLSUM_CHUNKS, x, save_mean, p);
    });
    k_bn_stats<<<(c + 255) / 256, 256, 0, g_stream>>>(c, m, d->eps, d->momentum, gamma, beta, save_mean, dev2,
                                                      save_invstd, mm, mv, st);
    k_bn_apply<<<blocks_for(m * c, 256), 256, 0, g_stream>>>(m * c, c, x, st, 0.0f, 0.0f, y);
    LAUNCHED();
}
static void cu_bn_fwd_infer(const fl_bn_desc *d, const float *x, const float *gamma, const float *beta,
                            const float *mm, const float *mv, float *y) {
    k_bn_infer<<<blocks_for(d->m * d->c, 256), 256, 0, g_stream>>>(d->m * d->c, d->c, d->eps, x, gamma, beta, mm, mv, y);
    LAUNCHED();
}
static void cu_bn_bwd(const fl_bn_desc *d, const float *x, const float *gamma, const float *mean, const float *invstd,
                      const float *dy, float *dx, float beta, float *dgamma, float *dbeta) {
    const int c = d->c;
    const int64_t m = d->m;
    float *sums = bn_tmp(c), *stu = sums ? sums + 2 * c : NULL;
    if (!sums) return;
    for (int k = 0; k < 2; k++) /* sum dy, then sum dy (x - mean) */
        colsum_by(c, COLSUM_CHUNKS, sums + k * c, [&](dim3 g, dim3 b, float *p) {
            k_colsum_bn_g<<<g, b, 0, g_stream>>>(m, c, COLSUM_CHUNKS, x, dy, NULL, 0.0f, 0.0f, k ? mean : NULL, p);
        });
    k_bn_coef<<<(c + 255) / 256, 256, 0, g_stream>>>(c, m, gamma, invstd, sums, dgamma, dbeta, dx ? stu : NULL);
    LAUNCHED();
    if (dx) {
        k_bn_dx<<<blocks_for(m * c, 256), 256, 0, g_stream>>>(m * c, c, x, dy, NULL, 0.0f, 0.0f, mean, stu, dx, beta);
        LAUNCHED();
    }
}

/* ------------------------------------------------------ layer norm */

static void cu_layernorm_fwd(int64_t rows, int c, float eps, int rms, const float *x, const float *gamma,
                             const float *beta, float *y, float *stats) {
    k_layernorm_fwd<<<row_blocks(rows), 32 * ROW_WARPS, 0, g_stream>>>(rows, c, eps, rms, x, gamma, beta, y, stats);
    LAUNCHED();
}
static void cu_layernorm_bwd(int64_t rows, int c, int rms, const float *x, const float *gamma, const float *stats,
                             const float *dy, float *dx, float dx_beta, float *dgamma, float *dbeta) {
    if (dx) {
        k_layernorm_bwd<<<row_blocks(rows), 32 * ROW_WARPS, 0, g_stream>>>(rows, c, rms, x, gamma, stats, dy, dx,
                                                                           dx_beta);
        LAUNCHED();
    }
    if (dgamma)
        colsum_by(c, COLSUM_CHUNKS, dgamma, [&](dim3 g, dim3 b, float *p) {
            k_colsum_ln_dgamma<<<g, b, 0, g_stream>>>(rows, c, COLSUM_CHUNKS, rms, x, dy, stats, p);
        });
    if (dbeta) colsum_rows(rows, c, dy, c, dbeta);
}

/* ---------------------------------------------------- softmax(axis) */

static void cu_softmax_axis_fwd(int64_t outer, int c, int64_t inner, const float *x, float *y) {
    k_softmax_axis_fwd<<<blocks_for(outer * inner, 256), 256, 0, g_stream>>>(outer, c, inner, x, y);
    LAUNCHED();
}
static void cu_softmax_axis_bwd(int64_t outer, int c, int64_t inner, const float *y, const float *dy, float *dx,
                                float beta) {
    k_softmax_axis_bwd<<<blocks_for(outer * inner, 256), 256, 0, g_stream>>>(outer, c, inner, y, dy, dx, beta);
    LAUNCHED();
}

/* ------------------------------------------- PReLU, Normalization */

static void cu_prelu_fwd(const fl_bcast_desc *d, const float *x, const float *alpha, float *y) {
    k_prelu_fwd<<<blocks_for(d->n * d->size, 256), 256, 0, g_stream>>>(*d, x, alpha, y);
    LAUNCHED();
}
static void cu_prelu_bwd(const fl_bcast_desc *d, const float *x, const float *alpha, const float *dy, float *dx,
                         float dx_beta, float *dalpha) {
    if (dx) {
        k_prelu_bwd<<<blocks_for(d->n * d->size, 256), 256, 0, g_stream>>>(*d, x, alpha, dy, dx, dx_beta);
        LAUNCHED();
    }
    if (!dalpha) return;
    int64_t shared = 1;
    for (int k = 0; k < d->ndim; k++)
        if (!d->pstride[k]) shared *= d->dim[k];
    /* a chunk per 64 rows at least: alpha without shared axes (psize =
     * size) sums only n rows, and needs no 64 partial sums of each element */
    const int64_t rows = d->n * shared;
    const int chunks = (int)(rows / 64 < 1 ? 1 : (rows / 64 > COLSUM_CHUNKS ? COLSUM_CHUNKS : rows / 64));
    const int n = (int)d->psize;
    colsum_by(n, chunks, dalpha, [&](dim3 g, dim3 b, float *p) {
        k_colsum_prelu_dalpha<<<g, b, 0, g_stream>>>(rows, n, chunks, *d, shared, x, dy, p);
    });
}

static void cu_normalize_fwd(const fl_bcast_desc *d, int invert, const float *x, const float *mean, const float *var,
                             float *y) {
    k_normalize_fwd<<<blocks_for(d->n * d->size, 256), 256, 0, g_stream>>>(*d, invert, x, mean, var, y);
    LAUNCHED();
}
static void cu_normalize_bwd(const fl_bcast_desc *d, int invert, const float *var, const float *dy, float *dx,
                             float beta) {
    k_normalize_bwd<<<blocks_for(d->n * d->size, 256), 256, 0, g_stream>>>(*d, invert, var, dy, dx, beta);
    LAUNCHED();
}
