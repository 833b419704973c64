/*
 * sift.c — fl_sift_detect_and_compute on the CPU: the image made gray and checked, the scale space
 * (sift_pyramid.c), the DoG extrema of each octave's inner layers, their refinement to sub-pixel and
 * sub-layer position with the contrast and edge tests, one keypoint per orientation peak, OpenCV's order
 * and duplicate removal, nfeatures, and the 4 x 4 x 8 descriptors. Every formula, constant and rounding
 * is OpenCV 4.x's float build of cv::SIFT (the 3 x 3 solve is its LU with partial pivoting, angles its
 * fastAtan2, roundings cvRound's half-to-even), so that a user moving from OpenCV gets the same features.
 *
 * Threads: extrema are searched per (layer, row) and refined per candidate, descriptors per keypoint,
 * all under OpenMP; the result does not depend on the thread count (candidates are sorted before the
 * final order is made).
 */
#include "sift_internal.h"

#include "backend/cpu/cpu_fastmath.h"
#include "core/error.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void fl_keypoints_free(fl_keypoints *k) {
    if (!k) return;
    free(k->data);
    k->data = NULL;
    k->n = 0;
}

/* ------------------------------------------------------------------ input */

/* the image as gray floats, checked: shape, size, finite values */
static fl_status gray_image(const fl_tensor *t, float **out, int *w, int *h) {
    if (!t) return fl_error(FL_ERR_INVALID_ARG, "sift: the image is NULL");
    const int nd = fl_tensor_ndim(t);
    const fl_dtype dt = fl_tensor_dtype(t);
    char shape[96];
    if ((nd != 2 && nd != 3) || (nd == 3 && (fl_tensor_dim(t, 2) < 1 || fl_tensor_dim(t, 2) > 4)))
        return fl_error(FL_ERR_SHAPE, "sift: the image has shape %s; expected (height, width) or (height, width, channels) "
                        "with 1 to 4 channels", fl_tensor_shape_str(t, shape, sizeof shape));
    if (dt != FL_FLOAT32 && dt != FL_UINT8)
        return fl_error(FL_ERR_INVALID_ARG, "sift: the image is %s; expected float32 (0-255) or uint8",
                        dt == FL_INT32 ? "int32" : "of an unknown type");
    const int64_t H = fl_tensor_dim(t, 0), W = fl_tensor_dim(t, 1), C = nd == 3 ? fl_tensor_dim(t, 2) : 1;
    if (H * W > FL_SIFT_MAX_PIXELS || H > INT_MAX / 2 || W > INT_MAX / 2)
        return fl_error(FL_ERR_INVALID_ARG, "sift: the image is %lldx%lld, %lld pixels; flynn's SIFT takes at most %lld",
                        (long long)W, (long long)H, (long long)(H * W), (long long)FL_SIFT_MAX_PIXELS);
    float *g = malloc((size_t)(H * W > 0 ? H * W : 1) * sizeof(float));
    if (!g) return fl_error(FL_ERR_NOMEM, "sift: no memory for a %lldx%lld image", (long long)W, (long long)H);
    const void *d = fl_tensor_cdata(t);
    for (int64_t i = 0; i < H * W; i++) {
        float v[4];
        for (int c = 0; c < C; c++)
            v[c] = dt == FL_UINT8 ? (float)((const uint8_t *)d)[i * C + c] : ((const float *)d)[i * C + c];
        for (int c = 0; c < C; c++)
            if (!isfinite(v[c])) {
                free(g);
                return fl_error(FL_ERR_INVALID_ARG, "sift: the image has %s at row %lld, column %lld%s",
                                isnan(v[c]) ? "NaN" : "an infinity", (long long)(i / W), (long long)(i % W),
                                C > 1 ? " (a channel of it)" : "");
            }
        g[i] = C >= 3 ? v[0] * 0.299f + v[1] * 0.587f + v[2] * 0.114f : v[0];
    }
    *out = g, *w = (int)W, *h = (int)H;
    return FL_OK;
}

static fl_status check_args(const fl_sift_args *a, sift_params *p) {
    *p = (sift_params){.nfeatures = a->nfeatures,
                       .layers = a->n_octave_layers ? a->n_octave_layers : 3,
                       .contrast = a->contrast_threshold != 0 ? a->contrast_threshold : 0.04f,
                       .edge = a->edge_threshold != 0 ? a->edge_threshold : 10.f,
                       .sigma = a->sigma != 0 ? a->sigma : 1.6f,
                       .upscale = !a->no_upscale};
    if (p->nfeatures < 0) return fl_error(FL_ERR_INVALID_ARG, "sift: nfeatures is %d; expected 0 (all) or more", p->nfeatures);
    if (p->layers < 1 || p->layers > FL_SIFT_MAX_LAYERS)
        return fl_error(FL_ERR_INVALID_ARG, "sift: n_octave_layers is %d; expected 1 to %d", p->layers, FL_SIFT_MAX_LAYERS);
    if (!(p->contrast > 0) || !isfinite(p->contrast))
        return fl_error(FL_ERR_INVALID_ARG, "sift: contrast_threshold is %g; expected a positive number", p->contrast);
    if (!(p->edge > 0) || !isfinite(p->edge))
        return fl_error(FL_ERR_INVALID_ARG, "sift: edge_threshold is %g; expected a positive number", p->edge);
    if (!(p->sigma > 0) || !(p->sigma <= 16))
        return fl_error(FL_ERR_INVALID_ARG, "sift: sigma is %g; expected more than 0 and at most 16", p->sigma);
    if (a->descriptor_type != FL_FLOAT32 && a->descriptor_type != FL_UINT8)
        return fl_error(FL_ERR_INVALID_ARG, "sift: descriptor_type must be FL_FLOAT32 or FL_UINT8");
    return FL_OK;
}

