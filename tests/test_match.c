/*
 * test_match.c — descriptor matching, RANSAC geometry and .npz writing (flynn/sift.h, flynn.h):
 *   - fl_match_descriptors against a naive double loop (exact distances, ties to the lower index, the ratio
 *     test, the cross check) on random float descriptors across the GEMM's block edges, on descriptors
 *     whose norms dwarf their distances (the GEMM's rounding beyond its bound: the exact rescan), on tied
 *     duplicates, on uint8 descriptors (the same matches as their float copies), and its refusals;
 *   - fl_find_geometry: a known homography recovered from 70% noisy inliers and 30% outliers (under 0.5 px
 *     over the image), a fundamental matrix from a synthetic two-view scene (rank 2, small Sampson residuals
 *     on the true correspondences, the outliers flagged), the same seed giving the same model, and too few,
 *     collinear, out-of-range and non-finite inputs refused with messages naming them;
 *   - fl_save_npz: a round trip through fl_load_npz (and NumPy's np.load where /usr/bin/python3 has NumPy),
 *     its refusals, and the old file kept when a write fails.
 * Run as `test_match npz` it does only the .npz part (the Zip64 build, test_npz_zip64, runs it so).
 */
#define _XOPEN_SOURCE 700 /* mkdtemp, nftw */
#include "flynn/flynn.h"
#include "check.h"

#include <ftw.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[256];

#define CHECK_ERR(status, part) do { CHECK_MSG(fl_last_status() == (status), "status %s, expected %s: %s", \
    fl_status_name(fl_last_status()), fl_status_name(status), fl_last_error()); \
    CHECK_STR_CONTAINS(fl_last_error(), part); } while (0)

static float uniform(uint64_t seed, uint64_t stream, uint64_t i) { return fl_philox_uniform(seed, stream, i); }

static double gauss(uint64_t seed, uint64_t i) { /* Box-Muller */
    const double u = 1.0 - uniform(seed, 7, 2 * i), v = uniform(seed, 7, 2 * i + 1);
    return sqrt(-2 * log(u)) * cos(2 * M_PI * v);
}

/* ------------------------------------------------------------ matching */

/* The naive reference: knnMatch(k = 2) by a double loop, exact distances, the first minimum kept; per
 * query its nearest (j1, d1), the second distance d2, and whether it is also j1's nearest query. */
typedef struct naive_row { int32_t j1; double d1, d2; bool mutual; } naive_row;

static double dist2(const float *p, const float *q, int64_t d) {
    double s = 0;
    for (int64_t k = 0; k < d; k++) {
        const double t = (double)p[k] - q[k];
        s += t * t;
    }
    return s;
}

static naive_row *naive_table(const float *a, int64_t n, const float *b, int64_t m, int64_t d) {
    naive_row *r = calloc((size_t)(n ? n : 1), sizeof *r);
    double *col = malloc((size_t)(m ? m : 1) * sizeof *col);
    int64_t *coli = malloc((size_t)(m ? m : 1) * sizeof *coli);
    for (int64_t j = 0; j < m; j++) col[j] = INFINITY, coli[j] = -1;
    for (int64_t i = 0; i < n; i++) {
        r[i].d1 = r[i].d2 = INFINITY;
        r[i].j1 = -1;
        for (int64_t j = 0; j < m; j++) {
            const double s = dist2(a + i * d, b + j * d, d);
            if (r[i].j1 < 0 || s < r[i].d1) r[i].d2 = r[i].d1, r[i].d1 = s, r[i].j1 = (int32_t)j;
            else if (s < r[i].d2) r[i].d2 = s;
            if (coli[j] < 0 || s < col[j]) col[j] = s, coli[j] = i; /* i ascending: the first minimum */
        }
    }
    for (int64_t i = 0; i < n; i++) r[i].mutual = r[i].j1 >= 0 && coli[r[i].j1] == i;
    free(col);
    free(coli);
    return r;
}

static void naive_matches(const naive_row *r, int64_t n, int64_t m, float ratio, bool cross, fl_matches *out) {
    out->n = 0;
    out->data = malloc((size_t)(n ? n : 1) * sizeof(fl_match));
    if (ratio == 0) ratio = 0.75f;
    for (int64_t i = 0; i < n; i++) {
        const float f1 = (float)sqrt(r[i].d1), f2 = (float)sqrt(r[i].d2);
        if (!(ratio >= 1 || m < 2 || f1 < ratio * f2)) continue;
        if (cross && !r[i].mutual) continue;
        out->data[out->n++] = (fl_match){.query = (int32_t)i, .train = r[i].j1, .distance = f1};
    }
}

