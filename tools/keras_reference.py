#!/usr/bin/env python3
"""keras_reference.py — owns tests/keras_reference.h: reference numbers for
flynn's optimizers, losses and metrics, computed by REAL Keras 3 (JAX backend).

Regenerate with:

    KERAS_BACKEND=jax python3 tools/keras_reference.py > tests/keras_reference.h

The script is deterministic (fixed inputs, no random numbers) and writes the
C header to stdout. It records:
  * optimizers: weights of a 7-element keras.Variable after each of 4
    `apply_gradients` steps with fixed gradients, for SGD / Adam / AdamW /
    RMSprop variants, with the hyper-parameters Keras used (get_config());
  * losses: the Keras loss value (default reduction: mean over the batch) and
    jax.grad of that value w.r.t. the prediction input (probabilities or
    logits); for softmax+CE and sigmoid+BCE also w.r.t. the logits feeding the
    activation (flynn's fused paths);
  * metrics: per-sample accuracy values and the Keras metric-class result.
"""
import os
import sys

if os.environ.get("KERAS_BACKEND") != "jax":
    sys.exit("run with KERAS_BACKEND=jax (see the comment at the top)")

import numpy as np  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import keras  # noqa: E402

F32 = np.float32
out = []


def emit(s=""):
    out.append(s)


def fl(x):
    """A float32 as a C float literal that round-trips."""
    x = F32(x)
    assert np.isfinite(x), x
    s = str(x)  # shortest repr that round-trips in float32
    if "." not in s and "e" not in s:
        s += ".0"
    return s + "f"


def arr1(vals):
    return "{" + ", ".join(fl(v) for v in np.asarray(vals, F32).ravel()) + "}"


def arr2(a):
    a = np.asarray(a, F32)
    return "{" + ", ".join(arr1(r) for r in a) + "}"


def c_array(name, a):
    a = np.asarray(a, F32)
    dims = "".join("[%d]" % d for d in a.shape)
    body = arr1(a) if a.ndim == 1 else arr2(a) if a.ndim == 2 else None
    if body is None:
        body = "{" + ", ".join(arr2(x) for x in a) + "}"
    emit("static const float %s%s = %s;" % (name, dims, body))


# ------------------------------------------------------------------ optimizers

W0 = np.array([0.5, -1.25, 2.0, 0.0, -0.3, 1.0, 3.5], F32)
GRADS = np.array([
    [0.1, -0.2, 0.0, 1.5, -3.0, 0.0, 50.0],
    [-0.4, 0.3, 0.0, -2.0, 0.25, 1e-3, -20.0],
    [0.0, 0.5, 0.0, 0.7, -0.01, -4.0, 100.0],
    [2.0, -1.0, 0.0, 0.0, 0.5, 0.03, -0.5],
], F32)
NSTEP, NW = GRADS.shape

# (label, Keras class, kwargs) — an empty kwargs means "Keras defaults", and the
# C test then calls the flynn constructor with no arguments either.
OPT_CASES = [
    ("sgd_default", "SGD", {}),
    ("sgd_momentum", "SGD", dict(momentum=0.9)),
    ("sgd_nesterov", "SGD", dict(momentum=0.9, nesterov=True)),
    ("adam_default", "Adam", {}),
    ("adam_custom", "Adam", dict(learning_rate=0.05, beta_1=0.8, beta_2=0.99, epsilon=1e-4)),
    ("adamw_default", "AdamW", {}),
    ("adamw_wd", "AdamW", dict(learning_rate=0.01, weight_decay=0.1)),
    ("rmsprop_default", "RMSprop", {}),
    ("rmsprop_momentum", "RMSprop", dict(momentum=0.5)),
    ("rmsprop_centered", "RMSprop", dict(centered=True)),
    ("rmsprop_centered_momentum", "RMSprop", dict(centered=True, momentum=0.5, learning_rate=0.01)),
]
KINDS = {"SGD": 1, "Adam": 2, "AdamW": 3, "RMSprop": 4}


