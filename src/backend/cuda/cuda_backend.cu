/*
 * cuda_backend.cu — the CUDA backend (libflynn_cuda.so): the same table as
 * the CPU backend (backend/backend.h), on one stream. cuBLAS does the dense
 * matrix products, cuDNN the convolutions other than the depthwise ones
 * (algorithm found once per shape and cached); own kernels do the rest,
 * calling the per-element formulas of ops/math.h that the CPU backend calls
 * too, so that the CPU tests already check the GPU's math. A caching
 * allocator keeps cudaMalloc/cudaFree out of the training loop. Every
 * CUDA/cuBLAS/cuDNN status is checked and turned into a flynn error naming
 * the call and the status.
 *
 * Layout conventions are the CPU's: NHWC activations, Keras kernels
 * (kh, kw, in, out); cuDNN wants (out, kh, kw, in), so kernels are
 * transposed into a cached copy before each forward pass.
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "flynn/flynn.h"
#include "backend/backend.h"
#include "backend/cuda/plugin.h"
}
#include "backend/kernels/dialect.h"
#include "ops/math.h"
#include "ops/rnn_math.h"
/* the kernels CUDA shares with OpenCL (src/backend/kernels/, dialect.h), one file per family */
#include "backend/kernels/act.cl"
#include "backend/kernels/merge.cl"
#include "backend/kernels/reduce.cl"
#include "backend/kernels/loss.cl"

#ifndef FLYNN_CUDA_ARCHS
#define FLYNN_CUDA_ARCHS "unknown"
#endif

/* One source, two plugins: libflynn_cuda.so is built by nvcc with CUDA 13,
 * libflynn_cuda12.so by clang with CUDA 12 from pip wheels (docs/gpu.md,
 * "Building the CUDA 12 plugin"). What differs is said here: the oldest
 * driver of each CUDA major (NVIDIA's minor version compatibility table),
 * the CMake variable that lists the architectures, and __grid_constant__,
 * which clang has only from version 17 (without it, the descriptor
 * argument is read from parameter space all the same unless its address is
 * taken; flynn's kernels index it with a loop counter, so a copy may be
 * made in local memory: slower, not wrong). */
#if CUDART_VERSION >= 13000
#define FL_PLUGIN_MIN_DRIVER "580"
#define FL_PLUGIN_ARCH_VAR "CMAKE_CUDA_ARCHITECTURES (FLYNN_CUDA_ARCHITECTURES)"
#else
#define FL_PLUGIN_MIN_DRIVER "525"
#define FL_PLUGIN_ARCH_VAR "FLYNN_CUDA12_ARCHITECTURES"
#endif
#define FL_PLUGIN_CUDA_MAJOR (CUDART_VERSION / 1000)
#if defined(__clang__) && __clang_major__ < 17
#define FL_GRID_CONSTANT
#else
#define FL_GRID_CONSTANT __grid_constant__
#endif

/* flynn's status codes, from the one public list */
enum { ST_INVALID_ARG = FL_ERR_INVALID_ARG, ST_NOMEM = FL_ERR_NOMEM, ST_DEVICE = FL_ERR_DEVICE };

static const fl_cuda_host *g_host;
static cudaStream_t g_stream;
static cublasHandle_t g_cublas;
static cudnnHandle_t g_cudnn;
static int g_tf32 = 1;             /* TensorFlow's default: TF32 allowed */
static int g_sticky = 0;           /* an asynchronous error was seen */
static char g_sticky_msg[512];
static cudaDeviceProp g_prop;
/* CUDA graphs. A captured training step reads what changes from step to
 * step from two device counters, g_dsteps[0] = optimizer steps done before
 * the step (Adam's t - 1) and g_dsteps[1] = the graph step its dropout
 * streams mix in. They are written from the host's counters right before
 * every replay (cu_graph_launch), never advanced on the device: eager steps
 * between replays (the partial last batch of an epoch) move only the host's
 * counters, and a device copy that moved by itself would fall behind. */
static int g_capturing;
static int64_t g_cap_gstep;        /* the graph step of the step being captured */
static int64_t *g_dsteps;
static float *g_dlr;               /* the learning rate a captured optimizer step reads (graph_set_learning_rate) */
static int g_graphs_live;          /* instantiated graphs not yet freed */
static void *g_cublas_ws;

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

/* ----------------------------------------------------------- convolution */

/* (kh, kw, c, oc) <-> (oc, kh, kw, c) */
__global__ void k_hwio_to_ohwi(int64_t total, int khkwc, int oc, const float *src, float *dst) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t o = e / khkwc, r = e - o * khkwc; /* dst index e = o*khkwc + r */
        dst[e] = src[r * oc + o];
    }
}
__global__ void k_ohwi_to_hwio(int64_t total, int khkwc, int oc, const float *src, float *dst) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = e / oc, o = e - r * oc; /* dst index e = r*oc + o */
        dst[e] = src[o * khkwc + r];
    }
}

/* x (n, h, w, c) -> xp (n, h+eh, w+ew, c): an extra zero row/column after,
 * for the asymmetric "same" padding cuDNN does not do itself. */
__global__ void k_pad_after(int64_t total, int h, int w, int c, int eh, int ew, const float *x, float *xp) {
    int hp = h + eh, wp = w + ew;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = e;
        int ch = (int)(t % c); t /= c;
        int iw = (int)(t % wp); t /= wp;
        int ih = (int)(t % hp);
        int64_t n = t / hp;
        xp[e] = (ih < h && iw < w) ? x[((n * h + ih) * w + iw) * c + ch] : 0.0f;
    }
}
/* dx (n, h, w, c) (+)= the top-left part of dxp (n, h+eh, w+ew, c) */
__global__ void k_crop_add(int64_t total, int h, int w, int c, int eh, int ew, const float *dxp, float *dx, float beta) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = e;
        int ch = (int)(t % c); t /= c;
        int iw = (int)(t % w); t /= w;
        int ih = (int)(t % h);
        int64_t n = t / h;
        float v = dxp[((n * (h + eh) + ih) * (w + ew) + iw) * c + ch];
        dx[e] = beta == 0.0f ? v : dx[e] + v;
    }
}

/* One cuDNN setup per convolution shape (batch included). The algorithm of
 * each direction (forward, backward data, backward filter) is searched the
 * first time that direction runs: inference searches only the forward one,
 * and a direction without a deterministic algorithm troubles no other. */
enum { CONV_FWD, CONV_BWD_DATA, CONV_BWD_FILTER };
static const char *const conv_dir_name[3] = {"forward", "backward-data", "backward-filter"};

typedef struct conv_plan {
    fl_conv_desc d;
    int tf32;
    int eh, ew;                       /* extra padding after (asymmetric "same") */
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t fd;
    /* one convolution descriptor per direction, each set to the math type
     * of the algorithm chosen for that direction */
    cudnnConvolutionDescriptor_t cd[3];
    bool found[3];
    int algo[3];                      /* cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t */
    size_t ws[3];                     /* its workspace, from cudnnGetConvolution*WorkspaceSize */
    struct conv_plan *next;
} conv_plan;

/* Plans, most recently used first. There are few (one per convolution and
 * batch size); beyond MAX_PLANS the least recently used is dropped, so that
 * a long-lived process that sees many shapes does not grow without bound
 * (a plan is host state only, and no captured graph refers to it). */
#define MAX_PLANS 256
static conv_plan *g_plans;
static int g_nplans;
static void *g_conv_ws;
static size_t g_conv_ws_bytes;

/* Kernel copies in cuDNN's layout, one per kernel tensor, rewritten by each
 * forward pass; freed when the kernel tensor itself is freed (cu_free). */
typedef struct wcopy { const void *w; float *ohwi; size_t n; struct wcopy *next; } wcopy;
static wcopy *g_wcopies;

static float *ohwi_for(const float *w, size_t n) {
    for (wcopy *c = g_wcopies; c; c = c->next)
        if (c->w == w && c->n == n) return c->ohwi;
    wcopy *c = (wcopy *)calloc(1, sizeof *c);
    if (!c) { g_host->error(ST_NOMEM, "out of host memory for a kernel copy"); return NULL; }
    c->ohwi = (float *)cu_alloc(n * sizeof(float));
    if (!c->ohwi) { free(c); return NULL; }
    c->w = w;
    c->n = n;
    c->next = g_wcopies;
    g_wcopies = c;
    return c->ohwi;
}

static void wcopies_forget(const void *w) {
    for (wcopy **pc = &g_wcopies; *pc;) {
        wcopy *c = *pc;
        if (c->w != w) { pc = &c->next; continue; }
        *pc = c->next; /* unlinked first: cu_free_retire -> cu_free walks the list again */
        cu_free_retire(c->ohwi);
        free(c);
    }
}

static bool deterministic_only(void) {
    const char *e = getenv("FLYNN_CUDNN_NONDETERMINISTIC");
    return !(e && *e && strcmp(e, "0") != 0);
}

/* Dilation and groups (fl_conv_desc: 0 reads as 1), and the kernel's
 * elements: kh*kw*(c/groups)*oc, read by cuDNN as (oc, kh, kw, c/groups). */
static int conv_dil_h(const fl_conv_desc *d) { return d->dil_h > 1 ? d->dil_h : 1; }
static int conv_dil_w(const fl_conv_desc *d) { return d->dil_w > 1 ? d->dil_w : 1; }
static int conv_groups(const fl_conv_desc *d) { return d->groups > 1 ? d->groups : 1; }
static int conv_khkwc(const fl_conv_desc *d) { return d->kh * d->kw * (d->c / conv_groups(d)); }

/* Same convolution geometry (the fused activation and bias do not matter to
 * cuDNN; compared field by field, not with memcmp, because of padding). */
static bool same_geom(const fl_conv_desc *a, const fl_conv_desc *b) {
    return a->n == b->n && a->h == b->h && a->w == b->w && a->c == b->c && a->oh == b->oh && a->ow == b->ow &&
           a->oc == b->oc && a->kh == b->kh && a->kw == b->kw && a->sh == b->sh && a->sw == b->sw && a->pt == b->pt &&
           a->pl == b->pl && conv_dil_h(a) == conv_dil_h(b) && conv_dil_w(a) == conv_dil_w(b) &&
           conv_groups(a) == conv_groups(b);
}

static void plan_destroy(conv_plan *p) {
    if (p->xd) cudnnDestroyTensorDescriptor(p->xd);
    if (p->yd) cudnnDestroyTensorDescriptor(p->yd);
    if (p->fd) cudnnDestroyFilterDescriptor(p->fd);
    for (int k = 0; k < 3; k++)
        if (p->cd[k]) cudnnDestroyConvolutionDescriptor(p->cd[k]);
    free(p);
}

/* The math type a search starts from: TF32 allowed ("high"), or FMA only
 * ("highest", full float32). */
static cudnnMathType_t base_math(int tf32) { return tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH; }

