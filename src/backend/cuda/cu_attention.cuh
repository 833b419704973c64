/*
 * cu_attention.cuh — the Attention layers and LayerNormalization.
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


/* ------------------------------------ LayerNormalization and attention
 *
 * The twins of cpu_attention.c: LayerNorm one warp per row (mean, then the
 * variance about it, then the output), gamma/beta sums as column sums; the
 * attention GEMMs as cuBLAS strided batches over the heads, one per sample;
 * the masked softmax of the weights one warp per row. */

__global__ void k_layernorm_fwd(int64_t rows, int c, float eps, int rms, const float *x, const float *gamma,
                                const float *beta, float *y, float *stats) {
    const int lane = threadIdx.x & 31;
    FL_ROW_LOOP(r, rows) {
        const float *xr = x + r * c;
        float *yr = y + r * c;
        float s = 0;
        for (int j = lane; j < c; j += 32) s += xr[j];
        const float mean = fl_warp_sum(s) / (float)c;
        float v = 0;
        for (int j = lane; j < c; j += 32) { float d = xr[j] - mean; v += d * d; }
        const float inv = 1.0f / sqrtf(fl_warp_sum(v) / (float)c + eps);
        if (lane == 0) { stats[2 * r] = mean; stats[2 * r + 1] = inv; }
        const float sub = rms ? 0.0f : mean;
        for (int j = lane; j < c; j += 32) {
            float t = (xr[j] - sub) * inv;
            if (gamma) t *= gamma[j];
            if (beta) t += beta[j];
            yr[j] = t;
        }
    }
}
__global__ void k_layernorm_bwd(int64_t rows, int c, int rms, const float *x, const float *gamma, const float *stats,
                                const float *dy, float *dx, float beta) {
    const int lane = threadIdx.x & 31;
    FL_ROW_LOOP(r, rows) {
        const float *xr = x + r * c, *gr = dy + r * c;
        float *dr = dx + r * c;
        const float mean = stats[2 * r], inv = stats[2 * r + 1];
        float sg = 0, sgx = 0;
        for (int j = lane; j < c; j += 32) {
            float g = gamma ? gr[j] * gamma[j] : gr[j];
            sg += g;
            sgx += g * (rms ? xr[j] : (xr[j] - mean) * inv);
        }
        const float mg = fl_warp_sum(sg) / (float)c, mgx = fl_warp_sum(sgx) / (float)c;
        for (int j = lane; j < c; j += 32) {
            float g = gamma ? gr[j] * gamma[j] : gr[j], d;
            if (rms) d = inv * g - inv * inv * inv * (xr[j] - mean) * mgx;
            else d = inv * (g - mg - (xr[j] - mean) * inv * mgx);
            dr[j] = beta == 0.0f ? d : dr[j] + d;
        }
    }
}
/* dy * xhat (rms: dy * x * inv) of row r, column j */
struct f_ln_dgamma {
    const float *x, *dy, *stats;
    int c, rms;
    __device__ float operator()(int64_t r, int j) const {
        const float mean = rms ? 0.0f : stats[2 * r];
        return dy[r * c + j] * (x[r * c + j] - mean) * stats[2 * r + 1];
    }
};

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
    if (dgamma) colsum(rows, c, f_ln_dgamma{x, dy, stats, c, rms}, dgamma);
    if (dbeta) colsum_rows(rows, c, dy, c, dbeta);
}

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
