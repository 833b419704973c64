/*
 * cpu_winograd.c — 3x3 stride-1 convolutions by Winograd's F(2x2, 3x3)
 * (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2015),
 * on the AVX-512 micro-kernel of cpu_avx512.c.
 *
 * Each 2x2 tile of output pixels is computed from the 4x4 input patch under
 * it as
 *     Y = A^T [ (G g G^T) (.) (B^T d B) ] A
 * per channel pair, with the element-wise product (.) summed over the input
 * channels: that sum is 16 independent GEMMs, one per position xi of the 4x4
 * transformed tile,
 *     M[xi][tile, oc] = sum_c V[xi][tile, c] U[xi][c, oc]
 *     V[xi] = B^T d B  (input transform: additions only)
 *     U[xi] = G g G^T  (kernel transform: once per call)
 * 16 multiplications per tile and channel pair instead of 36 (2.25x fewer),
 * with
 *     B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
 *     G   = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]
 *     A^T = [1 1 1 0; 0 1 -1 -1]
 * Every coefficient is 0, +-1 or +-1/2, exact in binary, so the result
 * differs from the direct sum only by the order of roundings (F(2x2, 3x3)
 * is the variant whose error stays at the direct convolution's level; the
 * larger F(4x4, 3x3) loses about two digits in float32).
 *
 * NHWC: a tile's 16 input pixels are 16 rows of C contiguous channels, so
 * the transforms run 16 channels per vector with no gather. Tiles go in
 * blocks small enough that V and M stay in L2 while the 16 GEMMs (the
 * micro-kernel: tiles by broadcast, U's rows as vectors) run over them. The
 * padding is read as zeros at the border tiles; no padded copy is made.
 * The forward of Conv2D and its data gradient (the same convolution over dy
 * padded by 2, with the kernel rotated and transposed) use it; the filter
 * gradient stays direct. A dilated forward too: each of the output's
 * dil_h x dil_w phases (pixels dil apart) is a 3x3 convolution over the
 * input's pixels dil apart, tiled 2x2 over its own pixels (wino_phases).
 */
#include "cpu_internal.h"
#include "cpu_simd.h"

#include <stdlib.h>
#include <string.h>

/* Floats of V and M a thread keeps for one block of tiles (256 KB). */
#define WINO_BLOCK_FLOATS (64 * 1024)

/* -1: not read yet; 0: FLYNN_CONV_WINOGRAD=0 turned it off; 1: on. */
static int g_wino = -1;

static int wino_enabled(void) {
    int v = __atomic_load_n(&g_wino, __ATOMIC_RELAXED);
    if (v >= 0) return v;
    const char *e = getenv("FLYNN_CONV_WINOGRAD");
    v = !(e && strcmp(e, "0") == 0);
    __atomic_store_n(&g_wino, v, __ATOMIC_RELAXED);
    return v;
}

void fl_wino_force(int on) { __atomic_store_n(&g_wino, on < 0 ? -1 : on != 0, __ATOMIC_RELAXED); }

static int wino_shape_ok(int kh, int kw, int sh, int sw, int c, int oc) {
    if (!FL_HAVE_AVX512 || !fl_cpu_simd() || !wino_enabled()) return 0;
    /* with fewer channels the transforms (per tile: O(c + oc)) cost more
     * than the products they save (O(c * oc)): bench/conv3x3.c on a Zen 4,
     * batch 128, forward / backward against the direct kernels: 16 -> 16
     * 0.85x / 0.84x, 32 -> 32 1.26x / 1.13x, 64 -> 64 1.50-1.64x / 1.13-1.23x */
    return kh == 3 && kw == 3 && sh == 1 && sw == 1 && c >= 32 && oc >= 32;
}

/* Dilated too (its output's dil_h x dil_w phases each a 3x3 convolution over the input's pixels dil apart),
 * up to WINO_MAX_PHASES phases */
