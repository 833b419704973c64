/*
 * cpu_conv.c — CPU Conv2D and pooling, NHWC.
 *
 * Direct convolution (CPUs with AVX-512, see cpu_simd.h): no im2col buffer.
 * With Keras's kernel layout (kh, kw, c, oc), for a fixed kernel row kh the
 * kw*c values a output pixel needs are contiguous in the NHWC input, and so
 * are the matching kernel rows; a tile of R output pixels x up to 64 filters
 * is one micro-kernel call that runs over kh (segments) and kw*c (steps):
 *     forward          y[p, oc]   = sum_{kh, kw, c} x[p + (kh, kw), c] w[kh, kw, c, oc]   (+ bias, relu)
 *     backward data    dx = the same loop over dy padded by kh-1/kw-1, with the
 *                      kernel rotated by 180 degrees and transposed (c <-> oc);
 *                      strided, in phases of dx pixels that take the same taps
 *                      (strided_dx), each a stride-1 sweep over dy
 *     backward filter  dw[kh, kw, c, oc] += sum_p x[p + (kh, kw), c] dy[p, oc]
 * Samples are split between the OpenMP threads: the forward hands them out
 * one at a time (schedule(dynamic): each output is one thread's, so the
 * result does not depend on who took it, and a thread whose core is shared
 * with another process takes fewer); the backward hands out parts of
 * consecutive samples, each summing its own dw, added in part order at the
 * end (dw_parts: the same result for any thread count). The ReLU gradient
 * and the bias gradient are one pass that also writes the padded dy.
 * Followed by a max pooling (fl_cpu_conv2d_maxpool_*), the forward pools
 * each band of rows while it is in cache, and the backward builds dy from
 * the pooling's gradient per sample instead of reading a full-size dy.
 *
 * A dilated convolution runs here too: taps dil_h rows apart are the segments; with dil_w > 1, one call per
 * kernel column (fwd_tile), in the forward and the data gradient; the filter gradient's tiles are one kernel
 * position's channels.
 *
 * Otherwise (no AVX-512, groups, a stride larger than the kernel or than 4, rows of fewer than 6 output pixels
 * in the backward), a
 * convolution is a GEMM per chunk of samples: im2col turns the chunk into
 * rows of kh*kw*c patch values (the taps dil_h/dil_w apart) so that,
 * reading the kernel as a [K, oc] matrix,
 *     forward          y[rows, oc]  = col[rows, K] @ w[K, oc]   (+ bias, act)
 *     backward filter  dw[K, oc]   += col^T @ dy
 *     backward data    dcol[rows,K] = dy @ w^T, then col2im adds into dx
 * With groups, each group g is the same three GEMMs on its own im2col of
 * channels [g*cg, (g+1)*cg) (K = kh*kw*cg) and its own column block of w,
 * y and dy (ldb/ldc = oc): no multiply by the zeros outside the groups.
 * Chunks run in parallel (one OpenMP thread each, OpenBLAS single-threaded
 * inside a parallel region; in the backward, runs of chunks form the parts
 * that sum dw), small enough that col stays in cache and the
 * bias/activation epilogue runs on data that is still hot.
 */
#include "cpu_fastmath.h"
#include "cpu_internal.h"
#include "cpu_simd.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* Threads for the convolutions: at most the cores. The workspace is cut
 * into max(threads, cores) per-thread slices when the graph reserves it, so
 * every thread has its slice even if fl_set_num_threads changed since. */
static int conv_threads(void) {
    int t = fl_cpu_threads(), p = omp_get_num_procs();
    return t < p ? t : p;
}
/* the same for choices that change the sums (Winograd or not): the configured threads, not those in use */
static int conv_threads_configured(void) {
    int t = fl_cpu_threads_configured(), p = omp_get_num_procs();
    return t < p ? t : p;
}
static int ws_slices(void) {
    int t = fl_cpu_threads(), p = omp_get_num_procs();
    return t > p ? t : p;
}

/* Output rows per chunk; FLYNN_CONV_ROWS overrides (for benchmarking). */
static int64_t chunk_samples(const fl_conv_desc *d) {
    static int64_t target = 0;
    if (target == 0) {
        const char *e = getenv("FLYNN_CONV_ROWS");
        int64_t t = e ? atoll(e) : 0;
        target = t > 0 ? t : 512;
    }
    int64_t per = (int64_t)d->oh * d->ow;
    int64_t cs = target / (per > 0 ? per : 1);
    if (cs < 1) cs = 1;
    /* keep at least 2 chunks per core when the batch allows (cores, not
     * threads: the chunk size, and so the workspace, must not change) */
    int64_t nt = omp_get_num_procs();
    while (cs > 1 && (d->n + cs - 1) / cs < 2 * nt) cs /= 2;
    return cs;
}

/* Rows of the kernel seen as a [K, oc] matrix: kh*kw*(c/groups). */
static size_t conv_k(const fl_conv_desc *d) { return (size_t)d->kh * d->kw * (d->c / fl_conv_groups(d)); }

static size_t thread_ws_floats(const fl_conv_desc *d, int64_t cs) {
    size_t K = conv_k(d);
    size_t rows = (size_t)cs * d->oh * d->ow;
    size_t f = rows * K;
    return (f + 15) & ~(size_t)15;
}

/* The filter gradient's partial sums. The batch is cut into parts of
 * consecutive samples; a part is summed into its own dw + db, in sample
 * order, by whichever thread takes it, and the parts are then added in
 * part order. So the result depends neither on the thread count nor on
 * which thread took which part, and a thread whose core another process
 * shares takes fewer parts instead of holding the others at the barrier
 * (a split in halves up front ran at the speed of the slower thread).
 * Four parts per core; fewer where their sums would pass 64 MB, never
 * fewer than one per core. The count depends on the shape and the cores
 * only: the workspace is sized for it. */
static size_t part_floats(const fl_conv_desc *d) {
    /* db: oc floats for Conv2D, c for Conv2DTranspose */
    size_t f = (size_t)d->kh * d->kw * d->c * d->oc + (size_t)(d->oc > d->c ? d->oc : d->c);
    return (f + 15) & ~(size_t)15;
}
static int dw_parts(const fl_conv_desc *d) {
    const int p = omp_get_num_procs();
    int np = 4 * p;
    while (np > p && (size_t)np * part_floats(d) > ((size_t)16 << 20)) np--;
    return np;
}
/* Parts in use for a batch of nitems (samples or chunks of samples): part k
 * holds items [part_start(k), part_start(k + 1)). */
static int parts_used(const fl_conv_desc *d, int64_t nitems) {
    int np = dw_parts(d);
    return nitems < np ? (int)(nitems > 0 ? nitems : 1) : np;
}
static int64_t part_start(int64_t nitems, int np, int k) { return nitems * k / np; }
/* Part k's sums (dw, then db), zeroed for its samples to add into. */
static float *part_sums(const fl_conv_desc *d, float *parts, int k) {
    const size_t pf = part_floats(d);
    float *p = parts + (size_t)k * pf;
    memset(p, 0, pf * sizeof(float));
    return p;
}
/* The GEMM path's backward workspace: the parts, then the per-thread slices. */
static float *gemm_bwd_slices(const fl_conv_desc *d, void *ws) {
    return (float *)ws + (size_t)dw_parts(d) * part_floats(d);
}

/* dw = the sum of the parts' first nw floats, db (if not NULL) of the nb
 * after them, each element in part order. */
static void reduce_parts(const fl_conv_desc *d, const float *parts, int np, size_t nw, size_t nb, float *dw,
                         float *db) {
    const size_t pf = part_floats(d);
    const int64_t n = (int64_t)(nw + nb);
#pragma omp parallel for schedule(dynamic, 4096) num_threads(n * np < 65536 ? 1 : conv_threads())
    for (int64_t i = 0; i < n; i++) {
        float s = parts[i];
        for (int k = 1; k < np; k++) s += parts[(size_t)k * pf + (size_t)i];
        if ((size_t)i < nw) dw[i] = s;
        else if (db) db[(size_t)i - nw] = s;
    }
}

/* ------------------------------------------------ direct convolution */

/* The input as the direct loops read it: padded when the convolution pads. */
typedef struct conv_geom {
    int hp, wp;         /* padded input size */
    int pad;            /* any padding at all */
    int copy;           /* each sample copied into the thread's buffer (pad_sample): padding, or d->pre */
    int hd, wd;         /* padded dy for the data gradient: h+kh-1, w+kw-1 at stride 1 (strided: below) */
    int offh, offw;     /* where dy starts inside it */
} conv_geom;

