/*
 * cu_attention.cuh — the Attention layers and LayerNormalization.
 * Part of the CUDA plugin's one translation unit: cuda_backend.cu includes it after the state and
 * helpers it uses (no separate object, so the CUDA 12 build by clang stays one compile).
 */
/* ------------------------------- the Attention layer's learned scores
 *
 * cpu_attn_score.c's twins. The scalar weights are read from device memory
 * by the kernels (a captured graph replays their updates). Sums over the
 * whole batch (a scalar's gradient) run in one block, in a fixed order. */

__global__ void k_scalar_mul_fwd(int64_t n, const float *x, const float *s, float *y) {
    const float a = s[0];
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x)
        y[e] = a * x[e];
}
__global__ void k_dot_sum(int64_t n, const float *x, const float *y, float *out) {
    __shared__ double sh[256];
    double acc = 0.0;
    for (int64_t e = threadIdx.x; e < n; e += blockDim.x) acc += (double)x[e] * y[e];
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int k = 128; k > 0; k >>= 1) {
        if ((int)threadIdx.x < k) sh[threadIdx.x] += sh[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = (float)sh[0];
}
__global__ void k_scalar_mul_dx(int64_t n, const float *s, const float *dy, float *dx, float beta) {
    const float a = s[0];
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x)
        dx[e] = a * dy[e] + (beta != 0.0f ? dx[e] : 0.0f);
}
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

/* one thread per score (b, i, j) */
__global__ void k_attn_concat_fwd(fl_attn_desc d, const float *q, const float *k, const float *scale, float *s) {
    const float a = scale ? scale[0] : 1.0f;
    const int64_t total = d.n * d.tq * (int64_t)d.tk;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t j = e % d.tk, r = e / d.tk, b = r / d.tq;
        const float *qi = q + r * d.dk, *kj = k + (b * d.tk + j) * d.dk;
        float acc = 0.0f;
        for (int c = 0; c < d.dk; c++) acc += tanhf(a * (qi[c] + kj[c]));
        s[e] = acc;
    }
}
/* one thread per element of dq (which 0) or dk (which 1): the sum over the other side's steps */
__global__ void k_attn_concat_bwd(fl_attn_desc d, const float *q, const float *k, const float *scale, const float *ds,
                                  int which, float *dst, float beta) {
    const float a = scale ? scale[0] : 1.0f;
    const int rows = which ? d.tk : d.tq, other = which ? d.tq : d.tk;
    const int64_t total = d.n * rows * (int64_t)d.dk;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c = e % d.dk, r = (e / d.dk) % rows, b = e / d.dk / rows;
        const float xv = (which ? k : q)[e];
        const float *oth = (which ? q + b * d.tq * (int64_t)d.dk : k + b * d.tk * (int64_t)d.dk) + c;
        const float *dsb = ds + b * d.tq * (int64_t)d.tk;
        float acc = 0.0f;
        for (int o = 0; o < other; o++) {
            const float gs = which ? dsb[(int64_t)o * d.tk + r] : dsb[r * d.tk + o];
            const float t = tanhf(a * (xv + oth[(int64_t)o * d.dk]));
            acc += gs * (1.0f - t * t);
        }
        dst[e] = a * acc + (beta != 0.0f ? dst[e] : 0.0f);
    }
}
/* the scale's gradient: sum over (b, i, j, c) of ds (1 - t^2) (q + k), one block */
__global__ void k_attn_concat_dscale(fl_attn_desc d, const float *q, const float *k, const float *scale,
                                     const float *ds, float *dscale) {
    __shared__ double sh[256];
    const float a = scale[0];
    const int64_t total = d.n * d.tq * (int64_t)d.tk;
    double acc = 0.0;
    for (int64_t e = threadIdx.x; e < total; e += blockDim.x) {
        const int64_t j = e % d.tk, r = e / d.tk, b = r / d.tq;
        const float *qi = q + r * d.dk, *kj = k + (b * d.tk + j) * d.dk;
        float part = 0.0f;
        for (int c = 0; c < d.dk; c++) {
            const float z = qi[c] + kj[c], t = tanhf(a * z);
            part += (1.0f - t * t) * z;
        }
        acc += (double)ds[e] * part;
    }
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int w = 128; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) dscale[0] = (float)sh[0];
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

