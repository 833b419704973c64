/*
 * optimizer.c — SGD, Adam, AdamW and RMSprop with Keras 3 defaults: the
 * objects, their slot buffers, and one fused step over all trainable
 * parameters (the per-element formulas are in ops/math.h).
 */
#include "nn.h"
#include "core/error.h"
#include "core/tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static fl_optimizer *new_opt(int code) {
    fl_optimizer *o = fl_calloc(1, sizeof *o, "optimizer");
    if (o) { o->code = code; o->d.code = code; }
    return o;
}

static bool bad(float v) { return !(v == v) || v < 0.0f; }

fl_status fl_optimizer_set_extras(fl_optimizer *o, float clipnorm, float clipvalue, float global_clipnorm,
                                  const fl_lr_schedule *sched) {
    const char *nm = fl_optimizer_name(o);
    int set = (clipnorm != 0.0f) + (clipvalue != 0.0f) + (global_clipnorm != 0.0f);
    if (set > 1)
        return fl_error(FL_ERR_INVALID_ARG, "%s: only one of clipnorm (%g), clipvalue (%g) and global_clipnorm (%g) "
                        "can be set (as Keras)", nm, clipnorm, clipvalue, global_clipnorm);
    float c = clipnorm != 0.0f ? clipnorm : clipvalue != 0.0f ? clipvalue : global_clipnorm;
    if (set && (!(c > 0.0f) || !isfinite(c)))
        return fl_error(FL_ERR_INVALID_ARG, "%s: %s %g, expected a finite value > 0", nm,
                        clipnorm != 0.0f ? "clipnorm" : clipvalue != 0.0f ? "clipvalue" : "global_clipnorm", c);
    o->d.clip_mode = clipnorm != 0.0f ? FL_CLIP_NORM : clipvalue != 0.0f ? FL_CLIP_VALUE
                     : global_clipnorm != 0.0f ? FL_CLIP_GLOBAL_NORM : FL_CLIP_NONE;
    o->d.clip = set ? c : 0.0f;
    memset(&o->sched, 0, sizeof o->sched);
    if (sched && sched->kind != FL_SCHEDULE_NONE) {
        if (fl_lr_schedule_check(sched) != FL_OK) {
            fl_error_prefix("%s: learning_rate: ", nm);
            return fl_last_status();
        }
        o->sched = *sched;
        o->d.lr = fl_lr_schedule_value(sched, 0);
    }
    return FL_OK;
}

/* The constructors' common tail: clipping and schedule, or NULL. */
#define FINISH(o, a)                                                                                  \
    do {                                                                                              \
        if (fl_optimizer_set_extras((o), (a).clipnorm, (a).clipvalue, (a).global_clipnorm,            \
                                    (a).learning_rate_schedule) != FL_OK) {                           \
            fl_optimizer_free(o);                                                                     \
            return NULL;                                                                              \
        }                                                                                             \
        return (o);                                                                                   \
    } while (0)

float fl_optimizer_lr_at(const fl_optimizer *o, int64_t iterations) {
    if (!o) return 0.0f;
    return o->sched.kind != FL_SCHEDULE_NONE ? fl_lr_schedule_value(&o->sched, iterations) : o->d.lr;
}

float fl_optimizer_current_learning_rate(const fl_optimizer *o) { return o ? fl_optimizer_lr_at(o, o->iterations) : 0.0f; }

fl_status fl_optimizer_set_learning_rate(fl_optimizer *o, float lr) {
    if (!o) return fl_error(FL_ERR_INVALID_ARG, "fl_optimizer_set_learning_rate: optimizer is NULL");
    if (o->sched.kind != FL_SCHEDULE_NONE)
        return fl_error(FL_ERR_STATE, "%s: the learning rate is a %s schedule, not settable (as Keras: create the "
                        "optimizer with a fixed learning_rate to change it in training)", fl_optimizer_name(o),
                        fl_lr_schedule_name(o->sched.kind));
    if (!(lr >= 0.0f) || !isfinite(lr))
        return fl_error(FL_ERR_INVALID_ARG, "%s: learning rate %g, expected a finite value >= 0", fl_optimizer_name(o), lr);
    o->d.lr = lr;
    return FL_OK;
}