/* The plan for d: its descriptors; the algorithms come with conv_find. */
static conv_plan *plan_for(const fl_conv_desc *d) {
    for (conv_plan **pp = &g_plans; *pp; pp = &(*pp)->next) {
        conv_plan *p = *pp;
        if (same_geom(&p->d, d) && p->tf32 == g_tf32) {
            *pp = p->next; /* to the front: most recently used first */
            p->next = g_plans;
            g_plans = p;
            return p;
        }
    }
    conv_plan *p = (conv_plan *)calloc(1, sizeof *p);
    if (!p) { g_host->error(ST_NOMEM, "out of host memory for a cuDNN plan"); return NULL; }
    p->d = *d;
    p->tf32 = g_tf32;
    /* symmetric padding = the "before" padding; the rest becomes explicit
     * (the window's extent: (k - 1) * dilation + 1) */
    const int ekh = (d->kh - 1) * conv_dil_h(d) + 1, ekw = (d->kw - 1) * conv_dil_w(d) + 1;
    int th = (d->oh - 1) * d->sh + ekh - d->h, tw = (d->ow - 1) * d->sw + ekw - d->w;
    p->eh = th - 2 * d->pt > 0 ? th - 2 * d->pt : 0;
    p->ew = tw - 2 * d->pl > 0 ? tw - 2 * d->pl : 0;
    bool ok = CUDNN_OK(cudnnCreateTensorDescriptor(&p->xd)) && CUDNN_OK(cudnnCreateTensorDescriptor(&p->yd)) &&
              CUDNN_OK(cudnnCreateFilterDescriptor(&p->fd)) &&
              CUDNN_OK(cudnnSetTensor4dDescriptor(p->xd, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, (int)d->n, d->c,
                                                  d->h + p->eh, d->w + p->ew)) &&
              CUDNN_OK(cudnnSetTensor4dDescriptor(p->yd, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, (int)d->n, d->oc, d->oh, d->ow)) &&
              CUDNN_OK(cudnnSetFilter4dDescriptor(p->fd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, d->oc,
                                                  d->c / conv_groups(d), d->kh, d->kw));
    for (int k = 0; ok && k < 3; k++)
        ok = CUDNN_OK(cudnnCreateConvolutionDescriptor(&p->cd[k])) &&
             CUDNN_OK(cudnnSetConvolution2dDescriptor(p->cd[k], d->pt, d->pl, d->sh, d->sw, conv_dil_h(d),
                                                      conv_dil_w(d), CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT)) &&
             CUDNN_OK(cudnnSetConvolutionGroupCount(p->cd[k], conv_groups(d))) &&
             CUDNN_OK(cudnnSetConvolutionMathType(p->cd[k], base_math(g_tf32)));
    if (ok) {
        int on, oc_, oh, ow;
        ok = CUDNN_OK(cudnnGetConvolution2dForwardOutputDim(p->cd[CONV_FWD], p->xd, p->fd, &on, &oc_, &oh, &ow));
        if (ok && (oh != d->oh || ow != d->ow)) {
            g_host->error(ST_DEVICE, "cuDNN computes a %dx%d output where flynn expects %dx%d", oh, ow, d->oh, d->ow);
            ok = false;
        }
    }
    if (!ok) {
        plan_destroy(p);
        return NULL;
    }
    p->next = g_plans;
    g_plans = p;
    if (++g_nplans > MAX_PLANS) { /* drop the least recently used (never p, the first) */
        conv_plan **pp = &g_plans;
        while ((*pp)->next) pp = &(*pp)->next;
        plan_destroy(*pp);
        *pp = NULL;
        g_nplans--;
    }
    return p;
}

/* A search result flynn may use: it ran, and it computes in the precision
 * asked for. float32 data is never converted down to half; a "highest"
 * search runs with FMA math only, and the chosen algorithm keeps FMA. */
template <typename Perf> static bool perf_usable(const Perf &r, int tf32) {
    if (r.status != CUDNN_STATUS_SUCCESS || r.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) return false;
    return tf32 || r.mathType == CUDNN_FMA_MATH || r.mathType == CUDNN_DEFAULT_MATH;
}

/* The fastest usable result (cuDNN lists them fastest first) that is
 * deterministic, unless FLYNN_CUDNN_NONDETERMINISTIC is set. Where no
 * deterministic algorithm exists, the fastest one, with a one-line note, as
 * PyTorch's warn-only determinism does. -1: none. */
template <typename Perf> static int perf_pick(const Perf *r, int got, const conv_plan *p, int dir) {
    bool det = deterministic_only();
    for (int i = 0; i < got; i++)
        if (perf_usable(r[i], p->tf32) && (!det || r[i].determinism == CUDNN_DETERMINISTIC)) return i;
    for (int i = 0; det && i < got; i++)
        if (perf_usable(r[i], p->tf32)) {
            const fl_conv_desc *d = &p->d;
            fprintf(stderr,
                    "flynn: note: cuDNN has no deterministic %s algorithm for the convolution %lldx%dx%dx%d -> "
                    "%dx%dx%d (kernel %dx%d, strides %dx%d); using the fastest one (algorithm %d), whose results "
                    "may differ slightly from run to run\n",
                    conv_dir_name[dir], (long long)d->n, d->h, d->w, d->c, d->oh, d->ow, d->oc, d->kh, d->kw, d->sh,
                    d->sw, (int)r[i].algo);
            return i;
        }
    return -1;
}

/* Finds the algorithm of one direction once: cuDNN times the candidates;
 * the chosen one's math type goes onto that direction's descriptor, and its
 * workspace is asked for with that math type set. */
static bool conv_find(conv_plan *p, int dir) {
    if (p->found[dir]) return true;
    enum { NPERF = 16 }; /* more than any direction's algorithm count */
    cudnnConvolutionDescriptor_t cd = p->cd[dir];
    int got = 0, pick = -1;
    cudnnMathType_t math = base_math(p->tf32);
    bool ok = false;
    if (dir == CONV_FWD) {
        cudnnConvolutionFwdAlgoPerf_t r[NPERF];
        ok = CUDNN_OK(cudnnFindConvolutionForwardAlgorithm(g_cudnn, p->xd, p->fd, cd, p->yd, NPERF, &got, r));
        if (ok && (pick = perf_pick(r, got, p, dir)) >= 0) { p->algo[dir] = (int)r[pick].algo; math = r[pick].mathType; }
    } else if (dir == CONV_BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t r[NPERF];
        ok = CUDNN_OK(cudnnFindConvolutionBackwardDataAlgorithm(g_cudnn, p->fd, p->yd, cd, p->xd, NPERF, &got, r));
        if (ok && (pick = perf_pick(r, got, p, dir)) >= 0) { p->algo[dir] = (int)r[pick].algo; math = r[pick].mathType; }
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t r[NPERF];
        ok = CUDNN_OK(cudnnFindConvolutionBackwardFilterAlgorithm(g_cudnn, p->xd, p->yd, cd, p->fd, NPERF, &got, r));
        if (ok && (pick = perf_pick(r, got, p, dir)) >= 0) { p->algo[dir] = (int)r[pick].algo; math = r[pick].mathType; }
    }
    if (!ok) return false;
    if (pick < 0) {
        g_host->error(ST_DEVICE, "cuDNN found no %s algorithm for the convolution %lldx%dx%dx%d -> %dx%dx%d",
                      conv_dir_name[dir], (long long)p->d.n, p->d.h, p->d.w, p->d.c, p->d.oh, p->d.ow, p->d.oc);
        return false;
    }
    if (!p->tf32) math = CUDNN_FMA_MATH;
    size_t ws = 0;
    ok = CUDNN_OK(cudnnSetConvolutionMathType(cd, math));
    if (ok && dir == CONV_FWD)
        ok = CUDNN_OK(cudnnGetConvolutionForwardWorkspaceSize(g_cudnn, p->xd, p->fd, cd, p->yd,
                                                              (cudnnConvolutionFwdAlgo_t)p->algo[dir], &ws));
    else if (ok && dir == CONV_BWD_DATA)
        ok = CUDNN_OK(cudnnGetConvolutionBackwardDataWorkspaceSize(g_cudnn, p->fd, p->yd, cd, p->xd,
                                                                   (cudnnConvolutionBwdDataAlgo_t)p->algo[dir], &ws));
    else if (ok)
        ok = CUDNN_OK(cudnnGetConvolutionBackwardFilterWorkspaceSize(g_cudnn, p->xd, p->yd, cd, p->fd,
                                                                     (cudnnConvolutionBwdFilterAlgo_t)p->algo[dir], &ws));
    if (!ok) {
        cudnnSetConvolutionMathType(cd, base_math(p->tf32)); /* the next try searches as this one did */
        return false;
    }
    p->ws[dir] = ws;
    p->found[dir] = true;
    return true;
}

static void *conv_ws(size_t bytes) {
    if (bytes <= g_conv_ws_bytes) return g_conv_ws;
    cu_free_retire(g_conv_ws);
    g_conv_ws = cu_alloc(bytes);
    g_conv_ws_bytes = g_conv_ws ? bytes : 0;
    return g_conv_ws;
}

/* Scratch buffers for padded inputs and cuDNN-layout kernel gradients. */
static void *g_scratch[3]; /* 0: padded input, 1: kernel gradient, 2: padded input gradient */
static size_t g_scratch_bytes[3];
static void *scratch(int i, size_t bytes) {
    if (bytes <= g_scratch_bytes[i]) return g_scratch[i];
    cu_free_retire(g_scratch[i]);
    g_scratch[i] = cu_alloc(bytes);
    g_scratch_bytes[i] = g_scratch[i] ? bytes : 0;
    return g_scratch[i];
}

static size_t cu_conv_workspace(const fl_conv_desc *d, int backward) { return 0; /* kept by the backend */ }

static const float *padded_input(const conv_plan *p, const float *x) {
    if (!p->eh && !p->ew) return x;
    const fl_conv_desc *d = &p->d;
    int64_t total = d->n * (int64_t)(d->h + p->eh) * (d->w + p->ew) * d->c;
    float *xp = (float *)scratch(0, (size_t)total * sizeof(float));
    if (!xp) return NULL;
    k_pad_after<<<blocks_for(total, 256), 256, 0, g_stream>>>(total, d->h, d->w, d->c, p->eh, p->ew, x, xp);
    LAUNCHED();
    return xp;
}

static void cu_conv2d_fwd(const fl_conv_desc *d, const float *x, const float *w, const float *b, float *y, void *ws) {
    conv_plan *p = plan_for(d);
    if (!p || !conv_find(p, CONV_FWD)) return;
    int khkwc = conv_khkwc(d);
    size_t nw = (size_t)khkwc * d->oc;
    float *wk = ohwi_for(w, nw);
    const float *xin = padded_input(p, x);
    size_t wsb = p->ws[CONV_FWD];
    void *work = conv_ws(wsb);
    if (!wk || !xin || (wsb && !work)) return;
    k_hwio_to_ohwi<<<blocks_for((int64_t)nw, 256), 256, 0, g_stream>>>((int64_t)nw, khkwc, d->oc, w, wk);
    LAUNCHED();
    const float one = 1.0f, zero = 0.0f;
    CUDNN_OK(cudnnConvolutionForward(g_cudnn, &one, p->xd, xin, p->fd, wk, p->cd[CONV_FWD],
                                     (cudnnConvolutionFwdAlgo_t)p->algo[CONV_FWD], work, wsb, &zero, p->yd, y));
    bias_act(d->n * (int64_t)d->oh * d->ow, d->oc, d->has_bias ? b : NULL, d->act, y);
}

