/*
 * flynn/sift.h — SIFT keypoints and descriptors (Lowe 2004) as OpenCV 4.x's
 * cv::SIFT computes them, and matching them (docs/sift.md). Included by
 * flynn/flynn.h.
 *
 *     fl_tensor *img = fl_load_image("left.png", FL_COLOR_GRAYSCALE, 0, 0);
 *     fl_keypoints kp;
 *     fl_tensor *desc;
 *     if (fl_sift_detect_and_compute(img, &kp, &desc, .nfeatures = 2000) != FL_OK)
 *         fprintf(stderr, "%s\n", fl_last_error());
 *     for (int64_t i = 0; i < kp.n; i++) printf("%g %g\n", kp.data[i].x, kp.data[i].y);
 *     fl_keypoints_free(&kp); fl_tensor_free(desc);
 */
#ifndef FLYNN_SIFT_H
#define FLYNN_SIFT_H

/* OpenCV's cv::KeyPoint: the position in pixels of the input image (pixel
 * centres at integers), the diameter of the region the descriptor covers,
 * the orientation in degrees [0, 360) counter-clockwise as OpenCV draws it,
 * the DoG contrast, and the octave packed as OpenCV packs it (octave in the
 * low byte, -1 for the doubled image; the DoG layer in bits 8-15; the
 * sub-layer offset (xi + 0.5) * 255 in bits 16-23). */
typedef struct fl_keypoint {
    float x, y, size, angle, response;
    int octave;
} fl_keypoint;

typedef struct fl_keypoints {
    int64_t n;
    fl_keypoint *data; /* n of them (NULL when n is 0); free with fl_keypoints_free */
} fl_keypoints;
void fl_keypoints_free(fl_keypoints *k);

/* cv::SIFT_create's parameters under OpenCV's names; 0 (or unset) takes
 * OpenCV's default. */
typedef struct fl_sift_args {
    int _reserved;
    int nfeatures;            /* keep the n best by response (ties at the n-th kept, as OpenCV); 0: all */
    int n_octave_layers;      /* nOctaveLayers: 3 */
    float contrast_threshold; /* contrastThreshold: 0.04 (divided by the layers, as OpenCV) */
    float edge_threshold;     /* edgeThreshold: 10 */
    float sigma;              /* sigma: 1.6 (the input is taken to be blurred by 0.5) */
    bool no_upscale;          /* OpenCV's enable_precise_upscale=false default doubles the image; true: not */
    fl_dtype descriptor_type; /* FL_FLOAT32 (OpenCV's default: whole numbers 0-255) or FL_UINT8 */
    fl_device_kind device;    /* AUTO: an accelerator when one runs SIFT's kernels, else the CPU */
    char *why;                /* optional: the device chosen and why (one line) */
    size_t why_len;
} fl_sift_args;

/* Keypoints and descriptors (n x 128) of one image: a tensor (H, W) or
 * (H, W, C) as fl_load_image returns it (float32 0-255, or uint8); C = 3 or
 * 4 is RGB(A), made gray as OpenCV's COLOR_RGB2GRAY (0.299 R + 0.587 G +
 * 0.114 B), C = 2 is gray + alpha. Keypoints come sorted by x, then y, then
 * size (descending), angle: OpenCV's order before nfeatures. An image with no
 * features gives n = 0 and a (0, 128) tensor. Refused (FL_ERR_INVALID_ARG,
 * nothing allocated): NULL, another shape, NaN or infinity (the first one's
 * position named), more than FL_SIFT_MAX_PIXELS pixels. */
#define FL_SIFT_MAX_PIXELS ((int64_t)1 << 25)
fl_status fl_sift_detect_and_compute_(const fl_tensor *image, fl_keypoints *keypoints, fl_tensor **descriptors,
                                      fl_sift_args a);
#define fl_sift_detect_and_compute(image, keypoints, descriptors, ...)                                              \
    fl_sift_detect_and_compute_((image), (keypoints), (descriptors), (fl_sift_args){._reserved = 0, __VA_ARGS__})

