/*
 * cpu_depthwise.c — the CPU kernels of the depthwise 2D convolution
 * (DepthwiseConv2D, and the first half of SeparableConv2D), forward and
 * backward, as direct loops over NHWC data.
 *
 * Shapes (fl_conv_desc): x [n, h, w, c], w [kh, kw, c, dm], b [c*dm],
 * y [n, oh, ow, oc] with oc = c*dm and output channel c*dm + m:
 *
 *     y[n, p, q, c*dm+m] = act(b[c*dm+m] + sum_{i,j} x[n, p*sh-pt+i*dh, q*sw-pl+j*dw, c] * w[i, j, c, m])
 *
 * (dh, dw: the dilation, 1 without)
 * (taps outside x count 0). The channel axis is innermost and contiguous in
 * x, w and y, so every inner loop runs over channels with no branch: the
 * window's rows and columns are clamped to the image once per output pixel
 * (forward), or the taps that reach an input pixel are found once per tap
 * (backward). With depth multiplier 1 the forward keeps 16 channels of
 * the output pixel in registers across the whole window. Each pass is
 * memory-bound: one read of x and one write of y forward; backward one pass
 * over dy for act' and db, one over x, dy and dx for dx and dw. OpenMP
 * hands out blocks of batch*rows to whichever thread is free; in the
 * backward, dw and db are summed per part (a fixed cut of the rows) and the
 * parts added in part order (the same for any thread count). The row
 * functions are compiled three times from the same source: portable,
 * AVX2+FMA and AVX-512 (when fl_cpu_simd() says so, as for the kernels of
 * cpu_avx512.c).
 */
#include "cpu_internal.h"
#include "cpu_simd.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define DW_AVX512 __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,fma")))
#define DW_AVX2 __attribute__((target("avx2,fma")))
#define DW_HAVE_X86 1
#else
#define DW_HAVE_X86 0
#endif
#define DW_INLINE static inline __attribute__((always_inline))

/* y[k] += x[k] * w[k] (depth multiplier 1) */
DW_INLINE void madd1(int n, const float *restrict x, const float *restrict w, float *restrict y) {
    for (int k = 0; k < n; k++) y[k] += x[k] * w[k];
}

/* The input value the kernels read: x itself (P 0), or x through d->pre (backend.h: a normalisation's affine,
 * P 1, and the ReLU capped at hi after it, P 2), rounded as the normalisation's own pass rounds it (a multiply,
 * then an add; v > 0 ? v : 0, then the cap), so the products are those of the value it would have written. P
 * is a constant where the loops below are compiled, so they stay branch-free. */
typedef struct dw_pre { const float *s, *t; float hi; } dw_pre;
DW_INLINE float px(const int P, float x, const dw_pre *q, int k) {
    if (P == 0) return x;
    float v = x * q->s[k] + q->t[k];
    if (P == 1) return v;
    v = v > 0.0f ? v : 0.0f;
    return v < q->hi ? v : q->hi;
}
/* d->pre as the loops read it */
DW_INLINE dw_pre pre_of(const fl_conv_desc *d) {
    return (dw_pre){d->pre, d->pre ? d->pre + d->c : NULL, fl_cpu_relu_cap(d->pre_act)};
}
/* q's channels from c on */
DW_INLINE dw_pre pre_at(const dw_pre *q, int c) {
    return (dw_pre){q->s ? q->s + c : NULL, q->t ? q->t + c : NULL, q->hi};
}

/* y[k] += px(x[k]) * w[k]; and y[c*dm+m] += px(x[c]) * w[c*dm+m] */
DW_INLINE void madd1x(const int P, int n, const float *restrict x, const dw_pre *q, const float *restrict w,
                      float *restrict y) {
    for (int k = 0; k < n; k++) y[k] += px(P, x[k], q, k) * w[k];
}
DW_INLINE void maddmx(const int P, int c, int dm, const float *restrict x, const dw_pre *q, const float *restrict w,
                      float *restrict y) {
    for (int k = 0; k < c; k++) {
        const float xv = px(P, x[k], q, k);
        for (int m = 0; m < dm; m++) y[k * dm + m] += xv * w[k * dm + m];
    }
}