static void cu_conv2d_bwd(const fl_conv_desc *d, const float *x, const float *w, const float *y, float *dy, float *dx,
                          float dx_beta, float *dw, float *db, void *ws) {
    conv_plan *p = plan_for(d);
    if (!p || (dw && !conv_find(p, CONV_BWD_FILTER)) || (dx && !conv_find(p, CONV_BWD_DATA))) return;
    size_t wsb = 0;
    if (dw) wsb = p->ws[CONV_BWD_FILTER];
    if (dx && p->ws[CONV_BWD_DATA] > wsb) wsb = p->ws[CONV_BWD_DATA];
    size_t nw = (size_t)conv_khkwc(d) * d->oc;
    float *wk = ohwi_for(w, nw); /* written by this step's forward pass */
    float *dwk = dw ? (float *)scratch(1, nw * sizeof(float)) : NULL;
    const float *xin = dw ? padded_input(p, x) : x;
    void *work = conv_ws(wsb);
    if (!wk || (dw && (!dwk || !xin)) || (wsb && !work)) return;
    act_grad_bias(d->n * (int64_t)d->oh * d->ow, d->oc, d->act, y, dy, d->has_bias ? db : NULL);
    const float one = 1.0f, zero = 0.0f;
    if (dw) {
        CUDNN_OK(cudnnConvolutionBackwardFilter(g_cudnn, &one, p->xd, xin, p->yd, dy, p->cd[CONV_BWD_FILTER],
                                                (cudnnConvolutionBwdFilterAlgo_t)p->algo[CONV_BWD_FILTER], work, wsb,
                                                &zero, p->fd, dwk));
        k_ohwi_to_hwio<<<blocks_for((int64_t)nw, 256), 256, 0, g_stream>>>((int64_t)nw, conv_khkwc(d), d->oc, dwk, dw);
        LAUNCHED();
    }
    if (!dx) return;
    cudnnConvolutionBwdDataAlgo_t alg = (cudnnConvolutionBwdDataAlgo_t)p->algo[CONV_BWD_DATA];
    if (!p->eh && !p->ew) {
        CUDNN_OK(cudnnConvolutionBackwardData(g_cudnn, &one, p->fd, wk, p->yd, dy, p->cd[CONV_BWD_DATA], alg, work, wsb,
                                              &dx_beta, p->xd, dx));
        return;
    }
    /* padded: the gradient of the padded input, then its top-left part */
    float *dxp = (float *)scratch(2, (size_t)(d->n * (int64_t)(d->h + p->eh) * (d->w + p->ew) * d->c) * sizeof(float));
    if (!dxp) return;
    CUDNN_OK(cudnnConvolutionBackwardData(g_cudnn, &one, p->fd, wk, p->yd, dy, p->cd[CONV_BWD_DATA], alg, work, wsb,
                                          &zero, p->xd, dxp));
    int64_t total = d->n * (int64_t)d->h * d->w * d->c;
    k_crop_add<<<blocks_for(total, 256), 256, 0, g_stream>>>(total, d->h, d->w, d->c, p->eh, p->ew, dxp, dx, dx_beta);
    LAUNCHED();
}

/* ------------------------------------------ transposed convolution
 *
 * Conv2DTranspose is the data gradient of the Conv2D that d describes
 * (backend.h), so it runs on that Conv2D's plan with the roles swapped:
 * the transposed convolution's input x [n, oh, ow, oc] is in the place of
 * the Conv2D's output (p->yd), its output y [n, h, w, c] in the place of
 * the Conv2D's input (p->xd), and its kernel w[kh, kw, c, oc] is the
 * Conv2D's kernel (Keras's (kh, kw, filters, in) = (kh, kw, c, oc)). cuDNN's
 * NHWC filter descriptor (k = oc, c, kh, kw) is (oc, kh, kw, c) in memory
 * in every direction, so the same ohwi copy serves all three:
 *     forward          y  = BackwardData(w, x), cropped where the plan pads
 *                      after (asymmetric "same"), then act(y + b[c])
 *     backward data    dx = Forward(dy padded, w)          (d's forward)
 *     backward filter  dw = BackwardFilter(dy padded, x)
 * The kernel copy is written by the forward pass, as Conv2D's. */
static void cu_conv2d_transpose_fwd(const fl_conv_desc *d, const float *x, const float *w, const float *b, float *y,
                                    void *ws) {
    (void)ws;
    conv_plan *p = plan_for(d);
    if (!p || !conv_find(p, CONV_BWD_DATA)) return;
    size_t nw = (size_t)d->kh * d->kw * d->c * d->oc;
    float *wk = ohwi_for(w, nw);
    size_t wsb = p->ws[CONV_BWD_DATA];
    void *work = conv_ws(wsb);
    const bool padded = p->eh || p->ew;
    float *yp = padded ? (float *)scratch(2, (size_t)(d->n * (int64_t)(d->h + p->eh) * (d->w + p->ew) * d->c) *
                                                 sizeof(float))
                       : y;
    if (!wk || !yp || (wsb && !work)) return;
    int khkwc = d->kh * d->kw * d->c;
    k_hwio_to_ohwi<<<blocks_for((int64_t)nw, 256), 256, 0, g_stream>>>((int64_t)nw, khkwc, d->oc, w, wk);
    LAUNCHED();
    const float one = 1.0f, zero = 0.0f;
    CUDNN_OK(cudnnConvolutionBackwardData(g_cudnn, &one, p->fd, wk, p->yd, x, p->cd[CONV_BWD_DATA],
                                          (cudnnConvolutionBwdDataAlgo_t)p->algo[CONV_BWD_DATA], work, wsb, &zero,
                                          p->xd, yp));
    if (padded) {
        int64_t total = d->n * (int64_t)d->h * d->w * d->c;
        k_crop_add<<<blocks_for(total, 256), 256, 0, g_stream>>>(total, d->h, d->w, d->c, p->eh, p->ew, yp, y, 0.0f);
        LAUNCHED();
    }
    bias_act(d->n * (int64_t)d->h * d->w, d->c, d->has_bias ? b : NULL, d->act, y);
}

static void cu_conv2d_transpose_bwd(const fl_conv_desc *d, const float *x, const float *w, const float *y, float *dy,
                                    float *dx, float dx_beta, float *dw, float *db, void *ws) {
    (void)ws;
    conv_plan *p = plan_for(d);
    if (!p || (dw && !conv_find(p, CONV_BWD_FILTER)) || (dx && !conv_find(p, CONV_FWD))) return;
    size_t wsb = 0;
    if (dw) wsb = p->ws[CONV_BWD_FILTER];
    if (dx && p->ws[CONV_FWD] > wsb) wsb = p->ws[CONV_FWD];
    size_t nw = (size_t)d->kh * d->kw * d->c * d->oc;
    float *wk = dx ? ohwi_for(w, nw) : NULL; /* written by this step's forward pass */
    float *dwk = dw ? (float *)scratch(1, nw * sizeof(float)) : NULL;
    void *work = conv_ws(wsb);
    if ((dx && !wk) || (dw && !dwk) || (wsb && !work)) return;
    /* dy is the Conv2D's input here: act'(y) and the bias gradient over c */
    act_grad_bias(d->n * (int64_t)d->h * d->w, d->c, d->act, y, dy, d->has_bias ? db : NULL);
    if (!dw && !dx) return;
    const float *dyin = padded_input(p, dy); /* after act_grad_bias: the pad copies the final dy */
    if (!dyin) return;
    const float one = 1.0f, zero = 0.0f;
    if (dw) {
        CUDNN_OK(cudnnConvolutionBackwardFilter(g_cudnn, &one, p->xd, dyin, p->yd, x, p->cd[CONV_BWD_FILTER],
                                                (cudnnConvolutionBwdFilterAlgo_t)p->algo[CONV_BWD_FILTER], work, wsb,
                                                &zero, p->fd, dwk));
        int khkwc = d->kh * d->kw * d->c;
        k_ohwi_to_hwio<<<blocks_for((int64_t)nw, 256), 256, 0, g_stream>>>((int64_t)nw, khkwc, d->oc, dwk, dw);
        LAUNCHED();
    }
    if (dx)
        CUDNN_OK(cudnnConvolutionForward(g_cudnn, &one, p->xd, dyin, p->fd, wk, p->cd[CONV_FWD],
                                         (cudnnConvolutionFwdAlgo_t)p->algo[CONV_FWD], work, wsb, &dx_beta, p->yd, dx));
}

/* ---------------------------------------------- depthwise convolution */

/* cpu_depthwise.c's twins, as own kernels over NHWC data (no cuDNN: its
 * grouped convolutions want the kernel transposed and offer no
 * deterministic backward-filter algorithm for every shape). Shapes:
 * x [n, h, w, c], w [kh, kw, c, dm], b [c*dm], y [n, oh, ow, oc], oc = c*dm,
 *
 *     y[n, p, q, c*dm+m] = act(b[c*dm+m] + sum_{i,j} x[n, p*sh-pt+i*dh, q*sw-pl+j*dw, c] * w[i, j, c, m])
 *
 * (dh, dw: the dilation, d.dil_h/d.dil_w, 0 read as 1). Forward: one thread per output element, the output channel fastest, so
 * that a warp reads neighbouring channels of x and w; the window clamped to
 * the image and summed from the bias in the CPU's order (rows, then
 * columns). Backward: dy *= act'(y) and the bias gradient as Dense's
 * (act_grad_bias); dx as a gather, one thread per input element over the
 * taps whose output pixel it feeds (the CPU's bwd_row_body); dw as column
 * sums over the output pixels (colsum). No atomics: deterministic. */
/* The taps [*t0, *t1) of a k-tap window starting at o0, taps dil apart,
 * that land inside [0, n) (cpu_depthwise.c's tap_range). */
__device__ __forceinline__ void dw_tap_range(int o0, int k, int dil, int n, int *t0, int *t1) {
    *t0 = o0 < 0 ? (-o0 + dil - 1) / dil : 0;
    *t1 = o0 > n - 1 ? 0 : min(k, (n - 1 - o0) / dil + 1);
    if (*t1 < *t0) *t1 = *t0;
}

__global__ void k_depthwise_fwd(fl_conv_desc d, const float *x, const float *w, const float *b, float *y) {
    const int OC = d.oc, dm = d.oc / d.c;
    const int dh = d.dil_h > 1 ? d.dil_h : 1, dw = d.dil_w > 1 ? d.dil_w : 1;
    const int64_t total = d.n * (int64_t)d.oh * d.ow * OC;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = e;
        const int o = (int)(t % OC); t /= OC;
        const int q = (int)(t % d.ow); t /= d.ow;
        const int p = (int)(t % d.oh);
        const int64_t n = t / d.oh;
        const int c = o / dm;
        const int ih0 = p * d.sh - d.pt, iw0 = q * d.sw - d.pl;
        int i0, i1, j0, j1;
        dw_tap_range(ih0, d.kh, dh, d.h, &i0, &i1);
        dw_tap_range(iw0, d.kw, dw, d.w, &j0, &j1);
        const float *xn = x + n * d.h * d.w * d.c;
        float acc = b ? b[o] : 0.0f;
        for (int i = i0; i < i1; i++)
            for (int j = j0; j < j1; j++)
                acc += xn[((int64_t)(ih0 + i * dh) * d.w + (iw0 + j * dw)) * d.c + c] *
                       w[(int64_t)(i * d.kw + j) * OC + o];
        y[e] = fl_act_forward(d.act, acc);
    }
}

/* dx[n, row, col, c] (beta: +)= sum over the taps (i, j) whose output pixel
 * (p, q) it feeds (p*sh - pt + i*dh = row, q*sw - pl + j*dw = col) of
 * sum_m dy[n, p, q, c*dm+m] * w[i, j, c, m]; taps in the CPU's order. */
__global__ void k_depthwise_bwd_dx(fl_conv_desc d, const float *w, const float *dy, float *dx, float beta) {
    const int C = d.c, OC = d.oc, dm = d.oc / d.c;
    const int dh = d.dil_h > 1 ? d.dil_h : 1, dw = d.dil_w > 1 ? d.dil_w : 1;
    const int64_t total = d.n * (int64_t)d.h * d.w * C;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = e;
        const int c = (int)(t % C); t /= C;
        const int col = (int)(t % d.w); t /= d.w;
        const int row = (int)(t % d.h);
        const int64_t n = t / d.h;
        const float *dyn = dy + n * d.oh * d.ow * OC;
        float g = beta == 0.0f ? 0.0f : dx[e];
        for (int i = 0; i < d.kh; i++) {
            const int th = row + d.pt - i * dh; /* = p * sh */
            if (th < 0) break;
            const int p = th / d.sh;
            if (th != p * d.sh || p >= d.oh) continue;
            for (int j = 0; j < d.kw; j++) {
                const int tw = col + d.pl - j * dw; /* = q * sw */
                if (tw < 0) break;
                const int q = tw / d.sw;
                if (tw != q * d.sw || q >= d.ow) continue;
                const float *gp = dyn + ((int64_t)p * d.ow + q) * OC + (int64_t)c * dm;
                const float *wp = w + (int64_t)(i * d.kw + j) * OC + (int64_t)c * dm;
                if (dm == 1) {
                    g += gp[0] * wp[0];
                } else {
                    float s = 0.0f;
                    for (int m = 0; m < dm; m++) s += gp[m] * wp[m];
                    g += s;
                }
            }
        }
        dx[e] = g;
    }
}