static int floor_div(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
static int max0(int a) { return a > 0 ? a : 0; }

static conv_geom geom(const fl_conv_desc *d) {
    conv_geom g;
    g.hp = (d->oh - 1) * d->sh + (d->kh - 1) * fl_conv_dil_h(d) + 1; /* the kernel's extent, dilated */
    g.wp = (d->ow - 1) * d->sw + (d->kw - 1) * fl_conv_dil_w(d) + 1;
    if (g.hp < d->h + d->pt) g.hp = d->h + d->pt;
    if (g.wp < d->w + d->pl) g.wp = d->w + d->pl;
    g.pad = d->pt || d->pl || g.hp != d->h || g.wp != d->w;
    g.copy = g.pad || d->pre;
    const int ekh = (d->kh - 1) * fl_conv_dil_h(d), ekw = (d->kw - 1) * fl_conv_dil_w(d); /* extent - 1 */
    g.hd = d->h + ekh;
    g.wd = d->w + ekw;
    g.offh = ekh - d->pt;
    g.offw = ekw - d->pl;
    if (d->sh > 1 || d->sw > 1) { /* dy with the rows and columns around it that a strided dx's taps reach (never
                                   * dilated: Keras refuses both) */
        g.offh = max0(floor_div(d->kh - 1 - d->pt, d->sh));
        g.offw = max0(floor_div(d->kw - 1 - d->pl, d->sw));
        g.hd = g.offh + d->oh + max0(floor_div(d->h - 1 + d->pt, d->sh) - (d->oh - 1));
        g.wd = g.offw + d->ow + max0(floor_div(d->w - 1 + d->pl, d->sw) - (d->ow - 1));
    }
    return g;
}

static int dilated(const fl_conv_desc *d) { return fl_conv_dil_h(d) > 1 || fl_conv_dil_w(d) > 1; }

/* Grouped convolutions take the im2col path. Dilated ones run on the direct kernels too: a kernel row's taps
 * dil_h input rows apart are its segments, and with dil_w > 1 each kernel column is a call of its own
 * (fwd_tile); in the backward the filter gradient's rows are a kernel position's channels, and the data
 * gradient the same dilated loop over dy. */
static int direct_fwd_ok(const fl_conv_desc *d) { return fl_cpu_direct() && d->oc > 0 && fl_conv_groups(d) == 1; }

/* The direct kernels' and Winograd's stores take a LeakyReLU's slope (every forward where they run); the GEMM
 * path does not. */
int fl_cpu_conv_slope(const fl_conv_desc *d) { return direct_fwd_ok(d); }

/* The backward's tiles run along an output row, as the forward's: a row of fewer pixels than the kernels' 6-row
 * tile (the deep stages of a ResNet50 or a MobileNet at 64x64: 4x4 and 2x2) fills part of one, and the
 * batch's im2col GEMM wins there (ResNet50 training at 32, 64x64: 64 -> 136 samples/s; MobileNet 389 -> 626;
 * EfficientNetB0 297 -> 323). The forward keeps the direct kernels there (the GEMM lost in predict: ResNet50
 * at 32 343 -> 321, at batch 1 106 -> 84). A Conv1D's one-column rows are tiled down the steps instead. */
#define DIRECT_BWD_MIN_OW 6

/* The largest stride whose data gradient the direct kernels take (in phases: strided_dx) */
#define DIRECT_BWD_MAX_STRIDE 4

/* The data gradient needs padding of at most kernel-1; strided (not a Conv1D's one-column rows), a kernel at
 * least as large as the stride, so that every phase has a tap. */
static int direct_bwd_ok(const fl_conv_desc *d, int need_dx) {
    if (!fl_cpu_direct() || fl_conv_groups(d) != 1 || (d->ow != 1 && d->ow < DIRECT_BWD_MIN_OW)) return 0;
    if (dilated(d) && (d->sh > 1 || d->sw > 1)) return 0;
    if (!need_dx) return 1;
    if (d->sh > 1 || d->sw > 1)
        return d->w > 1 && d->sh <= DIRECT_BWD_MAX_STRIDE && d->sw <= DIRECT_BWD_MAX_STRIDE && d->kh >= d->sh &&
               d->kw >= d->sw && d->pt <= d->kh - 1 && d->pl <= d->kw - 1;
    conv_geom g = geom(d);
    return g.offh >= 0 && g.offw >= 0 && g.offh + d->oh <= g.hd && g.offw + d->ow <= g.wd;
}

/* A normalisation's affine and ReLU formed as the input is read (d->pre): where the forward and the
 * backward both take the direct kernels (or Winograd). They copy each sample into the thread's buffer
 * (pad_sample, as they do to pad it), applying it; Winograd's input transform applies it as it loads. Not on
 * the GEMM path. */
int fl_cpu_conv_pre(const fl_conv_desc *d, int depthwise) {
    return depthwise || (direct_fwd_ok(d) && direct_bwd_ok(d, 1)); /* the depthwise kernels take any shape */
}

/* The data gradient as a forward convolution: over dy padded by kh-1/kw-1
 * (g->hd x g->wd, oc channels, no further padding), with the kernel
 * rotated and transposed, giving dx (h x w x c). */
static fl_conv_desc dx_desc(const fl_conv_desc *d, const conv_geom *g) {
    fl_conv_desc e = {0};
    e.n = 1;
    e.h = g->hd, e.w = g->wd, e.c = d->oc;
    e.oh = d->h, e.ow = d->w, e.oc = d->c;
    e.kh = d->kh, e.kw = d->kw, e.sh = 1, e.sw = 1;
    e.dil_h = d->dil_h, e.dil_w = d->dil_w;
    e.act = FL_ACT_LINEAR;
    return e;
}

/* Whether the forward, and the data gradient, may run as Winograd F(2x2,
 * 3x3): the workspace holds its blocks whenever they may (whatever the
 * batch, which can be smaller at the last step). */
static int wino_fwd_shape(const fl_conv_desc *d) { return fl_wino_ok(d); }
static int wino_bwd_shape(const fl_conv_desc *d) {
    conv_geom g = geom(d);
    fl_conv_desc e = dx_desc(d, &g);
    return d->sh == 1 && d->sw == 1 && !dilated(d) && fl_wino_ok(&e); /* (the forward takes dilation) */
}
/* Whether they do: only with at least two samples per thread. With fewer
 * (inference at batch 1), the work of a thread is a band of rows of one
 * sample, a few tiles that cannot pay for streaming the transformed kernel
 * (16/9 of the kernel's size) from L2 for each band, nor for transforming it
 * on every call: ResNet-20's predict at batch 1 fell from ~780 to ~420
 * samples/s with it. */
static int wino_fwd(const fl_conv_desc *d) { return wino_fwd_shape(d) && d->n >= 2 * conv_threads_configured(); }
static int wino_bwd(const fl_conv_desc *d) { return wino_bwd_shape(d) && d->n >= 2 * conv_threads_configured(); }

/* A 1x1 convolution without padding (nor d->pre) whose samples have fewer
 * output pixels than this runs its forward over the pixels of several
 * samples as one row of tiles (the flat tiles of direct_fwd_rows), the
 * strided ones first gathered: ResNet50's 1x1 convolutions at 64x64 (8x8 to
 * 2x2 outputs) filled 6-row tiles with 2 to 5 rows a sample, each tile
 * reading its 64 filters' columns of the kernel again. Each pixel's sums
 * are the same either way. */
#define FLAT_PIXELS 64
static int flat_1x1(const fl_conv_desc *d, const conv_geom *g) {
    return d->kh == 1 && d->kw == 1 && !g->copy && (int64_t)d->oh * d->ow < FLAT_PIXELS;
}
/* Samples per item where samples are grouped (flat_group, Winograd's fl_wino_group): grp, but no more than
 * leave two items a thread */
static int64_t group_items(int64_t grp, int64_t n, int nt) {
    return grp > 1 && grp * 2 * nt > n ? (n + 2 * nt - 1) / (2 * nt) : grp;
}
/* Samples per item there: enough for FLAT_PIXELS pixels */
static int64_t flat_group(const fl_conv_desc *d, const conv_geom *g, int nt) {
    if (!flat_1x1(d, g)) return 1;
    const int64_t px = (int64_t)d->oh * d->ow;
    return group_items((FLAT_PIXELS + px - 1) / px, d->n, nt);
}

/* Per-thread floats of the direct path: the copy of x (or Winograd's blocks in
 * the forward, or the gathered pixels of a strided flat_1x1), padded dy,
 * Winograd's blocks for dx. */
static size_t direct_thread_floats(const fl_conv_desc *d, int backward) {
    conv_geom g = geom(d);
    size_t f = g.copy ? (size_t)g.hp * g.wp * d->c : 0;
    if (backward) {
        f += (size_t)g.hd * g.wd * d->oc;
        if (wino_bwd_shape(d)) f += fl_wino_scratch_floats(d->oc, d->c);
    } else {
        if (wino_fwd_shape(d) && fl_wino_scratch_floats(d->c, d->oc) > f) f = fl_wino_scratch_floats(d->c, d->oc);
        if (flat_1x1(d, &g) && (d->sh > 1 || d->sw > 1)) f = (size_t)2 * FLAT_PIXELS * d->c; /* < 2 groups' px */
    }
    return (f + 15) & ~(size_t)15;
}

/* Shared floats at the start of the workspace, before the per-thread
 * slices: the backward's rotated kernel, its Winograd transform and the
 * filter gradient's parts; the forward's Winograd transform of the kernel. */
static size_t rot_floats(const fl_conv_desc *d) { return ((size_t)d->kh * d->kw * d->c * d->oc + 15) & ~(size_t)15; }
static size_t direct_shared_floats(const fl_conv_desc *d, int backward) {
    if (!backward) return wino_fwd_shape(d) ? fl_wino_u_floats(d->c, d->oc) : 0;
    size_t f = rot_floats(d);
    if (wino_bwd_shape(d)) f += fl_wino_u_floats(d->oc, d->c);
    return f + (size_t)dw_parts(d) * part_floats(d);
}

size_t fl_cpu_conv_workspace(const fl_conv_desc *dd, int backward) {
    /* training: room for the copy of x that d->pre makes (fl_cpu_conv_pre) where no padding makes one anyway
     * (the pointer only says that there is one) */
    fl_conv_desc e = *dd;
    if (backward && !e.pre && fl_cpu_conv_pre(&e, 0)) e.pre = (const float *)dd;
    const fl_conv_desc *d = &e;
    int64_t cs = chunk_samples(d);
    size_t gemm = thread_ws_floats(d, cs) * (size_t)ws_slices();
    if (backward) gemm += (size_t)dw_parts(d) * part_floats(d);
    /* the forward's slices with and without that copy: without it, a strided 1x1 convolution's forward may
     * gather several samples' pixels (flat_group), more than the copy of one sample */
    const size_t tf = direct_thread_floats(d, 0), tf0 = direct_thread_floats(dd, 0);
    size_t direct = (tf > tf0 ? tf : tf0) * (size_t)ws_slices() + direct_shared_floats(d, 0);
    if (backward) { /* a training step runs the forward in the same workspace */
        size_t bwd = direct_thread_floats(d, 1) * (size_t)ws_slices() + direct_shared_floats(d, 1);
        if (bwd > direct) direct = bwd;
    }
    size_t f = fl_cpu_direct() ? (gemm > direct ? gemm : direct) : gemm;
    return f * sizeof(float);
}

/* Copies sample x (h, w, c) into xp (hp, wp, c) at (pt, pl), through d->pre where given; the border is
 * zero. Only the border is zeroed (the rows above and below, each row's pixels left and right of the copy):
 * the sample is written once, not zeroed whole first. */
static void pad_sample(const fl_conv_desc *d, const conv_geom *g, const float *x, float *xp) {
    const size_t C = (size_t)d->c, row = (size_t)g->wp * C;
    const size_t left = (size_t)d->pl * C, body = (size_t)d->w * C, right = row - left - body;
    const int below = g->hp - d->pt - d->h;
    memset(xp, 0, (size_t)d->pt * row * sizeof(float));
    for (int ih = 0; ih < d->h; ih++) {
        float *r = xp + (size_t)(ih + d->pt) * row;
        if (left) memset(r, 0, left * sizeof(float));
        if (d->pre) fl_cpu_bn_apply_rows(d->w, d->c, d->pre, d->pre_act, x + (size_t)ih * body, r + left);
        else memcpy(r + left, x + (size_t)ih * body, body * sizeof(float));
        if (right) memset(r + left + body, 0, right * sizeof(float));
    }
    if (below > 0) memset(xp + (size_t)(d->pt + d->h) * row, 0, (size_t)below * row * sizeof(float));
}

/* A convolution's tile (rows: output pixels t->as apart; segments: the kh
 * kernel rows; steps: kw x ci) in the micro-kernel's taps form where it may
 * take it (3 taps along a stride-1 row, or down a Conv1D's steps; one
 * vector of output channels; not dilated: its taps are not neighbours); returns the rows per tile to use. */
static int conv_taps(fl_simd_tile *t, const fl_conv_desc *d, int ci) {
    const int kh = d->kh, kw = d->kw;
    if (dilated(d) || !fl_simd_taps_ok(3, t->cols)) return fl_simd_max_rows(t->cols);
    if (kw == 3 && t->as == ci && t->aj == 1) {
        t->nj = ci;
        t->btap = (int64_t)ci * t->bj;
    } else if (kw == 1 && kh == 3 && t->as == t->aseg && t->aj == 1) {
        t->nseg = 1;
        t->btap = t->bseg;
    } else {
        return fl_simd_max_rows(t->cols);
    }
    t->taps = 3;
    return fl_simd_max_rows_taps(t->cols);
}

/* Runs a tile of direct_fwd_rows (or of a data gradient, d its dx_desc): with dil_w > 1 (a kernel row's taps
 * not contiguous), one call per kernel column, each adding into the tile, the bias with the first and the
 * residual, the ReLU and the gate with the last. */
static void fwd_tile(const fl_conv_desc *d, const fl_simd_tile *t0, int rows) {
    const int DW = fl_conv_dil_w(d);
    if (DW == 1) { fl_simd_run(t0, rows); return; }
    fl_simd_tile t = *t0;
    for (int kc = 0; kc < d->kw; kc++) {
        const int last = kc + 1 == d->kw;
        t.a = t0->a + (size_t)kc * DW * d->c;
        t.b = t0->b + (size_t)kc * d->c * t0->bj;
        t.accumulate = kc > 0 || t0->accumulate;
        t.relu = last ? t0->relu : 0;
        t.res = last ? t0->res : NULL;
        t.gate = last ? t0->gate : NULL;
        fl_simd_run(&t, rows);
    }
}

/* d->res at floats off, or NULL */
#define RES_AT(d, off) ((d)->res ? (d)->res + (size_t)(off) : NULL)

/* The K groups of a tile's products (its kernel rows, or a 1x1's input channels) whose weights, for one block
 * of output channels, fit in half the L2, so that every pixel tile of the rows passes over a group while it is
 * there: with all of K a tile, a 512 -> 512 3x3 convolution's 1.2 MB block of weights was streamed from the
 * L3 once per row of its 4x4 or 8x8 output (VGG16's deep stages at batch 1). Only where there is more than
 * one pixel tile to share it; none in the taps form (16 or fewer channels). */
#define DIRECT_K_GROUP_BYTES (512 * 1024)
static int k_groups(const fl_simd_tile *t, int ntiles) {
    if (t->taps > 1 || ntiles < 2) return 1;
    const double bytes = (double)t->nseg * t->nj * t->cols * sizeof(float);
    int g = (int)((bytes + DIRECT_K_GROUP_BYTES - 1) / DIRECT_K_GROUP_BYTES);
    const int most = t->nseg > 1 ? t->nseg : t->nj / 64; /* whole kernel rows; or steps of at least 64 */
    return g < 1 ? 1 : g > most ? (most > 0 ? most : 1) : g;
}
/* Group k of ng of tile t: its segments (or steps), starting from C where it is not the first, the bias with
 * the first, the epilogue (residual, ReLU, gate) with the last. The sums are the same as all of K at once:
 * each element's products in (segment, step) order, stored and read back between groups. Returns t itself
 * where there is one group (no copy of the tile for each of its calls), else u filled in. */
static inline const fl_simd_tile *k_group(const fl_simd_tile *t, int k, int ng, fl_simd_tile *u) {
    if (ng == 1) return t;
    *u = *t;
    const int split_seg = t->nseg > 1, n = split_seg ? t->nseg : t->nj;
    const int s0 = (int)((int64_t)n * k / ng), s1 = (int)((int64_t)n * (k + 1) / ng);
    if (split_seg) {
        u->nseg = s1 - s0;
        u->a += (int64_t)s0 * t->aseg;
        u->b += (int64_t)s0 * t->bseg;
    } else {
        u->nj = s1 - s0;
        u->a += (int64_t)s0 * t->aj;
        u->b += (int64_t)s0 * t->bj;
    }
    u->accumulate = k > 0 || t->accumulate;
    if (k + 1 < ng) {
        u->relu = 0;
        u->res = NULL;
        u->gate = NULL;
    }
    return u;
}

/* Output rows oh0..oh1, channels [oc_lo, oc_hi) (64 apart but the last), of one sample: y = act(conv(xs) + b +
 * rs); xs is the (padded) sample, rs its residual laid out as ys (d->res; NULL: none). */
static void direct_fwd_block(const fl_conv_desc *d, const conv_geom *g, const float *xs, const float *w,
                             const float *b, float *ys, const float *rs, int oh0, int oh1, int oc_lo, int oc_hi) {
    const int C = d->c, OC = d->oc;
    const int relu = d->act == FL_ACT_RELU || d->act == FL_ACT_RELU6; /* in the micro-kernel's store */
    const int flat = d->kh == 1 && d->kw == 1 && d->sh == 1 && d->sw == 1 && g->wp == d->ow && g->hp == d->oh;
    for (int oc0 = oc_lo; oc0 < oc_hi; oc0 += 64) {
        fl_simd_tile t = {0};
        t.cols = oc_hi - oc0 < 64 ? oc_hi - oc0 : 64;
        t.as = (int64_t)d->sw * C;
        t.aj = 1;
        t.aseg = (int64_t)fl_conv_dil_h(d) * g->wp * C;
        t.nseg = d->kh;
        t.nj = (fl_conv_dil_w(d) > 1 ? 1 : d->kw) * C; /* dilated: one kernel column a call (fwd_tile) */
        t.b = w + oc0;
        t.bj = OC;
        t.bseg = (int64_t)d->kw * C * OC;
        t.ldc = OC;
        t.bias = d->has_bias && b ? b + oc0 : NULL;
        t.relu = relu;
        t.relu_max = d->act == FL_ACT_RELU6 ? 6.0f : 0.0f;
        t.slope = relu ? d->slope : 0.0f;
        if (d->ow == 1 || flat) {
            /* a Conv1D (h = steps, w = 1): tiles run down the rows, which
             * are sh*wp*C apart in x and OC apart in y, instead of one
             * pixel per tile; a 1x1 stride-1 convolution without padding
             * (flat): its pixels are C apart in x, so tiles run over the
             * band's pixels as one row (a 4x4 or 2x2 output, ResNet50's
             * deep stages at 64x64, filled a 6-row tile in part per row).
             * Each pixel's sum is the same either way. */
            t.as = flat ? C : (int64_t)d->sh * g->wp * C;
            const int rm = conv_taps(&t, d, C);
            const int per = flat ? d->ow : 1, nr = (oh1 - oh0) * per, ntr = fl_tiles(nr, rm);
            const int ng = k_groups(&t, ntr);
            for (int kg = 0; kg < ng; kg++)
                for (int k = 0; k < ntr; k++) {
                    const int r0 = oh0 * per + (int)fl_tile_start(nr, ntr, k);
                    const int r1 = oh0 * per + (int)fl_tile_start(nr, ntr, k + 1);
                    t.a = xs + (size_t)r0 * (size_t)t.as;
                    t.c = ys + (size_t)r0 * OC + oc0;
                    t.res = rs ? rs + (t.c - ys) : NULL;
                    fl_simd_tile u;
                    fwd_tile(d, k_group(&t, kg, ng, &u), r1 - r0);
                }
            continue;
        }
        const int rm = conv_taps(&t, d, C), nt = fl_tiles(d->ow, rm);
        const int ng = k_groups(&t, nt * (oh1 - oh0));
        for (int kg = 0; kg < ng; kg++)
            for (int oh = oh0; oh < oh1; oh++)
                for (int k = 0; k < nt; k++) {
                    int ow0 = (int)fl_tile_start(d->ow, nt, k), ow1 = (int)fl_tile_start(d->ow, nt, k + 1);
                    t.a = xs + ((size_t)oh * d->sh * g->wp + (size_t)ow0 * d->sw) * C;
                    t.c = ys + ((size_t)oh * d->ow + ow0) * OC + oc0;
                    t.res = rs ? rs + (t.c - ys) : NULL;
                    fl_simd_tile u;
                    fwd_tile(d, k_group(&t, kg, ng, &u), ow1 - ow0);
                }
    }
    if (d->act != FL_ACT_LINEAR && !relu) {
        const int64_t px = (int64_t)(oh1 - oh0) * d->ow;
        float *y0 = ys + (size_t)oh0 * d->ow * OC;
        if (oc_lo == 0 && oc_hi == OC) fl_cpu_bias_act_rows(px, OC, NULL, d->act, y0);
        else
            for (int64_t p = 0; p < px; p++) fl_cpu_bias_act_rows(1, oc_hi - oc_lo, NULL, d->act, y0 + p * OC + oc_lo);
    }
}

/* Output rows oh0..oh1 of one sample, every channel */
static void direct_fwd_rows(const fl_conv_desc *d, const conv_geom *g, const float *xs, const float *w,
                            const float *b, float *ys, const float *rs, int oh0, int oh1) {
    direct_fwd_block(d, g, xs, w, b, ys, rs, oh0, oh1, 0, d->oc);
}

/* Winograd's forward: the kernel transformed at the start of ws; returns
 * where the per-thread slices (direct_thread_floats(d, 0) apart) begin. */
static float *wino_fwd_kernel(const fl_conv_desc *d, const float *w, void *ws) {
    fl_wino_weights(d->c, d->oc, w, (float *)ws);
    return (float *)ws + direct_shared_floats(d, 0);
}

/* Winograd's forward: whole samples, handed out one at a time, or as many
 * at a time as fill a block of tiles where a sample's tiles are fewer. */
static void wino_fwd_run(const fl_conv_desc *d, const float *x, const float *w, const float *b, float *y, void *ws) {
    const size_t in_sz = (size_t)d->h * d->w * d->c, out_sz = (size_t)d->oh * d->ow * d->oc;
    const float *u = (const float *)ws;
    float *slices = wino_fwd_kernel(d, w, ws);
    const size_t tws = direct_thread_floats(d, 0);
    const int nt = conv_threads();
    const int64_t grp = group_items(fl_wino_group(d), d->n, nt);
    const int64_t items = (d->n + grp - 1) / grp;
#pragma omp parallel for schedule(dynamic) num_threads(nt)
    for (int64_t it = 0; it < items; it++) {
        const int64_t n = it * grp, ns = d->n - n < grp ? d->n - n : grp;
        fl_wino_samples(d, x + (size_t)n * in_sz, u, b, y + (size_t)n * out_sz, RES_AT(d, n * out_sz), (int)ns, 0,
                        NULL, slices + (size_t)fl_cpu_thread_id() * tws);
    }
}

/* A sample's weights outweigh its (padded) input, and there are several blocks of 64 output channels: at a
 * few samples the threads split the channels, each reading its part of the weights once, instead of the rows
 * (each read all of them, once per row of pixel tiles: VGG16's 512-channel stages at batch 1 streamed 9 MB of
 * weights from the L3 four to eight times a layer). */
static int weight_heavy(const fl_conv_desc *d, const conv_geom *g) {
    return d->oc > 64 && (double)d->kh * d->kw * d->c * d->oc > (double)g->hp * g->wp * d->c;
}

static void direct_fwd(const fl_conv_desc *d, const float *x, const float *w, const float *b, float *y, void *ws) {
    if (wino_fwd(d)) { wino_fwd_run(d, x, w, b, y, ws); return; }
    const conv_geom g = geom(d);
    const size_t in_sz = (size_t)d->h * d->w * d->c, out_sz = (size_t)d->oh * d->ow * d->oc;
    const size_t tws = direct_thread_floats(d, 0);
    const int nt = conv_threads();
    if (d->n < 2 * nt && weight_heavy(d, &g)) {
        /* few samples, more weights than input: blocks of 64 output channels (and bands of rows where the
         * blocks are fewer than two a thread), each passing its rows' pixel tiles over its part of the
         * weights a K group at a time (direct_fwd_block) */
        const int64_t ocb = (d->oc + 63) / 64;
        int bands = ocb >= 2 * nt ? 1 : (int)((2 * nt + ocb - 1) / ocb);
        if (bands > d->oh) bands = d->oh;
        for (int64_t n = 0; n < d->n; n++) {
            const float *xs = x + (size_t)n * in_sz;
            if (g.copy) {
                pad_sample(d, &g, xs, (float *)ws);
                xs = (const float *)ws;
            }
#pragma omp parallel for schedule(dynamic) num_threads(nt)
            for (int64_t it = 0; it < ocb * bands; it++) {
                const int ob = (int)(it / bands), bd = (int)(it % bands);
                const int oc0 = ob * 64, oc1 = oc0 + 64 < d->oc ? oc0 + 64 : d->oc;
                direct_fwd_block(d, &g, xs, w, b, y + (size_t)n * out_sz, RES_AT(d, n * out_sz),
                                 d->oh * bd / bands, d->oh * (bd + 1) / bands, oc0, oc1);
            }
        }
        return;
    }
    if (d->n < 2 * nt) {
        /* few samples (inference on a small batch): split output rows, in
         * bands of rows where a row is one pixel (Conv1D). A padded sample
         * is copied once, into the first thread's slice, and its rows
         * split after (one sample at a time ran on one thread: a U-Net's
         * "same" convolutions at batch 1). */
        const int band = d->ow == 1 ? (d->oh + 2 * nt - 1) / (2 * nt) : 1;
        const int per = (d->oh + band - 1) / band;
        const int64_t copies = g.copy ? d->n : 1, items = (g.copy ? 1 : d->n) * per;
        for (int64_t c = 0; c < copies; c++) {
            if (g.copy) pad_sample(d, &g, x + (size_t)c * in_sz, (float *)ws);
#pragma omp parallel for schedule(dynamic) num_threads(nt)
            for (int64_t it = 0; it < items; it++) {
                const int64_t n = c + it / per;
                const int oh = (int)(it % per) * band, oh1 = oh + band < d->oh ? oh + band : d->oh;
                const float *xs = g.copy ? (const float *)ws : x + (size_t)n * in_sz;
                direct_fwd_rows(d, &g, xs, w, b, y + (size_t)n * out_sz, RES_AT(d, n * out_sz), oh, oh1);
            }
        }
        return;
    }
    const int64_t grp = flat_group(d, &g, nt);
    if (grp > 1) {
        /* the pixels of grp samples as one flat band: a 1x1 stride-1 convolution over an oh x ow input */
        fl_conv_desc f = *d;
        f.h = d->oh;
        f.w = d->ow;
        f.sh = f.sw = 1;
        const conv_geom gf = geom(&f);
        const int strided = d->sh > 1 || d->sw > 1;
        const int64_t items = (d->n + grp - 1) / grp;
#pragma omp parallel for schedule(dynamic) num_threads(nt)
        for (int64_t it = 0; it < items; it++) {
            const int64_t n0 = it * grp, ns = d->n - n0 < grp ? d->n - n0 : grp;
            const float *xs = x + (size_t)n0 * in_sz;
            if (strided) {
                float *xp = (float *)ws + (size_t)fl_cpu_thread_id() * tws, *o = xp;
                for (int64_t k = 0; k < ns; k++)
                    for (int i = 0; i < d->oh; i++)
                        for (int j = 0; j < d->ow; j++, o += d->c)
                            memcpy(o, xs + (size_t)k * in_sz + ((size_t)i * d->sh * d->w + (size_t)j * d->sw) * d->c,
                                   (size_t)d->c * sizeof(float));
                xs = xp;
            }
            direct_fwd_rows(&f, &gf, xs, w, b, y + (size_t)n0 * out_sz, RES_AT(d, n0 * out_sz), 0, (int)(ns * d->oh));
        }
        return;
    }
#pragma omp parallel for schedule(dynamic) num_threads(nt)
    for (int64_t n = 0; n < d->n; n++) {
        const float *xs = x + (size_t)n * in_sz;
        if (g.copy) {
            float *xp = (float *)ws + (size_t)fl_cpu_thread_id() * tws;
            pad_sample(d, &g, xs, xp);
            xs = xp;
        }
        direct_fwd_rows(d, &g, xs, w, b, y + (size_t)n * out_sz, RES_AT(d, n * out_sz), 0, d->oh);
    }
}

/* fl_simd_relu_grad_colsum of the width in use (the same bits on both) */
static void relu_grad_colsum(int64_t rows, int n, int relu, const float *y, const float *src, float *dy, float *db) {
    if (fl_cpu_simd()) fl_simd_relu_grad_colsum(rows, n, relu, y, src, dy, db);
    else fl_avx2_relu_grad_colsum(rows, n, relu, y, src, dy, db);
}

/* dy of one sample times act'(y), its column sums added to db, written to
 * dst (row stride dst_row floats, dst_row >= ow*oc); dst may be dy itself.
 * One pass over each row: the copy, mask and sums together, or the copy
 * alone where there is neither an activation nor a bias (a convolution
 * before a BatchNormalization). */
static void prep_dy(const fl_conv_desc *d, const float *ys, const float *dys, float *dst, size_t dst_row, float *db) {
    const int OC = d->oc;
    const size_t row = (size_t)d->ow * OC;
    for (int oh = 0; oh < d->oh; oh++) {
        float *o = dst + (size_t)oh * dst_row;
        const float *s = dys + (size_t)oh * row;
        if (d->act == FL_ACT_LINEAR && !d->has_bias) {
            if (o != s) memcpy(o, s, row * sizeof(float));
        } else if (d->act == FL_ACT_RELU || d->act == FL_ACT_LINEAR) {
            relu_grad_colsum(d->ow, OC, d->act == FL_ACT_RELU, ys + (size_t)oh * row, s, o, d->has_bias ? db : NULL);
        } else {
            if (o != s) memcpy(o, s, row * sizeof(float));
            fl_cpu_act_grad_rows(d->ow, OC, d->act, ys + (size_t)oh * row, o, d->has_bias ? db : NULL);
        }
    }
}

/* Where the gradient of y comes from when a max pooling follows (NULL: dy). */
typedef struct pool_grad {
    const fl_conv_desc *pool;
    const float *pooled, *dpooled;
    const int32_t *argmax;
} pool_grad;

/* Whether the pooling's windows stay inside the input and do not overlap. */
static int pool_tiles(const fl_conv_desc *p) {
    return p->pt == 0 && p->pl == 0 && p->sh >= p->kh && p->sw >= p->kw && (p->oh - 1) * p->sh + p->kh <= p->h &&
           (p->ow - 1) * p->sw + p->kw <= p->w;
}

/* dst (oh x ow x oc, rows dst_row floats apart) = the gradient of y built
 * from the pooling's: dpooled * act'(pooled) at each window's argmax, 0
 * elsewhere; db += its column sums. */
static void unpool_grad(const fl_conv_desc *d, const pool_grad *pg, int64_t n, float *dst, size_t dst_row, float *db) {
    const fl_conv_desc *p = pg->pool;
    const size_t psz = (size_t)p->oh * p->ow * p->c, row = (size_t)d->ow * d->oc;
    if (p->sh != p->kh || p->sw != p->kw || p->oh * p->sh != d->oh || p->ow * p->sw != d->ow)
        for (int oh = 0; oh < d->oh; oh++) memset(dst + (size_t)oh * dst_row, 0, row * sizeof(float));
    (fl_cpu_simd() ? fl_simd_unpool_grad : fl_avx2_unpool_grad)(
        p->oh, p->ow, p->c, p->kh, p->kw, p->sh, p->sw, d->act, pg->pooled + (size_t)n * psz,
        pg->dpooled + (size_t)n * psz, pg->argmax + (size_t)n * psz, dst, (int64_t)dst_row, d->has_bias ? db : NULL);
}

/* dst (oh x ow x oc of sample n, rows dst_row floats apart) = the gradient of y built from the
 * BatchNormalization's after it (its dx, fl_bn_grad; y is its input), a row of pixels at a time while they are
 * in L1; db += its column sums. */
static void bn_grad_sample(const fl_conv_desc *d, const fl_bn_grad *bg, int64_t n, const float *y, float *dst,
                           size_t dst_row, float *db) {
    const int OC = d->oc;
    const size_t row = (size_t)d->ow * OC, off = (size_t)n * d->oh * row;
    for (int oh = 0; oh < d->oh; oh++) {
        const size_t o = off + (size_t)oh * row;
        float *r = dst + (size_t)oh * dst_row;
        fl_cpu_bn_dx_rows(d->ow, OC, bg, bg->g + o, y + o, r);
        if (d->has_bias && db) relu_grad_colsum(d->ow, OC, 0, NULL, r, r, db); /* prep_dy's sums */
    }
}

/* A strided convolution's data gradient (sh or sw > 1), in phases: the dx pixels whose row plus pt leaves
 * remainder rh mod sh, and whose column plus pl leaves rw mod sw, take the same taps, the kernel rows
 * kh = rh, rh + sh, ... and columns kw = rw, rw + sw, ..., and along a row those pixels, sw apart, read dy
 * one pixel apart: a stride-1 sweep over dy (the thread's padded copy, conv_geom's hd x wd) with a small
 * kernel of its own, stored sw pixels apart. pack_phases lays those kernels out in `shared` (their taps in
 * the order the sweep reads dy: kh and kw falling), each [kh][kw][oc][c], and their offsets in off[rh][rw]. */
typedef struct phase { int top, n, first; } phase; /* taps: the largest kh (kw), how many, dy's first row (column) */
static phase phase_of(int i, int pad, int k, int s) {
    const int r = (i + pad) % s, top = k - 1 - (k - 1 - r) % s;
    return (phase){top, top / s + 1, (i + pad - top) / s};
}

static void pack_phases(const fl_conv_desc *d, const float *w, float *shared, size_t off[][DIRECT_BWD_MAX_STRIDE]) {
    const int C = d->c, OC = d->oc, KW = d->kw;
    size_t at = 0;
    for (int rh = 0; rh < d->sh; rh++)
        for (int rw = 0; rw < d->sw; rw++) {
            /* the phase of remainders (rh, rw): that of pixel (rh - pt, rw - pl) mod the stride */
            const phase ph = phase_of(rh, 0, d->kh, d->sh), pw = phase_of(rw, 0, KW, d->sw);
            off[rh][rw] = at;
            for (int a = 0; a < ph.n; a++)
                for (int b = 0; b < pw.n; b++) {
                    const float *src = w + ((size_t)(ph.top - a * d->sh) * KW + (pw.top - b * d->sw)) * C * OC;
                    float *dst = shared + at + ((size_t)a * pw.n + b) * OC * C;
                    for (int c = 0; c < C; c++)
                        for (int oc = 0; oc < OC; oc++) dst[(size_t)oc * C + c] = src[(size_t)c * OC + oc];
                }
            at += (size_t)ph.n * pw.n * OC * C;
        }
}

/* dx of one sample (dxs; accumulate: added into) from its padded dy (dyp, g's geometry), gated by xg where
 * given */
static void strided_dx(const fl_conv_desc *d, const conv_geom *g, const float *dyp, const float *shared,
                       const size_t off[][DIRECT_BWD_MAX_STRIDE], float *dxs, int accumulate, const float *xg) {
    const int C = d->c, OC = d->oc, W = d->w, SW = d->sw;
    for (int ih = 0; ih < d->h; ih++) {
        const phase ph = phase_of(ih, d->pt, d->kh, d->sh);
        for (int rw = 0; rw < SW && rw < W; rw++) {
            const phase pw = phase_of(rw, d->pl, d->kw, SW);
            const int nq = (W - rw + SW - 1) / SW; /* the row's pixels rw, rw + sw, ... */
            const size_t o0 = ((size_t)ih * W + rw) * C;
            for (int c0 = 0; c0 < C; c0 += 64) {
                fl_simd_tile t = {0};
                t.cols = C - c0 < 64 ? C - c0 : 64;
                t.as = OC;
                t.aj = 1;
                t.aseg = (int64_t)g->wd * OC;
                t.nseg = ph.n;
                t.nj = pw.n * OC;
                t.b = shared + off[(ih + d->pt) % d->sh][(rw + d->pl) % SW] + c0;
                t.bj = C;
                t.bseg = (int64_t)pw.n * OC * C;
                t.ldc = (int64_t)SW * C;
                t.accumulate = accumulate;
                const int rm = fl_simd_max_rows(t.cols), ntile = fl_tiles(nq, rm);
                for (int k = 0; k < ntile; k++) {
                    const int j0 = (int)fl_tile_start(nq, ntile, k), j1 = (int)fl_tile_start(nq, ntile, k + 1);
                    t.a = dyp + ((size_t)(ph.first + g->offh) * g->wd + (size_t)(pw.first + j0 + g->offw)) * OC;
                    t.c = dxs + o0 + (size_t)j0 * SW * C + c0;
                    t.gate = xg ? xg + o0 + (size_t)j0 * SW * C + c0 : NULL;
                    fl_simd_run(&t, j1 - j0);
                }
            }
        }
    }
}

/* What the steps of direct_bwd share: its arguments, the workspace's pieces and the choices made once per call
 * (plan_direct_bwd), so that each step takes one pointer instead of a dozen arguments. */
typedef struct direct_bwd_plan {
    const fl_conv_desc *d;
    const float *x, *w, *y;
    float *dy, *dx;
    float dx_beta;
    int dx_mask;                /* multiply dx by (x > 0) */
    const pool_grad *pg;        /* the gradient of y comes from a max pooling (NULL: dy) */
    const fl_bn_grad *bg;       /* or from a BatchNormalization */
    conv_geom g;
    fl_conv_desc dd;            /* dx as a forward convolution over the padded dy (dx_desc) */
    fl_conv_desc dg;            /* the same over unpadded dy, for group_dx */
    size_t in_sz, out_sz;       /* floats of a sample of x (dx), of y (dy) */
    size_t nw;                  /* floats of the kernel: a part's dw, its db after it */
    size_t tws;                 /* floats of a thread's slice */
    float *shared;              /* the rotated kernel (strided: the phases' kernels, pack_phases) */
    float *ubwd;                /* its Winograd transform */
    float *parts;               /* the filter gradient's parts */
    float *slices;              /* one slice per thread (bwd_slice) */
    int np;                     /* parts in use */
    int strided;                /* sh or sw > 1: dx in phases (strided_dx) */
    int wino;                   /* dx by Winograd */
    int group_dx;               /* Winograd's dx of a part's samples in one call */
    size_t phase_off[DIRECT_BWD_MAX_STRIDE][DIRECT_BWD_MAX_STRIDE]; /* the phases' kernels in shared */
} direct_bwd_plan;

/* A thread's slice of the workspace: its copy of x (where g.copy), its padded dy, Winograd's scratch for dx. */
typedef struct bwd_slice { float *xp, *dyp, *wino_scratch; } bwd_slice;

/* The sizes and the workspace's pieces of a direct_bwd call (p's arguments set): the rotated kernel, its
 * Winograd transform and the parts first (shared by the threads), then one slice per thread; and which way dx
 * runs. */
static void plan_direct_bwd(direct_bwd_plan *p, void *ws) {
    const fl_conv_desc *d = p->d;
    const int C = d->c, OC = d->oc;
    p->g = geom(d);
    p->in_sz = (size_t)d->h * d->w * C;
    p->out_sz = (size_t)d->oh * d->ow * OC;
    p->nw = (size_t)d->kh * d->kw * C * OC;
    p->tws = direct_thread_floats(d, 1);
    p->shared = (float *)ws;
    p->slices = p->shared + direct_shared_floats(d, 1);
    p->wino = p->dx && wino_bwd(d);
    p->dd = dx_desc(d, &p->g);
    p->ubwd = p->shared + rot_floats(d);
    p->parts = p->ubwd + (wino_bwd_shape(d) ? fl_wino_u_floats(OC, C) : 0);
    p->np = parts_used(d, d->n);
    p->strided = d->sh > 1 || d->sw > 1;
    /* Winograd's data gradient of a part's samples together where a sample's tiles are fewer than a block and
     * the transformed kernel (16 c oc floats) outgrows 1 MB (the 8x8 and 4x4 stages of VGG16 at 64x64: each
     * sample's 16 or 4 tiles ran the 16 GEMMs alone, streaming a 512 -> 512 layer's 16 MB transformed kernel,
     * and the data gradient took four times the forward's time): dy is prepared in place, as without dx, and
     * the part's dx is one forward over its samples' dy (dg: dy unpadded, read as padded by offh/offw). A
     * kernel that stays in L2 keeps the per-sample padded copy, whose tiles need no border checks (ResNet-20's
     * 64-channel stage lost 8% grouped). A tile's sums do not depend on its block: the same bits. Winograd
     * runs at stride 1 only (wino_bwd_shape), so a strided dx is never grouped. */
    p->dg = p->dd;
    p->dg.h = d->oh;
    p->dg.w = d->ow;
    p->dg.pt = p->g.offh;
    p->dg.pl = p->g.offw;
    p->group_dx = p->wino && (size_t)16 * C * OC * sizeof(float) > ((size_t)1 << 20) && fl_wino_group(&p->dg) > 1;
}

/* w_rot[kh'][kw'][oc][c] = w[kh-1-kh'][kw-1-kw'][c][oc]: the kernel rotated by 180 degrees and transposed, as
 * the stride-1 data gradient reads it */
static void rotate_kernel(const fl_conv_desc *d, const float *w, float *rot) {
    const int C = d->c, OC = d->oc, KH = d->kh, KW = d->kw;
    for (int kh = 0; kh < KH; kh++)
        for (int kw = 0; kw < KW; kw++) {
            const float *src = w + ((size_t)(KH - 1 - kh) * KW + (KW - 1 - kw)) * C * OC;
            float *dst = rot + ((size_t)kh * KW + kw) * OC * C;
            for (int c = 0; c < C; c++)
                for (int oc = 0; oc < OC; oc++) dst[(size_t)oc * C + c] = src[(size_t)c * OC + oc];
        }
}

/* The kernel as the data gradient reads it, into p->shared, once before the samples: the strided phases'
 * kernels, or the rotated kernel and its Winograd transform. Nothing without dx. */
static void pack_dx_kernel(direct_bwd_plan *p) {
    if (p->dx && p->strided) {
        pack_phases(p->d, p->w, p->shared, p->phase_off);
    } else if (p->dx) {
        rotate_kernel(p->d, p->w, p->shared);
        if (p->wino) fl_wino_weights(p->d->oc, p->d->c, p->shared, p->ubwd);
    }
}

/* Step 1 of sample n: the gradient of y (dy * act'(y), or built from the pooling's or the BatchNormalization's
 * gradient) and its column sums added to db_t. Into the thread's padded dy (dyp) when dx is wanted, where the
 * data gradient reads it (but for grouped Winograd, which reads dy itself), else in place in dy. Returns where
 * it is, its rows *gy_row floats apart. */
static const float *grad_y_sample(const direct_bwd_plan *p, int64_t n, float *dyp, float *db_t, size_t *gy_row) {
    const fl_conv_desc *d = p->d;
    const conv_geom *g = &p->g;
    const int OC = d->oc;
    float *dys = p->dy + (size_t)n * p->out_sz, *dst = dys;
    if (p->dx && !p->group_dx) {
        *gy_row = (size_t)g->wd * OC;
        dst = dyp + ((size_t)g->offh * g->wd + g->offw) * OC;
    } else {
        *gy_row = (size_t)d->ow * OC;
    }
    if (p->pg) unpool_grad(d, p->pg, n, dst, *gy_row, db_t);
    else if (p->bg) bn_grad_sample(d, p->bg, n, p->y, dst, *gy_row, db_t);
    else prep_dy(d, p->y + (size_t)n * p->out_sz, dys, dst, *gy_row, db_t);
    return dst;
}

/* Step 2 of a sample: dw_t += sum_p x[p + (kh, kw), c] gy[p, oc] (xs: the sample as the direct loops read it,
 * g's geometry; gy: step 1's, rows gy_row floats apart); rows of the tile are consecutive (kw, c) of one kernel
 * row kh */
static void dw_sample(const fl_conv_desc *d, const conv_geom *g, const float *xs, const float *gy, size_t gy_row,
                      float *dw_t) {
    const int C = d->c, OC = d->oc, KH = d->kh, KW = d->kw;
    for (int oc0 = 0; oc0 < OC; oc0 += 64) {
        fl_simd_tile t = {0};
        t.cols = OC - oc0 < 64 ? OC - oc0 : 64;
        t.as = 1;
        t.aj = (int64_t)d->sw * C;
        t.aseg = (int64_t)d->sh * g->wp * C;
        t.nseg = d->oh;
        t.nj = d->ow;
        const int DH = fl_conv_dil_h(d), DW = fl_conv_dil_w(d);
        t.b = gy + oc0;
        t.bj = OC;
        t.bseg = (int64_t)gy_row;
        t.ldc = OC;
        t.accumulate = 1;
        if (KW == 3 && d->sw == 1 && DW == 1 && t.cols <= 16) {
            /* the three kernel columns from one load of each x */
            const int ntc = fl_tiles(C, FL_SIMD_DW3_CT);
            for (int kh = 0; kh < KH; kh++)
                for (int k = 0; k < ntc; k++) {
                    const int c0 = (int)fl_tile_start(C, ntc, k), c1 = (int)fl_tile_start(C, ntc, k + 1);
                    fl_simd_dw3(xs + (size_t)kh * DH * g->wp * C + c0, C, t.aseg, t.b, t.bj, t.bseg, t.nseg, t.nj,
                                c1 - c0, t.cols, dw_t + ((size_t)kh * 3 * C + c0) * OC + oc0, (int64_t)C * OC, OC);
                }
            continue;
        }
        /* a tile's rows: (kw, c) of kernel row kh, consecutive in x; dilated across, the c of one kernel
         * position (kw, DW pixels apart) */
        const int kwc = KW * C, span = DW > 1 ? C : kwc, rm = fl_simd_max_rows(t.cols);
        const int ntile = fl_tiles(span, rm);
        for (int kh = 0; kh < KH; kh++)
            for (int kp = 0; kp < kwc; kp += span)
                for (int k = 0; k < ntile; k++) {
                    const int r0 = (int)fl_tile_start(span, ntile, k);
                    const int r1 = (int)fl_tile_start(span, ntile, k + 1);
                    t.a = xs + (size_t)kh * DH * g->wp * C + (size_t)(kp / C) * DW * C + r0;
                    t.c = dw_t + ((size_t)kh * kwc + kp + r0) * OC + oc0;
                    fl_simd_run(&t, r1 - r0);
                }
    }
}

/* A stride-1 data gradient of one sample (dxs; accumulate: added into): the forward's tiles over its padded dy
 * (dyp, g's geometry) with the rotated kernel (rot), dd its dx_desc; gated by xg (the unpadded x) where
 * given */
static void direct_dx_sample(const fl_conv_desc *d, const conv_geom *g, const fl_conv_desc *dd, const float *rot,
                             const float *dyp, float *dxs, int accumulate, const float *xg) {
    const int C = d->c, OC = d->oc, KH = d->kh, KW = d->kw;
    for (int c0 = 0; c0 < C; c0 += 64) {
        fl_simd_tile t = {0};
        t.cols = C - c0 < 64 ? C - c0 : 64;
        t.as = OC;
        t.aj = 1;
        t.aseg = (int64_t)fl_conv_dil_h(d) * g->wd * OC;
        t.nseg = KH;
        t.nj = (fl_conv_dil_w(d) > 1 ? 1 : KW) * OC; /* dilated: a kernel column a call (fwd_tile) */
        t.b = rot + c0;
        t.bj = C;
        t.bseg = (int64_t)KW * OC * C;
        t.ldc = C;
        t.accumulate = accumulate;
        if (d->w == 1) { /* a Conv1D: tiles down the rows, as in the forward */
            t.as = (int64_t)g->wd * OC;
            const int rm = conv_taps(&t, d, OC);
            const int ntr = fl_tiles(d->h, rm);
            for (int k = 0; k < ntr; k++) {
                const int r0 = (int)fl_tile_start(d->h, ntr, k);
                const int r1 = (int)fl_tile_start(d->h, ntr, k + 1);
                t.a = dyp + (size_t)r0 * g->wd * OC;
                t.c = dxs + (size_t)r0 * C + c0;
                t.gate = xg ? xg + (size_t)r0 * C + c0 : NULL;
                fwd_tile(dd, &t, r1 - r0);
            }
            continue;
        }
        const int rm = conv_taps(&t, d, OC);
        const int ntile = fl_tiles(d->w, rm);
        for (int ih = 0; ih < d->h; ih++)
            for (int k = 0; k < ntile; k++) {
                int iw0 = (int)fl_tile_start(d->w, ntile, k);
                int iw1 = (int)fl_tile_start(d->w, ntile, k + 1);
                t.a = dyp + ((size_t)ih * g->wd + iw0) * OC;
                t.c = dxs + ((size_t)ih * d->w + iw0) * C + c0;
                t.gate = xg ? xg + ((size_t)ih * d->w + iw0) * C + c0 : NULL;
                fwd_tile(dd, &t, iw1 - iw0);
            }
    }
}

/* Step 3 of sample n (not with group_dx: bwd_part's): dx = conv(padded gy, rotated kernel), by Winograd or the
 * direct tiles; strided, in phases. Gated by x where dx_mask. */
static void dx_sample(const direct_bwd_plan *p, int64_t n, const bwd_slice *s) {
    const fl_conv_desc *d = p->d;
    float *dxs = p->dx + (size_t)n * p->in_sz;
    const float *xg = p->dx_mask ? p->x + (size_t)n * p->in_sz : NULL; /* the unpadded x gates dx */
    const int accumulate = p->dx_beta != 0.0f;
    if (p->strided) strided_dx(d, &p->g, s->dyp, p->shared, p->phase_off, dxs, accumulate, xg);
    else if (p->wino) fl_wino_rows(&p->dd, s->dyp, p->ubwd, NULL, dxs, 0, d->h, accumulate, xg, s->wino_scratch);
    else direct_dx_sample(d, &p->g, &p->dd, p->shared, s->dyp, dxs, accumulate, xg);
}

/* One part of the batch (its samples in order, part_start's): steps 1 to 3 of each sample, dw and db summed into
 * the part's own sums; with group_dx, the part's dx after them, its samples' tiles sharing blocks. */
static void bwd_part(const direct_bwd_plan *p, int part, const bwd_slice *s) {
    const fl_conv_desc *d = p->d;
    float *dw_t = part_sums(d, p->parts, part), *db_t = dw_t + p->nw;
    const int64_t n0 = part_start(d->n, p->np, part), n1 = part_start(d->n, p->np, part + 1);
    for (int64_t n = n0; n < n1; n++) {
        const float *xs = p->x + (size_t)n * p->in_sz;
        if (p->g.copy) {
            pad_sample(d, &p->g, xs, s->xp);
            xs = s->xp;
        }
        size_t gy_row;
        const float *gy = grad_y_sample(p, n, s->dyp, db_t, &gy_row);
        dw_sample(d, &p->g, xs, gy, gy_row, dw_t);
        if (p->dx && !p->group_dx) dx_sample(p, n, s);
    }
    if (p->group_dx)
        fl_wino_samples(&p->dg, p->dy + (size_t)n0 * p->out_sz, p->ubwd, NULL, p->dx + (size_t)n0 * p->in_sz, NULL,
                        (int)(n1 - n0), p->dx_beta != 0.0f, p->dx_mask ? p->x + (size_t)n0 * p->in_sz : NULL,
                        s->wino_scratch);
}

/* The backward of a convolution on the direct kernels: the kernel packed for dx once, then the parts of the
 * batch shared out to the threads (bwd_part: per sample 1. the gradient of y and db, 2. dw, 3. dx), then the
 * parts' sums added in part order. dx_mask: multiply dx by (x > 0) (the ReLU that produced x, fused). pg: the
 * gradient of y comes from a max pooling; bg: from a BatchNormalization (either way dy is then only
 * scratch). */
static void direct_bwd(const fl_conv_desc *d, const float *x, const float *w, const float *y, float *dy, float *dx,
                       float dx_beta, int dx_mask, float *dw, float *db, void *ws, const pool_grad *pg,
                       const fl_bn_grad *bg) {
    direct_bwd_plan p = {
        .d = d, .x = x, .w = w, .y = y, .dy = dy, .dx = dx, .dx_beta = dx_beta, .dx_mask = dx_mask, .pg = pg, .bg = bg};
    plan_direct_bwd(&p, ws);
    const int nt = conv_threads();
    pack_dx_kernel(&p);
#pragma omp parallel num_threads(nt)
    {
        bwd_slice s;
        s.xp = p.slices + (size_t)fl_cpu_thread_id() * p.tws;
        s.dyp = s.xp + (p.g.copy ? (size_t)p.g.hp * p.g.wp * d->c : 0);
        s.wino_scratch = s.dyp + (size_t)p.g.hd * p.g.wd * d->oc;
        if (dx) memset(s.dyp, 0, (size_t)p.g.hd * p.g.wd * d->oc * sizeof(float)); /* the border stays zero */
#pragma omp for schedule(dynamic)
        for (int part = 0; part < p.np; part++) bwd_part(&p, part, &s);
    }
    reduce_parts(d, p.parts, p.np, p.nw, (size_t)d->oc, dw, d->has_bias ? db : NULL);
}

/* ------------------------------------------------ im2col + GEMM path */

/* col[rows, K] for samples x[0..cn) (x points at the first sample): the
 * channels [c0, c0 + cg) of each tap, K = kh*kw*cg; taps dil_h/dil_w apart. */
static void im2col(const fl_conv_desc *d, const float *x, int64_t cn, int c0, int cg, float *col) {
    const int H = d->h, W = d->w, C = d->c, KH = d->kh, KW = d->kw;
    const int DH = fl_conv_dil_h(d), DW = fl_conv_dil_w(d);
    const size_t K = (size_t)KH * KW * cg, rowc = (size_t)KW * cg;
    const int contiguous = DW == 1 && cg == C; /* a kernel row is one run of x */
    for (int64_t s = 0; s < cn; s++) {
        const float *xs = x + (size_t)s * H * W * C + c0;
        for (int oh = 0; oh < d->oh; oh++) {
            for (int ow = 0; ow < d->ow; ow++) {
                float *row = col + ((size_t)(s * d->oh + oh) * d->ow + ow) * K;
                int iw0 = ow * d->sw - d->pl;
                for (int kh = 0; kh < KH; kh++) {
                    int ih = oh * d->sh - d->pt + kh * DH;
                    float *dst = row + (size_t)kh * rowc;
                    if (ih < 0 || ih >= H) { memset(dst, 0, rowc * sizeof(float)); continue; }
                    const float *src = xs + ((size_t)ih * W) * C;
                    if (contiguous && iw0 >= 0 && iw0 + KW <= W) {
                        memcpy(dst, src + (size_t)iw0 * C, rowc * sizeof(float));
                    } else {
                        for (int kw = 0; kw < KW; kw++) {
                            int iw = iw0 + kw * DW;
                            if (iw < 0 || iw >= W) memset(dst + (size_t)kw * cg, 0, (size_t)cg * sizeof(float));
                            else memcpy(dst + (size_t)kw * cg, src + (size_t)iw * C, (size_t)cg * sizeof(float));
                        }
                    }
                }
            }
        }
    }
}

/* dx[0..cn) += col2im(dcol): im2col's transpose, channels [c0, c0 + cg) */
static void col2im_add(const fl_conv_desc *d, const float *dcol, int64_t cn, int c0, int cg, float *dx) {
    const int H = d->h, W = d->w, C = d->c, KH = d->kh, KW = d->kw;
    const int DH = fl_conv_dil_h(d), DW = fl_conv_dil_w(d);
    const size_t K = (size_t)KH * KW * cg;
    for (int64_t s = 0; s < cn; s++) {
        float *xs = dx + (size_t)s * H * W * C + c0;
        for (int oh = 0; oh < d->oh; oh++) {
            for (int ow = 0; ow < d->ow; ow++) {
                const float *row = dcol + ((size_t)(s * d->oh + oh) * d->ow + ow) * K;
                for (int kh = 0; kh < KH; kh++) {
                    int ih = oh * d->sh - d->pt + kh * DH;
                    if (ih < 0 || ih >= H) continue;
                    for (int kw = 0; kw < KW; kw++) {
                        int iw = ow * d->sw - d->pl + kw * DW;
                        if (iw < 0 || iw >= W) continue;
                        float *dst = xs + ((size_t)ih * W + iw) * C;
                        const float *src = row + ((size_t)kh * KW + kw) * cg;
                        for (int c = 0; c < cg; c++) dst[c] += src[c];
                    }
                }
            }
        }
    }
}

/* The GEMM path's products: flynn's own GEMM where its rule says it beats OpenBLAS (fl_cpu_avx2_gemm_wins; on a
 * CPU without AVX-512, where OpenBLAS runs single-threaded inside the chunks' loop and measured 10-15 GFLOP/s
 * on a chunk's shapes against the AVX2 kernel's 32-37 on a Zen 1 EPYC), else OpenBLAS. The rule reads the
 * shape alone, and both widths take it: the AVX-512 kernels run the same FMA sequence as the AVX2 ones, so
 * the two give the same bits whichever OpenBLAS kernels the process loaded. (The AVX-512 level took
 * OpenBLAS for every product: its Haswell and Zen kernels, which OPENBLAS_CORETYPE=Haswell in the
 * environment of this project's machines chose on a Zen 5 and on a Xeon of family 6 model 207, sum in
 * another order than flynn's, and test_cpu_simd's AVX2 and AVX-512 filter gradients differed there; its
 * SkylakeX and Cooperlake kernels happen to agree.) beta is 0 or 1. */
static void conv_gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                      int64_t ldb, float beta, float *C, int64_t ldc, int threads) {
    if (fl_cpu_own_gemm_if_wins(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc, threads)) return;
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K,
                1.0f, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

/* A 1x1, stride-1, unpadded, ungrouped convolution is one GEMM on x itself. */
static int gemm_on_x(const fl_conv_desc *d) {
    return d->kh == 1 && d->kw == 1 && d->sh == 1 && d->sw == 1 && d->pt == 0 && d->pl == 0 &&
           fl_conv_groups(d) == 1;
}

void fl_cpu_conv2d_fwd(const fl_conv_desc *d, const float *x, const float *w, const float *b, float *y, void *ws) {
    if (direct_fwd_ok(d)) { direct_fwd(d, x, w, b, y, ws); return; }
    if (d->res) { /* the GEMM path: the convolution, then the Add (and its ReLU) as their own pass */
        fl_conv_desc e = *d;
        e.res = NULL;
        e.act = FL_ACT_LINEAR;
        fl_cpu_conv2d_fwd(&e, x, w, b, y, ws);
        fl_cpu_binary(d->act == FL_ACT_RELU ? FL_BIN_ADD_RELU : d->act == FL_ACT_RELU6 ? FL_BIN_ADD_RELU6 : FL_BIN_ADD,
                      d->n * d->oh * d->ow * d->oc, y, d->res, y);
        return;
    }
    const int64_t cs = chunk_samples(d);
    const int64_t nchunks = (d->n + cs - 1) / cs;
    const int G = fl_conv_groups(d), cg = d->c / G, ocg = d->oc / G;
    const size_t K = conv_k(d);
    const size_t in_sz = (size_t)d->h * d->w * d->c, out_rows = (size_t)d->oh * d->ow;
    const size_t tws = thread_ws_floats(d, cs);
    const int direct = gemm_on_x(d);
    /* one chunk (a sample at batch 1): its GEMM on every thread instead (OpenBLAS's own threads, outside a
     * parallel region), not one thread's chunk while the others wait */
    const int nt = conv_threads(), inner = nchunks == 1 ? nt : 1;
#pragma omp parallel for schedule(static) num_threads(nt) if (inner == 1)
    for (int64_t ci = 0; ci < nchunks; ci++) {
        float *col = (float *)ws + (size_t)fl_cpu_thread_id() * tws;
        int64_t n0 = ci * cs, cn = d->n - n0 < cs ? d->n - n0 : cs;
        const float *xc = x + (size_t)n0 * in_sz;
        float *yc = y + (size_t)n0 * out_rows * d->oc;
        int64_t rows = cn * (int64_t)out_rows;
        for (int g = 0; g < G; g++) { /* y[:, group g's columns] = col_g @ w[:, those columns] */
            const float *a = xc;
            if (!direct) { im2col(d, xc, cn, g * cg, cg, col); a = col; }
            /* CPUs with AVX-512 take the direct kernels above or OpenBLAS */
            conv_gemm(0, 0, rows, ocg, (int64_t)K, a, (int64_t)K, w + (size_t)g * ocg, d->oc, 0.0f,
                      yc + (size_t)g * ocg, d->oc, inner);
        }
        fl_cpu_bias_act_rows_par(rows, d->oc, d->has_bias ? b : NULL, d->act, yc);
    }
}

/* dx[0..n) = x > 0 ? dx : 0 (d->dx_gate, where the kernels do not apply it as they store): a select, not a
 * branch on the signs */
static void gate_dx(int64_t n, const float *restrict x, float *restrict dx) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) dx[i] = x[i] > 0.0f ? dx[i] : 0.0f;
}

