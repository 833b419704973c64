/*
 * math.h — per-element formulas written once and used by every backend:
 * activations and their derivatives, the optimizer updates. `FL_HD` makes
 * them host+device functions under nvcc and static inline under a C
 * compiler, so the CPU tests already check the formulas the GPU runs.
 */
#ifndef FL_OPS_MATH_H
#define FL_OPS_MATH_H

#if !defined(__OPENCL_VERSION__) /* OpenCL C has the math built in */
#include <math.h>
#endif
#include "core/philox.h"
#include "backend/backend.h"
#include "flynn/activations.h"

/* Activation codes: the same values as the public fl_activation (both are
 * made from flynn/activations.h; layers.c asserts that they agree). */
enum {
#define FL_ACT_ENUM_(e, name) FL_ACT_##e,
    FL_ACTIVATION_LIST(FL_ACT_ENUM_)
#undef FL_ACT_ENUM_
    FL_ACT_COUNT
};

#define FL_LEAKY_SLOPE 0.2f /* keras.activations.leaky_relu default negative_slope */
#define FL_ELU_ALPHA 1.0f
#define FL_SELU_ALPHA 1.67326324235437728f /* keras.activations.selu */
#define FL_SELU_SCALE 1.05070098735548049f

FL_HD float fl_sigmoidf(float x) {
    /* no overflow for large |x| */
    if (x >= 0) { float e = expf(-x); return 1.0f / (1.0f + e); }
    float e = expf(x);
    return e / (1.0f + e);
}

/* softplus(x) = log(1 + exp(x)) without overflow for large |x|. */
FL_HD float fl_softplusf(float x) { return x > 0 ? x + log1pf(expf(-x)) : log1pf(expf(x)); }

/* Keras 3's hard_sigmoid: relu6(x + 3) / 6. */
FL_HD float fl_hard_sigmoidf(float x) { return x <= -3.0f ? 0.0f : (x >= 3.0f ? 1.0f : x / 6.0f + 0.5f); }

/* y = act(x) for the element-wise activations (not softmax). */
FL_HD float fl_act_forward(int act, float x) {
    switch (act) {
    case FL_ACT_RELU: return x > 0 ? x : 0.0f;
    case FL_ACT_SIGMOID: return fl_sigmoidf(x);
    case FL_ACT_TANH: return tanhf(x);
    case FL_ACT_LEAKY_RELU: return x > 0 ? x : FL_LEAKY_SLOPE * x;
    case FL_ACT_GELU: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case FL_ACT_ELU: return x > 0 ? x : FL_ELU_ALPHA * expm1f(x);
    case FL_ACT_SILU: return x * fl_sigmoidf(x);
    case FL_ACT_RELU6: return x > 0 ? (x < 6.0f ? x : 6.0f) : 0.0f;
    case FL_ACT_HARD_SIGMOID: return fl_hard_sigmoidf(x);
    case FL_ACT_HARD_SILU: return x * fl_hard_sigmoidf(x);
    case FL_ACT_SELU: return x > 0 ? FL_SELU_SCALE * x : FL_SELU_SCALE * FL_SELU_ALPHA * expm1f(x);
    case FL_ACT_SOFTPLUS: return fl_softplusf(x);
    case FL_ACT_SOFTSIGN: return x / (fabsf(x) + 1.0f);
    case FL_ACT_EXPONENTIAL: return expf(x);
    default: return x;
    }
}

/* True for activations whose derivative follows from the output y alone;
 * only those are fused into Dense/Conv2D (which keep y, not x). */
FL_HD int fl_act_grad_from_output(int act) {
    switch (act) {
    case FL_ACT_LINEAR: case FL_ACT_RELU: case FL_ACT_SIGMOID: case FL_ACT_TANH: case FL_ACT_LEAKY_RELU:
    case FL_ACT_ELU: case FL_ACT_RELU6: case FL_ACT_HARD_SIGMOID: case FL_ACT_SELU: case FL_ACT_SOFTPLUS:
    case FL_ACT_SOFTSIGN: case FL_ACT_EXPONENTIAL:
        return 1;
    default:
        return 0;
    }
}

