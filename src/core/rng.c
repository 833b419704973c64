/*
 * rng.c — the public entry points to the Philox generator (philox.h) and the
 * derived draws the library needs on the host: uniform, normal and
 * permutations (Fisher-Yates driven by Philox, so shuffles replay).
 */
#include "rng.h"

uint32_t fl_philox_u32(uint64_t seed, uint64_t stream, uint64_t index) {
    return fl_philox_block(seed, stream, index >> 2).v[index & 3];
}

float fl_philox_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
    return fl_u32_to_unit(fl_philox_u32(seed, stream, index));
}

void fl_rng_uniform(float *out, int64_t n, float lo, float hi, uint64_t seed, uint64_t stream) {
    for (int64_t b = 0; b * 4 < n; b++) {
        fl_philox4 r = fl_philox_block(seed, stream, (uint64_t)b);
        for (int j = 0; j < 4 && b * 4 + j < n; j++) out[b * 4 + j] = lo + (hi - lo) * fl_u32_to_unit(r.v[j]);
    }
}

void fl_rng_permutation(int64_t *perm, int64_t n, uint64_t seed, uint64_t stream) {
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        /* 64-bit draw, modulo bias below 2^-32 for any n that fits in memory */
        fl_philox4 r = fl_philox_block(seed, stream, (uint64_t)i);
        uint64_t x = ((uint64_t)r.v[0] << 32) | r.v[1];
        int64_t j = (int64_t)(x % (uint64_t)(i + 1));
        int64_t t = perm[i]; perm[i] = perm[j]; perm[j] = t;
    }
}
