/*
 * nn.h — the layout of layers, models, optimizers and histories shared by the
 * files of src/nn (the public header keeps them opaque).
 */
#ifndef FL_NN_H
#define FL_NN_H

#include "flynn/flynn.h"
#include "core/graph.h"

/* The one list of layer kinds: X(KIND, "KerasClass", "default_name_base",
 * inputs, flags, mask_refusal), inputs being FL_IN_NONE (InputLayer),
 * FL_IN_ONE or FL_IN_MANY (merges: 2 or more); flags FL_K_MASK (Keras's
 * supports_masking: the input's mask passes on to the output) and
 * FL_K_TRAINING (a Keras call may pass training=False, which flynn writes
 * back: the model's own training flag rules, as in Keras 3's Functional);
 * mask_refusal: why a masked input is refused (what Keras's call does with
 * the mask that flynn does not compute), NULL where it is not. layers.c holds each kind's build function (written in
 * layers_core.c, layers_image.c or layers_seq.c) in a table of the same order; keras/keras_config.c its file form. */
#define FL_LAYER_KINDS(X)                                                                                             \
    X(INPUT, "InputLayer", "input_layer", FL_IN_NONE, 0, NULL)                                                        \
    X(DENSE, "Dense", "dense", FL_IN_ONE, FL_K_MASK, NULL)                                                            \
    X(CONV2D, "Conv2D", "conv2d", FL_IN_ONE, 0, NULL)                                                                 \
    X(MAXPOOL, "MaxPooling2D", "max_pooling2d", FL_IN_ONE, 0, NULL)                                                   \
    X(AVGPOOL, "AveragePooling2D", "average_pooling2d", FL_IN_ONE, 0, NULL)                                           \
    X(GAP, "GlobalAveragePooling2D", "global_average_pooling2d", FL_IN_ONE, 0, NULL)                                  \
    X(FLATTEN, "Flatten", "flatten", FL_IN_ONE, 0, NULL)                                                              \
    X(RESHAPE, "Reshape", "reshape", FL_IN_ONE, 0, NULL)                                                              \
    X(DROPOUT, "Dropout", "dropout", FL_IN_ONE, FL_K_MASK|FL_K_TRAINING, NULL)                                        \
    X(BATCHNORM, "BatchNormalization", "batch_normalization", FL_IN_ONE, 0, "uses the mask for the batch statistics") \
    X(ACTIVATION, "Activation", "activation", FL_IN_ONE, FL_K_MASK, NULL)                                             \
    X(ADD, "Add", "add", FL_IN_MANY, 0, NULL)                                                                         \
    X(MULTIPLY, "Multiply", "multiply", FL_IN_MANY, 0, NULL)                                                          \
    X(CONCATENATE, "Concatenate", "concatenate", FL_IN_MANY, 0, "concatenates the masks along its axis")              \
    X(ZEROPAD2D, "ZeroPadding2D", "zero_padding2d", FL_IN_ONE, 0, NULL)                                               \
    X(CROPPING2D, "Cropping2D", "cropping2d", FL_IN_ONE, 0, NULL)                                                     \
    X(GMP, "GlobalMaxPooling2D", "global_max_pooling2d", FL_IN_ONE, 0, NULL)                                          \
    X(GAP1D, "GlobalAveragePooling1D", "global_average_pooling1d", FL_IN_ONE, 0, NULL)                                \
    X(GMP1D, "GlobalMaxPooling1D", "global_max_pooling1d", FL_IN_ONE, 0, NULL)                                        \
    X(MAXPOOL1D, "MaxPooling1D", "max_pooling1d", FL_IN_ONE, 0, NULL)                                                 \
    X(AVGPOOL1D, "AveragePooling1D", "average_pooling1d", FL_IN_ONE, 0, NULL)                                         \
    X(CONV1D, "Conv1D", "conv1d", FL_IN_ONE, 0, NULL)                                                                 \
    X(SUBTRACT, "Subtract", "subtract", FL_IN_MANY, 0, NULL)                                                          \
    X(AVERAGE, "Average", "average", FL_IN_MANY, 0, NULL)                                                             \
    X(MAXIMUM, "Maximum", "maximum", FL_IN_MANY, 0, "takes masked steps from the other inputs")                       \
    X(MINIMUM, "Minimum", "minimum", FL_IN_MANY, 0, "takes masked steps from the other inputs")                       \
    X(SPATIAL_DROPOUT2D, "SpatialDropout2D", "spatial_dropout2d", FL_IN_ONE, FL_K_MASK|FL_K_TRAINING, NULL)           \
    X(RELU, "ReLU", "re_lu", FL_IN_ONE, FL_K_MASK, NULL)                                                              \
    X(LEAKY_RELU, "LeakyReLU", "leaky_re_lu", FL_IN_ONE, FL_K_MASK, NULL)                                             \
    X(ELU, "ELU", "elu", FL_IN_ONE, FL_K_MASK, NULL)                                                                  \
    X(PRELU, "PReLU", "p_re_lu", FL_IN_ONE, FL_K_MASK, NULL)                                                          \
    X(SOFTMAX, "Softmax", "softmax", FL_IN_ONE, 0, "uses the mask to exclude positions from the softmax")             \
    X(RESCALING, "Rescaling", "rescaling", FL_IN_ONE, FL_K_MASK, NULL)                                                \
    X(NORMALIZATION, "Normalization", "normalization", FL_IN_ONE, FL_K_MASK, NULL)                                    \
    X(DEPTHWISE2D, "DepthwiseConv2D", "depthwise_conv2d", FL_IN_ONE, 0, NULL)                                         \
    X(SEPARABLE2D, "SeparableConv2D", "separable_conv2d", FL_IN_ONE, 0, NULL)                                         \
    X(UPSAMPLE2D, "UpSampling2D", "up_sampling2d", FL_IN_ONE, 0, NULL)                                                \
    X(CONV2D_TRANSPOSE, "Conv2DTranspose", "conv2d_transpose", FL_IN_ONE, 0, NULL)                                    \
    X(PERMUTE, "Permute", "permute", FL_IN_ONE, 0, NULL)                                                              \
    X(RESIZING, "Resizing", "resizing", FL_IN_ONE, 0, NULL)                                                           \
    X(LAYERNORM, "LayerNormalization", "layer_normalization", FL_IN_ONE, 0, NULL)                                     \
    X(MHA, "MultiHeadAttention", "multi_head_attention", FL_IN_MANY, 0, NULL)                                         \
    X(ATTENTION, "Attention", "attention", FL_IN_MANY, 0, NULL)                                                       \
    X(REPEAT_VECTOR, "RepeatVector", "repeat_vector", FL_IN_ONE, 0, NULL)                                             \
    X(TIME_DISTRIBUTED, "TimeDistributed", "time_distributed", FL_IN_ONE, 0, NULL)                                    \
    X(SIMPLE_RNN, "SimpleRNN", "simple_rnn", FL_IN_ONE, FL_K_TRAINING, NULL)                                          \
    X(LSTM, "LSTM", "lstm", FL_IN_ONE, FL_K_TRAINING, NULL)                                                           \
    X(GRU, "GRU", "gru", FL_IN_ONE, FL_K_TRAINING, NULL)                                                              \
    X(BIDIRECTIONAL, "Bidirectional", "bidirectional", FL_IN_ONE, 0, NULL)                                            \
    X(EMBEDDING, "Embedding", "embedding", FL_IN_ONE, 0, NULL)                                                        \
    X(MASKING, "Masking", "masking", FL_IN_ONE, 0, NULL)                                                              \
    X(ZEROPAD1D, "ZeroPadding1D", "zero_padding1d", FL_IN_ONE, 0, NULL)                                               \
    X(CROPPING1D, "Cropping1D", "cropping1d", FL_IN_ONE, 0, NULL)                                                     \
    X(UPSAMPLE1D, "UpSampling1D", "up_sampling1d", FL_IN_ONE, 0, NULL)                                                \
    X(SPATIAL_DROPOUT1D, "SpatialDropout1D", "spatial_dropout1d", FL_IN_ONE, FL_K_MASK|FL_K_TRAINING, NULL)           \
    X(NOT_EQUAL, "NotEqual", "not_equal", FL_IN_ONE, 0, NULL)                                                         \
    X(ANY, "Any", "any", FL_IN_ONE, 0, NULL)                                                                          \
    X(LOGICAL_OR, "LogicalOr", "logical_or", FL_IN_MANY, 0, NULL)                                                     \
    X(LOGICAL_AND, "LogicalAnd", "logical_and", FL_IN_MANY, 0, NULL)                                                  \
    X(CONVERT_TO_TENSOR, "ConvertToTensor", "convert_to_tensor", FL_IN_ONE, 0, NULL)

