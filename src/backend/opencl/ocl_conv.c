/*
 * ocl_conv.c — the OpenCL backend's entries for Conv2D, Conv2DTranspose and DepthwiseConv2D (kernels/conv.cl).
 *
 * Conv2D is a matrix product per chunk of samples and group, as the CPU's GEMM path (cpu_conv.c): im2col turns
 * the chunk into rows of kh*kw*cg patch values, so that, reading the kernel as a [K, oc] matrix (group g's
 * columns [g*ocg, (g+1)*ocg)),
 *     forward          y[rows, ocg]  = col[rows, K] @ w[K, ocg], then act(y + b) over the whole batch
 *     backward filter  dw[K, ocg]   (+)= col^T @ dy          (chunk by chunk, in order: deterministic)
 *     backward data    dcol[rows, K] = dy @ w^T, then dx (beta: +)= col2im(dcol) (a gather: no atomics)
 * Conv2DTranspose is the data gradient of the Conv2D its descriptor describes, so it runs on the same pieces
 * with x and y swapped (x: [n, oh, ow, oc], y: [n, h, w, c], w: [K = kh*kw*c, oc]):
 *     forward          col = x @ w^T, y = col2im(col), act(y + b)
 *     backward filter  dw (+)= im2col(dy)^T @ x
 *     backward data    dx (beta: +)= im2col(dy) @ w          (the Conv2D's forward)
 * A 1x1, stride-1, unpadded, ungrouped convolution is one product on x (or dy) itself. The column matrix lives
 * in the workspace (conv_workspace: one chunk's, at most COL_MAX_FLOATS; a caller without one gets a buffer
 * kept here). The bias gradient and dy *= act'(y) run over the whole batch first (k_act_grad_y, ocl_colsum_rows).
 * DepthwiseConv2D runs the kernels CUDA runs too (k_depthwise_*; its filter gradient as reduce.cl's column sums).
 *
 * The optional fused entries stay NULL (conv_slope, conv_pre, conv2d_maxpool_fwd/_bwd, conv2d_bn_bwd,
 * infer_weight_cache; conv_res and conv_dx_gate 0): fuse.c offers those fusions only where the backend has
 * them, so d->slope, d->pre, d->res and d->dx_gate never reach these entries.
 */
#include "backend/opencl/opencl_internal.h"

#include <stdlib.h>

#include "backend/kernels/geom.h"
#include "ops/math.h"

_Static_assert(sizeof(fl_conv_geom) == 72, "fl_conv_geom: one int64_t and 16 ints, as OpenCL C lays it out");

/* the most floats one chunk's column matrix takes (256 MiB) */
#define COL_MAX_FLOATS ((int64_t)64 << 20)

/* a column's taps: kh*kw*(c/groups) */
static int64_t col_k(const fl_conv_desc *d) { return (int64_t)d->kh * d->kw * (d->c / fl_conv_groups(d)); }

/* 1x1, stride 1, no padding, no groups: the product on the input itself, no columns */
static int on_input(const fl_conv_desc *d) {
    return d->kh == 1 && d->kw == 1 && d->sh == 1 && d->sw == 1 && d->pt == 0 && d->pl == 0 &&
           fl_conv_groups(d) == 1;
}

/* samples per chunk: as many as keep the column matrix within COL_MAX_FLOATS (at least 1); at most
 * $FLYNN_OPENCL_CONV_CHUNK where set (test_gpu_parity's chunked cases: set only while no graph is reserved, as
 * the workspace was sized under it) */
static int64_t chunk_samples(const fl_conv_desc *d) {
    const int64_t per = (int64_t)d->oh * d->ow * col_k(d);
    int64_t cs = per > 0 ? COL_MAX_FLOATS / per : d->n;
    const char *e = getenv("FLYNN_OPENCL_CONV_CHUNK");
    const long cap = e ? strtol(e, NULL, 10) : 0;
    if (cap > 0 && cs > cap) cs = cap;
    if (cs < 1) cs = 1;
    return cs < d->n ? cs : d->n;
}

static size_t ocl_conv_workspace(const fl_conv_desc *d, int backward) {
    (void)backward; /* the same columns forward and backward */
    if (on_input(d) || d->n <= 0) return 0;
    return (size_t)(chunk_samples(d) * d->oh * d->ow * col_k(d)) * sizeof(float);
}

