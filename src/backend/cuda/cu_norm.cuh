/*
 * cu_norm.cuh — BatchNormalization.
 * Part of the CUDA plugin's one translation unit: cuda_backend.cu includes it after the state and
 * helpers it uses (no separate object, so the CUDA 12 build by clang stays one compile).
 */
/* ---------------------------------------------------------- batch norm */

/* Keras semantics (biased batch variance, moving = moving*momentum +
 * batch*(1-momentum)), which cuDNN's batch norm does not follow: own kernels. */
struct f_dev2 { const float *x; const float *mean; int n;
    __device__ float operator()(int64_t r, int j) const { float t = x[r * n + j] - mean[j]; return t * t; } };
struct f_dyxhat { const float *x, *dy, *mean, *invstd; int n;
    __device__ float operator()(int64_t r, int j) const { return dy[r * n + j] * (x[r * n + j] - mean[j]) * invstd[j]; } };

__global__ void k_bn_stats(int c, int64_t m, float eps, float momentum, float *mean, float *var_to_invstd,
                           float *mm, float *mv) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= c) return;
    float var = var_to_invstd[j] / (float)m;
    var_to_invstd[j] = rsqrtf(var + eps);
    mm[j] = mm[j] * momentum + mean[j] * (1.0f - momentum);
    mv[j] = mv[j] * momentum + var * (1.0f - momentum);
}
__global__ void k_scale(int c, float s, float *v) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < c) v[j] *= s;
}
__global__ void k_bn_apply(int64_t total, int c, const float *x, const float *gamma, const float *beta,
                           const float *mean, const float *invstd, float *y) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int j = (int)(e % c);
        float v = (x[e] - mean[j]) * invstd[j];
        if (gamma) v *= gamma[j];
        if (beta) v += beta[j];
        y[e] = v;
    }
}
__global__ void k_bn_infer(int64_t total, int c, float eps, const float *x, const float *gamma, const float *beta,
                           const float *mm, const float *mv, float *y) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int j = (int)(e % c);
        /* Keras's formula, as the CPU's: inv = rsqrt(var + eps) * gamma, x * inv + (beta - mean * inv) */
        float inv = 1.0f / sqrtf(mv[j] + eps);
        if (gamma) inv *= gamma[j];
        float res = -mm[j] * inv;
        if (beta) res += beta[j];
        y[e] = x[e] * inv + res;
    }
}
__global__ void k_bn_bwd(int64_t total, int c, float inv_m, const float *x, const float *gamma, const float *mean,
                         const float *invstd, const float *dy, const float *sdy, const float *sdyx, float *dx, float beta) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int j = (int)(e % c);
        float gm = gamma ? gamma[j] : 1.0f;
        float xhat = (x[e] - mean[j]) * invstd[j];
        float v = gm * invstd[j] * (dy[e] - sdy[j] * inv_m - xhat * sdyx[j] * inv_m);
        dx[e] = beta == 0.0f ? v : dx[e] + v;
    }
}

static void cu_bn_fwd_train(const fl_bn_desc *d, const float *x, const float *gamma, const float *beta, float *y,
                            float *save_mean, float *save_invstd, float *mm, float *mv) {
    int c = d->c;
    colsum_rows(d->m, c, x, c, save_mean);
    k_scale<<<(c + 255) / 256, 256, 0, g_stream>>>(c, 1.0f / (float)d->m, save_mean);
    colsum(d->m, c, f_dev2{x, save_mean, c}, save_invstd);
    k_bn_stats<<<(c + 255) / 256, 256, 0, g_stream>>>(c, d->m, d->eps, d->momentum, save_mean, save_invstd, mm, mv);
    k_bn_apply<<<blocks_for(d->m * c, 256), 256, 0, g_stream>>>(d->m * c, c, x, gamma, beta, save_mean, save_invstd, y);
    LAUNCHED();
}
static void cu_bn_fwd_infer(const fl_bn_desc *d, const float *x, const float *gamma, const float *beta,
                            const float *mm, const float *mv, float *y) {
    k_bn_infer<<<blocks_for(d->m * d->c, 256), 256, 0, g_stream>>>(d->m * d->c, d->c, d->eps, x, gamma, beta, mm, mv, y);
    LAUNCHED();
}
static float *g_bn_tmp;
static int g_bn_tmp_c;
static void cu_bn_bwd(const fl_bn_desc *d, const float *x, const float *gamma, const float *mean, const float *invstd,
                      const float *dy, float *dx, float beta, float *dgamma, float *dbeta) {
    int c = d->c;
    if (c > g_bn_tmp_c) {
        cu_free_retire(g_bn_tmp);
        g_bn_tmp = (float *)cu_alloc((size_t)c * 2 * sizeof(float));
        g_bn_tmp_c = g_bn_tmp ? c : 0;
        if (!g_bn_tmp) return;
    }
    float *sdy = g_bn_tmp, *sdyx = g_bn_tmp + c;
    colsum_rows(d->m, c, dy, c, sdy);
    colsum(d->m, c, f_dyxhat{x, dy, mean, invstd, c}, sdyx);
    if (dgamma) cu_copy(dgamma, sdyx, (size_t)c * sizeof(float));
    if (dbeta) cu_copy(dbeta, sdy, (size_t)c * sizeof(float));
    if (dx) {
        k_bn_bwd<<<blocks_for(d->m * c, 256), 256, 0, g_stream>>>(d->m * c, c, 1.0f / (float)d->m, x, gamma, mean,
                                                                   invstd, dy, sdy, sdyx, dx, beta);
        LAUNCHED();
    }
}