enum { FL_IN_NONE, FL_IN_ONE, FL_IN_MANY };
enum { FL_K_MASK = 1, FL_K_TRAINING = 2 };

/* A model with None input axes is built at length A, then at B: the
 * dimensions that differ follow the length (node->dyn), and a weight whose
 * shape differs is Keras's error for a layer built on a None dimension.
 * Far apart, so that strides and pools up to ~100 still tell them apart. */
#define FL_PROBE_LENGTH_A 240
#define FL_PROBE_LENGTH_B 361

typedef enum fl_layer_kind {
#define FL_LAYER_KIND_ENUM_(k, cls, base, in, flags, refusal) FL_L_##k,
    FL_LAYER_KINDS(FL_LAYER_KIND_ENUM_)
#undef FL_LAYER_KIND_ENUM_
    FL_L_COUNT
} fl_layer_kind;

#define FL_LAYER_MAX_WEIGHTS 8 /* Bidirectional: 2 x 3 */
#define FL_LAYER_MAX_OUTS 6    /* Bidirectional LSTM, merge_mode None, return_state: y_f, y_b, h_f, c_f, h_b, c_b */

struct fl_layer {
    fl_layer_kind kind;
    char name[64];
    bool user_named;
    union {
        fl_dense_args dense;
        fl_conv2d_args conv;
        fl_pool2d_args pool;
        fl_dropout_args dropout;
        fl_batch_norm_args bn;
        fl_activation_args act;
        fl_concat_args concat;
        fl_padding2d_args pad;     /* ZeroPadding2D, Cropping2D */
        fl_global_pool_args gpool; /* the global poolings */
        fl_pool1d_args pool1d;
        fl_conv1d_args conv1d;
        fl_pact_desc pact;         /* ReLU, LeakyReLU, ELU, Rescaling: resolved formula and parameters */
        fl_prelu_args prelu;
        fl_softmax_args softmax;
        struct {                   /* Normalization */
            int axis;              /* Keras's, batch = 0, negative from the end; ignored when axis_none */
            bool axis_none, invert;
            int size;              /* values in mean/variance (given: constants), 0 = adapted state (weights) */
            float *mean, *variance;
        } norm;
        fl_depthwise_conv2d_args dw;
        fl_separable_conv2d_args sep;
        fl_up_sampling2d_args up;
        fl_resizing_args resize;
        struct { int ndim; int dims[FL_MAX_DIMS]; } perm; /* Permute: 1-based, as Keras */
        fl_rnn_args rnn;           /* SimpleRNN, LSTM, GRU: defaults resolved */
        struct { fl_layer *fwd, *bwd; fl_merge_mode merge_mode; } bidi; /* Bidirectional: owns both */
        fl_layer_normalization_args ln;
        fl_multi_head_attention_args mha;
        fl_attention_args att;
        int64_t repeat;            /* RepeatVector's n */
        struct {                   /* TimeDistributed */
            fl_layer *inner;
            char wname[FL_LAYER_MAX_WEIGHTS][80]; /* "dense/kernel": the legacy .h5 names */
        } td;
        struct {                   /* Input, Reshape */
            int ndim;
            int64_t shape[FL_MAX_DIMS]; /* Input: FL_DYNAMIC for a None axis */
            int64_t bound[FL_MAX_DIMS]; /* Input: the shape the graph is built for (a None axis: the data's length) */
            fl_dtype dtype;        /* Input: FL_FLOAT32 or FL_INT32 */
            bool int64;            /* Input: Keras's dtype was "int64" (carried as int32, written back as int64) */
        } shape;
        fl_embedding_args emb;
        fl_masking_args masking;
        float not_equal;           /* NotEqual: the constant of its call (keras.ops.not_equal(x, c)) */
    } a;
    int nw;
    fl_node *w[FL_LAYER_MAX_WEIGHTS];
    const char *wname[FL_LAYER_MAX_WEIGHTS];
    fl_tensor *wview[FL_LAYER_MAX_WEIGHTS];
    /* weights of a Keras sub-layer (MultiHeadAttention's query_dense, ...,
     * TimeDistributed's layer): the sub-object's path in a .keras file and
     * the weight's index there; NULL: the layer's own vars */
    const char *wsub[FL_LAYER_MAX_WEIGHTS];
    int widx[FL_LAYER_MAX_WEIGHTS];
    fl_node *out;     /* the layer's output node once built (its last call) */
    fl_node *outs[FL_LAYER_MAX_OUTS]; /* every output of its last call (outs[0] = out; RNN return_state: the states) */
    int nouts;
    fl_graph *g;      /* the graph it was built in */
    int index;        /* position in the model */
    int64_t order;    /* creation order (default names follow it) */
    int ncalls;       /* times built: a shared layer is called more than once */
    bool frozen;      /* trainable false (Keras): no weight is updated; BatchNormalization runs in inference mode */
    bool weights_to_come; /* built for fl_load_model, which reads every weight after: not initialized at build */
    /* built, its weights not initialized yet: they are (Keras's initializers, init_seed) when something first
     * reads or writes them (fl_layer_weights_ready), so a summary, a conversion without weights or a refusal
     * never touches a 300-million-parameter Dense's 1.2 GB */
    bool init_pending;
    uint64_t init_seed;
    bool wtrainable[FL_LAYER_MAX_WEIGHTS]; /* trainable when the layer is not frozen (false: moving statistics) */
    bool inference_call; /* Dropout called with training=False in the file: written back; Keras 3's
                          * Functional lets the model's own training flag override it (fit: active) */
};