static fl_optimizer *compiled_opt(fl_model *m, const char *who) {
    if (!m || !m->opt) {
        fl_error(FL_ERR_STATE, "%s: model '%s' is not compiled", who, m ? m->name : "(NULL)");
        return NULL;
    }
    return m->opt;
}

fl_status fl_model_set_optimizer_clipping(fl_model *m, float clipnorm, float clipvalue, float global_clipnorm) {
    fl_optimizer *o = compiled_opt(m, "fl_model_set_optimizer_clipping");
    if (!o) return fl_last_status();
    fl_lr_schedule keep = o->sched;
    float lr = o->d.lr;
    fl_status s = fl_optimizer_set_extras(o, clipnorm, clipvalue, global_clipnorm, &keep);
    o->d.lr = lr;
    return s;
}

fl_status fl_model_set_learning_rate_schedule(fl_model *m, const fl_lr_schedule *sched) {
    fl_optimizer *o = compiled_opt(m, "fl_model_set_learning_rate_schedule");
    if (!o) return fl_last_status();
    float cn, cv, gcn, lr = fl_optimizer_current_learning_rate(o);
    fl_optimizer_clipping(o, &cn, &cv, &gcn);
    fl_lr_schedule keep = o->sched;
    fl_status s = fl_optimizer_set_extras(o, cn, cv, gcn, sched);
    if (s != FL_OK) o->sched = keep;
    else if (!sched || sched->kind == FL_SCHEDULE_NONE) o->d.lr = lr;
    return s;
}

const fl_lr_schedule *fl_optimizer_schedule(const fl_optimizer *o) {
    return o && o->sched.kind != FL_SCHEDULE_NONE ? &o->sched : NULL;
}

void fl_optimizer_clipping(const fl_optimizer *o, float *clipnorm, float *clipvalue, float *global_clipnorm) {
    int m = o ? o->d.clip_mode : FL_CLIP_NONE;
    float c = o ? o->d.clip : 0.0f;
    if (clipnorm) *clipnorm = m == FL_CLIP_NORM ? c : 0.0f;
    if (clipvalue) *clipvalue = m == FL_CLIP_VALUE ? c : 0.0f;
    if (global_clipnorm) *global_clipnorm = m == FL_CLIP_GLOBAL_NORM ? c : 0.0f;
}

fl_optimizer *fl_sgd_(fl_sgd_args a) {
    if (a.learning_rate == 0.0f) a.learning_rate = 0.01f;
    if (bad(a.learning_rate) || bad(a.momentum) || a.momentum >= 1.0f)
        return fl_error_null(FL_ERR_INVALID_ARG, "SGD: learning_rate %g must be > 0 and momentum %g in [0, 1)",
                             a.learning_rate, a.momentum);
    fl_optimizer *o = new_opt(FL_OPT_SGD);
    if (!o) return NULL;
    o->d.lr = a.learning_rate;
    o->d.momentum = a.momentum;
    o->d.nesterov = a.nesterov;
    FINISH(o, a);
}

static fl_optimizer *adam(int code, fl_adam_args a) {
    const char *nm = code == FL_OPT_ADAMW ? "AdamW" : "Adam";
    if (a.learning_rate == 0.0f) a.learning_rate = 0.001f;
    if (a.beta_1 == 0.0f) a.beta_1 = 0.9f;
    if (a.beta_2 == 0.0f) a.beta_2 = 0.999f;
    if (a.epsilon == 0.0f) a.epsilon = 1e-7f;
    if (code == FL_OPT_ADAMW) {
        if (a.weight_decay == 0.0f) a.weight_decay = 0.004f;
        else if (a.weight_decay < 0.0f) a.weight_decay = 0.0f;
    } else if (a.weight_decay != 0.0f) {
        return fl_error_null(FL_ERR_INVALID_ARG, "Adam: weight_decay is only for AdamW (fl_adamw)");
    }
    if (bad(a.learning_rate) || a.beta_1 < 0 || a.beta_1 >= 1 || a.beta_2 < 0 || a.beta_2 >= 1 || !(a.epsilon > 0))
        return fl_error_null(FL_ERR_INVALID_ARG, "%s: learning_rate %g, beta_1 %g, beta_2 %g, epsilon %g out of range",
                             nm, a.learning_rate, a.beta_1, a.beta_2, a.epsilon);
    fl_optimizer *o = new_opt(code);
    if (!o) return NULL;
    o->d.lr = a.learning_rate;
    o->d.beta1 = a.beta_1;
    o->d.beta2 = a.beta_2;
    o->d.eps = a.epsilon;
    o->d.weight_decay = a.weight_decay;
    FINISH(o, a);
}
fl_optimizer *fl_adam_(fl_adam_args a) { return adam(FL_OPT_ADAM, a); }
fl_optimizer *fl_adamw_(fl_adam_args a) { return adam(FL_OPT_ADAMW, a); }