def run_optimizer(cls, kw):
    opt = getattr(keras.optimizers, cls)(**kw)
    v = keras.Variable(W0.copy(), dtype="float32")
    ws = []
    for g in GRADS:
        opt.apply_gradients([(jnp.asarray(g), v)])
        ws.append(np.asarray(v.numpy(), F32))
    return opt.get_config(), np.stack(ws)


# ---------------------------------------------------------------------- losses

R, C = 4, 5
# probabilities (rows need not sum to 1: Keras renormalises) with an extreme
# 1e-9 and a near-1 entry so that the [1e-7, 1-1e-7] clipping matters.
P_CCE = np.array([
    [0.1, 0.2, 0.4, 0.2, 0.1],
    [0.05, 0.05, 0.1, 0.3, 0.7],       # sums to 1.2
    [1e-9, 0.3, 0.3, 0.2, 0.2],        # target class 0 is clipped
    [0.96, 0.01, 1e-9, 0.02, 0.01],    # non-target 1e-9
], F32)
Y_CCE = np.array([
    [0, 0, 1, 0, 0],
    [0, 0.2, 0, 0.3, 0.5],             # soft target
    [1, 0, 0, 0, 0],
    [1, 0, 0, 0, 0],
], F32)
Y_SCCE = np.array([2, 4, 0, 3], F32)
Z_CE = np.array([                      # logits, incl. large magnitudes
    [1.0, 2.0, 0.5, -1.0, 0.0],
    [30.0, -20.0, 0.0, 5.0, 29.0],
    [-3.0, -3.0, -3.0, -3.0, 4.0],
    [0.25, -0.5, 1.5, 2.5, -2.0],
], F32)
Z_SOFTMAX = np.array([                 # moderate logits for the fused path
    [1.0, 2.0, 0.5, -1.0, 0.0],
    [0.3, -0.7, 1.2, 0.1, 2.2],
    [-3.0, 0.0, -1.0, 4.0, -20.0],     # class 4 softmax < 1e-7: clipped but not the target
    [0.25, -0.5, 1.5, 2.5, -2.0],
], F32)

RB, CB = 4, 3
P_BCE = np.array([
    [0.9, 0.2, 0.6],
    [1e-9, 0.5, 0.999],                # 1e-9 with target 1: clipped value
    [0.3, 0.7, 1.0 - 1e-9],            # rounds to 1.0 in float32: clipped
    [0.25, 0.8, 0.45],
], F32)
Y_BCE = np.array([
    [1, 0, 1],
    [1, 1, 0],
    [0, 1, 0],
    [0.2, 0.9, 0.5],                   # soft target
], F32)
Z_BCE = np.array([
    [2.0, -1.5, 0.3],
    [-30.0, 0.0, 25.0],
    [-0.8, 0.85, 12.0],
    [-1.1, 1.4, -0.2],
], F32)
Z_SIGMOID = np.array([                 # moderate logits for the fused path
    [2.0, -1.5, 0.3],
    [-0.6, 0.0, 3.0],
    [-0.8, 0.85, -2.5],
    [-1.1, 1.4, -0.2],
], F32)

P_MSE = np.array([
    [0.1, -0.2, 1.5, 3.0, 0.0],
    [2.0, 2.0, -1.0, 0.5, 0.25],
    [-4.0, 0.3, 0.3, 0.1, 10.0],
    [0.0, 0.0, 0.0, 0.0, 1e-3],
], F32)
Y_MSE = np.array([
    [0.0, 0.0, 1.0, 2.0, 0.5],
    [1.0, -1.0, -1.0, 0.0, 0.0],
    [-3.5, 0.0, 1.0, 0.0, 8.0],
    [0.0, 0.5, -0.5, 0.0, 0.0],
], F32)


