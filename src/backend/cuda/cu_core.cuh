/*
 * cu_core.cuh — errors, the caching allocator, memory entries, the small kernels and Dense (cuBLAS).
 * Part of the CUDA plugin's one translation unit: cuda_backend.cu includes it after the state and
 * helpers it uses (no separate object, so the CUDA 12 build by clang stays one compile).
 */
/* ------------------------------------------------------------ errors */

static void report(const char *call, const char *status, const char *file, int line) {
    if (!g_sticky) {
        g_sticky = 1;
        snprintf(g_sticky_msg, sizeof g_sticky_msg, "%s failed: %s (%s:%d)", call, status, file, line);
    }
    if (g_host) g_host->error(ST_DEVICE, "%s failed: %s (%s:%d)", call, status, file, line);
}

#define CUDA_OK(call)                                                                     \
    ([&]() { cudaError_t e_ = (call);                                                     \
             if (e_ != cudaSuccess) { report(#call, cudaGetErrorName(e_), __FILE__, __LINE__); return false; } \
             return true; }())
#define CUBLAS_OK(call)                                                                   \
    ([&]() { cublasStatus_t e_ = (call);                                                  \
             if (e_ != CUBLAS_STATUS_SUCCESS) { report(#call, cublasGetStatusName(e_), __FILE__, __LINE__); return false; } \
             return true; }())
#define CUDNN_OK(call)                                                                    \
    ([&]() { cudnnStatus_t e_ = (call);                                                   \
             if (e_ != CUDNN_STATUS_SUCCESS) { report(#call, cudnnGetErrorString(e_), __FILE__, __LINE__); return false; } \
             return true; }())
#define LAUNCHED() CUDA_OK(cudaPeekAtLastError())

static int blocks_for(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    return (int)(b < 1 ? 1 : (b > 65535 * 8 ? 65535 * 8 : b));
}

/* ----------------------------------------------------- caching allocator */

/* Power-of-two size classes from 256 bytes; freed blocks wait in a list per
 * class. A failed cudaMalloc releases the cache and retries once. */
#define NCLASS 48
typedef struct blk { void *p; struct blk *next; } blk;
static blk *g_free[NCLASS];
static pthread_mutex_t g_mem_lock = PTHREAD_MUTEX_INITIALIZER;
/* live allocations: pointer -> class (open addressing) */
static void **g_live_p;
static unsigned char *g_live_c;
static size_t g_live_cap, g_live_n;

static int size_class(size_t bytes) {
    int c = 0;
    size_t s = 256;
    while (s < bytes && c < NCLASS - 1) { s <<= 1; c++; }
    return c;
}
static size_t class_bytes(int c) { return (size_t)256 << c; }

static size_t live_slot(void *p) {
    size_t h = ((uintptr_t)p >> 8) * 0x9E3779B97F4A7C15ull;
    return h & (g_live_cap - 1);
}

static bool live_grow(void) {
    size_t cap = g_live_cap ? g_live_cap * 2 : 1024;
    void **np = (void **)calloc(cap, sizeof *np);
    unsigned char *nc = (unsigned char *)calloc(cap, 1);
    if (!np || !nc) { free(np); free(nc); return false; }
    void **op = g_live_p;
    unsigned char *oc = g_live_c;
    size_t ocap = g_live_cap;
    g_live_p = np; g_live_c = nc; g_live_cap = cap; g_live_n = 0;
    for (size_t i = 0; i < ocap; i++)
        if (op[i]) {
            size_t k = live_slot(op[i]);
            while (g_live_p[k]) k = (k + 1) & (g_live_cap - 1);
            g_live_p[k] = op[i]; g_live_c[k] = oc[i]; g_live_n++;
        }
    free(op); free(oc);
    return true;
}

static void release_cache(void) {
    for (int c = 0; c < NCLASS; c++)
        while (g_free[c]) {
            blk *b = g_free[c];
            g_free[c] = b->next;
            cudaFree(b->p);
            free(b);
        }
}

static void *cu_alloc(size_t bytes) {
    int c = size_class(bytes ? bytes : 1);
    void *p = NULL;
    pthread_mutex_lock(&g_mem_lock);
    if (g_free[c]) {
        blk *b = g_free[c];
        g_free[c] = b->next;
        p = b->p;
        free(b);
    } else {
        cudaError_t e = cudaMalloc(&p, class_bytes(c));
        if (e != cudaSuccess) {
            cudaGetLastError();
            cudaStreamSynchronize(g_stream);
            release_cache();
            e = cudaMalloc(&p, class_bytes(c));
        }
        if (e != cudaSuccess) {
            cudaGetLastError();
            size_t fr = 0, tot = 0;
            cudaMemGetInfo(&fr, &tot);
            pthread_mutex_unlock(&g_mem_lock);
            g_host->error(ST_NOMEM, "out of GPU memory allocating %.1f MiB (%s): %.1f MiB free of %.1f MiB on %s; "
                          "use a smaller batch size", (double)class_bytes(c) / 1048576.0, cudaGetErrorName(e),
                          (double)fr / 1048576.0, (double)tot / 1048576.0, g_prop.name);
            return NULL;
        }
    }
    if ((g_live_n + 1) * 2 > g_live_cap && !live_grow()) {
        pthread_mutex_unlock(&g_mem_lock);
        g_host->error(ST_NOMEM, "out of host memory tracking GPU allocations");
        return NULL;
    }
    size_t k = live_slot(p);
    while (g_live_p[k]) k = (k + 1) & (g_live_cap - 1);
    g_live_p[k] = p;
    g_live_c[k] = (unsigned char)c;
    g_live_n++;
    pthread_mutex_unlock(&g_mem_lock);
    return p;
}

static void wcopies_forget(const void *w);

static void cu_free(void *p) {
    if (!p) return;
    wcopies_forget(p); /* a kernel tensor goes: its copy in cuDNN's layout goes with it */
    pthread_mutex_lock(&g_mem_lock);
    size_t k = live_slot(p);
    while (g_live_p[k] && g_live_p[k] != p) k = (k + 1) & (g_live_cap - 1);
    if (!g_live_p[k]) { pthread_mutex_unlock(&g_mem_lock); return; } /* not ours */
    int c = g_live_c[k];
    /* remove with backward-shift deletion */
    g_live_p[k] = NULL;
    g_live_n--;
    size_t j = k;
    for (;;) {
        j = (j + 1) & (g_live_cap - 1);
        if (!g_live_p[j]) break;
        size_t h = live_slot(g_live_p[j]);
        bool move = (k <= j) ? (h <= k || h > j) : (h <= k && h > j);
        if (move) {
            g_live_p[k] = g_live_p[j]; g_live_c[k] = g_live_c[j];
            g_live_p[j] = NULL;
            k = j;
        }
    }
    blk *b = (blk *)malloc(sizeof *b);
    if (b) {
        /* the block may still be in use by queued work: reuse is stream-ordered */
        b->p = p;
        b->next = g_free[c];
        g_free[c] = b;
    } else {
        cudaStreamSynchronize(g_stream);
        cudaFree(p);
    }
    pthread_mutex_unlock(&g_mem_lock);
}

/* Buffers of the backend's own that grow (the convolution workspace, the
 * scratch buffers, the column-sum partials, the batch-norm temporaries, the
 * optimizer's parameter table, the kernel copies in cuDNN's layout) are
 * replaced by bigger ones when a call needs more. A captured graph holds the
 * old pointers and would go on using them on every replay, so while any graph
 * is alive (or one is being captured) a replaced block is not given back to
 * the allocator, where it could be reused or released on OOM: it waits here
 * until the last graph is freed (graph_free, or a failed capture with no
 * graph alive). The graph keeps a block of the size it was captured with,
 * eager calls get the new one, and nothing has to be captured again. These
 * buffers only grow, so the list stays short. */
typedef struct retired { void *p; struct retired *next; } retired;
static retired *g_retired;

static void cu_free_retire(void *p) {
    if (!p) return;
    if (g_graphs_live > 0 || g_capturing) {
        retired *r = (retired *)malloc(sizeof *r);
        if (r) {
            r->p = p;
            r->next = g_retired;
            g_retired = r;
        } /* else: leak the block rather than let a graph write into reused memory */
        return;
    }
    cu_free(p);
}

static void release_retired(void) {
    if (g_graphs_live > 0 || g_capturing) return;
    while (g_retired) {
        retired *r = g_retired;
        g_retired = r->next;
        cu_free(r->p);
        free(r);
    }
}

static void cu_upload(void *dst, const void *src, size_t bytes) {
    if (bytes) CUDA_OK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, g_stream));
}
static void cu_download(void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    CUDA_OK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, g_stream));
    CUDA_OK(cudaStreamSynchronize(g_stream));
}
static void cu_copy(void *dst, const void *src, size_t bytes) {
    if (bytes) CUDA_OK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g_stream));
}
static void cu_zero(void *dst, size_t bytes) {
    if (bytes) CUDA_OK(cudaMemsetAsync(dst, 0, bytes, g_stream));
}
static void cu_sync(void) { CUDA_OK(cudaStreamSynchronize(g_stream)); }
static void cu_mem_info(size_t *fr, size_t *tot) {
    if (!CUDA_OK(cudaMemGetInfo(fr, tot))) { *fr = 0; *tot = 0; }
}