/* y = act(y) over n values; ReLU and ReLU6 (MobileNet's) as plain clamps */
DW_INLINE void act_span(int act, int64_t n, float *restrict y) {
    switch (act) {
    case FL_ACT_LINEAR: break;
    case FL_ACT_RELU:
        for (int64_t k = 0; k < n; k++) y[k] = y[k] > 0.0f ? y[k] : 0.0f;
        break;
    case FL_ACT_RELU6:
        for (int64_t k = 0; k < n; k++) y[k] = y[k] > 0.0f ? (y[k] < 6.0f ? y[k] : 6.0f) : 0.0f;
        break;
    default:
        if (!fl_cpu_act_vec(act, n, y, y))
            for (int64_t k = 0; k < n; k++) y[k] = fl_act_forward(act, y[k]);
    }
}

/* dy *= act'(y) over rows of n, db[j] += the result's column sums (db may be NULL) */
DW_INLINE void act_grad_span(int act, int64_t rows, int n, const float *restrict y, float *restrict dy,
                             float *restrict db) {
    for (int64_t r = 0; r < rows; r++) {
        const float *yr = y + (size_t)r * n;
        float *g = dy + (size_t)r * n;
        switch (act) {
        case FL_ACT_LINEAR: break;
        case FL_ACT_RELU:
            for (int k = 0; k < n; k++) g[k] = yr[k] > 0.0f ? g[k] : 0.0f;
            break;
        case FL_ACT_RELU6:
            for (int k = 0; k < n; k++) g[k] = yr[k] > 0.0f && yr[k] < 6.0f ? g[k] : 0.0f;
            break;
        default:
            if (!fl_cpu_act_grad_y_vec(act, n, yr, g))
                for (int k = 0; k < n; k++) g[k] *= fl_act_grad_y(act, yr[k]);
        }
        if (db)
            for (int k = 0; k < n; k++) db[k] += g[k];
    }
}

#define DW_BLOCK 16 /* channels kept in registers per output pixel */

/* One output row r = (n, p): each output pixel starts from the bias and
 * adds its clamped window; the activation runs over the finished row while
 * it is in cache. */
DW_INLINE void fwd_row_body(const int P, const fl_conv_desc *d, const float *x, const float *w, const float *b,
                            float *y, int64_t r) {
    const dw_pre pq = pre_of(d);
    const int C = d->c, OC = d->oc, dm = OC / C;
    const int DH = fl_conv_dil_h(d), DW = fl_conv_dil_w(d);
    const int64_t n = r / d->oh;
    const int p = (int)(r % d->oh), ih0 = p * d->sh - d->pt;
    int i0, i1;
    fl_tap_range(ih0, d->kh, DH, d->h, &i0, &i1);
    const float *xn = x + (size_t)n * d->h * d->w * C;
    float *yr = y + (size_t)r * d->ow * OC;
    for (int q = 0; q < d->ow; q++) {
        const int iw0 = q * d->sw - d->pl;
        int j0, j1;
        fl_tap_range(iw0, d->kw, DW, d->w, &j0, &j1);
        float *yp = yr + (size_t)q * OC;
        int c0 = 0;
        if (dm == 1) /* 16 channels at a time, in registers over the whole window */
            for (; c0 + DW_BLOCK <= C; c0 += DW_BLOCK) {
                float acc[DW_BLOCK];
                const dw_pre qc = pre_at(&pq, c0);
                for (int k = 0; k < DW_BLOCK; k++) acc[k] = b ? b[c0 + k] : 0.0f;
                for (int i = i0; i < i1; i++) {
                    const float *xrow = xn + ((size_t)(ih0 + i * DH) * d->w + iw0) * C + c0;
                    const float *wrow = w + (size_t)i * d->kw * OC + c0;
                    for (int j = j0; j < j1; j++) {
                        const float *xp = xrow + (size_t)j * DW * C, *wp = wrow + (size_t)j * OC;
                        for (int k = 0; k < DW_BLOCK; k++) acc[k] += px(P, xp[k], &qc, k) * wp[k];
                    }
                }
                for (int k = 0; k < DW_BLOCK; k++) yp[c0 + k] = acc[k];
            }
        if (c0 == OC) continue;
        /* the other channels (all of them when dm > 1): accumulated in y */
        float *yt = yp + c0;
        const int nc = C - c0 / dm; /* input channels left (c0 is a multiple of dm) */
        if (b) memcpy(yt, b + c0, (size_t)(OC - c0) * sizeof(float));
        else memset(yt, 0, (size_t)(OC - c0) * sizeof(float));
        for (int i = i0; i < i1; i++) {
            const float *xrow = xn + ((size_t)(ih0 + i * DH) * d->w + iw0) * C + c0 / dm;
            const float *wrow = w + (size_t)i * d->kw * OC + c0;
            for (int j = j0; j < j1; j++) {
                const float *xp = xrow + (size_t)j * DW * C, *wp = wrow + (size_t)j * OC;
                const dw_pre qc = pre_at(&pq, c0 / dm);
                if (dm == 1) madd1x(P, nc, xp, &qc, wp, yt);
                else maddmx(P, nc, dm, xp, &qc, wp, yt);
            }
        }
    }
    act_span(d->act, (int64_t)d->ow * OC, yr);
}

