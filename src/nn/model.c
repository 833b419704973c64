/*
 * model.c — Sequential models: building the graph from a list of layers with
 * Keras's default layer names, the summary() table, parameter counts, seeds,
 * layer lookup and the choice of device.
 */
#include "nn.h"
#include "core/device.h"
#include "core/error.h"
#include "core/tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void free_step_buffers(fl_model *m);

static void default_names(fl_model *m) {
    int counts[FL_L_COUNT] = {0};
    for (int i = 0; i < m->nlayers; i++) {
        fl_layer *l = m->layers[i];
        if (l->user_named) continue;
        int c = counts[l->kind]++;
        if (c == 0) snprintf(l->name, sizeof l->name, "%s", fl_layer_kind_base(l->kind));
        else snprintf(l->name, sizeof l->name, "%s_%d", fl_layer_kind_base(l->kind), c);
    }
}

fl_model *fl_sequential_(fl_layer *const *layers, int n, const char *name) {
    fl_model *m = NULL;
    for (int i = 0; i < n; i++) {
        if (!layers[i]) {
            /* keep the constructor's message: it says what was wrong */
            char why[768];
            snprintf(why, sizeof why, "%s", fl_last_error());
            for (int k = 0; k < n; k++) fl_layer_free(layers[k]);
            return fl_error_null(fl_last_status() ? fl_last_status() : FL_ERR_INVALID_ARG,
                                 "fl_sequential: layer %d could not be created: %s", i, why[0] ? why : "(NULL layer)");
        }
    }
    if (n < 2 || layers[0]->kind != FL_L_INPUT) {
        for (int k = 0; k < n; k++) fl_layer_free(layers[k]);
        return fl_error_null(FL_ERR_INVALID_ARG,
                             "fl_sequential: the first layer must be fl_input(...) followed by at least one layer");
    }
    for (int i = 1; i < n; i++)
        if (layers[i]->kind == FL_L_INPUT) {
            for (int k = 0; k < n; k++) fl_layer_free(layers[k]);
            return fl_error_null(FL_ERR_INVALID_ARG, "fl_sequential: layer %d is a second fl_input", i);
        }
    m = fl_calloc(1, sizeof *m, "model");
    if (!m) goto fail_layers;
    m->layers = fl_calloc((size_t)n, sizeof *m->layers, "model layers");
    if (!m->layers) { free(m); goto fail_layers; }
    memcpy(m->layers, layers, (size_t)n * sizeof *layers);
    m->nlayers = n;
    snprintf(m->name, sizeof m->name, "%s", name ? name : "sequential");
    for (int i = 0; i < n; i++) m->layers[i]->index = i;
    default_names(m);
    /* layer names must be unique, as in Keras */
    for (int i = 0; i < n; i++)
        for (int k = 0; k < i; k++)
            if (strcmp(m->layers[i]->name, m->layers[k]->name) == 0) {
                fl_error(FL_ERR_INVALID_ARG, "fl_sequential: two layers are named '%s' (layers %d and %d)",
                         m->layers[i]->name, k, i);
                fl_model_free(m);
                return NULL;
            }
    fl_graph_init(&m->g, fl_backend_cpu());
    m->device = FL_DEVICE_CPU;
    fl_node *x = NULL;
    for (int i = 0; i < n; i++) {
        x = fl_layer_build(m->layers[i], &m->g, x, m->seed);
        if (!x) {
            fl_error_prefix("fl_sequential: ");
            fl_model_free(m);
            return NULL;
        }
        if (i == 0) m->input = x;
    }
    m->output = x;
    fl_graph_finalize(&m->g);
    return m;
fail_layers:
    for (int k = 0; k < n; k++) fl_layer_free(layers[k]);
    return NULL;
}

void fl_model_free(fl_model *m) {
    if (!m) return;
    const fl_backend *be = m->g.be;
    if (be) free_step_buffers(m);
    fl_optimizer_free(m->opt);
    for (int i = 0; i < m->nlayers; i++) fl_layer_free(m->layers[i]);
    free(m->layers);
    fl_graph_free(&m->g);
    free(m);
}

fl_status fl_model_set_seed(fl_model *m, uint64_t seed) {
    if (!m) return fl_error(FL_ERR_INVALID_ARG, "fl_model_set_seed: model is NULL");
    m->seed = seed;
    m->g.seed = seed;
    for (int i = 0; i < m->nlayers; i++) fl_layer_init_weights(m->layers[i], m->g.be, seed);
    return FL_OK;
}

