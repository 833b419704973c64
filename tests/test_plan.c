/*
 * test_plan.c — the batch buffers' arena (src/core/plan.c): the placement
 * never lets two buffers that live at the same time overlap, and packs a
 * chain as tightly as its lifetimes allow; predict's values-only buffers
 * and training's switch back and forth without changing a result; the CPU
 * backend puts big buffers on 2 MiB pages where the kernel offers them.
 * (Whether the lifetimes themselves are right is what every gradient check
 * and Keras comparison runs through: they all train on shared gradients.)
 */
#include "check.h"
#include "backend/cpu/cpu_simd.h"
#include "core/plan.h"
#include "ops/ops.h"
#include "nn/nn.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

static void test_place_small(void) {
    int64_t lo[3] = {0, 2, 1}, hi[3] = {1, 3, 2};
    size_t bytes[3] = {100, 100, 40}, off[3];
    bool over;
    /* 0 and 1 never meet: one place; 2 meets both */
    size_t total = fl_plan_place(3, lo, hi, bytes, off, &over);
    CHECK(!over);
    CHECK_MSG(total == 140 && off[0] == off[1] && (off[2] + 40 <= off[0] || off[2] >= off[0] + 100),
              "total %zu, offsets %zu %zu %zu", total, off[0], off[1], off[2]);
    /* a chain, each read by the next: two at a time */
    enum { N = 50 };
    int64_t clo[N], chi[N];
    size_t cb[N], co[N];
    for (int i = 0; i < N; i++) { clo[i] = i; chi[i] = i + 1; cb[i] = 256; }
    CHECK_MSG(fl_plan_place(N, clo, chi, cb, co, &over) == 512 && !over, "a chain of %d takes more than two", N);
    /* a buffer of size 0 takes nothing */
    size_t zb[2] = {0, 64}, zo[2];
    CHECK(fl_plan_place(2, (int64_t[]){0, 0}, (int64_t[]){5, 5}, zb, zo, &over) == 64);
}

/* random lifetimes and sizes: no two that meet in time meet in memory; the
 * arena lies between the most bytes alive at once and the sum */
static void test_place_random(void) {
    enum { MAXN = 80 };
    int64_t lo[MAXN], hi[MAXN];
    size_t bytes[MAXN], off[MAXN];
    int bad = 0;
    double ratio = 0;
    for (int trial = 0; trial < 2000; trial++) {
        int n = 1 + (int)(fl_philox_u32(7, 1, (uint64_t)trial) % MAXN);
        size_t sum = 0;
        for (int i = 0; i < n; i++) {
            uint64_t k = (uint64_t)trial * MAXN + (uint64_t)i;
            lo[i] = fl_philox_u32(7, 2, k) % 40;
            hi[i] = lo[i] + fl_philox_u32(7, 3, k) % 12;
            bytes[i] = (fl_philox_u32(7, 4, k) % 8 == 0) ? 0 : 64 * (1 + fl_philox_u32(7, 5, k) % 100);
            sum += bytes[i];
        }
        bool over;
        size_t total = fl_plan_place(n, lo, hi, bytes, off, &over);
        size_t peak = 0;
        for (int64_t t = 0; t < 52; t++) {
            size_t live = 0;
            for (int i = 0; i < n; i++) live += lo[i] <= t && t <= hi[i] ? bytes[i] : 0;
            if (live > peak) peak = live;
        }
        bool ok = !over && total >= peak && total <= sum;
        for (int i = 0; i < n && ok; i++) {
            ok = off[i] + bytes[i] <= total;
            for (int j = i + 1; j < n && ok; j++)
                if (bytes[i] && bytes[j] && lo[i] <= hi[j] && lo[j] <= hi[i])
                    ok = off[i] + bytes[i] <= off[j] || off[j] + bytes[j] <= off[i];
        }
        if (!ok && bad++ < 3) fprintf(stderr, "trial %d: arena %zu, peak %zu, sum %zu: overlap or out of range\n",
                                      trial, total, peak, sum);
        if (peak) ratio = fmax(ratio, (double)total / (double)peak);
    }
    CHECK_MSG(bad == 0, "%d of 2000 random placements wrong", bad);
    CHECK_MSG(ratio < 1.6, "the arena was up to %.2fx the most bytes alive at once", ratio);
}

static fl_model *small_cnn(void) {
    fl_model *m = fl_sequential(fl_input(12, 12, 2), fl_conv2d(6, 3, .activation = FL_RELU),
                                fl_conv2d(8, 3, .activation = FL_RELU), fl_max_pooling2d(2),
                                fl_batch_normalization(), fl_dropout(0.25f), fl_flatten(),
                                fl_dense(16, .activation = FL_RELU), fl_dropout(0.5f),
                                fl_dense(3, .activation = FL_SOFTMAX));
    if (m) {
        fl_model_set_seed(m, 11);
        fl_compile(m, fl_adam(.learning_rate = 1e-3f), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY);
    }
    return m;
}

static bool same_weights(fl_model *a, fl_model *b) {
    for (int l = 0; l < fl_model_num_layers(a); l++) {
        fl_layer *la = fl_model_layer(a, l), *lb = fl_model_layer(b, l);
        for (int k = 0; k < fl_layer_num_weights(la); k++) {
            fl_tensor *wa = fl_layer_weight(la, k), *wb = fl_layer_weight(lb, k);
            if (!wa || !wb || fl_tensor_size(wa) != fl_tensor_size(wb) ||
                memcmp(fl_tensor_data(wa), fl_tensor_data(wb), (size_t)fl_tensor_size(wa) * sizeof(float)) != 0)
                return false;
        }
    }
    return true;
}

static void test_modes(void) {
    enum { N = 96 };
    fl_tensor *x = fl_tensor_zeros(FL_FLOAT32, N, 12, 12, 2), *y = fl_tensor_zeros(FL_FLOAT32, N);
    float *xd = fl_tensor_data(x), *yd = fl_tensor_data(y);
    for (int i = 0; i < N * 12 * 12 * 2; i++) xd[i] = fl_philox_uniform(5, 1, (uint64_t)i);
    for (int i = 0; i < N; i++) yd[i] = (float)(fl_philox_u32(5, 2, (uint64_t)i) % 3);
    fl_model *a = small_cnn(), *b = small_cnn();
    CHECK(a && b);
    if (!a || !b) return;

    /* predict first: inference's buffers, smaller than training's */
    fl_tensor *p0 = fl_predict(a, x, .batch_size = 32, .verbose = FL_VERBOSE_SILENT);
    CHECK(p0 && a->g.infer && a->g.batch_cap == 32);
    fl_memory_info mi;
    CHECK(fl_model_memory(a, &mi) == FL_OK);
    CHECK_MSG(mi.inference_bytes_per_sample > 0 && 2 * mi.inference_bytes_per_sample < mi.bytes_per_sample,
              "per sample: predict %lld, training %lld bytes", (long long)mi.inference_bytes_per_sample,
              (long long)mi.bytes_per_sample);
    CHECK_MSG(a->g.arena_bytes >= (size_t)(32 * mi.inference_bytes_per_sample) &&
              a->g.arena_bytes < (size_t)(32 * mi.inference_bytes_per_sample) + 64 * 256,
              "predict's arena %zu bytes for 32 samples of %lld", a->g.arena_bytes,
              (long long)mi.inference_bytes_per_sample);

    /* training after it makes training's buffers, and trains as a model that never predicted */
    fl_history *ha = fl_fit(a, x, y, .batch_size = 16, .epochs = 2, .validation_split = 0.25f,
                            .verbose = FL_VERBOSE_SILENT);
    fl_history *hb = fl_fit(b, x, y, .batch_size = 16, .epochs = 2, .validation_split = 0.25f,
                            .verbose = FL_VERBOSE_SILENT);
    CHECK(ha && hb && !a->g.infer);
    CHECK_MSG(same_weights(a, b), "training after a predict differs from training alone");
    fl_history_free(ha);
    fl_history_free(hb);

    /* predict through training's buffers (they hold the batch) and through inference's: the same bits */
    fl_tensor *p1 = fl_predict(a, x, .batch_size = 16, .verbose = FL_VERBOSE_SILENT);
    CHECK(p1 && !a->g.infer);
    fl_tensor *p3 = fl_predict(a, x, .batch_size = 32, .verbose = FL_VERBOSE_SILENT); /* more than they hold */
    CHECK(p3 && a->g.infer && a->g.batch_cap == 32);
    fl_tensor *p2 = fl_predict(a, x, .batch_size = 16, .verbose = FL_VERBOSE_SILENT);
    CHECK(p2 && a->g.infer);
    CHECK_MSG(p1 && p2 && memcmp(fl_tensor_data(p1), fl_tensor_data(p2), (size_t)fl_tensor_size(p1) * sizeof(float)) == 0,
              "predict differs between training's and inference's buffers");
    float ra[2], rb[2];
    CHECK(fl_evaluate(a, x, y, ra, 2, .batch_size = 16, .verbose = FL_VERBOSE_SILENT) == FL_OK);
    CHECK(fl_evaluate(b, x, y, rb, 2, .batch_size = 16, .verbose = FL_VERBOSE_SILENT) == FL_OK);
    CHECK_MSG(ra[0] == rb[0] && ra[1] == rb[1], "evaluate: %g %g against %g %g", ra[0], ra[1], rb[0], rb[1]);

    /* and training again, from inference's buffers, still as the other model */
    ha = fl_fit(a, x, y, .batch_size = 16, .epochs = 1, .verbose = FL_VERBOSE_SILENT);
    hb = fl_fit(b, x, y, .batch_size = 16, .epochs = 1, .verbose = FL_VERBOSE_SILENT);
    CHECK(ha && hb && !a->g.infer);
    CHECK_MSG(same_weights(a, b), "training after inference's buffers differs");
    fl_history_free(ha);
    fl_history_free(hb);
    fl_tensor_free(p0); fl_tensor_free(p1); fl_tensor_free(p2); fl_tensor_free(p3);
    fl_model_free(a); fl_model_free(b);
    fl_tensor_free(x); fl_tensor_free(y);
}