static bool same_matches(const fl_matches *x, const fl_matches *y, const char *what) {
    if (x->n != y->n) {
        fprintf(stderr, "%s: %lld matches, the reference has %lld\n", what, (long long)x->n, (long long)y->n);
        return false;
    }
    for (int64_t i = 0; i < x->n; i++)
        if (x->data[i].query != y->data[i].query || x->data[i].train != y->data[i].train ||
            x->data[i].distance != y->data[i].distance) {
            fprintf(stderr, "%s: match %lld is (%d, %d, %.9g), the reference's (%d, %d, %.9g)\n", what, (long long)i,
                    x->data[i].query, x->data[i].train, (double)x->data[i].distance, y->data[i].query,
                    y->data[i].train, (double)y->data[i].distance);
            return false;
        }
    return true;
}

/* b's first half: a's even rows, perturbed by `noise` (so the ratio test passes them), then random rows. */
static void make_sets(fl_tensor *ta, fl_tensor *tb, uint64_t seed, float scale, float offset, float noise) {
    float *a = fl_tensor_data(ta), *b = fl_tensor_data(tb);
    const int64_t n = fl_tensor_dim(ta, 0), m = fl_tensor_dim(tb, 0), d = fl_tensor_dim(ta, 1);
    for (int64_t k = 0; k < n * d; k++) a[k] = offset + scale * uniform(seed, 1, (uint64_t)k);
    for (int64_t k = 0; k < m * d; k++) b[k] = offset + scale * uniform(seed, 2, (uint64_t)k);
    for (int64_t j = 0; j < m / 2 && 2 * j < n; j++)
        for (int64_t k = 0; k < d; k++)
            b[j * d + k] = a[2 * j * d + k] + noise * scale * (uniform(seed, 3, (uint64_t)(j * d + k)) - 0.5f);
}

static void compare_all(const fl_tensor *ta, const fl_tensor *tb, const char *what) {
    const int64_t n = fl_tensor_dim(ta, 0), m = fl_tensor_dim(tb, 0), d = fl_tensor_dim(ta, 1);
    float *a = malloc((size_t)(n * d + 1) * sizeof(float)), *b = malloc((size_t)(m * d + 1) * sizeof(float));
    for (int64_t k = 0; k < n * d; k++)
        a[k] = fl_tensor_dtype(ta) == FL_UINT8 ? ((const uint8_t *)fl_tensor_cdata(ta))[k]
                                                : ((const float *)fl_tensor_cdata(ta))[k];
    for (int64_t k = 0; k < m * d; k++)
        b[k] = fl_tensor_dtype(tb) == FL_UINT8 ? ((const uint8_t *)fl_tensor_cdata(tb))[k]
                                                : ((const float *)fl_tensor_cdata(tb))[k];
    naive_row *table = naive_table(a, n, b, m, d);
    const float ratios[] = {0, 0.8f, 1};
    for (int r = 0; r < 3; r++)
        for (int cross = 0; cross < 2; cross++) {
            fl_matches got, want;
            char label[200];
            snprintf(label, sizeof label, "%s, ratio %g, cross_check %d", what, (double)ratios[r], cross);
            CHECK_MSG(fl_match_descriptors(ta, tb, &got, .ratio = ratios[r], .cross_check = cross) == FL_OK, "%s: %s",
                      label, fl_last_error());
            naive_matches(table, n, m, ratios[r], cross, &want);
            CHECK_MSG(same_matches(&got, &want, label), "%s", label);
            if (r == 0 && cross == 0) CHECK_MSG(want.n > 0, "%s: the reference found no match", label);
            for (int64_t i = 1; i < got.n; i++) CHECK(got.data[i - 1].query < got.data[i].query);
            fl_matches_free(&got);
            free(want.data);
        }
    free(table);
    free(a);
    free(b);
}

