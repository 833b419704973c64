/*
 * cpu_winograd.c — 3x3 stride-1 convolutions by Winograd's F(2x2, 3x3)
 * (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2015),
 * on the micro-kernel of cpu_simd.h: AVX-512 or AVX2 (its transforms and
 * tile loop in cpu_winograd_vec.h, built for both widths: the same bits).
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
 * the transforms run 16 (AVX2: 8) channels per vector with no gather. Tiles go in
 * blocks small enough that V and M stay in L2 while the 16 GEMMs (the
 * micro-kernel: tiles by broadcast, U's rows as vectors) run over them. The
 * padding is read as zeros at the border tiles; no padded copy is made.
 * The forward of Conv2D and its data gradient (the same convolution over dy
 * padded by 2, with the kernel rotated and transposed) use it; the filter
 * gradient stays direct. A dilated forward too: each of the output's
 * dil_h x dil_w phases (pixels dil apart) is a 3x3 convolution over the
 * input's pixels dil apart, tiled 2x2 over its own pixels (wino_phases).
 */
#include "cpu_fastmath.h"
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
    if (!fl_cpu_direct() || !wino_enabled()) return 0;
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

int fl_wino_group(const fl_conv_desc *d) {
    wino_phases ph;
    phases_of(d, 0, d->oh, &ph);
    const int ts = ph.total, tb = wino_block_tiles(d->c, d->oc);
    return ts >= tb ? 1 : (tb + ts - 1) / ts;
}


#if FL_HAVE_AVX512
static inline void wino_run_512(const fl_simd_tile *t, int rows) { fl_avx512_run(t, rows); }
static inline int wino_max_rows_512(int cols) { return fl_avx512_max_rows(cols); }
#define FL_VEC_BITS 512
#include "cpu_winograd_vec.h"
#undef FL_VEC_BITS
#endif
#if FL_HAVE_AVX2_TARGET
static inline void wino_run_256(const fl_simd_tile *t, int rows) { fl_avx2_run(t, rows); }
static inline int wino_max_rows_256(int cols) { return fl_avx2_max_rows(cols); }
#define FL_VEC_BITS 256
#include "cpu_winograd_vec.h"
#undef FL_VEC_BITS
#endif

/* The width in use: fl_wino_ok said yes only where fl_cpu_direct() does. */
#if FL_HAVE_AVX512 && FL_HAVE_AVX2_TARGET
#define WINO_DISPATCH(name, ...) (fl_cpu_simd() ? name##_512(__VA_ARGS__) : name##_256(__VA_ARGS__))
#elif FL_HAVE_AVX2_TARGET
#define WINO_DISPATCH(name, ...) name##_256(__VA_ARGS__)
#else
#define WINO_DISPATCH(name, ...) ((void)0)
#endif

void fl_wino_weights(int c, int oc, const float *w, float *u) { WINO_DISPATCH(wino_weights, c, oc, w, u); }

void fl_wino_rows(const fl_conv_desc *d, const float *xs, const float *u, const float *b, float *ys, int oh0, int oh1,
                  int accumulate, const float *gate, float *scratch) {
    WINO_DISPATCH(wino_rows, d, xs, u, b, ys, oh0, oh1, accumulate, gate, scratch);
}

void fl_wino_samples(const fl_conv_desc *d, const float *x, const float *u, const float *b, float *y,
                     const float *res, int ns, int accumulate, const float *gate, float *scratch) {
    WINO_DISPATCH(wino_samples, d, x, u, b, y, res, ns, accumulate, gate, scratch);
}