/* The largest |a - b| over two predictions of one shape (0 if either is missing: the caller checks them). */
static double max_abs_diff(fl_tensor *a, fl_tensor *b) {
    double worst = 0;
    for (int64_t i = 0; a && b && i < fl_tensor_size(a); i++)
        worst = fmax(worst, fabs((double)((float *)fl_tensor_data(a))[i] - ((float *)fl_tensor_data(b))[i]));
    return worst;
}

/* A residual conv net whose training buffers leave values out (plan.h: a normalisation's ReLU fused, its
 * affine left to the Add or the next convolution): validation, predict and evaluate after training get
 * inference's own buffers (an inference forward writes those values: it crashed in training's), training's
 * are kept meanwhile and taken up again, and validating each epoch leaves training as it is without. */
static fl_model *res_cnn(void) {
    fl_sym *in = fl_keras_input(10, 10, 3);
    fl_sym *h = fl_call(fl_conv2d(8, 3, .padding = FL_SAME, .no_bias = true), in);
    h = fl_call(fl_relu_layer(), fl_call(fl_batch_normalization(), h));
    fl_sym *r = fl_call(fl_conv2d(8, 3, .padding = FL_SAME), h);
    r = fl_call(fl_relu_layer(), fl_call(fl_batch_normalization(), r));
    r = fl_call(fl_batch_normalization(), fl_call(fl_conv2d(8, 3, .padding = FL_SAME), r));
    fl_sym *o = fl_call(fl_relu_layer(), fl_call_n(fl_add(), r, h));
    o = fl_call(fl_relu_layer(6.0f), fl_call(fl_batch_normalization(), fl_call(fl_conv2d(4, 1), o)));
    o = fl_call(fl_conv2d(4, 1), o);
    o = fl_call(fl_dense(3, .activation = FL_SOFTMAX), fl_call(fl_global_average_pooling2d(), o));
    fl_model *m = fl_model_new(fl_syms(in), fl_syms(o), "res_cnn");
    if (m) {
        fl_model_set_seed(m, 5);
        fl_compile(m, fl_adam(.learning_rate = 1e-2f), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY);
    }
    return m;
}

static void test_modes_fused(void) {
    enum { N = 64 };
    fl_tensor *x = fl_tensor_zeros(FL_FLOAT32, N, 10, 10, 3), *y = fl_tensor_zeros(FL_FLOAT32, N);
    float *xd = fl_tensor_data(x), *yd = fl_tensor_data(y);
    for (int i = 0; i < N * 10 * 10 * 3; i++) xd[i] = fl_philox_uniform(6, 1, (uint64_t)i);
    for (int i = 0; i < N; i++) yd[i] = (float)(fl_philox_u32(6, 2, (uint64_t)i) % 3);
    fl_model *a = res_cnn(), *b = res_cnn();
    CHECK(a && b);
    if (!a || !b) return;
    /* a validates each epoch on the last quarter; b trains on the same first 48 samples alone */
    fl_history *ha = fl_fit(a, x, y, .batch_size = 16, .epochs = 2, .validation_split = 0.25f, .no_shuffle = true,
                            .verbose = FL_VERBOSE_SILENT);
    CHECK(ha != NULL);
    fl_tensor *x48 = fl_tensor_zeros(FL_FLOAT32, 48, 10, 10, 3), *y48 = fl_tensor_zeros(FL_FLOAT32, 48);
    memcpy(fl_tensor_data(x48), xd, (size_t)48 * 10 * 10 * 3 * sizeof(float));
    memcpy(fl_tensor_data(y48), yd, (size_t)48 * sizeof(float));
    fl_history *hb =
        fl_fit(b, x48, y48, .batch_size = 16, .epochs = 2, .no_shuffle = true, .verbose = FL_VERBOSE_SILENT);
    CHECK(hb != NULL);
    CHECK_MSG(same_weights(a, b), "validating each epoch changed training");
    /* the last epoch's validation ran in inference's buffers, training's kept meanwhile */
    CHECK_MSG(a->g.infer && a->g.kept.node && !a->g.kept.infer, "after validation: %s buffers, %s kept",
              a->g.infer ? "inference's" : "training's", !a->g.kept.node ? "none" : a->g.kept.infer ? "inference's"
                                                                                                 : "training's");
    const void *train_arena = a->g.kept.arena;
    fl_tensor *pa = fl_predict(a, x, .batch_size = 16, .verbose = FL_VERBOSE_SILENT);
    CHECK_MSG(pa && a->g.infer, "predict after training: %s, in %s buffers", pa ? "ran" : "failed",
              a->g.infer ? "inference's" : "training's");
    fl_tensor *pb = fl_predict(b, x, .batch_size = 32, .verbose = FL_VERBOSE_SILENT);
    CHECK_MSG(pa && pb && max_abs_diff(pa, pb) < 1e-5, "predict at 16 and 32 differ by %g", max_abs_diff(pa, pb));
    float ra[2];
    CHECK(fl_evaluate(a, x, y, ra, 2, .batch_size = 16, .verbose = FL_VERBOSE_SILENT) == FL_OK);
    fl_history_free(ha);
    fl_history_free(hb);
    const void *infer_arena = a->g.arena;
    ha = fl_fit(a, x48, y48, .batch_size = 16, .epochs = 1, .no_shuffle = true, .verbose = FL_VERBOSE_SILENT);
    hb = fl_fit(b, x48, y48, .batch_size = 16, .epochs = 1, .no_shuffle = true, .verbose = FL_VERBOSE_SILENT);
    CHECK_MSG(ha && hb && !a->g.infer && a->g.arena == train_arena && a->g.kept.arena == infer_arena,
              "training after predict: not in the kept buffers (arena %p, was %p)", a->g.arena, train_arena);
    CHECK_MSG(same_weights(a, b), "training in the kept buffers differs");
    fl_history_free(ha);
    fl_history_free(hb);
    /* under a memory budget that holds either mode's buffers but not both, none are kept */
    fl_model *c = res_cnn();
    fl_history *hc = c ? fl_fit(c, x48, y48, .batch_size = 16, .epochs = 1, .verbose = FL_VERBOSE_SILENT) : NULL;
    CHECK(hc && !c->g.infer && !c->g.kept.node);
    fl_history_free(hc);
    const int64_t was = fl_get_max_model_bytes();
    CHECK(c && fl_set_max_model_bytes(c->g.param_bytes + (int64_t)c->g.arena_bytes + 1) == FL_OK);
    fl_tensor *pc = c ? fl_predict(c, x, .batch_size = 16, .verbose = FL_VERBOSE_SILENT) : NULL;
    CHECK_MSG(pc && c->g.infer && !c->g.kept.node, "predict under a budget for one mode: %s, %s kept",
              pc ? "ran" : fl_last_error(), c && c->g.kept.node ? "buffers" : "nothing");
    hc = c ? fl_fit(c, x48, y48, .batch_size = 16, .epochs = 1, .verbose = FL_VERBOSE_SILENT) : NULL;
    CHECK_MSG(hc && !c->g.infer && !c->g.kept.node, "training under a budget for one mode: %s, %s kept",
              hc ? "ran" : fl_last_error(), c && c->g.kept.node ? "buffers" : "nothing");
    CHECK(fl_set_max_model_bytes(was) == FL_OK);
    fl_history_free(hc);
    fl_tensor_free(pc);
    fl_model_free(c);
    fl_tensor_free(pa); fl_tensor_free(pb);
    fl_tensor_free(x48); fl_tensor_free(y48);
    fl_model_free(a); fl_model_free(b);
    fl_tensor_free(x); fl_tensor_free(y);
}

