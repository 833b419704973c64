/*
 * dialect.h — the few words flynn's GPU kernels are written in, so that one source compiles as CUDA (nvcc,
 * in libflynn_cuda.so) and as OpenCL C 1.2 (the OpenCL driver, at run time, in libflynn_opencl.so).
 *
 *   FL_KERNEL            a kernel:                      __global__ void        / __kernel void
 *   FL_ROW_KERNEL        a kernel of row groups (FL_ROW_LOOP below)
 *   FL_DEV               a device helper:               __device__ inline      / static inline
 *   FL_G                 global memory (pointers):      nothing                / __global
 *   FL_BUF(T, x)         a buffer parameter x of T:     T *x                   / __global T *x_b_, long x_o_
 *   FL_BIND(T, x)        at the kernel's top: x points  nothing                / x = x_b_ + x_o_ (NULL stays NULL)
 *                        at its first element
 *   FL_TID, FL_BID       thread in its block, block     threadIdx.x, blockIdx.x / get_local_id(0), get_group_id(0)
 *   FL_BDIM, FL_GDIM     threads a block, blocks        blockDim.x, gridDim.x  / get_local_size(0), get_num_groups(0)
 *   FL_TIDY, FL_BIDY     the same along y (two-dimensional launches)
 *   FL_FOR(e, n)         a grid-stride loop over [0, n)
 *   FL_ROW_COLS(j, n)    in a row group, the columns [0, n) this lane takes
 *   FL_SHARED            block-shared memory, declared at the kernel's outer scope (OpenCL allows no other place)
 *   FL_SYNC()            a barrier of the block's threads (every thread must reach it)
 *
 * OpenCL 1.2 has no pointer into the middle of a buffer: the host passes each buffer as the buffer and an
 * element offset (FL_BUF), as ggml's OpenCL kernels do, and FL_BIND makes the pointer back. Nothing else
 * differs: the per-element formulas (src/ops/math.h, core/philox.h) compile under both, and on the CPU.
 * CUDA-only features (warp shuffles, __ldg, vector loads) do not appear in a shared kernel; where CUDA's
 * host code wants them, it keeps them in its own glue.
 */
#ifndef FL_KERNELS_DIALECT_H
#define FL_KERNELS_DIALECT_H

#if defined(__OPENCL_VERSION__)

#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef long int64_t;
typedef ulong uint64_t;
typedef int int32_t;
typedef uint uint32_t;
typedef uchar uint8_t;

#define FL_KERNEL __kernel void
/* a kernel launched in row groups: OpenCL knows the work-group's size when it compiles */
#define FL_ROW_KERNEL __kernel __attribute__((reqd_work_group_size(FL_ROW_LANES, 1, 1))) void
#define FL_DEV static inline
#define FL_G __global
#define FL_BUF(T, x) __global T *x##_b_, long x##_o_
#define FL_BIND(T, x) __global T *x = x##_b_ ? x##_b_ + x##_o_ : 0
#define FL_TID ((int)get_local_id(0))
#define FL_BID ((int64_t)get_group_id(0))
#define FL_BDIM ((int)get_local_size(0))
#define FL_GDIM ((int64_t)get_num_groups(0))
#define FL_TIDY ((int)get_local_id(1))
#define FL_BIDY ((int64_t)get_group_id(1))
#define FL_FOR(e, n) for (int64_t e = (int64_t)get_global_id(0); e < (n); e += (int64_t)get_global_size(0))
#define FL_SHARED __local
#define FL_SYNC() barrier(CLK_LOCAL_MEM_FENCE)

/* the C library's float names, which OpenCL C spells without the f (its built-ins are overloaded) */
#define expf exp
#define logf log
#define log1pf log1p
#define expm1f expm1
#define tanhf tanh
#define erff erf
#define sqrtf sqrt
#define powf pow
#define fabsf fabs
#define fmaxf fmax
#define fminf fmin
#define floorf floor
#define ceilf ceil
#define sinf sin
#define cosf cos

/* Row groups: FL_ROW_LANES threads share one row (a reduction over its columns; every lane gets the result).
 * OpenCL: a work-group of FL_ROW_LANES per row, reducing through local memory (the kernel declares
 * FL_ROW_SCRATCH; a helper that reduces takes FL_ROW_PARAMS and is called with FL_ROW_ARGS). The launch
 * must use work-groups of exactly FL_ROW_LANES. */
#define FL_ROW_LANES 32
#define FL_ROW_SCRATCH __local float fl_rsf_[FL_ROW_LANES]; __local int fl_rsi_[FL_ROW_LANES]; (void)fl_rsi_
#define FL_ROW_PARAMS , __local float *fl_rsf_, __local int *fl_rsi_
#define FL_ROW_ARGS , fl_rsf_, fl_rsi_
#define FL_LANE ((int)get_local_id(0))
/* the row's columns j < n this lane takes (lane, lane + FL_ROW_LANES, ...): a loop every lane runs the same
 * number of times, its body guarded. PoCL 3.1 ran the body of `for (j = lane; j < n; j += FL_ROW_LANES)` once
 * for the lanes with no column (n < FL_ROW_LANES) in a kernel with barriers: k_loss wrote past its gradient
 * (test_gpu_parity's loss canary) */