/* -------------------------------------------------------------- detection */

typedef struct cand {
    int o, layer, r, c;
} cand;

typedef struct kp_list {
    fl_keypoint *k;
    int64_t n, cap;
} kp_list;

/* room for one more element in a growing array (doubling); false without memory */
static bool grow(void **data, int64_t n, int64_t *cap, size_t elem) {
    if (n < *cap) return true;
    const int64_t c = *cap ? 2 * *cap : 64;
    void *p = realloc(*data, (size_t)c * elem);
    if (!p) return false;
    *data = p, *cap = c;
    return true;
}

static bool push_kp(kp_list *l, fl_keypoint k) {
    if (!grow((void **)&l->k, l->n, &l->cap, sizeof k)) return false;
    l->k[l->n++] = k;
    return true;
}

/* flag[x] for x in [x0, x1): the DoG value beyond the threshold and an extremum of its 26 neighbours, as
 * OpenCV tests it (>= all of them for a positive value, <= for a negative), i.e. the maximum (minimum) of
 * the 27 values: first each column's over the three layers' three rows (p: the layer below, c: this one,
 * n: the one above, each rows y - 1, y, y + 1; into cmx, cmn from x0 - 1 to x1 + 1), then over three
 * columns; lanes over the pixels */
SIFT_CLONES static void row_extrema(const float *const *restrict p, const float *const *restrict c,
                                    const float *const *restrict n, int x0, int x1, float thr, float *restrict cmx,
                                    float *restrict cmn, uint8_t *restrict flag) {
#define SIFT_MAX_(a, b) ((a) > (b) ? (a) : (b))
#define SIFT_MIN_(a, b) ((a) < (b) ? (a) : (b))
    const float *restrict p0 = p[0], *restrict p1 = p[1], *restrict p2 = p[2], *restrict c0 = c[0], *restrict c1 = c[1],
                          *restrict c2 = c[2], *restrict n0 = n[0], *restrict n1 = n[1], *restrict n2 = n[2];
SIFT_SIMD
    for (int x = x0 - 1; x < x1 + 1; x++) {
        const float a0 = p0[x], a1 = p1[x], a2 = p2[x], b0 = c0[x], b1 = c1[x], b2 = c2[x], e0 = n0[x], e1 = n1[x],
                    e2 = n2[x];
        cmx[x] = SIFT_MAX_(SIFT_MAX_(SIFT_MAX_(SIFT_MAX_(a0, a1), SIFT_MAX_(a2, b0)), SIFT_MAX_(SIFT_MAX_(b1, b2), SIFT_MAX_(e0, e1))), e2);
        cmn[x] = SIFT_MIN_(SIFT_MIN_(SIFT_MIN_(SIFT_MIN_(a0, a1), SIFT_MIN_(a2, b0)), SIFT_MIN_(SIFT_MIN_(b1, b2), SIFT_MIN_(e0, e1))), e2);
    }
SIFT_SIMD
    for (int x = x0; x < x1; x++) {
        const float v = c1[x], mx = SIFT_MAX_(SIFT_MAX_(cmx[x - 1], cmx[x]), cmx[x + 1]),
                    mn = SIFT_MIN_(SIFT_MIN_(cmn[x - 1], cmn[x]), cmn[x + 1]);
        flag[x] = (uint8_t)(((v > thr) & (v >= mx)) | ((v < -thr) & (v <= mn)));
    }
#undef SIFT_MAX_
#undef SIFT_MIN_
}

SIFT_CLONES static void dog_row(const float *restrict hi, const float *restrict lo, float *restrict d, int w) {
    for (int x = 0; x < w; x++) d[x] = hi[x] - lo[x];
}

typedef struct cand_list {
    cand *c;
    int64_t n, cap;
} cand_list;

static bool push_cand(cand_list *l, cand c) {
    if (!grow((void **)&l->c, l->n, &l->cap, sizeof c)) return false;
    l->c[l->n++] = c;
    return true;
}

/* the candidates of rows [r0, r1) of octave o: the DoG rows made from the Gaussian layers as the scan
 * goes (a ring of three rows per DoG layer; the DoG images are never stored) */
