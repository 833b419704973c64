/*
 * cu_optim.cuh — the optimizers and gradient clipping.
 * Part of the CUDA plugin's one translation unit: cuda_backend.cu includes it after the state and
 * helpers it uses (no separate object, so the CUDA 12 build by clang stays one compile).
 */
/* ------------------------------------------------------------ optimizer */
/* The per-element update and the sums of squares are kernels/optim.cl's bodies, which OpenCL runs per
 * tensor; here one launch covers every tensor, from a table of their device pointers. */

/* start: the tensor's first element in the concatenation; cstart: its first FL_SUMSQ_CHUNK-element chunk */
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

/* The twin of cpu_clip_gradients: sums of squares per tensor into ss[np], in a fixed order, from the
 * shared bodies (kernels/optim.cl: chunks of FL_SUMSQ_CHUNK elements, a block each, then each tensor's
 * chunks in order), all tensors in one launch: block c finds its tensor by its first chunk. */
__global__ void k_grad_sumsq_partial(const dev_param *ps, int np, double *partial) {
    FL_SUMSQ_SHARED;
    const int64_t c = blockIdx.x;
    const dev_param p = ps[last_starting_by(ps, np, c, true)];
    const int64_t i0 = (c - p.cstart) * FL_SUMSQ_CHUNK, i1 = i0 + FL_SUMSQ_CHUNK < p.n ? i0 + FL_SUMSQ_CHUNK : p.n;
    FL_SUMSQ_BODY(p.g, i0, i1, partial + c)
}

/* a thread per tensor adds its chunks */
__global__ void k_grad_sumsq_final(const dev_param *ps, int np, const double *partial, float *ss) {
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= np) return;
    ss[k] = fl_sumsq_chunks(partial + ps[k].cstart, (ps[k].n + FL_SUMSQ_CHUNK - 1) / FL_SUMSQ_CHUNK);
}

__global__ void k_clip_grads(int mode, float clip, const dev_param *ps, int np, int64_t total, const float *ss) {
    __shared__ float total_ss;
    if (mode == FL_CLIP_GLOBAL_NORM) {
        if (threadIdx.x == 0) total_ss = fl_sumsq_total(ss, np);
        __syncthreads();
    }
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int k = param_of(ps, np, e);
        float *g = ps[k].g + (e - ps[k].start);
        float sum = mode == FL_CLIP_NORM ? ss[k] : mode == FL_CLIP_GLOBAL_NORM ? total_ss : 0.0f;
        *g = fl_clip_grad(mode, clip, sum, *g);
    }
}

/* One launch for all parameters: each element finds its tensor, then the shared update (kernels/optim.cl).
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
        fl_opt_update(&d, d.lr, lr_t, p.w, p.g, p.s0, p.s1, p.s2, e - p.start);
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
        chunks += (ps[k].n + FL_SUMSQ_CHUNK - 1) / FL_SUMSQ_CHUNK;
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
                k_grad_sumsq_partial<<<(unsigned)g_dparams_chunks, FL_SUMSQ_THREADS, 0, g_stream>>>(g_dparams, np,
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
