/*
 * cpu_winograd_vec.h — Winograd F(2x2, 3x3)'s transforms and its tile loop
 * (cpu_winograd.c) for one vector width, written once with cpu_vec.h's
 * names: cpu_winograd.c includes it with FL_VEC_BITS 512 and 256, after
 * defining wino_run_<bits> and wino_max_rows_<bits> (the micro-kernel of
 * that width). The transforms run VL channels per vector, each an addition,
 * subtraction or multiplication by 1/2 lane by lane, in the same order on
 * both widths: the same bits.
 *
 * WINO_FULL(left): a vector of `left` channels is whole, read and written
 * without a mask (AVX2's masked stores are slow on AMD); AVX-512 keeps its
 * masks, which cost nothing.
 */
#include "cpu_vec.h"

#undef WINO_FULL
#if FL_VEC_BITS == 512
#define WINO_FULL(left) ((void)(left), 0)
#else
#define WINO_FULL(left) ((left) >= VL)
#endif

/* V for one tile whose 4x4 patch starts at input (ih0, iw0) (may lie partly
 * outside the input: zeros there). v: V[0][tile][0]; planes vs floats apart.
 * pre (s, then t; C each): each input read as pre_act(x * s + t), the
 * normalisation's rounding (a multiply, then an add; the max with 0 and the
 * cap as its v > 0 ? v : 0 and v < hi ? v : hi, -0 and NaN to 0 alike);
 * the zeros outside stay zeros. */
VF_TARGET static inline __attribute__((always_inline)) void
VF_(in_tile_body)(const float *xs, int H, int W, int C, int ih0, int iw0, const int dh, const int dw, float *v, size_t vs,
             const float *pre, const int act) {
    const int inside = ih0 >= 0 && iw0 >= 0 && ih0 + 3 * dh < H && iw0 + 3 * dw < W;
    const vf zero = vf_zero(), hi = vf_set1(fl_cpu_relu_cap(act));
    for (int c0 = 0; c0 < C; c0 += VL) {
        const vmask m = vm_first(C - c0);
        const int f = WINO_FULL(C - c0);
        const vf ps = pre ? vf_loadf(f, m, pre + c0) : zero;
        const vf pt = pre ? vf_loadf(f, m, pre + C + c0) : zero;
        /* B^T d a column at a time, so that the 16 products of the first
         * step stay in registers with the column's four inputs */
        vf t[4][4];
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            vf x[4];
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) {
                const int ih = ih0 + i * dh, iw = iw0 + j * dw;
                if (inside || (ih >= 0 && ih < H && iw >= 0 && iw < W)) {
                    x[i] = vf_loadf(f, m, xs + ((size_t)ih * W + iw) * C + c0);
                    if (pre) {
                        x[i] = vf_add(vf_mul(x[i], ps), pt);
                        if (act != FL_ACT_LINEAR) x[i] = vf_min(vf_max(x[i], zero), hi);
                    }
                } else {
                    x[i] = zero;
                }
            }
            t[0][j] = vf_sub(x[0], x[2]);
            t[1][j] = vf_add(x[1], x[2]);
            t[2][j] = vf_sub(x[2], x[1]);
            t[3][j] = vf_sub(x[1], x[3]);
        }
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) { /* (B^T d) B */
            float *p = v + (size_t)(i * 4) * vs + c0;
            vf_storef(f, p, m, vf_sub(t[i][0], t[i][2]));
            vf_storef(f, p + vs, m, vf_add(t[i][1], t[i][2]));
            vf_storef(f, p + 2 * vs, m, vf_sub(t[i][2], t[i][1]));
            vf_storef(f, p + 3 * vs, m, vf_sub(t[i][1], t[i][3]));
        }
    }
}
VF_TARGET static void VF_(in_tile)(const float *xs, int H, int W, int C, int ih0, int iw0, float *v, size_t vs) {
    VF_(in_tile_body)(xs, H, W, C, ih0, iw0, 1, 1, v, vs, NULL, FL_ACT_LINEAR);
}
/* a dilated convolution's patch: its 4x4 pixels dh rows and dw columns apart; pre where given */
VF_TARGET static void VF_(in_tile_dil)(const float *xs, int H, int W, int C, int ih0, int iw0, int dh, int dw, float *v,
                                  size_t vs, const float *pre, int act) {
    if (!pre || act == FL_ACT_LINEAR) VF_(in_tile_body)(xs, H, W, C, ih0, iw0, dh, dw, v, vs, pre, FL_ACT_LINEAR);
    else VF_(in_tile_body)(xs, H, W, C, ih0, iw0, dh, dw, v, vs, pre, act);
}
VF_TARGET static void VF_(in_tile_pre)(const float *xs, int H, int W, int C, int ih0, int iw0, float *v, size_t vs,
                                  const float *pre, int act) {
    if (act == FL_ACT_LINEAR) VF_(in_tile_body)(xs, H, W, C, ih0, iw0, 1, 1, v, vs, pre, FL_ACT_LINEAR);
    else VF_(in_tile_body)(xs, H, W, C, ih0, iw0, 1, 1, v, vs, pre, act);
}