void fl_cpu_conv2d_bwd(const fl_conv_desc *d, const float *x, const float *w, const float *y, float *dy, float *dx,
                       float dx_beta, float *dw, float *db, void *ws) {
    if (direct_bwd_ok(d, dx != NULL)) {
        direct_bwd(d, x, w, y, dy, dx, dx_beta, d->dx_gate, dw, db, ws, NULL, NULL);
        return;
    }
    const int64_t cs = chunk_samples(d);
    const int64_t nchunks = (d->n + cs - 1) / cs;
    const int G = fl_conv_groups(d), cg = d->c / G, ocg = d->oc / G;
    const size_t K = conv_k(d);
    const size_t in_sz = (size_t)d->h * d->w * d->c, out_rows = (size_t)d->oh * d->ow;
    const size_t tws = thread_ws_floats(d, cs);
    const size_t nw = K * (size_t)d->oc;
    const int direct = gemm_on_x(d);
    const int np = parts_used(d, nchunks);
    float *parts = (float *)ws, *slices = gemm_bwd_slices(d, ws);
#pragma omp parallel for schedule(dynamic) num_threads(conv_threads())
    for (int part = 0; part < np; part++) {
        float *col = slices + (size_t)fl_cpu_thread_id() * tws;
        float *dw_t = part_sums(d, parts, part), *db_t = dw_t + nw;
        for (int64_t ci = part_start(nchunks, np, part); ci < part_start(nchunks, np, part + 1); ci++) {
            int64_t n0 = ci * cs, cn = d->n - n0 < cs ? d->n - n0 : cs;
            int64_t rows = cn * (int64_t)out_rows;
            const float *xc = x + (size_t)n0 * in_sz;
            float *dyc = dy + (size_t)n0 * out_rows * d->oc;
            const float *yc = y + (size_t)n0 * out_rows * d->oc;
            fl_cpu_act_grad_rows(rows, d->oc, d->act, yc, dyc, d->has_bias ? db_t : NULL);
            float *dxc = dx ? dx + (size_t)n0 * in_sz : NULL;
            if (dxc && !direct && dx_beta == 0.0f) memset(dxc, 0, (size_t)cn * in_sz * sizeof(float));
            for (int g = 0; g < G; g++) {
                const size_t go = (size_t)g * ocg; /* group g's columns of w, dw and dy */
                const float *a = xc;
                if (!direct) { im2col(d, xc, cn, g * cg, cg, col); a = col; }
                conv_gemm(1, 0, (int64_t)K, ocg, rows, a, (int64_t)K, dyc + go, d->oc, 1.0f, dw_t + go, d->oc, 1);
                if (!dxc) continue;
                if (direct) {
                    conv_gemm(0, 1, rows, (int64_t)K, d->oc, dyc, d->oc, w, d->oc, dx_beta, dxc, (int64_t)K, 1);
                } else {
                    conv_gemm(0, 1, rows, (int64_t)K, ocg, dyc + go, d->oc, w + go, d->oc, 0.0f, col, (int64_t)K, 1);
                    col2im_add(d, col, cn, g * cg, cg, dxc);
                }
            }
            if (dxc && d->dx_gate) gate_dx(cn * (int64_t)in_sz, xc, dxc); /* the chunk's dx while in cache */
        }
    }
    reduce_parts(d, parts, np, nw, (size_t)d->oc, dw, d->has_bias ? db : NULL);
}

