/*
 * test_sift.c — fl_sift_detect_and_compute on synthetic images: bad input refused with its reason (nothing
 * returned), degenerate images giving empty results, blobs found where they are at the scale they have,
 * a 90-degree rotation giving the rotated keypoints, the same bits for any thread count, uint8 and float32
 * input and output alike, RGB made gray, nfeatures keeping the best, OpenCV's order. (OpenCV's own output
 * on real photographs is tests/test_sift_opencv.sh's.)
 */
#include "flynn/flynn.h"

#include "check.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

enum { W = 160, H = 120 };

/* dark and bright Gaussian blobs of a few sizes on a gentle gradient */
static fl_tensor *blobs(void) {
    fl_tensor *t = fl_tensor_zeros(FL_FLOAT32, H, W);
    float *p = fl_tensor_data(t);
    const float bx[] = {30, 80, 125, 50, 110}, by[] = {30, 60, 35, 90, 95}, bs[] = {3, 5, 4, 2.5f, 6},
                ba[] = {120, -90, 100, 110, -100};
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            float v = 80 + 0.2f * (float)x;
            for (int b = 0; b < 5; b++) {
                const float dx = (float)x - bx[b], dy = (float)y - by[b];
                v += ba[b] * expf(-(dx * dx + dy * dy) / (2 * bs[b] * bs[b]));
            }
            p[y * W + x] = v;
        }
    return t;
}

static fl_status run(const fl_tensor *img, fl_keypoints *kp, fl_tensor **d) {
    return fl_sift_detect_and_compute(img, kp, d);
}

static void refused(fl_tensor *img, const char *needle) {
    fl_keypoints kp = {.n = 99};
    fl_tensor *d = (fl_tensor *)&kp; /* must come back NULL */
    fl_status st = run(img, &kp, &d);
    CHECK_MSG(st != FL_OK, "accepted an image that should be refused (%s)", needle);
    CHECK(kp.n == 0 && kp.data == NULL && d == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), needle);
}

static void bad_input(void) {
    refused(NULL, "NULL");
    fl_tensor *t = fl_tensor_zeros(FL_FLOAT32, 2, 8, 8, 1);
    refused(t, "expected (height, width)");
    fl_tensor_free(t);
    t = fl_tensor_zeros(FL_FLOAT32, 8, 8, 5);
    refused(t, "1 to 4 channels");
    fl_tensor_free(t);
    t = fl_tensor_zeros(FL_INT32, 8, 8);
    refused(t, "int32");
    fl_tensor_free(t);
    t = fl_tensor_zeros(FL_FLOAT32, 20, 30);
    ((float *)fl_tensor_data(t))[7 * 30 + 11] = NAN;
    refused(t, "NaN at row 7, column 11");
    ((float *)fl_tensor_data(t))[7 * 30 + 11] = INFINITY;
    refused(t, "infinity at row 7, column 11");
    fl_tensor_free(t);
    t = fl_tensor_zeros(FL_UINT8, 1, FL_SIFT_MAX_PIXELS + 1);
    refused(t, "at most 33554432");
    fl_tensor_free(t);
    /* arguments */
    t = fl_tensor_zeros(FL_FLOAT32, 16, 16);
    fl_keypoints kp;
    fl_tensor *d;
    CHECK(fl_sift_detect_and_compute(t, &kp, &d, .n_octave_layers = -1) == FL_ERR_INVALID_ARG);
    CHECK_STR_CONTAINS(fl_last_error(), "n_octave_layers is -1");
    CHECK(fl_sift_detect_and_compute(t, &kp, &d, .sigma = -2) == FL_ERR_INVALID_ARG);
    CHECK_STR_CONTAINS(fl_last_error(), "sigma is -2");
    CHECK(fl_sift_detect_and_compute(t, &kp, &d, .nfeatures = -5) == FL_ERR_INVALID_ARG);
    CHECK(fl_sift_detect_and_compute(t, &kp, &d, .contrast_threshold = NAN) == FL_ERR_INVALID_ARG);
    CHECK(fl_sift_detect_and_compute(t, NULL, &d) == FL_ERR_INVALID_ARG);
    fl_tensor_free(t);
}

/* empty results, not errors: no pixels, one pixel, a flat image */
static void empty(int h, int w, float v) {
    fl_tensor *t = fl_tensor_zeros(FL_FLOAT32, h, w);
    for (int64_t i = 0; i < (int64_t)h * w; i++) ((float *)fl_tensor_data(t))[i] = v;
    fl_keypoints kp;
    fl_tensor *d = NULL;
    CHECK_MSG(run(t, &kp, &d) == FL_OK, "%dx%d: %s", w, h, fl_last_error());
    CHECK_MSG(kp.n == 0 && kp.data == NULL, "%dx%d flat image: %lld keypoints", w, h, (long long)kp.n);
    CHECK(d && fl_tensor_ndim(d) == 2 && fl_tensor_dim(d, 0) == 0 && fl_tensor_dim(d, 1) == 128);
    fl_keypoints_free(&kp);
    fl_tensor_free(d);
    fl_tensor_free(t);
}