/* d act / dx expressed through y = act(x) (see fl_act_grad_from_output).
 * At the kinks (relu6 at 0 and 6, hard_sigmoid at -3 and 3) the derivative
 * is 0, as in JAX and TensorFlow. */
FL_HD float fl_act_grad_y(int act, float y) {
    switch (act) {
    case FL_ACT_RELU: return y > 0 ? 1.0f : 0.0f;
    case FL_ACT_SIGMOID: return y * (1.0f - y);
    case FL_ACT_TANH: return 1.0f - y * y;
    case FL_ACT_LEAKY_RELU: return y > 0 ? 1.0f : FL_LEAKY_SLOPE;
    case FL_ACT_ELU: return y > 0 ? 1.0f : y + FL_ELU_ALPHA;
    case FL_ACT_RELU6: return y > 0 && y < 6.0f ? 1.0f : 0.0f;
    case FL_ACT_HARD_SIGMOID: return y > 0 && y < 1.0f ? 1.0f / 6.0f : 0.0f;
    case FL_ACT_SELU: return y > 0 ? FL_SELU_SCALE : y + FL_SELU_SCALE * FL_SELU_ALPHA;
    case FL_ACT_SOFTPLUS: return -expm1f(-y); /* sigmoid(x) = 1 - exp(-softplus(x)) */
    case FL_ACT_SOFTSIGN: { float a = 1.0f - fabsf(y); return a * a; } /* 1 / (1 + |x|)^2 */
    case FL_ACT_EXPONENTIAL: return y;
    default: return 1.0f;
    }
}

/* d act / dx from x (and y), for every element-wise activation. */
FL_HD float fl_act_grad_x(int act, float x, float y) {
    switch (act) {
    case FL_ACT_GELU: {
        float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
        float pdf = 0.39894228040143268f * expf(-0.5f * x * x);
        return cdf + x * pdf;
    }
    case FL_ACT_RELU: return x > 0 ? 1.0f : 0.0f;
    case FL_ACT_LEAKY_RELU: return x > 0 ? 1.0f : FL_LEAKY_SLOPE;
    case FL_ACT_ELU: return x > 0 ? 1.0f : y + FL_ELU_ALPHA;
    case FL_ACT_SILU: { float s = fl_sigmoidf(x); return s * (1.0f + x * (1.0f - s)); }
    case FL_ACT_RELU6: return x > 0 && x < 6.0f ? 1.0f : 0.0f;
    case FL_ACT_HARD_SIGMOID: return x > -3.0f && x < 3.0f ? 1.0f / 6.0f : 0.0f;
    case FL_ACT_HARD_SILU: return fl_hard_sigmoidf(x) + (x > -3.0f && x < 3.0f ? x / 6.0f : 0.0f);
    case FL_ACT_SELU: return x > 0 ? FL_SELU_SCALE : y + FL_SELU_SCALE * FL_SELU_ALPHA;
    case FL_ACT_SOFTPLUS: return fl_sigmoidf(x);
    case FL_ACT_SOFTSIGN: { float a = fabsf(x) + 1.0f; return 1.0f / (a * a); }
    default: return fl_act_grad_y(act, y);
    }
}

/* d max(x, other) / dx (is_max) or d min(x, other) / dx, times dy, as JAX
 * differentiates jnp.maximum/minimum: all of dy to the winner, half to
 * each on a tie. */
FL_HD float fl_minmax_grad(int is_max, float x, float other, float dy) {
    if (x == other) return 0.5f * dy;
    return (is_max ? x > other : x < other) ? dy : 0.0f;
}

/* ---- resizing (UpSampling2D, Resizing: backend.h upsample2d_fwd) ---- */