/* Sets every BatchNormalization weight k of layer l to base + U(0, 1) from Philox stream stream0 + 10 l + k,
 * base 0.5 but mean_base for the moving mean (k = 2). */
static void bn_weights_away(fl_model *m, uint64_t stream0, float mean_base) {
    for (int l = 0; l < fl_model_num_layers(m); l++) {
        fl_layer *L = fl_model_layer(m, l);
        if (strcmp(fl_layer_class(L), "BatchNormalization") != 0) continue;
        for (int k = 0; k < fl_layer_num_weights(L); k++) {
            fl_tensor *w = fl_layer_weight(L, k);
            float *d = fl_tensor_data(w);
            for (int64_t i = 0; i < fl_tensor_size(w); i++)
                d[i] = (k == 2 ? mean_base : 0.5f) +
                       fl_philox_uniform(9, stream0 + (uint64_t)(10 * l + k), (uint64_t)i);
            CHECK(fl_layer_set_weight(L, k, w) == FL_OK);
        }
    }
}

/* inference folds a BatchNormalization into the convolution before it when the batch pays for it (and a
 * ReLU6 after it into the epilogue): the same predictions (to rounding) as the layers run apart, with and
 * without bias, gamma and beta, on a Conv2D and a DepthwiseConv2D */
static void test_bn_fold(void) {
    enum { N = 64 };
    /* shapes where batch 1 does not fold (each output is smaller than twice its weights) and batch 64 does */
    fl_tensor *x = fl_tensor_zeros(FL_FLOAT32, N, 4, 4, 16);
    float *xd = fl_tensor_data(x);
    for (int i = 0; i < N * 4 * 4 * 16; i++) xd[i] = fl_philox_uniform(9, 1, (uint64_t)i) - 0.5f;
    fl_model *m = fl_sequential(fl_input(4, 4, 16), fl_conv2d(64, 3, .padding = FL_SAME, .no_bias = true),
                                fl_batch_normalization(), fl_relu_layer(6.0f),
                                fl_depthwise_conv2d(3, .padding = FL_SAME), fl_batch_normalization(.no_scale = true),
                                fl_conv2d(4, 1), fl_batch_normalization(.no_center = true), fl_flatten(),
                                fl_dense(3, .activation = FL_SOFTMAX));
    CHECK(m != NULL);
    if (!m) return;
    fl_model_set_seed(m, 3);
    CHECK(fl_compile(m, fl_sgd(.learning_rate = 0.1f), FL_SPARSE_CATEGORICAL_CROSSENTROPY) == FL_OK);
    /* moving statistics and gammas away from 0 and 1, so that a fold that skipped one would show */
    bn_weights_away(m, 2, 0.5f);
    fl_tensor *one = fl_predict(m, x, .batch_size = 1, .verbose = FL_VERBOSE_SILENT); /* too small to fold */
    int folded = 0;
    for (int i = 0; i < m->g.n; i++) folded += m->g.nodes[i]->bn_folded;
    CHECK_MSG(folded == 0, "%d convolutions folded at batch 1", folded);
    fl_tensor *all = fl_predict(m, x, .batch_size = N, .verbose = FL_VERBOSE_SILENT);
    int convs = 0;
    folded = 0;
    for (int i = 0; i < m->g.n; i++) {
        convs += m->g.nodes[i]->bn_folded > 0;
        folded += m->g.nodes[i]->bn_folded;
    }
    /* the first one with its ReLU(6.0) in the epilogue (2) */
    CHECK_MSG(convs == 3 && folded == 4, "%d of 3 convolutions folded their normalisation at batch %d (%d with the "
              "ReLU after it, of 1)", convs, N, folded - convs);
    const double worst = max_abs_diff(one, all);
    CHECK_MSG(one && all && worst < 1e-5, "folded and apart differ by %g", worst);
    fl_tensor_free(one);
    fl_tensor_free(all);
    fl_tensor_free(x);
    fl_model_free(m);
}

/* a LeakyReLU (the layer, or ReLU with a negative_slope) after a folded normalisation goes into the
 * convolution's epilogue too; not one with a threshold. The same predictions (to rounding) as apart. */
static void test_bn_fold_leaky(void) {
    enum { N = 64 };
    fl_tensor *x = fl_tensor_zeros(FL_FLOAT32, N, 4, 4, 16);
    float *xd = fl_tensor_data(x);
    for (int i = 0; i < N * 4 * 4 * 16; i++) xd[i] = fl_philox_uniform(9, 7, (uint64_t)i) - 0.5f;
    fl_model *m = fl_sequential(fl_input(4, 4, 16), fl_conv2d(32, 3, .padding = FL_SAME), fl_batch_normalization(),
                                fl_leaky_relu(.negative_slope = 0.1f), fl_conv2d(16, 3, .padding = FL_SAME),
                                fl_batch_normalization(), fl_relu_layer(.negative_slope = 0.3f),
                                fl_conv2d(8, 3, .padding = FL_SAME), fl_batch_normalization(),
                                fl_relu_layer(.negative_slope = 0.2f, .threshold = 0.5f), fl_flatten(),
                                fl_dense(3, .activation = FL_SOFTMAX));
    CHECK(m != NULL);
    if (!m) { fl_tensor_free(x); return; }
    fl_model_set_seed(m, 3);
    bn_weights_away(m, 20, -0.5f); /* statistics away from 0 and 1 */
    fl_tensor *one = fl_predict(m, x, .batch_size = 1, .verbose = FL_VERBOSE_SILENT); /* apart */
    fl_tensor *all = fl_predict(m, x, .batch_size = N, .verbose = FL_VERBOSE_SILENT);
    int folded[3] = {0}, k = 0, simd = 0;
    for (int i = 0; i < m->g.n && k < 3; i++)
        if (m->g.nodes[i]->op == FL_OP_CONV2D) {
            if (k == 0) simd = fl_backend_cpu()->conv_slope(&m->g.nodes[i]->conv);
            folded[k++] = m->g.nodes[i]->bn_folded;
        }
    CHECK_MSG(folded[0] == 1 + simd && folded[1] == 1 + simd && folded[2] == 1,
              "bn_folded %d %d %d at batch %d: expected %d %d 1 (the LeakyReLUs in the epilogue, not the ReLU with "
              "a threshold)", folded[0], folded[1], folded[2], N, 1 + simd, 1 + simd);
    const double worst = max_abs_diff(one, all);
    CHECK_MSG(one && all && worst < 1e-5, "folded with the LeakyReLUs and apart differ by %g", worst);
    fl_tensor_free(one);
    fl_tensor_free(all);
    fl_tensor_free(x);
    fl_model_free(m);
}

/* inference adds and applies the ReLU or ReLU6 that alone reads an Add in one pass (a residual block's
 * add and activation), writing the ReLU's value: bit for bit what the two layers give apart (NaN to 0,
 * the cap at 6, three inputs added left to right); not where the sum is read elsewhere or the ReLU leaks */
