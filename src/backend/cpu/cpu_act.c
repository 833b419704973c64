/*
 * cpu_act.c — the element-wise activations other than ReLU on vectors:
 * sigmoid, tanh, ELU, SELU, SiLU (swish), GELU, LeakyReLU, hard sigmoid,
 * hard SiLU, softsign, and the derivatives of those and of softplus and
 * exponential. The per-element formulas in ops/math.h call libm (expm1f,
 * tanhf, erff) one element at a time behind a switch on the activation:
 * a Conv1D with ELU spent 70% of its predict in expm1f. Here the switch is
 * outside the loop and the functions are cpu_fastmath.h's branch-free
 * ones (a few ulp from libm, NaN passed on), so each loop vectorises; it is
 * compiled three times (portable, AVX2, AVX-512) and the CPU picks one. The
 * arithmetic is IEEE single operations without contraction, so the three
 * give the same bits. Single-threaded: callers split the elements.
 */
#include "cpu_internal.h"
#include "cpu_fastmath.h"
#include "cpu_simd.h"
#include "ops/math.h"

/* Keras 3's hard sigmoid, relu6(v + 3) / 6, as fl_hard_sigmoidf */
#define HSIG(v) ((v) <= -3.0f ? 0.0f : ((v) >= 3.0f ? 1.0f : (v) / 6.0f + 0.5f))

/* y = act(x) */
#define FWD_CASES(LOOP)                                                                                   \
    case FL_ACT_LINEAR: LOOP(v); break;                                                                   \
    case FL_ACT_RELU: LOOP(v > 0.0f ? v : 0.0f); break;                                                   \
    case FL_ACT_RELU6: LOOP(v > 0.0f ? (v < 6.0f ? v : 6.0f) : 0.0f); break;                              \
    case FL_ACT_SIGMOID: LOOP(fl_fast_sigmoid(v)); break;                                                 \
    case FL_ACT_TANH: LOOP(fl_fast_tanh(v)); break;                                                       \
    case FL_ACT_LEAKY_RELU: LOOP(v > 0.0f ? v : FL_LEAKY_SLOPE * v); break;                               \
    case FL_ACT_GELU: LOOP(v * fl_fast_norm_cdf(v)); break;                                               \
    case FL_ACT_ELU: LOOP(v > 0.0f ? v : FL_ELU_ALPHA * fl_fast_expm1(v)); break;                         \
    case FL_ACT_SELU: LOOP(v > 0.0f ? FL_SELU_SCALE * v : FL_SELU_SCALE * FL_SELU_ALPHA * fl_fast_expm1(v)); break; \
    case FL_ACT_SILU: LOOP(v * fl_fast_sigmoid(v)); break;                                                \
    case FL_ACT_HARD_SIGMOID: LOOP(HSIG(v)); break;      \
    case FL_ACT_HARD_SILU: LOOP(v * HSIG(v)); break;   \
    case FL_ACT_SOFTSIGN: LOOP(v / (fabsf(v) + 1.0f)); break;

/* the derivative from y = act(x) (fl_act_grad_y's formulas) */
#define GRAD_Y_CASES(LOOP)                                                                                \
    case FL_ACT_LINEAR: break;                                                                            \
    case FL_ACT_RELU: LOOP(u > 0.0f ? 1.0f : 0.0f); break;                                                \
    case FL_ACT_RELU6: LOOP(u > 0.0f && u < 6.0f ? 1.0f : 0.0f); break;                                   \
    case FL_ACT_SIGMOID: LOOP(u * (1.0f - u)); break;                                                     \
    case FL_ACT_TANH: LOOP(1.0f - u * u); break;                                                          \
    case FL_ACT_LEAKY_RELU: LOOP(u > 0.0f ? 1.0f : FL_LEAKY_SLOPE); break;                                \
    case FL_ACT_ELU: LOOP(u > 0.0f ? 1.0f : u + FL_ELU_ALPHA); break;                                     \
    case FL_ACT_HARD_SIGMOID: LOOP(u > 0.0f && u < 1.0f ? 1.0f / 6.0f : 0.0f); break;                     \
    case FL_ACT_SELU: LOOP(u > 0.0f ? FL_SELU_SCALE : u + FL_SELU_SCALE * FL_SELU_ALPHA); break;          \
    case FL_ACT_SOFTPLUS: LOOP(-fl_fast_expm1(-u)); break;                                                \
    case FL_ACT_SOFTSIGN: LOOP((1.0f - fabsf(u)) * (1.0f - fabsf(u))); break;                             \
    case FL_ACT_EXPONENTIAL: LOOP(u); break;