/* Backward, depth multiplier 1, both gradients:
 * dx[k] += dy[k] * w[k], dw[k] += dy[k] * x[k] in one pass over dy (x through px). */
DW_INLINE void bwd1(const int P, int n, const float *restrict dy, const float *restrict w, const float *restrict x,
                    const dw_pre *q, float *restrict dx, float *restrict dw) {
    for (int k = 0; k < n; k++) {
        const float g = dy[k];
        dx[k] += g * w[k];
        dw[k] += g * px(P, x[k], q, k);
    }
}

/* dx[c] += sum_m dy[c*dm+m] * w[c*dm+m] */
DW_INLINE void dxm(int c, int dm, const float *restrict dy, const float *restrict w, float *restrict dx) {
    for (int k = 0; k < c; k++) {
        float s = 0.0f;
        for (int m = 0; m < dm; m++) s += dy[k * dm + m] * w[k * dm + m];
        dx[k] += s;
    }
}

/* One input row r = (n, row): each input pixel gathers from the taps
 * (i, j) whose output pixel (p, q) it feeds, p*sh - pt + i*dh = row,
 * q*sw - pl + j*dw = column, and adds dy * w into its dx and dy * x into that
 * tap's dw. Each (output pixel, tap) inside x is visited once, so dw is
 * complete once every row is done. */
DW_INLINE void bwd_row_body(const int P, const fl_conv_desc *d, const float *x, const float *w, const float *dy,
                            float *dx, float dx_beta, float *dw, int64_t r) {
    const dw_pre pq = pre_of(d);
    const int C = d->c, OC = d->oc, dm = OC / C;
    const int DH = fl_conv_dil_h(d), DW = fl_conv_dil_w(d);
    const int64_t n = r / d->h;
    const int row = (int)(r % d->h);
    const float *dyn = dy + (size_t)n * d->oh * d->ow * OC;
    for (int col = 0; col < d->w; col++) {
        const size_t pix = (size_t)r * d->w + col;
        const float *xp = x + pix * C;
        float *dxp = dx ? dx + pix * C : NULL;
        if (dxp && dx_beta == 0.0f) memset(dxp, 0, (size_t)C * sizeof(float));
        for (int i = 0; i < d->kh; i++) {
            const int th = row + d->pt - i * DH; /* = p * sh */
            if (th < 0) break;
            const int p = th / d->sh;
            if (th != p * d->sh || p >= d->oh) continue;
            for (int j = 0; j < d->kw; j++) {
                const int tw = col + d->pl - j * DW; /* = q * sw */
                if (tw < 0) break;
                const int q = tw / d->sw;
                if (tw != q * d->sw || q >= d->ow) continue;
                const float *g = dyn + ((size_t)p * d->ow + q) * OC;
                const size_t tap = (size_t)(i * d->kw + j) * OC;
                if (dm == 1) {
                    if (dxp && dw) bwd1(P, C, g, w + tap, xp, &pq, dxp, dw + tap);
                    else if (dxp) madd1(C, g, w + tap, dxp);
                    else madd1x(P, C, xp, &pq, g, dw + tap);
                } else {
                    if (dxp) dxm(C, dm, g, w + tap, dxp);
                    if (dw) maddmx(P, C, dm, xp, &pq, g, dw + tap);
                }
            }
        }
    }
}