static bool scan_rows(const sift_octave *oc, int o, int L, int r0, int r1, float threshold, float *ring, float *cm,
                      uint8_t *flag, cand_list *out) {
    const int w = oc->w;
#define SIFT_RING_(layer, y) (ring + ((int64_t)(layer) * 3 + ((y) % 3)) * w)
    for (int y = r0 - 1; y <= r0; y++)
        for (int l = 0; l < L + 2; l++)
            dog_row(oc->gauss[l + 1] + (int64_t)y * w, oc->gauss[l] + (int64_t)y * w, SIFT_RING_(l, y), w);
    for (int r = r0; r < r1; r++) {
        for (int l = 0; l < L + 2; l++)
            dog_row(oc->gauss[l + 1] + (int64_t)(r + 1) * w, oc->gauss[l] + (int64_t)(r + 1) * w, SIFT_RING_(l, r + 1), w);
        for (int layer = 1; layer <= L; layer++) {
            const float *p[3] = {SIFT_RING_(layer - 1, r - 1), SIFT_RING_(layer - 1, r), SIFT_RING_(layer - 1, r + 1)};
            const float *c[3] = {SIFT_RING_(layer, r - 1), SIFT_RING_(layer, r), SIFT_RING_(layer, r + 1)};
            const float *n[3] = {SIFT_RING_(layer + 1, r - 1), SIFT_RING_(layer + 1, r), SIFT_RING_(layer + 1, r + 1)};
            row_extrema(p, c, n, SIFT_IMG_BORDER, w - SIFT_IMG_BORDER, threshold, cm, cm + w, flag);
            for (int x = SIFT_IMG_BORDER; x < w - SIFT_IMG_BORDER; x++)
                if (flag[x] && !push_cand(out, (cand){o, layer, r, x})) return false;
        }
    }
#undef SIFT_RING_
    return true;
}

/* the candidates of one octave, in chunks of rows over the threads, gathered in the chunks' order */
static fl_status find_candidates(const sift_pyramid *pyr, int o, float threshold, cand **out, int64_t *n_out) {
    const sift_octave *oc = &pyr->oct[o];
    const int L = pyr->layers, w = oc->w, rows = oc->h - 2 * SIFT_IMG_BORDER;
    *out = NULL, *n_out = 0;
    if (rows <= 0 || w <= 2 * SIFT_IMG_BORDER) return FL_OK;
    const int chunks = rows < 16 * omp_get_max_threads() ? rows : 16 * omp_get_max_threads();
    cand_list *lists = calloc((size_t)chunks, sizeof(cand_list));
    int failed = !lists;
    if (lists) {
#pragma omp parallel reduction(| : failed)
        {
            float *ring = malloc(((size_t)(L + 2) * 3 + 2) * (size_t)w * sizeof(float));
            uint8_t *flag = malloc((size_t)w);
            failed |= !ring || !flag;
#pragma omp for schedule(dynamic, 1)
            for (int k = 0; k < chunks; k++) {
                const int r0 = SIFT_IMG_BORDER + (int)((int64_t)rows * k / chunks),
                          r1 = SIFT_IMG_BORDER + (int)((int64_t)rows * (k + 1) / chunks);
                if (ring && flag && !scan_rows(oc, o, L, r0, r1, threshold, ring, ring + (size_t)(L + 2) * 3 * w, flag,
                                               &lists[k]))
                    failed = 1;
            }
            free(ring);
            free(flag);
        }
    }
    int64_t total = 0;
    for (int k = 0; lists && k < chunks; k++) total += lists[k].n;
    if (!failed && total && !(*out = malloc((size_t)total * sizeof(cand)))) failed = 1;
    if (!failed) {
        for (int k = 0; k < chunks; k++) {
            if (lists[k].n) memcpy(*out + *n_out, lists[k].c, (size_t)lists[k].n * sizeof(cand));
            *n_out += lists[k].n;
        }
    }
    for (int k = 0; lists && k < chunks; k++) free(lists[k].c);
    free(lists);
    return failed ? fl_error(FL_ERR_NOMEM, "sift: no memory for octave %d's candidates", o) : FL_OK;
}

/* OpenCV's Matx33f::solve(DECOMP_LU): Gaussian elimination with partial pivoting in float; false (and
 * x = 0, as OpenCV returns) for a pivot below 10 FLT_EPSILON */
static bool solve3(float A[3][3], float b[3], float x[3]) {
    for (int i = 0; i < 3; i++) {
        int k = i;
        for (int j = i + 1; j < 3; j++)
            if (fabsf(A[j][i]) > fabsf(A[k][i])) k = j;
        if (fabsf(A[k][i]) < FLT_EPSILON * 10) {
            x[0] = x[1] = x[2] = 0;
            return false;
        }
        if (k != i) {
            for (int j = i; j < 3; j++) {
                const float t = A[i][j];
                A[i][j] = A[k][j], A[k][j] = t;
            }
            const float t = b[i];
            b[i] = b[k], b[k] = t;
        }
        const float d = -1 / A[i][i];
        for (int j = i + 1; j < 3; j++) {
            const float alpha = A[j][i] * d;
            for (int m = i + 1; m < 3; m++) A[j][m] += alpha * A[i][m];
            b[j] += alpha * b[i];
        }
    }
    for (int i = 2; i >= 0; i--) {
        float s = b[i];
        for (int m = i + 1; m < 3; m++) s -= A[i][m] * b[m];
        b[i] = s / A[i][i];
    }
    x[0] = b[0], x[1] = b[1], x[2] = b[2];
    return true;
}

#define AT(img, y, x) ((img)[(int64_t)(y) * w + (x)])

/* the DoG's 3 x 3 x 3 values around (layer, r, c), from the Gaussian layers: D[s][1 + dy][1 + dx] is
 * layer - 1 + s's value at (r + dy, c + dx) */