#define WINO_MAX_PHASES 64
int fl_wino_ok(const fl_conv_desc *d) {
    return fl_conv_dil_h(d) * fl_conv_dil_w(d) <= WINO_MAX_PHASES && fl_conv_groups(d) == 1 &&
           wino_shape_ok(d->kh, d->kw, d->sh, d->sw, d->c, d->oc);
}

/* Tiles per block: V and M of a block fit WINO_BLOCK_FLOATS; but where the transformed kernel outgrows the L2
 * (16 c oc floats over 1 MB: VGG's and ResNet50's 256- and 512-channel stages), at least WINO_WIDE_TILES, so
 * that each panel of it streamed from the L3 serves that many tiles (6 tiles a block read VGG16's 16 MB of
 * 512 -> 512 kernel once per 6 tiles: 1.5 multiply-adds a byte). A tile's sums do not depend on its block. */
#define WINO_WIDE_TILES 48
static int wino_block_tiles(int c, int oc) {
    const int tb = WINO_BLOCK_FLOATS / (16 * (c + oc));
    const int least = (size_t)16 * c * oc > ((size_t)1 << 18) ? WINO_WIDE_TILES : 6;
    return tb < least ? least : tb;
}

size_t fl_wino_u_floats(int c, int oc) { return ((size_t)16 * c * oc + 15) & ~(size_t)15; }

/* Floats between the 16 planes of V (n = c) or M (n = oc) for a block of
 * nb tiles: rounded to a cache line, plus one, so that the 16 planes a tile
 * transform reads or writes do not all fall in one L1 set (a power-of-two
 * stride such as 8 KB would, with ResNet's channel counts). */
static size_t plane_floats(int nb, int n) { return (((size_t)nb * n + 15) & ~(size_t)15) + 16; }

size_t fl_wino_scratch_floats(int c, int oc) {
    const int tb = wino_block_tiles(c, oc);
    return 16 * (plane_floats(tb, c) + plane_floats(tb, oc));
}

#if FL_HAVE_AVX512

static inline __mmask16 tail_mask(int left) { return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1); }

/* V for one tile whose 4x4 patch starts at input (ih0, iw0) (may lie partly
 * outside the input: zeros there). v: V[0][tile][0]; planes vs floats apart.
 * pre (s, then t; C each): each input read as pre_act(x * s + t), the
 * normalisation's rounding (a multiply, then an add; the max with 0 and the
 * cap as its v > 0 ? v : 0 and v < hi ? v : hi, -0 and NaN to 0 alike);
 * the zeros outside stay zeros. */
