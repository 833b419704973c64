/*
 * test_cpu_simd.c — the CPU backend's own vector kernels (cpu_avx512.c,
 * cpu_avx2.c, the direct convolutions in cpu_conv.c and Winograd in
 * cpu_winograd.c) against its portable code, which test_ops checks against
 * naive references and finite differences: Conv2D forward and backward over
 * strides, paddings, odd channel counts, tile remainders and more than 64
 * filters, on the AVX-512 kernels and on the AVX2 ones (which must give the
 * same bits: the same micro-kernel in narrower registers); Dense through the GEMM driver's
 * transposed and blocked cases; max pooling; and dropout and Adam/AdamW,
 * which must agree bit for bit (the same masks and the same weights as the
 * portable code, so that a run can be replayed anywhere). Also the
 * DepthwiseConv2D row functions at each level the CPU has (portable,
 * AVX2+FMA, AVX-512), the portable one against a naive loop. The AVX-512
 * part is reported as skipped, with the reason, where the CPU lacks it; a
 * run of 0 checks fails.
 */
#include "check.h"
#include "flynn/flynn.h"
#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/cpu_simd.h"
#include "backend/cpu/cpu_fastmath.h"
#include "ops/math.h"

#include <math.h>
#include <stdlib.h>

static float *rnd(size_t n, unsigned seed) {
    float *p = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (float)(seed >> 8) / 8388608.0f - 1.0f;
    }
    return p;
}

static float *dup(const float *a, size_t n) {
    float *p = malloc((n ? n : 1) * sizeof(float));
    memcpy(p, a, n * sizeof(float));
    return p;
}

/* max |a - b| / (1 + max |b|) */
static double rel_diff(const float *a, const float *b, size_t n) {
    double m = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > m || d != d) m = d != d ? INFINITY : d;
        if (fabs(b[i]) > s) s = fabs(b[i]);
    }
    return m / (1 + s);
}

/* The convolutions' kernel levels: 0 the portable code (im2col + cblas), 1 the direct kernels and Winograd on
 * AVX2 (cpu_avx2.c's micro-kernel), 2 on AVX-512; level_ok: this CPU runs it; set_level(-1): the default. */
#define LEVELS 3
static int level_ok(int lv) { return lv == 0 || (lv == 1 && fl_cpu_avx2()) || (lv == 2 && fl_cpu_simd_available()); }
static void set_level(int lv) {
    fl_cpu_simd_force(lv < 0 ? -1 : lv == 2);
    fl_cpu_avx2_kernels_force(lv < 0 ? -1 : lv == 1);
}
static const char *level_name(int lv) { return lv == 2 ? "AVX-512" : lv == 1 ? "AVX2" : "portable"; }

static void *ws_for(const fl_conv_desc *d) {
    size_t most = 0;
    for (int lv = 0; lv < LEVELS; lv++) {
        if (!level_ok(lv)) continue;
        set_level(lv);
        size_t a = fl_cpu_conv_workspace(d, 1);
        if (a > most) most = a;
    }
    set_level(-1);
    size_t bytes = (most + 64) / 64 * 64;
    void *ws = aligned_alloc(64, bytes);
    if (ws) memset(ws, 0xff, bytes); /* NaN: a kernel that reads scratch it did not write (a padded border) shows */
    return ws;
}

static int out_dim(int in, int k, int s, int same, int *pad) {
    if (same) {
        int o = (in + s - 1) / s, t = (o - 1) * s + k - in;
        *pad = t > 0 ? t / 2 : 0;
        return o;
    }
    *pad = 0;
    return (in - k) / s + 1;
}

/* A convolution on the direct kernels' paths (AVX-512 and AVX2: the direct kernels, Winograd, the strided
 * phases) against the portable one (im2col + cblas), dilated dh x dw; the two widths bit for bit */
static void test_conv_dil(int n, int h, int w, int c, int oc, int kh, int kw, int s, int same, int act, int bias,
                          int dh, int dw_) {
    fl_conv_desc d = {0};
    d.n = n; d.h = h; d.w = w; d.c = c; d.oc = oc; d.kh = kh; d.kw = kw; d.sh = s; d.sw = s;
    d.dil_h = dh; d.dil_w = dw_;
    d.oh = out_dim(h, (kh - 1) * dh + 1, s, same, &d.pt);
    d.ow = out_dim(w, (kw - 1) * dw_ + 1, s, same, &d.pl);
    d.act = act;
    d.has_bias = bias;
    size_t nx = (size_t)n * h * w * c, ny = (size_t)n * d.oh * d.ow * oc, nw = (size_t)kh * kw * c * oc;
    float *x = rnd(nx, 1), *wt = rnd(nw, 2), *b = rnd(oc, 3), *g = rnd(ny, 4), *dx0 = rnd(nx, 5);
    void *ws = ws_for(&d);
    float *y[LEVELS] = {0}, *dy[LEVELS] = {0}, *dx[LEVELS] = {0}, *dxa[LEVELS] = {0}, *dw[LEVELS] = {0},
          *db[LEVELS] = {0};
    for (int k = 0; k < LEVELS; k++) {
        if (!level_ok(k)) continue;
        set_level(k);
        y[k] = malloc(ny * sizeof(float));
        fl_cpu_conv2d_fwd(&d, x, wt, b, y[k], ws);
        dy[k] = dup(g, ny);
        dx[k] = malloc(nx * sizeof(float));
        dw[k] = malloc(nw * sizeof(float));
        db[k] = malloc(oc * sizeof(float));
        fl_cpu_conv2d_bwd(&d, x, wt, y[k], dy[k], dx[k], 0.0f, dw[k], db[k], ws);
        /* accumulate into an existing dx (a node with two consumers) */
        dxa[k] = dup(dx0, nx);
        float *dy2 = dup(g, ny), *dw2 = malloc(nw * sizeof(float)), *db2 = malloc(oc * sizeof(float));
        fl_cpu_conv2d_bwd(&d, x, wt, y[k], dy2, dxa[k], 1.0f, dw2, db2, ws);
        free(dy2); free(dw2); free(db2);
    }
    set_level(-1);
    char what[160];
    snprintf(what, sizeof what, "conv n%d %dx%dx%d->%d k%dx%d s%d dil%dx%d %s act%d bias%d", n, h, w, c, oc, kh, kw,
             s, dh, dw_, same ? "same" : "valid", act, bias);
    for (int k = 1; k < LEVELS; k++) {
        if (!y[k]) continue;
        const char *l = level_name(k);
        CHECK_MSG(rel_diff(y[k], y[0], ny) < 1e-5, "%s, %s: forward differs by %g", what, l, rel_diff(y[k], y[0], ny));
        CHECK_MSG(rel_diff(dx[k], dx[0], nx) < 1e-5, "%s, %s: dx differs by %g", what, l, rel_diff(dx[k], dx[0], nx));
        CHECK_MSG(rel_diff(dxa[k], dxa[0], nx) < 1e-5, "%s, %s: accumulated dx differs", what, l);
        CHECK_MSG(rel_diff(dw[k], dw[0], nw) < 1e-5, "%s, %s: dw differs by %g", what, l, rel_diff(dw[k], dw[0], nw));
        if (bias) CHECK_MSG(rel_diff(db[k], db[0], oc) < 1e-5, "%s, %s: db differs", what, l);
    }
    /* the backward where the direct kernels take it (fl_cpu_conv_pre: where both directions do); elsewhere the
     * GEMM path, whose products are OpenBLAS's beside AVX-512 and the AVX2 GEMM's beside AVX2 */
    set_level(1);
    const int direct_bwd = fl_cpu_conv_pre(&d, 0);
    set_level(-1);
    if (y[1] && y[2])
        CHECK_MSG(memcmp(y[1], y[2], ny * sizeof(float)) == 0, "%s: AVX2's forward differs from AVX-512's", what);
    if (y[1] && y[2] && direct_bwd) {
        CHECK_MSG(memcmp(dx[1], dx[2], nx * sizeof(float)) == 0, "%s: AVX2's dx differs from AVX-512's", what);
        CHECK_MSG(memcmp(dxa[1], dxa[2], nx * sizeof(float)) == 0, "%s: AVX2's accumulated dx differs", what);
        CHECK_MSG(memcmp(dw[1], dw[2], nw * sizeof(float)) == 0, "%s: AVX2's dw differs from AVX-512's", what);
        CHECK_MSG(!bias || memcmp(db[1], db[2], oc * sizeof(float)) == 0, "%s: AVX2's db differs", what);
    }
    for (int k = 0; k < LEVELS; k++) { free(y[k]); free(dy[k]); free(dx[k]); free(dxa[k]); free(dw[k]); free(db[k]); }
    free(x); free(wt); free(b); free(g); free(dx0); free(ws);
}

static void test_conv(int n, int h, int w, int c, int oc, int kh, int kw, int s, int same, int act, int bias) {
    test_conv_dil(n, h, w, c, oc, kh, kw, s, same, act, bias, 1, 1);
}

/* d.res (a residual Add, and its ReLU, in the convolution's store) at each level against the portable code
 * (the convolution, then the Add and the ReLU as their own pass), the two widths bit for bit */
static void test_conv_res(int n, int hw, int c, int oc, int k) {
    fl_conv_desc d = {.n = n, .h = hw, .w = hw + 1, .c = c, .oc = oc, .kh = k, .kw = k, .sh = 1, .sw = 1,
                      .act = FL_ACT_RELU, .has_bias = 1};
    d.oh = out_dim(d.h, k, 1, 1, &d.pt);
    d.ow = out_dim(d.w, k, 1, 1, &d.pl);
    const size_t nx = (size_t)n * d.h * d.w * c, ny = (size_t)n * d.oh * d.ow * oc, nw = (size_t)k * k * c * oc;
    float *x = rnd(nx, 51), *wt = rnd(nw, 52), *b = rnd(oc, 53), *r = rnd(ny, 54), *y[LEVELS] = {0};
    d.res = r;
    void *ws = ws_for(&d);
    for (int lv = 0; lv < LEVELS; lv++) {
        if (!level_ok(lv)) continue;
        set_level(lv);
        y[lv] = malloc(ny * sizeof(float));
        fl_cpu_conv2d_fwd(&d, x, wt, b, y[lv], ws);
    }
    set_level(-1);
    for (int lv = 1; lv < LEVELS; lv++)
        if (y[lv])
            CHECK_MSG(rel_diff(y[lv], y[0], ny) < 1e-5, "conv n%d %dx%dx%d->%d k%d with a residual, %s: differs by %g",
                      n, d.h, d.w, c, oc, k, level_name(lv), rel_diff(y[lv], y[0], ny));
    if (y[1] && y[2])
        CHECK_MSG(memcmp(y[1], y[2], ny * sizeof(float)) == 0, "conv n%d %dx%dx%d->%d with a residual: AVX2 differs "
                  "from AVX-512", n, d.h, d.w, c, oc);
    for (int lv = 0; lv < LEVELS; lv++) free(y[lv]);
    free(x); free(wt); free(b); free(r); free(ws);
}

/* d.dx_gate (the ReLU that produced x masks dx as the convolution stores it, ops.c gated_relu): dx added into
 * an existing gradient and gated is, value for value, the same sum ungated then masked by x > 0, on the path
 * this build takes (simd: the direct kernels, Winograd, the strided phases; portable: the GEMM path, masked a
 * chunk at a time). */
static void test_conv_gate_dil(int n, int h, int w, int c, int oc, int k, int s, int same, int dil) {
    fl_conv_desc d = {0};
    d.n = n; d.h = h; d.w = w; d.c = c; d.oc = oc; d.kh = k; d.kw = k; d.sh = s; d.sw = s;
    d.dil_h = d.dil_w = dil;
    d.oh = out_dim(h, (k - 1) * dil + 1, s, same, &d.pt);
    d.ow = out_dim(w, (k - 1) * dil + 1, s, same, &d.pl);
    size_t nx = (size_t)n * h * w * c, ny = (size_t)n * d.oh * d.ow * oc, nw = (size_t)k * k * c * oc;
    float *x = rnd(nx, 11), *wt = rnd(nw, 12), *g = rnd(ny, 13), *dx0 = rnd(nx, 14);
    float *y = malloc(ny * sizeof(float)), *dw = malloc(nw * sizeof(float));
    void *ws = ws_for(&d);
    for (int lv = LEVELS - 1; lv >= 0; lv--) {
        if (!level_ok(lv)) continue;
        set_level(lv);
        fl_cpu_conv2d_fwd(&d, x, wt, NULL, y, ws);
        float *dxa = dup(dx0, nx), *dxg = dup(dx0, nx), *dy = dup(g, ny);
        fl_cpu_conv2d_bwd(&d, x, wt, y, dy, dxa, 1.0f, dw, NULL, ws);
        fl_conv_desc e = d;
        e.dx_gate = 1;
        memcpy(dy, g, ny * sizeof(float));
        fl_cpu_conv2d_bwd(&e, x, wt, y, dy, dxg, 1.0f, dw, NULL, ws);
        size_t bad = 0;
        for (size_t i = 0; i < nx; i++) bad += !(dxg[i] == (x[i] > 0.0f ? dxa[i] : 0.0f));
        CHECK_MSG(bad == 0, "conv n%d %dx%dx%d->%d k%d s%d dil%d %s, %s: %zu of %zu gated dx differ from the mask after",
                  n, h, w, c, oc, k, s, dil, same ? "same" : "valid", level_name(lv), bad, nx);
        free(dxa); free(dxg); free(dy);
    }
    set_level(-1);
    free(x); free(wt); free(g); free(dx0); free(y); free(dw); free(ws);
}
static void test_conv_gate(int n, int h, int w, int c, int oc, int k, int s, int same) {
    test_conv_gate_dil(n, h, w, c, oc, k, s, same, 1);
}

/* A LeakyReLU in the forward's store (d.slope with act ReLU, what inference folds after a normalisation):
 * bit for bit the LeakyReLU layer's formula (fl_pact_forward) over the linear output, zeros and -0 included;
 * through the taps kernel, the direct kernels, Winograd and the stride-2 direct path. */