def loss_grad(loss, y_true, x, pre=None):
    """Keras loss value (mean over the batch) and jax.grad w.r.t. x."""
    def f(x):
        p = pre(x) if pre else x
        return loss(y_true, p)
    val, g = jax.value_and_grad(f)(jnp.asarray(x, jnp.float32))
    return F32(val), np.asarray(g, F32)


LS = keras.losses
LOSS_CASES = []  # (label, value, grad)


def add_loss(label, loss, y_true, x, pre=None):
    v, g = loss_grad(loss, y_true, x, pre)
    LOSS_CASES.append((label, v, g))


add_loss("cce_probs", LS.CategoricalCrossentropy(from_logits=False), Y_CCE, P_CCE)
add_loss("cce_logits", LS.CategoricalCrossentropy(from_logits=True), Y_CCE, Z_CE)
add_loss("cce_softmax", LS.CategoricalCrossentropy(from_logits=False), Y_CCE, Z_SOFTMAX, keras.ops.softmax)
add_loss("scce_probs", LS.SparseCategoricalCrossentropy(from_logits=False), Y_SCCE.astype(np.int32), P_CCE)
add_loss("scce_logits", LS.SparseCategoricalCrossentropy(from_logits=True), Y_SCCE.astype(np.int32), Z_CE)
add_loss("scce_softmax", LS.SparseCategoricalCrossentropy(from_logits=False), Y_SCCE.astype(np.int32), Z_SOFTMAX,
         keras.ops.softmax)
add_loss("bce_probs", LS.BinaryCrossentropy(from_logits=False), Y_BCE, P_BCE)
add_loss("bce_logits", LS.BinaryCrossentropy(from_logits=True), Y_BCE, Z_BCE)
add_loss("bce_sigmoid", LS.BinaryCrossentropy(from_logits=False), Y_BCE, Z_SIGMOID, keras.ops.sigmoid)
add_loss("mse", LS.MeanSquaredError(), Y_MSE, P_MSE)

# Confidently wrong fused rows: the target's softmax / sigmoid output is below
# 1e-7, so Keras-JAX clips it and jax.grad through jnp.clip is 0 for that
# row; recorded (value and both gradients: through the clip, and the
# from_logits gradient, which the TensorFlow backend uses for a softmax /
# sigmoid output via its `_keras_logits`) to document the divergence.
Z_SOFTMAX_X = np.array([
    [1.0, 2.0, 0.5, -1.0, 0.0],
    [20.0, -2.0, 0.0, 1.0, 0.5],       # target 4: softmax ~ 1e-9
], F32)
Y_SOFTMAX_X = np.array([[0, 1, 0, 0, 0], [0, 0, 0, 0, 1]], F32)
Z_SIGMOID_X = np.array([[2.0, -1.5, 0.3], [-18.0, 0.5, 19.0]], F32)
Y_SIGMOID_X = np.array([[1, 0, 1], [1, 1, 0]], F32)
x_cce_v, x_cce_g = loss_grad(LS.CategoricalCrossentropy(), Y_SOFTMAX_X, Z_SOFTMAX_X, keras.ops.softmax)
x_cce_vl, x_cce_gl = loss_grad(LS.CategoricalCrossentropy(from_logits=True), Y_SOFTMAX_X, Z_SOFTMAX_X)
x_bce_v, x_bce_g = loss_grad(LS.BinaryCrossentropy(), Y_SIGMOID_X, Z_SIGMOID_X, keras.ops.sigmoid)
x_bce_vl, x_bce_gl = loss_grad(LS.BinaryCrossentropy(from_logits=True), Y_SIGMOID_X, Z_SIGMOID_X)

# --------------------------------------------------------------------- metrics

