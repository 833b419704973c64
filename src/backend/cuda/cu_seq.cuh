/*
 * cu_seq.cuh — Embedding, the sequence masks, the masked pooling and loss masks.
 * Part of the CUDA plugin's one translation unit: cuda_backend.cu includes it after the state and
 * helpers it uses (no separate object, so the CUDA 12 build by clang stays one compile).
 */
/* ------------------------------------------------------------ sequences
 * (cpu_seq.c's twins: Embedding, the mask of a padded sequence, the masked
 * GlobalAveragePooling1D, the mask applied to a loss) */

__device__ __forceinline__ int64_t seq_index(int x_int, const float *x, int64_t i) {
    return x_int ? (int64_t)__float_as_int(x[i]) : (int64_t)x[i];
}

/* y[i, j] = w[idx(i), j]; zeros for an index outside [0, v) */
__global__ void k_embedding_fwd(int64_t n, int d, int64_t v, int x_int, const float *x, const float *w, float *y) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n * d; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = e / d, r = seq_index(x_int, x, i);
        y[e] = r >= 0 && r < v ? w[r * d + e % d] : 0.0f;
    }
}
static void cu_embedding_fwd(int64_t n, int d, int64_t v, int x_int, const float *x, const float *w, float *y) {
    k_embedding_fwd<<<blocks_for(n * d, 256), 256, 0, g_stream>>>(n, d, v, x_int, x, w, y);
    LAUNCHED();
}

/* dw[r, j] = sum of dy[i, j] over the i with idx(i) = r, in ascending i as
 * the CPU sums (deterministic, no atomics): thread (p, j) owns column j of
 * the rows r with r % parts == p. */
#define EMB_PARTS 64
__global__ void k_embedding_bwd(int64_t n, int d, int64_t v, int x_int, const float *x, const float *dy, float *dw) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < (int64_t)EMB_PARTS * d;
         e += (int64_t)gridDim.x * blockDim.x) {
        int p = (int)(e / d), j = (int)(e % d);
        for (int64_t i = 0; i < n; i++) {
            int64_t r = seq_index(x_int, x, i);
            if (r >= 0 && r < v && r % EMB_PARTS == p) dw[r * d + j] += dy[i * d + j];
        }
    }
}
static void cu_embedding_bwd(int64_t n, int d, int64_t v, int x_int, const float *x, const float *dy, float *dw) {
    CUDA_OK(cudaMemsetAsync(dw, 0, (size_t)(v * d) * sizeof(float), g_stream));
    k_embedding_bwd<<<blocks_for((int64_t)EMB_PARTS * d, 128), 128, 0, g_stream>>>(n, d, v, x_int, x, dy, dw);
    LAUNCHED();
}

__global__ void k_seq_mask(int64_t rows, int c, int x_int, const float *x, float value, float *m) {
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < rows; r += (int64_t)gridDim.x * blockDim.x) {
        const float *xr = x + r * c;
        int any = 0;
        for (int j = 0; j < c && !any; j++)
            any = x_int ? __float_as_int(xr[j]) != (int32_t)value : xr[j] != value;
        m[r] = any ? 1.0f : 0.0f;
    }
}
static void cu_seq_mask(int64_t rows, int c, int x_int, const float *x, float value, float *m) {
    k_seq_mask<<<blocks_for(rows, 256), 256, 0, g_stream>>>(rows, c, x_int, x, value, m);
    LAUNCHED();
}

__global__ void k_masked_gap1d_fwd(int64_t n, int64_t t, int c, const float *x, const float *m, float *y) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n * c; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t b = e / c;
        int k = (int)(e % c);
        float s = 0.0f, cnt = 0.0f;
        for (int64_t p = 0; p < t; p++)
            if (m[b * t + p] != 0.0f) { s += x[(b * t + p) * c + k]; cnt += 1.0f; }
        y[e] = s / cnt;
    }
}
__global__ void k_masked_gap1d_bwd(int64_t n, int64_t t, int c, const float *m, const float *dy, float *dx, float beta) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n * t * c; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t b = e / (t * c), s = (e / c) % t;
        float cnt = 0.0f;
        for (int64_t p = 0; p < t; p++) cnt += m[b * t + p] != 0.0f ? 1.0f : 0.0f;
        float g = m[b * t + s] != 0.0f ? dy[b * c + e % c] / cnt : 0.0f;
        dx[e] = beta == 0.0f ? g : dx[e] + g;
    }
}
static void cu_masked_gap1d_fwd(int64_t n, int64_t t, int c, const float *x, const float *m, float *y) {
    k_masked_gap1d_fwd<<<blocks_for(n * c, 256), 256, 0, g_stream>>>(n, t, c, x, m, y);
    LAUNCHED();
}
static void cu_masked_gap1d_bwd(int64_t n, int64_t t, int c, const float *m, const float *dy, float *dx, float beta) {
    k_masked_gap1d_bwd<<<blocks_for(n * t * c, 256), 256, 0, g_stream>>>(n, t, c, m, dy, dx, beta);
    LAUNCHED();
}

/* Every block counts the valid rows itself (rows is batch x steps: small),
 * in a fixed order, then scales its share of the rows; block 0 adds the
 * count to acc. */
__global__ void k_loss_mask(int64_t rows, int c, const float *m, float *row_loss, float *grad, double *acc) {
    __shared__ float sh[256];
    float s = 0.0f;
    for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) s += m[r] != 0.0f ? 1.0f : 0.0f;
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int k = 128; k > 0; k >>= 1) {
        if ((int)threadIdx.x < k) sh[threadIdx.x] += sh[threadIdx.x + k];
        __syncthreads();
    }
    const float valid = sh[0], w = valid > 0.0f ? (float)rows / valid : 0.0f;
    const int64_t total = grad ? rows * c : rows;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = grad ? e / c : e;
        float wr = m[r] != 0.0f ? w : 0.0f;
        if (grad) grad[e] *= wr;
        if (!grad || e % c == 0) row_loss[r] *= wr;
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) acc[0] += (double)valid;
}
static void cu_loss_mask(int64_t rows, int c, const float *m, float *row_loss, float *grad, double *acc) {
    k_loss_mask<<<blocks_for(grad ? rows * c : rows, 256), 256, 0, g_stream>>>(rows, c, m, row_loss, grad, acc);
    LAUNCHED();
}

/* Sample weights: one thread per gradient element (per row without grad). */
__global__ void k_loss_weight(int64_t rows, int c, const float *w, float *row_loss, float *grad) {
    const int64_t total = grad ? rows * c : rows;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = grad ? e / c : e;
        if (grad) grad[e] *= w[r];
        if (!grad || e % c == 0) row_loss[r] *= w[r];
    }
}
static void cu_loss_weight(int64_t rows, int c, const float *w, float *row_loss, float *grad) {
    k_loss_weight<<<blocks_for(grad ? rows * c : rows, 256), 256, 0, g_stream>>>(rows, c, w, row_loss, grad);
    LAUNCHED();
}