static void dog_cube(const sift_octave *oc, int layer, int r, int c, float D[3][3][3]) {
    const int w = oc->w;
    for (int s = 0; s < 3; s++) {
        const float *lo = oc->gauss[layer - 1 + s], *hi = oc->gauss[layer + s];
        for (int dy = 0; dy < 3; dy++)
            for (int dx = 0; dx < 3; dx++) D[s][dy][dx] = AT(hi, r - 1 + dy, c - 1 + dx) - AT(lo, r - 1 + dy, c - 1 + dx);
    }
}
#define IMG(dy, dx) D[1][1 + (dy)][1 + (dx)]
#define PRV(dy, dx) D[0][1 + (dy)][1 + (dx)]
#define NXT(dy, dx) D[2][1 + (dy)][1 + (dx)]

/* Lowe's section 4: up to 5 Newton steps to the extremum of the DoG's quadratic, then the contrast test
 * and the edge test (trace^2 / det of the 2-D Hessian below (r + 1)^2 / r). Fills the keypoint's position
 * (octave pixels), size, octave code and response; false when rejected. */
static bool refine(const sift_pyramid *pyr, const sift_params *p, cand *cd, fl_keypoint *kp) {
    const sift_octave *oc = &pyr->oct[cd->o];
    const int w = oc->w, h = oc->h, L = p->layers;
    const float img_scale = 1.f / 255, deriv_scale = img_scale * 0.5f, second_deriv_scale = img_scale,
                cross_deriv_scale = img_scale * 0.25f;
    float xi = 0, xr = 0, xc = 0;
    int r = cd->r, c = cd->c, layer = cd->layer, i = 0;
    for (; i < SIFT_MAX_INTERP_STEPS; i++) {
        float D[3][3][3];
        dog_cube(oc, layer, r, c, D);
        float dD[3] = {(IMG(0, 1) - IMG(0, -1)) * deriv_scale, (IMG(1, 0) - IMG(-1, 0)) * deriv_scale,
                       (NXT(0, 0) - PRV(0, 0)) * deriv_scale};
        const float v2 = IMG(0, 0) * 2;
        const float dxx = (IMG(0, 1) + IMG(0, -1) - v2) * second_deriv_scale;
        const float dyy = (IMG(1, 0) + IMG(-1, 0) - v2) * second_deriv_scale;
        const float dss = (NXT(0, 0) + PRV(0, 0) - v2) * second_deriv_scale;
        const float dxy = (IMG(1, 1) - IMG(1, -1) - IMG(-1, 1) + IMG(-1, -1)) * cross_deriv_scale;
        const float dxs = (NXT(0, 1) - NXT(0, -1) - PRV(0, 1) + PRV(0, -1)) * cross_deriv_scale;
        const float dys = (NXT(1, 0) - NXT(-1, 0) - PRV(1, 0) + PRV(-1, 0)) * cross_deriv_scale;
        float H[3][3] = {{dxx, dxy, dxs}, {dxy, dyy, dys}, {dxs, dys, dss}}, X[3];
        solve3(H, dD, X);
        xi = -X[2], xr = -X[1], xc = -X[0];
        if (fabsf(xi) < 0.5f && fabsf(xr) < 0.5f && fabsf(xc) < 0.5f) break;
        if (fabsf(xi) > (float)(INT_MAX / 3) || fabsf(xr) > (float)(INT_MAX / 3) || fabsf(xc) > (float)(INT_MAX / 3))
            return false;
        c += (int)lrintf(xc);
        r += (int)lrintf(xr);
        layer += (int)lrintf(xi);
        if (layer < 1 || layer > L || c < SIFT_IMG_BORDER || c >= w - SIFT_IMG_BORDER || r < SIFT_IMG_BORDER ||
            r >= h - SIFT_IMG_BORDER)
            return false;
    }
    if (i >= SIFT_MAX_INTERP_STEPS) return false;
    float D[3][3][3];
    dog_cube(oc, layer, r, c, D);
    const float dD[3] = {(IMG(0, 1) - IMG(0, -1)) * deriv_scale, (IMG(1, 0) - IMG(-1, 0)) * deriv_scale,
                         (NXT(0, 0) - PRV(0, 0)) * deriv_scale};
    const float t = dD[0] * xc + dD[1] * xr + dD[2] * xi;
    const float contr = IMG(0, 0) * img_scale + t * 0.5f;
    if (fabsf(contr) * (float)L < p->contrast) return false;
    const float v2 = IMG(0, 0) * 2.f;
    const float dxx = (IMG(0, 1) + IMG(0, -1) - v2) * second_deriv_scale;
    const float dyy = (IMG(1, 0) + IMG(-1, 0) - v2) * second_deriv_scale;
    const float dxy = (IMG(1, 1) - IMG(1, -1) - IMG(-1, 1) + IMG(-1, -1)) * cross_deriv_scale;
    const float tr = dxx + dyy, det = dxx * dyy - dxy * dxy;
    if (det <= 0 || tr * tr * p->edge >= (p->edge + 1) * (p->edge + 1) * det) return false;
    const float scale = (float)(1 << cd->o);
    kp->x = ((float)c + xc) * scale;
    kp->y = ((float)r + xr) * scale;
    kp->octave = cd->o + (layer << 8) + ((int)lrint((xi + 0.5) * 255) << 16);
    kp->size = p->sigma * powf(2.f, ((float)layer + xi) / (float)L) * scale * 2;
    kp->response = fabsf(contr);
    cd->r = r, cd->c = c, cd->layer = layer;
    return true;
}