/* ------------------------------------------------ transposed convolution
 *
 * Conv2DTranspose is the data gradient of the Conv2D that d describes, and
 * its gradients are that Conv2D's forward and filter gradient, so it runs
 * on the same GEMMs, im2col and col2im with the roles of x and y swapped
 * (x: [n, oh, ow, oc], y: [n, h, w, c], w: [K = kh*kw*c, oc]):
 *     forward          col[rows, K] = x @ w^T, y = col2im(col), act(y + b)
 *     backward data    dx[rows, oc] = im2col(dy) @ w        (d's forward)
 *     backward filter  dw[K, oc]   += im2col(dy)^T @ x
 * in chunks of samples, with dw/db summed in parts (dw_parts) as
 * fl_cpu_conv2d_bwd. */

void fl_cpu_conv2d_transpose_fwd(const fl_conv_desc *d, const float *x, const float *w, const float *b, float *y,
                                 void *ws) {
    const int64_t cs = chunk_samples(d);
    const int64_t nchunks = (d->n + cs - 1) / cs;
    const size_t K = (size_t)d->kh * d->kw * d->c;
    const size_t y_sz = (size_t)d->h * d->w * d->c, x_rows = (size_t)d->oh * d->ow;
    const size_t tws = thread_ws_floats(d, cs);
    const int direct = d->kh == 1 && d->kw == 1 && d->sh == 1 && d->sw == 1 && d->pt == 0 && d->pl == 0;
#pragma omp parallel for schedule(static) num_threads(conv_threads())
    for (int64_t ci = 0; ci < nchunks; ci++) {
        float *col = (float *)ws + (size_t)fl_cpu_thread_id() * tws;
        int64_t n0 = ci * cs, cn = d->n - n0 < cs ? d->n - n0 : cs;
        const float *xc = x + (size_t)n0 * x_rows * d->oc;
        float *yc = y + (size_t)n0 * y_sz;
        int64_t rows = cn * (int64_t)x_rows;
        /* y (1x1, stride 1: no scatter) or the columns = x @ w^T; the own GEMM where it runs, whose sums do not
         * depend on how many rows a chunk has (OpenBLAS's did: a transposed convolution's predictions moved in
         * the last bit with the batch) */
        float *dst = direct ? yc : col;
        if (!fl_cpu_own_gemm(0, 1, rows, (int64_t)K, d->oc, xc, d->oc, w, d->oc, 0.0f, dst, (int64_t)K, NULL, 0, 1))
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)K, d->oc, 1.0f, xc, d->oc, w, d->oc,
                        0.0f, dst, (int)K);
        if (!direct) {
            memset(yc, 0, (size_t)cn * y_sz * sizeof(float));
            col2im_add(d, col, cn, 0, d->c, yc);
        }
        fl_cpu_bias_act_rows_par(cn * d->h * d->w, d->c, d->has_bias ? b : NULL, d->act, yc);
    }
}

