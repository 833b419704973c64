/*
 * cpu_vec.h — one vector width's float operations under names that do not
 * say the width, so that a kernel is written once and compiled for AVX-512
 * (16 lanes, cpu_avx512.c) and for AVX2+FMA (8 lanes, cpu_avx2.c): the
 * micro-kernel family (cpu_microkernel.h) and Winograd's transforms
 * (cpu_winograd_vec.h). Define FL_VEC_BITS as 512 or 256, then include this
 * file; it may be included again with the other width (it undefines what it
 * defined first). Only for code compiled for that width (VF_TARGET), called
 * after the CPU was found to have it.
 *
 *     vf, vmask         a vector of VL floats; a choice of lanes
 *     VF_TARGET         the function attribute of code that uses them
 *     VF_(name)         name_512 or name_256: a kernel's per-width name
 *     vm_first(n)       lanes [0, n) (n >= VL: all)
 *     vf_load/store     VL floats, unaligned
 *     vf_loadm(m, p)    the lanes of m, 0 elsewhere (memory outside m not read)
 *     vf_storem(p,m,v)  the lanes of m (memory outside m not written)
 *     vf_loadf(full, m, p), vf_storef(full, p, m, v): a plain load or store
 *                       where `full` (all VL lanes; a constant once inlined),
 *                       else masked (AVX2's masked stores are slow on AMD)
 *     vf_bcast(p)       *p in every lane
 *     vf_keep_gt0(g, v) v where g > 0, +0 elsewhere (and where g is NaN)
 *
 * Every operation is the same IEEE single-precision operation lane by lane
 * on both widths (vfmadd one rounding, min and max with the same operand
 * order), so a kernel written with them gives the same bits on both.
 */
#ifndef FL_VEC_BITS
#error "define FL_VEC_BITS (512 or 256) before including cpu_vec.h"
#endif

#undef VL
#undef VF_TARGET
#undef VF_
#undef VF_CAT
#undef VF_CAT2
#undef vf
#undef vmask
#undef vm_first
#undef vf_zero
#undef vf_set1
#undef vf_load
#undef vf_store
#undef vf_loadm
#undef vf_storem
#undef vf_loadf
#undef vf_storef
#undef vf_bcast
#undef vf_add
#undef vf_sub
#undef vf_mul
#undef vf_max
#undef vf_min
#undef vf_fmadd
#undef vf_keep_gt0

#include <immintrin.h>

#define VF_CAT2(a, b) a##_##b
#define VF_CAT(a, b) VF_CAT2(a, b)
#define VF_(name) VF_CAT(name, FL_VEC_BITS)

#if FL_VEC_BITS == 512

#define VL 16
#define VF_TARGET FL_AVX512
#define vf __m512
#define vmask __mmask16
#define vm_first(n) ((__mmask16)((n) >= 16 ? 0xFFFF : (1u << (n)) - 1))
#define vf_zero() _mm512_setzero_ps()
#define vf_set1(x) _mm512_set1_ps(x)
#define vf_load(p) _mm512_loadu_ps(p)
#define vf_store(p, v) _mm512_storeu_ps((p), (v))
#define vf_loadm(m, p) _mm512_maskz_loadu_ps((m), (p))
#define vf_storem(p, m, v) _mm512_mask_storeu_ps((p), (m), (v))
#define vf_loadf(full, m, p) ((full) ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps((m), (p)))
#define vf_storef(full, p, m, v)                                                                                \
    do {                                                                                                       \
        if (full) _mm512_storeu_ps((p), (v));                                                                  \
        else _mm512_mask_storeu_ps((p), (m), (v));                                                             \
    } while (0)
#define vf_bcast(p) _mm512_set1_ps(*(p))
#define vf_add(a, b) _mm512_add_ps((a), (b))
#define vf_sub(a, b) _mm512_sub_ps((a), (b))
#define vf_mul(a, b) _mm512_mul_ps((a), (b))
#define vf_max(a, b) _mm512_max_ps((a), (b))
#define vf_min(a, b) _mm512_min_ps((a), (b))
#define vf_fmadd(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define vf_keep_gt0(g, v) _mm512_maskz_mov_ps(_mm512_cmp_ps_mask((g), _mm512_setzero_ps(), _CMP_GT_OQ), (v))

#elif FL_VEC_BITS == 256

#define VL 8
#define VF_TARGET FL_AVX2_TARGET
#define vf __m256
#define vmask __m256i
#define vm_first(n) _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
#define vf_zero() _mm256_setzero_ps()
#define vf_set1(x) _mm256_set1_ps(x)
#define vf_load(p) _mm256_loadu_ps(p)
#define vf_store(p, v) _mm256_storeu_ps((p), (v))
#define vf_loadm(m, p) _mm256_maskload_ps((p), (m))
#define vf_storem(p, m, v) _mm256_maskstore_ps((p), (m), (v))
#define vf_loadf(full, m, p) ((full) ? _mm256_loadu_ps(p) : _mm256_maskload_ps((p), (m)))
#define vf_storef(full, p, m, v)                                                                                \
    do {                                                                                                       \
        if (full) _mm256_storeu_ps((p), (v));                                                                  \
        else _mm256_maskstore_ps((p), (m), (v));                                                               \
    } while (0)
#define vf_bcast(p) _mm256_broadcast_ss(p)
#define vf_add(a, b) _mm256_add_ps((a), (b))
#define vf_sub(a, b) _mm256_sub_ps((a), (b))
#define vf_mul(a, b) _mm256_mul_ps((a), (b))
#define vf_max(a, b) _mm256_max_ps((a), (b))
#define vf_min(a, b) _mm256_min_ps((a), (b))
#define vf_fmadd(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define vf_keep_gt0(g, v) _mm256_and_ps(_mm256_cmp_ps((g), _mm256_setzero_ps(), _CMP_GT_OQ), (v))

#else
#error "FL_VEC_BITS must be 512 or 256"
#endif