/* dw[i, j, o] = sum over the output pixels r = (n, p, q) whose tap (i, j)
 * lies inside x of dy[r, o] * x[n, p*sh-pt+i*dh, q*sw-pl+j*dw, o/dm]: column
 * tap*oc + o of a [n*oh*ow, kh*kw*oc] matrix (neighbouring threads:
 * neighbouring channels). */
struct f_depthwise_dw {
    const float *x, *dy;
    fl_conv_desc d;
    __device__ float operator()(int64_t r, int col) const {
        const int OC = d.oc;
        const int o = col % OC, tap = col / OC, i = tap / d.kw, j = tap - i * d.kw;
        int64_t t = r;
        const int q = (int)(t % d.ow); t /= d.ow;
        const int p = (int)(t % d.oh);
        const int64_t n = t / d.oh;
        const int ih = p * d.sh - d.pt + i * (d.dil_h > 1 ? d.dil_h : 1),
                  iw = q * d.sw - d.pl + j * (d.dil_w > 1 ? d.dil_w : 1);
        if (ih < 0 || ih >= d.h || iw < 0 || iw >= d.w) return 0.0f;
        return dy[r * OC + o] * x[((n * d.h + ih) * d.w + iw) * d.c + o / (OC / d.c)];
    }
};

static void cu_depthwise_fwd(const fl_conv_desc *d, const float *x, const float *w, const float *b, float *y) {
    const int64_t total = d->n * (int64_t)d->oh * d->ow * d->oc;
    k_depthwise_fwd<<<blocks_for(total, 256), 256, 0, g_stream>>>(*d, x, w, b, y);
    LAUNCHED();
}

/* dy *= act'(y) and db first (both read by what follows), then dx and dw;
 * dx (beta), dw and db (overwritten) may each be NULL. */
static void cu_depthwise_bwd(const fl_conv_desc *d, const float *x, const float *w, const float *y, float *dy,
                             float *dx, float dx_beta, float *dw, float *db) {
    const int64_t orows = d->n * (int64_t)d->oh * d->ow;
    act_grad_bias(orows, d->oc, d->act, y, dy, db);
    if (dx) {
        const int64_t total = d->n * (int64_t)d->h * d->w * d->c;
        k_depthwise_bwd_dx<<<blocks_for(total, 256), 256, 0, g_stream>>>(*d, w, dy, dx, dx_beta);
        LAUNCHED();
    }
    if (dw) colsum(orows, d->kh * d->kw * d->oc, f_depthwise_dw{x, dy, *d}, dw);
}

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

/* --------------------------------------------------------- merge layers */

static void cu_mul(int64_t n, const float *a, const float *b, float *dst) {
    k_mul<<<blocks_for(n, 256), 256, 0, g_stream>>>(n, a, b, dst);
    LAUNCHED();
}
static void cu_concat_fwd(int64_t rows, int64_t cin, int64_t cout, int64_t off, const float *x, float *y) {
    k_concat_fwd<<<blocks_for(rows * cin, 256), 256, 0, g_stream>>>(rows, cin, cout, off, x, y);
    LAUNCHED();
}
static void cu_concat_bwd(int64_t rows, int64_t cin, int64_t cout, int64_t off, const float *dy, float *dx, float beta) {
    k_concat_bwd<<<blocks_for(rows * cin, 256), 256, 0, g_stream>>>(rows, cin, cout, off, dy, dx, beta);
    LAUNCHED();
}

/* Subtract, Maximum, Minimum, Add (and Add with the ReLU after it); Average's scaling; max/min gradients
 * (the cpu_merge.c twins) */
static void cu_fill(int64_t n, float v, float *y) {
    k_fill<<<blocks_for(n, 256), 256, 0, g_stream>>>(n, v, y);
    LAUNCHED();
}
static void cu_binary(int mode, int64_t n, const float *a, const float *b, float *y) {
    k_binary<<<blocks_for(n, 256), 256, 0, g_stream>>>(mode, n, a, b, y);
    LAUNCHED();
}
static void cu_axpby(int64_t n, float alpha, const float *x, float beta, float *y) {
    k_axpby<<<blocks_for(n, 256), 256, 0, g_stream>>>(n, alpha, x, beta, y);
    LAUNCHED();
}
static void cu_minmax_grad(int is_max, int64_t n, const float *x, const float *other, const float *dy, float *dx,
                           float beta) {
    k_minmax_grad<<<blocks_for(n, 256), 256, 0, g_stream>>>(is_max, n, x, other, dy, dx, beta);
    LAUNCHED();
}

/* Add/Multiply with broadcasting (kernels/merge.cl) */
static void cu_bmerge_fwd(int mode, const fl_bcast_desc *d, const float *x, const float *b, float *y) {
    k_bmerge_fwd<<<blocks_for(d->n * d->size, 256), 256, 0, g_stream>>>(mode, *d, x, b, y);
    LAUNCHED();
}
static void cu_bmerge_bwd(int mode, const fl_bcast_desc *d, const float *x, const float *b, const float *dy, float *dx,
                          float beta_x, float *db, float beta_b) {
    k_bmerge_bwd<<<blocks_for(d->n * d->psize, 128), 128, 0, g_stream>>>(mode, *d, x, b, dy, dx, beta_x, db, beta_b);
    LAUNCHED();
}

/* zero padding / cropping (fl_cpu_pad2d's twin): one thread per output
 * element, y (beta: +)= x at (i - pt, j - pl) inside x, else 0 */
__global__ void k_pad2d(fl_conv_desc d, const float *x, float *y, float beta) {
    const int64_t total = d.n * d.oh * d.ow * (int64_t)d.c;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t c = e % d.c, r = e / d.c;
        int j = (int)(r % d.ow);
        r /= d.ow;
        int i = (int)(r % d.oh);
        int64_t n = r / d.oh;
        int si = i - d.pt, sj = j - d.pl;
        float v = si >= 0 && si < d.h && sj >= 0 && sj < d.w ? x[((n * d.h + si) * d.w + sj) * d.c + c] : 0.0f;
        y[e] = beta == 0.0f ? v : y[e] + v;
    }
}
static void cu_pad2d(const fl_conv_desc *d, const float *x, float *y, float beta) {
    k_pad2d<<<blocks_for(d->n * d->oh * d->ow * (int64_t)d->c, 256), 256, 0, g_stream>>>(*d, x, y, beta);
    LAUNCHED();
}


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
/* ------------------------------------------------- losses, metrics, sums */

static void cu_accumulate(int64_t n, const float *src, float *dst, float beta) {
    k_accumulate<<<blocks_for(n, 256), 256, 0, g_stream>>>(n, src, dst, beta);
    LAUNCHED();
}


static void cu_loss(const fl_loss_desc *d, const float *pred, const float *target, float *row_loss, float *grad) {
    k_loss<<<row_blocks(d->rows), 32 * ROW_WARPS, 0, g_stream>>>(*d, pred, target, row_loss, grad);
    LAUNCHED();
}

/* the metrics and the loss's sum (kernels/loss.cl) */
static void cu_metric(int code, int64_t rows, int c, const float *pred, const float *target, float *score) {
    k_metric<<<row_blocks(rows), 32 * ROW_WARPS, 0, g_stream>>>(code, rows, c, pred, target, score);
    LAUNCHED();
}

static void cu_sum_into(int64_t n, const float *x, double scale, double *acc) {
    k_sum_into<<<1, 256, 0, g_stream>>>(n, x, scale, acc);
    LAUNCHED();
}

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

/* ------------------------------------------------------------ optimizer */

/* start: the tensor's first element in the concatenation; cstart: its first SUMSQ_CHUNK-element chunk */
typedef struct dev_param { float *w, *g, *s0, *s1, *s2; int64_t n, start, cstart; } dev_param;
static dev_param *g_dparams;       /* device copy of the parameter table */
static dev_param *g_dparams_host;  /* what was uploaded */
static int g_dparams_n;
static int64_t g_dparams_total;
static float *g_clip_ss;           /* clipnorm/global_clipnorm: per-tensor sums of squares */
static int g_clip_ss_n;
static double *g_clip_part;        /* their chunks' partial sums (k_grad_sumsq_partial) */
static int64_t g_clip_part_n, g_dparams_chunks;

/* The last tensor whose first element (chunks: its first chunk) is at most v. */
__device__ static int last_starting_by(const dev_param *ps, int np, int64_t v, bool chunks) {
    int lo = 0, hi = np - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if ((chunks ? ps[mid].cstart : ps[mid].start) <= v) lo = mid; else hi = mid - 1;
    }
    return lo;
}
/* The tensor of element e. */
__device__ static int param_of(const dev_param *ps, int np, int64_t e) { return last_starting_by(ps, np, e, false); }

/* The twin of cpu_clip_gradients: sums of squares per tensor into ss[np], in a fixed order (docs/gpu.md: no
 * atomics where determinism is promised; float atomicAdd made clip_parity at 1e-5 a coin toss on a
 * 70,000-element tensor, issue 44). Each tensor is cut into chunks of SUMSQ_CHUNK elements; a block sums one
 * chunk, each thread a fixed stride of it in double, then a tree in shared memory, into partial[chunk]; then a
 * thread per tensor adds its chunks in order. The same bits on every run, and within double rounding of the
 * exact sums (the CPU's float sums differ by float rounding). */
#define SUMSQ_CHUNK 4096
#define SUMSQ_THREADS 256