#define FL_ROW_COLS(j, n)                                                                                           \
    for (int j##_b_ = 0, j = FL_LANE; j##_b_ < (n); j##_b_ += FL_ROW_LANES, j += FL_ROW_LANES)                      \
        if (j >= (n)) {                                                                                             \
        } else
#define FL_ROW_LOOP(r, rows) for (int64_t r = (int64_t)get_group_id(0); r < (rows); r += (int64_t)get_num_groups(0))
#define FL_ROW_SUM(v) fl_row_sum_((v), fl_rsf_)
#define FL_ROW_MAX(v) fl_row_max_((v), fl_rsf_)
#define FL_ROW_SUMI(v) fl_row_sumi_((v), fl_rsi_)
#define FL_ROW_ARGMAX(v, i) fl_row_argmax_((v), (i), fl_rsf_, fl_rsi_)

/* a tree over the group's lanes in local memory: STEP combines s[l] with s[l + o] */
#define FL_ROW_TREE_(T, name, STEP)                                                                                 \
    static inline T name(T v, __local T *s) {                                                                       \
        const int l = (int)get_local_id(0);                                                                         \
        s[l] = v;                                                                                                   \
        barrier(CLK_LOCAL_MEM_FENCE);                                                                               \
        for (int o = FL_ROW_LANES / 2; o > 0; o >>= 1) {                                                            \
            if (l < o) STEP;                                                                                        \
            barrier(CLK_LOCAL_MEM_FENCE);                                                                           \
        }                                                                                                           \
        const T r = s[0];                                                                                           \
        barrier(CLK_LOCAL_MEM_FENCE);                                                                               \
        return r;                                                                                                   \
    }
FL_ROW_TREE_(float, fl_row_sum_, s[l] += s[l + o])
FL_ROW_TREE_(float, fl_row_max_, s[l] = s[l + o] > s[l] ? s[l + o] : s[l])
FL_ROW_TREE_(int, fl_row_sumi_, s[l] += s[l + o])
/* the first position of the largest value: v, i the lane's candidate (i = INT_MAX: none) */
static inline int fl_row_argmax_(float v, int i, __local float *sv, __local int *si) {
    const int l = (int)get_local_id(0);
    sv[l] = v;
    si[l] = i;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int o = FL_ROW_LANES / 2; o > 0; o >>= 1) {
        if (l < o) {
            float w = sv[l + o];
            int k = si[l + o];
            if (k != INT_MAX && (si[l] == INT_MAX || w > sv[l] || (w == sv[l] && k < si[l]))) { sv[l] = w; si[l] = k; }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const int r = si[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

#else /* CUDA */

#include <limits.h>
#include <stdint.h>

#define FL_KERNEL __global__ void
#define FL_ROW_KERNEL __global__ void
#define FL_DEV __device__ __forceinline__
#define FL_G
#define FL_BUF(T, x) T *x
#define FL_BIND(T, x) (void)0
#define FL_TID ((int)threadIdx.x)
#define FL_BID ((int64_t)blockIdx.x)
#define FL_BDIM ((int)blockDim.x)
#define FL_GDIM ((int64_t)gridDim.x)
#define FL_TIDY ((int)threadIdx.y)
#define FL_BIDY ((int64_t)blockIdx.y)
#define FL_FOR(e, n) \
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < (n); e += (int64_t)gridDim.x * blockDim.x)
#define FL_SHARED __shared__
#define FL_SYNC() __syncthreads()

/* Row groups: one warp per row, lanes striding over the row's columns, combined with butterfly shuffles
 * (every lane gets the result; a fixed order, so deterministic). The whole warp walks the same rows; a
 * block holds several warps (the launch's choice). */
#define FL_ROW_LANES 32
#define FL_ROW_SCRATCH (void)0
#define FL_ROW_PARAMS
#define FL_ROW_ARGS
#define FL_LANE ((int)(threadIdx.x & 31))
#define FL_ROW_COLS(j, n) for (int j = FL_LANE; j < (n); j += FL_ROW_LANES)
#define FL_ROW_LOOP(r, rows)                                                                                        \
    for (int64_t r = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32; r < (rows);                             \
         r += (int64_t)gridDim.x * blockDim.x / 32)
#define FL_ROW_SUM(v) fl_warp_sum(v)
#define FL_ROW_MAX(v) fl_warp_max(v)
#define FL_ROW_SUMI(v) fl_warp_sumi(v)
#define FL_ROW_ARGMAX(v, i) fl_warp_argmax((v), (i))

__device__ __forceinline__ float fl_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ int fl_warp_sumi(int v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float fl_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = w > v ? w : v;
    }
    return v;
}
/* the first position of the largest value (as `if (p[j] > p[am]) am = j`): v, i the lane's candidate
 * (i = INT_MAX: none) */
__device__ __forceinline__ int fl_warp_argmax(float v, int i) {
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        int k = __shfl_xor_sync(0xffffffffu, i, o);
        if (k != INT_MAX && (i == INT_MAX || w > v || (w == v && k < i))) { v = w; i = k; }
    }
    return i;
}

#endif

#endif
