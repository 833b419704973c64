/*
 * test_losses.c — owns the check that flynn's losses (categorical, sparse
 * categorical and binary crossentropy, mean squared error) and accuracy
 * metrics match real Keras 3: the CPU backend's loss kernel, in each input
 * mode train.c uses (probabilities, logits, softmax- and sigmoid-fused), is
 * compared with the Keras loss value and jax.grad gradient recorded in
 * keras_reference.h (tools/keras_reference.py), then with central finite
 * differences of itself on random inputs; the metric kernel is compared with
 * keras.metrics per-sample values.
 */
#include "flynn/flynn.h"
#include "backend/backend.h"
#include "ops/math.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "keras_reference.h"

#define MAXR 16
#define MAXC 8

static const fl_backend *be;

static const char *mode_name(int input) {
    switch (input) {
    case FL_LI_PROBS: return "probs";
    case FL_LI_LOGITS: return "logits";
    case FL_LI_SOFTMAX_FUSED: return "softmax-fused";
    case FL_LI_SIGMOID_FUSED: return "sigmoid-fused";
    }
    return "?";
}

/* The loss kernel as train.c calls it: x is the loss input (probabilities,
 * or logits for the logit and fused modes; a fused mode first applies the
 * output activation, as the model's last layer would). Returns the batch
 * mean of the per-row losses; grad (may be NULL) is w.r.t. x. */
static double run_loss(int code, int input, int rows, int c, const float *x, const float *target, float *grad) {
    float pred[MAXR * MAXC], row_loss[MAXR];
    if (input == FL_LI_SOFTMAX_FUSED) be->act_fwd(FL_ACT_SOFTMAX, rows, c, x, pred);
    else if (input == FL_LI_SIGMOID_FUSED) be->act_fwd(FL_ACT_SIGMOID, rows, c, x, pred);
    else memcpy(pred, x, (size_t)rows * c * sizeof(float));
    fl_loss_desc d = {code, input, rows, c, 1.0f / (float)rows};
    be->loss(&d, pred, target, row_loss, grad);
    double acc = 0;
    be->sum_into(rows, row_loss, 1.0 / (double)rows, &acc);
    return acc;
}

/* One row's loss (for finite differences). */
static double row_loss_of(int code, int input, int rows, int c, const float *x, const float *target, int r) {
    float pred[MAXR * MAXC], row_loss[MAXR];
    if (input == FL_LI_SOFTMAX_FUSED) be->act_fwd(FL_ACT_SOFTMAX, rows, c, x, pred);
    else if (input == FL_LI_SIGMOID_FUSED) be->act_fwd(FL_ACT_SIGMOID, rows, c, x, pred);
    else memcpy(pred, x, (size_t)rows * c * sizeof(float));
    fl_loss_desc d = {code, input, rows, c, 1.0f / (float)rows};
    be->loss(&d, pred, target, row_loss, NULL);
    return row_loss[r];
}

/* ------------------------------------------------------- Keras reference */

/* Compares value and gradient with Keras. vrtol: relative tolerance of the
 * value (1e-5 unless float32 forces more; see the callers). */
static void check_keras(const char *name, int code, int input, int rows, int c, const float *x, const float *target,
                        float kvalue, const float *kgrad, double vrtol) {
    float grad[MAXR * MAXC];
    double v = run_loss(code, input, rows, c, x, target, grad);
    CHECK_MSG(fabs(v - kvalue) <= vrtol * fabs(kvalue), "%s (%s): loss flynn %.9g, Keras %.9g", name,
              mode_name(input), v, (double)kvalue);
    for (int i = 0; i < rows * c; i++)
        CHECK_MSG(fabs(grad[i] - kgrad[i]) <= 1e-6 + 1e-4 * fabs(kgrad[i]),
                  "%s (%s): grad[%d][%d] flynn %.9g, Keras %.9g", name, mode_name(input), i / c, i % c,
                  (double)grad[i], (double)kgrad[i]);
    /* without a gradient buffer the loss is the same */
    double v2 = run_loss(code, input, rows, c, x, target, NULL);
    CHECK_MSG(v2 == v, "%s (%s): loss without grad %.9g != %.9g", name, mode_name(input), v2, v);
}

