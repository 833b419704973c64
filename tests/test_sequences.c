/*
 * test_sequences.c — integer inputs, Embedding, Masking and masks at the
 * model level: int32 data in fit/evaluate/predict (and what is refused, with
 * which message), the masked mean and the masked loss and accuracy against
 * sums written out here, Keras's mask rules (pass-through, merges, the
 * layers that refuse a mask), and the files (.keras, .h5, .npy) that carry
 * integer inputs. The comparisons with real Keras are test_keras_files's.
 */
#include "check.h"

#include <flynn/flynn.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SILENT .verbose = FL_VERBOSE_SILENT

static float *fdata(fl_tensor *t) { return fl_tensor_data(t); }
static int32_t *idata(fl_tensor *t) { return fl_tensor_data(t); }

/* Input(4, int32) -> Embedding(V, D, mask_zero) -> GAP1D -> Dense(2) */
static fl_model *fasttext(int V, int D) {
    fl_model *m = fl_sequential(fl_input_dtype(FL_INT32, 4), fl_embedding(V, D, .mask_zero = true),
                                fl_global_average_pooling1d(), fl_dense(2));
    CHECK_MSG(m != NULL, "%s", fl_last_error());
    return m;
}

static void test_int_inputs(void) {
    CHECK(fl_input_dtype(FL_UINT8, 3) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "Input: dtype uint8, expected float32 or int32");
    fl_model *m = fasttext(20, 3);
    if (!m) return;
    CHECK(fl_model_input_dtype(m, 0) == FL_INT32 && fl_model_input_dtype(m, 1) == -1);
    const int32_t tok[8] = {3, 19, 0, 0, 7, 7, 7, 1};
    fl_tensor *xi = fl_tensor_zeros(FL_INT32, 2, 4), *xf = fl_tensor_zeros(FL_FLOAT32, 2, 4);
    fl_tensor *xu = fl_tensor_zeros(FL_UINT8, 2, 4);
    for (int i = 0; i < 8; i++) {
        idata(xi)[i] = tok[i];
        fdata(xf)[i] = (float)tok[i];
        ((uint8_t *)fl_tensor_data(xu))[i] = (uint8_t)tok[i];
    }
    fl_tensor *pi = fl_predict(m, xi, SILENT), *pf = fl_predict(m, xf, SILENT), *pu = fl_predict(m, xu, SILENT);
    CHECK_MSG(pi && pf && pu, "%s", fl_last_error());
    if (pi && pf && pu) {
        CHECK(memcmp(fl_tensor_data(pi), fl_tensor_data(pf), 4 * sizeof(float)) == 0);
        CHECK(memcmp(fl_tensor_data(pi), fl_tensor_data(pu), 4 * sizeof(float)) == 0);
        /* the masked mean by hand: sample 0 averages rows 3 and 19 */
        fl_layer *e = fl_model_get_layer(m, "embedding"), *d = fl_model_get_layer(m, "dense");
        const float *E = fdata(fl_layer_weight(e, 0));
        float K[6], b[2];
        memcpy(K, fdata(fl_layer_weight(d, 0)), sizeof K);
        memcpy(b, fdata(fl_layer_weight(d, 1)), sizeof b);
        for (int s = 0; s < 2; s++)
            for (int o = 0; o < 2; o++) {
                double y = b[o];
                for (int k = 0; k < 3; k++) {
                    double mean = s == 0 ? (E[3 * 3 + k] + E[19 * 3 + k]) / 2.0
                                         : (3 * E[7 * 3 + k] + E[1 * 3 + k]) / 4.0;
                    y += mean * K[k * 2 + o];
                }
                CHECK_CLOSE(fdata(pi)[s * 2 + o], y, 1e-5, 1e-6);
            }
    }
    fl_tensor_free(pi); fl_tensor_free(pf); fl_tensor_free(pu);
    /* refusals: a fraction, an index outside [0, input_dim) either way */
    fdata(xf)[5] = 1.5f;
    CHECK(fl_predict(m, xf, SILENT) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "x[1] = 1.5 is not an integer");
    idata(xi)[6] = 20;
    CHECK(fl_predict(m, xi, SILENT) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "x[1] holds the index 20 at position (2,), which layer 'embedding' (Embedding)");
    CHECK_STR_CONTAINS(fl_last_error(), "input_dim 20");
    idata(xi)[6] = -1;
    fl_tensor *y = fl_tensor_zeros(FL_FLOAT32, 2);
    CHECK(fl_compile(m, fl_adam(), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY) == FL_OK);
    CHECK(fl_fit(m, xi, y, SILENT) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "fl_fit: x[1] holds the index -1");
    float r[2];
    CHECK(fl_evaluate(m, xi, y, r, 2, SILENT) != FL_OK);
    CHECK_STR_CONTAINS(fl_last_error(), "fl_evaluate: x[1] holds the index -1");
    idata(xi)[6] = 7;
    fl_history *h = fl_fit(m, xi, y, .epochs = 2, SILENT);
    CHECK_MSG(h != NULL, "%s", fl_last_error());
    fl_history_free(h);
    fl_tensor_free(xi); fl_tensor_free(xf); fl_tensor_free(xu); fl_tensor_free(y);
    fl_model_free(m);
    /* only Embedding reads integers */
    CHECK(fl_sequential(fl_input_dtype(FL_INT32, 4), fl_dense(2)) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "layer 'dense");
    CHECK_STR_CONTAINS(fl_last_error(), "receives the int32 input");
    /* an Embedding on a float input: indices truncated as Keras casts them, range-checked the same way */
    fl_model *fe = fl_sequential(fl_input(2), fl_embedding(5, 2));
    fl_tensor *xe = fl_tensor_zeros(FL_FLOAT32, 1, 2);
    fdata(xe)[0] = 4.9f;
    fl_tensor *pe = fe ? fl_predict(fe, xe, SILENT) : NULL;
    CHECK_MSG(pe != NULL, "%s", fl_last_error());
    fl_tensor_free(pe);
    fdata(xe)[1] = 5.0f;
    CHECK(fe && fl_predict(fe, xe, SILENT) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "x[0] holds the index 5 at position (1,)");
    fl_tensor_free(xe);
    fl_model_free(fe);
    /* a float model takes int32 x as x.astype("float32") */
    fl_model *f = fl_sequential(fl_input(2), fl_dense(1));
    fl_tensor *x2 = fl_tensor_zeros(FL_INT32, 1, 2), *x3 = fl_tensor_zeros(FL_FLOAT32, 1, 2);
    idata(x2)[0] = 3; idata(x2)[1] = -2; fdata(x3)[0] = 3; fdata(x3)[1] = -2;
    fl_tensor *p2 = fl_predict(f, x2, SILENT), *p3 = fl_predict(f, x3, SILENT);
    CHECK(p2 && p3 && fdata(p2)[0] == fdata(p3)[0]);
    fl_tensor_free(p2); fl_tensor_free(p3); fl_tensor_free(x2); fl_tensor_free(x3);
    fl_model_free(f);
}