__global__ void k_grad_sumsq_partial(const dev_param *ps, int np, double *partial) {
    __shared__ double red[SUMSQ_THREADS];
    const int64_t c = blockIdx.x;
    const dev_param p = ps[last_starting_by(ps, np, c, true)];
    const int64_t i0 = (c - p.cstart) * SUMSQ_CHUNK, i1 = i0 + SUMSQ_CHUNK < p.n ? i0 + SUMSQ_CHUNK : p.n;
    double acc = 0.0;
    for (int64_t i = i0 + threadIdx.x; i < i1; i += SUMSQ_THREADS) {
        const double g = p.g[i];
        acc += g * g;
    }
    red[threadIdx.x] = acc;
    __syncthreads();
    for (int h = SUMSQ_THREADS / 2; h > 0; h /= 2) {
        if (threadIdx.x < h) red[threadIdx.x] += red[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[c] = red[0];
}

__global__ void k_grad_sumsq_final(const dev_param *ps, int np, const double *partial, float *ss) {
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= np) return;
    const int64_t nc = (ps[k].n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
    double t = 0.0;
    for (int64_t c = 0; c < nc; c++) t += partial[ps[k].cstart + c];
    ss[k] = (float)t;
}

__global__ void k_clip_grads(int mode, float clip, const dev_param *ps, int np, int64_t total, const float *ss) {
    __shared__ float total_ss;
    if (mode == FL_CLIP_GLOBAL_NORM) {
        if (threadIdx.x == 0) {
            float t = 0.0f;
            for (int k = 0; k < np; k++) t += ss[k];
            total_ss = t;
        }
        __syncthreads();
    }
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int k = param_of(ps, np, e);
        float *g = ps[k].g + (e - ps[k].start);
        float sum = mode == FL_CLIP_NORM ? ss[k] : mode == FL_CLIP_GLOBAL_NORM ? total_ss : 0.0f;
        *g = fl_clip_grad(mode, clip, sum, *g);
    }
}

/* One launch for all parameters: each element finds its tensor.
 * ostep: NULL in eager mode (lr and lr_t given); in a captured step, the
 * count of steps done before it is read from the device (g_dsteps[0], set
 * before each replay), the learning rate too (*dlr, g_dlr, set before each
 * replay by cu_graph_set_learning_rate), and lr_t is computed here for step
 * *ostep + 1. */
__global__ void k_optimizer(fl_opt_desc d, float lr_t, const int64_t *ostep, const float *dlr, const dev_param *ps,
                            int np, int64_t total) {
    __shared__ float lr_shared[2];
    if (ostep) {
        if (threadIdx.x == 0) {
            float lr = *dlr;
            lr_shared[0] = lr;
            lr_shared[1] = (d.code == FL_OPT_ADAM || d.code == FL_OPT_ADAMW)
                               ? fl_adam_lr_t(lr, d.beta1, d.beta2, *ostep + 1) : lr;
        }
        __syncthreads();
        d.lr = lr_shared[0];
        lr_t = lr_shared[1];
    }
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const dev_param p = ps[param_of(ps, np, e)];
        int64_t i = e - p.start;
        float *w = p.w + i;
        float g = p.g[i];
        switch (d.code) {
        case FL_OPT_SGD: fl_sgd_update(w, p.s0 ? p.s0 + i : NULL, g, d.lr, d.momentum, d.nesterov); break;
        case FL_OPT_ADAMW: *w -= *w * d.weight_decay * d.lr; /* fall through */
        case FL_OPT_ADAM: fl_adam_update(w, p.s0 + i, p.s1 + i, g, lr_t, d.beta1, d.beta2, d.eps); break;
        case FL_OPT_RMSPROP:
            fl_rmsprop_update(w, p.s0 + i, p.s1 ? p.s1 + i : NULL, p.s2 ? p.s2 + i : NULL, g, d.lr, d.rho, d.momentum,
                              d.eps, d.centered);
            break;
        }
    }
}

static void cu_optimizer_step(const fl_opt_desc *d, const fl_param_ref *ps, int np) {
    if (np <= 0) return;
    /* the table changes only when the optimizer is (re)bound: compare, upload if new */
    dev_param *h = (dev_param *)calloc((size_t)np, sizeof *h);
    if (!h) { g_host->error(ST_NOMEM, "out of host memory for the optimizer table"); return; }
    int64_t start = 0, chunks = 0;
    for (int k = 0; k < np; k++) {
        h[k] = dev_param{ps[k].w, ps[k].g, ps[k].s0, ps[k].s1, ps[k].s2, ps[k].n, start, chunks};
        start += ps[k].n;
        chunks += (ps[k].n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
    }
    if (!g_dparams || g_dparams_n != np || memcmp(h, g_dparams_host, (size_t)np * sizeof *h) != 0) {
        cu_free_retire(g_dparams);
        free(g_dparams_host);
        g_dparams_host = NULL;
        g_dparams = (dev_param *)cu_alloc((size_t)np * sizeof *h);
        if (!g_dparams) { free(h); return; }
        CUDA_OK(cudaMemcpyAsync(g_dparams, h, (size_t)np * sizeof *h, cudaMemcpyHostToDevice, g_stream));
        CUDA_OK(cudaStreamSynchronize(g_stream)); /* h is freed below */
        g_dparams_host = h;
        g_dparams_n = np;
        g_dparams_total = start;
        g_dparams_chunks = chunks;
    } else {
        free(h);
    }
    if (d->clip_mode != FL_CLIP_NONE) {
        if (d->clip_mode != FL_CLIP_VALUE) {
            if (g_clip_ss_n < np) { /* grown outside a capture: the table is uploaded eagerly first */
                cu_free_retire(g_clip_ss);
                g_clip_ss = (float *)cu_alloc((size_t)np * sizeof(float));
                if (!g_clip_ss) { g_clip_ss_n = 0; return; }
                g_clip_ss_n = np;
            }
            if (g_clip_part_n < g_dparams_chunks) { /* (as g_clip_ss: grown eagerly, before a capture) */
                cu_free_retire(g_clip_part);
                g_clip_part = (double *)cu_alloc((size_t)g_dparams_chunks * sizeof(double));
                if (!g_clip_part) { g_clip_part_n = 0; return; }
                g_clip_part_n = g_dparams_chunks;
            }
            if (g_dparams_chunks > 0) {
                k_grad_sumsq_partial<<<(unsigned)g_dparams_chunks, SUMSQ_THREADS, 0, g_stream>>>(g_dparams, np,
                                                                                                  g_clip_part);
                if (!LAUNCHED()) return;
            }
            k_grad_sumsq_final<<<(np + 255) / 256, 256, 0, g_stream>>>(g_dparams, np, g_clip_part, g_clip_ss);
            if (!LAUNCHED()) return;
        }
        k_clip_grads<<<blocks_for(g_dparams_total, 256), 256, 0, g_stream>>>(d->clip_mode, d->clip, g_dparams, np,
                                                                             g_dparams_total, g_clip_ss);
        if (!LAUNCHED()) return;
    }
    float lr_t = d->lr;
    if (d->code == FL_OPT_ADAM || d->code == FL_OPT_ADAMW) lr_t = fl_adam_lr_t(d->lr, d->beta1, d->beta2, d->step);
    if (g_capturing) {
        k_optimizer<<<blocks_for(g_dparams_total, 256), 256, 0, g_stream>>>(*d, lr_t, g_dsteps, g_dlr, g_dparams, np,
                                                                            g_dparams_total);
    } else {
        k_optimizer<<<blocks_for(g_dparams_total, 256), 256, 0, g_stream>>>(*d, lr_t, NULL, NULL, g_dparams, np,
                                                                            g_dparams_total);
    }
    LAUNCHED();
}

/* --------------------------------------------------------- CUDA graphs */

/* A training step captured on the stream and replayed (train.c decides
 * when). What the captured kernels must not freeze, they read from
 * g_dsteps (see its comment): the optimizer step (k_optimizer) and the
 * dropout step (k_dropout_fwd). Buffers replaced while a graph is alive wait
 * in the retired list (cu_free_retire). */
static int g_sticky_before;

__global__ void k_set_steps(int64_t *d, int64_t opt_step, int64_t graph_step) {
    d[0] = opt_step;
    d[1] = graph_step;
}

static int cu_graph_begin(int64_t opt_step, int64_t graph_step) {
    const char *e = getenv("FLYNN_CUDA_GRAPHS");
    if (e && strcmp(e, "0") == 0) return 1;
    if (!g_dsteps && !(g_dsteps = (int64_t *)cu_alloc(2 * sizeof(int64_t)))) return 1;
    if (!g_dlr && !(g_dlr = (float *)cu_alloc(sizeof(float)))) return 1;
    g_sticky_before = g_sticky;
    g_cap_gstep = graph_step;
    if (cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
        cudaGetLastError();
        return 1;
    }
    g_capturing = 1;
    return 0;
}

static void *cu_graph_end(void) {
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(g_stream, &graph);
    g_capturing = 0;
    cudaGraphExec_t exec = NULL;
    if (e == cudaSuccess && graph && g_sticky == g_sticky_before) e = cudaGraphInstantiate(&exec, graph, 0);
    else if (e == cudaSuccess) e = cudaErrorStreamCaptureInvalidated;
    if (graph) cudaGraphDestroy(graph);
    if (e != cudaSuccess || !exec) {
        /* capture is an optimisation: forget its errors (the sticky one and
         * the thread's message), run eagerly */
        cudaGetLastError();
        g_sticky = g_sticky_before;
        g_host->error(0, "%s", "");
        release_retired();
        return NULL;
    }
    g_graphs_live++;
    return (void *)exec;
}

/* The counters of the step being replayed go to the device first, in stream
 * order (kernel parameters: nothing on the host has to outlive the call). */
/* The learning rate of the next replay, in stream order as the counters
 * (a kernel parameter: nothing on the host must outlive the call). */
__global__ void k_set_lr(float *d, float lr) { *d = lr; }

static void cu_graph_set_learning_rate(float lr) {
    if (!g_dlr && !(g_dlr = (float *)cu_alloc(sizeof(float)))) return;
    k_set_lr<<<1, 1, 0, g_stream>>>(g_dlr, lr);
    LAUNCHED();
}

/* Data-parallel training: a second stream for the gradients' all-reduces
 * (NCCL), ordered against the compute stream by events, so that a bucket's
 * reduction runs while backward goes on (as PyTorch DDP's comm stream). */
static cudaStream_t g_comm;
static cudaEvent_t g_comm_fork, g_comm_join;

static void *cu_comm_stream_fork(void) {
    if (!g_comm && !(CUDA_OK(cudaStreamCreateWithFlags(&g_comm, cudaStreamNonBlocking)) &&
                     CUDA_OK(cudaEventCreateWithFlags(&g_comm_fork, cudaEventDisableTiming)) &&
                     CUDA_OK(cudaEventCreateWithFlags(&g_comm_join, cudaEventDisableTiming))))
        return (void *)g_stream; /* the error is reported; the compute stream keeps everything in order */
    if (!CUDA_OK(cudaEventRecord(g_comm_fork, g_stream)) || !CUDA_OK(cudaStreamWaitEvent(g_comm, g_comm_fork, 0)))
        return (void *)g_stream;
    return (void *)g_comm;
}

static void cu_comm_stream_join(void) {
    if (!g_comm) return;
    if (CUDA_OK(cudaEventRecord(g_comm_join, g_comm))) (void)CUDA_OK(cudaStreamWaitEvent(g_stream, g_comm_join, 0));
}

static int cu_graph_launch(void *graph, int64_t opt_step, int64_t graph_step) {
    k_set_steps<<<1, 1, 0, g_stream>>>(g_dsteps, opt_step, graph_step);
    if (!LAUNCHED()) return 1;
    return CUDA_OK(cudaGraphLaunch((cudaGraphExec_t)graph, g_stream)) ? 0 : 1;
}

static void cu_graph_free(void *graph) {
    if (!graph) return;
    cudaGraphExecDestroy((cudaGraphExec_t)graph);
    if (g_graphs_live > 0) g_graphs_live--;
    release_retired();
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

/* ----------------------------------------------------------- the table */

static fl_backend g_backend;

/* ------------------------------------------------------ recurrent layers */
/* SimpleRNN, LSTM, GRU: the CPU's orchestration (backend/cpu/cpu_rnn.c,
 * whose aux layout this shares) with cuBLAS for the projections and one
 * kernel per step for the gates (ops/rnn_math.h, the CPU's formulas). */

/* row-major C[M, N] (beta: +)= op(A) op(B)  ==  column-major C^T = op(B)^T op(A)^T */
static void rnn_gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                     int64_t ldb, float beta, float *C, int64_t ldc) {
    if (M == 0 || N == 0) return;
    const float one = 1.0f;
    CUBLAS_OK(cublasSgemm(g_cublas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M,
                          (int)K, &one, B, (int)ldb, A, (int)lda, &beta, C, (int)ldc));
}

typedef fl_rnn_bufs rnn_bufs; /* the layout: ops/rnn_math.h */
#define rnn_split fl_rnn_split

/* rows b < n of u floats at p + b * stride set to src[b, :] (n, u), or 0 when src is NULL (the initial state) */
__global__ void k_rnn_init_rows(int64_t n, int u, int64_t stride, const float *src, float *p) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n * u; e += (int64_t)gridDim.x * blockDim.x)
        p[(e / u) * stride + e % u] = src ? src[e] : 0.0f;
}

