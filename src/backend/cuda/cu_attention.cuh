/*
 * cu_attention.cuh — the Attention layers: the learned scores, the batched products, the masked softmax.
 * Part of the CUDA plugin's one translation unit: cuda_backend.cu includes it after the state and
 * helpers it uses (no separate object, so the CUDA 12 build by clang stays one compile).
 */
/* ------------------------------- the Attention layer's learned scores
 *
 * The launches of kernels/attention.cl's kernels (shared with the OpenCL
 * plugin; cpu_attn_score.c's twins). The sums over the whole batch (a
 * scalar's gradient) run in one block of 256, in a fixed order. */

static void cu_scalar_mul_fwd(int64_t n, const float *x, const float *s, float *y) {
    k_scalar_mul_fwd<<<blocks_for(n, 256), 256, 0, g_stream>>>(n, x, s, y);
    LAUNCHED();
}
static void cu_scalar_mul_bwd(int64_t n, const float *x, const float *s, const float *dy, float *dx, float dx_beta,
                              float *ds) {
    if (ds) { /* before dx: dx may be dy */
        k_dot_sum<<<1, 256, 0, g_stream>>>(n, dy, x, ds);
        LAUNCHED();
    }
    if (dx) {
        k_scalar_mul_dx<<<blocks_for(n, 256), 256, 0, g_stream>>>(n, s, dy, dx, dx_beta);
        LAUNCHED();
    }
}

static void cu_attn_concat_fwd(const fl_attn_desc *d, const float *q, const float *k, const float *scale, float *s) {
    k_attn_concat_fwd<<<blocks_for(d->n * d->tq * (int64_t)d->tk, 256), 256, 0, g_stream>>>(*d, q, k, scale, s);
    LAUNCHED();
}
static void cu_attn_concat_bwd(const fl_attn_desc *d, const float *q, const float *k, const float *scale,
                               const float *ds, int which, float *dst, float beta, float *dscale) {
    if (dst) {
        const int64_t total = d->n * (int64_t)(which ? d->tk : d->tq) * d->dk;
        k_attn_concat_bwd<<<blocks_for(total, 256), 256, 0, g_stream>>>(*d, q, k, scale, ds, which, dst, beta);
        LAUNCHED();
    }
    if (dscale && scale) {
        k_attn_concat_dscale<<<1, 256, 0, g_stream>>>(*d, q, k, scale, ds, dscale);
        LAUNCHED();
    }
}


/* ------------------------------------ attention
 *
 * The twins of cpu_attention.c: the attention GEMMs as cuBLAS strided
 * batches over the heads, one per sample; the masked softmax of the weights
 * (kernels/attention.cl) one row group per row. */

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS
 * gets B first, with the same transposes. */
static void cu_gemm_batched(const fl_gemm_desc *d, const float *a, const float *b, float *c) {
    const cublasOperation_t ta = d->ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = d->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    for (int64_t o = 0; o < d->nouter; o++)
        if (!CUBLAS_OK(cublasSgemmStridedBatched(g_cublas, tb, ta, d->n, d->m, d->k, &d->alpha, b + o * d->sb[0],
                                                 d->ldb, d->sb[1], a + o * d->sa[0], d->lda, d->sa[1], &d->beta,
                                                 c + o * d->sc[0], d->ldc, d->sc[1], d->ninner)))
            return;
}

/* the masked softmax of the weights: kernels/attention.cl, a warp per row */
static void cu_attn_softmax_fwd(const fl_attn_desc *d, const float *qmask, const float *vmask, const float *amask,
                                float *s) {
    k_attn_softmax_fwd<<<row_blocks(d->n * d->heads * d->tq), 32 * ROW_WARPS, 0, g_stream>>>(*d, qmask, vmask, amask, s);
    LAUNCHED();
}
static void cu_attn_softmax_bwd(const fl_attn_desc *d, const float *qmask, const float *vmask, const float *amask,
                                const float *p, float *dp) {
    const int64_t rows = d->n * d->heads * d->tq;
    k_attn_softmax_bwd<<<row_blocks(rows), 32 * ROW_WARPS, 0, g_stream>>>(*d, qmask, vmask, amask, p, dp);
    LAUNCHED();
}