/* One axis of a resize from n to out values (UpSampling2D: out = n*s),
 * as jax.image.resize with antialias off (Keras 3's UpSampling2D and
 * Resizing). Bilinear: output o reads inputs *i0 (weight 1 - *f) and *i1
 * (weight *f), clamped to [0, n), around the half-pixel source coordinate
 * (o + 0.5) * n / out - 0.5 (in double). */
FL_HD void fl_resize_taps(int o, int n, int out, int *i0, int *i1, float *f) {
    double src = ((double)o + 0.5) * n / out - 0.5, fl = floor(src);
    int a = (int)fl, b = a + 1;
    *f = (float)(src - fl);
    *i0 = a < 0 ? 0 : a >= n ? n - 1 : a;
    *i1 = b < 0 ? 0 : b >= n ? n - 1 : b;
}

/* Nearest: input floor((o + 0.5) * n / out), exactly in integers (JAX's float32 formula gives the same). */
FL_HD int fl_resize_nearest(int o, int n, int out) { return (int)(((2 * (int64_t)o + 1) * n) / (2 * (int64_t)out)); }

/* The weight with which output o reads input i along one axis. */
FL_HD float fl_resize_weight(int bilinear, int o, int i, int n, int out) {
    if (!bilinear) return fl_resize_nearest(o, n, out) == i ? 1.0f : 0.0f;
    int i0, i1;
    float f;
    fl_resize_taps(o, n, out, &i0, &i1, &f);
    return (i0 == i ? 1.0f - f : 0.0f) + (i1 == i ? f : 0.0f);
}

/* Outputs [*o0, *o1) that may read input i (a superset): a bilinear
 * source coordinate within 1 of i, a nearest one within [i, i + 1). */
FL_HD void fl_resize_reach(int i, int n, int out, int *o0, int *o1) {
    int64_t a = (int64_t)(i - 1) * out / n - 1, b = ((int64_t)(i + 2) * out + n - 1) / n + 1;
    *o0 = a < 0 ? 0 : (int)a;
    *o1 = b > out ? out : (int)b;
}

/* ---- parametrized activations (fl_pact_desc, backend.h) ---- */

/* ReLU(max_value, negative_slope, threshold) as keras.activations.relu:
 * x > threshold: min(x, max_value); x < threshold: negative_slope * (x -
 * threshold); x == threshold: 0. LeakyReLU is threshold 0, no max_value.
 * ELU: x > 0 ? x : alpha * (exp(x) - 1). AFFINE (Rescaling): x * scale + offset. */
FL_HD float fl_pact_forward(const fl_pact_desc *p, float x) {
    switch (p->code) {
    case FL_PACT_RELU:
        if (x > p->b) return x < p->c ? x : p->c;
        return x < p->b ? p->a * (x - p->b) : 0.0f;
    case FL_PACT_ELU: return x > 0 ? x : p->a * expm1f(x);
    case FL_PACT_AFFINE: return x * p->a + p->b;
    default: return x;
    }
}

/* d f / dx at x (y = f(x)); 0 at max_value and above, as JAX's clip. */
FL_HD float fl_pact_grad(const fl_pact_desc *p, float x, float y) {
    switch (p->code) {
    case FL_PACT_RELU:
        if (x > p->b) return x < p->c ? 1.0f : 0.0f;
        return x < p->b ? p->a : 0.0f;
    case FL_PACT_ELU: return x > 0 ? 1.0f : y + p->a;
    case FL_PACT_AFFINE: return p->a;
    default: return 1.0f;
    }
}

/* The parameter element that sample element j reads (fl_bcast_desc). */
FL_HD int64_t fl_bcast_index(const fl_bcast_desc *d, int64_t j) {
    int64_t idx = 0;
    for (int k = d->ndim - 1; k >= 0; k--) {
        idx += (j % d->dim[k]) * d->pstride[k];
        j /= d->dim[k];
    }
    return idx;
}

/* The t-th sample element (ascending) that reads parameter element q:
 * q's coordinates on the kept axes, t's (row-major) on the broadcast ones. */
