/*
 * cu_act.cuh — the activations, the parametrized ones, Softmax(axis), PReLU, Normalization, Dropout.
 * Part of the CUDA plugin's one translation unit: cuda_backend.cu includes it after the state and
 * helpers it uses (no separate object, so the CUDA 12 build by clang stays one compile).
 */
/* ---------------------------------------------------------- activations */

/* Row reductions (dialect.h's row groups): a warp per row, ROW_WARPS rows a block. */
#define ROW_WARPS 8 /* warps per block */
static int row_blocks(int64_t rows) { return blocks_for(rows, ROW_WARPS); }

static void cu_act_fwd(int act, int64_t rows, int c, const float *x, float *y) {
    if (act == FL_ACT_SOFTMAX) k_softmax_fwd<<<row_blocks(rows), 32 * ROW_WARPS, 0, g_stream>>>(rows, c, x, y);
    else k_act_fwd<<<blocks_for(rows * c, 256), 256, 0, g_stream>>>(rows * c, act, x, y);
    LAUNCHED();
}
static void cu_act_bwd(int act, int64_t rows, int c, const float *x, const float *y, const float *dy, float *dx,
                       float beta) {
    if (act == FL_ACT_SOFTMAX) k_softmax_bwd<<<row_blocks(rows), 32 * ROW_WARPS, 0, g_stream>>>(rows, c, y, dy, dx, beta);
    else k_act_bwd<<<blocks_for(rows * c, 256), 256, 0, g_stream>>>(rows * c, act, x, y, dy, dx, beta);
    LAUNCHED();
}

/* ------------------------ parametrized activations, Softmax(axis), PReLU,
 * Normalization: cpu_pact.c's twins, calling the same math.h formulas */

/* ReLU(max_value, negative_slope, threshold), LeakyReLU, ELU, Rescaling */
static void cu_pact_fwd(const fl_pact_desc *d, int64_t n, const float *x, float *y) {
    k_pact_fwd<<<blocks_for(n, 256), 256, 0, g_stream>>>(*d, n, x, y);
    LAUNCHED();
}
static void cu_pact_bwd(const fl_pact_desc *d, int64_t n, const float *x, const float *y, const float *dy, float *dx,
                        float beta) {
    k_pact_bwd<<<blocks_for(n, 256), 256, 0, g_stream>>>(*d, n, x, y, dy, dx, beta);
    LAUNCHED();
}

/* Softmax along the middle axis of x[outer, c, inner]: one thread per
 * (o, i), walking its c values inner apart in the CPU's order; neighbouring
 * threads take neighbouring i, so each step of the walk reads contiguous
 * memory. (The last axis, inner = 1, is act_fwd's warp-per-row softmax.) */
__global__ void k_softmax_axis_fwd(int64_t outer, int c, int64_t inner, const float *x, float *y) {
    const int64_t m = outer * inner;
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < m; r += (int64_t)gridDim.x * blockDim.x) {
        const int64_t base = r / inner * c * inner + r % inner;
        const float *xr = x + base;
        float *yr = y + base;
        float mx = xr[0];
        for (int j = 1; j < c; j++) mx = xr[j * inner] > mx ? xr[j * inner] : mx;
        float s = 0;
        for (int j = 0; j < c; j++) { float e = expf(xr[j * inner] - mx); yr[j * inner] = e; s += e; }
        float inv = 1.0f / s;
        for (int j = 0; j < c; j++) yr[j * inner] *= inv;
    }
}
/* dx (+)= y * (dy - sum_c(dy * y)) */
__global__ void k_softmax_axis_bwd(int64_t outer, int c, int64_t inner, const float *y, const float *dy, float *dx,
                                   float beta) {
    const int64_t m = outer * inner;
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < m; r += (int64_t)gridDim.x * blockDim.x) {
        const int64_t base = r / inner * c * inner + r % inner;
        float s = 0;
        for (int j = 0; j < c; j++) s += dy[base + j * inner] * y[base + j * inner];
        for (int j = 0; j < c; j++) {
            const int64_t k = base + j * inner;
            float g = y[k] * (dy[k] - s);
            dx[k] = beta == 0.0f ? g : dx[k] + g;
        }
    }
}
static void cu_softmax_axis_fwd(int64_t outer, int c, int64_t inner, const float *x, float *y) {
    k_softmax_axis_fwd<<<blocks_for(outer * inner, 256), 256, 0, g_stream>>>(outer, c, inner, x, y);
    LAUNCHED();
}
static void cu_softmax_axis_bwd(int64_t outer, int c, int64_t inner, const float *y, const float *dy, float *dx,
                                float beta) {
    k_softmax_axis_bwd<<<blocks_for(outer * inner, 256), 256, 0, g_stream>>>(outer, c, inner, y, dy, dx, beta);
    LAUNCHED();
}

/* PReLU: y = x > 0 ? x : alpha[p(j)] * x, p: the broadcast (fl_bcast_index).
 * The descriptor stays in the kernel's parameter space (__grid_constant__):
 * fl_bcast_index indexes its arrays with a loop counter, uniform across the
 * warp, and no thread needs a copy of its own. */