/* a scratch area per thread, grown on demand */
typedef struct scratch {
    float *f;
    size_t cap;
} scratch;
static float *scratch_get(scratch *s, size_t n) {
    if (n > s->cap) {
        float *p = realloc(s->f, n * sizeof(float));
        if (!p) return NULL;
        s->f = p, s->cap = n;
    }
    return s->f;
}

/* per sample: dx in o becomes the orientation (degrees), dy in m the magnitude, w the Gaussian weight e^w;
 * lanes over the samples */
SIFT_CLONES static void sample_terms(float *restrict o, float *restrict m, float *restrict w, int64_t k) {
SIFT_SIMD
    for (int64_t q = 0; q < k; q++) {
        const float dx = o[q], dy = m[q];
        o[q] = fl_sift_atan2_deg(dy, dx);
        m[q] = sqrtf(dx * dx + dy * dy);
        w[q] = fl_fast_exp(w[q]);
    }
}

/* the 36-bin gradient orientation histogram around (x, y), Gaussian-weighted and smoothed by
 * [1 4 6 4 1] / 16 as OpenCV's; returns its highest bin */
static float orientation_hist(const float *img, int w, int h, int px, int py, int radius, float sigma, float *hist,
                              scratch *s) {
    const int n = SIFT_ORI_HIST_BINS;
    const int64_t len = (int64_t)(2 * radius + 1) * (2 * radius + 1);
    float *buf = scratch_get(s, (size_t)len * 3);
    float temp[SIFT_ORI_HIST_BINS + 4] = {0}, *th = temp + 2;
    if (!buf) return -1;
    float *W = buf, *Ori = buf + len, *Mag = buf + 2 * len;
    const float expf_scale = -1.f / (2.f * sigma * sigma);
    int64_t k = 0;
    for (int i = -radius; i <= radius; i++) {
        const int y = py + i;
        if (y <= 0 || y >= h - 1) continue;
        for (int j = -radius; j <= radius; j++) {
            const int x = px + j;
            if (x <= 0 || x >= w - 1) continue;
            Ori[k] = AT(img, y, x + 1) - AT(img, y, x - 1); /* dx, dy: the orientation and magnitude below */
            Mag[k] = AT(img, y - 1, x) - AT(img, y + 1, x);
            W[k] = (float)(i * i + j * j) * expf_scale;
            k++;
        }
    }
    sample_terms(Ori, Mag, W, k);
    for (int64_t q = 0; q < k; q++) {
        int bin = (int)lrintf((n / 360.f) * Ori[q]);
        if (bin >= n) bin -= n;
        if (bin < 0) bin += n;
        th[bin] += W[q] * Mag[q];
    }
    th[-1] = th[n - 1], th[-2] = th[n - 2], th[n] = th[0], th[n + 1] = th[1];
    float mx = 0;
    for (int i = 0; i < n; i++) {
        hist[i] = (th[i - 2] + th[i + 2]) * (1.f / 16.f) + (th[i - 1] + th[i + 1]) * (4.f / 16.f) + th[i] * (6.f / 16.f);
        mx = i == 0 || hist[i] > mx ? hist[i] : mx;
    }
    return mx;
}

/* one keypoint per histogram peak at least 0.8 of the highest, its angle from the parabola through the
 * peak and its neighbours, in the input image's pixels */
static bool orient(const sift_pyramid *pyr, const cand *cd, fl_keypoint kp, kp_list *out, scratch *s) {
    const sift_octave *oc = &pyr->oct[cd->o];
    const int n = SIFT_ORI_HIST_BINS;
    float hist[SIFT_ORI_HIST_BINS];
    const float scl_octv = kp.size * 0.5f / (float)(1 << cd->o);
    const float omax = orientation_hist(oc->gauss[cd->layer], oc->w, oc->h, cd->c, cd->r,
                                        (int)lrintf(SIFT_ORI_RADIUS * scl_octv), SIFT_ORI_SIG_FCTR * scl_octv, hist, s);
    if (omax < 0) return false;
    const float mag_thr = omax * SIFT_ORI_PEAK_RATIO;
    if (pyr->first_octave < 0) { /* OpenCV rescales after the orientations: the same bits */
        kp.octave = (kp.octave & ~255) | ((kp.octave + pyr->first_octave) & 255);
        kp.x *= 0.5f, kp.y *= 0.5f, kp.size *= 0.5f;
    }
    for (int j = 0; j < n; j++) {
        const int l = j > 0 ? j - 1 : n - 1, r2 = j < n - 1 ? j + 1 : 0;
        if (hist[j] > hist[l] && hist[j] > hist[r2] && hist[j] >= mag_thr) {
            float bin = (float)j + 0.5f * (hist[l] - hist[r2]) / (hist[l] - 2 * hist[j] + hist[r2]);
            bin = bin < 0 ? (float)n + bin : bin >= (float)n ? bin - (float)n : bin;
            kp.angle = 360.f - (360.f / (float)n) * bin;
            if (fabsf(kp.angle - 360.f) < FLT_EPSILON) kp.angle = 0.f;
            if (!push_kp(out, kp)) return false;
        }
    }
    return true;
}