FL_HD int64_t fl_bcast_member(const fl_bcast_desc *d, int64_t q, int64_t t) {
    int64_t j = 0;
    for (int k = d->ndim - 1; k >= 0; k--) {
        int64_t c;
        if (d->pstride[k]) {
            c = (q / d->pstride[k]) % d->dim[k];
        } else {
            c = t % d->dim[k];
            t /= d->dim[k];
        }
        j += c * d->sstride[k];
    }
    return j;
}

#define FL_NORM_EPS 1e-7f /* keras.config.epsilon(): Normalization's floor on sqrt(variance) */

/* Normalization's divisor: max(sqrt(variance), epsilon). */
FL_HD float fl_norm_den(float var) { return fmaxf(sqrtf(var), FL_NORM_EPS); }

/* BatchNormalization's affine x * s + t (s, t per channel), and the input of the ReLU fused after it: the one
 * expression the forward applies and the backward's mask computes again, so that both round alike. A
 * multiply, then an add, never one FMA (C: the build's -ffp-contract=off; CUDA: round-to-nearest intrinsics,
 * which nvcc does not contract; OpenCL: FP_CONTRACT off). */
FL_HD float fl_bn_pre(float x, float s, float t) {
#if defined(__CUDA_ARCH__)
    return __fadd_rn(__fmul_rn(x, s), t);
#else
#if defined(__OPENCL_VERSION__)
#pragma OPENCL FP_CONTRACT OFF
#endif
    return x * s + t;
#endif
}

/* The fused ReLU's (or ReLU6's) derivative at its input v: 1 where 0 < v < hi, slope where v < 0 (a
 * LeakyReLU's; 0 for the ReLU), else 0, as fl_pact_grad's (the two terms never both nonzero, so the sum is
 * exact) */
FL_HD float fl_relu_mask(float v, float hi, float slope) {
    return (float)((v > 0.0f) & (v < hi)) + (v < 0.0f ? slope : 0.0f);
}

/* The Philox stream of a dropout layer at a training step. XOR makes it its
 * own inverse: fl_dropout_stream(fl_dropout_stream(b, s), s) == b, which
 * the CUDA graph replay uses to move a captured stream to a later step. */
FL_HD uint64_t fl_dropout_stream(uint64_t base, int64_t step) { return base ^ ((uint64_t)step << 20); }

/* Adam's step size at step t (1-based): lr * sqrt(1 - b2^t) / (1 - b1^t). */
FL_HD float fl_adam_lr_t(float lr, float b1, float b2, int64_t t) {
    return (float)(lr * sqrt(1.0 - pow((double)b2, (double)t)) / (1.0 - pow((double)b1, (double)t)));
}

/* Keras's gradient clipping (base_optimizer._clip_gradients) of one
 * element; mode as fl_opt_desc.clip_mode (1 clipnorm, 2 clipvalue, 3
 * global_clipnorm); `sumsq` is the sum of squares of the element's tensor
 * (clipnorm) or of all gradients (global_clipnorm). clipnorm: g * clip /
 * max(norm, clip); global: g * clip * min(1 / norm, 1 / clip), NaN for a
 * non-finite norm as Keras's (norm - norm); clipvalue: clamp to +-clip. */
FL_HD float fl_clip_grad(int mode, float clip, float sumsq, float g) {
    if (mode == 1) return g * clip / fmaxf(sumsq > 0.0f ? sqrtf(sumsq) : sumsq, clip);
    if (mode == 2) return fminf(fmaxf(g, -clip), clip);
    if (mode == 3) {
        float norm = sqrtf(sumsq);
        return g * (clip * fminf(1.0f / norm, 1.0f / clip) + (norm - norm));
    }
    return g;
}

/* The GPUs' sums of squares for clipping (backend/kernels/optim.cl): chunks of FL_SUMSQ_CHUNK elements,
 * a block of FL_SUMSQ_THREADS threads each; here because the hosts size the launches and the scratch. */
#define FL_SUMSQ_CHUNK 4096
#define FL_SUMSQ_THREADS 256

/* ---- optimizer updates (Keras 3 formulas; one parameter element) ---- */

