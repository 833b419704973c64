/*
 * activations.h — the one list of flynn's element-wise activations (and
 * softmax): enum suffix and Keras name, in enum order. flynn.h makes the
 * public fl_activation enum from it (FL_RELU, ...), src/ops/math.h the
 * kernel codes (FL_ACT_RELU, ...) and src/nn/layers.c the name table, so a
 * new activation is one line here plus its formula in src/ops/math.h.
 * Append only: the values are part of the ABI.
 */
#ifndef FLYNN_ACTIVATIONS_H
#define FLYNN_ACTIVATIONS_H

/* X(ENUM_SUFFIX, "keras_name") */
#define FL_ACTIVATION_LIST(X)                                                                                       \
    X(LINEAR, "linear")           /* Keras None / "linear" */                                                       \
    X(RELU, "relu")                                                                                                  \
    X(SIGMOID, "sigmoid")                                                                                            \
    X(TANH, "tanh")                                                                                                  \
    X(SOFTMAX, "softmax")         /* over the last axis */                                                           \
    X(LEAKY_RELU, "leaky_relu")   /* negative_slope 0.2, as keras.activations.leaky_relu */                         \
    X(GELU, "gelu")               /* approximate=False (erf), as keras.activations.gelu */                          \
    X(ELU, "elu")                 /* alpha 1.0 */                                                                    \
    X(SILU, "silu")               /* x * sigmoid(x); Keras also calls it "swish" */                                  \
    X(RELU6, "relu6")             /* min(max(x, 0), 6) */                                                            \
    X(HARD_SIGMOID, "hard_sigmoid") /* Keras 3: relu6(x + 3) / 6 */                                                  \
    X(HARD_SILU, "hard_silu")     /* x * hard_sigmoid(x); Keras also calls it "hard_swish" */                        \
    X(SELU, "selu")               /* 1.0507 * elu(x, 1.67326) */                                                     \
    X(SOFTPLUS, "softplus")       /* log(1 + exp(x)) */                                                              \
    X(SOFTSIGN, "softsign")       /* x / (|x| + 1) */                                                                \
    X(EXPONENTIAL, "exponential") /* exp(x) */

/* Other names Keras accepts for the same functions: X("alias", ENUM_SUFFIX) */
#define FL_ACTIVATION_ALIASES(X) X("swish", SILU) X("hard_swish", HARD_SILU)

#endif