RM, CM = 6, 4
P_MET = np.array([
    [0.1, 0.6, 0.2, 0.1],
    [0.3, 0.3, 0.2, 0.2],              # tie: argmax is the first
    [0.0, 0.1, 0.1, 0.8],
    [-1.0, 2.0, 3.0, 0.5],             # logits work too
    [0.25, 0.25, 0.25, 0.25],          # all tied
    [0.4, 0.1, 0.45, 0.05],
], F32)
Y_MET_SPARSE = np.array([1, 1, 3, 1, 0, 0], F32)
Y_MET_ONEHOT = np.array([
    [0, 1, 0, 0],
    [1, 0, 0, 0],
    [0, 1, 0, 0],
    [0, 0.3, 0.7, 0],                  # soft target: argmax 2
    [0, 0, 0, 1],
    [1, 0, 0, 0],
], F32)
P_MET_BIN = np.array([
    [0.9, 0.2, 0.6],
    [0.5, 0.51, 0.49],                 # 0.5 is not > 0.5
    [0.0, 1.0, 0.3],
    [0.7, 0.7, 0.7],
], F32)
Y_MET_BIN = np.array([[1, 0, 1], [0, 1, 1], [0, 1, 0], [1, 0, 1]], F32)

M = keras.metrics
sca = np.asarray(M.sparse_categorical_accuracy(Y_MET_SPARSE, P_MET), F32)
ca = np.asarray(M.categorical_accuracy(Y_MET_ONEHOT, P_MET), F32)
# keras.metrics.binary_accuracy is per element; flynn scores a row by the
# fraction of its elements, i.e. the mean over the last axis.
ba = np.asarray(M.binary_accuracy(Y_MET_BIN, P_MET_BIN, threshold=0.5), F32).mean(axis=-1)


def metric_class(m, y, p):
    m.update_state(y, p)
    return F32(m.result())


sca_mean = metric_class(M.SparseCategoricalAccuracy(), Y_MET_SPARSE, P_MET)
ca_mean = metric_class(M.CategoricalAccuracy(), Y_MET_ONEHOT, P_MET)
ba_mean = metric_class(M.BinaryAccuracy(threshold=0.5), Y_MET_BIN, P_MET_BIN)

# ---------------------------------------------------------------------- output

emit("/*")
emit(" * keras_reference.h — GENERATED by tools/keras_reference.py; do not edit.")
emit(" * Reference numbers from real Keras %s (JAX %s backend) for" % (keras.__version__, jax.__version__))
emit(" * tests/test_optimizers.c and tests/test_losses.c. Regenerate with:")
emit(" *   KERAS_BACKEND=jax python3 tools/keras_reference.py > tests/keras_reference.h")
emit(" */")
emit("#ifndef FL_TESTS_KERAS_REFERENCE_H")
emit("#define FL_TESTS_KERAS_REFERENCE_H")
emit()
emit("/* ---- optimizers: w after each apply_gradients step ---- */")
emit("#define KR_OPT_N %d" % NW)
emit("#define KR_OPT_STEPS %d" % NSTEP)
c_array("kr_opt_w0", W0)
c_array("kr_opt_grads", GRADS)
emit("/* kind: 1 SGD, 2 Adam, 3 AdamW, 4 RMSprop; defaults: constructed with no")
emit(" * arguments; the other fields are Keras's get_config() values. */")
emit("typedef struct kr_opt_case {")
emit("    const char *name;")
emit("    int kind, defaults;")
emit("    float learning_rate, momentum, beta_1, beta_2, epsilon, rho, weight_decay;")
emit("    int nesterov, centered;")
emit("    float w[KR_OPT_STEPS][KR_OPT_N];")
emit("} kr_opt_case;")
emit("static const kr_opt_case kr_opt_cases[] = {")
for label, cls, kw in OPT_CASES:
    cfg, ws = run_optimizer(cls, kw)
    g = lambda k, d=0.0: cfg.get(k) if cfg.get(k) is not None else d  # noqa: E731
    emit('    {"%s", %d, %d, %s, %s, %s, %s, %s, %s, %s, %d, %d,' % (
        label, KINDS[cls], 0 if kw else 1, fl(g("learning_rate")), fl(g("momentum")), fl(g("beta_1")),
        fl(g("beta_2")), fl(g("epsilon")), fl(g("rho")), fl(g("weight_decay")), int(bool(g("nesterov", False))),
        int(bool(g("centered", False)))))
    emit("     %s}," % arr2(ws))