static int64_t count(const fl_model *m, int which /* 0 all, 1 trainable, 2 non-trainable */) {
    int64_t t = 0;
    for (int i = 0; i < m->nlayers; i++)
        for (int k = 0; k < m->layers[i]->nw; k++) {
            fl_node *w = m->layers[i]->w[k];
            if (which == 0 || (which == 1) == w->trainable) t += fl_node_size(w);
        }
    return t;
}

int64_t fl_model_count_params(const fl_model *m) { return m ? count(m, 0) : 0; }
int64_t fl_model_count_trainable_params(const fl_model *m) { return m ? count(m, 1) : 0; }

static const char *thousands(int64_t v, char *buf, size_t n) {
    char tmp[32];
    snprintf(tmp, sizeof tmp, "%lld", (long long)v);
    size_t len = strlen(tmp), o = 0;
    for (size_t i = 0; i < len && o + 1 < n; i++) {
        if (i > 0 && (len - i) % 3 == 0 && tmp[0] != '-') buf[o++] = ',';
        buf[o++] = tmp[i];
    }
    buf[o] = 0;
    return buf;
}

/* Keras's readable_memory_size: 1024 steps, two decimals. */
static const char *mem_size(double bytes, char *buf, size_t n) {
    static const char *u[] = {"B", "KB", "MB", "GB", "TB", "PB"};
    int i = 0;
    while (i < 5 && bytes / 1024.0 >= 1.0) { bytes /= 1024.0; i++; }
    snprintf(buf, n, "%.2f %s", bytes, u[i]);
    return buf;
}

/* Pads UTF-8 text to `width` columns (one column per code point). */
static void put_cell(FILE *f, const char *s, int width, bool right) {
    int cols = 0;
    for (const char *p = s; *p; p++) if (((unsigned char)*p & 0xC0) != 0x80) cols++;
    if (right) for (int i = cols; i < width; i++) fputc(' ', f);
    fputs(s, f);
    if (!right) for (int i = cols; i < width; i++) fputc(' ', f);
}

static void rule(FILE *f, const char *l, const char *mid, const char *r, const char *h) {
    static const int w[3] = {33, 24, 15};
    fputs(l, f);
    for (int c = 0; c < 3; c++) {
        for (int i = 0; i < w[c]; i++) fputs(h, f);
        fputs(c < 2 ? mid : r, f);
    }
    fputc('\n', f);
}

static void row(FILE *f, const char *bar, const char *a, const char *b, const char *c) {
    fputs(bar, f); fputc(' ', f); put_cell(f, a, 31, false); fputc(' ', f);
    fputs(bar, f); fputc(' ', f); put_cell(f, b, 22, false); fputc(' ', f);
    fputs(bar, f); fputc(' ', f); put_cell(f, c, 13, true); fputc(' ', f);
    fputs(bar, f); fputc('\n', f);
}

fl_status fl_model_summary(const fl_model *m, void *out) {
    if (!m) return fl_error(FL_ERR_INVALID_ARG, "fl_model_summary: model is NULL");
    FILE *f = out ? (FILE *)out : stdout;
    fprintf(f, "Model: \"%s\"\n", m->name);
    rule(f, "┏", "┳", "┓", "━");
    row(f, "┃", "Layer (type)", "Output Shape", "Param #");
    rule(f, "┡", "╇", "┩", "━");
    bool first = true;
    for (int i = 1; i < m->nlayers; i++) { /* Keras does not list the InputLayer */
        const fl_layer *l = m->layers[i];
        if (!first) rule(f, "├", "┼", "┤", "─");
        first = false;
        char shape[128], params[32], cell[160];
        fl_node *o = l->out;
        int64_t s[FL_MAX_DIMS];
        memcpy(s, o->shape, sizeof s);
        s[0] = -1;
        fl_shape_str(o->ndim, s, shape, sizeof shape);
        int64_t np = 0;
        for (int k = 0; k < l->nw; k++) np += fl_node_size(l->w[k]);
        thousands(np, params, sizeof params);
        snprintf(cell, sizeof cell, "%s (%s)", l->name, fl_layer_kind_class(l->kind));
        if (strlen(cell) <= 31) {
            row(f, "│", cell, shape, params);
        } else {
            char name[128];
            if (strlen(l->name) > 31) snprintf(name, sizeof name, "%.30s…", l->name);
            else snprintf(name, sizeof name, "%s", l->name);
            char cls[64];
            snprintf(cls, sizeof cls, "(%s)", fl_layer_kind_class(l->kind));
            row(f, "│", name, shape, params);
            row(f, "│", cls, "", "");
        }
    }
    rule(f, "└", "┴", "┘", "─");
    char a[32], b[32];
    int64_t total = count(m, 0), tr = count(m, 1), nt = count(m, 2);
    fprintf(f, " Total params: %s (%s)\n", thousands(total, a, sizeof a), mem_size((double)total * 4, b, sizeof b));
    fprintf(f, " Trainable params: %s (%s)\n", thousands(tr, a, sizeof a), mem_size((double)tr * 4, b, sizeof b));
    fprintf(f, " Non-trainable params: %s (%s)\n", thousands(nt, a, sizeof a), mem_size((double)nt * 4, b, sizeof b));
    return FL_OK;
}