/* The same source compiled three times: portable, AVX2+FMA, AVX-512. */
#define DW_ROWS(SUFFIX, ATTR)                                                                                   \
    ATTR static void fwd_rows_##SUFFIX(const fl_conv_desc *d, const float *x, const float *w, const float *b,      \
                                       float *y, int64_t r0, int64_t r1) {                                         \
        const int P = !d->pre ? 0 : d->pre_act == FL_ACT_LINEAR ? 1 : 2;                                          \
        if (P == 0)                                                                                                \
            for (int64_t r = r0; r < r1; r++) fwd_row_body(0, d, x, w, b, y, r);                                   \
        else if (P == 1)                                                                                           \
            for (int64_t r = r0; r < r1; r++) fwd_row_body(1, d, x, w, b, y, r);                                   \
        else                                                                                                       \
            for (int64_t r = r0; r < r1; r++) fwd_row_body(2, d, x, w, b, y, r);                                   \
    }                                                                                                              \
    ATTR static void bwd_rows_##SUFFIX(const fl_conv_desc *d, const float *x, const float *w, const float *y,      \
                                       float *dy, float *dx, float dx_beta, float *dw, float *db, int pass,         \
                                       int64_t r0, int64_t r1) {                                                   \
        if (pass == 1)                                                                                             \
            act_grad_span(d->act, (r1 - r0) * d->ow, d->oc, y + (size_t)r0 * d->ow * d->oc,                        \
                          dy + (size_t)r0 * d->ow * d->oc, db);                                                    \
        else if (!d->pre)                                                                                          \
            for (int64_t r = r0; r < r1; r++) bwd_row_body(0, d, x, w, dy, dx, dx_beta, dw, r);                    \
        else if (d->pre_act == FL_ACT_LINEAR)                                                                      \
            for (int64_t r = r0; r < r1; r++) bwd_row_body(1, d, x, w, dy, dx, dx_beta, dw, r);                    \
        else                                                                                                       \
            for (int64_t r = r0; r < r1; r++) bwd_row_body(2, d, x, w, dy, dx, dx_beta, dw, r);                    \
    }
DW_ROWS(plain, )
#if DW_HAVE_X86
DW_ROWS(avx512, DW_AVX512)
DW_ROWS(avx2, DW_AVX2)
#endif

typedef void (*fwd_rows_fn)(const fl_conv_desc *, const float *, const float *, const float *, float *, int64_t,
                            int64_t);
typedef void (*bwd_rows_fn)(const fl_conv_desc *, const float *, const float *, const float *, float *, float *,
                            float, float *, float *, int, int64_t, int64_t);

/* AVX-512 where fl_cpu_simd() says so; else AVX2+FMA where the CPU has it
 * (unless FLYNN_CPU_KERNELS=generic, fl_cpu_kernels_cap); else the portable code. */
static int g_dw_force = -1; /* fl_cpu_depthwise_force: -1 = the CPU's best */

int fl_cpu_depthwise_levels(void) {
#if DW_HAVE_X86
    __builtin_cpu_init();
    return 1 | (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 2 : 0) |
           (fl_cpu_simd_available() ? 4 : 0);
#else
    return 1;
#endif
}

void fl_cpu_depthwise_force(int level) {
    g_dw_force = level >= 0 && (fl_cpu_depthwise_levels() >> level & 1) ? level : -1;
}

static int dw_level(void) {
    if (g_dw_force >= 0) return g_dw_force;
    if (fl_cpu_simd()) return 2;
#if DW_HAVE_X86
    static int avx2 = -1;
    int v = __atomic_load_n(&avx2, __ATOMIC_RELAXED);
    if (v < 0) {
        __builtin_cpu_init();
        v = fl_cpu_kernels_cap() >= 1 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        __atomic_store_n(&avx2, v, __ATOMIC_RELAXED);
    }
    return v;
#else
    return 0;
#endif
}

static fwd_rows_fn fwd_rows(void) {
#if DW_HAVE_X86
    switch (dw_level()) {
    case 2: return fwd_rows_avx512;
    case 1: return fwd_rows_avx2;
    }
#endif
    return fwd_rows_plain;
}

static bwd_rows_fn bwd_rows(void) {
#if DW_HAVE_X86
    switch (dw_level()) {
    case 2: return bwd_rows_avx512;
    case 1: return bwd_rows_avx2;
    }
#endif
    return bwd_rows_plain;
}

static int threads_for(const fl_conv_desc *d) {
    return d->n * d->oh * d->ow * d->oc * d->kh * d->kw < 65536 ? 1 : fl_cpu_threads();
}