static void test_keras_losses(void) {
    const float *pc = &kr_p_cce[0][0], *yc = &kr_y_cce[0][0], *ys = kr_y_scce;
    check_keras("categorical_crossentropy", FL_LC_CCE, FL_LI_PROBS, KR_R, KR_C, pc, yc, kr_cce_probs_value,
                &kr_cce_probs_grad[0][0], 1e-5);
    check_keras("categorical_crossentropy", FL_LC_CCE, FL_LI_LOGITS, KR_R, KR_C, &kr_z_ce[0][0], yc,
                kr_cce_logits_value, &kr_cce_logits_grad[0][0], 1e-5);
    check_keras("categorical_crossentropy", FL_LC_CCE, FL_LI_SOFTMAX_FUSED, KR_R, KR_C, &kr_z_softmax[0][0], yc,
                kr_cce_softmax_value, &kr_cce_softmax_grad[0][0], 1e-5);
    check_keras("sparse_categorical_crossentropy", FL_LC_SCCE, FL_LI_PROBS, KR_R, KR_C, pc, ys, kr_scce_probs_value,
                &kr_scce_probs_grad[0][0], 1e-5);
    check_keras("sparse_categorical_crossentropy", FL_LC_SCCE, FL_LI_LOGITS, KR_R, KR_C, &kr_z_ce[0][0], ys,
                kr_scce_logits_value, &kr_scce_logits_grad[0][0], 1e-5);
    check_keras("sparse_categorical_crossentropy", FL_LC_SCCE, FL_LI_SOFTMAX_FUSED, KR_R, KR_C,
                &kr_z_softmax[0][0], ys, kr_scce_softmax_value, &kr_scce_softmax_grad[0][0], 1e-5);
    check_keras("binary_crossentropy", FL_LC_BCE, FL_LI_PROBS, KR_RB, KR_CB, &kr_p_bce[0][0], &kr_y_bce[0][0],
                kr_bce_probs_value, &kr_bce_probs_grad[0][0], 1e-5);
    check_keras("binary_crossentropy", FL_LC_BCE, FL_LI_LOGITS, KR_RB, KR_CB, &kr_z_bce[0][0], &kr_y_bce[0][0],
                kr_bce_logits_value, &kr_bce_logits_grad[0][0], 1e-5);
    check_keras("binary_crossentropy", FL_LC_BCE, FL_LI_SIGMOID_FUSED, KR_RB, KR_CB, &kr_z_sigmoid[0][0],
                &kr_y_bce[0][0], kr_bce_sigmoid_value, &kr_bce_sigmoid_grad[0][0], 1e-5);
    check_keras("mean_squared_error", FL_LC_MSE, FL_LI_PROBS, KR_R, KR_C, &kr_p_mse[0][0], &kr_y_mse[0][0],
                kr_mse_value, &kr_mse_grad[0][0], 1e-5);
}

/* A fused row whose target output is below 1e-7 (confidently wrong). The
 * loss value is Keras's: the clipped -log(1e-7). The gradient differs
 * between Keras backends: under JAX, jax.grad through jnp.clip is 0 for the
 * whole row (kr_*_x_grad), while the TensorFlow backend takes the softmax /
 * sigmoid output's logits (`_keras_logits`) and gives softmax(z) - t
 * (kr_*_x_grad_logits; its value, kr_*_x_value_logits, is the unclipped
 * one). flynn's fused kernel returns softmax(z) - t, the derivative Keras
 * means, which keeps a saturated wrong unit learning; this checks that
 * choice. The JAX-backend numbers stay in the header for reference. */
static void test_keras_fused_saturated(void) {
    check_keras("categorical_crossentropy saturated", FL_LC_CCE, FL_LI_SOFTMAX_FUSED, 2, KR_C,
                &kr_z_softmax_x[0][0], &kr_y_softmax_x[0][0], kr_cce_softmax_x_value,
                &kr_cce_softmax_x_grad_logits[0][0], 1e-5);
    check_keras("binary_crossentropy saturated", FL_LC_BCE, FL_LI_SIGMOID_FUSED, 2, KR_CB, &kr_z_sigmoid_x[0][0],
                &kr_y_sigmoid_x[0][0], kr_bce_sigmoid_x_value, &kr_bce_sigmoid_x_grad_logits[0][0], 1e-5);
}

/* ---------------------------------------------------- finite differences */

static uint32_t rng_state = 12345u;
static float frand(float lo, float hi) {
    rng_state = rng_state * 1664525u + 1013904223u;
    return lo + (hi - lo) * (float)(rng_state >> 8) / 16777216.0f;
}

/* Central differences (in double, over the float32 kernel) of each row's
 * loss against the kernel's gradient. Inputs stay away from the clipping
 * bounds so the loss is smooth there. h is chosen per mode to balance
 * float32 rounding of the loss (~1e-7 relative, divided by 2h) against the
 * O(h^2) truncation error; both stay below the tolerance (checked on the
 * unscaled gradient, i.e. times rows, against differences of a row loss). */
static void check_fd(const char *name, int code, int input, int rows, int c, const float *x0, const float *target,
                     float h) {
    float x[MAXR * MAXC], grad[MAXR * MAXC];
    memcpy(x, x0, (size_t)rows * c * sizeof(float));
    run_loss(code, input, rows, c, x, target, grad);
    for (int i = 0; i < rows * c; i++) {
        int r = i / c;
        float xi = x0[i];
        x[i] = xi + h;
        float xp = x[i];
        double lp = row_loss_of(code, input, rows, c, x, target, r);
        x[i] = xi - h;
        float xm = x[i];
        double lm = row_loss_of(code, input, rows, c, x, target, r);
        x[i] = xi;
        double fd = (lp - lm) / ((double)xp - (double)xm);
        double an = (double)grad[i] * rows;
        /* observed |an - fd| stays below 6e-5 with these inputs and h */
        CHECK_MSG(fabs(an - fd) <= 3e-4 + 2e-3 * fabs(fd), "%s (%s): grad[%d][%d] * rows = %.7g, finite difference %.7g", name,
                  mode_name(input), r, i % c, an, fd);
    }
}