/* The output tile from M (mt: M[0][tile][0], planes ms floats apart): rows x
 * cols (1 or 2 each) pixels at y (rows yrow floats apart, columns ycol), plus the bias or what y
 * holds (accumulate), plus res (laid out as y; NULL: none), then the ReLU (leaky where slope > 0: max(o, slope o) + 0;
 * capped at relu_max: 6 for ReLU6,
 * INFINITY for ReLU), then zero where gate <= 0 (gate laid out as y; NULL:
 * none). */
VF_TARGET static void VF_(out_tile)(const float *mt, size_t ms, int OC, const float *b, int relu, float relu_max,
                               float slope, int accumulate, const float *gate, const float *res, float *y,
                               size_t yrow, size_t ycol, int rows, int cols) {
    const vf zero = vf_zero(), hi = vf_set1(relu_max), sv = vf_set1(slope);
    for (int o0 = 0; o0 < OC; o0 += VL) {
        const vmask k = vm_first(OC - o0);
        const int f = WINO_FULL(OC - o0);
        vf m[4][4], s[2][4], r[2][2];
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++) m[i][j] = vf_loadf(f, k, mt + (size_t)(i * 4 + j) * ms + o0);
        for (int j = 0; j < 4; j++) { /* A^T M */
            s[0][j] = vf_add(vf_add(m[0][j], m[1][j]), m[2][j]);
            s[1][j] = vf_sub(vf_sub(m[1][j], m[2][j]), m[3][j]);
        }
        for (int i = 0; i < 2; i++) { /* (A^T M) A */
            r[i][0] = vf_add(vf_add(s[i][0], s[i][1]), s[i][2]);
            r[i][1] = vf_sub(vf_sub(s[i][1], s[i][2]), s[i][3]);
        }
        const vf bv = b ? vf_loadf(f, k, b + o0) : zero;
        for (int i = 0; i < rows; i++)
            for (int j = 0; j < cols; j++) {
                float *p = y + i * yrow + (size_t)j * ycol + o0;
                vf o = accumulate ? vf_add(vf_loadf(f, k, p), r[i][j]) : vf_add(r[i][j], bv);
                if (res) o = vf_add(o, vf_loadf(f, k, res + i * yrow + (size_t)j * ycol + o0));
                if (relu && slope > 0.0f)
                    o = vf_min(vf_add(vf_max(o, vf_mul(o, sv)), zero), hi);
                else if (relu) o = vf_min(vf_max(o, zero), hi);
                if (gate)
                    o = vf_keep_gt0(vf_loadf(f, k, gate + i * yrow + (size_t)j * ycol + o0), o);
                vf_storef(f, p, k, o);
            }
    }
}

/* u[xi][c][oc] = (G g G^T)[xi] for g = w[:, :, c, oc] (w: [3][3][c][oc]),
 * VL (c, oc) pairs per vector: made anew by every call (the weights may
 * have changed), which at batch 1 must stay small against the convolution
 * (the scalar loop was a tenth of mnist_cnn's conv2 at batch 1). */