/* A per-step softmax on a masked sequence: Keras's loss is the mean of the
 * valid steps' crossentropies (apply_mask); its accuracy counts every step
 * (Keras 3.15's compiled metrics do not see the mask: the fixture
 * train_seq_scce_masked shows it). */
static void test_masked_loss(void) {
    fl_model *m = fl_sequential(fl_input_dtype(FL_INT32, 3), fl_embedding(6, 4, .mask_zero = true),
                                fl_dense(5, .activation = FL_SOFTMAX));
    CHECK_MSG(m != NULL, "%s", fl_last_error());
    if (!m) return;
    CHECK(fl_compile(m, fl_sgd(), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY) == FL_OK);
    const int32_t tok[9] = {1, 2, 0, 5, 0, 0, 3, 3, 4};
    const int32_t lab[9] = {0, 4, 2, 1, 3, 3, 2, 0, 1};
    fl_tensor *x = fl_tensor_zeros(FL_INT32, 3, 3), *y = fl_tensor_zeros(FL_INT32, 3, 3);
    memcpy(fl_tensor_data(x), tok, sizeof tok);
    memcpy(fl_tensor_data(y), lab, sizeof lab);
    fl_tensor *p = fl_predict(m, x, SILENT);
    float r[2];
    CHECK_MSG(p && fl_evaluate(m, x, y, r, 2, .batch_size = 3, SILENT) == FL_OK, "%s", fl_last_error());
    if (p) {
        double loss = 0, right = 0, valid = 0;
        for (int i = 0; i < 9; i++) {
            const float *q = fdata(p) + i * 5;
            int best = 0;
            for (int c = 1; c < 5; c++) if (q[c] > q[best]) best = c;
            right += best == lab[i]; /* every step: Keras's metrics do not see the mask */
            if (!tok[i]) continue;
            loss += -log(q[lab[i]]);
            valid++;
        }
        CHECK_CLOSE(r[0], loss / valid, 1e-5, 1e-6);
        CHECK_CLOSE(r[1], right / 9, 1e-6, 1e-7);
        /* across batches: the loss is the mean of the batches' (by samples, as
         * Keras's tracker), the accuracy the mean over every step */
        float r2[2];
        CHECK(fl_evaluate(m, x, y, r2, 2, .batch_size = 2, SILENT) == FL_OK);
        double l01 = 0, v01 = 0, l2 = 0, v2 = 0;
        for (int i = 0; i < 9; i++) {
            if (!tok[i]) continue;
            double l = -log(fdata(p)[i * 5 + lab[i]]);
            if (i < 6) { l01 += l; v01++; } else { l2 += l; v2++; }
        }
        CHECK_CLOSE(r2[0], (2 * l01 / v01 + l2 / v2) / 3, 1e-5, 1e-6);
        CHECK_CLOSE(r2[1], r[1], 1e-6, 1e-7);
    }
    fl_tensor_free(p); fl_tensor_free(x); fl_tensor_free(y);
    fl_model_free(m);
}