FL_AVX512 static inline __attribute__((always_inline)) void
in_tile_body(const float *xs, int H, int W, int C, int ih0, int iw0, const int dh, const int dw, float *v, size_t vs,
             const float *pre, const int act) {
    const int inside = ih0 >= 0 && iw0 >= 0 && ih0 + 3 * dh < H && iw0 + 3 * dw < W;
    const __m512 zero = _mm512_setzero_ps(), hi = _mm512_set1_ps(fl_cpu_relu_cap(act));
    for (int c0 = 0; c0 < C; c0 += 16) {
        const __mmask16 m = tail_mask(C - c0);
        const __m512 ps = pre ? _mm512_maskz_loadu_ps(m, pre + c0) : zero;
        const __m512 pt = pre ? _mm512_maskz_loadu_ps(m, pre + C + c0) : zero;
        /* B^T d a column at a time, so that the 16 products of the first
         * step stay in registers with the column's four inputs */
        __m512 t[4][4];
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            __m512 x[4];
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) {
                const int ih = ih0 + i * dh, iw = iw0 + j * dw;
                if (inside || (ih >= 0 && ih < H && iw >= 0 && iw < W)) {
                    x[i] = _mm512_maskz_loadu_ps(m, xs + ((size_t)ih * W + iw) * C + c0);
                    if (pre) {
                        x[i] = _mm512_add_ps(_mm512_mul_ps(x[i], ps), pt);
                        if (act != FL_ACT_LINEAR) x[i] = _mm512_min_ps(_mm512_max_ps(x[i], zero), hi);
                    }
                } else {
                    x[i] = zero;
                }
            }
            t[0][j] = _mm512_sub_ps(x[0], x[2]);
            t[1][j] = _mm512_add_ps(x[1], x[2]);
            t[2][j] = _mm512_sub_ps(x[2], x[1]);
            t[3][j] = _mm512_sub_ps(x[1], x[3]);
        }
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) { /* (B^T d) B */
            float *p = v + (size_t)(i * 4) * vs + c0;
            _mm512_mask_storeu_ps(p, m, _mm512_sub_ps(t[i][0], t[i][2]));
            _mm512_mask_storeu_ps(p + vs, m, _mm512_add_ps(t[i][1], t[i][2]));
            _mm512_mask_storeu_ps(p + 2 * vs, m, _mm512_sub_ps(t[i][2], t[i][1]));
            _mm512_mask_storeu_ps(p + 3 * vs, m, _mm512_sub_ps(t[i][1], t[i][3]));
        }
    }
}
FL_AVX512 static void in_tile(const float *xs, int H, int W, int C, int ih0, int iw0, float *v, size_t vs) {
    in_tile_body(xs, H, W, C, ih0, iw0, 1, 1, v, vs, NULL, FL_ACT_LINEAR);
}
/* a dilated convolution's patch: its 4x4 pixels dh rows and dw columns apart; pre where given */
FL_AVX512 static void in_tile_dil(const float *xs, int H, int W, int C, int ih0, int iw0, int dh, int dw, float *v,
                                  size_t vs, const float *pre, int act) {
    if (!pre || act == FL_ACT_LINEAR) in_tile_body(xs, H, W, C, ih0, iw0, dh, dw, v, vs, pre, FL_ACT_LINEAR);
    else in_tile_body(xs, H, W, C, ih0, iw0, dh, dw, v, vs, pre, act);
}
FL_AVX512 static void in_tile_pre(const float *xs, int H, int W, int C, int ih0, int iw0, float *v, size_t vs,
                                  const float *pre, int act) {
    if (act == FL_ACT_LINEAR) in_tile_body(xs, H, W, C, ih0, iw0, 1, 1, v, vs, pre, FL_ACT_LINEAR);
    else in_tile_body(xs, H, W, C, ih0, iw0, 1, 1, v, vs, pre, act);
}

/* The output tile from M (mt: M[0][tile][0], planes ms floats apart): rows x
 * cols (1 or 2 each) pixels at y (rows yrow floats apart, columns ycol), plus the bias or what y
 * holds (accumulate), plus res (laid out as y; NULL: none), then the ReLU (leaky where slope > 0: max(o, slope o) + 0;
 * capped at relu_max: 6 for ReLU6,
 * INFINITY for ReLU), then zero where gate <= 0 (gate laid out as y; NULL:
 * none). */