static void test_add_relu_fold(void) {
    enum { N = 16, H = 6, W = 5, C = 7, S = H * W * C };
    fl_sym *a = fl_keras_input(H, W, C), *b = fl_keras_input(H, W, C), *c = fl_keras_input(H, W, C);
    fl_sym *o1 = fl_call(fl_activation_layer(.activation = FL_RELU), fl_call_n(fl_add(), a, b));
    fl_sym *o2 = fl_call(fl_relu_layer(.max_value = 6.0f), fl_call_n(fl_add(), a, c));
    fl_sym *o3 = fl_call(fl_relu_layer(), fl_call_n(fl_add(), a, b, c));
    fl_sym *o4 = fl_call(fl_relu_layer(.negative_slope = 0.1f), fl_call_n(fl_add(), b, c));
    fl_sym *s = fl_call_n(fl_add(), c, b), *o5 = fl_call(fl_activation_layer(.activation = FL_RELU), s);
    fl_model *m = fl_model_new(fl_syms(a, b, c), fl_syms(o1, o2, o3, o4, o5, s), "adds");
    CHECK(m != NULL);
    if (!m) return;
    fl_tensor *x[3];
    for (int k = 0; k < 3; k++) {
        x[k] = fl_tensor_zeros(FL_FLOAT32, N, H, W, C);
        float *d = fl_tensor_data(x[k]);
        for (int i = 0; i < N * S; i++) d[i] = 10.0f * (fl_philox_uniform(11, (uint64_t)k, (uint64_t)i) - 0.5f);
        d[5 + k] = NAN; /* sums of NaN: the ReLU gives 0 */
    }
    fl_tensor *y[6] = {0};
    CHECK(fl_predict_multi(m, (const fl_tensor *const *)x, 3, y, 6, .batch_size = N, .verbose = FL_VERBOSE_SILENT) ==
          FL_OK);
    int folded = 0;
    for (int i = 0; i < m->g.n; i++) folded += m->g.nodes[i]->relu_folded;
    CHECK_MSG(folded == 3, "%d Adds wrote their ReLU's value, expected 3", folded);
    const float *xa = fl_tensor_data(x[0]), *xb = fl_tensor_data(x[1]), *xc = fl_tensor_data(x[2]);
    int bad = 0;
    for (int i = 0; y[5] && i < N * S; i++) {
        float s1 = xa[i] + xb[i], s2 = xa[i] + xc[i], s3 = s1 + xc[i], s4 = xb[i] + xc[i], s5 = xc[i] + xb[i];
        float want[6] = {s1 > 0 ? s1 : 0, s2 > 0 ? (s2 < 6 ? s2 : 6) : 0, s3 > 0 ? s3 : 0, s4 > 0 ? s4 : 0.1f * s4,
                         s5 > 0 ? s5 : 0, s5};
        for (int o = 0; o < 6; o++) {
            if (o == 3 && isnan(s4)) continue; /* the leaky ReLU's NaN: not this test's business */
            float got = ((const float *)fl_tensor_data(y[o]))[i];
            bool same = isnan(want[o]) ? isnan(got) : memcmp(&got, &want[o], sizeof got) == 0;
            if (!same && bad++ < 5) CHECK_MSG(0, "output %d element %d: %g, expected %g", o + 1, i, got, want[o]);
        }
    }
    CHECK_MSG(bad == 0, "%d elements differ", bad);
    for (int k = 0; k < 6; k++) fl_tensor_free(y[k]);
    for (int k = 0; k < 3; k++) fl_tensor_free(x[k]);
    fl_model_free(m);
}

/* Inference forms an Add as the Conv2D before it stores (fuse.res_add): a residual block's last
 * convolution, its folded normalisation, the Add and the ReLU after it in one pass. Blocks through Winograd
 * (3x3), the flat 1x1 tiles, the GEMM path (dilated) and with the Add's other input computed after the
 * convolution (the later one forms it); bit for bit what a twin model with the same weights gives, whose
 * convolutions' (or normalisations') values are model outputs too, so that nothing is formed there. At batch
 * 1 the normalisation is not folded, and the Add adds in place in the buffer the plan shares with it. */
static fl_model *conv_add_model(bool apart) {
    fl_sym *x = fl_keras_input(8, 6, 32);
    fl_sym *b1 = fl_call(fl_batch_normalization(), fl_call(fl_conv2d(32, 3, .padding = FL_SAME), x));
    fl_sym *o1 = fl_call(fl_relu_layer(), fl_call_n(fl_add(), x, b1));
    fl_sym *c2 = fl_call(fl_conv2d(32, 1), x), *o2 = fl_call_n(fl_add(), c2, x);
    fl_sym *c3 = fl_call(fl_conv2d(32, 3, .padding = FL_SAME, .dilation_rate = 2), x);
    fl_sym *o3 = fl_call(fl_relu_layer(.max_value = 6.0f), fl_call_n(fl_add(), c3, x));
    fl_sym *c4 = fl_call(fl_conv2d(32, 3, .padding = FL_SAME), x), *c5 = fl_call(fl_conv2d(32, 1), x);
    fl_sym *o4 = fl_call_n(fl_add(), c4, c5);
    return apart ? fl_model_new(fl_syms(x), fl_syms(o1, o2, o3, o4, b1, c2, c3, c5), "apart")
                 : fl_model_new(fl_syms(x), fl_syms(o1, o2, o3, o4), "formed");
}

static void test_conv_add_fold(void) {
    enum { N = 16 };
    fl_model *m = conv_add_model(false), *a = conv_add_model(true);
    CHECK(m != NULL && a != NULL);
    if (!m || !a) { fl_model_free(m); fl_model_free(a); return; }
    fl_model_set_seed(m, 5);
    bn_weights_away(m, 30, 0.3f);
    for (int l = 0; l < fl_model_num_layers(m); l++) /* the same weights in the twin */
        for (int k = 0; k < fl_layer_num_weights(fl_model_layer(m, l)); k++)
            CHECK(fl_layer_set_weight(fl_model_layer(a, l), k, fl_layer_weight(fl_model_layer(m, l), k)) == FL_OK);
    fl_tensor *x = fl_tensor_zeros(FL_FLOAT32, N, 8, 6, 32);
    float *xd = fl_tensor_data(x);
    for (int i = 0; i < N * 8 * 6 * 32; i++) xd[i] = 4.0f * (fl_philox_uniform(13, 1, (uint64_t)i) - 0.5f);
    for (int bs = N; bs >= 1; bs -= N - 1) {
        fl_tensor *y[4] = {0}, *z[8] = {0};
        CHECK(fl_predict_multi(m, (const fl_tensor *const *)&x, 1, y, 4, .batch_size = bs,
                               .verbose = FL_VERBOSE_SILENT) == FL_OK);
        int formed = 0, apart = 0;
        for (int i = 0; i < m->g.n; i++) formed += m->g.nodes[i]->res_fused;
        CHECK(fl_predict_multi(a, (const fl_tensor *const *)&x, 1, z, 8, .batch_size = bs,
                               .verbose = FL_VERBOSE_SILENT) == FL_OK);
        for (int i = 0; i < a->g.n; i++) apart += a->g.nodes[i]->res_fused;
        /* the first block's normalisation is folded at batch 16, not at 1 */
        const int want = fl_backend_cpu()->conv_res ? (bs == N ? 4 : 3) : 0;
        CHECK_MSG(formed == want && apart == 0, "batch %d: %d Adds formed by their convolution (%d in the twin), "
                  "expected %d", bs, formed, apart, want);
        for (int o = 0; o < 4; o++)
            CHECK_MSG(y[o] && z[o] && memcmp(fl_tensor_data(y[o]), fl_tensor_data(z[o]),
                                             (size_t)fl_tensor_size(y[o]) * sizeof(float)) == 0,
                      "batch %d: output %d differs from the layers apart by %g", bs, o + 1, max_abs_diff(y[o], z[o]));
        for (int o = 0; o < 8; o++) fl_tensor_free(o < 4 ? y[o] : NULL), fl_tensor_free(z[o]);
    }
    fl_tensor_free(x);
    fl_model_free(m);
    fl_model_free(a);
}

/* Predict's steps grow with weights that outgrow the L3 (train.c infer_step), but not past the model memory
 * limit: a model whose weights take most of the limit still predicts. 64 MB of weights (more than the L3 of
 * the machines here) and 24 KB of buffers a sample, so that steps grown to the weights (the batch of 512
 * whole: 12 MiB of buffers) would not fit a limit of the weights, their gradients and 10 MiB. */
static void test_infer_step_limit(void) {
    fl_model *m = fl_sequential(fl_input(2048), fl_dense(4096, .activation = FL_RELU), fl_dense(2048));
    CHECK(m != NULL);
    if (!m) return;
    enum { N = 512 };
    fl_tensor *x = fl_tensor_zeros(FL_FLOAT32, N, 2048);
    float *xd = fl_tensor_data(x);
    for (int i = 0; i < N * 2048; i++) xd[i] = fl_philox_uniform(17, 1, (uint64_t)i) - 0.5f;
    /* the limited predict first: a later one keeps the buffers an earlier one made */
    CHECK(fl_set_max_model_bytes(2 * (int64_t)(2 * 4096 * 2048 + 4096 + 2048) * 4 + (10 << 20)) == FL_OK);
    fl_tensor *lim = fl_predict(m, x, .batch_size = N, .verbose = FL_VERBOSE_SILENT);
    CHECK_MSG(lim != NULL, "predict under a limit of the weights, their gradients and 10 MiB: %s", fl_last_error());
    fl_set_max_model_bytes(0); /* the default again */
    fl_tensor *all = fl_predict(m, x, .batch_size = N, .verbose = FL_VERBOSE_SILENT);
    /* flynn's own GEMM (AVX-512) gives the same bits in any step; OpenBLAS's sums move with the step's rows */
    const double tol = fl_cpu_simd() ? 0.0 : 1e-5;
    CHECK_MSG(all && lim && max_abs_diff(all, lim) <= tol, "predict under the limit differs by %g (allowed: %g)",
              max_abs_diff(all, lim), tol);
    fl_tensor_free(all);
    fl_tensor_free(lim);
    fl_tensor_free(x);
    fl_model_free(m);
}