/* Rows handed out in blocks of about 4096 outputs to whichever thread is
 * free (a thread whose core another process shares takes fewer); every
 * output row is one thread's, so the result does not depend on who took it. */
static int64_t row_block(const fl_conv_desc *d) {
    const int64_t per = (int64_t)d->ow * d->oc;
    return per >= 4096 ? 1 : 4096 / per;
}

void fl_cpu_depthwise_fwd(const fl_conv_desc *d, const float *x, const float *w, const float *b, float *y) {
    const int64_t rows = d->n * d->oh, rb = row_block(d), nblk = (rows + rb - 1) / rb;
    const fwd_rows_fn f = fwd_rows();
#pragma omp parallel for schedule(dynamic) num_threads(threads_for(d))
    for (int64_t k = 0; k < nblk; k++) f(d, x, w, b, y, k * rb, k * rb + rb < rows ? k * rb + rb : rows);
}

#define DW_STACK 8192 /* floats of dw/db part sums kept on the stack */

/* Pass 1 (output rows): dy *= act'(y), db sums. Pass 2 (input rows, after a
 * barrier, since it reads the dy rows of its neighbours): dx and dw (see
 * bwd_row_body). The rows of each pass are cut into a fixed number of parts
 * (four per core, as the convolutions' filter gradient: cpu_conv.c), handed
 * out to whichever thread is free, each summing its own dw and db; the parts
 * are added in part order, so the sums depend neither on the thread count
 * nor on who took which part. */
void fl_cpu_depthwise_bwd(const fl_conv_desc *d, const float *x, const float *w, const float *y, float *dy,
                          float *dx, float dx_beta, float *dw, float *db) {
    const int OC = d->oc, KK = d->kh * d->kw;
    const int64_t orows = d->n * d->oh, irows = d->n * d->h;
    const bwd_rows_fn f = bwd_rows();
    const int nt = threads_for(d);
    const size_t ndw = dw ? (size_t)KK * OC : 0, ndb = db ? (size_t)OC : 0, per = ndw + ndb;
    int np = 4 * omp_get_num_procs();
    if (np > irows) np = (int)irows;
    if (np > orows) np = (int)orows;
    float stack_part[DW_STACK];
    float *part = NULL; /* np blocks of per floats: dw sums, then db sums */
    if (np > 1 && per) {
        part = (size_t)np * per <= DW_STACK ? stack_part : malloc((size_t)np * per * sizeof(float));
        if (!part) np = 1; /* no memory for the sums: one part, into dw/db directly */
    }
    if (np < 1) np = 1;
    if (part) memset(part, 0, (size_t)np * per * sizeof(float));
    else {
        if (dw) memset(dw, 0, ndw * sizeof(float));
        if (db) memset(db, 0, ndb * sizeof(float));
    }
    const bool act_pass = d->act != FL_ACT_LINEAR || db;
    /* without sums (neither dw nor db) the rows are independent; without
     * memory for the parts, one thread sums into dw/db directly */
#pragma omp parallel num_threads(per == 0 || part ? nt : 1)
    {
        if (act_pass) {
#pragma omp for schedule(dynamic)
            for (int k = 0; k < np; k++) {
                float *tdb = !db ? NULL : part ? part + (size_t)k * per + ndw : db; /* never part of the dw sums */
                f(d, x, w, y, dy, dx, dx_beta, NULL, tdb, 1, orows * k / np, orows * (k + 1) / np);
            }
        }
        if (dx || dw) {
#pragma omp for schedule(dynamic)
            for (int k = 0; k < np; k++) {
                float *tdw = part ? part + (size_t)k * per : dw;
                f(d, x, w, y, dy, dx, dx_beta, dw ? tdw : NULL, NULL, 2, irows * k / np, irows * (k + 1) / np);
            }
        }
    }
    if (part) { /* the parts' sums, in part order */
        if (dw) memcpy(dw, part, ndw * sizeof(float));
        if (db) memcpy(db, part + ndw, ndb * sizeof(float));
        for (int k = 1; k < np; k++) {
            const float *pt = part + (size_t)k * per;
            for (size_t i = 0; i < ndw; i++) dw[i] += pt[i];
            for (size_t i = 0; i < ndb; i++) db[i] += pt[ndw + i];
        }
        if (part != stack_part) free(part);
    }
}