void fl_cpu_conv2d_transpose_bwd(const fl_conv_desc *d, const float *x, const float *w, const float *y, float *dy,
                                 float *dx, float dx_beta, float *dw, float *db, void *ws) {
    const int64_t cs = chunk_samples(d);
    const int64_t nchunks = (d->n + cs - 1) / cs;
    const size_t K = (size_t)d->kh * d->kw * d->c, nw = K * (size_t)d->oc;
    const size_t y_sz = (size_t)d->h * d->w * d->c, x_rows = (size_t)d->oh * d->ow;
    const size_t tws = thread_ws_floats(d, cs);
    const int direct = d->kh == 1 && d->kw == 1 && d->sh == 1 && d->sw == 1 && d->pt == 0 && d->pl == 0;
    const int np = parts_used(d, nchunks);
    float *parts = (float *)ws, *slices = gemm_bwd_slices(d, ws);
#pragma omp parallel for schedule(dynamic) num_threads(conv_threads())
    for (int part = 0; part < np; part++) {
        float *col = slices + (size_t)fl_cpu_thread_id() * tws;
        float *dw_t = part_sums(d, parts, part), *db_t = dw_t + nw;
        for (int64_t ci = part_start(nchunks, np, part); ci < part_start(nchunks, np, part + 1); ci++) {
            int64_t n0 = ci * cs, cn = d->n - n0 < cs ? d->n - n0 : cs;
            int64_t rows = cn * (int64_t)x_rows;
            const float *xc = x + (size_t)n0 * x_rows * d->oc;
            float *dyc = dy + (size_t)n0 * y_sz;
            fl_cpu_act_grad_rows(cn * d->h * d->w, d->c, d->act, y + (size_t)n0 * y_sz, dyc, d->has_bias ? db_t : NULL);
            const float *a = dyc;
            if (!direct) { im2col(d, dyc, cn, 0, d->c, col); a = col; }
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)K, d->oc, (int)rows, 1.0f, a, (int)K, xc, d->oc,
                        1.0f, dw_t, d->oc);
            if (dx)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, d->oc, (int)K, 1.0f, a, (int)K, w,
                            d->oc, dx_beta, dx + (size_t)n0 * x_rows * d->oc, d->oc);
        }
    }
    reduce_parts(d, parts, np, nw, (size_t)d->c, dw, d->has_bias ? db : NULL);
}