static void test_conv_slope_dil(int n, int hw, int c, int oc, int s, float slope, int dil) {
    fl_conv_desc d = {.n = n, .h = hw, .w = hw, .c = c, .oc = oc, .kh = 3, .kw = 3, .sh = s, .sw = s, .pt = dil,
                      .pl = dil, .has_bias = 1, .dil_h = dil, .dil_w = dil};
    d.oh = d.ow = (hw + s - 1) / s;
    size_t nx = (size_t)n * hw * hw * c, ny = (size_t)n * d.oh * d.ow * oc, nw = (size_t)9 * c * oc;
    float *x = rnd(nx, 31), *wt = rnd(nw, 32), *b = rnd(oc, 33), *y0 = malloc(ny * sizeof(float)),
          *y1 = malloc(ny * sizeof(float));
    memset(x, 0, (size_t)hw * hw * c * sizeof(float)); /* sample 0 all zeros: outputs of the bias alone */
    b[0] = 0.0f;
    b[1] = -0.0f; /* with channel 1's weights all negative: -0 + 0 * w stays -0 on the zero sample */
    for (size_t i = 1; i < nw; i += (size_t)oc) wt[i] = -fabsf(wt[i]);
    void *ws = ws_for(&d);
    for (int lv = 1; lv < LEVELS; lv++) {
        if (!level_ok(lv)) continue;
        set_level(lv);
        CHECK(fl_cpu_conv_slope(&d));
        d.act = FL_ACT_LINEAR;
        d.slope = 0.0f;
        fl_cpu_conv2d_fwd(&d, x, wt, b, y0, ws);
        d.act = FL_ACT_RELU;
        d.slope = slope;
        fl_cpu_conv2d_fwd(&d, x, wt, b, y1, ws);
        set_level(-1);
        const fl_pact_desc p = {FL_PACT_RELU, slope, 0.0f, INFINITY};
        size_t bad = 0;
        for (size_t i = 0; i < ny; i++) {
            float r = fl_pact_forward(&p, y0[i]);
            bad += memcmp(&r, &y1[i], sizeof r) != 0;
        }
        CHECK_MSG(bad == 0, "conv %dx%dx%d->%d s%d dil%d, %s, with a LeakyReLU(%g) in the store: %zu of %zu outputs "
                  "differ from the layer's", hw, hw, c, oc, s, dil, level_name(lv), slope, bad, ny);
    }
    free(x); free(wt); free(b); free(y0); free(y1); free(ws);
}
static void test_conv_slope(int n, int hw, int c, int oc, int s, float slope) {
    test_conv_slope_dil(n, hw, c, oc, s, slope, 1);
}

/* Conv2D + max pooling fused (forward and backward, with the ReLU gradient
 * of the convolution's input folded into dx) against the two ops run
 * apart by the portable code. */
static void test_conv_pool(int n, int h, int w, int c, int oc, int k, int same, int act, int pk, int ps) {
    fl_conv_desc d = {0}, p = {0};
    d.n = n; d.h = h; d.w = w; d.c = c; d.oc = oc; d.kh = k; d.kw = k; d.sh = 1; d.sw = 1;
    d.oh = out_dim(h, k, 1, same, &d.pt);
    d.ow = out_dim(w, k, 1, same, &d.pl);
    d.act = act;
    d.has_bias = 1;
    p.n = n; p.h = d.oh; p.w = d.ow; p.c = oc; p.oc = oc; p.kh = pk; p.kw = pk; p.sh = ps; p.sw = ps;
    p.oh = out_dim(d.oh, pk, ps, 0, &p.pt);
    p.ow = out_dim(d.ow, pk, ps, 0, &p.pl);
    size_t nx = (size_t)n * h * w * c, ny = (size_t)n * d.oh * d.ow * oc, np = (size_t)n * p.oh * p.ow * oc;
    size_t nw = (size_t)k * k * c * oc;
    float *x = rnd(nx, 61), *wt = rnd(nw, 62), *b = rnd(oc, 63), *g = rnd(np, 64);
    for (size_t i = 0; i < nx; i += 3) x[i] = -fabsf(x[i]); /* x as a ReLU output would not be, but gated */
    void *ws = ws_for(&d);
    float *y[LEVELS] = {0}, *pv[LEVELS] = {0}, *dx[LEVELS] = {0}, *dw[LEVELS] = {0}, *db[LEVELS] = {0};
    float *scratch = malloc(ny * sizeof(float));
    int32_t *am[LEVELS] = {0};
    for (int t = 0; t < LEVELS; t++) {
        if (!level_ok(t)) continue;
        set_level(t);
        y[t] = malloc(ny * sizeof(float));
        pv[t] = malloc(np * sizeof(float));
        am[t] = malloc(np * sizeof(int32_t));
        dx[t] = malloc(nx * sizeof(float));
        dw[t] = malloc(nw * sizeof(float));
        db[t] = malloc(oc * sizeof(float));
        if (t == 0) { /* apart */
            fl_cpu_conv2d_fwd(&d, x, wt, b, y[t], ws);
            fl_cpu_maxpool_fwd(&p, y[t], pv[t], am[t]);
            fl_cpu_maxpool_bwd(&p, g, am[t], scratch, 0.0f);
            fl_cpu_conv2d_bwd(&d, x, wt, y[t], scratch, dx[t], 0.0f, dw[t], db[t], ws);
            for (size_t i = 0; i < nx; i++) if (!(x[i] > 0)) dx[t][i] = 0;
        } else {
            fl_cpu_conv2d_maxpool_fwd(&d, &p, x, wt, b, y[t], pv[t], am[t], ws);
            fl_cpu_conv2d_maxpool_bwd(&d, &p, x, wt, y[t], pv[t], g, am[t], scratch, dx[t], 0.0f, 1, dw[t], db[t], ws);
        }
    }
    set_level(-1);
    char what[128];
    snprintf(what, sizeof what, "conv+pool n%d %dx%dx%d->%d k%d %s act%d pool %d/%d", n, h, w, c, oc, k,
             same ? "same" : "valid", act, pk, ps);
    for (int t = 1; t < LEVELS; t++) {
        if (!y[t]) continue;
        const char *l = level_name(t);
        CHECK_MSG(rel_diff(y[t], y[0], ny) < 1e-5, "%s, %s: conv output differs", what, l);
        CHECK_MSG(rel_diff(pv[t], pv[0], np) < 1e-5, "%s, %s: pooled differs", what, l);
        CHECK_MSG(rel_diff(dx[t], dx[0], nx) < 1e-5, "%s, %s: dx differs by %g", what, l, rel_diff(dx[t], dx[0], nx));
        CHECK_MSG(rel_diff(dw[t], dw[0], nw) < 1e-5, "%s, %s: dw differs by %g", what, l, rel_diff(dw[t], dw[0], nw));
        CHECK_MSG(rel_diff(db[t], db[0], oc) < 1e-5, "%s, %s: db differs", what, l);
    }
    if (y[1] && y[2])
        CHECK_MSG(memcmp(y[1], y[2], ny * sizeof(float)) == 0 && memcmp(pv[1], pv[2], np * sizeof(float)) == 0 &&
                      memcmp(am[1], am[2], np * sizeof(int32_t)) == 0 && memcmp(dx[1], dx[2], nx * sizeof(float)) == 0 &&
                      memcmp(dw[1], dw[2], nw * sizeof(float)) == 0 && memcmp(db[1], db[2], oc * sizeof(float)) == 0,
                  "%s: AVX2 differs from AVX-512", what);
    for (int t = 0; t < LEVELS; t++) { free(y[t]); free(pv[t]); free(am[t]); free(dx[t]); free(dw[t]); free(db[t]); }
    free(x); free(wt); free(b); free(g); free(scratch); free(ws);
}

/* A workspace sized under one thread count serves a later, larger one
 * (fl_set_num_threads after the graph reserved its buffers); the sanitizer
 * build checks the bounds. */
static void test_threads_after_reserve(void) {
    fl_conv_desc d = {0};
    d.n = 8; d.h = 12; d.w = 12; d.c = 16; d.oc = 32; d.kh = 3; d.kw = 3; d.sh = 1; d.sw = 1; d.oh = 10; d.ow = 10;
    d.act = FL_ACT_RELU;
    d.has_bias = 1;
    int before = fl_get_num_threads();
    fl_set_num_threads(1);
    size_t bytes = fl_cpu_conv_workspace(&d, 1);
    void *ws = malloc(bytes);
    fl_set_num_threads(16);
    size_t nx = (size_t)8 * 12 * 12 * 16, ny = (size_t)8 * 10 * 10 * 32, nw = (size_t)9 * 16 * 32;
    float *x = rnd(nx, 71), *w = rnd(nw, 72), *b = rnd(32, 73), *y = malloc(ny * 4), *g = rnd(ny, 74);
    float *dx = malloc(nx * 4), *dw = malloc(nw * 4), *db = malloc(32 * 4);
    for (int t = 0; t < LEVELS; t++) {
        if (!level_ok(t)) continue;
        set_level(t);
        fl_cpu_conv2d_fwd(&d, x, w, b, y, ws);
        fl_cpu_conv2d_bwd(&d, x, w, y, g, dx, 0.0f, dw, db, ws);
    }
    set_level(-1);
    fl_set_num_threads(before);
    CHECK(isfinite(dw[0]) && isfinite(dx[0]));
    free(x); free(w); free(b); free(y); free(g); free(dx); free(dw); free(db); free(ws);
}

/* The filter gradient is summed in parts of consecutive samples, the parts
 * taken by whichever thread is free and added in part order (cpu_conv.c,
 * dw_parts): dw and db against a double-precision sum, and bit for bit the
 * same for 1, 2 and 3 threads, on the direct kernels (level 2 and 1) and the
 * im2col/GEMM path (level 0), for batches below, at and above the number of
 * parts; a dilated convolution (im2col on either) and a transposed one. */
static void test_dw_parts(int n, int h, int w, int c, int oc, int k, int s, int same, int dil, int transpose,
                          int level) {
    fl_conv_desc d = {0};
    d.n = n; d.h = h; d.w = w; d.c = c; d.oc = oc; d.kh = k; d.kw = k; d.sh = s; d.sw = s;
    d.dil_h = dil; d.dil_w = dil;
    const int ek = (k - 1) * dil + 1;
    d.oh = out_dim(h, ek, s, same, &d.pt);
    d.ow = out_dim(w, ek, s, same, &d.pl);
    d.act = FL_ACT_LINEAR;
    d.has_bias = 1;
    /* a transposed convolution's x is d's output, its y d's input */
    size_t nin = (size_t)n * h * w * c, nout = (size_t)n * d.oh * d.ow * oc, nw = (size_t)k * k * c * oc;
    size_t nx = transpose ? nout : nin, ny = transpose ? nin : nout, nb = transpose ? (size_t)c : (size_t)oc;
    float *x = rnd(nx, 81), *wt = rnd(nw, 82), *b = rnd(nb, 83), *g = rnd(ny, 84), *y = malloc(ny * sizeof(float));
    float *dw[3], *db[3], *dy = malloc(ny * sizeof(float)), *dx = malloc(nx * sizeof(float));
    void *ws = ws_for(&d);
    const int before = fl_get_num_threads();
    set_level(level);
    for (int t = 0; t < 3; t++) {
        fl_set_num_threads(t + 1);
        dw[t] = malloc(nw * sizeof(float));
        db[t] = malloc(nb * sizeof(float));
        memcpy(dy, g, ny * sizeof(float));
        if (transpose) {
            fl_cpu_conv2d_transpose_fwd(&d, x, wt, b, y, ws);
            fl_cpu_conv2d_transpose_bwd(&d, x, wt, y, dy, dx, 0.0f, dw[t], db[t], ws);
        } else {
            fl_cpu_conv2d_fwd(&d, x, wt, b, y, ws);
            fl_cpu_conv2d_bwd(&d, x, wt, y, dy, dx, 0.0f, dw[t], db[t], ws);
        }
    }
    set_level(-1);
    fl_set_num_threads(before);
    char what[160];
    snprintf(what, sizeof what, "dw parts n%d %dx%dx%d->%d k%d s%d dil%d %s%s %s", n, h, w, c, oc, k, s, dil,
             same ? "same" : "valid", transpose ? " transposed" : "", level_name(level));
    for (int t = 1; t < 3; t++) {
        CHECK_MSG(memcmp(dw[t], dw[0], nw * sizeof(float)) == 0, "%s: dw with %d threads differs from 1 thread", what,
                  t + 1);
        CHECK_MSG(memcmp(db[t], db[0], nb * sizeof(float)) == 0, "%s: db with %d threads differs", what, t + 1);
    }
    /* the reference: dw[kh][kw][ci][co] = sum over samples and output
     * positions of input[tap] * grad[out]; for the transposed convolution the
     * input is its dy (d's x side) and the gradient its x (d's y side) */
    const float *in = transpose ? g : x, *gr = transpose ? x : g;
    double *rw = calloc(nw, sizeof(double)), *rb = calloc(nb, sizeof(double));
    for (int ni = 0; ni < n; ni++)
        for (int oh = 0; oh < d.oh; oh++)
            for (int ow = 0; ow < d.ow; ow++) {
                const float *go = gr + (((size_t)ni * d.oh + oh) * d.ow + ow) * oc;
                if (!transpose)
                    for (int co = 0; co < oc; co++) rb[co] += go[co];
                for (int kh = 0; kh < k; kh++)
                    for (int kw = 0; kw < k; kw++) {
                        int ih = oh * s - d.pt + kh * dil, iw = ow * s - d.pl + kw * dil;
                        if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
                        const float *xi = in + (((size_t)ni * h + ih) * w + iw) * c;
                        double *r = rw + ((size_t)kh * k + kw) * c * oc;
                        for (int ci = 0; ci < c; ci++)
                            for (int co = 0; co < oc; co++) r[(size_t)ci * oc + co] += (double)xi[ci] * go[co];
                    }
            }
    if (transpose)
        for (size_t i = 0; i < (size_t)n * h * w; i++)
            for (int ci = 0; ci < c; ci++) rb[ci] += g[i * c + ci];
    float *fw = malloc(nw * sizeof(float)), *fb = malloc(nb * sizeof(float));
    for (size_t i = 0; i < nw; i++) fw[i] = (float)rw[i];
    for (size_t i = 0; i < nb; i++) fb[i] = (float)rb[i];
    CHECK_MSG(rel_diff(dw[0], fw, nw) < 1e-5, "%s: dw differs from the double sum by %g", what, rel_diff(dw[0], fw, nw));
    CHECK_MSG(rel_diff(db[0], fb, nb) < 1e-5, "%s: db differs from the double sum by %g", what, rel_diff(db[0], fb, nb));
    for (int t = 0; t < 3; t++) { free(dw[t]); free(db[t]); }
    free(x); free(wt); free(b); free(g); free(y); free(dy); free(dx); free(ws); free(rw); free(rb); free(fw); free(fb);
}

static void test_dw_parts_all(void) {
    for (int simd = 0; simd < LEVELS; simd++) {
        if (!level_ok(simd)) continue;
        const int ns[] = {1, 3, 8, 13, 37};
        for (int i = 0; i < 5; i++) test_dw_parts(ns[i], 9, 8, 5, 12, 3, 1, 1, 1, 0, simd);
        test_dw_parts(11, 10, 10, 32, 32, 3, 1, 1, 1, 0, simd); /* Winograd's data gradient beside */
        test_dw_parts(6, 9, 9, 4, 6, 3, 2, 0, 1, 0, simd);      /* stride 2 */
        test_dw_parts(9, 6, 7, 8, 16, 1, 1, 0, 1, 0, simd);     /* 1x1: GEMM on x */
        test_dw_parts(7, 11, 10, 3, 5, 3, 1, 1, 2, 0, simd);    /* dilated: im2col */
        test_dw_parts(10, 4, 5, 6, 7, 3, 2, 1, 1, 1, simd);     /* transposed */
    }
}