/* the derivative from x and y (fl_act_grad_x's formulas) */
#define GRAD_X_CASES(LOOP)                                                                                \
    case FL_ACT_LINEAR: LOOP(1.0f); break;                                                                \
    case FL_ACT_RELU: LOOP(v > 0.0f ? 1.0f : 0.0f); break;                                                \
    case FL_ACT_RELU6: LOOP(v > 0.0f && v < 6.0f ? 1.0f : 0.0f); break;                                   \
    case FL_ACT_SIGMOID: LOOP(u * (1.0f - u)); break;                                                     \
    case FL_ACT_TANH: LOOP(1.0f - u * u); break;                                                          \
    case FL_ACT_LEAKY_RELU: LOOP(v > 0.0f ? 1.0f : FL_LEAKY_SLOPE); break;                                \
    case FL_ACT_ELU: LOOP(v > 0.0f ? 1.0f : u + FL_ELU_ALPHA); break;                                     \
    case FL_ACT_SELU: LOOP(v > 0.0f ? FL_SELU_SCALE : u + FL_SELU_SCALE * FL_SELU_ALPHA); break;          \
    case FL_ACT_GELU: LOOP(fl_fast_norm_cdf(v) + v * 0.39894228040143268f * fl_fast_exp(-0.5f * v * v)); break; \
    case FL_ACT_SILU: LOOP(fl_fast_sigmoid(v) * (1.0f + v * (1.0f - fl_fast_sigmoid(v)))); break;         \
    case FL_ACT_HARD_SIGMOID: LOOP(v > -3.0f && v < 3.0f ? 1.0f / 6.0f : 0.0f); break;                    \
    case FL_ACT_HARD_SILU:                                                                                \
        LOOP(HSIG(v) + (v > -3.0f && v < 3.0f ? v / 6.0f : 0.0f)); \
        break;                                                                                            \
    case FL_ACT_SOFTPLUS: LOOP(fl_fast_sigmoid(v)); break;                                                \
    case FL_ACT_SOFTSIGN: LOOP(1.0f / ((fabsf(v) + 1.0f) * (fabsf(v) + 1.0f))); break;                    \
    case FL_ACT_EXPONENTIAL: LOOP(u); break;

#define DEFINE_LEVEL(L, ATTR)                                                                              \
    ATTR static int fwd_##L(int act, int64_t n, const float *x, float *y) {                      \
        switch (act) {                                                                                    \
        FWD_CASES(FWD_LOOP)                                                                               \
        default: return 0;                                                                                \
        }                                                                                                 \
        return 1;                                                                                         \
    }                                                                                                     \
    ATTR static int grad_y_##L(int act, int64_t n, const float *y, float *g) {          \
        switch (act) {                                                                                    \
        GRAD_Y_CASES(GY_LOOP)                                                                             \
        default: return 0;                                                                                \
        }                                                                                                 \
        return 1;                                                                                         \
    }                                                                                                     \
    ATTR static int grad_x_##L(int act, int64_t n, const float *x, const float *y,      \
                               const float *dy, float *dx, float beta) {                \
        if (beta == 0.0f) {                                                                               \
            switch (act) {                                                                                \
            GRAD_X_CASES(GX_LOOP0)                                                                        \
            default: return 0;                                                                            \
            }                                                                                             \
        } else {                                                                                          \
            switch (act) {                                                                                \
            GRAD_X_CASES(GX_LOOP1)                                                                        \
            default: return 0;                                                                            \
            }                                                                                             \
        }                                                                                                 \
        return 1;                                                                                         \
    }                                                                                                     \
    ATTR static void elu_##L(int64_t n, float alpha, const float *x, float *y) {                          \
        FWD_LOOP(v > 0.0f ? v : alpha * fl_fast_expm1(v));                                               \
    }                                                                                                     \
    ATTR static void relu_p_##L(int64_t n, float lo, float th, float hi, const float *x, float *y) {      \
        FWD_LOOP(v > th ? (v < hi ? v : hi) : (v < th ? lo * (v - th) : 0.0f));                           \
    }                                                                                                     \
    ATTR static void pact_grad_##L(int64_t n, int elu, float lo, float th, float hi, const float *x,      \
                                   const float *y, const float *dy, float *dx, float beta) {              \
        if (elu && beta == 0.0f) GX_LOOP0(v > 0.0f ? 1.0f : u + lo)                                       \
        else if (elu) GX_LOOP1(v > 0.0f ? 1.0f : u + lo)                                                  \
        else if (beta == 0.0f) GX_LOOP0(v > th ? (v < hi ? 1.0f : 0.0f) : (v < th ? lo : 0.0f))           \
        else GX_LOOP1(v > th ? (v < hi ? 1.0f : 0.0f) : (v < th ? lo : 0.0f))                             \
    }