/* ------------------------------------------ convolution + max pooling */

static void maxpool_row(const fl_conv_desc *d, int64_t n, int oh, const float *x, float *y, int32_t *argmax);

/* Pools rows [ph0, ph1) of pooling p from sample ys of the convolution output. */
static void pool_rows(const fl_conv_desc *d, const fl_conv_desc *p, const float *ys, float *ps, int32_t *as, int ph0,
                      int ph1) {
    const size_t prow = (size_t)p->ow * p->c;
    /* the AVX2 kernels' width: the portable pooling of one row of windows (the same selections, the same bits) */
    const fl_conv_desc q = {.n = 1, .h = p->kh, .w = d->ow, .c = d->oc, .oh = 1, .ow = p->ow, .kh = p->kh,
                            .kw = p->kw, .sh = p->sh, .sw = p->sw};
    for (int ph = ph0; ph < ph1; ph++) {
        const float *yr = ys + (size_t)ph * p->sh * d->ow * d->oc;
        if (fl_cpu_simd())
            fl_simd_maxpool_fwd_sample(p->kh, d->ow, d->oc, 1, p->ow, p->kh, p->kw, p->sh, p->sw, 0, 0, yr,
                                       ps + (size_t)ph * prow, as + (size_t)ph * prow);
        else
            maxpool_row(&q, 0, 0, yr, ps + (size_t)ph * prow, as + (size_t)ph * prow);
    }
}