static void test_match_float(void) {
    /* across the block edges (256 queries, 1024 train descriptors a block) */
    fl_tensor *a = fl_tensor_zeros(FL_FLOAT32, 600, 128), *b = fl_tensor_zeros(FL_FLOAT32, 2100, 128);
    make_sets(a, b, 11, 1.f, 0.f, 0.2f);
    compare_all(a, b, "600 x 2100 random floats");
    /* norms of about 128 * 1000^2, distances of about 1: the GEMM's values are off by more than the gaps
     * between neighbours, so the exact rescan decides */
    make_sets(a, b, 12, 0.05f, 1000.f, 0.3f);
    compare_all(a, b, "large norms, small distances");
    fl_tensor_free(a);
    fl_tensor_free(b);

    /* ties: b holds a's row 3 twice (rows 5 and 9) and row 4 once; the lower index wins, and the ratio test
     * (d1 == d2) refuses a query whose nearest two are equal */
    a = fl_tensor_zeros(FL_FLOAT32, 8, 16);
    b = fl_tensor_zeros(FL_FLOAT32, 12, 16);
    make_sets(a, b, 13, 1.f, 0.f, 0.f);
    float *pa = fl_tensor_data(a), *pb = fl_tensor_data(b);
    memcpy(pb + 5 * 16, pa + 3 * 16, 16 * sizeof(float));
    memcpy(pb + 9 * 16, pa + 3 * 16, 16 * sizeof(float));
    compare_all(a, b, "tied duplicates");
    fl_matches got;
    CHECK(fl_match_descriptors(a, b, &got, .ratio = 1) == FL_OK);
    bool seen = false;
    for (int64_t i = 0; i < got.n; i++)
        if (got.data[i].query == 3) {
            seen = true;
            CHECK(got.data[i].train == 5 && got.data[i].distance == 0);
        }
    CHECK(seen);
    fl_matches_free(&got);
    CHECK(fl_match_descriptors(a, b, &got) == FL_OK);
    for (int64_t i = 0; i < got.n; i++) CHECK(got.data[i].query != 3);
    fl_matches_free(&got);
    fl_tensor_free(a);
    fl_tensor_free(b);

    /* one train descriptor: no second neighbour, every query passes the ratio test */
    a = fl_tensor_zeros(FL_FLOAT32, 5, 4);
    b = fl_tensor_zeros(FL_FLOAT32, 1, 4);
    make_sets(a, b, 14, 1.f, 0.f, 0.1f);
    memcpy(fl_tensor_data(b), (float *)fl_tensor_data(a) + 2 * 4, 4 * sizeof(float)); /* b[0] = a[2] */
    CHECK(fl_match_descriptors(a, b, &got) == FL_OK);
    CHECK(got.n == 5);
    for (int64_t i = 0; i < got.n; i++) CHECK(got.data[i].train == 0);
    fl_matches_free(&got);
    CHECK(fl_match_descriptors(a, b, &got, .cross_check = true) == FL_OK);
    CHECK(got.n == 1 && got.data[0].query == 2 && got.data[0].distance == 0);
    fl_matches_free(&got);
    compare_all(a, b, "one train descriptor");
    fl_tensor_free(a);
    fl_tensor_free(b);
}

static void test_match_uint8(void) {
    fl_tensor *a = fl_tensor_zeros(FL_UINT8, 300, 128), *b = fl_tensor_zeros(FL_UINT8, 1500, 128);
    fl_tensor *fa = fl_tensor_zeros(FL_FLOAT32, 300, 128), *fb = fl_tensor_zeros(FL_FLOAT32, 1500, 128);
    uint8_t *pa = fl_tensor_data(a), *pb = fl_tensor_data(b);
    for (int64_t k = 0; k < 300 * 128; k++) pa[k] = (uint8_t)(fl_philox_u32(21, 1, (uint64_t)k) & 0xff);
    for (int64_t k = 0; k < 1500 * 128; k++) pb[k] = (uint8_t)(fl_philox_u32(21, 2, (uint64_t)k) & 0xff);
    for (int64_t j = 0; j < 150; j++) /* a's even rows, a few values moved by one */
        for (int64_t k = 0; k < 128; k++) {
            const int v = pa[2 * j * 128 + k] + (fl_philox_u32(21, 3, (uint64_t)(j * 128 + k)) % 8 == 0 ? 1 : 0);
            pb[j * 128 + k] = (uint8_t)(v > 255 ? 254 : v);
        }
    for (int64_t k = 0; k < 300 * 128; k++) ((float *)fl_tensor_data(fa))[k] = pa[k];
    for (int64_t k = 0; k < 1500 * 128; k++) ((float *)fl_tensor_data(fb))[k] = pb[k];
    compare_all(a, b, "uint8");
    fl_matches mu, mf, mx;
    CHECK(fl_match_descriptors(a, b, &mu, .cross_check = true) == FL_OK);
    CHECK(fl_match_descriptors(fa, fb, &mf, .cross_check = true) == FL_OK);
    CHECK(fl_match_descriptors(a, fb, &mx, .cross_check = true) == FL_OK); /* mixed dtypes */
    CHECK(same_matches(&mu, &mf, "uint8 against float32"));
    CHECK(same_matches(&mx, &mf, "uint8 and float32 against float32"));
    CHECK(mu.n >= 140);
    for (int64_t i = 0; i < mu.n; i++) /* the distances are square roots of whole numbers */
        CHECK(fabs((double)mu.data[i].distance * mu.data[i].distance - rint((double)mu.data[i].distance *
                                                                            mu.data[i].distance)) < 1e-2);
    fl_matches_free(&mu);
    fl_matches_free(&mf);
    fl_matches_free(&mx);
    fl_tensor_free(a);
    fl_tensor_free(b);
    fl_tensor_free(fa);
    fl_tensor_free(fb);
}