/* OpenCV's KeyPoint12_LessThan: x, y, then size descending, angle, response descending, octave
 * descending */
static int kp_cmp(const void *pa, const void *pb) {
    const fl_keypoint *a = pa, *b = pb;
    if (a->x != b->x) return a->x < b->x ? -1 : 1;
    if (a->y != b->y) return a->y < b->y ? -1 : 1;
    if (a->size != b->size) return a->size > b->size ? -1 : 1;
    if (a->angle != b->angle) return a->angle < b->angle ? -1 : 1;
    if (a->response != b->response) return a->response > b->response ? -1 : 1;
    if (a->octave != b->octave) return a->octave > b->octave ? -1 : 1;
    return 0;
}

static int resp_desc(const void *pa, const void *pb) {
    const float a = *(const float *)pa, b = *(const float *)pb;
    return a > b ? -1 : a < b ? 1 : 0;
}

/* sorted, duplicates (same x, y, size, angle) removed, and with nfeatures the best by response (all that
 * tie with the n-th kept, as KeyPointsFilter::retainBest) */
static fl_status order_and_select(kp_list *l, int nfeatures) {
    if (l->n > 1) qsort(l->k, (size_t)l->n, sizeof *l->k, kp_cmp);
    int64_t m = l->n ? 1 : 0;
    for (int64_t j = 1; j < l->n; j++) {
        const fl_keypoint *a = &l->k[m - 1], *b = &l->k[j];
        if (a->x != b->x || a->y != b->y || a->size != b->size || a->angle != b->angle) l->k[m++] = *b;
    }
    l->n = m;
    if (nfeatures > 0 && l->n > nfeatures) {
        float *r = malloc((size_t)l->n * sizeof(float));
        if (!r) return fl_error(FL_ERR_NOMEM, "sift: no memory to rank %lld keypoints", (long long)l->n);
        for (int64_t j = 0; j < l->n; j++) r[j] = l->k[j].response;
        qsort(r, (size_t)l->n, sizeof(float), resp_desc);
        const float thr = r[nfeatures - 1];
        free(r);
        m = 0;
        for (int64_t j = 0; j < l->n; j++)
            if (l->k[j].response >= thr) l->k[m++] = l->k[j];
        l->n = m;
    }
    return FL_OK;
}

/* ------------------------------------------------------------ descriptors */

/* The 4 x 4 x 8 histogram of gradients around the keypoint, rotated to its angle, each sample spread
 * trilinearly over rows, columns and orientations; clamped at 0.2 of its norm, renormalised and scaled
 * to whole numbers 0-255 (OpenCV's calcSIFTDescriptor). */
