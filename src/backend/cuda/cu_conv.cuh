/*
 * cu_conv.cuh — Conv2D through cuDNN (plans, workspace, fused epilogues), Conv2DTranspose, DepthwiseConv2D.
 * Part of the CUDA plugin's one translation unit: cuda_backend.cu includes it after the state and
 * helpers it uses (no separate object, so the CUDA 12 build by clang stays one compile).
 */
/* ----------------------------------------------------------- convolution */

/* The layout copies into and out of cuDNN's (k_hwio_to_ohwi, k_ohwi_to_hwio, k_pad_after, k_crop_add) are
 * kernels/conv.cl's. */

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

/* The kernels are kernels/conv.cl's (k_depthwise_fwd, k_depthwise_bwd_dx, and k_colsum_depthwise_dw, the filter
 * gradient's column sums, reduce.cl's partial stage with the depthwise summand), shared with OpenCL. */
static void cu_depthwise_fwd(const fl_conv_desc *d, const float *x, const float *w, const float *b, float *y) {
    const int64_t total = d->n * (int64_t)d->oh * d->ow * d->oc;
    k_depthwise_fwd<<<blocks_for(total, 256), 256, 0, g_stream>>>(fl_conv_geom_of(d, d->n), x, w, b, y);
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
        k_depthwise_bwd_dx<<<blocks_for(total, 256), 256, 0, g_stream>>>(fl_conv_geom_of(d, d->n), w, dy, dx, dx_beta);
        LAUNCHED();
    }
    if (!dw) return;
    const int n = d->kh * d->kw * d->oc;
    float *p = partial_buf(n, COLSUM_CHUNKS);
    if (!p) return;
    dim3 grid((n + 31) / 32, COLSUM_CHUNKS), block(32, 8);
    k_colsum_depthwise_dw<<<grid, block, 0, g_stream>>>(orows, n, COLSUM_CHUNKS, fl_conv_geom_of(d, d->n), x, dy, p);
    k_colsum_final<<<(n + 255) / 256, 256, 0, g_stream>>>(n, COLSUM_CHUNKS, p, dw, 0.0f);
    LAUNCHED();
}
