/*
 * math.h — per-element formulas written once and used by every backend:
 * activations and their derivatives, the optimizer updates. `FL_HD` makes
 * them host+device functions under nvcc and static inline under a C
 * compiler, so the CPU tests already check the formulas the GPU runs.
 */
#ifndef FL_OPS_MATH_H
#define FL_OPS_MATH_H

#include <math.h>
#include "core/philox.h"

enum { FL_ACT_LINEAR = 0, FL_ACT_RELU, FL_ACT_SIGMOID, FL_ACT_TANH, FL_ACT_SOFTMAX,
       FL_ACT_LEAKY_RELU, FL_ACT_GELU, FL_ACT_ELU };

#define FL_LEAKY_SLOPE 0.2f /* keras.activations.leaky_relu default negative_slope */
#define FL_ELU_ALPHA 1.0f

FL_HD float fl_sigmoidf(float x) {
    /* no overflow for large |x| */
    if (x >= 0) { float e = expf(-x); return 1.0f / (1.0f + e); }
    float e = expf(x);
    return e / (1.0f + e);
}

/* y = act(x) for the element-wise activations (not softmax). */
FL_HD float fl_act_forward(int act, float x) {
    switch (act) {
    case FL_ACT_RELU: return x > 0 ? x : 0.0f;
    case FL_ACT_SIGMOID: return fl_sigmoidf(x);
    case FL_ACT_TANH: return tanhf(x);
    case FL_ACT_LEAKY_RELU: return x > 0 ? x : FL_LEAKY_SLOPE * x;
    case FL_ACT_GELU: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case FL_ACT_ELU: return x > 0 ? x : FL_ELU_ALPHA * expm1f(x);
    default: return x;
    }
}

/* True for activations whose derivative follows from the output y alone;
 * only those are fused into Dense/Conv2D (which keep y, not x). */
FL_HD int fl_act_grad_from_output(int act) {
    return act == FL_ACT_LINEAR || act == FL_ACT_RELU || act == FL_ACT_SIGMOID || act == FL_ACT_TANH ||
           act == FL_ACT_LEAKY_RELU || act == FL_ACT_ELU;
}

/* d act / dx expressed through y = act(x) (see fl_act_grad_from_output). */
FL_HD float fl_act_grad_y(int act, float y) {
    switch (act) {
    case FL_ACT_RELU: return y > 0 ? 1.0f : 0.0f;
    case FL_ACT_SIGMOID: return y * (1.0f - y);
    case FL_ACT_TANH: return 1.0f - y * y;
    case FL_ACT_LEAKY_RELU: return y > 0 ? 1.0f : FL_LEAKY_SLOPE;
    case FL_ACT_ELU: return y > 0 ? 1.0f : y + FL_ELU_ALPHA;
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
    default: return fl_act_grad_y(act, y);
    }
}

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

#endif