static void test_match_refusals(void) {
    fl_tensor *a = fl_tensor_zeros(FL_FLOAT32, 4, 8), *b = fl_tensor_zeros(FL_FLOAT32, 5, 8);
    fl_tensor *c = fl_tensor_zeros(FL_FLOAT32, 5, 16), *v = fl_tensor_zeros(FL_FLOAT32, 8);
    fl_tensor *i32 = fl_tensor_zeros(FL_INT32, 5, 8), *e = fl_tensor_zeros(FL_FLOAT32, 0, 8);
    fl_matches m = {.n = 7, .data = NULL};
    CHECK(fl_match_descriptors(NULL, b, &m) == FL_ERR_INVALID_ARG);
    CHECK_ERR(FL_ERR_INVALID_ARG, "a is NULL");
    CHECK(m.n == 0 && m.data == NULL);
    CHECK(fl_match_descriptors(a, NULL, &m) == FL_ERR_INVALID_ARG);
    CHECK_ERR(FL_ERR_INVALID_ARG, "b is NULL");
    CHECK(fl_match_descriptors(a, b, NULL) == FL_ERR_INVALID_ARG);
    CHECK_ERR(FL_ERR_INVALID_ARG, "out is NULL");
    CHECK(fl_match_descriptors(v, b, &m) == FL_ERR_SHAPE);
    CHECK_ERR(FL_ERR_SHAPE, "a has shape (8,), expected 2-D");
    CHECK(fl_match_descriptors(a, c, &m) == FL_ERR_SHAPE);
    CHECK_ERR(FL_ERR_SHAPE, "a has 8 columns and b 16");
    CHECK(fl_match_descriptors(a, i32, &m) == FL_ERR_INVALID_ARG);
    CHECK_ERR(FL_ERR_INVALID_ARG, "b is int32, expected float32 or uint8");
    ((float *)fl_tensor_data(b))[2 * 8 + 3] = NAN;
    CHECK(fl_match_descriptors(a, b, &m) == FL_ERR_INVALID_ARG);
    CHECK_ERR(FL_ERR_INVALID_ARG, "b[2, 3] is NaN");
    ((float *)fl_tensor_data(b))[2 * 8 + 3] = -INFINITY;
    CHECK(fl_match_descriptors(b, a, &m) == FL_ERR_INVALID_ARG);
    CHECK_ERR(FL_ERR_INVALID_ARG, "a[2, 3] is -inf");
    CHECK(fl_match_descriptors(a, a, &m, .ratio = -0.5f) == FL_ERR_INVALID_ARG);
    CHECK_ERR(FL_ERR_INVALID_ARG, "ratio -0.5");
    CHECK(m.n == 0 && m.data == NULL);
    /* empty sets: no matches, no error */
    CHECK(fl_match_descriptors(e, a, &m, .cross_check = true) == FL_OK && m.n == 0 && m.data == NULL);
    CHECK(fl_match_descriptors(a, e, &m) == FL_OK && m.n == 0 && m.data == NULL);
    fl_matches_free(&m);
    fl_matches_free(NULL);
    fl_tensor_free(a);
    fl_tensor_free(b);
    fl_tensor_free(c);
    fl_tensor_free(v);
    fl_tensor_free(i32);
    fl_tensor_free(e);
}

/* ------------------------------------------------------------ geometry */

static void apply_h(const double H[9], double x, double y, double *u, double *v) {
    const double w = H[6] * x + H[7] * y + H[8];
    *u = (H[0] * x + H[1] * y + H[2]) / w;
    *v = (H[3] * x + H[4] * y + H[5]) / w;
}

/* n keypoints each in a and b, matched i <-> i. */
static void make_kp(fl_keypoints *a, fl_keypoints *b, fl_matches *m, int n) {
    a->n = b->n = m->n = n;
    a->data = calloc((size_t)n, sizeof(fl_keypoint));
    b->data = calloc((size_t)n, sizeof(fl_keypoint));
    m->data = calloc((size_t)n, sizeof(fl_match));
    for (int i = 0; i < n; i++) m->data[i] = (fl_match){.query = i, .train = i, .distance = 1};
}