static bool describe(const float *img, int w, int h, float ptx, float pty, float ori, float scl, float *dst, scratch *s) {
    const int d = SIFT_DESCR_WIDTH, n = SIFT_DESCR_HIST_BINS;
    const int px = (int)lrintf(ptx), py = (int)lrintf(pty);
    float cos_t = cosf(ori * (float)(M_PI / 180)), sin_t = sinf(ori * (float)(M_PI / 180));
    const float bins_per_rad = (float)n / 360.f, exp_scale = -1.f / ((float)(d * d) * 0.5f);
    const float hist_width = SIFT_DESCR_SCL_FCTR * scl;
    int radius = (int)lrintf(hist_width * 1.4142135623730951f * (float)(d + 1) * 0.5f);
    const int diag = (int)sqrt((double)w * w + (double)h * h);
    if (radius > diag) radius = diag;
    cos_t /= hist_width, sin_t /= hist_width;
    const int64_t len = (int64_t)(2 * radius + 1) * (2 * radius + 1);
    float *buf = scratch_get(s, (size_t)len * 6);
    if (!buf) return false;
    float *X = buf, *Y = buf + len, *RB = buf + 2 * len, *CB = buf + 3 * len, *W = buf + 4 * len, *Ori = buf + 5 * len;
    float hist[(SIFT_DESCR_WIDTH + 2) * (SIFT_DESCR_WIDTH + 2) * (SIFT_DESCR_HIST_BINS + 2)] = {0};
    int64_t k = 0;
    for (int i = -radius; i <= radius; i++) {
        const int r = py + i;
        if (r <= 0 || r >= h - 1) continue;
        /* the columns where the rotated square can hold the sample (one wider each side than exact, the exact
         * test below): OpenCV visits the whole (2 radius + 1)^2, in the same order */
        double jlo = -radius, jhi = radius;
        const double lim_lo = -1 - 0.5 * d + 0.5, lim_hi = d - 0.5 * d + 0.5;
        const double ab[2][2] = {{cos_t, -(double)i * sin_t}, {sin_t, (double)i * cos_t}}; /* cbin, rbin = a j + b */
        for (int q = 0; q < 2; q++) {
            const double a = ab[q][0], b = ab[q][1];
            if (fabs(a) < 1e-9) {
                if (!(b > lim_lo - 1e-3 && b < lim_hi + 1e-3)) jlo = 1, jhi = 0;
                continue;
            }
            double e0 = (lim_lo - b) / a, e1 = (lim_hi - b) / a;
            if (e0 > e1) { const double t = e0; e0 = e1, e1 = t; }
            if (e0 - 1 > jlo) jlo = e0 - 1;
            if (e1 + 1 < jhi) jhi = e1 + 1;
        }
        int j0 = (int)floor(jlo), j1 = (int)ceil(jhi);
        if (j0 < -radius) j0 = -radius;
        if (j1 > radius) j1 = radius;
        if (j0 < 1 - px) j0 = 1 - px;
        if (j1 > w - 2 - px) j1 = w - 2 - px;
        const float *row = img + (int64_t)r * w, *up = row - w, *dn = row + w;
        for (int j = j0; j <= j1; j++) {
            const float c_rot = (float)j * cos_t - (float)i * sin_t, r_rot = (float)j * sin_t + (float)i * cos_t;
            const float rbin = r_rot + (float)d / 2 - 0.5f, cbin = c_rot + (float)d / 2 - 0.5f;
            const int c = px + j;
            if (rbin > -1 && rbin < d && cbin > -1 && cbin < d) {
                X[k] = row[c + 1] - row[c - 1];
                Y[k] = up[c] - dn[c];
                RB[k] = rbin, CB[k] = cbin;
                W[k] = (c_rot * c_rot + r_rot * r_rot) * exp_scale;
                k++;
            }
        }
    }
    for (int64_t q = 0; q < k; q++) Ori[q] = X[q];
    sample_terms(Ori, Y, W, k);
    float *Mag = Y;
    for (int64_t q = 0; q < k; q++) {
        float rbin = RB[q], cbin = CB[q], obin = (Ori[q] - ori) * bins_per_rad;
        const float mag = Mag[q] * W[q];
        const int r0 = (int)floorf(rbin), c0 = (int)floorf(cbin);
        int o0 = (int)floorf(obin);
        rbin -= (float)r0, cbin -= (float)c0, obin -= (float)o0;
        if (o0 < 0) o0 += n;
        if (o0 >= n) o0 -= n;
        const float v_r1 = mag * rbin, v_r0 = mag - v_r1;
        const float v_rc11 = v_r1 * cbin, v_rc10 = v_r1 - v_rc11, v_rc01 = v_r0 * cbin, v_rc00 = v_r0 - v_rc01;
        const float v_rco111 = v_rc11 * obin, v_rco110 = v_rc11 - v_rco111, v_rco101 = v_rc10 * obin,
                    v_rco100 = v_rc10 - v_rco101, v_rco011 = v_rc01 * obin, v_rco010 = v_rc01 - v_rco011,
                    v_rco001 = v_rc00 * obin, v_rco000 = v_rc00 - v_rco001;
        const int idx = ((r0 + 1) * (d + 2) + c0 + 1) * (n + 2) + o0;
        hist[idx] += v_rco000;
        hist[idx + 1] += v_rco001;
        hist[idx + (n + 2)] += v_rco010;
        hist[idx + (n + 3)] += v_rco011;
        hist[idx + (d + 2) * (n + 2)] += v_rco100;
        hist[idx + (d + 2) * (n + 2) + 1] += v_rco101;
        hist[idx + (d + 3) * (n + 2)] += v_rco110;
        hist[idx + (d + 3) * (n + 2) + 1] += v_rco111;
    }
    for (int i = 0; i < d; i++)
        for (int j = 0; j < d; j++) {
            const int idx = ((i + 1) * (d + 2) + (j + 1)) * (n + 2);
            hist[idx] += hist[idx + n];
            hist[idx + 1] += hist[idx + n + 1];
            for (int q = 0; q < n; q++) dst[(i * d + j) * n + q] = hist[idx + q];
        }
    float nrm2 = 0;
    for (int q = 0; q < SIFT_DESCR_LEN; q++) nrm2 += dst[q] * dst[q];
    const float thr = sqrtf(nrm2) * SIFT_DESCR_MAG_THR;
    nrm2 = 0;
    for (int q = 0; q < SIFT_DESCR_LEN; q++) {
        const float v = dst[q] < thr ? dst[q] : thr;
        dst[q] = v;
        nrm2 += v * v;
    }
    nrm2 = SIFT_INT_DESCR_FCTR / fmaxf(sqrtf(nrm2), FLT_EPSILON);
    for (int q = 0; q < SIFT_DESCR_LEN; q++) {
        const float v = rintf(dst[q] * nrm2); /* saturate_cast<uchar>: cvRound, then 0-255 */
        dst[q] = v < 0 ? 0 : v > 255 ? 255 : v;
    }
    return true;
}