static int cu_check(void) {
    cudaError_t e = cudaPeekAtLastError();
    if (e != cudaSuccess && !g_sticky) report("a CUDA kernel", cudaGetErrorName(e), __FILE__, __LINE__);
    if (g_sticky) {
        g_host->error(ST_DEVICE, "%s", g_sticky_msg);
        return ST_DEVICE;
    }
    return 0;
}

static void cu_set_tf32(int allow) {
    g_tf32 = allow;
    CUBLAS_OK(cublasSetMathMode(g_cublas, allow ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
}

/* ------------------------------------------------------- small kernels */

static void cu_gather_rows(const float *src, const int64_t *idx, int64_t n, int64_t row, float *dst) {
    k_gather<<<blocks_for(n * row, 256), 256, 0, g_stream>>>(src, idx, n, row, dst);
    LAUNCHED();
}

/* y[r, j] = act(y[r, j] + b[j]) */
static void bias_act(int64_t rows, int n, const float *b, int act, float *y) {
    if (!b && act == FL_ACT_LINEAR) return;
    k_bias_act<<<blocks_for(rows * n, 256), 256, 0, g_stream>>>(rows * n, n, b, act, y);
    LAUNCHED();
}

/* Deterministic column sums (kernels/reduce.cl): the summands other than a plain matrix's are functors here
 * until their families move to the shared kernels; each is the same FL_COLSUM_BODY. */
#define COLSUM_CHUNKS FL_COLSUM_CHUNKS
template <typename F>
__global__ void k_colsum_partial(int64_t rows, int n, int chunks, F f, float *partial) {
    FL_COLSUM_BODY(f(r, j))
}

static float *g_partial;
static size_t g_partial_n;

static float *partial_buf(int n, int chunks) {
    size_t need = (size_t)chunks * (size_t)n;
    if (need > g_partial_n) {
        cu_free_retire(g_partial);
        g_partial = (float *)cu_alloc(need * sizeof(float));
        g_partial_n = g_partial ? need : 0;
    }
    return g_partial;
}

/* out[j] = sum_r f(r, j), overwritten. chunks (1..COLSUM_CHUNKS): fewer
 * for many columns of few rows, so the partial sums stay small. */
template <typename F>
static void colsum(int64_t rows, int n, F f, float *out, int chunks = COLSUM_CHUNKS) {
    float *p = partial_buf(n, chunks);
    if (!p) return;
    dim3 grid((n + 31) / 32, chunks), block(32, 8);
    k_colsum_partial<<<grid, block, 0, g_stream>>>(rows, n, chunks, f, p);
    k_colsum_final<<<(n + 255) / 256, 256, 0, g_stream>>>(n, chunks, p, out, 0.0f);
    LAUNCHED();
}

/* out[j] = sum_r x[r * ld + j], overwritten (k_colsum_rows) */
static void colsum_rows(int64_t rows, int n, const float *x, int64_t ld, float *out, int chunks = COLSUM_CHUNKS) {
    float *p = partial_buf(n, chunks);
    if (!p) return;
    dim3 grid((n + 31) / 32, chunks), block(32, 8);
    k_colsum_rows<<<grid, block, 0, g_stream>>>(rows, n, chunks, x, ld, p);
    k_colsum_final<<<(n + 255) / 256, 256, 0, g_stream>>>(n, chunks, p, out, 0.0f);
    LAUNCHED();
}

/* dy *= act'(y); db = column sums of dy */
static void act_grad_bias(int64_t rows, int n, int act, const float *y, float *dy, float *db) {
    if (act != FL_ACT_LINEAR) {
        k_act_grad_y<<<blocks_for(rows * n, 256), 256, 0, g_stream>>>(rows * n, act, y, dy);
        LAUNCHED();
    }
    if (db) colsum_rows(rows, n, dy, n, db);
}

/* ---------------------------------------------------------------- dense */

static void cu_dense_fwd(const fl_dense_desc *d, const float *x, const float *w, const float *b, float *y) {
    const float one = 1.0f, zero = 0.0f;
    /* row-major y[m,n] = x[m,k] w[k,n]  ==  column-major y^T = w^T x^T */
    CUBLAS_OK(cublasSgemm(g_cublas, CUBLAS_OP_N, CUBLAS_OP_N, d->n, (int)d->m, d->k, &one, w, d->n, x, d->k, &zero, y,
                          d->n));
    bias_act(d->m, d->n, d->has_bias ? b : NULL, d->act, y);
}

static void cu_dense_bwd(const fl_dense_desc *d, const float *x, const float *w, const float *y, float *dy, float *dx,
                         float dx_beta, float *dw, float *db) {
    const float one = 1.0f, zero = 0.0f;
    act_grad_bias(d->m, d->n, d->act, y, dy, d->has_bias ? db : NULL);
    /* dw[k,n] = x^T dy  ==  column-major dw^T[n,k] = dy^T[n,m] x[m,k] */
    CUBLAS_OK(cublasSgemm(g_cublas, CUBLAS_OP_N, CUBLAS_OP_T, d->n, d->k, (int)d->m, &one, dy, d->n, x, d->k, &zero, dw,
                          d->n));
    /* dx[m,k] = dy w^T  ==  column-major dx^T[k,m] = w[k,n] dy^T[n,m] */
    if (dx)
        CUBLAS_OK(cublasSgemm(g_cublas, CUBLAS_OP_T, CUBLAS_OP_N, d->k, (int)d->m, d->n, &one, w, d->n, dy, d->n,
                              &dx_beta, dx, d->k));
}