static void free_kp(fl_keypoints *a, fl_keypoints *b, fl_matches *m) {
    fl_keypoints_free(a);
    fl_keypoints_free(b);
    fl_matches_free(m);
}

static void test_homography(void) {
    const double H[9] = {0.9, -0.12, 40, 0.08, 1.05, -25, 2e-4, -1e-4, 1};
    const int n = 300;
    fl_keypoints a, b;
    fl_matches m;
    make_kp(&a, &b, &m, n);
    bool truth[300];
    for (int i = 0; i < n; i++) {
        const double x = 640 * uniform(31, 1, (uint64_t)i), y = 480 * uniform(31, 2, (uint64_t)i);
        double u, v;
        apply_h(H, x, y, &u, &v);
        truth[i] = uniform(31, 3, (uint64_t)i) >= 0.3f;
        if (truth[i]) u += 0.5 * gauss(32, 2 * (uint64_t)i), v += 0.5 * gauss(32, 2 * (uint64_t)i + 1);
        else u = 640 * uniform(31, 4, (uint64_t)i), v = 480 * uniform(31, 5, (uint64_t)i);
        a.data[i] = (fl_keypoint){.x = (float)x, .y = (float)y};
        b.data[i] = (fl_keypoint){.x = (float)u, .y = (float)v};
    }
    double E[9], E2[9];
    int64_t k = 0, k2 = 0;
    bool flags[300];
    CHECK_MSG(fl_find_geometry(&a, &b, &m, E, &k, .seed = 5, .inlier = flags) == FL_OK, "%s", fl_last_error());
    CHECK(E[8] == 1);
    double worst = 0;
    for (int gy = 0; gy <= 480; gy += 40)
        for (int gx = 0; gx <= 640; gx += 40) {
            double u1, v1, u2, v2;
            apply_h(H, gx, gy, &u1, &v1);
            apply_h(E, gx, gy, &u2, &v2);
            worst = fmax(worst, hypot(u1 - u2, v1 - v2));
        }
    CHECK_MSG(worst < 0.5, "the homography is %.3g px off somewhere in the image", worst);
    int true_in = 0, found_true = 0, found_false = 0, nflags = 0;
    for (int i = 0; i < n; i++) {
        true_in += truth[i];
        found_true += truth[i] && flags[i];
        found_false += !truth[i] && flags[i];
        nflags += flags[i];
    }
    CHECK(nflags == k);
    CHECK_MSG(found_true >= 0.97 * true_in, "%d of %d true inliers flagged", found_true, true_in);
    CHECK_MSG(found_false <= 3, "%d outliers flagged as inliers", found_false);
    /* the same seed, the same model; another seed, the same answer to well under a pixel */
    CHECK(fl_find_geometry(&a, &b, &m, E2, &k2, .seed = 5) == FL_OK);
    CHECK(memcmp(E, E2, sizeof E) == 0 && k == k2);
    CHECK(fl_find_geometry(&a, &b, &m, E2, &k2, .seed = 6, .threshold = 2) == FL_OK);
    double u1, v1, u2, v2;
    apply_h(E, 320, 240, &u1, &v1);
    apply_h(E2, 320, 240, &u2, &v2);
    CHECK(hypot(u1 - u2, v1 - v2) < 0.3);

    /* refusals */
    m.n = 3;
    CHECK(fl_find_geometry(&a, &b, &m, E, &k) == FL_ERR_INVALID_ARG);
    CHECK_ERR(FL_ERR_INVALID_ARG, "3 matches, a homography needs at least 4");
    m.n = n;
    m.data[7].train = n + 5;
    CHECK(fl_find_geometry(&a, &b, &m, E, &k) == FL_ERR_INVALID_ARG);
    CHECK_ERR(FL_ERR_INVALID_ARG, "match 7 pairs keypoint 7 of a (300 keypoints) with 305 of b");
    m.data[7].train = 7;
    a.data[9].y = NAN;
    CHECK(fl_find_geometry(&a, &b, &m, E, &k) == FL_ERR_INVALID_ARG);
    CHECK_ERR(FL_ERR_INVALID_ARG, "match 9: keypoint a 9 is at");
    a.data[9].y = 1;
    CHECK(fl_find_geometry(&a, &b, &m, E, &k, .confidence = 1.5f) == FL_ERR_INVALID_ARG);
    CHECK_ERR(FL_ERR_INVALID_ARG, "confidence 1.5");
    CHECK(fl_find_geometry(&a, &b, &m, E, &k, .threshold = -1) == FL_ERR_INVALID_ARG);
    CHECK_ERR(FL_ERR_INVALID_ARG, "threshold -1");
    CHECK(fl_find_geometry(&a, &b, NULL, E, &k) == FL_ERR_INVALID_ARG);
    CHECK_ERR(FL_ERR_INVALID_ARG, "m (the matches) is NULL");
    /* every point on one line: every sample is degenerate */
    for (int i = 0; i < n; i++) {
        a.data[i] = (fl_keypoint){.x = (float)(3 + 2 * i), .y = (float)(10 + i)};
        b.data[i] = (fl_keypoint){.x = (float)(5 + 1.5 * i), .y = (float)(12 + 0.5 * i)};
    }
    CHECK(fl_find_geometry(&a, &b, &m, E, &k, .max_iters = 50) == FL_ERR_INVALID_ARG);
    CHECK_ERR(FL_ERR_INVALID_ARG, "no homography found among 300 matches: every sample was degenerate");
    CHECK(k == 0);
    free_kp(&a, &b, &m);
}

