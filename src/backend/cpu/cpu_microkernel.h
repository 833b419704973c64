/*
 * cpu_microkernel.h — the micro-kernel family of cpu_simd.h (fl_simd_tile),
 * written once with cpu_vec.h's names and compiled for each vector width:
 * cpu_avx512.c includes it with FL_VEC_BITS 512 (zmm, 32 registers),
 * cpu_avx2.c with 256 (ymm, 16 registers). Each defines the tile shapes its
 * registers hold (MK_DEFINE, MKT_DEFINE, MKD_DEFINE below) and its own
 * dispatch over them.
 *
 *     MK_DEFINE(R, V, FULL)  mk_R_V_FULL_<bits>: an R x (VL*V) tile, acc[R][V]
 *                            in registers; per step j, V vectors of B and R
 *                            broadcasts of A, R*V FMAs
 *     MKT_DEFINE(R, FULL)    mkt3_R_FULL_<bits>: the taps form, one vector of
 *                            columns, 3 taps: (R + 2) broadcasts for 3R FMAs
 *     MKD_DEFINE(CT, FULL)   mkd3_CT_FULL_<bits>: fl_simd_dw3 for CT input
 *                            channels and one vector of columns
 *
 * FULL (a compile-time 0 or 1): the tile's last vector of columns is whole,
 * so that B, C and the epilogue's vectors are read and written without
 * masks; with 0 the last vector goes through vm_first(cols left). On
 * AVX-512 the masks cost nothing and only FULL = 0 is built; AVX2's masked
 * loads in the inner loop halved a GEMM's speed on a Zen 2, so it builds both.
 *
 * Every element of C is the same sequence of FMAs, in (segment, step) order
 * (taps: (segment, step, tap)), whatever the width, the tile's rows or its
 * columns: the two widths give the same bits, and so do tiles of any shape.
 */
#include "cpu_vec.h"

#include <math.h>

/* A tile's accumulator (row r, vector v) at the start: C itself, the bias or zero. `full`: all VL lanes (else
 * the lanes of mk). */
VF_TARGET static inline __attribute__((always_inline)) vf VF_(mk_init)(const fl_simd_tile *t, int r, int v, int full,
                                                                       vmask mk) {
    if (t->accumulate) return vf_loadf(full, mk, t->c + r * t->ldc + VL * v);
    if (t->bias) return vf_loadf(full, mk, t->bias + VL * v);
    return vf_zero();
}

/* Its store: the residual added, then the ReLU (capped at hi; leaky with a slope: max(o, slope o) + 0, which
 * for 0 < slope < 1 is the LeakyReLU layer's o > 0 ? o : o < 0 ? slope o : 0 to the bit), then the gate. The
 * tile's fields come as values (MK_EPILOGUE): the vector stores may alias the tile, which would otherwise be
 * read again after each one. */
typedef struct VF_(mk_epi) {
    float *c;
    int64_t ldc;
    const float *res, *gate;
    int relu;
    float slope;
} VF_(mk_epi);
VF_TARGET static inline __attribute__((always_inline)) void VF_(mk_store)(const VF_(mk_epi) *e, int r, int v, vf o,
                                                                          int full, vmask mk, vf hi) {
    const vf zero = vf_zero();
    const int64_t off = r * e->ldc + VL * v;
    if (e->res) o = vf_add(o, vf_loadf(full, mk, e->res + off));
    if (e->relu && e->slope > 0.0f) /* + 0: -0 to 0, as the LeakyReLU layer */
        o = vf_min(vf_add(vf_max(o, vf_mul(o, vf_set1(e->slope))), zero), hi);
    else if (e->relu)
        o = vf_min(vf_max(o, zero), hi);
    if (e->gate) o = vf_keep_gt0(vf_loadf(full, mk, e->gate + off), o);
    vf_storef(full, e->c + off, mk, o);
}

/* The store of a tile's acc[r][v] (vectors VL apart, the last `tail`), or a plain store where there is no
 * epilogue (a GEMM's). C's address is taken afresh here (the empty asm): computed once for the start and the
 * store, a dozen row pointers lived on the stack across the loop (a GEMM with K 16 ran 40% slower). */
