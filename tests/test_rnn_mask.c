/*
 * test_rnn_mask.c — the recurrent layers on masked sequences against Keras
 * 3 (tests/fixtures/rnn_mask, written by tools/rnn_mask_fixtures.py: each
 * layer called with mask=m, random weights): the layer is built on an input
 * node that carries the mask (x->mask, as Embedding mask_zero and Masking
 * will set it), Keras's weights are loaded, and the outputs must agree to
 * 1e-5; with return_sequences the output carries the mask on.
 */
#include "check.h"

#include "nn/nn.h"

#include <stdio.h>
#include <string.h>

static const char *dir;

static fl_tensor *load(const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    fl_tensor *t = fl_load_npy(path);
    CHECK_MSG(t != NULL, "%s: %s", path, fl_last_error());
    return t;
}

static void check_case(const char *name, fl_layer *l, bool seq) {
    fl_tensor *x = load("x.npy"), *m = load("mask.npy");
    char f[128];
    snprintf(f, sizeof f, "%s_y.npy", name);
    fl_tensor *ky = load(f);
    CHECK(l != NULL);
    if (!x || !m || !ky || !l) return;
    const int64_t B = fl_tensor_dim(x, 0), T = fl_tensor_dim(x, 1), D = fl_tensor_dim(x, 2);
    fl_graph g;
    fl_graph_init(&g, fl_backend_cpu());
    fl_node *xn = fl_graph_input(&g, "x", 2, (int64_t[]){T, D});
    xn->mask = fl_graph_input(&g, "mask", 1, &T);
    fl_node *y = fl_layer_build(l, &g, (fl_node *[]){xn}, 1, 1);
    CHECK_MSG(y != NULL, "%s: %s", name, fl_last_error());
    if (y) {
        fl_graph_finalize(&g);
        CHECK(fl_graph_reserve(&g, B) == FL_OK);
        fl_graph_set_batch(&g, B);
        memcpy(xn->val, fl_tensor_data(x), (size_t)(B * T * D) * sizeof(float));
        memcpy(xn->mask->val, fl_tensor_data(m), (size_t)(B * T) * sizeof(float));
        for (int i = 0; i < l->nw; i++) {
            snprintf(f, sizeof f, "%s_w%d.npy", name, i);
            fl_tensor *w = load(f);
            CHECK_MSG(w && fl_layer_set_weight(l, i, w) == FL_OK, "%s weight %d: %s", name, i, fl_last_error());
            fl_tensor_free(w);
        }
        fl_graph_forward(&g, false);
        const float *k = fl_tensor_data(ky);
        double worst = 0;
        CHECK(fl_tensor_size(ky) == fl_node_size(y));
        for (int64_t i = 0; i < fl_tensor_size(ky) && i < fl_node_size(y); i++)
            worst = fmax(worst, fabs((double)k[i] - y->val[i]) / (1e-3 + fabs((double)k[i])));
        CHECK_MSG(worst < 1e-5, "%s: relative difference %.3g from Keras", name, worst);
        CHECK_MSG((y->mask == xn->mask) == seq, "%s: output mask %s", name, y->mask ? "set" : "not set");
        printf("%-16s %lld values, worst relative difference from Keras %.2g\n", name, (long long)fl_node_size(y), worst);
    }
    fl_graph_free(&g);
    fl_layer_free(l);
    fl_tensor_free(x);
    fl_tensor_free(m);
    fl_tensor_free(ky);
}

int main(int argc, char **argv) {
    dir = argc > 1 ? argv[1] : "tests/fixtures/rnn_mask";
    check_case("lstm_seq", fl_lstm(4, .return_sequences = true), true);
    check_case("lstm_last_back", fl_lstm(4, .go_backwards = true), false);
    check_case("gru_seq_back", fl_gru(3, .return_sequences = true, .go_backwards = true), true);
    check_case("gru_noreset", fl_gru(3, .no_reset_after = true), false);
    check_case("simple_seq_zero", fl_simple_rnn(3, .return_sequences = true, .zero_output_for_mask = true), true);
    check_case("bidi_lstm_seq", fl_bidirectional(fl_lstm(3, .return_sequences = true)), true);
    check_case("bidi_gru_last", fl_bidirectional(fl_gru(2), .merge_mode = FL_MERGE_SUM), false);
    return check_report("test_rnn_mask");
}