FL_AVX512 static void out_tile(const float *mt, size_t ms, int OC, const float *b, int relu, float relu_max,
                               float slope, int accumulate, const float *gate, const float *res, float *y,
                               size_t yrow, size_t ycol, int rows, int cols) {
    const __m512 zero = _mm512_setzero_ps(), hi = _mm512_set1_ps(relu_max), sv = _mm512_set1_ps(slope);
    for (int o0 = 0; o0 < OC; o0 += 16) {
        const __mmask16 k = tail_mask(OC - o0);
        __m512 m[4][4], s[2][4], r[2][2];
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++) m[i][j] = _mm512_maskz_loadu_ps(k, mt + (size_t)(i * 4 + j) * ms + o0);
        for (int j = 0; j < 4; j++) { /* A^T M */
            s[0][j] = _mm512_add_ps(_mm512_add_ps(m[0][j], m[1][j]), m[2][j]);
            s[1][j] = _mm512_sub_ps(_mm512_sub_ps(m[1][j], m[2][j]), m[3][j]);
        }
        for (int i = 0; i < 2; i++) { /* (A^T M) A */
            r[i][0] = _mm512_add_ps(_mm512_add_ps(s[i][0], s[i][1]), s[i][2]);
            r[i][1] = _mm512_sub_ps(_mm512_sub_ps(s[i][1], s[i][2]), s[i][3]);
        }
        const __m512 bv = b ? _mm512_maskz_loadu_ps(k, b + o0) : zero;
        for (int i = 0; i < rows; i++)
            for (int j = 0; j < cols; j++) {
                float *p = y + i * yrow + (size_t)j * ycol + o0;
                __m512 o = accumulate ? _mm512_add_ps(_mm512_maskz_loadu_ps(k, p), r[i][j]) : _mm512_add_ps(r[i][j], bv);
                if (res) o = _mm512_add_ps(o, _mm512_maskz_loadu_ps(k, res + i * yrow + (size_t)j * ycol + o0));
                if (relu && slope > 0.0f)
                    o = _mm512_min_ps(_mm512_add_ps(_mm512_max_ps(o, _mm512_mul_ps(o, sv)), zero), hi);
                else if (relu) o = _mm512_min_ps(_mm512_max_ps(o, zero), hi);
                if (gate)
                    o = _mm512_maskz_mov_ps(
                        _mm512_cmp_ps_mask(_mm512_maskz_loadu_ps(k, gate + i * yrow + (size_t)j * ycol + o0), zero,
                                           _CMP_GT_OQ),
                        o);
                _mm512_mask_storeu_ps(p, k, o);
            }
    }
}

/* u[xi][c][oc] = (G g G^T)[xi] for g = w[:, :, c, oc] (w: [3][3][c][oc]),
 * 16 (c, oc) pairs per vector: made anew by every call (the weights may
 * have changed), which at batch 1 must stay small against the convolution
 * (the scalar loop was a tenth of mnist_cnn's conv2 at batch 1). */
FL_AVX512 void fl_wino_weights(int C, int OC, const float *w, float *u) {
    const size_t plane = (size_t)C * OC;
    const __m512 h = _mm512_set1_ps(0.5f);
    for (size_t co = 0; co < plane; co += 16) {
        const __mmask16 k = tail_mask((int)(plane - co < 16 ? plane - co : 16));
        __m512 g[3][3], t[4][3];
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++) g[i][j] = _mm512_maskz_loadu_ps(k, w + (size_t)(i * 3 + j) * plane + co);
        for (int j = 0; j < 3; j++) { /* G g */
            const __m512 s02 = _mm512_add_ps(g[0][j], g[2][j]);
            t[0][j] = g[0][j];
            t[1][j] = _mm512_mul_ps(h, _mm512_add_ps(s02, g[1][j]));
            t[2][j] = _mm512_mul_ps(h, _mm512_sub_ps(s02, g[1][j]));
            t[3][j] = g[2][j];
        }
        for (int i = 0; i < 4; i++) { /* (G g) G^T */
            const __m512 s02 = _mm512_add_ps(t[i][0], t[i][2]);
            float *p = u + (size_t)(i * 4) * plane + co;
            _mm512_mask_storeu_ps(p, k, t[i][0]);
            _mm512_mask_storeu_ps(p + plane, k, _mm512_mul_ps(h, _mm512_add_ps(s02, t[i][1])));
            _mm512_mask_storeu_ps(p + 2 * plane, k, _mm512_mul_ps(h, _mm512_sub_ps(s02, t[i][1])));
            _mm512_mask_storeu_ps(p + 3 * plane, k, t[i][2]);
        }
    }
}

/* A sample's tiles over output rows [oh0, oh1): the output's dil_h x dil_w phases in turn (one without
 * dilation), each tiled 2x2 over its own pixels (dil_h rows and dil_w columns apart), row by row. */