/* The arena of a conv net is hundreds of MB: the CPU backend aligns buffers
 * of 4 MiB and more to 2 MiB and advises huge pages, so that touching one
 * faults in a few 2 MiB pages instead of thousands of 4 KiB ones (where
 * transparent huge pages are on: "always" or "madvise"). */
static long minor_faults(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_minflt;
}

static void test_huge_pages(void) {
    const fl_backend *be = fl_backend_cpu();
    const size_t bytes = (size_t)16 << 20;
    char *p = be->alloc(bytes + 1000);
    CHECK(p != NULL);
    if (!p) return;
    CHECK_MSG(((uintptr_t)p & (((uintptr_t)2 << 20) - 1)) == 0, "a 16 MB CPU buffer at %p, not on a 2 MiB boundary",
              (void *)p);
    char mode[128] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f) {
        if (!fgets(mode, sizeof mode, f)) mode[0] = 0;
        fclose(f);
    }
    const char *e = getenv("FLYNN_HUGE_PAGES");
#if defined(__SANITIZE_ADDRESS__)
    const int counted = 0; /* ASan's allocator and interceptors fault pages of their own (1,032 in the ASan build) */
#else
    const int counted = 1;
#endif
    if (counted && (strstr(mode, "[always]") || strstr(mode, "[madvise]")) && !(e && !strcmp(e, "0"))) {
        long f0 = minor_faults();
        memset(p, 1, bytes + 1000);
        long n = minor_faults() - f0;
        /* 4,097 with 4 KiB pages; 9 with 2 MiB ones (a few more where the kernel had none free) */
        CHECK_MSG(n < 1024, "touching 16 MB faulted %ld times (THP mode: %s)", n, mode);
    } else {
        memset(p, 1, bytes + 1000);
        printf("test_plan: %s; only the alignment checked\n",
               counted ? "transparent huge pages off here" : "faults not counted under ASan");
    }
    CHECK(p[bytes + 999] == 1);
    be->free(p);
}

/* Pages of [p, p + bytes) resident in memory (mincore over the pages that hold them); a failure is a failed
 * check, not a count of 0 */
static size_t resident_pages(const void *p, size_t bytes) {
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)p & ~(page - 1);
    const size_t len = (size_t)((uintptr_t)p + bytes - a), n = (len + page - 1) / page;
    unsigned char *v = malloc(n ? n : 1);
    size_t r = 0;
    const int ok = v && mincore((void *)a, len, v) == 0;
    CHECK_MSG(ok, "mincore over %zu bytes at %p failed", bytes, p);
    if (ok)
        for (size_t i = 0; i < n; i++) r += v[i] & 1;
    free(v);
    return r;
}

/* The CPU backend's zero-filled buffers (alloc_zeroed): zeros, small and large; the large ones untouched until
 * written. A model's weights' gradients and Adam's slots are such buffers: predict leaves them out of memory
 * (a model loaded only to predict held its weights four times: values, gradients, two slots), a training step
 * touches them. */
static void test_untouched_state(void) {
    const fl_backend *be = fl_backend_cpu();
    CHECK(be->alloc_zeroed != NULL);
    const size_t sizes[] = {100, (size_t)1 << 20, ((size_t)5 << 20) + 4};
    for (int i = 0; i < 3; i++) {
        float *p = fl_backend_alloc_zeroed(be, sizes[i]);
        CHECK(p != NULL);
        if (!p) continue;
        size_t nz = 0;
        for (size_t k = 0; k < sizes[i] / sizeof(float); k++) nz += p[k] != 0.0f;
        CHECK_MSG(nz == 0, "alloc_zeroed(%zu): %zu values not zero", sizes[i], nz);
        memset(p, 1, sizes[i]);
        be->free(p);
    }
    fl_model *m = fl_sequential(fl_input(512), fl_dense(1024, .activation = FL_RELU), fl_dense(10));
    CHECK(m && fl_compile(m, fl_adam(), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY) == FL_OK);
    if (!m) return;
    const fl_node *k = NULL;
    for (int i = 0; i < m->nlayers && !k; i++)
        if (m->layers[i]->nw > 0) k = m->layers[i]->w[0]; /* the first Dense's kernel: 2 MiB */
    const fl_param_ref *pr = m->opt && m->opt->nparams > 0 ? &m->opt->params[0] : NULL;
    CHECK(k && pr && pr->g == k->grad && pr->s0 && pr->s1);
    if (!k || !pr || !pr->s0 || !pr->s1) { fl_model_free(m); return; }
    const size_t bytes = (size_t)fl_node_size(k) * sizeof(float);
    fl_tensor *x = fl_tensor_zeros(FL_FLOAT32, 64, 512), *y = fl_tensor_zeros(FL_FLOAT32, 64);
    float *xd = fl_tensor_data(x), *yd = fl_tensor_data(y);
    for (int i = 0; i < 64 * 512; i++) xd[i] = fl_philox_uniform(3, 1, (uint64_t)i) - 0.5f;
    for (int i = 0; i < 64; i++) yd[i] = (float)(i % 10);
    fl_tensor *p = fl_predict(m, x, .batch_size = 64, .verbose = FL_VERBOSE_SILENT);
    CHECK(p != NULL);
    CHECK_MSG(resident_pages(k->grad, bytes) == 0 && resident_pages(pr->s0, bytes) == 0 &&
                  resident_pages(pr->s1, bytes) == 0,
              "after predict: %zu, %zu and %zu pages of the kernel's gradient and slots in memory",
              resident_pages(k->grad, bytes), resident_pages(pr->s0, bytes), resident_pages(pr->s1, bytes));
    fl_history *h = fl_fit(m, x, y, .batch_size = 64, .epochs = 1, .verbose = FL_VERBOSE_SILENT);
    CHECK(h != NULL);
    CHECK_MSG(resident_pages(k->grad, bytes) > 0 && resident_pages(pr->s0, bytes) > 0,
              "a training step left the gradient and the slots untouched");
    fl_history_free(h);
    fl_tensor_free(p);
    fl_tensor_free(x);
    fl_tensor_free(y);
    fl_model_free(m);
}

/* predict runs a batch whose buffers would not fit the CPU's budget (backend.h infer_budget) in steps of
 * fewer samples, at least 32, a multiple of 32; the predictions are those of whole batches, to the bit; a
 * recurrent model keeps whole batches; $FLYNN_INFER_STEP sets the step, a last step of fewer samples
 * included. */
/* A BatchNormalization is folded into its convolution in inference where the batch's output outnumbers the
 * kernel twice (here from 32 samples on), which moves the last bit. The choice weighs the batch predict was
 * asked for, not the step that runs nor the last, shorter batch: the same predictions in steps of 8 and 16,
 * and with a last batch of 8, as in whole batches. The same for a transposed convolution. */