/* ------------------------------------------------------------- matching */

/* One correspondence: descriptor `query` of the first set, `train` of the
 * second (OpenCV's DMatch), at L2 distance `distance`. */
typedef struct fl_match {
    int32_t query, train;
    float distance;
} fl_match;
typedef struct fl_matches {
    int64_t n;
    fl_match *data; /* free with fl_matches_free */
} fl_matches;
void fl_matches_free(fl_matches *m);

/* Nearest neighbours by L2 distance (brute force, exact, as cv::BFMatcher),
 * kept when the nearest is below `ratio` times the second nearest (Lowe's
 * ratio test; 0: 0.75; 1 or more: no test) and, with cross_check, when the
 * query is also the train descriptor's nearest. Sorted by query. a and b:
 * (n, d) float32 or uint8 (either, each) of the same d. The distances are
 * exact (uint8 and whole-number descriptors give square roots of integers);
 * ties go to the lower index, as OpenCV's scan keeps the first minimum. A
 * query with no second neighbour (b holds one descriptor) passes the ratio
 * test; an empty a or b gives no matches. Refused (FL_ERR_INVALID_ARG or
 * FL_ERR_SHAPE, naming the argument): NULL, not 2-D, other dtypes, different
 * d, NaN or infinity (its row and column named), a negative ratio. 10k x
 * 10k descriptors of 128 take about 0.6 s on 2 cores (one sgemm per block,
 * then an exact check of the nearest two: src/vision/match.c). */
typedef struct fl_match_args {
    int _reserved;
    float ratio;
    bool cross_check;
} fl_match_args;
fl_status fl_match_descriptors_(const fl_tensor *a, const fl_tensor *b, fl_matches *out, fl_match_args args);
#define fl_match_descriptors(a, b, out, ...)                                                                        \
    fl_match_descriptors_((a), (b), (out), (fl_match_args){._reserved = 0, __VA_ARGS__})

/* A geometric model fitted to matches by RANSAC: a homography (x_b ~ H x_a,
 * row-major, H[8] = 1; >= 4 matches) or a fundamental matrix (x_b^T F x_a =
 * 0, rank 2, 8-point with Hartley's normalisation; >= 8 matches; scaled to
 * F[8] = 1, or to norm 1 where F[8] is about 0), refined on the inliers
 * (homography: Levenberg-Marquardt on the reprojection error; fundamental:
 * Sampson-weighted 8-point). a, b: the keypoints the matches index (query
 * into a, train into b; x, y used). threshold: the reprojection
 * (homography) or Sampson distance (fundamental) in pixels for an inlier
 * (0: 3 as OpenCV's findHomography; 1 for the fundamental's); confidence
 * 0: 0.995 (the iterations adapt to the inlier ratio); max_iters 0: 2000;
 * seed: the sample order (the same seed, the same result). Samples with 3
 * collinear points (homography) or a rank-deficient system are skipped.
 * n_inliers and inlier (one flag per match) are optional. Too few matches,
 * or no model found: FL_ERR_INVALID_ARG naming how many there were and
 * how many it needs, or why (every sample degenerate); also for indices
 * outside a or b and non-finite coordinates (the match named). */
typedef enum fl_geometry { FL_HOMOGRAPHY = 0, FL_FUNDAMENTAL } fl_geometry;
typedef struct fl_ransac_args {
    int _reserved;
    fl_geometry model;
    float threshold, confidence;
    int max_iters;
    uint64_t seed;
    bool *inlier;
} fl_ransac_args;
fl_status fl_find_geometry_(const fl_keypoints *a, const fl_keypoints *b, const fl_matches *m, double out[9],
                            int64_t *n_inliers, fl_ransac_args args);
#define fl_find_geometry(a, b, m, out, n_inliers, ...)                                                              \
    fl_find_geometry_((a), (b), (m), (out), (n_inliers), (fl_ransac_args){._reserved = 0, __VA_ARGS__})

#endif /* FLYNN_SIFT_H */