/* the column matrix: the caller's workspace, or (none given) one kept here */
static float *g_cols;
static size_t g_cols_bytes;
static float *columns(const fl_conv_desc *d, void *ws) {
    if (ws) return (float *)ws;
    size_t need = ocl_conv_workspace(d, 1);
    if (need > g_cols_bytes) {
        ocl_free(g_cols);
        g_cols = ocl_alloc(need);
        g_cols_bytes = g_cols ? need : 0;
    }
    return g_cols;
}

static void im2col(const fl_conv_geom *g, int c0, int cg, const float *x, float *col) {
    ocl_launch l = ocl_args(OCL_k_im2col);
    ocl_arg_raw(&l, g, sizeof *g); ocl_arg_i32(&l, c0); ocl_arg_i32(&l, cg); BUF(l, x); BUF(l, col);
    ocl_run1(&l, g->n * g->oh * g->ow * (int64_t)g->kh * g->kw * cg, 256);
}

static void col2im(const fl_conv_geom *g, int c0, int cg, const float *col, float *dx, float beta) {
    ocl_launch l = ocl_args(OCL_k_col2im);
    ocl_arg_raw(&l, g, sizeof *g); ocl_arg_i32(&l, c0); ocl_arg_i32(&l, cg); BUF(l, col); BUF(l, dx);
    ocl_arg_f32(&l, beta);
    ocl_run1(&l, g->n * g->h * g->w * (int64_t)cg, 256);
}

/* dy *= act'(y) over rows of n; db = its column sums (NULL: none) */
static void act_grad_bias(int64_t rows, int n, int act, const float *y, float *dy, float *db) {
    if (act != FL_ACT_LINEAR) {
        ocl_launch l = ocl_args(OCL_k_act_grad_y);
        ocl_arg_i64(&l, rows * n); ocl_arg_i32(&l, act); BUF(l, y); BUF(l, dy);
        ocl_run1(&l, rows * n, 256);
    }
    if (db) ocl_colsum_rows(rows, n, dy, n, db);
}

/* ------------------------------------------------------------------ Conv2D */

static void be_conv2d_fwd(const fl_conv_desc *d, const float *x, const float *w, const float *b, float *y, void *ws) {
    if (d->n <= 0) return;
    const int G = fl_conv_groups(d), cg = d->c / G, ocg = d->oc / G;
    const int64_t K = col_k(d), in_sz = (int64_t)d->h * d->w * d->c, out_rows = (int64_t)d->oh * d->ow;
    if (on_input(d)) {
        ocl_gemm(0, 0, (size_t)(d->n * out_rows), (size_t)d->oc, (size_t)K, 1.0f, x, (size_t)K, w, (size_t)d->oc, 0.0f,
                 y, (size_t)d->oc);
    } else {
        float *col = columns(d, ws);
        if (!col) return;
        const int64_t cs = chunk_samples(d);
        for (int64_t n0 = 0; n0 < d->n; n0 += cs) {
            const int64_t cn = d->n - n0 < cs ? d->n - n0 : cs, rows = cn * out_rows;
            const fl_conv_geom g = fl_conv_geom_of(d, cn);
            for (int gi = 0; gi < G; gi++) { /* y[:, group gi's columns] = col_gi @ w[:, those columns] */
                im2col(&g, gi * cg, cg, x + n0 * in_sz, col);
                ocl_gemm(0, 0, (size_t)rows, (size_t)ocg, (size_t)K, 1.0f, col, (size_t)K, w + (size_t)gi * ocg,
                         (size_t)d->oc, 0.0f, y + n0 * out_rows * d->oc + (size_t)gi * ocg, (size_t)d->oc);
            }
        }
    }
    ocl_bias_act(d->n * out_rows, d->oc, d->has_bias ? b : NULL, d->act, y);
}

