/*
 * sift_internal.h — what SIFT's steps share (sift.c: the API, detection, orientation, descriptors;
 * sift_pyramid.c: the Gaussian and DoG pyramids). The numbers and the order of every step are OpenCV
 * 4.x's cv::SIFT (modules/features2d/src/sift.simd.hpp, the float build): docs/sift.md says which.
 */
#ifndef FLYNN_VISION_SIFT_INTERNAL_H
#define FLYNN_VISION_SIFT_INTERNAL_H

#include "flynn/flynn.h"

#include <math.h>
#include <stdint.h>

enum {
    SIFT_IMG_BORDER = 5,       /* no extremum this close to an octave's edge */
    SIFT_MAX_INTERP_STEPS = 5, /* sub-pixel refinement steps */
    SIFT_ORI_HIST_BINS = 36,
    SIFT_DESCR_WIDTH = 4, /* 4 x 4 cells */
    SIFT_DESCR_HIST_BINS = 8,
    SIFT_DESCR_LEN = SIFT_DESCR_WIDTH * SIFT_DESCR_WIDTH * SIFT_DESCR_HIST_BINS,
};
#define FL_SIFT_MAX_LAYERS 32 /* nOctaveLayers accepted */
#define SIFT_INIT_SIGMA 0.5f     /* the blur the input is assumed to have */
#define SIFT_ORI_SIG_FCTR 1.5f   /* the orientation window's sigma, in keypoint scales */
#define SIFT_ORI_RADIUS 4.5f     /* 3 * SIFT_ORI_SIG_FCTR */
#define SIFT_ORI_PEAK_RATIO 0.8f /* peaks this close to the highest make keypoints too */
#define SIFT_DESCR_SCL_FCTR 3.f  /* a descriptor cell's width, in keypoint scales */
#define SIFT_DESCR_MAG_THR 0.2f  /* the clamp before renormalising */
#define SIFT_INT_DESCR_FCTR 512.f

/* "vectorise this loop across its iterations" for GCC (omp simd, -fopenmp); clang vectorises these loops
 * by itself and, asked to and unable (sanitizer builds), warns: -Werror would refuse the build */
#if defined(__GNUC__) && !defined(__clang__)
#define SIFT_SIMD _Pragma("omp simd")
#else
#define SIFT_SIMD
#endif

/* the hot loops built for AVX-512, AVX2 and baseline x86-64, one picked at load (not in sanitizer builds) */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__SANITIZE_ADDRESS__) && !defined(FLYNN_FUZZ_BUILD)
#define SIFT_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define SIFT_CLONES
#endif

typedef struct sift_params {
    int nfeatures, layers; /* layers: nOctaveLayers */
    float contrast, edge, sigma;
    bool upscale;
} sift_params;

/* One octave's images, w x h floats each, rows contiguous. */
typedef struct sift_octave {
    int w, h;
    float **gauss; /* layers + 3 */
} sift_octave;

typedef struct sift_pyramid {
    int n_octaves, layers, first_octave; /* first_octave: -1 when the image was doubled */
    sift_octave *oct;
} sift_pyramid;

/* sift_pyramid.c */
/* The gray float image OpenCV's createInitialImage makes, doubled and blurred to sigma (or blurred only). */
fl_status fl_sift_base_image(const float *gray, int w, int h, const sift_params *p, float **base, int *bw, int *bh);
/* The octaves from the base image (which the pyramid takes over). */
fl_status fl_sift_build_pyramid(float *base, int bw, int bh, const sift_params *p, sift_pyramid *pyr);
void fl_sift_pyramid_free(sift_pyramid *pyr);
/* A separable Gaussian blur as cv::GaussianBlur(src, dst, Size(), sigma) on float images: a kernel of
 * cvRound(8 sigma + 1) | 1 taps, BORDER_REFLECT_101. src and dst may not be the same. */
fl_status fl_sift_blur(const float *src, float *dst, int w, int h, double sigma);

/* OpenCV's fastAtan2 (degrees [0, 360), about 0.3 degrees from atan2): the orientations bin by it, so
 * keypoints land in the bins OpenCV's do. Written without branches (selects), so loops over it vectorise;
 * each case computes what OpenCV's branch does. */
static inline float fl_sift_atan2_deg(float y, float x) {
    const float p1 = 0.9997878412794807f * 57.29577951308232f, p3 = -0.3258083974640975f * 57.29577951308232f,
                p5 = 0.1555786518463281f * 57.29577951308232f, p7 = -0.04432655554792128f * 57.29577951308232f;
    const float ax = x < 0 ? -x : x, ay = y < 0 ? -y : y, eps = (float)2.220446049250313e-16;
    const int wide = ax >= ay;
    const float c = (wide ? ay : ax) / ((wide ? ax : ay) + eps), c2 = c * c;
    const float t = (((p7 * c2 + p5) * c2 + p3) * c2 + p1) * c;
    float a = wide ? t : 90.f - t;
    a = x < 0 ? 180.f - a : a;
    return y < 0 ? 360.f - a : a;
}

#endif