__global__ void k_attn_softmax_fwd(fl_attn_desc d, const float *qmask, const float *vmask, const float *amask,
                                   float *s) {
    const int lane = threadIdx.x & 31;
    const int64_t rows = d.n * d.heads * d.tq;
    const int tq = d.tq, tk = d.tk;
    FL_ROW_LOOP(r, rows) {
        const int64_t b = r / ((int64_t)d.heads * tq);
        const int i = (int)(r % tq);
        float *sr = s + r * tk;
        const float *vm = vmask ? vmask + b * tk : NULL;
        const float *am = amask && d.mask_mode != 1 ? amask + (b * tq + i) * tk : NULL;
        const int jmax = d.causal && i + 1 < tk ? i + 1 : tk;
        const bool qoff = qmask && qmask[b * tq + i] <= 0.5f;
        if (d.mask_mode != 1) {
            float mx = -INFINITY;
            for (int j = lane; j < jmax; j += 32)
                if (!qoff && (!vm || vm[j] > 0.5f) && (!am || am[j] > 0.5f)) mx = sr[j] > mx ? sr[j] : mx;
            mx = fl_warp_max(mx);
            if (mx == -INFINITY) { /* all masked: zeros (Keras's where(mask, p, 0)); mode 2 uniform (JAX) */
                for (int j = lane; j < tk; j += 32) sr[j] = d.mask_mode == 2 ? 1.0f / (float)tk : 0.0f;
                continue;
            }
            float sum = 0;
            for (int j = lane; j < tk; j += 32) {
                bool on = j < jmax && !qoff && (!vm || vm[j] > 0.5f) && (!am || am[j] > 0.5f);
                float e = on ? expf(sr[j] - mx) : 0.0f;
                sr[j] = e;
                sum += e;
            }
            const float inv = 1.0f / fl_warp_sum(sum);
            for (int j = lane; j < tk; j += 32) sr[j] *= inv;
        } else {
            if (qoff) {
                for (int j = lane; j < tk; j += 32) sr[j] = 0.0f;
                continue;
            }
            float mx = -INFINITY;
            for (int j = lane; j < tk; j += 32) {
                if (j >= jmax || (vm && vm[j] <= 0.5f)) sr[j] = sr[j] - 1.0e9f;
                mx = sr[j] > mx ? sr[j] : mx;
            }
            mx = fl_warp_max(mx);
            float sum = 0;
            for (int j = lane; j < tk; j += 32) { float e = expf(sr[j] - mx); sr[j] = e; sum += e; }
            const float inv = 1.0f / fl_warp_sum(sum);
            for (int j = lane; j < tk; j += 32) sr[j] *= inv;
        }
    }
}
__global__ void k_attn_softmax_bwd(fl_attn_desc d, const float *qmask, const float *vmask, const float *amask,
                                   const float *p, float *dp) {
    const int lane = threadIdx.x & 31;
    const int64_t rows = d.n * d.heads * d.tq;
    const int tq = d.tq, tk = d.tk;
    FL_ROW_LOOP(r, rows) {
        const float *pr = p + r * tk;
        float *gr = dp + r * tk;
        if (d.mask_mode == 2) { /* a fully masked row's uniform weights do not depend on the scores */
            const int64_t b = r / ((int64_t)d.heads * tq);
            const int i = (int)(r % tq), jmax = d.causal && i + 1 < tk ? i + 1 : tk;
            bool any = false;
            if (!qmask || qmask[b * tq + i] > 0.5f)
                for (int j = lane; j < jmax; j += 32)
                    any |= (!vmask || vmask[b * tk + j] > 0.5f) && (!amask || amask[(b * tq + i) * tk + j] > 0.5f);
            if (!__any_sync(0xffffffffu, any)) {
                for (int j = lane; j < tk; j += 32) gr[j] = 0.0f;
                continue;
            }
        }
        float s = 0;
        for (int j = lane; j < tk; j += 32) s += gr[j] * pr[j];
        s = fl_warp_sum(s);
        for (int j = lane; j < tk; j += 32) gr[j] = pr[j] * (gr[j] - s);
    }
}
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