/* The backend's Dense through fl_simd_gemm (or, with g_force set to
 * fl_cpu_avx2_kernels_force, fl_avx2_gemm) against cblas. */
static void (*g_force)(int on) = fl_cpu_simd_force;
static void test_dense(int m, int k, int n, int act, int bias, float dx_beta) {
    const fl_backend *be = fl_backend_cpu();
    fl_dense_desc d = {m, k, n, act, bias};
    float *x = rnd((size_t)m * k, 11), *w = rnd((size_t)k * n, 12), *b = rnd(n, 13), *g = rnd((size_t)m * n, 14);
    float *dx0 = rnd((size_t)m * k, 15);
    float *y[2], *dy[2], *dx[2], *dw[2], *db[2];
    for (int t = 0; t < 2; t++) {
        g_force(t);
        y[t] = malloc((size_t)m * n * sizeof(float));
        be->dense_fwd(&d, x, w, b, y[t]);
        dy[t] = dup(g, (size_t)m * n);
        dx[t] = dup(dx0, (size_t)m * k);
        dw[t] = malloc((size_t)k * n * sizeof(float));
        db[t] = malloc(n * sizeof(float));
        be->dense_bwd(&d, x, w, y[t], dy[t], dx[t], dx_beta, dw[t], db[t]);
    }
    g_force(-1);
    char what[96];
    snprintf(what, sizeof what, "dense %dx%d->%d act%d bias%d beta%g", m, k, n, act, bias, dx_beta);
    CHECK_MSG(rel_diff(y[1], y[0], (size_t)m * n) < 1e-5, "%s: forward differs", what);
    CHECK_MSG(rel_diff(dx[1], dx[0], (size_t)m * k) < 1e-5, "%s: dx differs", what);
    CHECK_MSG(rel_diff(dw[1], dw[0], (size_t)k * n) < 1e-5, "%s: dw differs", what);
    if (bias) CHECK_MSG(rel_diff(db[1], db[0], n) < 1e-5, "%s: db differs", what);
    for (int t = 0; t < 2; t++) { free(y[t]); free(dy[t]); free(dx[t]); free(dw[t]); free(db[t]); }
    free(x); free(w); free(b); free(g); free(dx0);
}

/* A Dense layer at batch 1 whose kernel is large runs on every thread: the
 * product is bound by reading the kernel (mnist_cnn's 9216 x 128 at batch 1
 * ran on one thread, 17% of its predict), and the threads' column blocks
 * give the same bits as one thread. n = 130 leaves a narrow last block. */
static void test_dense_batch1_threads(void) {
    CHECK_MSG(fl_gemm_threads(1, 128, 9216, 2e6, 2) == 2, "mnist_cnn's Dense at batch 1 runs on one thread");
    CHECK_MSG(fl_gemm_threads(1, 10, 128, 2e6, 2) == 1, "a 128 x 10 Dense at batch 1 is split across threads");
    CHECK_MSG(fl_gemm_threads(64, 64, 64, 2e6, 2) == 1, "a 64 x 64 x 64 product is split across threads");
    const int k = 9216, n = 130;
    const fl_backend *be = fl_backend_cpu();
    fl_dense_desc d = {1, k, n, FL_ACT_RELU, 1};
    float *x = rnd(k, 41), *w = rnd((size_t)k * n, 42), *b = rnd(n, 43), *y[3];
    const int before = fl_get_num_threads();
    for (int t = 0; t < 3; t++) {
        g_force(1);
        fl_set_num_threads(t + 1);
        y[t] = malloc(n * sizeof(float));
        be->dense_fwd(&d, x, w, b, y[t]);
    }
    g_force(-1);
    fl_set_num_threads(before);
    for (int t = 1; t < 3; t++)
        CHECK_MSG(memcmp(y[t], y[0], n * sizeof(float)) == 0, "dense 1x%dx%d: %d threads differ from 1", k, n, t + 1);
    for (int t = 0; t < 3; t++) free(y[t]);
    free(x); free(w); free(b);
    test_dense(1, k, n, FL_ACT_RELU, 1, 0.0f); /* against cblas */
}

/* Max pooling as Keras defines it, the plainest way: each window clipped to the input, the first maximum
 * (argmax: its kh * k + kw), dx += dy at it, in output order. */
static void maxpool_ref(const fl_conv_desc *d, const float *x, const float *g, float *y, int32_t *am, float *dx,
                        float beta) {
    const size_t nx = (size_t)d->n * d->h * d->w * d->c;
    if (beta == 0.0f) memset(dx, 0, nx * sizeof(float));
    for (int n = 0; n < d->n; n++)
        for (int oh = 0; oh < d->oh; oh++)
            for (int ow = 0; ow < d->ow; ow++)
                for (int c = 0; c < d->c; c++) {
                    size_t o = (((size_t)n * d->oh + oh) * d->ow + ow) * d->c + c;
                    float best = -INFINITY;
                    int32_t at = -1;
                    for (int kh = 0; kh < d->kh; kh++)
                        for (int kw = 0; kw < d->kw; kw++) {
                            int ih = oh * d->sh - d->pt + kh, iw = ow * d->sw - d->pl + kw;
                            if (ih < 0 || ih >= d->h || iw < 0 || iw >= d->w) continue;
                            float v = x[(((size_t)n * d->h + ih) * d->w + iw) * d->c + c];
                            if (at < 0 || v > best) { best = v; at = kh * d->kw + kw; }
                        }
                    y[o] = best;
                    am[o] = at;
                    if (at >= 0) {
                        int ih = oh * d->sh - d->pt + at / d->kw, iw = ow * d->sw - d->pl + at % d->kw;
                        dx[(((size_t)n * d->h + ih) * d->w + iw) * d->c + c] += g[o];
                    }
                }
}

/* A k x k pooling, stride s, "same" or "valid" */
static fl_conv_desc pool_desc(int n, int h, int w, int c, int k, int s, int same) {
    fl_conv_desc d = {0};
    d.n = n; d.h = h; d.w = w; d.c = c; d.oc = c; d.kh = k; d.kw = k; d.sh = s; d.sw = s;
    d.oh = out_dim(h, k, s, same, &d.pt);
    d.ow = out_dim(w, k, s, same, &d.pl);
    return d;
}

/* The AVX-512 and the portable pooling against maxpool_ref, bit for bit: y, argmax and dx (dx += where beta) */
static void test_maxpool(int n, int h, int w, int c, int k, int s, int same, float beta) {
    const fl_conv_desc d = pool_desc(n, h, w, c, k, s, same);
    size_t nx = (size_t)n * h * w * c, ny = (size_t)n * d.oh * d.ow * c;
    float *x = rnd(nx, 21), *g = rnd(ny, 22), *dx0 = rnd(nx, 23);
    for (size_t i = 0; i < nx; i += 7) x[i] = x[i / 2]; /* some ties */
    float *y[3], *dx[3];
    int32_t *am[3];
    for (int t = 0; t < 3; t++) {
        y[t] = malloc(ny * sizeof(float));
        am[t] = malloc(ny * sizeof(int32_t));
        dx[t] = dup(dx0, nx);
        if (t == 2) { maxpool_ref(&d, x, g, y[t], am[t], dx[t], beta); break; }
        fl_cpu_simd_force(t);
        fl_cpu_maxpool_fwd(&d, x, y[t], am[t]);
        fl_cpu_maxpool_bwd(&d, g, am[t], dx[t], beta);
    }
    fl_cpu_simd_force(-1);
    for (int t = 0; t < 2; t++) {
        const char *path = t ? "AVX-512" : "portable";
        CHECK_MSG(memcmp(y[t], y[2], ny * sizeof(float)) == 0, "maxpool %dx%dx%d k%d s%d same%d: %s forward differs",
                  h, w, c, k, s, same, path);
        CHECK_MSG(memcmp(am[t], am[2], ny * sizeof(int32_t)) == 0, "maxpool %dx%dx%d k%d s%d same%d: %s argmax differs",
                  h, w, c, k, s, same, path);
        CHECK_MSG(memcmp(dx[t], dx[2], nx * sizeof(float)) == 0, "maxpool %dx%dx%d k%d s%d same%d beta%g: %s dx differs",
                  h, w, c, k, s, same, beta, path);
    }
    for (int t = 0; t < 3; t++) { free(y[t]); free(am[t]); free(dx[t]); }
    free(x); free(g); free(dx0);
}

/* Average pooling (the vector loops) against the plainest form, bit for bit: the window's elements inside the
 * input added from 0 in window order, times 1/count; dx += dy/count over each window, in output order. */
static void test_avgpool(int n, int h, int w, int c, int k, int s, int same, float beta) {
    const fl_conv_desc d = pool_desc(n, h, w, c, k, s, same);
    size_t nx = (size_t)n * h * w * c, ny = (size_t)n * d.oh * d.ow * c;
    float *x = rnd(nx, 31), *g = rnd(ny, 32), *dx = rnd(nx, 33), *dxr = dup(dx, nx);
    float *y = malloc(ny * sizeof(float)), *yr = malloc(ny * sizeof(float));
    fl_cpu_avgpool_fwd(&d, x, y);
    fl_cpu_avgpool_bwd(&d, g, dx, beta);
    if (beta == 0.0f) memset(dxr, 0, nx * sizeof(float));
    for (int b = 0; b < n; b++)
        for (int oh = 0; oh < d.oh; oh++)
            for (int ow = 0; ow < d.ow; ow++)
                for (int j = 0; j < c; j++) {
                    float sum = 0.0f;
                    int cnt = 0;
                    for (int pass = 0; pass < 2; pass++)
                        for (int kh = 0; kh < k; kh++)
                            for (int kw = 0; kw < k; kw++) {
                                int ih = oh * s - d.pt + kh, iw = ow * s - d.pl + kw;
                                if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
                                size_t at = (((size_t)b * h + ih) * w + iw) * c + j;
                                if (pass == 0) { sum += x[at]; cnt++; }
                                else dxr[at] += g[(((size_t)b * d.oh + oh) * d.ow + ow) * c + j] * (1.0f / (float)cnt);
                            }
                    yr[(((size_t)b * d.oh + oh) * d.ow + ow) * c + j] = sum * (1.0f / (float)cnt);
                }
    CHECK_MSG(memcmp(y, yr, ny * sizeof(float)) == 0, "avgpool %dx%dx%d k%d s%d same%d: forward differs", h, w, c, k,
              s, same);
    CHECK_MSG(memcmp(dx, dxr, nx * sizeof(float)) == 0, "avgpool %dx%dx%d k%d s%d same%d beta%g: dx differs", h, w, c,
              k, s, same, beta);
    free(x); free(g); free(dx); free(dxr); free(y); free(yr);
}

static void test_dropout(int64_t n, float rate, uint64_t step) {
    const fl_backend *be = fl_backend_cpu();
    float *x = rnd((size_t)n, 31), *g = rnd((size_t)n, 32), *acc0 = rnd((size_t)n, 33);
    float *y[2], *dx[2], *dxa[2];
    uint8_t *mk[2];
    for (int t = 0; t < 2; t++) {
        fl_cpu_simd_force(t);
        y[t] = malloc((size_t)n * sizeof(float));
        mk[t] = malloc((size_t)n);
        be->dropout_fwd(n, rate, 0x1234567890ull, 77 ^ (step << 20), 0, x, y[t], mk[t]);
        dx[t] = malloc((size_t)n * sizeof(float));
        be->dropout_bwd(n, rate, mk[t], g, dx[t], 0.0f);
        dxa[t] = dup(acc0, (size_t)n);
        be->dropout_bwd(n, rate, mk[t], g, dxa[t], 1.0f);
    }
    fl_cpu_simd_force(-1);
    /* a range that starts inside a Philox block, as a thread's share may */
    if (n > 8) {
        float *ys = malloc((size_t)n * sizeof(float));
        uint8_t *ms = malloc((size_t)n);
        fl_simd_dropout_fwd(3, n - 2, 0, rate, 0x1234567890ull, 77 ^ (step << 20), x, ys, ms);
        CHECK_MSG(memcmp(ms + 3, mk[0] + 3, (size_t)n - 5) == 0 && memcmp(ys + 3, y[0] + 3, ((size_t)n - 5) * 4) == 0,
                  "dropout n=%lld from element 3: differs", (long long)n);
        free(ys);
        free(ms);
    }
    CHECK_MSG(memcmp(mk[0], mk[1], (size_t)n) == 0, "dropout n=%lld rate %g: masks differ", (long long)n, rate);
    CHECK_MSG(memcmp(y[0], y[1], (size_t)n * sizeof(float)) == 0, "dropout n=%lld: forward differs", (long long)n);
    CHECK_MSG(memcmp(dx[0], dx[1], (size_t)n * sizeof(float)) == 0, "dropout n=%lld: backward differs", (long long)n);
    CHECK_MSG(memcmp(dxa[0], dxa[1], (size_t)n * sizeof(float)) == 0, "dropout n=%lld: accumulated backward differs",
              (long long)n);
    for (int t = 0; t < 2; t++) { free(y[t]); free(mk[t]); free(dx[t]); free(dxa[t]); }
    free(x); free(g); free(acc0);
}

/* Dropout at an element offset (a rank's share of a batch under MPI): n
 * elements drawn at offset k are elements [k, k + n) of the k + n drawn at
 * offset 0, and each is Philox element k + i (fl_philox_u32) against the
 * rate; on the portable path (simd 0) or the AVX-512 one (1), with offsets
 * that are and are not multiples of a Philox block (4), a vector (16) and a
 * vector group (64), and sizes around those and past the threads' cut
 * (32768). The AVX-512 kernel is also run on a range [i0, i1) inside the
 * buffer, as a thread's share is. */