/* SGD: m = momentum*m - lr*g; w += nesterov ? momentum*m - lr*g : m.
 * Without momentum: w -= lr*g. */
FL_HD void fl_sgd_update(float *w, float *m, float g, float lr, float momentum, int nesterov) {
    if (momentum == 0.0f) { *w -= lr * g; return; }
    float mm = momentum * *m - lr * g;
    *m = mm;
    *w += nesterov ? momentum * mm - lr * g : mm;
}

/* Adam (and AdamW after the decay step): m += (g-m)(1-b1); v += (g^2-v)(1-b2);
 * w -= lr_t * m / (sqrt(v) + eps), with lr_t = lr*sqrt(1-b2^t)/(1-b1^t). */
FL_HD void fl_adam_update(float *w, float *m, float *v, float g, float lr_t, float b1, float b2, float eps) {
    float mm = *m + (g - *m) * (1.0f - b1);
    float vv = *v + (g * g - *v) * (1.0f - b2);
    *m = mm;
    *v = vv;
    *w -= lr_t * mm / (sqrtf(vv) + eps);
}

/* RMSprop: v = rho*v + (1-rho)g^2; if centered: mg = rho*mg + (1-rho)g and
 * denom = v - mg^2; inc = lr*g/sqrt(denom+eps); with momentum:
 * m = momentum*m + inc, w -= m; else w -= inc. */
FL_HD void fl_rmsprop_update(float *w, float *v, float *m, float *mg, float g, float lr, float rho, float momentum,
                             float eps, int centered) {
    float vv = rho * *v + (1.0f - rho) * g * g;
    *v = vv;
    float denom = vv;
    if (centered) {
        float a = rho * *mg + (1.0f - rho) * g;
        *mg = a;
        denom = vv - a * a;
    }
    float inc = lr * g / sqrtf(denom + eps);
    if (momentum > 0.0f) {
        float mm = momentum * *m + inc;
        *m = mm;
        *w -= mm;
    } else {
        *w -= inc;
    }
}

/* ---- losses and metrics, one row at a time (Keras 3 formulas) ---- */

#define FL_LOSS_EPS 1e-7f /* keras.config.epsilon() */

FL_HD float fl_clipf(float v, float lo, float hi) { return v < lo ? lo : (v > hi ? hi : v); }

/* The loss of one row of c values (codes: backend.h fl_loss_code, inputs:
 * fl_loss_input). p: the prediction (probabilities, or logits); t: the
 * target row (NULL for SCCE, which uses the class index cls). Writes the
 * gradient times s into g (w.r.t. the logits for fused/logit inputs) when g
 * is not NULL; returns the row's loss. */