static void project(const double P[12], const double X[3], double *u, double *v) {
    const double w = P[8] * X[0] + P[9] * X[1] + P[10] * X[2] + P[11];
    *u = (P[0] * X[0] + P[1] * X[1] + P[2] * X[2] + P[3]) / w;
    *v = (P[4] * X[0] + P[5] * X[1] + P[6] * X[2] + P[7]) / w;
}

static double sampson(const double F[9], double ax, double ay, double bx, double by) {
    const double fa0 = F[0] * ax + F[1] * ay + F[2], fa1 = F[3] * ax + F[4] * ay + F[5], fa2 = F[6] * ax + F[7] * ay + F[8];
    const double fb0 = F[0] * bx + F[3] * by + F[6], fb1 = F[1] * bx + F[4] * by + F[7];
    const double e = bx * fa0 + by * fa1 + fa2;
    return fabs(e) / sqrt(fa0 * fa0 + fa1 * fa1 + fb0 * fb0 + fb1 * fb1);
}

static void test_fundamental(void) {
    /* camera a: K [I | 0]; camera b: K [R | t], R a rotation of 0.2 rad about y and 0.05 about x */
    const double f = 500, cx = 320, cy = 240;
    const double ry = 0.2, rx = 0.05;
    const double Ry[9] = {cos(ry), 0, sin(ry), 0, 1, 0, -sin(ry), 0, cos(ry)};
    const double Rx[9] = {1, 0, 0, 0, cos(rx), -sin(rx), 0, sin(rx), cos(rx)};
    double R[9];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) R[i * 3 + j] = Rx[i * 3] * Ry[j] + Rx[i * 3 + 1] * Ry[3 + j] + Rx[i * 3 + 2] * Ry[6 + j];
    const double t[3] = {-1.0, 0.1, 0.05};
    double Pa[12] = {f, 0, cx, 0, 0, f, cy, 0, 0, 0, 1, 0}, Pb[12];
    for (int i = 0; i < 3; i++) { /* K [R | t] */
        const double K[3][3] = {{f, 0, cx}, {0, f, cy}, {0, 0, 1}};
        for (int j = 0; j < 3; j++) Pb[i * 4 + j] = K[i][0] * R[j] + K[i][1] * R[3 + j] + K[i][2] * R[6 + j];
        Pb[i * 4 + 3] = K[i][0] * t[0] + K[i][1] * t[1] + K[i][2] * t[2];
    }
    const int n = 250;
    fl_keypoints a, b;
    fl_matches m;
    make_kp(&a, &b, &m, n);
    bool truth[250];
    double clean[250][4];
    for (int i = 0; i < n; i++) {
        const double X[3] = {-3 + 6 * uniform(41, 1, (uint64_t)i), -2 + 4 * uniform(41, 2, (uint64_t)i),
                             4 + 6 * uniform(41, 3, (uint64_t)i)};
        double ua, va, ub, vb;
        project(Pa, X, &ua, &va);
        project(Pb, X, &ub, &vb);
        clean[i][0] = ua, clean[i][1] = va, clean[i][2] = ub, clean[i][3] = vb;
        truth[i] = uniform(41, 4, (uint64_t)i) >= 0.2f;
        if (truth[i]) ub += 0.3 * gauss(42, 2 * (uint64_t)i), vb += 0.3 * gauss(42, 2 * (uint64_t)i + 1);
        else ub = 640 * uniform(41, 5, (uint64_t)i), vb = 480 * uniform(41, 6, (uint64_t)i);
        a.data[i] = (fl_keypoint){.x = (float)ua, .y = (float)va};
        b.data[i] = (fl_keypoint){.x = (float)ub, .y = (float)vb};
    }
    double F[9], F2[9];
    int64_t k = 0, k2 = 0;
    bool flags[250];
    CHECK_MSG(fl_find_geometry(&a, &b, &m, F, &k, .model = FL_FUNDAMENTAL, .seed = 3, .inlier = flags) == FL_OK, "%s",
              fl_last_error());
    CHECK(F[8] == 1);
    double nrm = 0;
    for (int i = 0; i < 9; i++) nrm += F[i] * F[i];
    nrm = sqrt(nrm);
    const double det = F[0] * (F[4] * F[8] - F[5] * F[7]) - F[1] * (F[3] * F[8] - F[5] * F[6]) +
                       F[2] * (F[3] * F[7] - F[4] * F[6]);
    CHECK_MSG(fabs(det) < 1e-9 * nrm * nrm * nrm, "det F = %.3g with |F| = %.3g: not rank 2", det, nrm);
    double worst = 0, mean = 0;
    int nt = 0, found_true = 0, found_false = 0;
    for (int i = 0; i < n; i++) {
        if (!truth[i]) {
            found_false += flags[i];
            continue;
        }
        const double s = sampson(F, clean[i][0], clean[i][1], clean[i][2], clean[i][3]);
        worst = fmax(worst, s);
        mean += s;
        nt++;
        found_true += flags[i];
    }
    mean /= nt;
    CHECK_MSG(mean < 0.15 && worst < 0.6, "Sampson distance of the true correspondences: mean %.3g, worst %.3g px",
              mean, worst);
    CHECK_MSG(found_true >= 0.9 * nt, "%d of %d true inliers flagged", found_true, nt);
    CHECK_MSG(found_false <= 0.05 * (n - nt), "%d outliers flagged as inliers", found_false);
    CHECK(fl_find_geometry(&a, &b, &m, F2, &k2, .model = FL_FUNDAMENTAL, .seed = 3) == FL_OK);
    CHECK(memcmp(F, F2, sizeof F) == 0 && k == k2);

    m.n = 7;
    CHECK(fl_find_geometry(&a, &b, &m, F, &k, .model = FL_FUNDAMENTAL) == FL_ERR_INVALID_ARG);
    CHECK_ERR(FL_ERR_INVALID_ARG, "7 matches, a fundamental matrix needs at least 8");
    m.n = n;
    for (int i = 0; i < n; i++) /* every point of a in one spot: no model */
        a.data[i] = (fl_keypoint){.x = 100, .y = 100};
    CHECK(fl_find_geometry(&a, &b, &m, F, &k, .model = FL_FUNDAMENTAL, .max_iters = 20) == FL_ERR_INVALID_ARG);
    CHECK_ERR(FL_ERR_INVALID_ARG, "no fundamental matrix found among 250 matches: every sample was degenerate");
    CHECK(fl_find_geometry(&a, &b, &m, F, &k, .model = (fl_geometry)7) == FL_ERR_INVALID_ARG);
    CHECK_ERR(FL_ERR_INVALID_ARG, "model 7, expected FL_HOMOGRAPHY or FL_FUNDAMENTAL");
    free_kp(&a, &b, &m);
}