static void test_dropout_offset(int simd) {
    const fl_backend *be = fl_backend_cpu();
    static const int64_t offs[] = {0, 1, 2, 3, 4, 5, 15, 16, 17, 63, 64, 65, 66, 127, 1000, 40001};
    static const int64_t ns[] = {1, 3, 4, 7, 64, 65, 130, 1001, 33000};
    const uint64_t seed = 0xfeedfacecafeull, stream = 0x5151 ^ ((uint64_t)9 << 20);
    const float rate = 0.3f;
    fl_cpu_simd_force(simd);
    for (size_t a = 0; a < sizeof offs / sizeof offs[0]; a++)
        for (size_t c = 0; c < sizeof ns / sizeof ns[0]; c++) {
            const int64_t k = offs[a], n = ns[c], N = k + n;
            float *x = rnd((size_t)N, 41), *yall = malloc((size_t)N * sizeof(float)), *y = malloc((size_t)n * sizeof(float));
            uint8_t *mall = malloc((size_t)N), *m = malloc((size_t)n);
            be->dropout_fwd(N, rate, seed, stream, 0, x, yall, mall);
            memset(m, 7, (size_t)n);
            be->dropout_fwd(n, rate, seed, stream, k, x + k, y, m);
            CHECK_MSG(memcmp(m, mall + k, (size_t)n) == 0 && memcmp(y, yall + k, (size_t)n * sizeof(float)) == 0,
                      "dropout (%s) n=%lld at offset %lld: not elements [%lld, %lld) of one draw",
                      simd ? "AVX-512" : "portable", (long long)n, (long long)k, (long long)k, (long long)N);
            int64_t bad = -1;
            for (int64_t i = 0; i < n && bad < 0; i++)
                if (m[i] != (fl_u32_to_unit(fl_philox_u32(seed, stream, (uint64_t)(k + i))) >= rate)) bad = i;
            CHECK_MSG(bad < 0, "dropout (%s) n=%lld at offset %lld: element %lld is not Philox element %lld",
                      simd ? "AVX-512" : "portable", (long long)n, (long long)k, (long long)bad, (long long)(k + bad));
            if (simd && n > 8) { /* a thread's range [3, n - 2) of the offset buffer */
                float *ys = malloc((size_t)n * sizeof(float));
                uint8_t *ms = malloc((size_t)n);
                fl_simd_dropout_fwd(3, n - 2, k, rate, seed, stream, x + k, ys, ms);
                CHECK_MSG(memcmp(ms + 3, m + 3, (size_t)n - 5) == 0 && memcmp(ys + 3, y + 3, ((size_t)n - 5) * 4) == 0,
                          "dropout (AVX-512) n=%lld at offset %lld from element 3: differs", (long long)n, (long long)k);
                free(ys);
                free(ms);
            }
            free(x); free(yall); free(y); free(mall); free(m);
        }
    fl_cpu_simd_force(-1);
}

static void test_adam(int code) {
    const fl_backend *be = fl_backend_cpu();
    const int64_t sizes[3] = {1, 37, 100003};
    float *w[2][3], *m[2][3], *v[2][3], *g[3];
    for (int i = 0; i < 3; i++) g[i] = rnd((size_t)sizes[i], 40 + i);
    for (int t = 0; t < 2; t++) {
        fl_cpu_simd_force(t);
        fl_param_ref p[3];
        for (int i = 0; i < 3; i++) {
            w[t][i] = rnd((size_t)sizes[i], 50 + i);
            m[t][i] = calloc((size_t)sizes[i], sizeof(float));
            v[t][i] = calloc((size_t)sizes[i], sizeof(float));
            p[i] = (fl_param_ref){.w = w[t][i], .g = g[i], .s0 = m[t][i], .s1 = v[t][i], .n = sizes[i]};
        }
        for (int64_t step = 1; step <= 3; step++) {
            fl_opt_desc d = {.code = code, .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-7f,
                             .weight_decay = 0.004f, .step = step};
            be->optimizer_step(&d, p, 3);
        }
    }
    fl_cpu_simd_force(-1);
    for (int i = 0; i < 3; i++) {
        size_t b = (size_t)sizes[i] * sizeof(float);
        CHECK_MSG(memcmp(w[0][i], w[1][i], b) == 0 && memcmp(m[0][i], m[1][i], b) == 0 &&
                      memcmp(v[0][i], v[1][i], b) == 0,
                  "%s over %lld weights: not bit-identical", code == FL_OPT_ADAMW ? "AdamW" : "Adam",
                  (long long)sizes[i]);
        for (int t = 0; t < 2; t++) { free(w[t][i]); free(m[t][i]); free(v[t][i]); }
        free(g[i]);
    }
}

/* DepthwiseConv2D (cpu_depthwise.c): its row functions, compiled portable,
 * AVX2+FMA and AVX-512, at every level this CPU has against the portable
 * one. FMA contracts a*b+c, so they agree to rounding, not bit for bit. */
static int g_dw_levels_run[3];
static void test_depthwise(int n, int h, int w, int c, int dm, int kh, int kw, int s, int same, int act, int bias) {
    fl_conv_desc d = {0};
    d.n = n; d.h = h; d.w = w; d.c = c; d.oc = c * dm; d.kh = kh; d.kw = kw; d.sh = s; d.sw = s;
    d.oh = out_dim(h, kh, s, same, &d.pt);
    d.ow = out_dim(w, kw, s, same, &d.pl);
    d.act = act;
    d.has_bias = bias;
    const int oc = d.oc;
    size_t nx = (size_t)n * h * w * c, ny = (size_t)n * d.oh * d.ow * oc, nw = (size_t)kh * kw * oc;
    float *x = rnd(nx, 11), *wt = rnd(nw, 12), *b = rnd(oc, 13), *g = rnd(ny, 14);
    float *y[3] = {0}, *dy[3] = {0}, *dx[3] = {0}, *dw[3] = {0}, *db[3] = {0};
    const int levels = fl_cpu_depthwise_levels();
    char what[160];
    snprintf(what, sizeof what, "depthwise n%d %dx%dx%d dm%d k%dx%d s%d %s act%d bias%d", n, h, w, c, dm, kh, kw, s,
             same ? "same" : "valid", act, bias);
    for (int k = 0; k < 3; k++) {
        if (!(levels >> k & 1)) continue;
        fl_cpu_depthwise_force(k);
        y[k] = malloc(ny * sizeof(float));
        fl_cpu_depthwise_fwd(&d, x, wt, bias ? b : NULL, y[k]);
        dy[k] = dup(g, ny);
        dx[k] = malloc(nx * sizeof(float));
        dw[k] = malloc(nw * sizeof(float));
        db[k] = malloc(oc * sizeof(float));
        fl_cpu_depthwise_bwd(&d, x, wt, y[k], dy[k], dx[k], 0.0f, dw[k], bias ? db[k] : NULL);
        if (k > 0) {
            g_dw_levels_run[k]++;
            const char *lv = k == 1 ? "AVX2+FMA" : "AVX-512";
            CHECK_MSG(rel_diff(y[k], y[0], ny) < 1e-5, "%s, %s: forward differs by %g", what, lv, rel_diff(y[k], y[0], ny));
            CHECK_MSG(rel_diff(dx[k], dx[0], nx) < 1e-5, "%s, %s: dx differs by %g", what, lv, rel_diff(dx[k], dx[0], nx));
            CHECK_MSG(rel_diff(dw[k], dw[0], nw) < 1e-5, "%s, %s: dw differs by %g", what, lv, rel_diff(dw[k], dw[0], nw));
            if (bias) CHECK_MSG(rel_diff(db[k], db[0], oc) < 1e-5, "%s, %s: db differs", what, lv);
        }
    }
    fl_cpu_depthwise_force(-1);
    /* the portable level itself against a naive loop (forward): a wrong
     * portable reference would make the comparisons above meaningless */
    double worst = 0;
    for (int64_t i = 0; i < n; i++)
        for (int oy = 0; oy < d.oh; oy++)
            for (int ox = 0; ox < d.ow; ox++)
                for (int o = 0; o < oc; o++) {
                    double z = bias ? b[o] : 0;
                    for (int ky = 0; ky < kh; ky++)
                        for (int kx = 0; kx < kw; kx++) {
                            int iy = oy * s - d.pt + ky, ix = ox * s - d.pl + kx;
                            if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                            z += (double)x[((i * h + iy) * w + ix) * c + o / dm] * wt[(ky * kw + kx) * oc + o];
                        }
                    double ref = fl_act_forward(act, (float)z);
                    worst = fmax(worst, fabs(ref - y[0][((i * d.oh + oy) * d.ow + ox) * oc + o]));
                }
    CHECK_MSG(worst < 1e-4, "%s, portable: forward differs from a naive loop by %g", what, worst);
    /* dw and db are summed in parts added in part order: bit for bit the same
     * for 1, 2 and 3 threads; and with the kernel frozen (dw NULL), dx and db
     * are those of the full backward (the threads' dw once landed in the db
     * sums there) */
    const int before = fl_get_num_threads(), top = levels & 4 ? 2 : levels & 2 ? 1 : 0;
    fl_cpu_depthwise_force(top);
    float *dy2 = malloc(ny * sizeof(float)), *dx2 = malloc(nx * sizeof(float)), *dw2 = malloc(nw * sizeof(float));
    float *db2 = malloc(oc * sizeof(float));
    for (int t = 1; t <= 3; t++) {
        fl_set_num_threads(t);
        memcpy(dy2, g, ny * sizeof(float));
        fl_cpu_depthwise_bwd(&d, x, wt, y[top], dy2, dx2, 0.0f, dw2, bias ? db2 : NULL);
        CHECK_MSG(memcmp(dw2, dw[top], nw * sizeof(float)) == 0, "%s: dw with %d threads differs", what, t);
        CHECK_MSG(memcmp(dx2, dx[top], nx * sizeof(float)) == 0, "%s: dx with %d threads differs", what, t);
        if (bias) CHECK_MSG(memcmp(db2, db[top], oc * sizeof(float)) == 0, "%s: db with %d threads differs", what, t);
        memcpy(dy2, g, ny * sizeof(float));
        fl_cpu_depthwise_bwd(&d, x, wt, y[top], dy2, dx2, 0.0f, NULL, bias ? db2 : NULL);
        CHECK_MSG(memcmp(dx2, dx[top], nx * sizeof(float)) == 0, "%s: dx with the kernel frozen differs", what);
        if (bias) CHECK_MSG(memcmp(db2, db[top], oc * sizeof(float)) == 0, "%s: db with the kernel frozen differs", what);
    }
    fl_set_num_threads(before);
    fl_cpu_depthwise_force(-1);
    free(dy2); free(dx2); free(dw2); free(db2);
    for (int k = 0; k < 3; k++) { free(y[k]); free(dy[k]); free(dx[k]); free(dw[k]); free(db[k]); }
    free(x); free(wt); free(b); free(g);
}

/* The AVX-512 kernels of cpu_avx512.c and the direct convolutions against
 * the portable code (only where the CPU has AVX-512). */
static void test_avx512(void);
static void test_direct(void);



/* The attention softmax of unmasked rows, on AVX-512 (16 lanes, exp by
 * vscalefps) and on the AVX2/portable code, against a double-precision
 * softmax: row lengths around the vector widths, scores far apart (exp
 * underflows to 0) and one -inf score (a key that gets weight 0). */
static void test_softmax_rows(void) {
    const int lens[] = {1, 5, 8, 16, 17, 31, 32, 33, 128, 200};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        const int tk = lens[li], tq = 3;
        fl_attn_desc d = {.n = 2, .heads = 1, .tq = tq, .tk = tk, .dk = 1, .dv = 1, .scale = 1.0f};
        const size_t ns = (size_t)2 * tq * tk;
        float *s0 = rnd(ns, 90 + (unsigned)li);
        for (size_t i = 0; i < ns; i++) s0[i] *= 16.0f;
        for (int j = 0; j < tk; j += 3) s0[tk + j] -= 200.0f; /* row 1: underflow */
        if (tk > 1) s0[2 * tk + tk - 1] = -INFINITY;          /* row 2: a key with weight 0 */
        for (int simd = 1; simd >= 0; simd--) {
            if (simd && !fl_cpu_simd_available()) continue;
            fl_cpu_simd_force(simd);
            float *s = dup(s0, ns);
            fl_cpu_attn_softmax_fwd(&d, NULL, NULL, NULL, s);
            double worst = 0;
            for (size_t r = 0; r < ns / tk; r++) {
                const float *x = s0 + r * tk;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < tk; j++) mx = x[j] > mx ? x[j] : mx;
                for (int j = 0; j < tk; j++) sum += exp((double)x[j] - mx);
                for (int j = 0; j < tk; j++) {
                    double e = fabs(exp((double)x[j] - mx) / sum - s[r * tk + j]);
                    if (!(e <= worst)) worst = e != e ? INFINITY : e;
                }
            }
            CHECK_MSG(worst < 2e-6, "softmax rows of %d (%s): off a double softmax by %g", tk,
                      simd ? "AVX-512" : "AVX2/portable", worst);
            free(s);
        }
        fl_cpu_simd_force(-1);
        free(s0);
    }
}

/* fl_cpu_attn_fwd_blocked (one (batch, head) block at a time) against the
 * three whole-batch calls it replaces: the same numbers, bit for bit, for
 * every mask mode, causal or not, with query, value and attention masks,
 * scaled, 1 and 2 threads. */