/* Masking: steps equal to mask_value are zeroed and skipped by the mean;
 * the mask passes through Dense/Dropout/activations; Add ORs two masks;
 * the layers whose Keras call would use the mask otherwise are refused. */
static void test_masking_rules(void) {
    fl_model *m = fl_sequential(fl_input(3, 2), fl_masking(.mask_value = 0.5f), fl_dense(2),
                                fl_dropout(0.2f), fl_activation_layer(.activation = FL_TANH),
                                fl_global_average_pooling1d());
    CHECK_MSG(m != NULL, "%s", fl_last_error());
    fl_model *u = fl_sequential(fl_input(3, 2), fl_dense(2), fl_activation_layer(.activation = FL_TANH),
                                fl_global_average_pooling1d());
    if (m && u) {
        for (int k = 0; k < 2; k++) CHECK(fl_layer_set_weight(fl_model_layer(u, 1), k, fl_layer_weight(fl_model_layer(m, 2), k)) == FL_OK);
        fl_tensor *x = fl_tensor_zeros(FL_FLOAT32, 1, 3, 2), *x2 = fl_tensor_zeros(FL_FLOAT32, 1, 3, 2);
        const float v[6] = {1, 2, 0.5f, 0.5f, -1, 0.5f};
        memcpy(fl_tensor_data(x), v, sizeof v);
        /* the same mean without the masked step, by a model without a mask: steps 0 and 2 twice over 3 */
        const float v2[6] = {1, 2, -1, 0.5f, 1, 2};
        memcpy(fl_tensor_data(x2), v2, sizeof v2);
        fl_tensor *pm = fl_predict(m, x, SILENT), *pu = fl_predict(u, x2, SILENT);
        CHECK(pm && pu);
        if (pm && pu) {
            /* u averages 3 steps of which step 0 twice: undo it to the mean of steps {0, 2} */
            fl_tensor *x0 = fl_tensor_zeros(FL_FLOAT32, 1, 3, 2);
            const float v0[6] = {1, 2, 1, 2, 1, 2};
            memcpy(fl_tensor_data(x0), v0, sizeof v0);
            fl_tensor *p0 = fl_predict(u, x0, SILENT);
            for (int o = 0; o < 2; o++) {
                double mean2 = (3 * fdata(pu)[o] - fdata(p0)[o]) / 2; /* (a + b) / 2 from (2a + b) / 3 and a */
                CHECK_CLOSE(fdata(pm)[o], mean2, 1e-5, 1e-6);
            }
            fl_tensor_free(p0); fl_tensor_free(x0);
        }
        fl_tensor_free(pm); fl_tensor_free(pu); fl_tensor_free(x); fl_tensor_free(x2);
    }
    fl_model_free(m);
    fl_model_free(u);
    /* refused where Keras would use the mask another way */
    CHECK(fl_sequential(fl_input(3, 2), fl_masking(), fl_softmax_layer()) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "(Softmax) receives a masked sequence");
    CHECK(fl_sequential(fl_input(3, 2), fl_masking(), fl_batch_normalization()) == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "batch statistics");
    fl_sym *a = fl_keras_input(3, 2), *b = fl_keras_input(3, 2);
    fl_sym *ma = fl_call(fl_masking(), a), *mb = fl_call(fl_masking(), b);
    CHECK(fl_model_new(fl_syms(a, b), fl_syms(fl_call_n(fl_concatenate(), ma, mb)), "c") == NULL);
    CHECK_STR_CONTAINS(fl_last_error(), "(Concatenate) receives a masked sequence");
    /* Add of two masked sequences: the OR of the masks reaches the mean */
    a = fl_keras_input(2, 1); b = fl_keras_input(2, 1);
    ma = fl_call(fl_masking(), a); mb = fl_call(fl_masking(), b);
    fl_sym *g = fl_call(fl_global_average_pooling1d(), fl_call_n(fl_add(), ma, mb));
    fl_model *add = fl_model_new(fl_syms(a, b), fl_syms(g), "or");
    CHECK_MSG(add != NULL, "%s", fl_last_error());
    if (add) {
        fl_tensor *xa = fl_tensor_zeros(FL_FLOAT32, 1, 2, 1), *xb = fl_tensor_zeros(FL_FLOAT32, 1, 2, 1);
        fdata(xa)[0] = 4; /* step 1 is masked on both sides, step 0 on b's only */
        const fl_tensor *xs[2] = {xa, xb};
        fl_tensor *out = NULL;
        CHECK(fl_predict_multi(add, xs, 2, &out, 1, SILENT) == FL_OK);
        CHECK(out && fdata(out)[0] == 4.0f); /* 4 over one valid step, not 2 over two */
        fl_tensor_free(out); fl_tensor_free(xa); fl_tensor_free(xb);
    }
    fl_model_free(add);
}