static void be_conv2d_bwd(const fl_conv_desc *d, const float *x, const float *w, const float *y, float *dy, float *dx,
                          float dx_beta, float *dw, float *db, void *ws) {
    if (d->n <= 0) return;
    const int G = fl_conv_groups(d), cg = d->c / G, ocg = d->oc / G;
    const int64_t K = col_k(d), in_sz = (int64_t)d->h * d->w * d->c, out_rows = (int64_t)d->oh * d->ow;
    act_grad_bias(d->n * out_rows, d->oc, d->act, y, dy, d->has_bias ? db : NULL);
    if (on_input(d)) {
        const size_t rows = (size_t)(d->n * out_rows);
        if (dw) ocl_gemm(1, 0, (size_t)K, (size_t)d->oc, rows, 1.0f, x, (size_t)K, dy, (size_t)d->oc, 0.0f, dw,
                         (size_t)d->oc);
        if (dx) ocl_gemm(0, 1, rows, (size_t)K, (size_t)d->oc, 1.0f, dy, (size_t)d->oc, w, (size_t)d->oc, dx_beta, dx,
                         (size_t)K);
        return;
    }
    if (!dw && !dx) return;
    float *col = columns(d, ws);
    if (!col) return;
    const int64_t cs = chunk_samples(d);
    for (int64_t n0 = 0; n0 < d->n; n0 += cs) {
        const int64_t cn = d->n - n0 < cs ? d->n - n0 : cs, rows = cn * out_rows;
        const fl_conv_geom g = fl_conv_geom_of(d, cn);
        const float *xc = x + n0 * in_sz, *dyc = dy + n0 * out_rows * d->oc;
        for (int gi = 0; gi < G; gi++) {
            const size_t go = (size_t)gi * ocg; /* group gi's columns of w, dw and dy */
            if (dw) { /* the first chunk writes dw, the others add to it */
                im2col(&g, gi * cg, cg, xc, col);
                ocl_gemm(1, 0, (size_t)K, (size_t)ocg, (size_t)rows, 1.0f, col, (size_t)K, dyc + go, (size_t)d->oc,
                         n0 ? 1.0f : 0.0f, dw + go, (size_t)d->oc);
            }
            if (dx) {
                ocl_gemm(0, 1, (size_t)rows, (size_t)K, (size_t)ocg, 1.0f, dyc + go, (size_t)d->oc, w + go,
                         (size_t)d->oc, 0.0f, col, (size_t)K);
                col2im(&g, gi * cg, cg, col, dx + n0 * in_sz, dx_beta);
            }
        }
    }
}

/* --------------------------------------------------------- Conv2DTranspose */

static void be_conv2d_transpose_fwd(const fl_conv_desc *d, const float *x, const float *w, const float *b, float *y,
                                    void *ws) {
    if (d->n <= 0) return;
    const int64_t K = (int64_t)d->kh * d->kw * d->c, y_sz = (int64_t)d->h * d->w * d->c,
                  x_rows = (int64_t)d->oh * d->ow;
    if (on_input(d)) {
        ocl_gemm(0, 1, (size_t)(d->n * x_rows), (size_t)K, (size_t)d->oc, 1.0f, x, (size_t)d->oc, w, (size_t)d->oc,
                 0.0f, y, (size_t)K);
    } else {
        float *col = columns(d, ws);
        if (!col) return;
        const int64_t cs = chunk_samples(d);
        for (int64_t n0 = 0; n0 < d->n; n0 += cs) {
            const int64_t cn = d->n - n0 < cs ? d->n - n0 : cs;
            const fl_conv_geom g = fl_conv_geom_of(d, cn);
            ocl_gemm(0, 1, (size_t)(cn * x_rows), (size_t)K, (size_t)d->oc, 1.0f, x + n0 * x_rows * d->oc,
                     (size_t)d->oc, w, (size_t)d->oc, 0.0f, col, (size_t)K);
            col2im(&g, 0, d->c, col, y + n0 * y_sz, 0.0f);
        }
    }
    ocl_bias_act(d->n * d->h * d->w, d->c, d->has_bias ? b : NULL, d->act, y);
}