/* Dropout (fl_rnn_states.hdrop, xdrop; cpu_rnn.c's rec_proj_masked,
 * rec_grad_masked and mask_steps). out[b, c] = src[b*ss + c mod k] * m[b,
 * c] for c < cols: one step's state (or its gradient's rows) per gate. */
__global__ void k_rnn_mask_rows(int64_t n, int k, int cols, const float *src, int64_t ss, const float *m, int64_t ldm,
                                float *out, int64_t ldo) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n * cols; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t b = e / cols;
        const int c = (int)(e % cols);
        out[b * ldo + c] = src[b * ss + c % k] * m[b * ldm + c];
    }
}
/* p[b*ps + j] *= m[b*ldm + j], j < u */
__global__ void k_rnn_scale_rows(int64_t n, int u, float *p, int64_t ps, const float *m, int64_t ldm) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n * u; e += (int64_t)gridDim.x * blockDim.x)
        p[(e / u) * ps + e % u] *= m[(e / u) * ldm + e % u];
}
/* dh[b, j] += sum over g < ng of p[b, g*u + j] * m[b, g*u + j] (rows ldp, ldm apart) */
__global__ void k_rnn_mask_sum(int64_t n, int u, int ng, const float *p, int64_t ldp, const float *m, int64_t ldm,
                               float *dh) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n * u; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t b = e / u;
        const int j = (int)(e % u);
        float s = dh[e];
        for (int g = 0; g < ng; g++) s += p[b * ldp + g * u + j] * m[b * ldm + g * u + j];
        dh[e] = s;
    }
}
/* every step's rows (sample i / T): xs[i, j] = src[i, j] * m[i / T, j], or
 * with acc: xs[i, j] = beta xs[i, j] (beta 0: nothing) + src[i, j] * m[i / T, j] */
__global__ void k_rnn_mask_steps(int64_t rows, int64_t T, int k, const float *src, const float *m, int64_t ldm,
                                 int acc, float beta, float *xs) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < rows * k; e += (int64_t)gridDim.x * blockDim.x) {
        const float v = src[e] * m[(e / k / T) * ldm + e % k];
        xs[e] = acc && beta != 0.0f ? beta * xs[e] + v : v;
    }
}

/* one step's gates, unit (b, j) per thread (cpu_rnn.c's row loop) */
__global__ void k_rnn_fwd_step(fl_rnn_desc d, int phase, int64_t tin, int64_t tnext, int64_t k, int last,
                               rnn_bufs B, const float *bi, const float *br, const float *mask, float *y, float *hT,
                               float *cT) {
    const int64_t T = d.t, u = d.u, gu = (int64_t)(d.cell == FL_RNN_LSTM ? 4 : d.cell == FL_RNN_GRU ? 3 : 1) * u;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < d.n * u; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t b = e / u;
        const int j = (int)(e % u);
        const int64_t row = b * T + tin;
        float m = mask ? mask[row] : 1.0f, hv, cv;
        fl_rnn_fwd_unit(&d, phase, j, B.A + row * gu, B.RG + b * gu, bi, br, B.HP[row * u + j], B.CP[row * u + j], m,
                        B.RH + row * u + j, &hv, &cv);
        if (phase == FL_RNN_PHASE_ZR) continue;
        if (!last) {
            B.HP[(b * T + tnext) * u + j] = hv;
            B.CP[(b * T + tnext) * u + j] = cv;
        } else { /* the final state (return_state) */
            if (hT) hT[e] = hv;
            if (cT) cT[e] = cv;
        }
        float *yo = d.return_sequences ? y + (b * T + (d.reverse_output ? T - 1 - k : k)) * u : last ? y + b * u : NULL;
        if (yo) yo[j] = d.zero_masked && !(m > 0.5f) ? 0.0f : hv;
    }
}

static void cu_rnn_fwd(const fl_rnn_desc *d, const float *x, const float *w, const float *r, const float *bias,
                       const float *mask, const fl_rnn_states *st, float *y, float *aux) {
    const int64_t n = d->n, T = d->t, u = d->u, gu = (int64_t)fl_rnn_gates(d) * u;
    const int two_phase = d->cell == FL_RNN_GRU && !d->reset_after;
    float *hT = st ? st->hT : NULL, *cT = st ? st->cT : NULL;
    const float *bi = d->has_bias ? bias : NULL;
    const float *br = d->has_bias && d->cell == FL_RNN_GRU && d->reset_after ? bias + gu : NULL;
    rnn_bufs B = rnn_split(d, aux);
    const float *hd = st ? st->hdrop : NULL, *xd = st ? st->xdrop : NULL;
    const int G = fl_rnn_gates(d), ngr = two_phase ? 2 : G;
    if (xd) /* input dropout: (x xdrop_g) W_g per gate */
        for (int g = 0; g < G; g++) {
            k_rnn_mask_steps<<<blocks_for(n * T * d->d, 256), 256, 0, g_stream>>>(n * T, T, d->d, x, xd + g * d->d,
                                                                                  (int64_t)G * d->d, 0, 0.0f, B.XS);
            LAUNCHED();
            rnn_gemm(0, 0, n * T, u, d->d, B.XS, d->d, w + g * u, gu, 0.0f, B.A + g * u, gu);
        }
    else
        rnn_gemm(0, 0, n * T, gu, d->d, x, d->d, w, gu, 0.0f, B.A, gu);
    const int nb = blocks_for(n * u, 256);
    for (int64_t k = 0; k < T; k++) {
        const int64_t tin = d->go_backwards ? T - 1 - k : k, tnext = d->go_backwards ? tin - 1 : tin + 1;
        const int last = k == T - 1;
        if (k == 0) {
            k_rnn_init_rows<<<nb, 256, 0, g_stream>>>(n, (int)u, T * u, st ? st->h0 : NULL, B.HP + tin * u);
            k_rnn_init_rows<<<nb, 256, 0, g_stream>>>(n, (int)u, T * u, st ? st->c0 : NULL, B.CP + tin * u);
            LAUNCHED();
        }
        if (hd) { /* recurrent dropout: (h' hdrop_g) R_g per gate */
            k_rnn_mask_rows<<<blocks_for(n * ngr * u, 256), 256, 0, g_stream>>>(n, (int)u, (int)(ngr * u), B.HP + tin * u,
                                                                                T * u, hd, gu, B.HM, gu);
            LAUNCHED();
            for (int g = 0; g < ngr; g++) rnn_gemm(0, 0, n, u, u, B.HM + g * u, gu, r + g * u, gu, 0.0f, B.RG + g * u, gu);
        } else {
            rnn_gemm(0, 0, n, two_phase ? 2 * u : gu, u, B.HP + tin * u, T * u, r, gu, 0.0f, B.RG, gu);
        }
        if (two_phase) {
            k_rnn_fwd_step<<<nb, 256, 0, g_stream>>>(*d, FL_RNN_PHASE_ZR, tin, tnext, k, last, B, bi, br, mask, y, hT,
                                                     cT);
            LAUNCHED();
            if (hd) { /* the candidate reads r h' hdrop_h */
                k_rnn_scale_rows<<<nb, 256, 0, g_stream>>>(n, (int)u, B.RH + tin * u, T * u, hd + 2 * u, gu);
                LAUNCHED();
            }
            rnn_gemm(0, 0, n, u, u, B.RH + tin * u, T * u, r + 2 * u, gu, 0.0f, B.RG + 2 * u, gu);
        }
        k_rnn_fwd_step<<<nb, 256, 0, g_stream>>>(*d, two_phase ? FL_RNN_PHASE_H : FL_RNN_PHASE_ALL, tin, tnext, k,
                                                 last, B, bi, br, mask, y, hT, cT);
        LAUNCHED();
    }
}

/* dh (n, u) = the gradient of the last output (zero_masked: 0 where it
 * was masked) + the final state's dhT; dc = dcT (NULL: zeros) */
__global__ void k_rnn_bwd_init(fl_rnn_desc d, const float *mask, const float *dy, const float *dhT, const float *dcT,
                               float *dh, float *dc) {
    const int64_t T = d.t, u = d.u;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < d.n * u; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t b = e / u, row = b * T + (d.go_backwards ? 0 : T - 1);
        const int live = !d.zero_masked || !mask || mask[row] > 0.5f;
        dh[e] = (!d.return_sequences && live ? dy[e] : 0.0f) + (dhT ? dhT[e] : 0.0f);
        dc[e] = dcT ? dcT[e] : 0.0f;
    }
}

/* one step back: dy's part (phase 0/1), then the gates' derivatives */
__global__ void k_rnn_bwd_step(fl_rnn_desc d, int phase, int64_t tin, int64_t tout, rnn_bufs B, float *DR,
                               const float *mask, const float *dy) {
    const int64_t T = d.t, u = d.u, gu = (int64_t)(d.cell == FL_RNN_LSTM ? 4 : d.cell == FL_RNN_GRU ? 3 : 1) * u;
    float *dh = B.ST, *dc = B.ST + d.n * u, *drh = B.RG;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < d.n * u; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t b = e / u, row = b * T + tin;
        const int j = (int)(e % u);
        float m = mask ? mask[row] : 1.0f;
        if (phase != FL_RNN_PHASE_H && d.return_sequences && (!d.zero_masked || m > 0.5f))
            dh[e] += dy[(b * T + tout) * u + j];
        fl_rnn_bwd_unit(&d, phase, j, B.A + row * gu, B.RH[row * u + j], B.HP[row * u + j], B.CP[row * u + j], m,
                        dh + e, dc + e, B.DP + row * gu, DR + row * gu, phase == FL_RNN_PHASE_H ? drh[e] : 0.0f);
    }
}