#define MK_EPILOGUE(t, R, V, FULL, acc, tail)                                                                  \
    do {                                                                                                       \
        VF_(mk_epi) e_ = {(t)->c, (t)->ldc, (t)->res, (t)->gate, (t)->relu, (t)->slope};                       \
        __asm__("" : "+r"(e_.c), "+r"(e_.ldc));                                                                \
        if (!e_.res && !e_.gate && !e_.relu) {                                                                 \
            _Pragma("GCC unroll 32") for (int r = 0; r < R; r++) {                                             \
                _Pragma("GCC unroll 4") for (int v = 0; v < V; v++)                                            \
                    vf_storef(FULL || v < V - 1, e_.c + r * e_.ldc + VL * v, tail, acc[r][v]);                 \
            }                                                                                                  \
            break;                                                                                             \
        }                                                                                                      \
        const vf hi_ = vf_set1((t)->relu_max > 0.0f ? (t)->relu_max : INFINITY);                               \
        _Pragma("GCC unroll 32") for (int r = 0; r < R; r++) {                                                 \
            _Pragma("GCC unroll 4") for (int v = 0; v < V; v++)                                                \
                VF_(mk_store)(&e_, r, v, acc[r][v], FULL || v < V - 1, tail, hi_);                             \
        }                                                                                                      \
    } while (0)

#define MK_DEFINE(R, V, FULL)                                                                                  \
    VF_TARGET static void VF_CAT(mk_##R##_##V##_##FULL, FL_VEC_BITS)(const fl_simd_tile *t) {                  \
        const vmask tail = vm_first(t->cols - VL * (V - 1));                                                   \
        vf acc[R][V];                                                                                          \
        _Pragma("GCC unroll 16") for (int r = 0; r < R; r++) {                                                 \
            _Pragma("GCC unroll 4") for (int v = 0; v < V; v++) {                                              \
                acc[r][v] = VF_(mk_init)(t, r, v, FULL || v < V - 1, tail);                                    \
            }                                                                                                  \
        }                                                                                                      \
        const int64_t as = t->as, aj = t->aj, bj = t->bj;                                                      \
        const int nseg = t->nseg, nj = t->nj;                                                                  \
        const float *pa = t->a, *pb = t->b;                                                                    \
        for (int s = 0;;) {                                                                                    \
            for (int j = 0; j < nj; j++) {                                                                     \
                vf bv[V];                                                                                      \
                _Pragma("GCC unroll 4") for (int v = 0; v < V; v++) {                                          \
                    bv[v] = FULL || v < V - 1 ? vf_load(pb + VL * v) : vf_loadm(tail, pb + VL * v);            \
                }                                                                                              \
                _Pragma("GCC unroll 16") for (int r = 0; r < R; r++) {                                         \
                    const vf av = vf_bcast(pa + r * as);                                                       \
                    _Pragma("GCC unroll 4") for (int v = 0; v < V; v++) acc[r][v] = vf_fmadd(av, bv[v], acc[r][v]); \
                }                                                                                              \
                pa += aj;                                                                                      \
                pb += bj;                                                                                      \
            }                                                                                                  \
            if (++s >= nseg) break;                                                                            \
            pa = t->a + s * t->aseg;                                                                           \
            pb = t->b + s * t->bseg;                                                                           \
        }                                                                                                      \
        MK_EPILOGUE(t, R, V, FULL, acc, tail);                                                                 \
    }

/* The taps form (cpu_simd.h, fl_simd_tile.taps): one vector of output channels; with stride 1 the x that
 * output pixel r reads at kernel column k is the one pixel r + 1 reads at k - 1, so per step j the three taps'
 * weight vectors are loaded once and each pixel's x broadcast once for the up to three rows it serves. */
