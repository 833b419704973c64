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