static void test_attn_blocked(int mode, int causal, int masks, int threads) {
    const int N = 3, H = 2, tq = 9, tk = 11, dk = 5, dv = 7;
    fl_attn_desc d = {.n = N, .heads = H, .tq = tq, .tk = tk, .dk = dk, .dv = dv, .scale = 0.3f, .causal = causal,
                      .mask_mode = mode};
    float *q = rnd((size_t)N * tq * H * dk, 51), *k = rnd((size_t)N * tk * H * dk, 52);
    float *v = rnd((size_t)N * tk * H * dv, 53);
    float *qm = rnd((size_t)N * tq, 54), *vm = rnd((size_t)N * tk, 55), *am = rnd((size_t)N * tq * tk, 56);
    for (int i = 0; i < N * tk; i++) if (i % tk == 0) vm[i] = 1.0f; /* row b=..: some unmasked key */
    for (int i = 0; i < N * tq; i++) if (i == tq + 2) qm[i] = -1.0f;
    if (masks) for (int j = 0; j < tk; j++) vm[tk + j] = -1.0f; /* sample 1: every key masked */
    fl_gemm_desc sd = {.ta = 0, .tb = 1, .m = tq, .n = tk, .k = dk, .alpha = d.scale, .beta = 0.0f, .lda = H * dk,
                       .ldb = H * dk, .ldc = tk, .sa = {(int64_t)tq * H * dk, dk}, .sb = {(int64_t)tk * H * dk, dk},
                       .sc = {(int64_t)H * tq * tk, (int64_t)tq * tk}, .nouter = N, .ninner = H};
    fl_gemm_desc pd = {.ta = 0, .tb = 0, .m = tq, .n = dv, .k = tk, .alpha = 1.0f, .beta = 0.0f, .lda = tk,
                       .ldb = H * dv, .ldc = H * dv, .sa = {(int64_t)H * tq * tk, (int64_t)tq * tk},
                       .sb = {(int64_t)tk * H * dv, dv}, .sc = {(int64_t)tq * H * dv, dv}, .nouter = N, .ninner = H};
    const size_t ns = (size_t)N * H * tq * tk, no = (size_t)N * tq * H * dv;
    float *s0 = calloc(ns, sizeof(float)), *s1 = calloc(ns, sizeof(float));
    float *o0 = calloc(no, sizeof(float)), *o1 = calloc(no, sizeof(float));
    const float *QM = masks ? qm : NULL, *VM = masks ? vm : NULL, *AM = masks > 1 ? am : NULL;
    int before = fl_get_num_threads();
    fl_set_num_threads(threads);
    fl_cpu_gemm_batched(&sd, q, k, s0);
    fl_cpu_attn_softmax_fwd(&d, QM, VM, AM, s0);
    fl_cpu_gemm_batched(&pd, s0, v, o0);
    fl_cpu_attn_fwd_blocked(&sd, &pd, &d, q, k, v, QM, VM, AM, s1, o1, 1);
    CHECK_MSG(memcmp(s0, s1, ns * sizeof(float)) == 0 && memcmp(o0, o1, no * sizeof(float)) == 0,
              "blocked attention forward differs (mode %d causal %d masks %d threads %d)", mode, causal, masks,
              threads);
    /* keep 0 (predict): the scores only in one scratch block per thread, the same outputs */
    for (size_t i = 0; i < no; i++) o1[i] = NAN;
    for (size_t i = 0; i < ns; i++) s1[i] = NAN;
    fl_cpu_attn_fwd_blocked(&sd, &pd, &d, q, k, v, QM, VM, AM, s1, o1, 0);
    fl_set_num_threads(before);
    CHECK_MSG(memcmp(o0, o1, no * sizeof(float)) == 0,
              "blocked attention forward with scratch scores differs (mode %d causal %d masks %d threads %d)", mode,
              causal, masks, threads);
    size_t untouched = 0; /* 6 blocks, at most 2 threads: at least 4 blocks of s never written */
    for (size_t i = 0; i < ns; i++) untouched += isnan(s1[i]) != 0;
    CHECK_MSG(untouched >= ns - 2 * (size_t)tq * tk, "keep 0 wrote %zu of %zu scores, expected at most 2 blocks",
              ns - untouched, ns);
    free(q); free(k); free(v); free(qm); free(vm); free(am); free(s0); free(s1); free(o0); free(o1);
}

/* fl_cpu_attn_bwd_blocked (the backward one (batch, head) block at a time)
 * against the five whole-batch calls it replaces (dV = W^T dO, G = dO V^T,
 * the softmax's backward, dQ = scale G K, dK = scale G^T Q): the same
 * numbers, bit for bit, for every mask mode, causal or not, with masks,
 * 1 and 2 threads, large enough for two threads to run (big). how: 0, three
 * buffers, dq added to what it held; 1, q, k, v one node (dq, dk, dv one
 * buffer: dv written, dq and dk added); 2, no dq; 3, dv only. */
static void test_attn_bwd_blocked(int mode, int causal, int masks, int threads, int how, int big) {
    const int same = how == 1, N = big ? 4 : 3, H = 2, tq = big ? 40 : 9, tk = same ? tq : big ? 37 : 11;
    const int dk = big ? 16 : 5, dv = same ? dk : big ? 12 : 7;
    fl_attn_desc d = {.n = N, .heads = H, .tq = tq, .tk = tk, .dk = dk, .dv = dv, .scale = 0.3f, .causal = causal,
                      .mask_mode = mode};
    const size_t nq = (size_t)N * tq * H * dk, nk = (size_t)N * tk * H * dk, nv = (size_t)N * tk * H * dv;
    const size_t ns = (size_t)N * H * tq * tk, no = (size_t)N * tq * H * dv;
    float *q = rnd(nq, 61), *k = same ? q : rnd(nk, 62), *v = same ? q : rnd(nv, 63), *dout = rnd(no, 64);
    float *qm = rnd((size_t)N * tq, 65), *vm = rnd((size_t)N * tk, 66), *am = rnd((size_t)N * tq * tk, 67);
    for (int i = 0; i < N * tk; i++) if (i % tk == 0) vm[i] = 1.0f;
    if (masks) for (int j = 0; j < tk; j++) vm[tk + j] = -1.0f; /* sample 1: every key masked */
    const float *QM = masks ? qm : NULL, *VM = masks ? vm : NULL, *AM = masks > 1 ? am : NULL;
    const int64_t ldq = (int64_t)H * dk, ldv = (int64_t)H * dv;
    fl_gemm_desc sd = {.ta = 0, .tb = 1, .m = tq, .n = tk, .k = dk, .alpha = d.scale, .lda = (int)ldq, .ldb = (int)ldq,
                       .ldc = tk, .sa = {tq * ldq, dk}, .sb = {tk * ldq, dk},
                       .sc = {(int64_t)H * tq * tk, (int64_t)tq * tk}, .nouter = N, .ninner = H};
    float *p = calloc(ns, sizeof(float));
    fl_cpu_gemm_batched(&sd, q, k, p);
    fl_cpu_attn_softmax_fwd(&d, QM, VM, AM, p);
    /* the gradients' buffers: one (same) or three, with what they held before */
    float *bufs[2][3];
    const size_t sizes[3] = {nq, nk, nv};
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < 3; i++) bufs[s][i] = same && i ? bufs[s][0] : rnd(sizes[i], 70 + i);
    float betav = 0.0f, betaq = 1.0f, betak = same ? 1.0f : 0.0f;
    fl_gemm_desc vd = {.ta = 1, .tb = 0, .m = tk, .n = dv, .k = tq, .alpha = 1.0f, .beta = betav, .lda = tk,
                       .ldb = (int)ldv, .ldc = (int)ldv, .sa = {(int64_t)H * tq * tk, (int64_t)tq * tk},
                       .sb = {tq * ldv, dv}, .sc = {tk * ldv, dv}, .nouter = N, .ninner = H};
    fl_gemm_desc gd = {.ta = 0, .tb = 1, .m = tq, .n = tk, .k = dv, .alpha = 1.0f, .lda = (int)ldv, .ldb = (int)ldv,
                       .ldc = tk, .sa = {tq * ldv, dv}, .sb = {tk * ldv, dv},
                       .sc = {(int64_t)H * tq * tk, (int64_t)tq * tk}, .nouter = N, .ninner = H};
    fl_gemm_desc qd = {.ta = 0, .tb = 0, .m = tq, .n = dk, .k = tk, .alpha = d.scale, .beta = betaq, .lda = tk,
                       .ldb = (int)ldq, .ldc = (int)ldq, .sa = {(int64_t)H * tq * tk, (int64_t)tq * tk},
                       .sb = {tk * ldq, dk}, .sc = {tq * ldq, dk}, .nouter = N, .ninner = H};
    fl_gemm_desc kd = {.ta = 1, .tb = 0, .m = tk, .n = dk, .k = tq, .alpha = d.scale, .beta = betak, .lda = tk,
                       .ldb = (int)ldq, .ldc = (int)ldq, .sa = {(int64_t)H * tq * tk, (int64_t)tq * tk},
                       .sb = {tq * ldq, dk}, .sc = {tk * ldq, dk}, .nouter = N, .ninner = H};
    int before = fl_get_num_threads();
    fl_set_num_threads(threads);
    /* the whole-batch calls (bufs[0]) */
    float *g0 = calloc(ns, sizeof(float)), *g1 = malloc(ns * sizeof(float));
    float *dq0 = how < 2 ? bufs[0][0] : NULL, *dk0 = how < 3 ? bufs[0][1] : NULL, *dv0 = bufs[0][2];
    float *dq1 = how < 2 ? bufs[1][0] : NULL, *dk1 = how < 3 ? bufs[1][1] : NULL, *dv1 = bufs[1][2];
    fl_cpu_gemm_batched(&vd, p, dout, dv0);
    if (dq0 || dk0) {
        fl_cpu_gemm_batched(&gd, dout, v, g0);
        fl_cpu_attn_softmax_bwd(&d, QM, VM, AM, p, g0);
        if (dq0) fl_cpu_gemm_batched(&qd, g0, k, dq0);
        if (dk0) fl_cpu_gemm_batched(&kd, g0, q, dk0);
    }
    for (size_t i = 0; i < ns; i++) g1[i] = NAN;
    fl_cpu_attn_bwd_blocked(&vd, &gd, &qd, &kd, &d, q, k, v, p, dout, QM, VM, AM, g1, dq1, dk1, dv1);
    fl_set_num_threads(before);
    for (int i = 0; i < 3; i++)
        CHECK_MSG(memcmp(bufs[0][i], bufs[1][i], sizes[i] * sizeof(float)) == 0,
                  "blocked attention backward: %s differs (mode %d causal %d masks %d threads %d how %d big %d)",
                  i == 0 ? "dq" : i == 1 ? "dk" : "dv", mode, causal, masks, threads, how, big);
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < 3; i++)
            if (!same || !i) free(bufs[s][i]);
    if (!same) { free(k); free(v); }
    free(q); free(dout); free(qm); free(vm); free(am); free(p); free(g0); free(g1);
}

/* cpu_act.c's vector activations against double precision: every
 * activation it has, on values from -100 to 100 spaced finer near 0 and at
 * the switch points of its functions (|x| = 1/2 for expm1, 0, +-3), within
 * 1e-6 relative (plus 1e-37 for results that underflow); NaN gives NaN; the
 * three levels give the same bits. The derivatives likewise (from y and
 * from x), and the ELU with an alpha. */
static double act_ref(int act, double x) {
    switch (act) {
    case FL_ACT_RELU: return x > 0 ? x : 0;
    case FL_ACT_RELU6: return x > 0 ? (x < 6 ? x : 6) : 0;
    case FL_ACT_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case FL_ACT_TANH: return tanh(x);
    case FL_ACT_LEAKY_RELU: return x > 0 ? x : 0.2 * x;
    case FL_ACT_GELU: return 0.5 * x * erfc(-x / sqrt(2.0));
    case FL_ACT_ELU: return x > 0 ? x : expm1(x);
    case FL_ACT_SELU: return 1.05070098735548049 * (x > 0 ? x : 1.67326324235437728 * expm1(x));
    case FL_ACT_SILU: return x / (1.0 + exp(-x));
    case FL_ACT_HARD_SIGMOID: return x <= -3 ? 0 : x >= 3 ? 1 : x / 6 + 0.5;
    case FL_ACT_HARD_SILU: return x * (x <= -3 ? 0 : x >= 3 ? 1 : x / 6 + 0.5);
    case FL_ACT_SOFTSIGN: return x / (fabs(x) + 1);
    case FL_ACT_SOFTPLUS: return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
    case FL_ACT_EXPONENTIAL: return exp(x);
    default: return x;
    }
}
static double act_dref(int act, double x) {
    const double h = 1e-6 * (fabs(x) + 1e-3);
    switch (act) {
    case FL_ACT_SIGMOID: case FL_ACT_SILU: case FL_ACT_SOFTPLUS: { /* in closed form */
        double s = 1.0 / (1.0 + exp(-x));
        return act == FL_ACT_SIGMOID ? s * (1 - s) : act == FL_ACT_SILU ? s * (1 + x * (1 - s)) : s;
    }
    case FL_ACT_TANH: { double t = tanh(x); return 1 - t * t; }
    case FL_ACT_GELU: return 0.5 * erfc(-x / sqrt(2.0)) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI);
    case FL_ACT_ELU: return x > 0 ? 1 : exp(x);
    case FL_ACT_SELU: return 1.05070098735548049 * (x > 0 ? 1 : 1.67326324235437728 * exp(x));
    case FL_ACT_EXPONENTIAL: return exp(x);
    default: return (act_ref(act, x + h) - act_ref(act, x - h)) / (2 * h); /* piecewise linear */
    }
}
/* The bound for act at x: 1e-6 relative; GELU's tail exp(-x^2/2) carries the
 * rounding of x^2 (1e-7 x^2); the hard ones' x/6 + 1/2 an ulp of 1/2; and
 * 1e-34 absolute where the true value underflows (fl_fast_exp stops at
 * exp(-87.3)). */