emit("};")
emit("#define KR_OPT_NCASES ((int)(sizeof kr_opt_cases / sizeof kr_opt_cases[0]))")
emit()
emit("/* ---- losses: inputs ---- */")
emit("#define KR_R %d" % R)
emit("#define KR_C %d" % C)
emit("#define KR_RB %d" % RB)
emit("#define KR_CB %d" % CB)
c_array("kr_p_cce", P_CCE)
c_array("kr_y_cce", Y_CCE)
c_array("kr_y_scce", Y_SCCE)
c_array("kr_z_ce", Z_CE)
c_array("kr_z_softmax", Z_SOFTMAX)
c_array("kr_p_bce", P_BCE)
c_array("kr_y_bce", Y_BCE)
c_array("kr_z_bce", Z_BCE)
c_array("kr_z_sigmoid", Z_SIGMOID)
c_array("kr_p_mse", P_MSE)
c_array("kr_y_mse", Y_MSE)
emit()
emit("/* ---- losses: Keras value (mean over the batch) and jax.grad of it w.r.t.")
emit(" * the input (probabilities, or logits for *_logits and the fused")
emit(" * *_softmax / *_sigmoid cases: loss(activation(z)) w.r.t. z) ---- */")
for label, v, g in LOSS_CASES:
    emit("static const float kr_%s_value = %s;" % (label, fl(v)))
    c_array("kr_%s_grad" % label, g)
emit()
emit("/* ---- fused paths with a confidently wrong row (target output < 1e-7) ---- */")
c_array("kr_z_softmax_x", Z_SOFTMAX_X)
c_array("kr_y_softmax_x", Y_SOFTMAX_X)
emit("static const float kr_cce_softmax_x_value = %s;" % fl(x_cce_v))
c_array("kr_cce_softmax_x_grad", x_cce_g)  # jax.grad through the clip
emit("/* the same loss with from_logits=True on z (the TensorFlow backend's result) */")
emit("static const float kr_cce_softmax_x_value_logits = %s;" % fl(x_cce_vl))
c_array("kr_cce_softmax_x_grad_logits", x_cce_gl)
c_array("kr_z_sigmoid_x", Z_SIGMOID_X)
c_array("kr_y_sigmoid_x", Y_SIGMOID_X)
emit("static const float kr_bce_sigmoid_x_value = %s;" % fl(x_bce_v))
c_array("kr_bce_sigmoid_x_grad", x_bce_g)
emit("static const float kr_bce_sigmoid_x_value_logits = %s;" % fl(x_bce_vl))
c_array("kr_bce_sigmoid_x_grad_logits", x_bce_gl)
emit()
emit("/* ---- metrics: per-sample values and the Keras metric-class result ---- */")
emit("#define KR_RM %d" % RM)
emit("#define KR_CM %d" % CM)
emit("#define KR_RMB %d" % P_MET_BIN.shape[0])
emit("#define KR_CMB %d" % P_MET_BIN.shape[1])
c_array("kr_p_met", P_MET)
c_array("kr_y_met_sparse", Y_MET_SPARSE)
c_array("kr_y_met_onehot", Y_MET_ONEHOT)
c_array("kr_p_met_bin", P_MET_BIN)
c_array("kr_y_met_bin", Y_MET_BIN)
c_array("kr_sparse_categorical_accuracy", sca)
c_array("kr_categorical_accuracy", ca)
c_array("kr_binary_accuracy", ba)
emit("static const float kr_sparse_categorical_accuracy_mean = %s;" % fl(sca_mean))
emit("static const float kr_categorical_accuracy_mean = %s;" % fl(ca_mean))
emit("static const float kr_binary_accuracy_mean = %s;" % fl(ba_mean))
emit()
emit("#endif")

sys.stdout.write("\n".join(out) + "\n")