#define MKT_DEFINE(R, FULL)                                                                                    \
    VF_TARGET static void VF_CAT(mkt3_##R##_##FULL, FL_VEC_BITS)(const fl_simd_tile *t) {                      \
        const vmask tail = vm_first(t->cols);                                                                  \
        vf acc[R];                                                                                             \
        _Pragma("GCC unroll 32") for (int r = 0; r < R; r++) acc[r] = VF_(mk_init)(t, r, 0, FULL, tail);       \
        const int64_t as = t->as, aj = t->aj, bj = t->bj, bt = t->btap;                                        \
        for (int s = 0; s < t->nseg; s++) {                                                                    \
            const float *pa = t->a + s * t->aseg, *pb = t->b + s * t->bseg;                                    \
            for (int j = 0; j < t->nj; j++) {                                                                  \
                const vf w0 = FULL ? vf_load(pb) : vf_loadm(tail, pb);                                         \
                const vf w1 = FULL ? vf_load(pb + bt) : vf_loadm(tail, pb + bt);                               \
                const vf w2 = FULL ? vf_load(pb + 2 * bt) : vf_loadm(tail, pb + 2 * bt);                       \
                const float *q = pa;                                                                           \
                _Pragma("GCC unroll 32") for (int p = 0; p < R + 2; p++) {                                     \
                    const vf xv = vf_bcast(q);                                                                 \
                    if (p < R) acc[p] = vf_fmadd(xv, w0, acc[p]);                                              \
                    if (p >= 1 && p <= R) acc[p - 1] = vf_fmadd(xv, w1, acc[p - 1]);                           \
                    if (p >= 2) acc[p - 2] = vf_fmadd(xv, w2, acc[p - 2]);                                     \
                    q += as;                                                                                   \
                }                                                                                              \
                pa += aj;                                                                                      \
                pb += bj;                                                                                      \
            }                                                                                                  \
        }                                                                                                      \
        vf accv[R][1];                                                                                         \
        _Pragma("GCC unroll 32") for (int r = 0; r < R; r++) accv[r][0] = acc[r];                              \
        MK_EPILOGUE(t, R, 1, FULL, accv, tail);                                                                \
    }

/* fl_simd_dw3 for CT channels and one vector of columns: 3*CT accumulators, the last three gy vectors (g0 =
 * gy[q], g1 = gy[q-1], g2 = gy[q-2]) and one broadcast of x[q] per channel, which serves kw = 0, 1, 2 (j = q,
 * q-1, q-2). The first two and last two q of a segment have fewer valid j. */
#define MKD_DEFINE(CT, FULL)                                                                                   \
    VF_TARGET static void VF_CAT(mkd3_##CT##_##FULL, FL_VEC_BITS)(                                             \
        const float *x, int64_t xj, int64_t xseg, const float *gy, int64_t gyj, int64_t gyseg, int nseg, int nj, \
        vmask tail, float *dw, int64_t dw_kw, int64_t ldc) {                                                   \
        vf acc[3][CT];                                                                                         \
        _Pragma("GCC unroll 3") for (int k = 0; k < 3; k++)                                                    \
            _Pragma("GCC unroll 8") for (int c = 0; c < CT; c++)                                               \
                acc[k][c] = vf_loadf(FULL, tail, dw + k * dw_kw + c * ldc);                                    \
        for (int s = 0; s < nseg; s++) {                                                                       \
            const float *pa = x + s * xseg, *pb = gy + s * gyseg;                                              \
            vf g0 = vf_zero(), g1 = g0, g2 = g0;                                                               \
            for (int q = 0; q < nj + 2; q++, pa += xj) {                                                       \
                g2 = g1;                                                                                       \
                g1 = g0;                                                                                       \
                if (q < nj) g0 = FULL ? vf_load(pb + q * gyj) : vf_loadm(tail, pb + q * gyj);                  \
                if (q >= 2 && q < nj) {                                                                        \
                    _Pragma("GCC unroll 8") for (int c = 0; c < CT; c++) {                                     \
                        const vf xv = vf_bcast(pa + c);                                                        \
                        acc[0][c] = vf_fmadd(xv, g0, acc[0][c]);                                               \
                        acc[1][c] = vf_fmadd(xv, g1, acc[1][c]);                                               \
                        acc[2][c] = vf_fmadd(xv, g2, acc[2][c]);                                               \
                    }                                                                                          \
                } else {                                                                                       \
                    _Pragma("GCC unroll 8") for (int c = 0; c < CT; c++) {                                     \
                        const vf xv = vf_bcast(pa + c);                                                        \
                        if (q < nj) acc[0][c] = vf_fmadd(xv, g0, acc[0][c]);                                   \
                        if (q >= 1 && q - 1 < nj) acc[1][c] = vf_fmadd(xv, g1, acc[1][c]);                     \
                        if (q >= 2 && q - 2 < nj) acc[2][c] = vf_fmadd(xv, g2, acc[2][c]);                     \
                    }                                                                                          \
                }                                                                                              \
            }                                                                                                  \
        }                                                                                                      \
        _Pragma("GCC unroll 3") for (int k = 0; k < 3; k++)                                                    \
            _Pragma("GCC unroll 8") for (int c = 0; c < CT; c++)                                               \
                vf_storef(FULL, dw + k * dw_kw + c * ldc, tail, acc[k][c]);                                    \
    }
