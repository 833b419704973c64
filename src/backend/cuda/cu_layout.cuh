/*
 * cu_layout.cuh — UpSampling2D/Resizing, ZeroPadding2D, Permute.
 * Part of the CUDA plugin's one translation unit: cuda_backend.cu includes it after the state and
 * helpers it uses (no separate object, so the CUDA 12 build by clang stays one compile).
 */
/* ------------------------------------------ upsampling, transposition
 *
 * cpu_layout.c's twins. UpSampling2D and Resizing (any h x w -> oh x ow)
 * forward: one thread per output
 * element, channels fastest. Backward: a gather, one thread per input
 * element, over the outputs that read it, in the CPU's order (rows, then
 * columns), so no two threads write one element and no atomics are needed.
 * The bilinear taps are computed as the CPU's bilinear_taps (in double). */
__device__ __forceinline__ void up_taps(int o, int n, int out, int *i0, int *i1, float *f) {
    double src = ((double)o + 0.5) * n / out - 0.5, fl = floor(src);
    int a = (int)fl, b = a + 1;
    *f = (float)(src - fl);
    *i0 = a < 0 ? 0 : a >= n ? n - 1 : a;
    *i1 = b < 0 ? 0 : b >= n ? n - 1 : b;
}
__device__ __forceinline__ int up_nearest(int o, int n, int out) {
    return (int)(((2 * (int64_t)o + 1) * n) / (2 * (int64_t)out));
}
__device__ __forceinline__ float up_weight(int bilinear, int o, int i, int n, int out) {
    if (!bilinear) return up_nearest(o, n, out) == i ? 1.0f : 0.0f;
    int i0, i1;
    float f;
    up_taps(o, n, out, &i0, &i1, &f);
    return (i0 == i ? 1.0f - f : 0.0f) + (i1 == i ? f : 0.0f);
}
/* the outputs [*o0, *o1) that may read input i (the CPU's resize_reach) */
__device__ __forceinline__ void up_reach(int i, int n, int out, int *o0, int *o1) {
    int64_t a = (int64_t)(i - 1) * out / n - 1, b = ((int64_t)(i + 2) * out + n - 1) / n + 1;
    *o0 = a < 0 ? 0 : (int)a;
    *o1 = b > out ? out : (int)b;
}

__global__ void k_upsample2d_fwd(fl_conv_desc d, int bilinear, const float *x, float *y) {
    const int C = d.c;
    const int64_t total = d.n * (int64_t)d.oh * d.ow * C;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = e;
        const int c = (int)(t % C); t /= C;
        const int j = (int)(t % d.ow); t /= d.ow;
        const int i = (int)(t % d.oh);
        const int64_t n = t / d.oh;
        const float *xs = x + n * d.h * d.w * C + c;
        if (!bilinear) {
            y[e] = xs[((int64_t)up_nearest(i, d.h, d.oh) * d.w + up_nearest(j, d.w, d.ow)) * C];
            continue;
        }
        int i0, i1, j0, j1;
        float fh, fw;
        up_taps(i, d.h, d.oh, &i0, &i1, &fh);
        up_taps(j, d.w, d.ow, &j0, &j1, &fw);
        const float w00 = (1 - fh) * (1 - fw), w01 = (1 - fh) * fw, w10 = fh * (1 - fw), w11 = fh * fw;
        const float *x0 = xs + (int64_t)i0 * d.w * C, *x1 = xs + (int64_t)i1 * d.w * C;
        y[e] = w00 * x0[(int64_t)j0 * C] + w01 * x0[(int64_t)j1 * C] + w10 * x1[(int64_t)j0 * C] +
               w11 * x1[(int64_t)j1 * C];
    }
}

__global__ void k_upsample2d_bwd(fl_conv_desc d, int bilinear, const float *dy, float *dx, float beta) {
    const int C = d.c;
    const int64_t total = d.n * (int64_t)d.h * d.w * C, orow = (int64_t)d.ow * C;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = e;
        const int c = (int)(t % C); t /= C;
        const int j = (int)(t % d.w); t /= d.w;
        const int i = (int)(t % d.h);
        const int64_t n = t / d.h;
        const float *dys = dy + n * d.oh * orow + c;
        float g = beta == 0.0f ? 0.0f : dx[e];
        int o0, o1, q0, q1;
        up_reach(i, d.h, d.oh, &o0, &o1);
        up_reach(j, d.w, d.ow, &q0, &q1);
        for (int oi = o0; oi < o1; oi++) {
            const float wh = up_weight(bilinear, oi, i, d.h, d.oh);
            if (wh == 0.0f) continue;
            const float *gr = dys + (int64_t)oi * orow;
            for (int q = q0; q < q1; q++) {
                const float ww = up_weight(bilinear, q, j, d.w, d.ow);
                if (ww == 0.0f) continue;
                g += (wh * ww) * gr[(int64_t)q * C];
            }
        }
        dx[e] = g;
    }
}

static void cu_upsample2d_fwd(const fl_conv_desc *d, int bilinear, const float *x, float *y) {
    k_upsample2d_fwd<<<blocks_for(d->n * (int64_t)d->oh * d->ow * d->c, 256), 256, 0, g_stream>>>(*d, bilinear, x, y);
    LAUNCHED();
}
static void cu_upsample2d_bwd(const fl_conv_desc *d, int bilinear, const float *dy, float *dx, float beta) {
    k_upsample2d_bwd<<<blocks_for(d->n * (int64_t)d->h * d->w * d->c, 256), 256, 0, g_stream>>>(*d, bilinear, dy, dx,
                                                                                                  beta);
    LAUNCHED();
}

/* Permute (fl_cpu_permute's twin): one thread per element of y, whose
 * index is split over y's shape and dotted with x's strides of the axes it
 * takes (ystep); y (beta: +)= x there. */
typedef struct perm_desc { int ndim; int64_t yshape[8], ystep[8]; } perm_desc;

__global__ void k_permute(int64_t total, perm_desc p, const float *x, float *y, float beta) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t off = 0, rem = e;
        for (int a = p.ndim - 1; a >= 0; a--) {
            off += (rem % p.yshape[a]) * p.ystep[a];
            rem /= p.yshape[a];
        }
        y[e] = beta == 0.0f ? x[off] : y[e] + x[off];
    }
}

static void cu_permute(int ndim, const int64_t *shape, const int *perm, const float *x, float *y, float beta) {
    if (ndim < 1 || ndim > 8) return;
    perm_desc p;
    memset(&p, 0, sizeof p);
    p.ndim = ndim;
    int64_t xstride[8] = {0}, total = 1;
    for (int a = ndim - 1; a >= 0; a--) {
        xstride[a] = total;
        total *= shape[a];
    }
    if (total == 0) return;
    for (int a = 0; a < ndim; a++) {
        p.yshape[a] = shape[perm[a]];
        p.ystep[a] = xstride[perm[a]];
    }
    k_permute<<<blocks_for(total, 256), 256, 0, g_stream>>>(total, p, x, y, beta);
    LAUNCHED();
}