typedef struct wino_phases {
    int dh, dw, total;
    int r0[WINO_MAX_PHASES], c0[WINO_MAX_PHASES], sr[WINO_MAX_PHASES], sc[WINO_MAX_PHASES];
    int start[WINO_MAX_PHASES + 1];
} wino_phases;
static void phases_of(const fl_conv_desc *d, int oh0, int oh1, wino_phases *w) {
    const int dh = fl_conv_dil_h(d), dw = fl_conv_dil_w(d);
    int np = 0;
    w->dh = dh;
    w->dw = dw;
    w->total = 0;
    for (int a = 0; a < dh; a++) {
        const int first = oh0 + ((a - oh0) % dh + dh) % dh; /* the first row >= oh0 of phase a */
        const int sr = first < oh1 ? (oh1 - first + dh - 1) / dh : 0;
        if (!sr) continue;
        for (int b = 0; b < dw && b < d->ow; b++) {
            const int sc = (d->ow - b + dw - 1) / dw;
            w->r0[np] = first;
            w->c0[np] = b;
            w->sr[np] = sr;
            w->sc[np] = sc;
            w->start[np] = w->total;
            w->total += ((sr + 1) / 2) * ((sc + 1) / 2);
            np++;
        }
    }
    w->start[np] = w->total;
}
/* Tile ti of a sample: its first output pixel (oh, ow) and its rows and columns (1 or 2 each) */
static inline void tile_of(const wino_phases *w, int ti, int *oh, int *ow, int *rows, int *cols) {
    int p = 0;
    while (ti >= w->start[p + 1]) p++;
    const int tc = (w->sc[p] + 1) / 2, k = ti - w->start[p], ty = k / tc, tx = k % tc;
    *oh = w->r0[p] + 2 * ty * w->dh;
    *ow = w->c0[p] + 2 * tx * w->dw;
    *rows = w->sr[p] - 2 * ty < 2 ? 1 : 2;
    *cols = w->sc[p] - 2 * tx < 2 ? 1 : 2;
}

/* Output rows [oh0, oh1) of samples [0, ns) (in_sz and out_sz floats apart in xs and ys, gate as ys): their
 * tiles as one sequence, a sample's row by row, in blocks of the block size, so that samples with few tiles
 * (ResNet50's 2x2 and 4x4 stages at 64x64: one and four) share a block's GEMMs instead of each running its
 * own on a row or four. A tile's sums are the same whatever block it falls in. */