static void cu_rnn_bwd(const fl_rnn_desc *d, const float *x, const float *w, const float *r, const float *bias,
                       const float *mask, const fl_rnn_states *st, const float *dy, float *aux, float *dx, float dx_beta, float *dw, float *dr,
                       float *db) {
    (void)bias;
    const int64_t n = d->n, T = d->t, u = d->u, gu = (int64_t)fl_rnn_gates(d) * u;
    const int want_dh0 = st && st->dh0;
    const int two_phase = d->cell == FL_RNN_GRU && !d->reset_after;
    const int split = d->cell == FL_RNN_GRU && d->reset_after;
    rnn_bufs B = rnn_split(d, aux);
    const float *hd = st ? st->hdrop : NULL, *xd = st ? st->xdrop : NULL;
    const int G = fl_rnn_gates(d), ngr = two_phase ? 2 : G;
    float *DR = split ? B.DR : B.DP, *dh = B.ST;
    const int nb = blocks_for(n * u, 256);
    k_rnn_bwd_init<<<nb, 256, 0, g_stream>>>(*d, mask, dy, st ? st->dhT : NULL, st ? st->dcT : NULL, dh, B.ST + n * u);
    LAUNCHED();
    for (int64_t k = T - 1; k >= 0; k--) {
        const int64_t tin = d->go_backwards ? T - 1 - k : k, tout = d->reverse_output ? T - 1 - k : k;
        k_rnn_bwd_step<<<nb, 256, 0, g_stream>>>(*d, two_phase ? FL_RNN_PHASE_ZR : FL_RNN_PHASE_ALL, tin, tout, B, DR,
                                                 mask, dy);
        LAUNCHED();
        if (two_phase) {
            rnn_gemm(0, 1, n, u, u, B.DP + tin * gu + 2 * u, T * gu, r + 2 * u, gu, 0.0f, B.RG, u);
            if (hd) { /* d(r h' hdrop_h) */
                k_rnn_scale_rows<<<nb, 256, 0, g_stream>>>(n, (int)u, B.RG, u, hd + 2 * u, gu);
                LAUNCHED();
            }
            k_rnn_bwd_step<<<nb, 256, 0, g_stream>>>(*d, FL_RNN_PHASE_H, tin, tout, B, DR, mask, dy);
            LAUNCHED();
        }
        if ((k > 0 || want_dh0) && hd) { /* dh += sum over g of (dpre_g R_g^T) hdrop_g */
            for (int g = 0; g < ngr; g++)
                rnn_gemm(0, 1, n, u, u, DR + tin * gu + g * u, T * gu, r + g * u, gu, 0.0f, B.HM + g * u, gu);
            k_rnn_mask_sum<<<nb, 256, 0, g_stream>>>(n, (int)u, ngr, B.HM, gu, hd, gu, dh);
            LAUNCHED();
        } else if (k > 0 || want_dh0) {
            rnn_gemm(0, 1, n, u, two_phase ? 2 * u : gu, DR + tin * gu, T * gu, r, gu, 1.0f, dh, u);
        }
    }
    /* the gradients of the initial state */
    if (want_dh0) CUDA_OK(cudaMemcpyAsync(st->dh0, dh, (size_t)(n * u) * sizeof(float), cudaMemcpyDeviceToDevice, g_stream));
    if (st && st->dc0)
        CUDA_OK(cudaMemcpyAsync(st->dc0, B.ST + n * u, (size_t)(n * u) * sizeof(float), cudaMemcpyDeviceToDevice,
                                g_stream));
    if (xd) { /* input dropout: gate g saw x xdrop_g */
        const int64_t din = d->d, nbx = blocks_for(n * T * din, 256);
        for (int g = 0; g < G && dw; g++) {
            k_rnn_mask_steps<<<nbx, 256, 0, g_stream>>>(n * T, T, (int)din, x, xd + g * din, G * din, 0, 0.0f, B.XS);
            LAUNCHED();
            rnn_gemm(1, 0, din, u, n * T, B.XS, din, B.DP + g * u, gu, 0.0f, dw + g * u, gu);
        }
        for (int g = 0; g < G && dx; g++) {
            rnn_gemm(0, 1, n * T, din, u, B.DP + g * u, gu, w + g * u, gu, 0.0f, B.XS, din);
            k_rnn_mask_steps<<<nbx, 256, 0, g_stream>>>(n * T, T, (int)din, B.XS, xd + g * din, G * din, 1,
                                                        g ? 1.0f : dx_beta, dx);
            LAUNCHED();
        }
    } else {
        if (dw) rnn_gemm(1, 0, d->d, gu, n * T, x, d->d, B.DP, gu, 0.0f, dw, gu);
        if (dx) rnn_gemm(0, 1, n * T, d->d, gu, B.DP, gu, w, gu, dx_beta, dx, d->d);
    }
    if (dr && hd) { /* recurrent dropout: gate g saw h' hdrop_g */
        for (int g = 0; g < ngr; g++) {
            k_rnn_mask_steps<<<blocks_for(n * T * u, 256), 256, 0, g_stream>>>(n * T, T, (int)u, B.HP, hd + g * u, gu,
                                                                              0, 0.0f, B.XS);
            LAUNCHED();
            rnn_gemm(1, 0, u, u, n * T, B.XS, u, DR + g * u, gu, 0.0f, dr + g * u, gu);
        }
        if (two_phase) rnn_gemm(1, 0, u, u, n * T, B.RH, u, B.DP + 2 * u, gu, 0.0f, dr + 2 * u, gu);
    } else if (dr) {
        if (two_phase) {
            rnn_gemm(1, 0, u, 2 * u, n * T, B.HP, u, B.DP, gu, 0.0f, dr, gu);
            rnn_gemm(1, 0, u, u, n * T, B.RH, u, B.DP + 2 * u, gu, 0.0f, dr + 2 * u, gu);
        } else {
            rnn_gemm(1, 0, u, gu, n * T, B.HP, u, DR, gu, 0.0f, dr, gu);
        }
    }
    if (db && d->has_bias) {
        colsum_rows(n * T, (int)gu, B.DP, gu, db);
        if (split) colsum_rows(n * T, (int)gu, DR, gu, db + gu);
    }
}

static void fill_table(void) {
    fl_backend *b = &g_backend;
    memset(b, 0, sizeof *b);
    b->name = "cuda";
    b->host_memory = 0;
    b->alloc = cu_alloc;
    b->free = cu_free;
    b->upload = cu_upload;
    b->download = cu_download;
    b->copy = cu_copy;
    b->zero = cu_zero;
    b->sync = cu_sync;
    b->check = cu_check;
    b->set_tf32 = cu_set_tf32;
    b->mem_info = cu_mem_info;
    b->gather_rows = cu_gather_rows;
    b->dense_fwd = cu_dense_fwd;
    b->dense_bwd = cu_dense_bwd;
    b->conv_workspace = cu_conv_workspace;
    b->conv2d_fwd = cu_conv2d_fwd;
    b->conv2d_bwd = cu_conv2d_bwd;
    b->conv2d_transpose_fwd = cu_conv2d_transpose_fwd;
    b->conv2d_transpose_bwd = cu_conv2d_transpose_bwd;
    b->depthwise_fwd = cu_depthwise_fwd;
    b->depthwise_bwd = cu_depthwise_bwd;
    b->maxpool_fwd = cu_maxpool_fwd;
    b->maxpool_bwd = cu_maxpool_bwd;
    b->avgpool_fwd = cu_avgpool_fwd;
    b->avgpool_bwd = cu_avgpool_bwd;
    b->gap_fwd = cu_gap_fwd;
    b->gap_bwd = cu_gap_bwd;
    b->act_fwd = cu_act_fwd;
    b->act_bwd = cu_act_bwd;
    b->dropout_fwd = cu_dropout_fwd;
    b->dropout_bwd = cu_dropout_bwd;
    b->bn_fwd_train = cu_bn_fwd_train;
    b->bn_fwd_infer = cu_bn_fwd_infer;
    b->bn_bwd = cu_bn_bwd;
    b->mul = cu_mul;
    b->concat_fwd = cu_concat_fwd;
    b->concat_bwd = cu_concat_bwd;
    b->pad2d = cu_pad2d;
    b->upsample2d_fwd = cu_upsample2d_fwd;
    b->upsample2d_bwd = cu_upsample2d_bwd;
    b->permute = cu_permute;
    b->binary = cu_binary;
    b->fill = cu_fill;
    b->bmerge_fwd = cu_bmerge_fwd;
    b->bmerge_bwd = cu_bmerge_bwd;
    b->axpby = cu_axpby;
    b->minmax_grad = cu_minmax_grad;
    b->pact_fwd = cu_pact_fwd;
    b->pact_bwd = cu_pact_bwd;
    b->softmax_axis_fwd = cu_softmax_axis_fwd;
    b->softmax_axis_bwd = cu_softmax_axis_bwd;
    b->prelu_fwd = cu_prelu_fwd;
    b->prelu_bwd = cu_prelu_bwd;
    b->normalize_fwd = cu_normalize_fwd;
    b->normalize_bwd = cu_normalize_bwd;
    b->accumulate = cu_accumulate;
    b->loss = cu_loss;
    b->metric = cu_metric;
    b->sum_into = cu_sum_into;
    b->optimizer_step = cu_optimizer_step;
    b->graph_begin = cu_graph_begin;
    b->graph_end = cu_graph_end;
    b->graph_launch = cu_graph_launch;
    b->graph_free = cu_graph_free;
    b->layernorm_fwd = cu_layernorm_fwd;
    b->layernorm_bwd = cu_layernorm_bwd;
    b->gemm_batched = cu_gemm_batched;
    b->attn_softmax_fwd = cu_attn_softmax_fwd;
    b->attn_softmax_bwd = cu_attn_softmax_bwd;
    b->rnn_fwd = cu_rnn_fwd;
    b->rnn_bwd = cu_rnn_bwd;
    b->embedding_fwd = cu_embedding_fwd;
    b->embedding_bwd = cu_embedding_bwd;
    b->seq_mask = cu_seq_mask;
    b->masked_gap1d_fwd = cu_masked_gap1d_fwd;
    b->masked_gap1d_bwd = cu_masked_gap1d_bwd;
    b->loss_mask = cu_loss_mask;
    b->loss_weight = cu_loss_weight;
    b->scalar_mul_fwd = cu_scalar_mul_fwd;
    b->scalar_mul_bwd = cu_scalar_mul_bwd;
    b->attn_concat_fwd = cu_attn_concat_fwd;
    b->attn_concat_bwd = cu_attn_concat_bwd;
    b->graph_set_learning_rate = cu_graph_set_learning_rate;
    b->comm_stream_fork = cu_comm_stream_fork;
    b->comm_stream_join = cu_comm_stream_join;
}

__global__ void k_probe(int *out) { *out = 42; }

static const fl_backend *fail_open(fl_cuda_report *rep, const char *check, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rep->reason, sizeof rep->reason, fmt, ap);
    va_end(ap);
    snprintf(rep->failed_check, sizeof rep->failed_check, "%s", check);
    return NULL;
}

