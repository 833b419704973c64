/*
 * rng.h — host-side random draws built on Philox (see philox.h).
 * Streams: each consumer (a layer's initializer, a dropout layer, the
 * shuffler) uses its own stream number so draws never overlap.
 */
#ifndef FL_RNG_H
#define FL_RNG_H

#include "flynn/flynn.h"
#include "philox.h"

void fl_rng_uniform(float *out, int64_t n, float lo, float hi, uint64_t seed, uint64_t stream);
void fl_rng_permutation(int64_t *perm, int64_t n, uint64_t seed, uint64_t stream);

#endif