FL_HD float fl_loss_row(int code, int input, int c, float s, const float *p, const float *t, int cls, float *g) {
    float L = 0;
    switch (code) {
    case FL_LC_CCE:
    case FL_LC_SCCE: {
        if (input == FL_LI_LOGITS) {
            /* log-softmax, stable */
            float mx = p[0];
            for (int j = 1; j < c; j++) mx = p[j] > mx ? p[j] : mx;
            float se = 0;
            for (int j = 0; j < c; j++) se += expf(p[j] - mx);
            float lse = mx + logf(se);
            float tsum = 0;
            for (int j = 0; j < c; j++) {
                float tj = t ? t[j] : (j == cls ? 1.0f : 0.0f);
                L -= tj * (p[j] - lse);
                tsum += tj;
            }
            if (g)
                for (int j = 0; j < c; j++) {
                    float tj = t ? t[j] : (j == cls ? 1.0f : 0.0f);
                    g[j] = s * (expf(p[j] - lse) * tsum - tj);
                }
        } else {
            /* probabilities, as Keras: p / sum(p), clipped to [eps, 1-eps] */
            float ps = 0;
            for (int j = 0; j < c; j++) ps += p[j];
            float tsum = 0;
            for (int j = 0; j < c; j++) {
                float tj = t ? t[j] : (j == cls ? 1.0f : 0.0f);
                if (tj != 0.0f) L -= tj * logf(fl_clipf(p[j] / ps, FL_LOSS_EPS, 1.0f - FL_LOSS_EPS));
                tsum += tj;
            }
            if (g) {
                if (input == FL_LI_SOFTMAX_FUSED) {
                    /* gradient w.r.t. the softmax's logits */
                    for (int j = 0; j < c; j++) {
                        float tj = t ? t[j] : (j == cls ? 1.0f : 0.0f);
                        g[j] = s * (p[j] * tsum - tj);
                    }
                } else {
                    /* d/dp_j of -sum_i t_i log(clip(p_i / S)) */
                    float acc = 0;
                    for (int i = 0; i < c; i++) {
                        float ti = t ? t[i] : (i == cls ? 1.0f : 0.0f);
                        float q = p[i] / ps;
                        if (ti != 0.0f && q > FL_LOSS_EPS && q < 1.0f - FL_LOSS_EPS) acc += ti / ps;
                    }
                    for (int j = 0; j < c; j++) {
                        float tj = t ? t[j] : (j == cls ? 1.0f : 0.0f);
                        float q = p[j] / ps;
                        float direct = (tj != 0.0f && q > FL_LOSS_EPS && q < 1.0f - FL_LOSS_EPS) ? -tj / p[j] : 0.0f;
                        g[j] = s * (direct + acc);
                    }
                }
            }
        }
        break;
    }
    case FL_LC_BCE: {
        for (int j = 0; j < c; j++) {
            float y = t[j];
            if (input == FL_LI_LOGITS) {
                float z = p[j];
                L += fmaxf(z, 0.0f) - z * y + log1pf(expf(-fabsf(z)));
                if (g) g[j] = s / (float)c * (fl_sigmoidf(z) - y);
            } else {
                float q = fl_clipf(p[j], FL_LOSS_EPS, 1.0f - FL_LOSS_EPS);
                L -= y * logf(q) + (1.0f - y) * logf(1.0f - q);
                if (g) {
                    if (input == FL_LI_SIGMOID_FUSED) g[j] = s / (float)c * (p[j] - y);
                    else {
                        int inside = p[j] > FL_LOSS_EPS && p[j] < 1.0f - FL_LOSS_EPS;
                        g[j] = inside ? s / (float)c * (-y / q + (1.0f - y) / (1.0f - q)) : 0.0f;
                    }
                }
            }
        }
        L /= (float)c;
        break;
    }
    case FL_LC_MSE:
    default:
        for (int j = 0; j < c; j++) {
            float e = p[j] - t[j];
            L += e * e;
            if (g) g[j] = s * 2.0f * e / (float)c;
        }
        L /= (float)c;
        break;
    }
    return L;
}

/* One row's metric score: 1/0 for (sparse) categorical accuracy, the
 * fraction of matching outputs for binary accuracy (threshold 0.5).
 * t: the target row (NULL for sparse: the class index is cls). */
FL_HD float fl_metric_row(int code, int c, const float *p, const float *t, int cls) {
    if (code == FL_MC_MAE || code == FL_MC_MSE) { /* Keras: the mean over the last axis */
        float s = 0.0f;
        for (int j = 0; j < c; j++) {
            float d = p[j] - t[j];
            s += code == FL_MC_MAE ? fabsf(d) : d * d;
        }
        return s / (float)c;
    }
    if (code == FL_MC_BINARY) {
        int ok = 0;
        for (int j = 0; j < c; j++) ok += ((p[j] > 0.5f) ? 1.0f : 0.0f) == t[j];
        return (float)ok / (float)c;
    }
    int am = 0;
    for (int j = 1; j < c; j++) if (p[j] > p[am]) am = j;
    if (code != FL_MC_SPARSE_CATEGORICAL) {
        cls = 0;
        for (int j = 1; j < c; j++) if (t[j] > t[cls]) cls = j;
    }
    return am == cls ? 1.0f : 0.0f;
}

#endif