FL_AVX512 static void wino_tiles(const fl_conv_desc *d, const float *xs, size_t in_sz, const float *u,
                                 const float *b, float *ys, size_t out_sz, int oh0, int oh1, int ns,
                                 int accumulate, const float *gate, const float *res, float *scratch) {
    const int C = d->c, OC = d->oc, OW = d->ow;
    wino_phases ph;
    phases_of(d, oh0, oh1, &ph);
    const int ts = ph.total, T = ts * ns, dil = ph.dh > 1 || ph.dw > 1;
    const int TB = wino_block_tiles(C, OC);
    /* ReLU and ReLU6 in the output transform; other activations after */
    const int relu = d->act == FL_ACT_RELU || (d->act == FL_ACT_RELU6 && !accumulate);
    const float relu_max = d->act == FL_ACT_RELU6 ? 6.0f : INFINITY;
    const float *bias = d->has_bias && !accumulate ? b : NULL;
    const size_t yrow = (size_t)OW * OC, plane = (size_t)C * OC;
    for (int t0 = 0; t0 < T; t0 += TB) {
        const int nb = T - t0 < TB ? T - t0 : TB;
        const size_t vs = plane_floats(nb, C), ms = plane_floats(nb, OC);
        float *V = scratch, *M = scratch + 16 * vs;
        for (int i = 0; i < nb; i++) {
            const int sn = (t0 + i) / ts;
            int oh, ow, rows, cols;
            tile_of(&ph, (t0 + i) % ts, &oh, &ow, &rows, &cols);
            const float *xn = xs + (size_t)sn * in_sz;
            if (dil)
                in_tile_dil(xn, d->h, d->w, C, oh - d->pt, ow - d->pl, ph.dh, ph.dw, V + (size_t)i * C, vs, d->pre,
                            d->pre_act);
            else if (d->pre)
                in_tile_pre(xn, d->h, d->w, C, oh - d->pt, ow - d->pl, V + (size_t)i * C, vs, d->pre, d->pre_act);
            else
                in_tile(xn, d->h, d->w, C, oh - d->pt, ow - d->pl, V + (size_t)i * C, vs);
        }
        for (int xi = 0; xi < 16; xi++)
            for (int o0 = 0; o0 < OC; o0 += 64) {
                fl_simd_tile t = {0};
                t.cols = OC - o0 < 64 ? OC - o0 : 64;
                t.as = C;
                t.aj = 1;
                t.nseg = 1;
                t.nj = C;
                t.b = u + (size_t)xi * plane + o0;
                t.bj = OC;
                t.ldc = OC;
                const int rm = fl_simd_max_rows(t.cols), nt = fl_tiles(nb, rm);
                for (int k = 0; k < nt; k++) {
                    const int r0 = (int)fl_tile_start(nb, nt, k), r1 = (int)fl_tile_start(nb, nt, k + 1);
                    t.a = V + (size_t)xi * vs + (size_t)r0 * C;
                    t.c = M + (size_t)xi * ms + (size_t)r0 * OC + o0;
                    fl_simd_run(&t, r1 - r0);
                }
            }
        for (int i = 0; i < nb; i++) {
            const int sn = (t0 + i) / ts;
            int oh, ow, rows, cols;
            tile_of(&ph, (t0 + i) % ts, &oh, &ow, &rows, &cols);
            const size_t off = (size_t)sn * out_sz + (size_t)oh * yrow + (size_t)ow * OC;
            out_tile(M + (size_t)i * OC, ms, OC, bias, relu, relu_max, relu ? d->slope : 0.0f, accumulate,
                     gate ? gate + off : NULL, res ? res + off : NULL, ys + off, yrow * ph.dh, (size_t)ph.dw * OC,
                     rows, cols);
        }
    }
    if (d->act != FL_ACT_LINEAR && !relu && !accumulate)
        for (int sn = 0; sn < ns; sn++)
            fl_cpu_bias_act_rows((int64_t)(oh1 - oh0) * OW, OC, NULL, d->act,
                                 ys + (size_t)sn * out_sz + (size_t)oh0 * yrow);
}

FL_AVX512 void fl_wino_rows(const fl_conv_desc *d, const float *xs, const float *u, const float *b, float *ys,
                            int oh0, int oh1, int accumulate, const float *gate, float *scratch) {
    wino_tiles(d, xs, 0, u, b, ys, 0, oh0, oh1, 1, accumulate, gate, NULL, scratch);
}

int fl_wino_group(const fl_conv_desc *d) {
    wino_phases ph;
    phases_of(d, 0, d->oh, &ph);
    const int ts = ph.total, tb = wino_block_tiles(d->c, d->oc);
    return ts >= tb ? 1 : (tb + ts - 1) / ts;
}

FL_AVX512 void fl_wino_samples(const fl_conv_desc *d, const float *x, const float *u, const float *b, float *y,
                               const float *res, int ns, float *scratch) {
    wino_tiles(d, x, (size_t)d->h * d->w * d->c, u, b, y, (size_t)d->oh * d->ow * d->oc, 0, d->oh, ns, 0, NULL,
               res, scratch);
}

#else

void fl_wino_weights(int c, int oc, const float *w, float *u) { (void)c; (void)oc; (void)w; (void)u; }

void fl_wino_rows(const fl_conv_desc *d, const float *xs, const float *u, const float *b, float *ys, int oh0, int oh1,
                  int accumulate, const float *gate, float *scratch) {
    (void)d; (void)xs; (void)u; (void)b; (void)ys; (void)oh0; (void)oh1; (void)accumulate; (void)gate;
    (void)scratch;
}

int fl_wino_group(const fl_conv_desc *d) { (void)d; return 1; }

void fl_wino_samples(const fl_conv_desc *d, const float *x, const float *u, const float *b, float *y,
                     const float *res, int ns, float *scratch) {
    (void)d; (void)x; (void)u; (void)b; (void)y; (void)res; (void)ns; (void)scratch;
}

#endif
