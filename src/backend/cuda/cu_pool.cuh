/*
 * cu_pool.cuh — the poolings.
 * Part of the CUDA plugin's one translation unit: cuda_backend.cu includes it after the state and
 * helpers it uses (no separate object, so the CUDA 12 build by clang stays one compile).
 */
/* -------------------------------------------------------------- pooling */

__global__ void k_maxpool_fwd(fl_conv_desc d, const float *x, float *y, int32_t *argmax) {
    int64_t total = d.n * (int64_t)d.oh * d.ow * d.c;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = e;
        int c = (int)(t % d.c); t /= d.c;
        int ow = (int)(t % d.ow); t /= d.ow;
        int oh = (int)(t % d.oh);
        int64_t n = t / d.oh;
        const float *xs = x + n * (int64_t)d.h * d.w * d.c;
        float best = -INFINITY;
        int32_t arg = -1;
        for (int kh = 0; kh < d.kh; kh++) {
            int ih = oh * d.sh - d.pt + kh;
            if (ih < 0 || ih >= d.h) continue;
            for (int kw = 0; kw < d.kw; kw++) {
                int iw = ow * d.sw - d.pl + kw;
                if (iw < 0 || iw >= d.w) continue;
                int32_t off = (int32_t)((ih * d.w + iw) * d.c + c);
                float v = xs[off];
                if (v > best || arg < 0) { best = v; arg = off; } /* first maximum wins, as on the CPU */
            }
        }
        y[e] = best;
        argmax[e] = arg;
    }
}

/* The outputs o0..o1 (inclusive; none when o0 > o1) of a pooling axis whose
 * window [o*s - pad, o*s - pad + k) covers input position i: o*s <= i + pad
 * and o*s > i + pad - k. */
__device__ __forceinline__ void pool_cover(int i, int pad, int k, int s, int on, int *o0, int *o1) {
    int a = i + pad - k + 1; /* the first o has o*s >= a */
    *o0 = a <= 0 ? 0 : (a + s - 1) / s;
    int b = (i + pad) / s;   /* i + pad >= 0 */
    *o1 = b < on - 1 ? b : on - 1;
}

/* One thread per input element: sums the gradients of the windows whose
 * maximum it was (no atomics: deterministic). */
__global__ void k_maxpool_bwd(fl_conv_desc d, const float *dy, const int32_t *argmax, float *dx, float beta) {
    int64_t total = d.n * (int64_t)d.h * d.w * d.c;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = e;
        int c = (int)(t % d.c); t /= d.c;
        int iw = (int)(t % d.w); t /= d.w;
        int ih = (int)(t % d.h);
        int64_t n = t / d.h;
        int32_t off = (int32_t)((ih * d.w + iw) * d.c + c);
        float g = 0;
        int oh0, oh1, ow0, ow1;
        pool_cover(ih, d.pt, d.kh, d.sh, d.oh, &oh0, &oh1);
        pool_cover(iw, d.pl, d.kw, d.sw, d.ow, &ow0, &ow1);
        for (int oh = oh0; oh <= oh1; oh++)
            for (int ow = ow0; ow <= ow1; ow++) {
                int64_t o = ((n * d.oh + oh) * d.ow + ow) * d.c + c;
                if (argmax[o] == off) g += dy[o];
            }
        dx[e] = beta == 0.0f ? g : dx[e] + g;
    }
}

/* Windows clipped to the input, as Keras pads "same" pooling: the mean of
 * the elements inside (the CPU's fl_cpu_avgpool_fwd: the sum times 1/count). */
__global__ void k_avgpool_fwd(fl_conv_desc d, const float *x, float *y) {
    int64_t total = d.n * (int64_t)d.oh * d.ow * d.c;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = e;
        int c = (int)(t % d.c); t /= d.c;
        int ow = (int)(t % d.ow); t /= d.ow;
        int oh = (int)(t % d.oh);
        int64_t n = t / d.oh;
        const float *xs = x + n * (int64_t)d.h * d.w * d.c;
        float s = 0;
        int cnt = 0;
        for (int kh = 0; kh < d.kh; kh++) {
            int ih = oh * d.sh - d.pt + kh;
            if (ih < 0 || ih >= d.h) continue;
            for (int kw = 0; kw < d.kw; kw++) {
                int iw = ow * d.sw - d.pl + kw;
                if (iw < 0 || iw >= d.w) continue;
                s += xs[(ih * d.w + iw) * d.c + c];
                cnt++;
            }
        }
        y[e] = __fmul_rn(s, cnt ? 1.0f / (float)cnt : 0.0f);
    }
}