static double act_tol(int act, double x, double want) {
    double t = 1e-6 * fabs(want) + 1e-34;
    if (act == FL_ACT_GELU) t += 1e-7 * x * x * fabs(want);
    if (act == FL_ACT_HARD_SIGMOID || act == FL_ACT_HARD_SILU) t += 1e-7 * (1 + fabs(x));
    return t;
}
/* Whether x is within the finite difference's step of a kink of act. */
static int near_kink(int act, double x) {
    const double h = 2e-6 * (fabs(x) + 1e-3);
    int k = fabs(x) <= h;
    if (act == FL_ACT_RELU6) k |= fabs(x - 6) <= h;
    if (act == FL_ACT_HARD_SIGMOID || act == FL_ACT_HARD_SILU) k |= fabs(fabs(x) - 3) <= h;
    return k && act != FL_ACT_SIGMOID && act != FL_ACT_TANH && act != FL_ACT_GELU && act != FL_ACT_SILU &&
           act != FL_ACT_SOFTSIGN;
}
static void test_act_vec(void) {
    enum { N = 1200 };
    float x[N];
    int n = 0;
    for (int i = 0; i < 1000; i++) x[n++] = (float)(100.0 * sinh((i - 499.5) / 499.5 * 5.3) / sinh(5.3));
    const float special[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-8f, -1e-8f, 0.49999997f, 0.5f, 0.50000006f, -0.49999997f,
                             -0.5f, -0.50000006f, 3.0f, -3.0f, 2.9999998f, -2.9999998f, 6.0f, 87.0f, -87.0f, 88.5f,
                             -88.5f, 1e-3f, -1e-3f, 0.25f, -0.25f, NAN};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) x[n++] = special[i];
    const int acts[] = {FL_ACT_RELU, FL_ACT_RELU6, FL_ACT_SIGMOID, FL_ACT_TANH, FL_ACT_LEAKY_RELU, FL_ACT_GELU,
                        FL_ACT_ELU, FL_ACT_SELU, FL_ACT_SILU, FL_ACT_HARD_SIGMOID, FL_ACT_HARD_SILU, FL_ACT_SOFTSIGN};
    float *y[3], *gy[3], *gx[3], dy[N];
    for (int i = 0; i < n; i++) dy[i] = 1.0f;
    for (int k = 0; k < 3; k++) { y[k] = malloc(N * sizeof(float)); gy[k] = malloc(N * sizeof(float)); gx[k] = malloc(N * sizeof(float)); }
    for (size_t a = 0; a < sizeof acts / sizeof acts[0]; a++) {
        const int act = acts[a];
        for (int lv = 0; lv < 3; lv++) {
            fl_cpu_act_force_level(lv == 2 ? -1 : lv);
            CHECK_MSG(fl_cpu_act_vec(act, n, x, y[lv]), "act %d: no vector form", act);
            for (int i = 0; i < n; i++) gy[lv][i] = 1.0f;
            CHECK_MSG(fl_cpu_act_grad_y_vec(act, n, y[lv], gy[lv]) || !fl_act_grad_from_output(act),
                      "act %d: no vector derivative from y", act);
            CHECK_MSG(fl_cpu_act_grad_x_vec(act, n, x, y[lv], dy, gx[lv], 0.0f), "act %d: no vector derivative", act);
        }
        fl_cpu_act_force_level(-1);
        int bad = 0, badg = 0, badlv = 0;
        double worst = 0;
        for (int i = 0; i < n; i++) {
            const double want = act_ref(act, x[i]), dwant = act_dref(act, x[i]);
            if (isnan(want) ? !isnan(y[2][i]) : fabs(y[2][i] - want) > act_tol(act, x[i], want)) { if (bad++ < 3) printf("  act %d x %.9g: %.9g, want %.9g\n", act, x[i], y[2][i], want); }
            if (!isnan(want) && fabs(want) > 1e-30) worst = fmax(worst, fabs(y[2][i] - want) / fabs(want));
            /* the derivative: 2e-6 (it takes y, rounded, or a difference of fast functions), 1e-6 absolute near its zeros */
            if (near_kink(act, x[i])) continue;
            if (!isnan(dwant) && fabs(gx[2][i] - dwant) > 2e-6 * fabs(dwant) + 1e-6) {
                if (badg++ < 3) printf("  act %d x %.9g: derivative %.9g, want %.9g\n", act, x[i], gx[2][i], dwant);
            }
            if (fl_act_grad_from_output(act) && !isnan(dwant) && fabs(gy[2][i] - dwant) > 2e-6 * fabs(dwant) + 1e-6) {
                if (badg++ < 3) printf("  act %d x %.9g: derivative from y %.9g, want %.9g\n", act, x[i], gy[2][i], dwant);
            }
            for (int lv = 0; lv < 2; lv++)
                badlv += memcmp(&y[lv][i], &y[2][i], 4) != 0 || memcmp(&gx[lv][i], &gx[2][i], 4) != 0;
        }
        CHECK_MSG(bad == 0, "act %d: %d of %d values off double precision by more than 1e-6", act, bad, n);
        CHECK_MSG(badg == 0, "act %d: %d derivatives off", act, badg);
        CHECK_MSG(badlv == 0, "act %d: the levels differ at %d values", act, badlv);
        printf("test_cpu_simd: act %d: worst relative error %.3g\n", act, worst);
    }
    /* ELU with alpha, and the softplus derivative from y */
    float e[N], s[N], g[N];
    fl_cpu_elu_vec(n, 0.7f, x, e);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        const double want = x[i] > 0 ? x[i] : 0.7 * expm1(x[i]);
        bad += isnan(want) ? !isnan(e[i]) : fabs(e[i] - want) > act_tol(FL_ACT_ELU, x[i], want);
    }
    CHECK_MSG(bad == 0, "ELU(alpha 0.7): %d values off", bad);
    for (int i = 0; i < n; i++) { s[i] = (float)act_ref(FL_ACT_SOFTPLUS, x[i]); g[i] = 1.0f; }
    CHECK(fl_cpu_act_grad_y_vec(FL_ACT_SOFTPLUS, n, s, g));
    bad = 0;
    for (int i = 0; i < n; i++)
        if (!isnan(x[i]) && x[i] < 15.0f) bad += fabs(g[i] - act_dref(FL_ACT_SOFTPLUS, x[i])) > 2e-6 * act_dref(FL_ACT_SOFTPLUS, x[i]) + 1e-7;
    CHECK_MSG(bad == 0, "softplus derivative from y: %d values off", bad);
    /* ReLU with a slope, threshold and cap (LeakyReLU, ReLU(...)) and the parametrized derivatives: the scalar
     * formulas' bits, at every level */
    const fl_pact_desc pd[3] = {{FL_PACT_RELU, 0.1f, 0.0f, INFINITY}, {FL_PACT_RELU, 0.3f, 0.5f, 6.0f},
                                {FL_PACT_ELU, 0.7f, 0.0f, 0.0f}};
    for (int k = 0; k < 3; k++)
        for (int lv = 0; lv < 3; lv++) {
            fl_cpu_act_force_level(lv == 2 ? -1 : lv);
            float r[N], d0[N], d1[N];
            if (pd[k].code == FL_PACT_RELU) fl_cpu_relu_p_vec(n, pd[k].a, pd[k].b, pd[k].c, x, r);
            else for (int i = 0; i < n; i++) r[i] = e[i];
            for (int i = 0; i < n; i++) d1[i] = 0.5f;
            fl_cpu_pact_grad_vec(n, pd[k].code == FL_PACT_ELU, pd[k].a, pd[k].b, pd[k].c, x, r, dy, d0, 0.0f);
            fl_cpu_pact_grad_vec(n, pd[k].code == FL_PACT_ELU, pd[k].a, pd[k].b, pd[k].c, x, r, dy, d1, 1.0f);
            int off = 0;
            for (int i = 0; i < n; i++) {
                const float want = fl_pact_forward(&pd[k], x[i]), gr = fl_pact_grad(&pd[k], x[i], r[i]);
                off += pd[k].code == FL_PACT_RELU && memcmp(&r[i], &want, 4) != 0;
                off += memcmp(&d0[i], &gr, 4) != 0;
                const float g1 = 0.5f + gr;
                off += memcmp(&d1[i], &g1, 4) != 0;
            }
            CHECK_MSG(off == 0, "parametrized activation %d (level %d): %d values differ from the scalar formulas", k,
                      lv, off);
        }
    fl_cpu_act_force_level(-1);
    for (int k = 0; k < 3; k++) { free(y[k]); free(gy[k]); free(gx[k]); }
}

/* fl_avx2_gemm (cpu_avx2_gemm.c) against a double-precision reference: every
 * transpose, widths that are and are not multiples of 8 and 16 (packed
 * zero-padded strips), K over one block (KC 256), beta 0 and 1, bias and
 * ReLU, leading dimensions wider than the matrix, one and several threads,
 * and the K split of a small C over a long K (x^T @ dy of a Dense). */
static void test_avx2_gemm(int ta, int tb, int M, int N, int K, float beta, int bias, int relu, int threads) {
    const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
    float *A = rnd((size_t)(ta ? K : M) * lda, 31), *B = rnd((size_t)(tb ? N : K) * ldb, 32);
    float *b = rnd(N, 33), *C = rnd((size_t)M * ldc, 34), *C0 = dup(C, (size_t)M * ldc);
    double *ref = malloc((size_t)M * N * sizeof(double));
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double v = beta != 0.0f ? C0[(size_t)m * ldc + n] : (bias ? b[n] : 0.0);
            for (int k = 0; k < K; k++)
                v += (double)(ta ? A[(size_t)k * lda + m] : A[(size_t)m * lda + k]) *
                     (tb ? B[(size_t)n * ldb + k] : B[(size_t)k * ldb + n]);
            ref[(size_t)m * N + n] = relu && v < 0 ? 0.0 : v;
        }
    fl_avx2_gemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc, bias ? b : NULL, relu, threads);
    double md = 0, mx = 0;
    for (int m = 0; m < M; m++) {
        for (int n = 0; n < N; n++) {
            double d = fabs(C[(size_t)m * ldc + n] - ref[(size_t)m * N + n]);
            md = d > md || d != d ? d : md;
            mx = fabs(ref[(size_t)m * N + n]) > mx ? fabs(ref[(size_t)m * N + n]) : mx;
        }
        for (int n = N; n < ldc; n++) /* past the matrix: untouched */
            CHECK_MSG(C[(size_t)m * ldc + n] == C0[(size_t)m * ldc + n], "avx2 gemm %dx%dx%d wrote past column %d", M,
                      N, K, N);
    }
    CHECK_MSG(md / (1 + mx) < 2e-6 * (1 + K / 256), "avx2 gemm ta%d tb%d %dx%dx%d beta%g bias%d relu%d threads%d: "
              "max diff %.3g (max %.3g)", ta, tb, M, N, K, beta, bias, relu, threads, md, mx);
    free(A); free(B); free(b); free(C); free(C0); free(ref);
}

/* g_force for the AVX2 GEMM: the AVX2 level (1), the portable one (0), the default (-1) */
static void force_avx2(int on) { set_level(on < 0 ? -1 : on ? 1 : 0); }

static void test_avx2_gemms(void) {
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            test_avx2_gemm(ta, tb, 128, 128, 16, 0.0f, 0, 0, 1);  /* attention Q K^T */
            test_avx2_gemm(ta, tb, 37, 10, 29, 0.0f, 1, 1, 1);    /* 10 columns: one masked strip */
            test_avx2_gemm(ta, tb, 13, 7, 300, 1.0f, 0, 0, 1);    /* two K blocks, beta 1 */
            test_avx2_gemm(ta, tb, 61, 83, 41, 0.0f, 1, 0, 2);    /* column blocks 64 + 19 */
            test_avx2_gemm(ta, tb, 6, 16, 1, 1.0f, 1, 1, 1);      /* K 1 */
            test_avx2_gemm(ta, tb, 1, 1, 5, 0.0f, 0, 0, 1);
        }
    test_avx2_gemm(0, 0, 2000, 32, 64, 0.0f, 1, 1, 2);  /* a Dense forward on two threads */
    test_avx2_gemm(1, 0, 32, 24, 3000, 0.0f, 0, 0, 2);  /* x^T @ dy: the K split */
    test_avx2_gemm(1, 0, 20, 36, 2600, 1.0f, 1, 1, 3);  /* K split, beta 1, bias unused, relu */
    test_avx2_gemm(1, 0, 16, 32, 4000, 0.0f, 1, 0, 2);  /* K split on two threads, bias */
    test_avx2_gemm(0, 1, 40, 12, 700, 0.0f, 1, 0, 2);
    test_avx2_gemm(0, 0, 0, 5, 5, 0.0f, 0, 0, 1);       /* empty */
    test_avx2_gemm(0, 0, 4, 5, 0, 0.0f, 1, 1, 1);       /* K 0: bias and relu */

    /* the backend's Dense and batched GEMM with the AVX2 kernel against OpenBLAS (with AVX-512 forced off) */
    const fl_backend *be = fl_backend_cpu();
    /* attention's four batched shapes: 2 samples x 3 heads, alpha 0.25, beta 0 and 1 */
    const int tq = 20, tk = 18, dk = 8, H = 3, N = 2;
    float *q = rnd((size_t)N * tq * H * dk, 41), *k = rnd((size_t)N * tk * H * dk, 42);
    float *s[2];
    for (int own = 0; own < 2; own++) {
        set_level(own);
        s[own] = rnd((size_t)N * H * tq * tk, 43);
        for (int beta = 0; beta < 2; beta++) {
            fl_gemm_desc e = {.ta = 0, .tb = 1, .m = tq, .n = tk, .k = dk, .alpha = beta ? 1.0f : 0.25f,
                              .beta = (float)beta, .lda = H * dk, .ldb = H * dk, .ldc = tk,
                              .sa = {(int64_t)tq * H * dk, dk}, .sb = {(int64_t)tk * H * dk, dk},
                              .sc = {(int64_t)H * tq * tk, (int64_t)tq * tk}, .nouter = N, .ninner = H};
            be->gemm_batched(&e, q, k, s[own]);
        }
    }
    set_level(-1);
    CHECK_MSG(rel_diff(s[1], s[0], (size_t)N * H * tq * tk) < 1e-6, "batched attention GEMM: AVX2 differs from OpenBLAS");
    free(q); free(k); free(s[0]); free(s[1]);
    /* Dense through the backend: transformer_text's shapes (the AVX2 GEMM for
     * all three products), a wide one (OpenBLAS forward and dx), a masked strip */
    g_force = force_avx2;
    test_dense(600, 32, 64, FL_ACT_RELU, 1, 0.0f);
    test_dense(600, 64, 32, FL_ACT_LINEAR, 1, 1.0f);
    test_dense(300, 784, 512, FL_ACT_RELU, 1, 0.0f);
    test_dense(77, 512, 10, FL_ACT_TANH, 0, 0.0f);
    test_dense(1000, 40, 36, FL_ACT_SIGMOID, 1, 1.0f);
    test_dense_batch1_threads();
    g_force = fl_cpu_simd_force;
}

/* A forward over fewer samples than two a thread splits each sample's
 * output rows across the threads; a padded sample is copied once and its
 * rows split after (it ran on one thread: a U-Net's "same" convolutions at
 * batch 1). y bit for bit the same for 1, 2 and 3 threads, and against the
 * portable code. */
static void test_fwd_threads(int n, int h, int w, int c, int oc, int kh, int kw, int s, int same, int act) {
    fl_conv_desc d = {0};
    d.n = n; d.h = h; d.w = w; d.c = c; d.oc = oc; d.kh = kh; d.kw = kw; d.sh = s; d.sw = s;
    d.oh = out_dim(h, kh, s, same, &d.pt);
    d.ow = out_dim(w, kw, s, same, &d.pl);
    d.act = act;
    d.has_bias = 1;
    const size_t nx = (size_t)n * h * w * c, ny = (size_t)n * d.oh * d.ow * oc, nw = (size_t)kh * kw * c * oc;
    float *x = rnd(nx, 91), *wt = rnd(nw, 92), *b = rnd(oc, 93), *y[4], *first = NULL;
    void *ws = ws_for(&d);
    const int before = fl_get_num_threads();
    char what[128];
    snprintf(what, sizeof what, "forward n%d %dx%dx%d->%d k%dx%d s%d %s", n, h, w, c, oc, kh, kw, s,
             same ? "same" : "valid");
    for (int lv = LEVELS - 1; lv >= 1; lv--) {
        if (!level_ok(lv)) continue;
        for (int t = 0; t < 4; t++) {
            set_level(t < 3 ? lv : 0);
            fl_set_num_threads(t < 3 ? t + 1 : 1);
            y[t] = malloc(ny * sizeof(float));
            fl_cpu_conv2d_fwd(&d, x, wt, b, y[t], ws);
        }
        set_level(-1);
        fl_set_num_threads(before);
        for (int t = 1; t < 3; t++)
            CHECK_MSG(memcmp(y[t], y[0], ny * sizeof(float)) == 0, "%s, %s: %d threads differ from 1", what,
                      level_name(lv), t + 1);
        CHECK_MSG(rel_diff(y[0], y[3], ny) < 1e-5, "%s, %s: differs from the portable code", what, level_name(lv));
        if (first) CHECK_MSG(memcmp(first, y[0], ny * sizeof(float)) == 0, "%s: AVX2 differs from AVX-512", what);
        free(first);
        first = y[0];
        for (int t = 1; t < 4; t++) free(y[t]);
    }
    free(first);
    free(x); free(wt); free(b); free(ws);
}

