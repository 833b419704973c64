/*
 * cpu_fastmath.h — flynn's own exp for the CPU kernels' vector loops
 * (recurrent gates in cpu_rnn.c, attention softmax in cpu_attention.c):
 * branch-free, so GCC vectorises the loops that call it, where libm's expf
 * and tanhf are scalar calls. Accuracy ~2 ulp for |x| <= 87.3 (clamped
 * there). Also the AVX2+FMA target attribute and the check that this CPU
 * can run code compiled with it.
 */
#ifndef FL_CPU_FASTMATH_H
#define FL_CPU_FASTMATH_H

#include <stdint.h>

/* exp(x) for x clamped to [-87.3, 87.3] (by the bits of |x|: a float
 * compare-and-select here stops GCC from vectorising the loops): x = n ln2
 * + f, |f| <= ln2/2, exp(f) by Cephes expf's degree-6 polynomial (~2 ulp),
 * times 2^n put into the exponent bits. No branches, so loops over it
 * vectorise. */
typedef union { float f; int32_t i; uint32_t u; } fl_fi32;
static inline __attribute__((always_inline)) float fl_fast_exp(float x) {
    fl_fi32 v = {.f = x};
    uint32_t ax = v.u & 0x7fffffffu, lim = 0x42AE999Au; /* 87.3f */
    ax = ax < lim ? ax : lim;
    v.u = ax | (v.u & 0x80000000u);
    x = v.f;
    fl_fi32 r = {.f = x * 1.44269504088896341f + 12582912.0f}; /* 1.5 * 2^23: round to nearest */
    float n = r.f - 12582912.0f;
    float f = x - n * 0.693359375f;
    f = f - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * f + 1.3981999507e-3f;
    p = p * f + 8.3334519073e-3f;
    p = p * f + 4.1665795894e-2f;
    p = p * f + 1.6666665459e-1f;
    p = p * f + 5.0000001201e-1f;
    p = p * f * f + f + 1.0f;
    fl_fi32 q = {.f = p};
    q.u += (r.u - 0x4B400000u) << 23;
    return q.f;
}

/* NaN where x is NaN, else r: fl_fast_exp clamps a NaN to a finite value,
 * and an activation must pass it on as libm's functions do. */
static inline __attribute__((always_inline)) float fl_nan_through(float x, float r) { return x == x ? r : x; }

/* exp(x) - 1 without the cancellation near 0: for |x| < 1/2 the Taylor
 * series to x^8 (its remainder under 1e-8 relative), else fl_fast_exp(x) - 1
 * (a few ulp). Branch-free: both are computed and one is kept. */
static inline __attribute__((always_inline)) float fl_fast_expm1(float x) {
    float p = 2.48015873e-5f; /* 1/8! */
    p = p * x + 1.98412698e-4f;
    p = p * x + 1.38888889e-3f;
    p = p * x + 8.33333333e-3f;
    p = p * x + 4.16666667e-2f;
    p = p * x + 1.66666667e-1f;
    p = p * x + 0.5f;
    const float small = x + x * x * p, big = fl_fast_exp(x) - 1.0f;
    fl_fi32 a = {.f = x};
    return fl_nan_through(x, (a.u & 0x7fffffffu) < 0x3f000000u ? small : big);
}

/* 1 / (1 + exp(-x)) from exp(-|x|), which cannot overflow. */
static inline __attribute__((always_inline)) float fl_fast_sigmoid(float x) {
    fl_fi32 a = {.f = x};
    a.u |= 0x80000000u;
    const float e = fl_fast_exp(a.f), s = 1.0f / (1.0f + e);
    return fl_nan_through(x, x >= 0.0f ? s : e * s);
}

/* tanh(x) = -t / (t + 2) with t = expm1(-2|x|), the sign of x put back. */
static inline __attribute__((always_inline)) float fl_fast_tanh(float x) {
    fl_fi32 a = {.f = x};
    const uint32_t sign = a.u & 0x80000000u;
    a.u |= 0x80000000u;
    const float t = fl_fast_expm1(2.0f * a.f);
    fl_fi32 r = {.f = -t / (t + 2.0f)};
    r.u |= sign;
    return fl_nan_through(x, r.f);
}

/* erfc(|z|) by Numerical Recipes' Chebyshev fit (relative error < 1.2e-7):
 * t exp(-z^2 + P(t)), t = 1 / (1 + |z|/2). */
static inline __attribute__((always_inline)) float fl_fast_erfc_abs(float z) {
    fl_fi32 a = {.f = z};
    a.u &= 0x7fffffffu;
    z = a.f;
    const float t = 1.0f / (1.0f + 0.5f * z);
    float p = 0.17087277f;
    p = p * t - 0.82215223f;
    p = p * t + 1.48851587f;
    p = p * t - 1.13520398f;
    p = p * t + 0.27886807f;
    p = p * t - 0.18628806f;
    p = p * t + 0.09678418f;
    p = p * t + 0.37409196f;
    p = p * t + 1.00002368f;
    p = p * t - 1.26551223f;
    return t * fl_fast_exp(p - z * z);
}

/* The normal CDF 0.5 (1 + erf(x / sqrt 2)): 1 - erfc/2 above 0, erfc/2
 * below, so the tail keeps its relative accuracy. */
static inline __attribute__((always_inline)) float fl_fast_norm_cdf(float x) {
    const float h = 0.5f * fl_fast_erfc_abs(x * 0.70710678118654752f);
    return fl_nan_through(x, x >= 0.0f ? 1.0f - h : h);
}

#if defined(__x86_64__) && defined(__GNUC__)
#define FL_HAVE_AVX2_TARGET 1
#define FL_AVX2_TARGET __attribute__((target("avx2,fma")))
#else
#define FL_HAVE_AVX2_TARGET 0
#define FL_AVX2_TARGET
#endif

/* 1 when this CPU has AVX2 and FMA (code with FL_AVX2_TARGET may run). */
static inline int fl_cpu_avx2(void) {
#if FL_HAVE_AVX2_TARGET
    static int v = -1;
    int s = __atomic_load_n(&v, __ATOMIC_RELAXED);
    if (s < 0) {
        __builtin_cpu_init();
        s = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        __atomic_store_n(&v, s, __ATOMIC_RELAXED);
    }
    return s;
#else
    return 0;
#endif
}

#endif