fl_optimizer *fl_rmsprop_(fl_rmsprop_args a) {
    if (a.learning_rate == 0.0f) a.learning_rate = 0.001f;
    if (a.rho == 0.0f) a.rho = 0.9f;
    if (a.epsilon == 0.0f) a.epsilon = 1e-7f;
    if (bad(a.learning_rate) || a.rho < 0 || a.rho >= 1 || bad(a.momentum) || a.momentum >= 1 || !(a.epsilon > 0))
        return fl_error_null(FL_ERR_INVALID_ARG, "RMSprop: learning_rate %g, rho %g, momentum %g, epsilon %g out of range",
                             a.learning_rate, a.rho, a.momentum, a.epsilon);
    fl_optimizer *o = new_opt(FL_OPT_RMSPROP);
    if (!o) return NULL;
    o->d.lr = a.learning_rate;
    o->d.rho = a.rho;
    o->d.momentum = a.momentum;
    o->d.eps = a.epsilon;
    o->d.centered = a.centered;
    FINISH(o, a);
}

static void free_slots(fl_optimizer *o) {
    if (!o->params) return;
    for (int i = 0; i < o->nparams; i++) {
        if (o->params[i].s0) o->be->free(o->params[i].s0);
        if (o->params[i].s1) o->be->free(o->params[i].s1);
        if (o->params[i].s2) o->be->free(o->params[i].s2);
    }
    free(o->params);
    o->params = NULL;
    o->nparams = 0;
}

void fl_optimizer_free(fl_optimizer *o) {
    if (!o) return;
    free_slots(o);
    free(o);
}

const char *fl_optimizer_name(const fl_optimizer *o) {
    if (!o) return NULL;
    switch (o->code) {
    case FL_OPT_SGD: return "SGD";
    case FL_OPT_ADAM: return "Adam";
    case FL_OPT_ADAMW: return "AdamW";
    case FL_OPT_RMSPROP: return "RMSprop";
    }
    return "?";
}

int64_t fl_optimizer_iterations(const fl_optimizer *o) { return o ? o->iterations : 0; }

/* (pages the CPU fills on first touch: a model loaded only to predict never writes its slots) */
static float *zeroed(const fl_backend *be, int64_t n) { return fl_backend_alloc_zeroed(be, (size_t)n * sizeof(float)); }

/* Slots (weight-sized state buffers) per trainable weight. */
static int nslots(const fl_optimizer *o) {
    switch (o->code) {
    case FL_OPT_SGD: return o->d.momentum != 0.0f;
    case FL_OPT_ADAM:
    case FL_OPT_ADAMW: return 2;
    case FL_OPT_RMSPROP: return 1 + (o->d.momentum > 0) + (o->d.centered != 0);
    }
    return 0;
}

