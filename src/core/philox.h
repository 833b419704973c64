/*
 * philox.h — Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy
 * as 1, 2, 3", SC'11), the counter-based generator behind every random number
 * flynn draws: initial weights, dropout masks and shuffling. A number depends
 * only on (key, counter), never on call order or thread, so the CPU and the
 * GPU produce the same stream. Written once, compiled by C and by CUDA.
 */
#ifndef FL_PHILOX_H
#define FL_PHILOX_H

#if !defined(__OPENCL_VERSION__) /* OpenCL C: backend/kernels/dialect.h gives the fixed-width types */
#include <stdint.h>
#endif

/* a function the CPU, CUDA and OpenCL all compile */
#if defined(__CUDACC__)
#define FL_HD __host__ __device__ __forceinline__
#else
#define FL_HD static inline
#endif
/* global memory, for a pointer parameter that a GPU kernel passes: OpenCL's __global, nothing elsewhere */
#ifndef FL_G
#define FL_G
#endif

typedef struct fl_philox4 { uint32_t v[4]; } fl_philox4;

FL_HD uint32_t fl__mulhilo(uint32_t a, uint32_t b, uint32_t *hi) {
    uint64_t p = (uint64_t)a * (uint64_t)b;
    *hi = (uint32_t)(p >> 32);
    return (uint32_t)p;
}

/* Ten rounds over counter c with key k (the Random123 constants). */
FL_HD fl_philox4 fl_philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
    for (int r = 0; r < 10; r++) {
        uint32_t hi0, hi1;
        uint32_t lo0 = fl__mulhilo(0xD2511F53u, c0, &hi0);
        uint32_t lo1 = fl__mulhilo(0xCD9E8D57u, c2, &hi1);
        uint32_t n0 = hi1 ^ c1 ^ k0;
        uint32_t n2 = hi0 ^ c3 ^ k1;
        c0 = n0; c1 = lo1; c2 = n2; c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    fl_philox4 out = {{c0, c1, c2, c3}};
    return out;
}

/* Four 32-bit numbers for block `index` of `stream` under `seed`. */
FL_HD fl_philox4 fl_philox_block(uint64_t seed, uint64_t stream, uint64_t index) {
    return fl_philox4x32_10((uint32_t)index, (uint32_t)(index >> 32), (uint32_t)stream, (uint32_t)(stream >> 32),
                            (uint32_t)seed, (uint32_t)(seed >> 32));
}

/* u32 -> float in [0, 1) using the top 24 bits (exactly representable). */
FL_HD float fl_u32_to_unit(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }

#endif