__global__ void k_prelu_fwd(const FL_GRID_CONSTANT fl_bcast_desc d, const float *x, const float *alpha, float *y) {
    const int64_t n = d.n * d.size;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float v = x[i];
        y[i] = v > 0 ? v : alpha[fl_bcast_index(&d, i % d.size)] * v;
    }
}
/* dx (+)= dy * (x > 0 ? 1 : alpha) */
__global__ void k_prelu_bwd_dx(const FL_GRID_CONSTANT fl_bcast_desc d, const float *x, const float *alpha,
                               const float *dy, float *dx, float beta) {
    const int64_t n = d.n * d.size;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float v = x[i], g = v > 0 ? dy[i] : dy[i] * alpha[fl_bcast_index(&d, i % d.size)];
        dx[i] = beta == 0.0f ? g : dx[i] + g;
    }
}
/* dalpha[a] = sum over the batch and the shared positions of dy * min(x, 0),
 * as column sums (colsum) of a [n * shared, psize] matrix: row r = (batch b,
 * shared position t), column a = the alpha element. Element offsets as the
 * CPU's fl_cpu_prelu_bwd: a's kept coordinates, then t's shared ones. */
struct f_prelu_dalpha {
    const float *x, *dy;
    fl_bcast_desc d;
    int64_t shared;
    __device__ float operator()(int64_t r, int a) const {
        const int64_t b = r / shared;
        int64_t t = r - b * shared, off = b * d.size;
        for (int k = 0; k < d.ndim; k++)
            if (d.pstride[k]) off += a / d.pstride[k] % d.dim[k] * d.sstride[k];
        for (int k = d.ndim - 1; k >= 0; k--)
            if (!d.pstride[k]) { off += t % d.dim[k] * d.sstride[k]; t /= d.dim[k]; }
        const float v = x[off];
        return v < 0 ? dy[off] * v : 0.0f;
    }
};
static void cu_prelu_fwd(const fl_bcast_desc *d, const float *x, const float *alpha, float *y) {
    k_prelu_fwd<<<blocks_for(d->n * d->size, 256), 256, 0, g_stream>>>(*d, x, alpha, y);
    LAUNCHED();
}
static void cu_prelu_bwd(const fl_bcast_desc *d, const float *x, const float *alpha, const float *dy, float *dx,
                         float dx_beta, float *dalpha) {
    if (dx) {
        k_prelu_bwd_dx<<<blocks_for(d->n * d->size, 256), 256, 0, g_stream>>>(*d, x, alpha, dy, dx, dx_beta);
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
    colsum(rows, (int)d->psize, f_prelu_dalpha{x, dy, *d, shared}, dalpha, chunks);
}

/* Normalization: y = (x - mean[p]) / den, or with invert mean[p] + x * den;
 * den = fl_norm_den(var[p]) = max(sqrt(var[p]), 1e-7) */
__global__ void k_normalize_fwd(const FL_GRID_CONSTANT fl_bcast_desc d, int invert, const float *x, const float *mean,
                                const float *var, float *y) {
    const int64_t n = d.n * d.size;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t p = fl_bcast_index(&d, i % d.size);
        float den = fl_norm_den(var[p]);
        y[i] = invert ? mean[p] + x[i] * den : (x[i] - mean[p]) / den;
    }
}
/* dx (+)= dy / den (invert: dy * den) */
__global__ void k_normalize_bwd(const FL_GRID_CONSTANT fl_bcast_desc d, int invert, const float *var, const float *dy,
                                float *dx, float beta) {
    const int64_t n = d.n * d.size;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float den = fl_norm_den(var[fl_bcast_index(&d, i % d.size)]);
        float g = invert ? dy[i] * den : dy[i] / den;
        dx[i] = beta == 0.0f ? g : dx[i] + g;
    }
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

/* ------------------------------------------------------------- dropout */

/* k_dropout_fwd (kernels/act.cl): while a graph is captured, the stream given is the layer's base stream and
 * the step is read from the device (g_dsteps[1]) */
static void cu_dropout_fwd(int64_t n, float rate, uint64_t seed, uint64_t stream, int64_t offset, const float *x,
                           float *y, uint8_t *mask) {
    const int64_t blocks = (offset + n + 3) / 4 - offset / 4;
    if (g_capturing) /* back to the base stream: replays mix in the device's step (the offset is baked in) */
        k_dropout_fwd<<<blocks_for(blocks, 256), 256, 0, g_stream>>>(n, rate, seed,
                                                                     fl_dropout_stream(stream, g_cap_gstep), offset,
                                                                     g_dsteps + 1, x, y, mask);
    else
        k_dropout_fwd<<<blocks_for(blocks, 256), 256, 0, g_stream>>>(n, rate, seed, stream, offset, NULL, x, y, mask);
    LAUNCHED();
}
static void cu_dropout_bwd(int64_t n, float rate, const uint8_t *mask, const float *dy, float *dx, float beta) {
    k_dropout_bwd<<<blocks_for(n, 256), 256, 0, g_stream>>>(n, 1.0f / (1.0f - rate), mask, dy, dx, beta);
    LAUNCHED();
}