/* A symbolic tensor of a functional model: output `index` of one layer
 * call (Keras's keras_history [layer, node_index, tensor_index]). The call
 * itself is its output 0; an output index > 0 (fl_output) is a sym of its
 * own that points at the call (src) and is never built on its own. */
struct fl_sym {
    fl_layer *layer;  /* the layer called (InputLayer for model inputs) */
    int nin;
    fl_sym *in[FL_NODE_MAX_IN];
    int call;         /* which call of the layer made it (Keras node index) */
    int64_t order;    /* creation order: a topological order */
    fl_node *node;    /* once built */
    bool mark;
    fl_sym *src;      /* index > 0: the call (its output 0); else NULL */
    int index;        /* which output of the call (Keras tensor_index) */
    fl_sym *outsym[FL_LAYER_MAX_OUTS]; /* the call: its outputs > 0 made so far by fl_output */
    fl_node *outs[FL_LAYER_MAX_OUTS];  /* the call, once built: every output node */
    fl_sym *mask[FL_NODE_MAX_IN];      /* the masks given to the call for its inputs (Keras's mask= call
                                        * argument, which Keras 3 writes in Functional files), NULL: the input's own */
};

#define FL_MODEL_MAX_IO 16

/* The Keras operations a Functional model's file holds to compute masks
 * (NotEqual, Any, LogicalOr, LogicalAnd from keras.src.ops.numpy,
 * ConvertToTensor from keras.src.ops.core): layers in flynn, with no
 * weights, written back as operations, as Keras writes them (in a legacy
 * .h5 too, where Keras 3.15 cannot read them back: its own files as flynn's). */