fl_status fl_optimizer_bind(fl_optimizer *o, fl_graph *g) {
    free_slots(o);
    g->param_bytes -= g->opt_bytes; /* a model compiled again: the old slots are gone */
    g->opt_bytes = 0;
    o->be = g->be;
    o->bound_gen = g->trainable_gen;
    int np = 0;
    int64_t floats = 0;
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i]->op == FL_OP_PARAM && g->nodes[i]->trainable) {
            np++;
            floats += fl_node_size(g->nodes[i]); /* param_bytes holds twice this: no overflow */
        }
    /* the slots count against the model's memory budget too */
    int64_t need = floats * (int64_t)sizeof(float) * nslots(o), total, limit = fl_model_bytes_limit();
    if (!fl_add_checked(g->param_bytes, need, &total) || !fl_add_checked(total, g->sample_bytes, &total) ||
        total > limit) {
        char a[48], b[48];
        return fl_error(FL_ERR_NOMEM, "optimizer %s: its state (%d weight-sized slots) takes %s; the model would need "
                        "more than flynn's model memory limit of %s (raise it with $FLYNN_MAX_MODEL_BYTES or "
                        "fl_set_max_model_bytes)", fl_optimizer_name(o), nslots(o), fl_bytes_str(need, a, sizeof a),
                        fl_bytes_str(limit, b, sizeof b));
    }
    g->param_bytes += need;
    g->opt_bytes = need;
    o->params = fl_calloc((size_t)(np ? np : 1), sizeof *o->params, "optimizer parameters");
    if (!o->params) return fl_last_status();
    o->nparams = np;
    int k = 0;
    for (int i = 0; i < g->n; i++) {
        fl_node *n = g->nodes[i];
        if (n->op != FL_OP_PARAM || !n->trainable) continue;
        fl_param_ref *p = &o->params[k++];
        p->w = n->val;
        p->g = n->grad;
        p->n = fl_node_size(n);
        bool ok = true;
        switch (o->code) {
        case FL_OPT_SGD:
            if (o->d.momentum != 0.0f) ok = (p->s0 = zeroed(o->be, p->n)) != NULL;
            break;
        case FL_OPT_ADAM:
        case FL_OPT_ADAMW:
            ok = (p->s0 = zeroed(o->be, p->n)) && (p->s1 = zeroed(o->be, p->n));
            break;
        case FL_OPT_RMSPROP:
            ok = (p->s0 = zeroed(o->be, p->n)) != NULL;
            if (ok && o->d.momentum > 0) ok = (p->s1 = zeroed(o->be, p->n)) != NULL;
            if (ok && o->d.centered) ok = (p->s2 = zeroed(o->be, p->n)) != NULL;
            break;
        }
        if (!ok) {
            fl_error_prefix("optimizer %s: ", fl_optimizer_name(o));
            free_slots(o);
            return fl_last_status();
        }
    }
    return FL_OK;
}

void fl_optimizer_count_step(fl_optimizer *o) {
    o->iterations++;
    o->d.step = o->iterations;
}

/* Keras's apply: the learning rate of the iterations before the step (a
 * schedule's value), then iterations + 1 (Adam's t). */
void fl_optimizer_step(fl_optimizer *o) {
    fl_opt_desc d = o->d;
    d.lr = fl_optimizer_current_learning_rate(o);
    o->iterations++;
    o->d.step = d.step = o->iterations;
    o->be->optimizer_step(&d, o->params, o->nparams);
}

fl_status fl_optimizer_migrate(fl_optimizer *o, fl_graph *g) {
    if (!o->params || o->be == g->be) return o->params ? FL_OK : fl_optimizer_bind(o, g);
    /* slots -> host, re-bind on the graph's (new) backend, host -> slots */
    int np = o->nparams;
    float **host = fl_calloc((size_t)np * 3 + 1, sizeof *host, "optimizer state");
    if (!host) return fl_last_status();
    fl_status st = FL_OK;
    for (int k = 0; k < np && st == FL_OK; k++) {
        float *sl[3] = {o->params[k].s0, o->params[k].s1, o->params[k].s2};
        for (int j = 0; j < 3; j++) {
            if (!sl[j]) continue;
            size_t bytes = (size_t)o->params[k].n * sizeof(float);
            host[k * 3 + j] = fl_malloc(bytes, "optimizer state");
            if (!host[k * 3 + j]) { st = fl_last_status(); break; }
            o->be->download(host[k * 3 + j], sl[j], bytes);
        }
    }
    if (st == FL_OK) st = fl_optimizer_bind(o, g);
    for (int k = 0; k < np && st == FL_OK && k < o->nparams; k++) {
        float *sl[3] = {o->params[k].s0, o->params[k].s1, o->params[k].s2};
        for (int j = 0; j < 3; j++)
            if (sl[j] && host[k * 3 + j]) o->be->upload(sl[j], host[k * 3 + j], (size_t)o->params[k].n * sizeof(float));
    }
    for (int i = 0; i < np * 3; i++) free(host[i]);
    free(host);
    return st;
}