static void test_fold_steps(void) {
    enum { N = 40 };
    fl_tensor *x = fl_tensor_zeros(FL_FLOAT32, N, 8, 8, 64);
    float *xd = fl_tensor_data(x);
    for (int i = 0; i < N * 8 * 8 * 64; i++) xd[i] = fl_philox_uniform(5, 2, (uint64_t)i) - 0.5f;
    fl_model *m = fl_sequential(fl_input(8, 8, 64), fl_conv2d(64, 3), fl_batch_normalization(), fl_relu_layer(),
                                fl_conv2d(8, 1));
    CHECK(m);
    if (!m) { fl_tensor_free(x); return; }
    fl_model_set_seed(m, 4);
    const size_t bytes = (size_t)N * 6 * 6 * 8 * sizeof(float);
    setenv("FLYNN_INFER_STEP", "100000", 1);
    fl_tensor *whole = fl_predict(m, x, .batch_size = N, .verbose = FL_VERBOSE_SILENT);
    fl_tensor *by32 = fl_predict(m, x, .batch_size = 32, .verbose = FL_VERBOSE_SILENT); /* then 8 */
    setenv("FLYNN_INFER_STEP", "8", 1);
    fl_tensor *s8 = fl_predict(m, x, .batch_size = N, .verbose = FL_VERBOSE_SILENT);
    setenv("FLYNN_INFER_STEP", "16", 1); /* 16, 16 and 8 */
    fl_tensor *s16 = fl_predict(m, x, .batch_size = N, .verbose = FL_VERBOSE_SILENT);
    unsetenv("FLYNN_INFER_STEP");
    CHECK(whole && by32 && s8 && s16);
    if (whole && by32 && s8 && s16) {
        CHECK_MSG(memcmp(fl_tensor_data(s8), fl_tensor_data(whole), bytes) == 0,
                  "predict in steps of 8 differs from the whole batch of %d (the fold weighed the step)", N);
        CHECK_MSG(memcmp(fl_tensor_data(s16), fl_tensor_data(whole), bytes) == 0,
                  "predict in steps of 16 differs from the whole batch of %d", N);
        CHECK_MSG(memcmp(fl_tensor_data(by32), fl_tensor_data(whole), bytes) == 0,
                  "predict in batches of 32: the last batch of 8 differs (the fold weighed it alone)");
    }
    fl_tensor_free(whole); fl_tensor_free(by32); fl_tensor_free(s8); fl_tensor_free(s16);
    fl_model_free(m);
    /* a transposed convolution's products ran through OpenBLAS in chunks of samples, whose sums moved with the
     * chunk's rows: in steps of 8 its predictions differed from whole batches. The own GEMM (AVX-512) does
     * not; without it, OpenBLAS still may. */
    if (!fl_cpu_simd()) {
        printf("test_plan: SKIP Conv2DTranspose in steps: no AVX-512 kernels here (OpenBLAS computes it)\n");
        fl_tensor_free(x);
        return;
    }
    m = fl_sequential(fl_input(8, 8, 64), fl_conv2d_transpose(1, 3, .strides = 2, .padding = FL_SAME,
                                                              .activation = FL_SIGMOID));
    CHECK(m);
    if (m) {
        fl_model_set_seed(m, 5);
        setenv("FLYNN_INFER_STEP", "100000", 1);
        whole = fl_predict(m, x, .batch_size = N, .verbose = FL_VERBOSE_SILENT);
        setenv("FLYNN_INFER_STEP", "8", 1);
        s8 = fl_predict(m, x, .batch_size = N, .verbose = FL_VERBOSE_SILENT);
        unsetenv("FLYNN_INFER_STEP");
        CHECK_MSG(whole && s8 && memcmp(fl_tensor_data(s8), fl_tensor_data(whole),
                                        (size_t)N * 16 * 16 * sizeof(float)) == 0,
                  "Conv2DTranspose: predict in steps of 8 differs from the whole batch of %d", N);
        fl_tensor_free(whole); fl_tensor_free(s8);
        fl_model_free(m);
    }
    fl_tensor_free(x);
}

/* The step infer_step takes for a batch of n: whole multiples of 32 samples whose buffers fit the budget;
 * 32 where fewer fit, unless a sample takes more than a quarter of it: then 8 (two per thread at least). */
static int64_t expected_step(const fl_backend *be, const fl_memory_info *mi, int64_t n) {
    const int64_t least = 2 * fl_get_num_threads() > 8 ? 2 * fl_get_num_threads() : 8;
    int64_t want = (int64_t)(be->infer_budget() / (size_t)mi->inference_bytes_per_sample);
    want = want >= 32 ? want - want % 32 : want >= 4 ? 32 : least;
    return want < n ? want : n;
}

/* A model whose samples take more than a quarter of the budget (on a machine whose threads' L2 holds
 * fewer than 4 of them) steps by 8: unet_small's predict at 512 ran 1.6x as fast as in steps of 32. */
static void test_infer_step_large(void) {
    const fl_backend *be = fl_backend_cpu();
    fl_model *m = fl_sequential(fl_input(64, 64, 8), fl_conv2d(96, 3, .padding = FL_SAME, .activation = FL_RELU),
                                fl_conv2d(96, 3, .padding = FL_SAME), fl_global_average_pooling2d(), fl_dense(2));
    CHECK(m);
    if (!m) return;
    fl_memory_info mi;
    CHECK(fl_model_memory(m, &mi) == FL_OK && mi.inference_bytes_per_sample > 0);
    const int64_t want = expected_step(be, &mi, 40);
    if (be->infer_budget() / (size_t)mi.inference_bytes_per_sample >= 4)
        printf("test_plan: note: the budget (%zu) holds 4 or more samples of %lld bytes: not the small step\n",
               be->infer_budget(), (long long)mi.inference_bytes_per_sample);
    fl_tensor *x = fl_tensor_zeros(FL_FLOAT32, 40, 64, 64, 8);
    unsetenv("FLYNN_INFER_STEP");
    fl_tensor *p = fl_predict(m, x, .batch_size = 40, .verbose = FL_VERBOSE_SILENT);
    CHECK_MSG(p && m->g.batch_cap == want, "predict at 40: steps of %lld, expected %lld (budget %zu, %lld a sample)",
              (long long)m->g.batch_cap, (long long)want, be->infer_budget(), (long long)mi.inference_bytes_per_sample);
    fl_tensor_free(p);
    fl_tensor_free(x);
    fl_model_free(m);
}

static void test_infer_step(void) {
    enum { N = 200 };
    const fl_backend *be = fl_backend_cpu();
    CHECK(be->infer_budget != NULL);
    if (!be->infer_budget) return;
    fl_tensor *x = fl_tensor_zeros(FL_FLOAT32, N, 40, 40, 3);
    float *xd = fl_tensor_data(x);
    for (int i = 0; i < N * 40 * 40 * 3; i++) xd[i] = fl_philox_uniform(9, 1, (uint64_t)i);
    fl_model *m = fl_sequential(fl_input(40, 40, 3), fl_conv2d(48, 3, .padding = FL_SAME, .activation = FL_RELU),
                                fl_conv2d(32, 3, .activation = FL_RELU), fl_global_average_pooling2d(),
                                fl_dense(5, .activation = FL_SOFTMAX));
    CHECK(m);
    if (!m) { fl_tensor_free(x); return; }
    fl_model_set_seed(m, 3);
    fl_memory_info mi;
    CHECK(fl_model_memory(m, &mi) == FL_OK && mi.inference_bytes_per_sample > 0);
    int64_t want = expected_step(be, &mi, N);
    unsetenv("FLYNN_INFER_STEP");
    fl_tensor *ps = fl_predict(m, x, .batch_size = N, .verbose = FL_VERBOSE_SILENT);
    CHECK_MSG(ps && m->g.batch_cap == want, "predict at %d: steps of %lld, expected %lld (budget %zu, %lld a sample)", N,
              (long long)m->g.batch_cap, (long long)want, be->infer_budget(), (long long)mi.inference_bytes_per_sample);
    /* (the buffers only grow: the capacity is the largest step so far) */
    setenv("FLYNN_INFER_STEP", "48", 1); /* four of 48 and one of 8 */
    fl_tensor *p48 = fl_predict(m, x, .batch_size = N, .verbose = FL_VERBOSE_SILENT);
    CHECK_MSG(p48 && m->g.batch_cap == (want > 48 ? want : 48), "FLYNN_INFER_STEP=48: steps of %lld",
              (long long)m->g.batch_cap);
    setenv("FLYNN_INFER_STEP", "100000", 1);
    fl_tensor *pw = fl_predict(m, x, .batch_size = N, .verbose = FL_VERBOSE_SILENT);
    CHECK_MSG(pw && m->g.batch_cap == N, "FLYNN_INFER_STEP=100000: steps of %lld", (long long)m->g.batch_cap);
    unsetenv("FLYNN_INFER_STEP");
    const size_t bytes = (size_t)N * 5 * sizeof(float);
    CHECK_MSG(ps && pw && memcmp(fl_tensor_data(ps), fl_tensor_data(pw), bytes) == 0,
              "predict in steps differs from whole batches");
    CHECK_MSG(p48 && pw && memcmp(fl_tensor_data(p48), fl_tensor_data(pw), bytes) == 0,
              "predict in steps of 48 differs from whole batches");
    fl_tensor_free(ps); fl_tensor_free(pw); fl_tensor_free(p48);

    /* evaluate takes the same steps (on a fresh model: the buffers only grow); its loss and accuracy as in
     * whole batches (sums in double) */
    fl_tensor *y = fl_tensor_zeros(FL_FLOAT32, N);
    for (int i = 0; i < N; i++) ((float *)fl_tensor_data(y))[i] = (float)(fl_philox_u32(9, 3, (uint64_t)i) % 5);
    fl_compile(m, fl_adam(), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY);
    float rs[2] = {0}, rw[2] = {0};
    setenv("FLYNN_INFER_STEP", "100000", 1);
    CHECK(fl_evaluate(m, x, y, rw, 2, .batch_size = N, .verbose = FL_VERBOSE_SILENT) == FL_OK);
    unsetenv("FLYNN_INFER_STEP");
    fl_model_free(m);
    m = fl_sequential(fl_input(40, 40, 3), fl_conv2d(48, 3, .padding = FL_SAME, .activation = FL_RELU),
                      fl_conv2d(32, 3, .activation = FL_RELU), fl_global_average_pooling2d(),
                      fl_dense(5, .activation = FL_SOFTMAX));
    if (m) {
        fl_model_set_seed(m, 3);
        fl_compile(m, fl_adam(), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY);
        CHECK(fl_evaluate(m, x, y, rs, 2, .batch_size = N, .verbose = FL_VERBOSE_SILENT) == FL_OK);
        CHECK_MSG(m->g.batch_cap == want, "evaluate at %d: steps of %lld, expected %lld", N,
                  (long long)m->g.batch_cap, (long long)want);
    }
    CHECK_MSG(fabsf(rs[0] - rw[0]) <= 1e-6f * fabsf(rw[0]) && rs[1] == rw[1] && rw[0] > 0,
              "evaluate in steps: loss %.9g, accuracy %g; whole batches %.9g, %g", rs[0], rs[1], rw[0], rw[1]);
    fl_tensor_free(y);
    fl_model_free(m);
    fl_tensor_free(x);

    /* an LSTM: whole batches, whatever its buffers */
    fl_tensor *t = fl_tensor_zeros(FL_FLOAT32, N, 64, 16);
    float *td = fl_tensor_data(t);
    for (int i = 0; i < N * 64 * 16; i++) td[i] = fl_philox_uniform(9, 2, (uint64_t)i);
    fl_model *r = fl_sequential(fl_input(64, 16), fl_lstm(64, .return_sequences = true), fl_lstm(32),
                                fl_dense(3, .activation = FL_SOFTMAX));
    CHECK(r);
    if (r) {
        fl_tensor *pr = fl_predict(r, t, .batch_size = N, .verbose = FL_VERBOSE_SILENT);
        CHECK_MSG(pr && r->g.batch_cap == N, "an LSTM's predict at %d: steps of %lld", N, (long long)r->g.batch_cap);
        fl_tensor_free(pr);
        fl_model_free(r);
    }
    fl_tensor_free(t);
}