int main(void) {
    /* the levels every x86-64 CPU of this kind may have: the portable code
     * and AVX2+FMA (DepthwiseConv2D); AVX-512 where present */
    const int levels = fl_cpu_depthwise_levels();
    printf("test_cpu_simd: this CPU runs: portable%s%s\n", levels & 2 ? ", AVX2+FMA" : "", levels & 4 ? ", AVX-512" : "");
    test_depthwise(2, 9, 10, 8, 1, 3, 3, 1, 0, FL_ACT_RELU, 1);
    test_depthwise(2, 8, 7, 3, 2, 3, 3, 1, 1, FL_ACT_LINEAR, 0);
    test_depthwise(3, 11, 9, 16, 1, 3, 3, 2, 1, FL_ACT_RELU6, 1);  /* 16 channels: one full vector */
    test_depthwise(2, 10, 12, 33, 1, 5, 5, 2, 1, FL_ACT_SIGMOID, 0); /* 33: two vectors and a remainder */
    test_depthwise(2, 6, 7, 4, 3, 2, 2, 1, 1, FL_ACT_ELU, 1);
    test_depthwise(1, 12, 12, 40, 1, 3, 3, 2, 1, FL_ACT_RELU, 1);
    test_depthwise(2, 7, 6, 5, 2, 3, 2, 1, 1, FL_ACT_TANH, 1);
    test_depthwise(8, 30, 30, 24, 1, 3, 3, 1, 1, FL_ACT_RELU, 1);  /* large enough for several threads */
    if (levels & 2) CHECK_MSG(g_dw_levels_run[1] == 8, "the AVX2+FMA level ran %d of 8 cases", g_dw_levels_run[1]);
    else printf("test_cpu_simd: SKIP AVX2+FMA: this CPU lacks AVX2 or FMA\n");
    test_dropout_offset(0);
    test_dw_parts_all();
    test_softmax_rows();
    test_act_vec();
    for (int mode = 0; mode < 3; mode++)
        for (int causal = 0; causal < 2; causal++)
            for (int masks = 0; masks < 3; masks++) test_attn_blocked(mode, causal, masks, 1 + (masks & 1));
    for (int mode = 0; mode < 3; mode++)
        for (int causal = 0; causal < 2; causal++)
            for (int masks = 0; masks < 3; masks++)
                for (int how = 0; how < 4; how++)
                    test_attn_bwd_blocked(mode, causal, masks, 1 + ((masks + how) & 1), how, (how + masks) % 3 == 0);
    if (fl_cpu_avx2()) test_avx2_gemms();
    else printf("test_cpu_simd: SKIP the AVX2 GEMM (cpu_avx2.c): this CPU lacks AVX2/FMA\n");
    if (level_ok(1) || level_ok(2)) test_direct();
    else printf("test_cpu_simd: SKIP the direct convolutions and Winograd: this CPU has neither AVX-512 nor "
                "AVX2+FMA\n");
    if (!level_ok(2))
        printf("test_cpu_simd: SKIP the direct convolutions on AVX-512, and their bits against AVX2's: this CPU has "
               "no AVX-512F/BW/DQ/VL\n");
    if (fl_cpu_simd_available()) test_avx512();
    else printf("test_cpu_simd: SKIP the AVX-512 kernels (cpu_avx512.c: the Dense GEMM, max pooling, dropout and "
                "Adam bit for bit): this CPU has no AVX-512F/BW/DQ/VL\n");
    /* a run that checked nothing is a failure, not a pass */
    if (check_count == 0) {
        fprintf(stderr, "test_cpu_simd: 0 checks ran\n");
        return 1;
    }
    return check_report("test_cpu_simd");
}

/* fl_simd_dw3 against the micro-kernel's rows (kw, ci), one kernel column
 * at a time: the same sums in the same order, so bit for bit; every tile of
 * channels, masked columns, rows of 1 to 17 pixels, two segments. */
static void test_dw3_at(int level) {
    set_level(level);
    const int C = 11, OC = 16, NJ = 17, NSEG = 2;
    const int64_t xj = C + 2, xseg = (int64_t)(NJ + 2) * xj + 5, gyj = OC + 3, gyseg = (int64_t)NJ * gyj + 7;
    float *x = rnd((size_t)NSEG * xseg, 21), *gy = rnd((size_t)NSEG * gyseg, 22), *dw0 = rnd((size_t)3 * C * OC, 23);
    int bad = 0;
    for (int ct = 1; ct <= FL_SIMD_DW3_CT; ct++)
        for (int cols = 16; cols >= 7; cols -= 9)
            for (int nj = 1; nj <= NJ; nj += nj < 5 ? 1 : 6) {
                float *a = dup(dw0, (size_t)3 * C * OC), *b = dup(dw0, (size_t)3 * C * OC);
                fl_simd_dw3(x + 1, xj, xseg, gy, gyj, gyseg, NSEG, nj, ct, cols, a, (int64_t)C * OC, OC);
                for (int kw = 0; kw < 3; kw++) {
                    fl_simd_tile t = {0};
                    t.a = x + 1 + kw * xj;
                    t.as = 1;
                    t.aj = xj;
                    t.aseg = xseg;
                    t.nseg = NSEG;
                    t.nj = nj;
                    t.b = gy;
                    t.bj = gyj;
                    t.bseg = gyseg;
                    t.c = b + (size_t)kw * C * OC;
                    t.ldc = OC;
                    t.accumulate = 1;
                    t.cols = cols;
                    const int rm = fl_simd_max_rows(cols); /* (AVX2: 6 rows of 16 columns) */
                    for (int r0 = 0; r0 < ct; r0 += rm) {
                        fl_simd_tile u = t;
                        u.a = t.a + r0;
                        u.c = t.c + (size_t)r0 * OC;
                        fl_simd_run(&u, ct - r0 < rm ? ct - r0 : rm);
                    }
                }
                bad += memcmp(a, b, (size_t)3 * C * OC * sizeof(float)) != 0;
                free(a);
                free(b);
            }
    set_level(-1);
    CHECK_MSG(bad == 0, "fl_simd_dw3, %s: %d of the cases differ from the micro-kernel's rows", level_name(level),
              bad);
    free(x); free(gy); free(dw0);
}
static void test_dw3(void) {
    for (int lv = 1; lv < LEVELS; lv++)
        if (level_ok(lv)) test_dw3_at(lv);
}

/* Samples whose tiles share Winograd's blocks (fl_wino_samples) give each
 * sample the same bits as that sample alone (fl_wino_rows): what lets
 * predict's steps of any size compute what whole batches do. */
static void test_wino_samples_dil(int n, int h, int w, int c, int oc, int dil) {
    fl_conv_desc d = {.n = n, .h = h, .w = w, .c = c, .oh = h, .ow = w, .oc = oc, .kh = 3, .kw = 3, .sh = 1,
                      .sw = 1, .pt = dil, .pl = dil, .act = FL_ACT_RELU, .has_bias = 1, .dil_h = dil, .dil_w = dil};
    const size_t in_sz = (size_t)h * w * c, out_sz = (size_t)h * w * oc;
    float *x = rnd((size_t)n * in_sz, 11), *wt = rnd((size_t)9 * c * oc, 12), *b = rnd((size_t)oc, 13);
    float *u = malloc(fl_wino_u_floats(c, oc) * sizeof(float));
    float *scratch = malloc(fl_wino_scratch_floats(c, oc) * sizeof(float));
    float *ya = calloc((size_t)n * out_sz, sizeof(float)), *yb = calloc((size_t)n * out_sz, sizeof(float));
    fl_wino_weights(c, oc, wt, u);
    fl_wino_samples(&d, x, u, b, ya, NULL, n, 0, NULL, scratch);
    for (int i = 0; i < n; i++)
        fl_wino_rows(&d, x + (size_t)i * in_sz, u, b, yb + (size_t)i * out_sz, 0, h, 0, NULL, scratch);
    CHECK_MSG(memcmp(ya, yb, (size_t)n * out_sz * sizeof(float)) == 0,
              "Winograd %d samples %dx%dx%d->%d together differ from each alone", n, h, w, c, oc);
    CHECK_MSG(fl_wino_group(&d) > 1, "%dx%dx%d->%d dil%d: samples of %d tiles do not share blocks", h, w, c, oc,
              dil, ((h + 1) / 2) * ((w + 1) / 2));
    /* added into y and gated (a data gradient's form: the backward's grouped dx) */
    fl_conv_desc e = d;
    e.act = FL_ACT_LINEAR;
    e.has_bias = 0;
    float *gate = rnd((size_t)n * out_sz, 14);
    fl_wino_samples(&e, x, u, NULL, ya, NULL, n, 1, gate, scratch);
    for (int i = 0; i < n; i++)
        fl_wino_rows(&e, x + (size_t)i * in_sz, u, NULL, yb + (size_t)i * out_sz, 0, h, 1, gate + (size_t)i * out_sz,
                     scratch);
    CHECK_MSG(memcmp(ya, yb, (size_t)n * out_sz * sizeof(float)) == 0,
              "Winograd %d samples %dx%dx%d->%d added and gated together differ from each alone", n, h, w, c, oc);
    free(gate);
    free(x); free(wt); free(b); free(u); free(scratch); free(ya); free(yb);
}
static void test_wino_samples(int n, int h, int w, int c, int oc) { test_wino_samples_dil(n, h, w, c, oc, 1); }

/* 3x3 stride-1 convolutions through Winograd F(2x2, 3x3) (cpu_winograd.c)
 * against the portable code: ResNet's shapes, odd sizes (partial tiles at
 * the bottom and right), channel counts that are not a multiple of 16, more
 * tiles than one block, more than 64 filters, the band path of a single
 * sample, the data gradient with and without accumulation, and fused with
 * max pooling. */
static void test_winograd(void) {
    set_level(level_ok(2) ? 2 : 1);
    fl_conv_desc probe = {.n = 2, .h = 8, .w = 8, .c = 32, .oh = 8, .ow = 8, .oc = 32, .kh = 3, .kw = 3,
                          .sh = 1, .sw = 1, .pt = 1, .pl = 1};
    CHECK_MSG(fl_wino_ok(&probe), "a 3x3 stride-1 32 -> 32 convolution does not take Winograd");
    probe.sh = probe.sw = 2;
    CHECK_MSG(!fl_wino_ok(&probe), "a stride-2 convolution takes Winograd");
    probe.sh = probe.sw = 1;
    probe.c = 1;
    CHECK_MSG(!fl_wino_ok(&probe), "a 1-channel convolution takes Winograd");
    set_level(-1);
    /* Winograd runs with at least two samples per thread: 2 threads here,
     * so n >= 4 takes it and n < 4 the direct kernels */
    const int before = fl_get_num_threads();
    fl_set_num_threads(2);
    /* dilated (the direct forward: taps dil_h rows apart as segments, each kernel column a call where dil_w > 1) */
    test_conv_dil(3, 20, 20, 64, 64, 3, 3, 1, 1, FL_ACT_RELU, 1, 2, 2);   /* zoo2d's Conv2D(64, 3, dilation 2) */
    test_conv_dil(1, 13, 11, 20, 70, 3, 3, 1, 0, FL_ACT_LINEAR, 1, 2, 3); /* 1 sample: rows split; 70 filters */
    test_conv_dil(5, 9, 12, 3, 16, 2, 3, 1, 1, FL_ACT_RELU6, 0, 3, 1);   /* rows dilated only */
    test_conv_dil(4, 9, 12, 5, 8, 3, 2, 1, 1, FL_ACT_TANH, 1, 1, 4);     /* columns only, act after the store */
    test_conv_dil(6, 64, 1, 32, 32, 2, 1, 1, 0, FL_ACT_RELU, 1, 8, 1);   /* a Conv1D, dilation 8 (wavenet1d) */
    test_conv(6, 16, 16, 32, 32, 3, 3, 1, 1, FL_ACT_RELU, 1);   /* ResNet-20, stage 2 */
    test_conv(4, 8, 8, 64, 64, 3, 3, 1, 1, FL_ACT_RELU6, 1);    /* stage 3 */
    test_conv(5, 7, 9, 32, 40, 3, 3, 1, 1, FL_ACT_RELU, 1);     /* odd: partial tiles at the bottom and right */
    test_conv(4, 5, 6, 33, 80, 3, 3, 1, 0, FL_ACT_ELU, 1);      /* channel tails, two column blocks */
    test_conv(4, 30, 30, 40, 36, 3, 3, 1, 0, FL_ACT_RELU, 1);   /* 196 tiles a sample: several blocks */
    test_conv(4, 3, 3, 32, 48, 3, 3, 1, 1, FL_ACT_TANH, 0);     /* 3x3 maps: one partial tile */
    test_conv(1, 7, 9, 32, 40, 3, 3, 1, 1, FL_ACT_RELU, 1);     /* one sample: direct (bands of rows) */
    { /* few samples: rows split across threads, padded samples copied first */
        test_fwd_threads(1, 20, 18, 16, 24, 3, 3, 1, 1, FL_ACT_RELU);
        test_fwd_threads(3, 9, 7, 8, 16, 3, 3, 1, 1, FL_ACT_LINEAR);
        test_fwd_threads(1, 15, 15, 12, 20, 5, 5, 2, 1, FL_ACT_RELU6);
        test_fwd_threads(2, 33, 1, 9, 32, 7, 1, 1, 1, FL_ACT_ELU); /* Conv1D: bands of rows */
        test_fwd_threads(1, 10, 10, 16, 16, 3, 3, 1, 0, FL_ACT_LINEAR); /* no padding */
        test_fwd_threads(1, 4, 5, 256, 160, 3, 3, 1, 1, FL_ACT_RELU);  /* channels split, K groups */
        test_fwd_threads(1, 3, 3, 2560, 80, 1, 1, 1, 0, FL_ACT_RELU); /* (sums of 2,560: tanh would leave 1e-5 of order) */
    }
    test_conv_pool(4, 26, 26, 32, 64, 3, 0, FL_ACT_RELU, 2, 2);  /* mnist_cnn's conv2 + pool */
    test_conv_pool(5, 11, 10, 32, 40, 3, 1, FL_ACT_RELU, 2, 2);
    test_conv_pool(4, 13, 13, 32, 32, 3, 0, FL_ACT_LINEAR, 2, 3); /* gaps between windows */
    test_conv_pool(1, 12, 12, 48, 32, 3, 1, FL_ACT_RELU, 2, 2);  /* one sample: direct */
    /* samples whose tiles share blocks (fl_wino_group): one tile a sample
     * (ResNet50's 2x2 stage), groups of 4 and a last group of 1; four
     * tiles a sample, groups of 3; an odd 3x3 map with a partial tile */
    test_conv(13, 2, 2, 64, 96, 3, 3, 1, 1, FL_ACT_RELU, 1);
    test_conv(9, 4, 4, 80, 72, 3, 3, 1, 1, FL_ACT_ELU, 1);
    test_conv(10, 3, 3, 32, 40, 3, 3, 1, 1, FL_ACT_RELU6, 0);
    test_wino_samples(7, 2, 2, 64, 96);
    test_wino_samples(5, 3, 5, 48, 40);
    /* dilated (each of the output's dil x dil phases tiled 2x2 over its own pixels): n >= 4 takes Winograd;
     * odd phases, a valid one, dilated along one axis, phases of one or two pixels, samples sharing blocks */
    test_conv_dil(4, 20, 20, 64, 64, 3, 3, 1, 1, FL_ACT_RELU, 1, 2, 2);
    test_conv_dil(5, 13, 17, 32, 40, 3, 3, 1, 0, FL_ACT_LINEAR, 1, 3, 2);
    test_conv_dil(4, 9, 11, 48, 32, 3, 3, 1, 1, FL_ACT_RELU6, 0, 1, 3);
    test_conv_dil(6, 6, 7, 32, 80, 3, 3, 1, 1, FL_ACT_ELU, 1, 4, 4);
    test_wino_samples_dil(6, 4, 5, 32, 48, 2);
    test_wino_samples_dil(5, 3, 3, 40, 32, 3);
    /* a transformed kernel over 1 MB (136 -> 136): blocks of at least 48 tiles, several samples' in one */
    test_conv(6, 6, 6, 136, 136, 3, 3, 1, 1, FL_ACT_RELU, 1);
    test_wino_samples(9, 4, 4, 136, 144);
    fl_set_num_threads(before);
}