static bool same_bits(const fl_keypoints *a, const fl_tensor *da, const fl_keypoints *b, const fl_tensor *db) {
    return a->n == b->n && (a->n == 0 || memcmp(a->data, b->data, (size_t)a->n * sizeof *a->data) == 0) &&
           fl_tensor_dtype(da) == fl_tensor_dtype(db) &&
           memcmp(fl_tensor_cdata(da), fl_tensor_cdata(db), (size_t)a->n * 128 * sizeof(float)) == 0;
}

static void blobs_found(void) {
    fl_tensor *img = blobs();
    fl_keypoints kp;
    fl_tensor *d;
    CHECK(run(img, &kp, &d) == FL_OK);
    CHECK_MSG(kp.n >= 5, "%lld keypoints on 5 blobs", (long long)kp.n);
    /* each blob has a keypoint at its centre whose size grows with the blob's sigma (size ~ 2 sqrt(2)
     * sigma for a blob's DoG peak, give or take the sampling of scales) */
    const float bx[] = {30, 80, 125, 50, 110}, by[] = {30, 60, 35, 90, 95}, bs[] = {3, 5, 4, 2.5f, 6};
    for (int b = 0; b < 5; b++) {
        float best = 1e9f, size = 0;
        for (int64_t i = 0; i < kp.n; i++) {
            const float e = hypotf(kp.data[i].x - bx[b], kp.data[i].y - by[b]);
            if (e < best) best = e, size = kp.data[i].size;
        }
        CHECK_MSG(best < 0.5f, "blob %d at (%g, %g): nearest keypoint %.2f px away", b, bx[b], by[b], best);
        CHECK_MSG(size > 1.5f * bs[b] && size < 5.f * bs[b], "blob %d of sigma %g: keypoint size %g", b, bs[b], size);
    }
    /* OpenCV's order, descriptors whole numbers 0-255 with norm about 512 */
    for (int64_t i = 1; i < kp.n; i++)
        CHECK(kp.data[i - 1].x < kp.data[i].x || (kp.data[i - 1].x == kp.data[i].x && kp.data[i - 1].y <= kp.data[i].y));
    const float *dd = fl_tensor_cdata(d);
    for (int64_t i = 0; i < kp.n; i++) {
        double n2 = 0;
        int whole = 1;
        for (int q = 0; q < 128; q++) {
            const float v = dd[i * 128 + q];
            whole &= v >= 0 && v <= 255 && v == rintf(v);
            n2 += (double)v * v;
        }
        CHECK(whole);
        CHECK_MSG(sqrt(n2) > 400 && sqrt(n2) < 600, "descriptor %lld has norm %g", (long long)i, sqrt(n2));
        CHECK(kp.data[i].angle >= 0 && kp.data[i].angle < 360 && kp.data[i].response > 0);
    }
    /* thread counts give the same bits */
    const int nt = omp_get_max_threads();
    omp_set_num_threads(1);
    fl_keypoints k1;
    fl_tensor *d1;
    CHECK(run(img, &k1, &d1) == FL_OK);
    omp_set_num_threads(nt > 1 ? nt : 3);
    CHECK_MSG(same_bits(&kp, d, &k1, d1), "1 thread and %d threads differ", nt > 1 ? nt : 3);
    omp_set_num_threads(nt);
    fl_keypoints_free(&k1);
    fl_tensor_free(d1);
    /* uint8 in, uint8 out */
    fl_tensor *u8 = fl_tensor_zeros(FL_UINT8, H, W), *f8 = fl_tensor_zeros(FL_FLOAT32, H, W);
    for (int i = 0; i < W * H; i++) {
        const float v = rintf(((float *)fl_tensor_data(img))[i]);
        ((uint8_t *)fl_tensor_data(u8))[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        ((float *)fl_tensor_data(f8))[i] = (float)((uint8_t *)fl_tensor_data(u8))[i];
    }
    fl_keypoints ku, kf;
    fl_tensor *du, *df;
    CHECK(run(u8, &ku, &du) == FL_OK && run(f8, &kf, &df) == FL_OK);
    CHECK_MSG(same_bits(&ku, du, &kf, df), "a uint8 image and its float32 copy differ");
    fl_keypoints kb;
    fl_tensor *db;
    CHECK(fl_sift_detect_and_compute(f8, &kb, &db, .descriptor_type = FL_UINT8) == FL_OK);
    CHECK(fl_tensor_dtype(db) == FL_UINT8 && kb.n == kf.n);
    int diff = 0;
    for (int64_t i = 0; i < kb.n * 128; i++)
        diff += ((const uint8_t *)fl_tensor_cdata(db))[i] != ((const float *)fl_tensor_cdata(df))[i];
    CHECK_MSG(diff == 0, "%d uint8 descriptor values differ from the float32 ones", diff);
    /* RGB with equal channels is the gray image */
    fl_tensor *rgb = fl_tensor_zeros(FL_FLOAT32, H, W, 3);
    for (int i = 0; i < W * H; i++)
        for (int c = 0; c < 3; c++) ((float *)fl_tensor_data(rgb))[i * 3 + c] = ((float *)fl_tensor_data(f8))[i];
    fl_keypoints kr;
    fl_tensor *dr;
    CHECK(run(rgb, &kr, &dr) == FL_OK);
    CHECK_MSG(kr.n == kf.n, "RGB of equal channels: %lld keypoints, gray %lld", (long long)kr.n, (long long)kf.n);
    /* nfeatures keeps the best by response */
    fl_keypoints kn;
    fl_tensor *dn;
    CHECK(fl_sift_detect_and_compute(img, &kn, &dn, .nfeatures = 3) == FL_OK);
    CHECK_MSG(kn.n >= 3 && kn.n < kp.n, "nfeatures 3 kept %lld of %lld", (long long)kn.n, (long long)kp.n);
    float third = 0;
    { /* the third highest response of all */
        float top[3] = {0, 0, 0};
        for (int64_t i = 0; i < kp.n; i++) {
            float r = kp.data[i].response;
            for (int q = 0; q < 3; q++)
                if (r > top[q]) { const float t = top[q]; top[q] = r, r = t; }
        }
        third = top[2];
    }
    for (int64_t i = 0; i < kn.n; i++) CHECK(kn.data[i].response >= third);
    fl_keypoints_free(&kp), fl_keypoints_free(&ku), fl_keypoints_free(&kf), fl_keypoints_free(&kb);
    fl_keypoints_free(&kr), fl_keypoints_free(&kn);
    fl_tensor_free(d), fl_tensor_free(du), fl_tensor_free(df), fl_tensor_free(db), fl_tensor_free(dr), fl_tensor_free(dn);
    fl_tensor_free(u8), fl_tensor_free(f8), fl_tensor_free(rgb), fl_tensor_free(img);
}

/* rotated by 90 degrees (exactly: a transpose and a flip), the keypoints rotate with it. OpenCV's doubled
 * image puts input pixel x at x + 1/4 of the keypoints' coordinates (doubled pixel k is at k / 2), so a flip
 * of the column axis maps x to W - 1/2 - x; on the doubled octave that is exact to rounding; the smaller
 * octaves take every other pixel from the first, which a flip does not commute with (a pixel or so). */
static void rotation(void) {
    fl_tensor *img = blobs(), *rot = fl_tensor_zeros(FL_FLOAT32, W, H);
    const float *p = fl_tensor_cdata(img);
    float *q = fl_tensor_data(rot);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) q[(int64_t)x * H + (H - 1 - y)] = p[y * W + x]; /* (x, y) -> (H-1-y, x) */
    fl_keypoints a, b;
    fl_tensor *da, *db;
    CHECK(run(img, &a, &da) == FL_OK && run(rot, &b, &db) == FL_OK);
    int found = 0;
    for (int64_t i = 0; i < a.n; i++) {
        const float ex = (float)H - 0.5f - a.data[i].y, ey = a.data[i].x;
        const int oct = (int8_t)(a.data[i].octave & 255);
        const float tol = oct < 0 ? 0.05f : 1.5f * (float)(1 << oct), stol = oct < 0 ? 0.01f : 0.2f;
        for (int64_t j = 0; j < b.n; j++)
            if (hypotf(b.data[j].x - ex, b.data[j].y - ey) < tol && fabsf(b.data[j].size / a.data[i].size - 1) < stol) {
                found++;
                break;
            }
    }
    CHECK_MSG(found >= (int)(0.9 * (double)a.n) && a.n > 0, "rotated by 90 degrees: %d of %lld keypoints found again",
              found, (long long)a.n);
    fl_keypoints_free(&a), fl_keypoints_free(&b);
    fl_tensor_free(da), fl_tensor_free(db), fl_tensor_free(img), fl_tensor_free(rot);
}

int main(void) {
    bad_input();
    empty(0, 0, 0);
    empty(1, 1, 50);
    empty(2, 3, 50);
    empty(200, 300, 128);
    blobs_found();
    rotation();
    /* the GPU paths refuse by name until their kernels land */
    fl_tensor *t = fl_tensor_zeros(FL_FLOAT32, 16, 16);
    fl_keypoints kp;
    fl_tensor *d;
    CHECK(fl_sift_detect_and_compute(t, &kp, &d, .device = FL_DEVICE_OPENCL) == FL_ERR_UNSUPPORTED);
    CHECK_STR_CONTAINS(fl_last_error(), "OpenCL");
    fl_tensor_free(t);
    return check_report("test_sift");
}