/* x may be y: the loads come before the stores in each iteration */
#define FWD_LOOP(expr) _Pragma("omp simd") for (int64_t i = 0; i < n; i++) { const float v = x[i]; y[i] = (expr); }
#define GY_LOOP(expr) _Pragma("omp simd") for (int64_t i = 0; i < n; i++) { const float u = y[i]; g[i] *= (expr); }
#define GX_LOOP0(expr) _Pragma("omp simd") for (int64_t i = 0; i < n; i++) { const float v = x[i], u = y[i]; (void)v; (void)u; dx[i] = dy[i] * (expr); }
#define GX_LOOP1(expr) _Pragma("omp simd") for (int64_t i = 0; i < n; i++) { const float v = x[i], u = y[i]; (void)v; (void)u; dx[i] += dy[i] * (expr); }

DEFINE_LEVEL(plain, )
#if FL_HAVE_AVX2_TARGET
DEFINE_LEVEL(avx2, FL_AVX2_TARGET)
#endif
#if FL_HAVE_AVX512
DEFINE_LEVEL(avx512, FL_AVX512)
#endif

static int g_forced = -1;
void fl_cpu_act_force_level(int level) { __atomic_store_n(&g_forced, level, __ATOMIC_RELAXED); }

/* 2: AVX-512, 1: AVX2 with FMA, 0: the portable loops (or a lower one a test forced) */
static int level(void) {
    const int f = __atomic_load_n(&g_forced, __ATOMIC_RELAXED);
    if (f == 0) return 0;
#if FL_HAVE_AVX2_TARGET
    if (f == 1 && fl_cpu_avx2()) return 1;
#endif
#if FL_HAVE_AVX512
    if (fl_cpu_simd()) return 2;
#endif
#if FL_HAVE_AVX2_TARGET
    if (fl_cpu_avx2()) return 1;
#endif
    return 0;
}

#if FL_HAVE_AVX512 && FL_HAVE_AVX2_TARGET
#define DISPATCH(name, ...) \
    (level() == 2 ? name##_avx512(__VA_ARGS__) : level() == 1 ? name##_avx2(__VA_ARGS__) : name##_plain(__VA_ARGS__))
#elif FL_HAVE_AVX2_TARGET
#define DISPATCH(name, ...) (level() == 1 ? name##_avx2(__VA_ARGS__) : name##_plain(__VA_ARGS__))
#else
#define DISPATCH(name, ...) name##_plain(__VA_ARGS__)
#endif

int fl_cpu_act_vec(int act, int64_t n, const float *x, float *y) { return DISPATCH(fwd, act, n, x, y); }

int fl_cpu_act_grad_y_vec(int act, int64_t n, const float *y, float *g) { return DISPATCH(grad_y, act, n, y, g); }

int fl_cpu_act_grad_x_vec(int act, int64_t n, const float *x, const float *y, const float *dy, float *dx,
                          float beta) {
    return DISPATCH(grad_x, act, n, x, y, dy, dx, beta);
}

void fl_cpu_elu_vec(int64_t n, float alpha, const float *x, float *y) { DISPATCH(elu, n, alpha, x, y); }

void fl_cpu_relu_p_vec(int64_t n, float lo, float th, float hi, const float *x, float *y) {
    DISPATCH(relu_p, n, lo, th, hi, x, y);
}

void fl_cpu_pact_grad_vec(int64_t n, int elu, float lo, float th, float hi, const float *x, const float *y,
                          const float *dy, float *dx, float beta) {
    DISPATCH(pact_grad, n, elu, lo, th, hi, x, y, dy, dx, beta);
}