/* The direct convolutions, Winograd and the fusions around them, at each level this CPU runs (AVX-512, AVX2)
 * against the portable code and against each other */
static void test_direct(void) {
    /* mnist_cnn's convolutions, and the shapes around them: with the 3x3
     * ones through Winograd (the default), then all through the direct
     * kernels (FLYNN_CONV_WINOGRAD=0) */
    for (int wino = 1; wino >= 0; wino--) {
        fl_wino_force(wino);
        test_conv(5, 28, 28, 1, 32, 3, 3, 1, 0, FL_ACT_RELU, 1);
        test_conv(3, 26, 26, 32, 64, 3, 3, 1, 0, FL_ACT_RELU, 1);
        test_conv(1, 9, 11, 16, 16, 3, 3, 1, 1, FL_ACT_LINEAR, 1);   /* same padding, one sample */
        test_conv(4, 10, 9, 3, 80, 3, 3, 1, 1, FL_ACT_RELU, 0);      /* > 64 filters: two column blocks */
        test_conv(3, 12, 13, 20, 40, 2, 2, 1, 1, FL_ACT_TANH, 1);   /* even kernel, asymmetric padding */
        test_conv(2, 11, 12, 5, 24, 3, 3, 2, 0, FL_ACT_SIGMOID, 1); /* stride 2: portable data gradient */
        test_conv(2, 8, 8, 7, 17, 1, 1, 1, 0, FL_ACT_ELU, 1);       /* 1x1 */
        test_conv(3, 12, 12, 96, 24, 1, 1, 1, 0, FL_ACT_RELU6, 1);  /* MobileNetV2's 1x1: ReLU6 in the store */
        /* 1x1 with few output pixels: several samples' pixels as one band
         * (flat_1x1), stride 1 and strided (gathered), groups with a short
         * last one, and an odd input under stride 2 */
        test_conv(13, 2, 2, 64, 96, 1, 1, 1, 0, FL_ACT_RELU, 1);
        test_conv(9, 8, 8, 48, 80, 1, 1, 2, 0, FL_ACT_LINEAR, 1);
        test_conv(7, 7, 5, 40, 24, 1, 1, 2, 0, FL_ACT_ELU, 0);
        test_conv(2, 13, 13, 32, 40, 3, 3, 2, 1, FL_ACT_RELU6, 0);  /* stride 2, ReLU6 */
        test_conv(3, 7, 40, 48, 48, 3, 5, 1, 0, FL_ACT_RELU, 1);    /* 36-wide rows: several row tiles */
        test_conv(2, 6, 6, 65, 33, 3, 3, 1, 1, FL_ACT_LEAKY_RELU, 1);
        /* Conv1D as flynn runs it (h = steps, w = 1): tiles down the rows */
        test_conv(3, 40, 1, 32, 32, 3, 1, 1, 1, FL_ACT_RELU, 1);
        test_conv(1, 37, 1, 20, 48, 5, 1, 1, 1, FL_ACT_LINEAR, 1);  /* one sample: bands of rows */
        test_conv(2, 30, 1, 16, 70, 3, 1, 2, 0, FL_ACT_RELU, 0);    /* stride 2, > 64 filters */
        test_conv(1, 16, 1, 8, 8, 3, 1, 1, 0, FL_ACT_TANH, 1);
        /* one vector of output channels (forward) or of input channels
         * (data gradient), 3 taps at stride 1: the micro-kernel's taps
         * form, tiles of up to 24 pixels; every tile width from 1 to 24 */
        test_conv(2, 32, 32, 16, 16, 3, 3, 1, 1, FL_ACT_RELU, 0);   /* ResNet-20's first stage */
        test_conv(1, 5, 61, 48, 16, 3, 3, 1, 1, FL_ACT_LEAKY_RELU, 1); /* U-Net's last block: 3 tiles */
        test_conv(2, 9, 30, 12, 7, 3, 3, 1, 0, FL_ACT_RELU6, 1);   /* 7 and 12 channels: masked vectors */
        test_conv(3, 40, 1, 16, 16, 3, 1, 1, 1, FL_ACT_RELU, 1);    /* Conv1D: taps down the steps */
        test_conv(2, 9, 9, 16, 16, 3, 3, 2, 1, FL_ACT_RELU, 1);     /* stride 2: not the taps form */
        /* strided data gradients in phases (strided_dx): ResNet-20's and ResNet50's strided shapes, odd sizes
         * (a last row or column no window covers), more than 64 input channels, 2x2 to 7x7 kernels, strides
         * 3 and 4 */
        test_conv(3, 32, 32, 16, 32, 3, 3, 2, 1, FL_ACT_LINEAR, 0);
        test_conv(2, 16, 16, 32, 64, 3, 3, 2, 1, FL_ACT_RELU, 1);
        test_conv(2, 15, 17, 8, 24, 3, 3, 2, 0, FL_ACT_RELU, 1);
        test_conv(2, 17, 15, 12, 20, 3, 3, 2, 1, FL_ACT_TANH, 1);
        test_conv(2, 14, 14, 80, 16, 3, 3, 2, 1, FL_ACT_LINEAR, 1);
        test_conv(2, 21, 21, 4, 8, 7, 7, 2, 1, FL_ACT_RELU, 0);
        test_conv(2, 24, 26, 8, 8, 3, 3, 3, 1, FL_ACT_LINEAR, 1);
        test_conv(2, 16, 18, 8, 12, 2, 2, 2, 0, FL_ACT_LINEAR, 1);
        test_conv(2, 29, 27, 5, 9, 5, 5, 4, 1, FL_ACT_RELU, 1);
        test_conv(2, 20, 22, 6, 70, 5, 5, 2, 1, FL_ACT_LINEAR, 1);
        test_conv(3, 2, 2, 8, 16, 3, 3, 2, 1, FL_ACT_RELU, 1);      /* one output pixel a sample */
        test_conv(3, 3, 3, 8, 8, 3, 3, 2, 0, FL_ACT_LINEAR, 0);
        for (int ow = 1; ow <= 26; ow++) test_conv(1, 3, ow + 2, 5, 16, 3, 3, 1, 0, FL_ACT_LINEAR, 1);
        test_conv(1, 3, 49, 3, 1, 3, 3, 1, 0, FL_ACT_LINEAR, 0);    /* one output channel */
        /* more weights than input at a few samples: the threads split blocks of 64 output channels, each
         * passing its pixel tiles over a K group at a time (kernel rows; a wide 1x1's input channels) */
        test_conv(1, 4, 5, 256, 160, 3, 3, 1, 1, FL_ACT_RELU, 1);
        test_conv(2, 8, 8, 256, 192, 3, 3, 1, 1, FL_ACT_ELU, 1);     /* the activation after, a pixel at a time */
        test_conv(1, 6, 7, 300, 130, 3, 3, 2, 1, FL_ACT_LINEAR, 0);  /* strided */
        test_conv(1, 3, 3, 2560, 80, 1, 1, 1, 0, FL_ACT_RELU6, 1);   /* a 1x1: K groups of input channels */
        test_conv(6, 5, 6, 256, 96, 3, 3, 1, 1, FL_ACT_RELU, 1);     /* whole samples, K groups */
        test_conv_dil(1, 9, 9, 256, 96, 3, 3, 1, 1, FL_ACT_RELU, 1, 2, 2);
        test_conv_pool(1, 4, 4, 256, 160, 3, 1, FL_ACT_RELU, 2, 2); /* then pooled apart */
        test_conv_pool(1, 12, 12, 16, 32, 3, 1, FL_ACT_RELU, 2, 2); /* padded, one sample: bands of pooling rows */
        test_conv_res(1, 4, 256, 160, 3);
        test_conv_res(3, 7, 40, 72, 3);
        /* convolution + max pooling, fused */
        test_conv_pool(4, 26, 26, 32, 64, 3, 0, FL_ACT_RELU, 2, 2);  /* mnist_cnn's conv2 + pool */
        test_conv_pool(1, 26, 26, 32, 64, 3, 0, FL_ACT_RELU, 2, 2);  /* one sample: row bands */
        test_conv_pool(3, 11, 10, 5, 20, 3, 1, FL_ACT_RELU, 2, 2);   /* odd conv output: uncovered row/column */
        test_conv_pool(2, 12, 12, 8, 16, 3, 0, FL_ACT_TANH, 3, 3);
        test_conv_pool(2, 13, 13, 8, 16, 3, 0, FL_ACT_LINEAR, 2, 3); /* gaps between windows */
        test_conv_pool(2, 10, 10, 4, 8, 3, 0, FL_ACT_RELU, 3, 2);    /* overlapping: run apart */
    }
    fl_wino_force(-1); /* (the default again: the slope and gate cases below name Winograd shapes) */
    test_dw3();
    test_conv_slope(3, 12, 8, 16, 1, 0.1f);  /* taps */
    test_conv_slope(3, 12, 8, 40, 1, 0.3f);  /* direct, three vectors */
    test_conv_slope(5, 10, 32, 32, 1, 0.2f); /* Winograd */
    test_conv_slope(3, 12, 16, 16, 2, 0.1f); /* stride 2 */
    test_conv_slope_dil(3, 12, 16, 40, 1, 0.2f, 2); /* dilated: the slope with the last kernel column's call */
    /* dx_gate: the taps form, the direct kernels, Winograd (4 samples), strided phases, a 1x1 (GEMM on x) */
    test_conv_gate(2, 12, 11, 16, 16, 3, 1, 1);
    test_conv_gate(2, 9, 8, 24, 40, 3, 1, 0);
    test_conv_gate(4, 10, 10, 32, 32, 3, 1, 1);
    test_conv_gate(3, 16, 15, 16, 32, 3, 2, 1);
    test_conv_gate(2, 8, 8, 16, 24, 1, 1, 0);
    test_conv_gate(6, 6, 6, 136, 136, 3, 1, 1); /* Winograd's dx over a part's samples together (over 1 MB of kernel) */
    test_conv_gate_dil(2, 14, 13, 16, 24, 3, 1, 1, 2); /* dilated: the gate with the last kernel column's call */
    fl_wino_force(1);
    test_winograd();
    fl_wino_force(-1);
    test_threads_after_reserve();
}

static void test_avx512(void) {
    /* Dense: mnist_cnn's, the MLP's, and the GEMM driver's edge cases */
    test_dense(128, 9216, 128, FL_ACT_RELU, 1, 0.0f);
    test_dense(33, 784, 512, FL_ACT_RELU, 1, 0.0f);
    test_dense(7, 128, 10, FL_ACT_LINEAR, 1, 0.0f);
    test_dense(1, 3, 1, FL_ACT_LINEAR, 0, 0.0f);
    test_dense(19, 400, 65, FL_ACT_SIGMOID, 1, 1.0f);
    test_dense(64, 70, 200, FL_ACT_RELU, 0, 1.0f);
    test_dense(300, 1000, 48, FL_ACT_TANH, 1, 0.0f);
    test_dense_batch1_threads();
    /* max pooling: tiling windows (vector path), overlapping and padded ones */
    test_maxpool(3, 24, 24, 64, 2, 2, 0, 0.0f);
    test_maxpool(2, 7, 9, 20, 2, 2, 0, 0.0f);  /* odd sizes: a row and column no window covers */
    test_maxpool(2, 8, 8, 16, 2, 2, 0, 1.0f);
    test_maxpool(2, 9, 9, 5, 3, 2, 0, 0.0f);   /* overlapping windows */
    test_maxpool(2, 7, 7, 3, 2, 2, 1, 0.0f);   /* same padding */
    /* padded and overlapping windows (Xception's MaxPooling2D(3, 2, "same")), even and odd sizes, with beta */
    test_maxpool(2, 48, 48, 128, 3, 2, 1, 0.0f);
    test_maxpool(2, 11, 13, 20, 3, 2, 1, 0.0f);
    test_maxpool(2, 11, 13, 20, 3, 2, 1, 1.0f);
    test_maxpool(2, 9, 8, 33, 3, 1, 1, 0.0f);
    test_maxpool(1, 5, 6, 1, 5, 3, 1, 1.0f);
    test_maxpool(2, 10, 10, 17, 4, 3, 1, 0.0f);
    test_avgpool(2, 64, 64, 64, 3, 1, 1, 0.0f); /* zoo2d's AveragePooling2D(3, 1, "same"): 1 thread and 2 */
    test_avgpool(2, 32, 32, 64, 2, 2, 0, 0.0f);
    test_avgpool(3, 11, 13, 20, 3, 2, 1, 1.0f);
    test_avgpool(2, 9, 8, 33, 4, 3, 1, 0.0f);
    test_avgpool(1, 5, 6, 1, 5, 3, 1, 1.0f);
    /* dropout and Adam: bit for bit */
    test_dropout(1, 0.5f, 0);
    test_dropout(1000, 0.25f, 3);
    test_dropout(128 * 9216 + 5, 0.25f, 7);
    test_dropout(4099, 0.9f, 1);
    test_dropout_offset(1);
    test_adam(FL_OPT_ADAM);
    test_adam(FL_OPT_ADAMW);
}