/* A Conv1D runs as a convolution that takes the sequence itself, with no reshape after it, so the fusions that
 * look at a convolution's first reader see the layers after a Conv1D as they see them after a Conv2D: the
 * normalisation folded in inference and formed in the convolution's backward in training, the residual Add in
 * its store, the max pooling in its pass. A twin of Conv2Ds over (steps, 1, channels) with the same weights
 * makes the same fusions and the same bits, in predict at batch 32 and 1 and after two epochs of training. */
static fl_model *conv1d_twin(bool two_d) {
    enum { L = 40, C = 8, F = 16 };
    fl_sym *x = two_d ? fl_keras_input(L, 1, C) : fl_keras_input(L, C), *h;
#define CONV(f, k, ...) (two_d ? fl_conv2d(f, .kernel_h = k, .kernel_w = 1, __VA_ARGS__) : fl_conv1d(f, k, __VA_ARGS__))
    h = fl_call(fl_relu_layer(), fl_call(fl_batch_normalization(), fl_call(CONV(F, 3, .padding = FL_SAME,
                                                                                  .no_bias = true), x)));
    h = fl_call(fl_relu_layer(), fl_call_n(fl_add(), h, fl_call(CONV(F, 1, .padding = FL_VALID), h)));
    h = fl_call(CONV(F, 3, .padding = FL_SAME, .activation = FL_RELU), h);
    h = fl_call(two_d ? fl_max_pooling2d(.pool_h = 2, .pool_w = 1) : fl_max_pooling1d(2), h);
    if (two_d) h = fl_call(fl_zero_padding2d(.top = 2), h); /* Conv1D's "causal": 2 * (2 - 1) steps before */
    h = fl_call(two_d ? fl_conv2d(F, .kernel_h = 2, .kernel_w = 1, .dilation_h = 2, .dilation_w = 1,
                                  .activation = FL_RELU)
                      : fl_conv1d(F, 2, .padding = FL_CAUSAL, .dilation_rate = 2, .activation = FL_RELU),
                h);
#undef CONV
    h = fl_call(fl_batch_normalization(), h);
    h = fl_call(two_d ? fl_global_average_pooling2d() : fl_global_average_pooling1d(), h);
    fl_model *m = fl_model_new(fl_syms(x), fl_syms(fl_call(fl_dense(3, .activation = FL_SOFTMAX), h)), "twin");
    if (m && fl_compile(m, fl_sgd(.learning_rate = 0.05f, .momentum = 0.9f), FL_SPARSE_CATEGORICAL_CROSSENTROPY))
        fl_model_free(m), m = NULL;
    return m;
}

/* how many of m's convolutions make each fusion: in inference (bn_folded, res_fused after a predict), in
 * training (the normalisation's gradient formed by the convolution) and the max pooling in its pass */
static void conv_fusions(fl_model *m, int *fold, int *res, int *bn_train, int *pool) {
    *fold = *res = *bn_train = *pool = 0;
    for (int i = 0; i < m->g.n; i++) {
        const fl_node *n = m->g.nodes[i];
        *fold += n->bn_folded > 0;
        *res += n->res_fused;
        if (n->op != FL_OP_CONV2D) continue;
        *bn_train += n->fuse.conv_bn != NULL;
        *pool += n->fuse.pool != NULL;
    }
}

/* The twin's next layer with weights from *j on (the twin has a ZeroPadding2D more), or NULL */
static fl_layer *twin_next(fl_model *t, int *j) {
    while (*j < fl_model_num_layers(t)) {
        fl_layer *b = fl_model_layer(t, (*j)++);
        if (fl_layer_num_weights(b)) return b;
    }
    return NULL;
}

static void test_conv1d_fusions(void) {
    enum { N = 64, L = 40, C = 8 };
    fl_model *m = conv1d_twin(false), *t = conv1d_twin(true);
    CHECK(m && t);
    if (!m || !t) { fl_model_free(m); fl_model_free(t); return; }
    fl_model_set_seed(m, 7);
    bn_weights_away(m, 40, 0.2f);
    /* the same weights, layer by layer of those that have them: a (k, in, out) kernel is (k, 1, in, out) */
    for (int l = 0, j = 0; l < fl_model_num_layers(m); l++) {
        fl_layer *a = fl_model_layer(m, l);
        if (!fl_layer_num_weights(a)) continue;
        fl_layer *b = twin_next(t, &j);
        CHECK(b && !strcmp(fl_layer_class(b), strcmp(fl_layer_class(a), "Conv1D") ? fl_layer_class(a) : "Conv2D"));
        for (int k = 0; b && k < fl_layer_num_weights(a) && k < fl_layer_num_weights(b); k++) {
            fl_tensor *w = fl_layer_weight(a, k), *v = fl_layer_weight(b, k);
            fl_tensor *c = fl_tensor_clone(v);
            CHECK(c && fl_tensor_size(w) == fl_tensor_size(v));
            if (c) memcpy(fl_tensor_data(c), fl_tensor_data(w), (size_t)fl_tensor_size(w) * sizeof(float));
            CHECK(c && fl_layer_set_weight(b, k, c) == FL_OK);
            fl_tensor_free(c);
        }
    }
    fl_tensor *x = fl_tensor_zeros(FL_FLOAT32, N, L, C), *x2 = fl_tensor_zeros(FL_FLOAT32, N, L, 1, C);
    fl_tensor *y = fl_tensor_zeros(FL_FLOAT32, N);
    float *xd = fl_tensor_data(x), *yd = fl_tensor_data(y);
    for (int i = 0; i < N * L * C; i++) xd[i] = 2.0f * (fl_philox_uniform(21, 1, (uint64_t)i) - 0.5f);
    for (int i = 0; i < N; i++) yd[i] = (float)(i % 3);
    memcpy(fl_tensor_data(x2), xd, (size_t)N * L * C * sizeof(float));
    for (int bs = 32; bs >= 1; bs -= 31) {
        fl_tensor *p = fl_predict(m, x, .batch_size = bs, .verbose = FL_VERBOSE_SILENT);
        int f[4], g[4];
        conv_fusions(m, &f[0], &f[1], &f[2], &f[3]);
        fl_tensor *q = fl_predict(t, x2, .batch_size = bs, .verbose = FL_VERBOSE_SILENT);
        conv_fusions(t, &g[0], &g[1], &g[2], &g[3]);
        CHECK_MSG(memcmp(f, g, sizeof f) == 0, "batch %d: the Conv1Ds fold %d normalisations, form %d Adds and %d "
                  "normalisation gradients and pool %d times; the Conv2D twin %d, %d, %d, %d", bs, f[0], f[1], f[2],
                  f[3], g[0], g[1], g[2], g[3]);
        if (bs == 32) { /* the fusions this model offers, where the backend makes them (the last normalisation
                         * reads a convolution whose ReLU comes first: not one) */
            const fl_backend *be = fl_backend_cpu();
            CHECK_MSG(f[0] >= 1 && f[1] == (be->conv_res ? 1 : 0) && f[2] == (be->conv2d_bn_bwd ? 1 : 0) &&
                      f[3] == (be->conv2d_maxpool_fwd ? 1 : 0),
                      "batch 32: the Conv1Ds fold %d normalisations, form %d Adds, %d normalisation gradients and "
                      "pool %d times", f[0], f[1], f[2], f[3]);
        }
        CHECK_MSG(p && q && memcmp(fl_tensor_data(p), fl_tensor_data(q), (size_t)fl_tensor_size(p) * 4) == 0,
                  "batch %d: the Conv1D model's predictions differ from the Conv2D twin's by %g", bs,
                  p && q ? max_abs_diff(p, q) : -1.0);
        fl_tensor_free(p);
        fl_tensor_free(q);
    }
    fl_history *hm = fl_fit(m, x, y, .batch_size = 16, .epochs = 2, .no_shuffle = true, .verbose = FL_VERBOSE_SILENT);
    fl_history *ht = fl_fit(t, x2, y, .batch_size = 16, .epochs = 2, .no_shuffle = true, .verbose = FL_VERBOSE_SILENT);
    CHECK(hm && ht);
    int differ = 0;
    for (int l = 0, j = 0; l < fl_model_num_layers(m); l++) {
        fl_layer *a = fl_model_layer(m, l);
        if (!fl_layer_num_weights(a)) continue;
        fl_layer *b = twin_next(t, &j);
        for (int k = 0; b && k < fl_layer_num_weights(a); k++) {
            fl_tensor *w = fl_layer_weight(a, k), *v = fl_layer_weight(b, k);
            differ += memcmp(fl_tensor_data(w), fl_tensor_data(v), (size_t)fl_tensor_size(w) * sizeof(float)) != 0;
        }
    }
    CHECK_MSG(differ == 0, "after two epochs, %d weights of the Conv1D model differ from the Conv2D twin's", differ);
    fl_history_free(hm);
    fl_history_free(ht);
    fl_tensor_free(x);
    fl_tensor_free(x2);
    fl_tensor_free(y);
    fl_model_free(m);
    fl_model_free(t);
}