static void be_conv2d_transpose_bwd(const fl_conv_desc *d, const float *x, const float *w, const float *y, float *dy,
                                    float *dx, float dx_beta, float *dw, float *db, void *ws) {
    if (d->n <= 0) return;
    const int64_t K = (int64_t)d->kh * d->kw * d->c, y_sz = (int64_t)d->h * d->w * d->c,
                  x_rows = (int64_t)d->oh * d->ow;
    /* dy is the Conv2D's input here: act'(y) and the bias gradient over c */
    act_grad_bias(d->n * d->h * d->w, d->c, d->act, y, dy, d->has_bias ? db : NULL);
    if (!dw && !dx) return;
    const int direct = on_input(d);
    float *col = direct ? NULL : columns(d, ws);
    if (!direct && !col) return;
    const int64_t cs = direct ? d->n : chunk_samples(d);
    for (int64_t n0 = 0; n0 < d->n; n0 += cs) {
        const int64_t cn = d->n - n0 < cs ? d->n - n0 : cs, rows = cn * x_rows;
        const float *xc = x + n0 * x_rows * d->oc, *a = dy + n0 * y_sz;
        if (!direct) {
            const fl_conv_geom g = fl_conv_geom_of(d, cn);
            im2col(&g, 0, d->c, a, col);
            a = col;
        }
        if (dw)
            ocl_gemm(1, 0, (size_t)K, (size_t)d->oc, (size_t)rows, 1.0f, a, (size_t)K, xc, (size_t)d->oc,
                     n0 ? 1.0f : 0.0f, dw, (size_t)d->oc);
        if (dx)
            ocl_gemm(0, 0, (size_t)rows, (size_t)d->oc, (size_t)K, 1.0f, a, (size_t)K, w, (size_t)d->oc, dx_beta,
                     dx + n0 * x_rows * d->oc, (size_t)d->oc);
    }
}

/* --------------------------------------------------------- DepthwiseConv2D */

static void be_depthwise_fwd(const fl_conv_desc *d, const float *x, const float *w, const float *b, float *y) {
    const fl_conv_geom g = fl_conv_geom_of(d, d->n);
    ocl_launch l = ocl_args(OCL_k_depthwise_fwd);
    ocl_arg_raw(&l, &g, sizeof g); BUF(l, x); BUF(l, w); BUF(l, b); BUF(l, y);
    ocl_run1(&l, d->n * d->oh * d->ow * (int64_t)d->oc, 256);
}

/* the depthwise filter gradient's partial sums: chunks x columns */
static float *g_dw_partial;
static size_t g_dw_partial_n;

/* dy *= act'(y) and db first (both read by what follows), then dx and dw; dx (beta), dw and db (overwritten) may
 * each be NULL */
static void be_depthwise_bwd(const fl_conv_desc *d, const float *x, const float *w, const float *y, float *dy,
                             float *dx, float dx_beta, float *dw, float *db) {
    const fl_conv_geom g = fl_conv_geom_of(d, d->n);
    const int64_t orows = d->n * d->oh * d->ow;
    act_grad_bias(orows, d->oc, d->act, y, dy, db);
    if (dx) {
        ocl_launch l = ocl_args(OCL_k_depthwise_bwd_dx);
        ocl_arg_raw(&l, &g, sizeof g); BUF(l, w); BUF(l, dy); BUF(l, dx); ocl_arg_f32(&l, dx_beta);
        ocl_run1(&l, d->n * d->h * d->w * (int64_t)d->c, 256);
    }
    if (!dw) return;
    const int n = d->kh * d->kw * d->oc, chunks = 64;
    const size_t need = (size_t)chunks * (size_t)n;
    if (need > g_dw_partial_n) {
        ocl_free(g_dw_partial);
        g_dw_partial = ocl_alloc(need * sizeof(float));
        g_dw_partial_n = g_dw_partial ? need : 0;
        if (!g_dw_partial) return;
    }
    ocl_launch l = ocl_args(OCL_k_colsum_depthwise_dw);
    ocl_arg_i64(&l, orows); ocl_arg_i32(&l, n); ocl_arg_i32(&l, chunks); ocl_arg_raw(&l, &g, sizeof g); BUF(l, x);
    BUF(l, dy); BUF(l, g_dw_partial);
    ocl_run2(&l, (size_t)(n + 31) / 32 * 32, (size_t)chunks * 8, 32, 8);
    ocl_launch f = ocl_args(OCL_k_colsum_final);
    ocl_arg_i32(&f, n); ocl_arg_i32(&f, chunks); BUF(f, g_dw_partial); BUF(f, dw); ocl_arg_f32(&f, 0.0f);
    ocl_run1(&f, n, 256);
}

void ocl_fill_conv(fl_backend *b) {
    b->conv_workspace = ocl_conv_workspace;
    b->conv2d_fwd = be_conv2d_fwd;
    b->conv2d_bwd = be_conv2d_bwd;
    b->conv2d_transpose_fwd = be_conv2d_transpose_fwd;
    b->conv2d_transpose_bwd = be_conv2d_transpose_bwd;
    b->depthwise_fwd = be_depthwise_fwd;
    b->depthwise_bwd = be_depthwise_bwd;
}