/* One thread per input element: the windows that cover it (pool_cover, as
 * maxpool's backward), each adding its gradient times 1/count of the
 * window's elements inside the input. The same sum as fl_cpu_avgpool_bwd,
 * in the same order (output rows, then columns, onto 0 or the old dx),
 * with the product rounded on its own as the CPU does (no fused multiply-add). */
__global__ void k_avgpool_bwd(fl_conv_desc d, const float *dy, float *dx, float beta) {
    int64_t total = d.n * (int64_t)d.h * d.w * d.c;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = e;
        int c = (int)(t % d.c); t /= d.c;
        int iw = (int)(t % d.w); t /= d.w;
        int ih = (int)(t % d.h);
        int64_t n = t / d.h;
        int oh0, oh1, ow0, ow1;
        pool_cover(ih, d.pt, d.kh, d.sh, d.oh, &oh0, &oh1);
        pool_cover(iw, d.pl, d.kw, d.sw, d.ow, &ow0, &ow1);
        float g = beta == 0.0f ? 0.0f : dx[e];
        for (int oh = oh0; oh <= oh1; oh++) {
            int h0 = oh * d.sh - d.pt;
            int rows = (h0 + d.kh > d.h ? d.h : h0 + d.kh) - (h0 < 0 ? 0 : h0);
            for (int ow = ow0; ow <= ow1; ow++) {
                int w0 = ow * d.sw - d.pl;
                int cols = (w0 + d.kw > d.w ? d.w : w0 + d.kw) - (w0 < 0 ? 0 : w0);
                float inv = 1.0f / (float)(rows * cols); /* >= 1 element: the window covers (ih, iw) */
                g = __fadd_rn(g, __fmul_rn(dy[((n * d.oh + oh) * d.ow + ow) * d.c + c], inv));
            }
        }
        dx[e] = g;
    }
}

static void cu_maxpool_fwd(const fl_conv_desc *d, const float *x, float *y, int32_t *argmax) {
    k_maxpool_fwd<<<blocks_for(d->n * (int64_t)d->oh * d->ow * d->c, 256), 256, 0, g_stream>>>(*d, x, y, argmax);
    LAUNCHED();
}
static void cu_maxpool_bwd(const fl_conv_desc *d, const float *dy, const int32_t *argmax, float *dx, float beta) {
    k_maxpool_bwd<<<blocks_for(d->n * (int64_t)d->h * d->w * d->c, 256), 256, 0, g_stream>>>(*d, dy, argmax, dx, beta);
    LAUNCHED();
}
static void cu_avgpool_fwd(const fl_conv_desc *d, const float *x, float *y) {
    k_avgpool_fwd<<<blocks_for(d->n * (int64_t)d->oh * d->ow * d->c, 256), 256, 0, g_stream>>>(*d, x, y);
    LAUNCHED();
}
static void cu_avgpool_bwd(const fl_conv_desc *d, const float *dy, float *dx, float beta) {
    k_avgpool_bwd<<<blocks_for(d->n * (int64_t)d->h * d->w * d->c, 256), 256, 0, g_stream>>>(*d, dy, dx, beta);
    LAUNCHED();
}

__global__ void k_gap_fwd(int64_t n, int64_t hw, int c, const float *x, float *y) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n * c; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = e / c;
        int k = (int)(e % c);
        float s = 0;
        for (int64_t p = 0; p < hw; p++) s += x[(i * hw + p) * c + k];
        y[e] = s / (float)hw;
    }
}
__global__ void k_gap_bwd(int64_t n, int64_t hw, int c, const float *dy, float *dx, float beta) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n * hw * c; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = e / (hw * c);
        int k = (int)(e % c);
        float g = dy[i * c + k] / (float)hw;
        dx[e] = beta == 0.0f ? g : dx[e] + g;
    }
}
static void cu_gap_fwd(int64_t n, int64_t hw, int c, const float *x, float *y) {
    k_gap_fwd<<<blocks_for(n * c, 256), 256, 0, g_stream>>>(n, hw, c, x, y);
    LAUNCHED();
}
static void cu_gap_bwd(int64_t n, int64_t hw, int c, const float *dy, float *dx, float beta) {
    k_gap_bwd<<<blocks_for(n * hw * c, 256), 256, 0, g_stream>>>(n, hw, c, dy, dx, beta);
    LAUNCHED();
}