static fl_status descriptors(const sift_pyramid *pyr, const kp_list *l, fl_dtype type, fl_tensor **out) {
    fl_tensor *t = fl_tensor_zeros(type, l->n, SIFT_DESCR_LEN);
    if (!t) return fl_last_status() ? fl_last_status() : fl_error(FL_ERR_NOMEM, "sift: no memory for descriptors");
    void *data = fl_tensor_data(t);
    int failed = 0;
#pragma omp parallel reduction(| : failed)
    {
        scratch s = {0};
#pragma omp for schedule(dynamic, 16)
        for (int64_t i = 0; i < l->n; i++) {
            const fl_keypoint *kp = &l->k[i];
            int octave = kp->octave & 255, layer = (kp->octave >> 8) & 255;
            octave = octave < 128 ? octave : (-128 | octave);
            const float scale = octave >= 0 ? 1.f / (float)(1 << octave) : (float)(1 << -octave);
            const sift_octave *oc = &pyr->oct[octave - pyr->first_octave];
            float angle = 360.f - kp->angle, d[SIFT_DESCR_LEN];
            if (fabsf(angle - 360.f) < FLT_EPSILON) angle = 0.f;
            if (!describe(oc->gauss[layer], oc->w, oc->h, kp->x * scale, kp->y * scale, angle, kp->size * scale * 0.5f, d,
                          &s)) {
                failed = 1;
                continue;
            }
            if (type == FL_UINT8)
                for (int q = 0; q < SIFT_DESCR_LEN; q++) ((uint8_t *)data)[i * SIFT_DESCR_LEN + q] = (uint8_t)d[q];
            else
                memcpy((float *)data + i * SIFT_DESCR_LEN, d, sizeof d);
        }
        free(s.f);
    }
    if (failed) {
        fl_tensor_free(t);
        return fl_error(FL_ERR_NOMEM, "sift: no memory for a descriptor's samples");
    }
    *out = t;
    return FL_OK;
}

/* ------------------------------------------------------------------ octaves */

/* the keypoints of octave o: the candidates, refined and oriented per candidate in parallel,
 * gathered in the candidates' order */
static fl_status octave_keypoints(sift_pyramid *pyr, const sift_params *p, int o, kp_list *all) {
    fl_status st;
    cand *cs = NULL;
    int64_t nc = 0;
    const float threshold = floorf(0.5f * p->contrast / (float)p->layers * 255.f);
    if ((st = find_candidates(pyr, o, threshold, &cs, &nc)) != FL_OK) return st;
    const int nt = omp_get_max_threads();
    kp_list *lists = calloc((size_t)nt, sizeof(kp_list));
    int failed = !lists;
    if (lists) {
#pragma omp parallel num_threads(nt) reduction(| : failed)
        {
            scratch s = {0};
            kp_list *mine = &lists[omp_get_thread_num()];
#pragma omp for schedule(dynamic, 32)
            for (int64_t i = 0; i < nc; i++) {
                fl_keypoint kp;
                cand c = cs[i];
                if (refine(pyr, p, &c, &kp) && !orient(pyr, &c, kp, mine, &s)) failed = 1;
            }
            free(s.f);
        }
        for (int t = 0; t < nt && !failed; t++)
            for (int64_t i = 0; i < lists[t].n; i++)
                if (!push_kp(all, lists[t].k[i])) failed = 1;
        for (int t = 0; t < nt; t++) free(lists[t].k);
    }
    free(lists);
    free(cs);
    return failed ? fl_error(FL_ERR_NOMEM, "sift: no memory for octave %d's keypoints", o) : FL_OK;
}

static fl_status sift_cpu(const float *gray, int w, int h, const sift_params *p, fl_dtype type, kp_list *l,
                          fl_tensor **desc) {
    sift_pyramid pyr = {0};
    float *base = NULL;
    int bw = 0, bh = 0;
    fl_status st = FL_OK;
    if (w > 0 && h > 0) {
        if ((st = fl_sift_base_image(gray, w, h, p, &base, &bw, &bh)) != FL_OK) return st;
        if ((st = fl_sift_build_pyramid(base, bw, bh, p, &pyr)) != FL_OK) return st;
    }
    for (int o = 0; o < pyr.n_octaves && st == FL_OK; o++) st = octave_keypoints(&pyr, p, o, l);
    if (st == FL_OK) st = order_and_select(l, p->nfeatures);
    if (st == FL_OK && desc) st = descriptors(&pyr, l, type, desc);
    fl_sift_pyramid_free(&pyr);
    return st;
}

fl_status fl_sift_detect_and_compute_(const fl_tensor *image, fl_keypoints *keypoints, fl_tensor **descriptors_out,
                                      fl_sift_args a) {
    if (!keypoints) return fl_error(FL_ERR_INVALID_ARG, "sift: keypoints is NULL");
    *keypoints = (fl_keypoints){0};
    if (descriptors_out) *descriptors_out = NULL;
    sift_params p;
    fl_status st = check_args(&a, &p);
    if (st != FL_OK) return st;
    if (a.device == FL_DEVICE_GPU || a.device == FL_DEVICE_OPENCL)
        return fl_error(FL_ERR_UNSUPPORTED, "sift: the %s SIFT kernels are not in this build yet; use the CPU (auto or cpu)",
                        a.device == FL_DEVICE_GPU ? "CUDA" : "OpenCL");
    if (a.why && a.why_len) snprintf(a.why, a.why_len, "CPU: SIFT runs on the CPU (%d threads)", omp_get_max_threads());
    float *gray = NULL;
    int w = 0, h = 0;
    if ((st = gray_image(image, &gray, &w, &h)) != FL_OK) return st;
    kp_list l = {0};
    fl_tensor *desc = NULL;
    st = sift_cpu(gray, w, h, &p, a.descriptor_type, &l, descriptors_out ? &desc : NULL);
    free(gray);
    if (st != FL_OK) {
        free(l.k);
        return st;
    }
    keypoints->n = l.n;
    keypoints->data = l.n ? l.k : (free(l.k), NULL);
    if (descriptors_out) *descriptors_out = desc;
    else fl_tensor_free(desc);
    return FL_OK;
}