/* Files: .keras/.h5/.json keep the int input, Embedding and Masking; .npy
 * integers stay integers. */
static void test_files(const char *tmp) {
    fl_model *m = fl_sequential(fl_input_dtype(FL_INT32, 4), fl_embedding(9, 3, .mask_zero = true),
                                fl_masking(.mask_value = 0.25f), fl_global_average_pooling1d(),
                                fl_dense(1, .activation = FL_SIGMOID));
    CHECK_MSG(m != NULL, "%s", fl_last_error());
    if (!m) return;
    char *js = fl_model_to_json(m);
    CHECK(js && strstr(js, "\"dtype\":\"int32\"") && strstr(js, "\"mask_zero\":true") &&
          strstr(js, "\"mask_value\":0.25"));
    free(js);
    fl_tensor *x = fl_tensor_zeros(FL_INT32, 2, 4);
    const int32_t tok[8] = {1, 8, 0, 0, 2, 2, 5, 0};
    memcpy(fl_tensor_data(x), tok, sizeof tok);
    fl_tensor *p = fl_predict(m, x, SILENT);
    const char *ext[2] = {"seq.keras", "seq.h5"};
    for (int k = 0; k < 2; k++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", tmp, ext[k]);
        CHECK_MSG(fl_save_model(m, path) == FL_OK, "%s", fl_last_error());
        fl_model *l = fl_load_model(path);
        CHECK_MSG(l != NULL, "%s: %s", path, fl_last_error());
        fl_tensor *q = l ? fl_predict(l, x, SILENT) : NULL;
        CHECK(p && q && memcmp(fl_tensor_data(p), fl_tensor_data(q), 2 * sizeof(float)) == 0);
        CHECK(l && fl_model_input_dtype(l, 0) == FL_INT32);
        fl_tensor_free(q);
        fl_model_free(l);
    }
    /* .npy: int32 x stays int32 through fl_load_npy_xy */
    char xp[512], yp[512];
    snprintf(xp, sizeof xp, "%s/x.npy", tmp);
    snprintf(yp, sizeof yp, "%s/y.npy", tmp);
    fl_tensor *y = fl_tensor_zeros(FL_FLOAT32, 2);
    CHECK(fl_save_npy(x, xp) == FL_OK && fl_save_npy(y, yp) == FL_OK);
    fl_dataset d;
    CHECK(fl_load_npy_xy(xp, yp, &d) == FL_OK && fl_tensor_dtype(d.x_train) == FL_INT32);
    fl_dataset_free(&d);
    fl_tensor_free(x); fl_tensor_free(y); fl_tensor_free(p);
    fl_model_free(m);
}

int main(void) {
    char tmp[] = "/tmp/flynn_seq_XXXXXX";
    if (!mkdtemp(tmp)) { perror("mkdtemp"); return 1; }
    test_int_inputs();
    test_masked_loss();
    test_masking_rules();
    test_files(tmp);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    return check_report("test_sequences");
}