static inline bool fl_layer_kind_is_op(fl_layer_kind k) {
    return k == FL_L_NOT_EQUAL || k == FL_L_ANY || k == FL_L_LOGICAL_OR || k == FL_L_LOGICAL_AND ||
           k == FL_L_CONVERT_TO_TENSOR;
}
/* A new mask operation layer of that kind (NotEqual: with constant c). */
fl_layer *fl_mask_op_layer(fl_layer_kind k, float c, const char *name);

/* Builds one call of the layer on inputs xs[nx]: creates and initialises
 * its weights on the first call, reuses them on later ones (shared layers). */
fl_node *fl_layer_build(fl_layer *l, fl_graph *g, fl_node *const *xs, int nx, uint64_t seed);
/* (Re)initialises a built layer's weights from seed (Keras initializers). */
void fl_layer_init_weights(fl_layer *l, const fl_backend *be, uint64_t seed);
/* Initializes l's weights where they are pending (init_pending); a wrapper's (Bidirectional, TimeDistributed)
 * cover its sub-layers'. fl_model_weights_ready: every layer's; called by whatever reads or writes weights
 * (fit, evaluate and predict's buffers, fl_layer_weight and fl_layer_set_weight, saving, loading weights into a
 * model, a move to another device). */
void fl_layer_weights_ready(fl_layer *l);
void fl_model_weights_ready(fl_model *m);
/* "linear, relu, ...": every activation name, for messages */
const char *fl_activation_list(void);
const char *fl_layer_kind_class(fl_layer_kind k);
/* kind k's FL_K_* flags (FL_LAYER_KINDS) */
int fl_layer_kind_flags(fl_layer_kind k);
/* How many outputs a call of the layer has (RNN return_state: 1 + its
 * states; Bidirectional merge_mode None: 2 + ...), and how many initial
 * states a call may take after its input (RNN: 1 or 2 (LSTM); Bidirectional
 * twice that; other layers 0). */
int fl_layer_num_outputs(const fl_layer *l);
int fl_layer_num_states(const fl_layer *l);
const char *fl_layer_kind_base(fl_layer_kind k); /* "conv2d": base of default names */
bool fl_layer_kind_merges(fl_layer_kind k);      /* takes 2 or more inputs (Add, Concatenate, ...) */
bool fl_layer_kind_builds(fl_layer_kind k);      /* has its build function (kind_build) */