int fl_model_num_layers(const fl_model *m) { return m ? m->nlayers : 0; }
fl_layer *fl_model_layer(const fl_model *m, int i) {
    if (!m || i < 0 || i >= m->nlayers)
        return fl_error_null(FL_ERR_INVALID_ARG, "fl_model_layer: index %d out of range (%d layers)", i,
                             m ? m->nlayers : 0);
    return m->layers[i];
}
fl_layer *fl_model_get_layer(const fl_model *m, const char *name) {
    if (!m || !name) return fl_error_null(FL_ERR_INVALID_ARG, "fl_model_get_layer: NULL argument");
    for (int i = 0; i < m->nlayers; i++)
        if (strcmp(m->layers[i]->name, name) == 0) return m->layers[i];
    return fl_error_null(FL_ERR_INVALID_ARG, "model '%s' has no layer named '%s'", m->name, name);
}

/* Frees the training-step buffers (they are re-made on the next step). */
static void free_step_buffers(fl_model *m) {
    const fl_backend *be = m->g.be;
    be->free(m->target); be->free(m->row_loss); be->free(m->row_score); be->free(m->stats); be->free(m->idx_dev);
    free(m->stage_x); free(m->stage_y);
    m->target = m->row_loss = m->row_score = NULL;
    m->stats = NULL;
    m->idx_dev = NULL;
    m->stage_x = m->stage_y = NULL;
    m->target_cap = 0;
}

static fl_status move_to(fl_model *m, const fl_backend *to) {
    if (m->g.be == to) return FL_OK;
    free_step_buffers(m);
    FL_TRY(fl_graph_migrate(&m->g, to));
    if (m->opt) FL_TRY(fl_optimizer_migrate(m->opt, &m->g));
    for (int i = 0; i < m->nlayers; i++)
        for (int k = 0; k < m->layers[i]->nw; k++) {
            fl_tensor_free(m->layers[i]->wview[k]);
            m->layers[i]->wview[k] = NULL;
        }
    return FL_OK;
}

fl_status fl_model_set_device(fl_model *m, fl_device_kind kind, char *why, size_t why_len) {
    if (!m) return fl_error(FL_ERR_INVALID_ARG, "fl_model_set_device: model is NULL");
    if (kind != FL_DEVICE_AUTO && kind != FL_DEVICE_CPU && kind != FL_DEVICE_GPU)
        return fl_error(FL_ERR_INVALID_ARG, "fl_model_set_device: %d is not an fl_device_kind", (int)kind);
    char reason[1536] = "", line[1024];
    if (kind == FL_DEVICE_CPU) {
        FL_TRY(move_to(m, fl_backend_cpu()));
        m->device = FL_DEVICE_CPU;
        if (why) snprintf(why, why_len, "device: CPU (%d threads), as requested", fl_get_num_threads());
        return FL_OK;
    }
    const fl_backend *gpu = fl_gpu_backend(reason, sizeof reason);
    if (gpu) {
        FL_TRY(move_to(m, gpu));
        m->device = FL_DEVICE_GPU;
        fl_gpu_describe(line, sizeof line);
        if (why) snprintf(why, why_len, "device: GPU %s", line);
        return FL_OK;
    }
    if (kind == FL_DEVICE_GPU) return fl_error(FL_ERR_DEVICE, "the GPU cannot be used: %s", reason);
    FL_TRY(move_to(m, fl_backend_cpu()));
    m->device = FL_DEVICE_CPU;
    if (why) snprintf(why, why_len, "device: CPU (%d threads); GPU not used: %s", fl_get_num_threads(), reason);
    return FL_OK;
}

fl_device_kind fl_model_device(const fl_model *m) { return m ? m->device : FL_DEVICE_CPU; }