/* ------------------------------------------------------------ .npz */

static bool have_numpy(void) {
    return access("/usr/bin/python3", X_OK) == 0 && system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") == 0;
}

static void test_npz(void) {
    char path[512], bad[600];
    snprintf(path, sizeof path, "%s/features.npz", tmpdir);
    fl_tensor *kp = fl_tensor_zeros(FL_FLOAT32, 7, 5), *oc = fl_tensor_zeros(FL_INT32, 7),
              *de = fl_tensor_zeros(FL_UINT8, 7, 128), *em = fl_tensor_zeros(FL_FLOAT32, 0, 128);
    for (int i = 0; i < 35; i++) ((float *)fl_tensor_data(kp))[i] = 0.25f * (float)i - 3;
    for (int i = 0; i < 7; i++) ((int32_t *)fl_tensor_data(oc))[i] = (i - 3) * 65536 + i;
    for (int i = 0; i < 7 * 128; i++) ((uint8_t *)fl_tensor_data(de))[i] = (uint8_t)(i * 7);
    char *names[] = {"left.png/keypoints", "left.png/octave", "left.png/descriptors", "empty"};
    fl_tensor *arrays[] = {kp, oc, de, em};
    const fl_arrays a = {.count = 4, .names = names, .arrays = arrays};
    CHECK_MSG(fl_save_npz(&a, path) == FL_OK, "%s", fl_last_error());
    fl_arrays r;
    CHECK_MSG(fl_load_npz(path, &r) == FL_OK, "%s", fl_last_error());
    CHECK(r.count == 4);
    for (int i = 0; i < r.count && i < 4; i++) {
        CHECK(strcmp(r.names[i], names[i]) == 0);
        const fl_tensor *x = r.arrays[i], *y = arrays[i];
        CHECK(fl_tensor_dtype(x) == fl_tensor_dtype(y) && fl_tensor_ndim(x) == fl_tensor_ndim(y));
        for (int d = 0; d < fl_tensor_ndim(y); d++) CHECK(fl_tensor_dim(x, d) == fl_tensor_dim(y, d));
        const size_t bytes = (size_t)fl_tensor_size(y) * (fl_tensor_dtype(y) == FL_UINT8 ? 1 : 4);
        CHECK(bytes == 0 || memcmp(fl_tensor_cdata(x), fl_tensor_cdata(y), bytes) == 0);
    }
    fl_arrays_free(&r);
    if (have_numpy()) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd,
                 "/usr/bin/python3 -c \"import numpy as np, zipfile, sys; z = np.load(sys.argv[1]); "
                 "assert z.files == ['left.png/keypoints', 'left.png/octave', 'left.png/descriptors', 'empty'], z.files; "
                 "k = z['left.png/keypoints']; assert k.dtype == np.float32 and k.shape == (7, 5); "
                 "assert (k.ravel() == np.arange(35, dtype=np.float32) * 0.25 - 3).all(); "
                 "o = z['left.png/octave']; assert o.dtype == np.int32 and (o == (np.arange(7) - 3) * 65536 + np.arange(7)).all(); "
                 "d = z['left.png/descriptors']; assert d.dtype == np.uint8 and d.shape == (7, 128); "
                 "assert (d.ravel() == (np.arange(7 * 128) * 7) %% 256).all(); "
                 "assert z['empty'].shape == (0, 128); "
                 "assert zipfile.ZipFile(sys.argv[1]).testzip() is None\" '%s'", path);
        CHECK_MSG(system(cmd) == 0, "np.load refused or misread %s", path);
    } else {
        printf("test_match: /usr/bin/python3 has no NumPy; the np.load check is skipped\n");
    }
    /* refusals, and the old file kept */
    char *dup[] = {"x", "x"};
    fl_tensor *two[] = {kp, oc};
    CHECK(fl_save_npz(&(fl_arrays){.count = 2, .names = dup, .arrays = two}, path) == FL_ERR_INVALID_ARG);
    CHECK_ERR(FL_ERR_INVALID_ARG, "two arrays named 'x'");
    fl_tensor *none[] = {kp, NULL};
    char *nn[] = {"x", "y"};
    CHECK(fl_save_npz(&(fl_arrays){.count = 2, .names = nn, .arrays = none}, path) == FL_ERR_INVALID_ARG);
    CHECK_ERR(FL_ERR_INVALID_ARG, "array 'y' is NULL");
    char *emptyname[] = {""};
    CHECK(fl_save_npz(&(fl_arrays){.count = 1, .names = emptyname, .arrays = two}, path) == FL_ERR_INVALID_ARG);
    CHECK_ERR(FL_ERR_INVALID_ARG, "array 0 has an empty name");
    CHECK(fl_save_npz(&(fl_arrays){.count = 0}, path) == FL_ERR_INVALID_ARG);
    CHECK_ERR(FL_ERR_INVALID_ARG, "no arrays to save");
    CHECK(fl_save_npz(NULL, path) == FL_ERR_INVALID_ARG);
    snprintf(bad, sizeof bad, "%s/no-such-folder/x.npz", tmpdir);
    CHECK(fl_save_npz(&a, bad) == FL_ERR_IO);
    CHECK_ERR(FL_ERR_IO, bad);
    CHECK(fl_save_npz(&a, tmpdir) != FL_OK); /* a folder */
    CHECK(fl_load_npz(path, &r) == FL_OK && r.count == 4); /* still the first file */
    fl_arrays_free(&r);
    fl_tensor_free(kp);
    fl_tensor_free(oc);
    fl_tensor_free(de);
    fl_tensor_free(em);
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

int main(int argc, char **argv) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/flynn-test-match.XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    const bool npz_only = argc > 1 && strcmp(argv[1], "npz") == 0;
    if (!npz_only) {
        test_match_float();
        test_match_uint8();
        test_match_refusals();
        test_homography();
        test_fundamental();
    }
    test_npz();
    if (check_failures == 0) nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    else printf("test_match: files kept in %s\n", tmpdir);
    return check_report(npz_only ? "test_match npz" : "test_match");
}