VF_TARGET static void VF_(wino_weights)(int C, int OC, const float *w, float *u) {
    const size_t plane = (size_t)C * OC;
    const vf h = vf_set1(0.5f);
    for (size_t co = 0; co < plane; co += VL) {
        const int left = (int)(plane - co < VL ? plane - co : VL);
        const vmask k = vm_first(left);
        const int f = WINO_FULL(left);
        vf g[3][3], t[4][3];
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++) g[i][j] = vf_loadf(f, k, w + (size_t)(i * 3 + j) * plane + co);
        for (int j = 0; j < 3; j++) { /* G g */
            const vf s02 = vf_add(g[0][j], g[2][j]);
            t[0][j] = g[0][j];
            t[1][j] = vf_mul(h, vf_add(s02, g[1][j]));
            t[2][j] = vf_mul(h, vf_sub(s02, g[1][j]));
            t[3][j] = g[2][j];
        }
        for (int i = 0; i < 4; i++) { /* (G g) G^T */
            const vf s02 = vf_add(t[i][0], t[i][2]);
            float *p = u + (size_t)(i * 4) * plane + co;
            vf_storef(f, p, k, t[i][0]);
            vf_storef(f, p + plane, k, vf_mul(h, vf_add(s02, t[i][1])));
            vf_storef(f, p + 2 * plane, k, vf_mul(h, vf_sub(s02, t[i][1])));
            vf_storef(f, p + 3 * plane, k, t[i][2]);
        }
    }
}

/* Output rows [oh0, oh1) of samples [0, ns) (in_sz and out_sz floats apart in xs and ys, gate as ys): their
 * tiles as one sequence, a sample's row by row, in blocks of the block size, so that samples with few tiles
 * (ResNet50's 2x2 and 4x4 stages at 64x64: one and four) share a block's GEMMs instead of each running its
 * own on a row or four. A tile's sums are the same whatever block it falls in. */
VF_TARGET static void VF_(wino_tiles)(const fl_conv_desc *d, const float *xs, size_t in_sz, const float *u,
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
                VF_(in_tile_dil)(xn, d->h, d->w, C, oh - d->pt, ow - d->pl, ph.dh, ph.dw, V + (size_t)i * C, vs, d->pre,
                            d->pre_act);
            else if (d->pre)
                VF_(in_tile_pre)(xn, d->h, d->w, C, oh - d->pt, ow - d->pl, V + (size_t)i * C, vs, d->pre, d->pre_act);
            else
                VF_(in_tile)(xn, d->h, d->w, C, oh - d->pt, ow - d->pl, V + (size_t)i * C, vs);
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
                const int rm = VF_(wino_max_rows)(t.cols), nt = fl_tiles(nb, rm);
                for (int k = 0; k < nt; k++) {
                    const int r0 = (int)fl_tile_start(nb, nt, k), r1 = (int)fl_tile_start(nb, nt, k + 1);
                    t.a = V + (size_t)xi * vs + (size_t)r0 * C;
                    t.c = M + (size_t)xi * ms + (size_t)r0 * OC + o0;
                    VF_(wino_run)(&t, r1 - r0);
                }
            }
        for (int i = 0; i < nb; i++) {
            const int sn = (t0 + i) / ts;
            int oh, ow, rows, cols;
            tile_of(&ph, (t0 + i) % ts, &oh, &ow, &rows, &cols);
            const size_t off = (size_t)sn * out_sz + (size_t)oh * yrow + (size_t)ow * OC;
            VF_(out_tile)(M + (size_t)i * OC, ms, OC, bias, relu, relu_max, relu ? d->slope : 0.0f, accumulate,
                     gate ? gate + off : NULL, res ? res + off : NULL, ys + off, yrow * ph.dh, (size_t)ph.dw * OC,
                     rows, cols);
        }
    }
    if (d->act != FL_ACT_LINEAR && !relu && !accumulate)
        for (int sn = 0; sn < ns; sn++)
            fl_cpu_bias_act_rows((int64_t)(oh1 - oh0) * OW, OC, NULL, d->act,
                                 ys + (size_t)sn * out_sz + (size_t)oh0 * yrow);
}

VF_TARGET static void VF_(wino_rows)(const fl_conv_desc *d, const float *xs, const float *u, const float *b, float *ys,
                                        int oh0, int oh1, int accumulate, const float *gate, float *scratch) {
    VF_(wino_tiles)(d, xs, 0, u, b, ys, 0, oh0, oh1, 1, accumulate, gate, NULL, scratch);
}

VF_TARGET static void VF_(wino_samples)(const fl_conv_desc *d, const float *x, const float *u, const float *b, float *y,
                                        const float *res, int ns, int accumulate, const float *gate, float *scratch) {
    VF_(wino_tiles)(d, x, (size_t)d->h * d->w * d->c, u, b, y, (size_t)d->oh * d->ow * d->oc, 0, d->oh, ns,
                    accumulate, gate, res, scratch);
}