static void test_finite_differences(void) {
    enum { R = 6, C = 5 };
    float x[R * C], t[R * C], lab[R];
    for (int pass = 0; pass < 3; pass++) {
        /* targets: one-hot rows and soft rows (summing to 1) for CCE */
        for (int r = 0; r < R; r++) {
            int k = (int)frand(0, (float)C - 0.001f);
            lab[r] = (float)k;
            float s = 0;
            for (int j = 0; j < C; j++) {
                t[r * C + j] = (r % 2) ? frand(0, 1) : (j == k ? 1.0f : 0.0f);
                s += t[r * C + j];
            }
            for (int j = 0; j < C; j++) t[r * C + j] /= s;
        }
        /* probabilities: unnormalised rows in [0.3, 1] (Keras divides by the
         * row sum, and the gradient includes that normalisation) */
        for (int i = 0; i < R * C; i++) x[i] = frand(0.3f, 1.0f);
        check_fd("categorical_crossentropy", FL_LC_CCE, FL_LI_PROBS, R, C, x, t, 2e-3f);
        check_fd("sparse_categorical_crossentropy", FL_LC_SCCE, FL_LI_PROBS, R, C, x, lab, 2e-3f);
        for (int i = 0; i < R * C; i++) x[i] = frand(-3.0f, 3.0f);
        check_fd("categorical_crossentropy", FL_LC_CCE, FL_LI_LOGITS, R, C, x, t, 1e-2f);
        check_fd("categorical_crossentropy", FL_LC_CCE, FL_LI_SOFTMAX_FUSED, R, C, x, t, 1e-2f);
        check_fd("sparse_categorical_crossentropy", FL_LC_SCCE, FL_LI_LOGITS, R, C, x, lab, 1e-2f);
        check_fd("sparse_categorical_crossentropy", FL_LC_SCCE, FL_LI_SOFTMAX_FUSED, R, C, x, lab, 1e-2f);
        check_fd("mean_squared_error", FL_LC_MSE, FL_LI_PROBS, R, C, x, t, 1e-2f);
        /* binary: soft targets in [0, 1], probabilities in [0.2, 0.8] */
        for (int i = 0; i < R * C; i++) t[i] = (i % 3) ? (float)(i % 2) : frand(0, 1);
        for (int i = 0; i < R * C; i++) x[i] = frand(0.2f, 0.8f);
        check_fd("binary_crossentropy", FL_LC_BCE, FL_LI_PROBS, R, C, x, t, 2e-3f);
        for (int i = 0; i < R * C; i++) x[i] = frand(-4.0f, 4.0f);
        check_fd("binary_crossentropy", FL_LC_BCE, FL_LI_LOGITS, R, C, x, t, 1e-2f);
        check_fd("binary_crossentropy", FL_LC_BCE, FL_LI_SIGMOID_FUSED, R, C, x, t, 1e-2f);
    }
}

/* ----------------------------------------------------------------- metrics */

static void check_metric(const char *name, int code, int rows, int c, const float *pred, const float *target,
                         const float *kscore, float kmean) {
    float score[MAXR];
    be->metric(code, rows, c, pred, target, score);
    for (int r = 0; r < rows; r++)
        CHECK_MSG(fabs(score[r] - kscore[r]) <= 1e-6, "%s: row %d flynn %g, Keras %g", name, r, (double)score[r],
                  (double)kscore[r]);
    /* the epoch value train.c reports: the mean of the row scores */
    double mean = 0;
    be->sum_into(rows, score, 1.0 / (double)rows, &mean);
    CHECK_MSG(fabs(mean - kmean) <= 1e-6, "%s: mean flynn %.9g, Keras metric %.9g", name, mean, (double)kmean);
}

static void test_metrics(void) {
    check_metric("sparse_categorical_accuracy", FL_MC_SPARSE_CATEGORICAL, KR_RM, KR_CM, &kr_p_met[0][0],
                 kr_y_met_sparse, kr_sparse_categorical_accuracy, kr_sparse_categorical_accuracy_mean);
    check_metric("categorical_accuracy", FL_MC_CATEGORICAL, KR_RM, KR_CM, &kr_p_met[0][0], &kr_y_met_onehot[0][0],
                 kr_categorical_accuracy, kr_categorical_accuracy_mean);
    check_metric("binary_accuracy", FL_MC_BINARY, KR_RMB, KR_CMB, &kr_p_met_bin[0][0], &kr_y_met_bin[0][0],
                 kr_binary_accuracy, kr_binary_accuracy_mean);
}

int main(void) {
    be = fl_backend_cpu();
    test_keras_losses();
    test_keras_fused_saturated();
    test_finite_differences();
    test_metrics();
    return check_report("test_losses");
}