extern "C" __attribute__((visibility("default"))) const fl_backend *fl_cuda_plugin_open(const fl_cuda_host *host,
                                                                                          fl_cuda_report *rep) {
    memset(rep, 0, sizeof *rep);
    snprintf(rep->archs, sizeof rep->archs, "%s", FLYNN_CUDA_ARCHS);
    rep->cudnn_built = CUDNN_VERSION;
    if (!host || host->abi != FL_CUDA_PLUGIN_ABI)
        return fail_open(rep, "plugin", "the CUDA plugin's ABI %d does not match flynn's %d: reinstall flynn",
                         FL_CUDA_PLUGIN_ABI, host ? host->abi : -1);
    if (!host->backend_abi || strcmp(host->backend_abi, FL_BACKEND_ABI) != 0)
        return fail_open(rep, "plugin", "the CUDA plugin was built from another flynn than this libflynn (backend "
                         "table %s, libflynn's %s): reinstall flynn, so that libflynn and its plugins come from one "
                         "build", FL_BACKEND_ABI, host->backend_abi ? host->backend_abi : "?");
    g_host = host;
    cudaRuntimeGetVersion(&rep->runtime_version);
    cudaDriverGetVersion(&rep->driver_version);
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e == cudaErrorInsufficientDriver)
        return fail_open(rep, "driver_version",
                         "CUDA driver version is insufficient for CUDA runtime version %d.%d (the driver supports "
                         "%d.%d): update the NVIDIA driver to " FL_PLUGIN_MIN_DRIVER " or newer",
                         rep->runtime_version / 1000, (rep->runtime_version % 1000) / 10, rep->driver_version / 1000,
                         (rep->driver_version % 1000) / 10);
    if (e == cudaErrorNoDevice || (e == cudaSuccess && count == 0))
        return fail_open(rep, "device", "the driver sees no CUDA device (check CUDA_VISIBLE_DEVICES and nvidia-smi)");
    if (e != cudaSuccess)
        return fail_open(rep, "device", "cudaGetDeviceCount failed: %s (%s)", cudaGetErrorName(e), cudaGetErrorString(e));
    int dev = 0;
    const char *dv = getenv("FLYNN_CUDA_DEVICE"), *local = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (dv && *dv) dev = atoi(dv);
    else if (local && *local) dev = atoi(local) % count; /* mpirun: one GPU per rank of this machine */
    if (dev < 0 || dev >= count)
        return fail_open(rep, "device", "FLYNN_CUDA_DEVICE=%s but there are %d CUDA devices", dv, count);
    if ((e = cudaSetDevice(dev)) != cudaSuccess || (e = cudaGetDeviceProperties(&g_prop, dev)) != cudaSuccess)
        return fail_open(rep, "device", "cannot open CUDA device %d: %s", dev, cudaGetErrorName(e));
    snprintf(rep->device_name, sizeof rep->device_name, "%s", g_prop.name);
    rep->cc_major = g_prop.major;
    rep->cc_minor = g_prop.minor;
    rep->multiprocessors = g_prop.multiProcessorCount;
    cudaMemGetInfo(&rep->free_mem, &rep->total_mem);
    /* can this build's code run on it? */
    int *probe = NULL, val = 0;
    if ((e = cudaMalloc(&probe, sizeof(int))) != cudaSuccess)
        return fail_open(rep, "device", "cudaMalloc of 4 bytes failed on %s: %s", g_prop.name, cudaGetErrorName(e));
    k_probe<<<1, 1>>>(probe);
    e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaMemcpy(&val, probe, sizeof val, cudaMemcpyDeviceToHost);
    cudaFree(probe);
    if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorUnsupportedPtxVersion || e == cudaErrorInvalidKernelImage)
        return fail_open(rep, "compute_capability",
                         "%s has compute capability %d.%d, which this build of flynn has no code for (built for %s): "
                         "rebuild flynn with " FL_PLUGIN_ARCH_VAR " including %d%d",
                         g_prop.name, g_prop.major, g_prop.minor, FLYNN_CUDA_ARCHS, g_prop.major, g_prop.minor);
    if (e != cudaSuccess || val != 42)
        return fail_open(rep, "device", "a test kernel failed on %s: %s", g_prop.name, cudaGetErrorName(e));
    rep->cudnn_version = cudnnGetVersion();
    if (rep->cudnn_version / 10000 != CUDNN_MAJOR)
        return fail_open(rep, "cudnn_version", "the cuDNN library is version %zu.%zu, flynn is built for cuDNN %d: "
                         "install cuDNN %d for CUDA %d", rep->cudnn_version / 10000, (rep->cudnn_version % 10000) / 100,
                         CUDNN_MAJOR, CUDNN_MAJOR, FL_PLUGIN_CUDA_MAJOR);
    if ((e = cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking)) != cudaSuccess)
        return fail_open(rep, "device", "cudaStreamCreate failed: %s", cudaGetErrorName(e));
    cublasStatus_t bs = cublasCreate(&g_cublas);
    if (bs != CUBLAS_STATUS_SUCCESS)
        return fail_open(rep, "cublas_init", "cublasCreate failed: %s", cublasGetStatusName(bs));
    cublasGetVersion(g_cublas, &rep->cublas_version);
    cublasSetStream(g_cublas, g_stream);
    /* a workspace of our own, so that cuBLAS allocates nothing while a graph is captured */
    const size_t ws = (size_t)32 << 20;
    if (cudaMalloc(&g_cublas_ws, ws) == cudaSuccess) cublasSetWorkspace(g_cublas, g_cublas_ws, ws);
    else cudaGetLastError();
    cudnnStatus_t ds = cudnnCreate(&g_cudnn);
    if (ds != CUDNN_STATUS_SUCCESS)
        return fail_open(rep, "cudnn_init", "cudnnCreate failed: %s", cudnnGetErrorString(ds));
    cudnnSetStream(g_cudnn, g_stream);
    const char *prec = getenv("FLYNN_MATMUL_PRECISION");
    int tf32 = !(prec && strcmp(prec, "highest") == 0);
    fill_table();
    cu_set_tf32(tf32);
    return &g_backend;
}

/* ------------------------------------------- device query and bandwidth */

/* CUDA cores per SM by architecture (as deviceQuery's _ConvertSMVer2Cores). */
static int cores_per_sm(int major, int minor) {
    switch (major * 10 + minor) {
    case 60: return 64;  /* Pascal and Volta: the CUDA 12 plugin only */
    case 61: case 62: return 128;
    case 70: case 72: return 64;
    case 75: return 64;
    case 80: return 64;
    case 86: case 87: case 89: return 128;
    case 90: return 128;
    case 100: case 101: case 103: case 110: return 128;
    case 120: case 121: return 128;
    default: return 0;
    }
}

__global__ void k_noop(int *p) { if (p) *p = 1; }

static int tool_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) { cudaGetLastError(); return 0; }
    return n;
}

static int tool_device_info(int i, fl_cuda_device_info *o, char *why, size_t why_len) {
    memset(o, 0, sizeof *o);
    o->index = i;
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, i);
    if (e != cudaSuccess) { snprintf(why, why_len, "cudaGetDeviceProperties(%d): %s", i, cudaGetErrorName(e)); return 1; }
    snprintf(o->name, sizeof o->name, "%s", p.name);
    char *u = o->uuid;
    u += sprintf(u, "GPU-");
    for (int k = 0; k < 16; k++) {
        u += sprintf(u, "%02x", (unsigned char)p.uuid.bytes[k]);
        if (k == 3 || k == 5 || k == 7 || k == 9) *u++ = '-';
    }
    *u = 0;
    o->cc_major = p.major;
    o->cc_minor = p.minor;
    o->multiprocessors = p.multiProcessorCount;
    o->cuda_cores = cores_per_sm(p.major, p.minor) * p.multiProcessorCount;
    int clk = 0, mclk = 0, bus = 0;
    cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, i);
    cudaDeviceGetAttribute(&mclk, cudaDevAttrMemoryClockRate, i);
    cudaDeviceGetAttribute(&bus, cudaDevAttrGlobalMemoryBusWidth, i);
    o->clock_khz = clk;
    o->mem_clock_khz = mclk;
    o->mem_bus_width = bus;
    o->peak_bandwidth_gbs = 2.0 * (double)mclk * 1e3 * (double)bus / 8.0 / 1e9;
    o->total_mem = p.totalGlobalMem;
    int cur = 0;
    cudaGetDevice(&cur);
    if (cudaSetDevice(i) == cudaSuccess) {
        size_t fr = 0, tot = 0;
        if (cudaMemGetInfo(&fr, &tot) == cudaSuccess) o->free_mem = fr;
        /* can this build run here? a trivial kernel tells */
        k_noop<<<1, 1>>>(NULL);
        e = cudaDeviceSynchronize();
        if (e == cudaSuccess) e = cudaGetLastError();
        o->runnable = e == cudaSuccess;
        if (!o->runnable)
            snprintf(o->runnable_why, sizeof o->runnable_why, "%s (this build: %s)", cudaGetErrorName(e), FLYNN_CUDA_ARCHS);
        else
            snprintf(o->runnable_why, sizeof o->runnable_why, "compute capability %d.%d is covered by %s", p.major,
                     p.minor, FLYNN_CUDA_ARCHS);
        cudaGetLastError();
        cudaSetDevice(cur);
    }
    o->l2_bytes = p.l2CacheSize;
    o->shared_per_block = p.sharedMemPerBlock;
    o->shared_per_sm = p.sharedMemPerMultiprocessor;
    o->regs_per_block = p.regsPerBlock;
    o->regs_per_sm = p.regsPerMultiprocessor;
    o->warp_size = p.warpSize;
    o->max_threads_per_block = p.maxThreadsPerBlock;
    o->max_threads_per_sm = p.maxThreadsPerMultiProcessor;
    for (int k = 0; k < 3; k++) { o->max_block[k] = p.maxThreadsDim[k]; o->max_grid[k] = p.maxGridSize[k]; }
    o->ecc = p.ECCEnabled;
    o->pci_domain = p.pciDomainID;
    o->pci_bus = p.pciBusID;
    o->pci_device = p.pciDeviceID;
    o->async_engines = p.asyncEngineCount;
    return 0;
}

/* bandwidthTest's method: the copies of one size timed together with CUDA
 * events on one stream, GB/s = bytes * reps / time. */
static int tool_bandwidth(int dev, int pinned, const size_t *sizes, int nsizes, int reps, fl_cuda_bw_point *out,
                          char *why, size_t why_len) {
    size_t maxb = 0;
    for (int i = 0; i < nsizes; i++) if (sizes[i] > maxb) maxb = sizes[i];
    int cur = 0;
    cudaGetDevice(&cur);
    cudaError_t e = cudaSetDevice(dev);
    void *h = NULL, *d1 = NULL, *d2 = NULL;
    cudaStream_t st = NULL;
    cudaEvent_t a = NULL, b = NULL;
    int rc = 1;
    if (e == cudaSuccess) e = pinned ? cudaMallocHost(&h, maxb) : ((h = malloc(maxb)) ? cudaSuccess : cudaErrorMemoryAllocation);
    if (e == cudaSuccess) e = cudaMalloc(&d1, maxb);
    if (e == cudaSuccess) e = cudaMalloc(&d2, maxb);
    if (e == cudaSuccess) e = cudaStreamCreate(&st);
    if (e == cudaSuccess) e = cudaEventCreate(&a);
    if (e == cudaSuccess) e = cudaEventCreate(&b);
    if (e == cudaSuccess) {
        memset(h, 1, maxb);
        e = cudaMemset(d1, 2, maxb);
    }
    for (int i = 0; e == cudaSuccess && i < nsizes; i++) {
        size_t n = sizes[i];
        float ms = 0;
        out[i].bytes = n;
        /* warm-up, then timed */
        e = cudaMemcpyAsync(d1, h, n, cudaMemcpyHostToDevice, st);
        if (e == cudaSuccess) e = cudaEventRecord(a, st);
        for (int r = 0; e == cudaSuccess && r < reps; r++) e = cudaMemcpyAsync(d1, h, n, cudaMemcpyHostToDevice, st);
        if (e == cudaSuccess) e = cudaEventRecord(b, st);
        if (e == cudaSuccess) e = cudaEventSynchronize(b);
        if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, a, b);
        out[i].h2d = e == cudaSuccess && ms > 0 ? (double)n * reps / (ms * 1e-3) / 1e9 : 0;
        if (e == cudaSuccess) e = cudaEventRecord(a, st);
        for (int r = 0; e == cudaSuccess && r < reps; r++) e = cudaMemcpyAsync(h, d1, n, cudaMemcpyDeviceToHost, st);
        if (e == cudaSuccess) e = cudaEventRecord(b, st);
        if (e == cudaSuccess) e = cudaEventSynchronize(b);
        if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, a, b);
        out[i].d2h = e == cudaSuccess && ms > 0 ? (double)n * reps / (ms * 1e-3) / 1e9 : 0;
        if (e == cudaSuccess) e = cudaEventRecord(a, st);
        for (int r = 0; e == cudaSuccess && r < reps; r++) e = cudaMemcpyAsync(d2, d1, n, cudaMemcpyDeviceToDevice, st);
        if (e == cudaSuccess) e = cudaEventRecord(b, st);
        if (e == cudaSuccess) e = cudaEventSynchronize(b);
        if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, a, b);
        /* bandwidthTest counts device-to-device bytes twice (read + write) */
        out[i].d2d = e == cudaSuccess && ms > 0 ? 2.0 * (double)n * reps / (ms * 1e-3) / 1e9 : 0;
    }
    if (e == cudaSuccess) rc = 0;
    else snprintf(why, why_len, "bandwidth test on device %d: %s", dev, cudaGetErrorName(e));
    cudaGetLastError();
    if (a) cudaEventDestroy(a);
    if (b) cudaEventDestroy(b);
    if (st) cudaStreamDestroy(st);
    if (d1) cudaFree(d1);
    if (d2) cudaFree(d2);
    if (h) { if (pinned) cudaFreeHost(h); else free(h); }
    cudaSetDevice(cur);
    return rc;
}

static const fl_cuda_tools g_tools = {tool_device_count, tool_device_info, tool_bandwidth};

extern "C" __attribute__((visibility("default"))) const fl_cuda_tools *fl_cuda_plugin_tools(void) { return &g_tools; }