void fl_cpu_conv2d_maxpool_fwd(const fl_conv_desc *d, const fl_conv_desc *p, const float *x, const float *w,
                               const float *b, float *y, float *pooled, int32_t *argmax, void *ws) {
    if (!direct_fwd_ok(d) || !pool_tiles(p) || p->h != d->oh || p->w != d->ow || p->c != d->oc) {
        fl_cpu_conv2d_fwd(d, x, w, b, y, ws);
        fl_cpu_maxpool_fwd(p, y, pooled, argmax);
        return;
    }
    const conv_geom g = geom(d);
    const size_t in_sz = (size_t)d->h * d->w * d->c, out_sz = (size_t)d->oh * d->ow * d->oc;
    const size_t psz = (size_t)p->oh * p->ow * p->c;
    const size_t tws = direct_thread_floats(d, 0);
    const int nt = conv_threads();
    if (wino_fwd(d)) {
        /* Winograd: whole samples, each then pooled while in L2 */
        const float *u = (const float *)ws;
        float *slices = wino_fwd_kernel(d, w, ws);
#pragma omp parallel for schedule(dynamic) num_threads(nt)
        for (int64_t n = 0; n < d->n; n++) {
            float *ys = y + (size_t)n * out_sz;
            fl_wino_rows(d, x + (size_t)n * in_sz, u, b, ys, 0, d->oh, 0, NULL,
                         slices + (size_t)fl_cpu_thread_id() * tws);
            pool_rows(d, p, ys, pooled + (size_t)n * psz, argmax + (size_t)n * psz, 0, p->oh);
        }
        return;
    }
    if (d->n < 2 * nt && weight_heavy(d, &g)) { /* the channels split (direct_fwd), then the pooling */
        direct_fwd(d, x, w, b, y, ws);
        fl_cpu_maxpool_fwd(p, y, pooled, argmax);
        return;
    }
    if (d->n < 2 * nt) {
        /* few samples: a pooling row band (the convolution rows it reads) an item, over the sample's padded copy
         * made once into the first thread's slice (a padded sample ran whole on one thread) */
        for (int64_t n = 0; n < d->n; n++) {
            const float *xs = x + (size_t)n * in_sz;
            if (g.copy) {
                pad_sample(d, &g, xs, (float *)ws);
                xs = (const float *)ws;
            }
            float *ys = y + (size_t)n * out_sz;
#pragma omp parallel for schedule(dynamic) num_threads(nt)
            for (int ph = 0; ph < p->oh; ph++) {
                const int r0 = ph * p->sh, r1 = (ph + 1) * p->sh < d->oh ? (ph + 1) * p->sh : d->oh;
                direct_fwd_rows(d, &g, xs, w, b, ys, NULL, r0, r1);
                pool_rows(d, p, ys, pooled + (size_t)n * psz, argmax + (size_t)n * psz, ph, ph + 1);
                if (ph + 1 == p->oh && r1 < d->oh) /* rows below the last window */
                    direct_fwd_rows(d, &g, xs, w, b, ys, NULL, r1, d->oh);
            }
        }
        return;
    }
    /* whole samples an item, each pooling a band of rows while it is in cache */
#pragma omp parallel for schedule(dynamic) num_threads(nt)
    for (int64_t n = 0; n < d->n; n++) {
        const float *xs = x + (size_t)n * in_sz;
        if (g.copy) {
            float *xp = (float *)ws + (size_t)fl_cpu_thread_id() * tws;
            pad_sample(d, &g, xs, xp);
            xs = xp;
        }
        float *ys = y + (size_t)n * out_sz;
        for (int ph = 0; ph < p->oh; ph++) {
            int r0 = ph * p->sh, r1 = ph + 1 == p->oh ? d->oh : (ph + 1) * p->sh;
            if (r1 > d->oh) r1 = d->oh;
            direct_fwd_rows(d, &g, xs, w, b, ys, NULL, r0, r1);
            pool_rows(d, p, ys, pooled + (size_t)n * psz, argmax + (size_t)n * psz, ph, ph + 1);
        }
    }
}

void fl_cpu_conv2d_bn_bwd(const fl_conv_desc *d, const fl_bn_grad *bg, const float *x, const float *w,
                          const float *y, float *dy_scratch, float *dx, float dx_beta, float *dw, float *db,
                          void *ws) {
    if (d->act == FL_ACT_LINEAR && direct_bwd_ok(d, dx != NULL)) {
        direct_bwd(d, x, w, y, dy_scratch, dx, dx_beta, d->dx_gate, dw, db, ws, NULL, bg);
        return;
    }
    fl_cpu_bn_dx(d->n * d->oh * d->ow, d->oc, bg, y, dy_scratch);
    fl_cpu_conv2d_bwd(d, x, w, y, dy_scratch, dx, dx_beta, dw, db, ws);
}

void fl_cpu_conv2d_maxpool_bwd(const fl_conv_desc *d, const fl_conv_desc *p, const float *x, const float *w,
                               const float *y, const float *pooled, const float *dpooled, const int32_t *argmax,
                               float *dy_scratch, float *dx, float dx_beta, int dx_relu_mask, float *dw, float *db,
                               void *ws) {
    if (direct_bwd_ok(d, dx != NULL) && pool_tiles(p) && p->h == d->oh && p->w == d->ow && p->c == d->oc) {
        pool_grad pg = {p, pooled, dpooled, argmax};
        direct_bwd(d, x, w, y, dy_scratch, dx, dx_beta, dx_relu_mask || d->dx_gate, dw, db, ws, &pg, NULL);
        return;
    }
    fl_cpu_maxpool_bwd(p, dpooled, argmax, dy_scratch, 0.0f);
    fl_conv_desc e = *d;
    e.dx_gate = dx_relu_mask || d->dx_gate;
    fl_cpu_conv2d_bwd(&e, x, w, y, dy_scratch, dx, dx_beta, dw, db, ws);
}

/* ------------------------------------------------------------- pooling */

/* argmax holds, per output element, the window position kh*kw_size + kw of
 * the maximum (the first one on ties), or -1 when the window holds no input. */

/* The portable max pooling's output row oh of sample n: each window clipped to the input; its first element
 * starts the maximum, then strictly greater ones replace it (the first maximum wins). Compiled for AVX2 and
 * for the baseline (the same selections, so the same bits). */