/* FLYNN_CPU_L2 / FLYNN_CPU_L3 stand for the machine's caches (ctest's l2_* runs): the budget is twice the L2
 * of the threads, the weights' cache the L3, as the variables say. */
static void test_cache_override(void) {
    const fl_backend *be = fl_backend_cpu();
    const char *l2 = getenv("FLYNN_CPU_L2"), *l3 = getenv("FLYNN_CPU_L3");
    if (!l2 || !l3) {
        CHECK(be->infer_budget() > 0 && be->infer_weight_cache() > 0);
        return;
    }
    const size_t want2 = (size_t)atoll(l2) << (strchr(l2, 'M') ? 20 : strchr(l2, 'K') ? 10 : 0);
    const size_t want3 = (size_t)atoll(l3) << (strchr(l3, 'M') ? 20 : strchr(l3, 'K') ? 10 : 0);
    CHECK_MSG(be->infer_budget() == 2 * want2 * (size_t)fl_get_num_threads(), "FLYNN_CPU_L2=%s: budget %zu", l2,
              be->infer_budget());
    CHECK_MSG(be->infer_weight_cache() == want3, "FLYNN_CPU_L3=%s: weight cache %zu", l3, be->infer_weight_cache());
}

/* A model's weights are initialized when something first reads them (issue 43: `flynn summary` of a JSON
 * declaring a 300-million-parameter Dense took 11 s and 2.9 GB): built, a 4 MiB kernel has no page in memory;
 * the values read then are the ones an eager initialization gave (the same seed's Glorot draws, whichever
 * reads first: fl_layer_weight, predict, fl_model_set_seed's again); fl_layer_set_weight of one weight leaves
 * the layer's others initialized. */
static void test_lazy_init(void) {
    fl_model *a = fl_sequential(fl_input(1024), fl_dense(1024, .activation = FL_RELU), fl_dense(10));
    fl_model *b = fl_sequential(fl_input(1024), fl_dense(1024, .activation = FL_RELU), fl_dense(10));
    CHECK(a && b);
    if (!a || !b) { fl_model_free(a); fl_model_free(b); return; }
    const fl_node *k = a->layers[1]->w[0];
    const size_t bytes = (size_t)fl_node_size(k) * sizeof(float);
    CHECK_MSG(a->layers[1]->init_pending && resident_pages(k->val, bytes) == 0,
              "built: the kernel is initialized already (%zu pages in memory)", resident_pages(k->val, bytes));
    fl_tensor *x = fl_tensor_zeros(FL_FLOAT32, 4, 1024);
    float *xd = fl_tensor_data(x);
    for (int i = 0; i < 4 * 1024; i++) xd[i] = fl_philox_uniform(5, 1, (uint64_t)i) - 0.5f;
    fl_tensor *pb = fl_predict(b, x, .verbose = FL_VERBOSE_SILENT); /* b: predict reads first */
    fl_tensor *ka = fl_tensor_clone(fl_layer_weight(a->layers[1], 0)), *kb = fl_layer_weight(b->layers[1], 0);
    CHECK(ka && kb && !a->layers[1]->init_pending && resident_pages(k->val, bytes) > 0);
    double lo = 0, hi = 0;
    for (int64_t i = 0; ka && i < fl_tensor_size(ka); i++) {
        const float v = ((const float *)fl_tensor_cdata(ka))[i];
        lo = v < lo ? v : lo, hi = v > hi ? v : hi;
    }
    const double limit = sqrt(6.0 / (1024 + 1024)); /* Glorot's bound */
    CHECK_MSG(hi > 0.9 * limit && -lo > 0.9 * limit && hi <= limit && -lo <= limit, "kernel in [%g, %g], Glorot's "
              "bound %g", lo, hi, limit);
    CHECK(ka && kb && memcmp(fl_tensor_cdata(ka), fl_tensor_cdata(kb), bytes) == 0);
    fl_tensor *pa = fl_predict(a, x, .verbose = FL_VERBOSE_SILENT);
    CHECK(pa && pb && memcmp(fl_tensor_cdata(pa), fl_tensor_cdata(pb), (size_t)fl_tensor_size(pa) * sizeof(float)) == 0);
    /* the seed again: the same draws when next read */
    fl_tensor *w1 = fl_tensor_clone(fl_layer_weight(a->layers[2], 0));
    fl_tensor *z = fl_tensor_zeros(FL_FLOAT32, 1024, 10);
    CHECK(fl_layer_set_weight(a->layers[2], 0, z) == FL_OK);
    CHECK(fl_model_set_seed(a, a->seed) == FL_OK);
    const fl_tensor *w2 = fl_layer_weight(a->layers[2], 0);
    CHECK(w1 && w2 && memcmp(fl_tensor_cdata(w1), fl_tensor_cdata(w2), (size_t)1024 * 10 * sizeof(float)) == 0);
    /* one weight set on a pending layer: its bias is initialized (zeros), its kernel the one given */
    CHECK(fl_model_set_seed(b, 99) == FL_OK && b->layers[2]->init_pending);
    CHECK(fl_layer_set_weight(b->layers[2], 0, z) == FL_OK && !b->layers[2]->init_pending);
    const fl_tensor *bk = fl_layer_weight(b->layers[2], 0);
    CHECK(bk && memcmp(fl_tensor_cdata(bk), fl_tensor_cdata(z), (size_t)1024 * 10 * sizeof(float)) == 0);
    fl_tensor_free(z); fl_tensor_free(w1); fl_tensor_free(ka); fl_tensor_free(pa); fl_tensor_free(pb); fl_tensor_free(x);
    fl_model_free(a);
    fl_model_free(b);
}

int main(void) {
    test_cache_override();
    test_place_small();
    test_place_random();
    test_modes();
    test_modes_fused();
    test_bn_fold();
    test_add_relu_fold();
    test_conv_add_fold();
    test_infer_step_limit();
    test_huge_pages();
    test_untouched_state();
    test_lazy_init();
    test_bn_fold_leaky();
    test_infer_step();
    test_infer_step_large();
    test_fold_steps();
    test_conv1d_fusions();
    return check_report("test_plan");
}