typedef struct fl_optimizer_state fl_optimizer_state;

struct fl_optimizer {
    int code;              /* fl_opt_code */
    fl_opt_desc d;         /* hyper-parameters (step filled per update) */
    int64_t iterations;
    int nparams;
    fl_param_ref *params;  /* bound at compile */
    int64_t bound_gen;     /* the graph's trainable_gen at binding (a change: bind again) */
    const fl_backend *be;
    fl_lr_schedule sched;  /* kind FL_SCHEDULE_NONE: d.lr is the learning rate */
};

/* Sets an optimizer's clipping and schedule from its constructor's
 * arguments (checked: at most one clip, each >= 0; the schedule valid). */
fl_status fl_optimizer_set_extras(fl_optimizer *o, float clipnorm, float clipvalue, float global_clipnorm,
                                  const fl_lr_schedule *sched);

/* Keras's monitor mode "auto": -1 for a loss (min), 1 for an accuracy
 * (max), 0 when it cannot tell. */
int fl_monitor_direction(const char *monitor);

/* A compiled metric's name, as Keras shows it in the history and writes it
 * in a compile config ("accuracy", "mae", "mean_absolute_error", ...). */
const char *fl_metric_key(fl_metric m);

/* Python's repr() of a float (CSVLogger's numbers). */
void fl_py_float_repr(double v, char *buf, size_t n);

/* The learning rate of the step after `iterations` steps (a schedule's value). */
float fl_optimizer_lr_at(const fl_optimizer *o, int64_t iterations);

/* Binds the optimizer to the model's trainable parameters (allocates slots). */
fl_status fl_optimizer_bind(fl_optimizer *o, fl_graph *g);
void fl_optimizer_step(fl_optimizer *o);
/* Counts a step that a replayed graph performed on the device. */
void fl_optimizer_count_step(fl_optimizer *o);
/* After the graph moved to another backend: moves the slots along. */
fl_status fl_optimizer_migrate(fl_optimizer *o, fl_graph *g);

struct fl_model {
    char name[64];
    int nlayers;
    fl_layer **layers;
    fl_graph g;
    fl_node *input, *output;            /* inputs[0], outputs[0] */
    int ninputs, noutputs;
    fl_node *inputs[FL_MODEL_MAX_IO], *outputs[FL_MODEL_MAX_IO];
    bool functional;
    int nsyms;
    fl_sym **syms;                      /* functional: every call, in topological order */
    uint64_t seed;
    bool compiled;
    bool frozen;                        /* trainable false as a whole (Keras's model.trainable) */
    fl_optimizer *opt;
    fl_loss loss;
    int nmetrics;
    fl_metric metrics[FL_MAX_METRICS];  /* as given */
    int metric_codes[FL_MAX_METRICS];   /* resolved FL_MC_* */
    fl_device_kind device;
    /* training-step buffers (allocated with the graph's batch) */
    float *target, *row_loss, *row_score;
    double *stats;                      /* running loss/metric totals (device) */
    int64_t *idx_dev;                   /* batch sample indices (device backends) */
    float *stage_x, *stage_y;           /* host staging when data stays on the host */
    float *weight, *stage_w;            /* the batch's sample weights per loss row (fit's sample_weight/class_weight) */
    bool batch_weighted;                /* the batch in the graph has weights in `weight` */
    int64_t target_cap;
    int64_t epochs_run;
    bool stop_training;                 /* Keras model.stop_training: set by a callback, cleared by fl_fit */
    fl_layer *in_layers[FL_MODEL_MAX_IO]; /* the InputLayer of each input */
    bool dynamic;                       /* an input has a None axis: the graph is bound to the data's length */
    int64_t dist_batch, dist_share;     /* under MPI: the step's global batch and this rank's share (0: one process) */
    struct fl_dp_buckets *dp;           /* under MPI: the gradient buckets (src/dist/data_parallel.c), fl_fit's */
};

/* Binds the None axes of the model's inputs to the lengths of xs[i] (its
 * input i): when they differ from those the graph is planned for, the
 * graph is planned again for them (weights kept, buffers reused where they
 * fit). A no-op for models without None axes. On failure (a layer that
 * cannot take that length) the error is prefixed with `what` and the
 * graph stays as it was. */
fl_status fl_model_bind(fl_model *m, const fl_tensor *const *xs, int nx, const char *what);

#endif