static inline __attribute__((always_inline)) void maxpool_fwd_row(const fl_conv_desc *d, int64_t n, int oh,
                                                                   const float *x, float *y, int32_t *argmax) {
    const int H = d->h, W = d->w, C = d->c;
    const float *xs = x + (size_t)n * H * W * C;
    for (int ow = 0; ow < d->ow; ow++) {
        size_t o = (((size_t)n * d->oh + oh) * d->ow + ow) * C;
        float *restrict yo = y + o;
        int32_t *restrict ao = argmax + o;
        const int ih = oh * d->sh - d->pt, iw = ow * d->sw - d->pl;
        int k0, k1, j0, j1;
        fl_tap_range(ih, d->kh, 1, H, &k0, &k1);
        fl_tap_range(iw, d->kw, 1, W, &j0, &j1);
        if (k0 >= k1 || j0 >= j1) {
            for (int c = 0; c < C; c++) { yo[c] = -INFINITY; ao[c] = -1; }
            continue;
        }
        const float *x0 = xs + ((size_t)(ih + k0) * W + (iw + j0)) * C;
        const int32_t p0 = k0 * d->kw + j0;
        for (int c = 0; c < C; c++) { yo[c] = x0[c]; ao[c] = p0; }
        for (int kh = k0; kh < k1; kh++)
            for (int kw = kh == k0 ? j0 + 1 : j0; kw < j1; kw++) {
                const float *restrict xi = xs + ((size_t)(ih + kh) * W + (iw + kw)) * C;
                const int32_t pos = kh * d->kw + kw;
#pragma omp simd
                for (int c = 0; c < C; c++) {
                    const int gt = xi[c] > yo[c];
                    yo[c] = gt ? xi[c] : yo[c];
                    ao[c] = gt ? pos : ao[c];
                }
            }
    }
}
#if FL_HAVE_AVX2_TARGET
FL_AVX2_TARGET static void maxpool_fwd_row_avx2(const fl_conv_desc *d, int64_t n, int oh, const float *x, float *y,
                                                int32_t *argmax) {
    maxpool_fwd_row(d, n, oh, x, y, argmax);
}
#endif
static void maxpool_fwd_row_base(const fl_conv_desc *d, int64_t n, int oh, const float *x, float *y,
                                 int32_t *argmax) {
    maxpool_fwd_row(d, n, oh, x, y, argmax);
}
/* the AVX2 loop where the CPU has it, else the baseline */
static void maxpool_row(const fl_conv_desc *d, int64_t n, int oh, const float *x, float *y, int32_t *argmax) {
#if FL_HAVE_AVX2_TARGET
    if (fl_cpu_avx2()) { maxpool_fwd_row_avx2(d, n, oh, x, y, argmax); return; }
#endif
    maxpool_fwd_row_base(d, n, oh, x, y, argmax);
}

void fl_cpu_maxpool_fwd(const fl_conv_desc *d, const float *x, float *y, int32_t *argmax) {
    const int H = d->h, W = d->w, C = d->c;
    const size_t in_sz = (size_t)H * W * C, out_sz = (size_t)d->oh * d->ow * C;
    if (fl_cpu_simd()) {
#pragma omp parallel for schedule(static) num_threads(d->n * in_sz < 65536 ? 1 : fl_cpu_threads())
        for (int64_t n = 0; n < d->n; n++)
            fl_simd_maxpool_fwd_sample(H, W, C, d->oh, d->ow, d->kh, d->kw, d->sh, d->sw, d->pt, d->pl,
                                       x + (size_t)n * in_sz, y + (size_t)n * out_sz, argmax + (size_t)n * out_sz);
        return;
    }
#pragma omp parallel for collapse(2) schedule(static) num_threads(d->n * in_sz < 65536 ? 1 : fl_cpu_threads())
    for (int64_t n = 0; n < d->n; n++)
        for (int oh = 0; oh < d->oh; oh++) maxpool_row(d, n, oh, x, y, argmax);
}

void fl_cpu_maxpool_bwd(const fl_conv_desc *d, const float *dy, const int32_t *argmax, float *dx, float dx_beta) {
    const int W = d->w, C = d->c;
    const size_t in_sz = (size_t)d->h * W * C, out_sz = (size_t)d->oh * d->ow * C;
    const int nt = d->n * in_sz < 65536 ? 1 : fl_cpu_threads();
    if (fl_cpu_simd()) {
#pragma omp parallel for schedule(static) num_threads(nt)
        for (int64_t n = 0; n < d->n; n++)
            fl_simd_maxpool_bwd_sample(d->h, W, C, d->oh, d->ow, d->kh, d->kw, d->sh, d->sw, d->pt, d->pl,
                                       dy + (size_t)n * out_sz, argmax + (size_t)n * out_sz, dx + (size_t)n * in_sz,
                                       dx_beta != 0.0f);
        return;
    }
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t n = 0; n < d->n; n++) {
        float *dxs = dx + (size_t)n * in_sz;
        if (dx_beta == 0.0f) memset(dxs, 0, in_sz * sizeof(float));
        const float *dys = dy + (size_t)n * out_sz;
        const int32_t *as = argmax + (size_t)n * out_sz;
        for (int oh = 0; oh < d->oh; oh++)
            for (int ow = 0; ow < d->ow; ow++) {
                size_t o = ((size_t)oh * d->ow + ow) * C;
                for (int c = 0; c < C; c++) {
                    int32_t pos = as[o + c];
                    if (pos < 0) continue;
                    int ih = oh * d->sh - d->pt + pos / d->kw, iw = ow * d->sw - d->pl + pos % d->kw;
                    dxs[((size_t)ih * W + iw) * C + c] += dys[o + c];
                }
            }
    }
}

/* Average pooling: windows clipped to the input, as Keras pads "same" pooling (the mean of the elements inside).
 * Output row oh of sample n; each output's elements are added in window order from 0, then scaled. The loops
 * are compiled for AVX2 and for the baseline (the channel loops were scalar: 10% of a model's predict). */
static inline __attribute__((always_inline)) void avgpool_window(const fl_conv_desc *d, int oh, int ow, int *h0,
                                                                 int *h1, int *w0, int *w1) {
    const int ih = oh * d->sh - d->pt, iw = ow * d->sw - d->pl;
    fl_tap_range(ih, d->kh, 1, d->h, h0, h1);
    fl_tap_range(iw, d->kw, 1, d->w, w0, w1);
    *h0 += ih, *h1 += ih, *w0 += iw, *w1 += iw; /* input rows and columns */
}
static inline __attribute__((always_inline)) void avgpool_fwd_row(const fl_conv_desc *d, int64_t n, int oh,
                                                                  const float *restrict x, float *restrict y) {
    const int W = d->w, C = d->c;
    const float *xs = x + (size_t)n * d->h * W * C;
    for (int ow = 0; ow < d->ow; ow++) {
        float *restrict yo = y + (((size_t)n * d->oh + oh) * d->ow + ow) * C;
        int h0, h1, w0, w1;
        avgpool_window(d, oh, ow, &h0, &h1, &w0, &w1);
#pragma omp simd
        for (int c = 0; c < C; c++) yo[c] = 0.0f;
        for (int ih = h0; ih < h1; ih++)
            for (int iw = w0; iw < w1; iw++) {
                const float *restrict xi = xs + ((size_t)ih * W + iw) * C;
#pragma omp simd
                for (int c = 0; c < C; c++) yo[c] += xi[c];
            }
        const int cnt = h1 > h0 && w1 > w0 ? (h1 - h0) * (w1 - w0) : 0;
        const float inv = cnt ? 1.0f / (float)cnt : 0.0f;
#pragma omp simd
        for (int c = 0; c < C; c++) yo[c] *= inv;
    }
}
static inline __attribute__((always_inline)) void avgpool_bwd_sample(const fl_conv_desc *d, int64_t n,
                                                                     const float *restrict dy, float *restrict dx,
                                                                     int accumulate) {
    const int W = d->w, C = d->c;
    float *dxs = dx + (size_t)n * d->h * W * C;
    if (!accumulate) memset(dxs, 0, (size_t)d->h * W * C * sizeof(float));
    for (int oh = 0; oh < d->oh; oh++)
        for (int ow = 0; ow < d->ow; ow++) {
            const float *restrict g = dy + (((size_t)n * d->oh + oh) * d->ow + ow) * C;
            int h0, h1, w0, w1;
            avgpool_window(d, oh, ow, &h0, &h1, &w0, &w1);
            if (h1 <= h0 || w1 <= w0) continue;
            const float inv = 1.0f / (float)((h1 - h0) * (w1 - w0));
            for (int ih = h0; ih < h1; ih++)
                for (int iw = w0; iw < w1; iw++) {
                    float *restrict dst = dxs + ((size_t)ih * W + iw) * C;
#pragma omp simd
                    for (int c = 0; c < C; c++) dst[c] += g[c] * inv;
                }
        }
}
#if FL_HAVE_AVX2_TARGET
FL_AVX2_TARGET static void avgpool_fwd_row_avx2(const fl_conv_desc *d, int64_t n, int oh, const float *x, float *y) {
    avgpool_fwd_row(d, n, oh, x, y);
}
FL_AVX2_TARGET static void avgpool_bwd_sample_avx2(const fl_conv_desc *d, int64_t n, const float *dy, float *dx,
                                                   int accumulate) {
    avgpool_bwd_sample(d, n, dy, dx, accumulate);
}
#endif
static void avgpool_fwd_row_base(const fl_conv_desc *d, int64_t n, int oh, const float *x, float *y) {
    avgpool_fwd_row(d, n, oh, x, y);
}
static void avgpool_bwd_sample_base(const fl_conv_desc *d, int64_t n, const float *dy, float *dx, int accumulate) {
    avgpool_bwd_sample(d, n, dy, dx, accumulate);
}

void fl_cpu_avgpool_fwd(const fl_conv_desc *d, const float *x, float *y) {
    const int avx2 = fl_cpu_avx2();
    const size_t in_sz = (size_t)d->h * d->w * d->c;
#pragma omp parallel for collapse(2) schedule(static) num_threads(d->n * in_sz < 65536 ? 1 : fl_cpu_threads())
    for (int64_t n = 0; n < d->n; n++)
        for (int oh = 0; oh < d->oh; oh++) {
#if FL_HAVE_AVX2_TARGET
            if (avx2) { avgpool_fwd_row_avx2(d, n, oh, x, y); continue; }
#endif
            avgpool_fwd_row_base(d, n, oh, x, y);
        }
    (void)avx2;
}

void fl_cpu_avgpool_bwd(const fl_conv_desc *d, const float *dy, float *dx, float dx_beta) {
    const int avx2 = fl_cpu_avx2();
    const size_t in_sz = (size_t)d->h * d->w * d->c;
#pragma omp parallel for schedule(static) num_threads(d->n * in_sz < 65536 ? 1 : fl_cpu_threads())
    for (int64_t n = 0; n < d->n; n++) {
#if FL_HAVE_AVX2_TARGET
        if (avx2) { avgpool_bwd_sample_avx2(d, n, dy, dx, dx_beta != 0.0f); continue; }
#endif
        avgpool_bwd_sample_base(d, n, dy, dx, dx_beta != 0.0f);
    }
    (void)avx2;
}

void fl_cpu_gap_fwd(int64_t n, int64_t hw, int c, const float *x, float *y) {
#pragma omp parallel for schedule(static) num_threads(fl_cpu_threads())
    for (int64_t i = 0; i < n; i++) {
        float *yo = y + (size_t)i * c;
        for (int k = 0; k < c; k++) yo[k] = 0;
        for (int64_t p = 0; p < hw; p++) {
            const float *xi = x + ((size_t)i * hw + p) * c;
            for (int k = 0; k < c; k++) yo[k] += xi[k];
        }
        for (int k = 0; k < c; k++) yo[k] /= (float)hw;
    }
}

void fl_cpu_gap_bwd(int64_t n, int64_t hw, int c, const float *dy, float *dx, float dx_beta) {
#pragma omp parallel for schedule(static) num_threads(fl_cpu_threads())
    for (int64_t i = 0; i < n; i++) {
        const float *g = dy + (size_t)i * c;
        for (int64_t p = 0; p < hw; p++) {
            float *d = dx + ((size_t)i * hw + p) * c;
            for (int k = 0; k < c; k++) d[k] = (dx_beta == 0.0f ? 0.0f : d[k]) + g[k] / (float)hw;
        }
    }
}
