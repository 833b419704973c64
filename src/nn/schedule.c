/*
 * schedule.c — Keras's learning-rate schedules (keras.optimizers.schedules:
 * ExponentialDecay, InverseTimeDecay, CosineDecay with warmup,
 * PiecewiseConstantDecay): their constructors, checks and values per
 * optimizer step, computed in float32 as Keras computes them.
 */
#include "nn.h"
#include "core/error.h"

#include <math.h>
#include <string.h>

const char *fl_lr_schedule_name(fl_lr_schedule_kind k) {
    switch (k) {
    case FL_SCHEDULE_NONE: return "none";
    case FL_SCHEDULE_EXPONENTIAL_DECAY: return "ExponentialDecay";
    case FL_SCHEDULE_COSINE_DECAY: return "CosineDecay";
    case FL_SCHEDULE_PIECEWISE_CONSTANT_DECAY: return "PiecewiseConstantDecay";
    case FL_SCHEDULE_INVERSE_TIME_DECAY: return "InverseTimeDecay";
    }
    return "?";
}

static fl_lr_schedule decay(fl_lr_schedule_kind k, double lr, double steps, double rate, fl_schedule_args a) {
    fl_lr_schedule s = {.kind = k, .initial_learning_rate = lr, .decay_steps = steps, .decay_rate = rate,
                        .staircase = a.staircase, .alpha = a.alpha, .warmup_target = a.warmup_target,
                        .warmup_steps = a.warmup_steps};
    return s;
}
fl_lr_schedule fl_exponential_decay_(double lr, double steps, double rate, fl_schedule_args a) {
    return decay(FL_SCHEDULE_EXPONENTIAL_DECAY, lr, steps, rate, a);
}
fl_lr_schedule fl_inverse_time_decay_(double lr, double steps, double rate, fl_schedule_args a) {
    return decay(FL_SCHEDULE_INVERSE_TIME_DECAY, lr, steps, rate, a);
}
fl_lr_schedule fl_cosine_decay_(double lr, double steps, fl_schedule_args a) {
    return decay(FL_SCHEDULE_COSINE_DECAY, lr, steps, 0.0, a);
}
fl_lr_schedule fl_piecewise_constant_decay(int n, const double *boundaries, const double *values) {
    fl_lr_schedule s = {.kind = FL_SCHEDULE_PIECEWISE_CONSTANT_DECAY, .n_boundaries = n};
    for (int i = 0; i < n && i < FL_SCHEDULE_MAX_BOUNDARIES && boundaries; i++) s.boundaries[i] = boundaries[i];
    for (int i = 0; i <= n && i <= FL_SCHEDULE_MAX_BOUNDARIES && values; i++) s.values[i] = values[i];
    if (n > FL_SCHEDULE_MAX_BOUNDARIES || n < 1 || !boundaries || !values) s.n_boundaries = -1 - (n < 0 ? 0 : n);
    return s;
}

fl_status fl_lr_schedule_check(const fl_lr_schedule *s) {
    if (!s) return fl_error(FL_ERR_INVALID_ARG, "learning-rate schedule is NULL");
    const char *nm = fl_lr_schedule_name(s->kind);
    switch (s->kind) {
    case FL_SCHEDULE_NONE: return FL_OK;
    case FL_SCHEDULE_EXPONENTIAL_DECAY:
    case FL_SCHEDULE_INVERSE_TIME_DECAY:
    case FL_SCHEDULE_COSINE_DECAY:
        if (!(s->initial_learning_rate >= 0) || !isfinite(s->initial_learning_rate))
            return fl_error(FL_ERR_INVALID_ARG, "%s: initial_learning_rate %g, expected a finite value >= 0", nm,
                            s->initial_learning_rate);
        if (!(s->decay_steps > 0) || !isfinite(s->decay_steps))
            return fl_error(FL_ERR_INVALID_ARG, "%s: decay_steps %g, expected > 0", nm, s->decay_steps);
        if (s->kind != FL_SCHEDULE_COSINE_DECAY && (!(s->decay_rate >= 0) || !isfinite(s->decay_rate)))
            return fl_error(FL_ERR_INVALID_ARG, "%s: decay_rate %g, expected a finite value >= 0", nm, s->decay_rate);
        if (s->kind == FL_SCHEDULE_COSINE_DECAY &&
            (!(s->alpha >= 0 && s->alpha <= 1) || !(s->warmup_steps >= 0) || !isfinite(s->warmup_steps) ||
             !(s->warmup_target >= 0) || !isfinite(s->warmup_target)))
            return fl_error(FL_ERR_INVALID_ARG, "CosineDecay: alpha %g (expected 0..1), warmup_target %g, "
                            "warmup_steps %g (expected >= 0)", s->alpha, s->warmup_target, s->warmup_steps);
        return FL_OK;
    case FL_SCHEDULE_PIECEWISE_CONSTANT_DECAY:
        if (s->n_boundaries < 1 || s->n_boundaries > FL_SCHEDULE_MAX_BOUNDARIES)
            return fl_error(FL_ERR_INVALID_ARG, "PiecewiseConstantDecay: %d boundaries, expected 1..%d (and one "
                            "value more than boundaries)", s->n_boundaries < 0 ? -1 - s->n_boundaries : s->n_boundaries,
                            FL_SCHEDULE_MAX_BOUNDARIES);
        for (int i = 0; i <= s->n_boundaries; i++)
            if (!isfinite(s->values[i]) || s->values[i] < 0)
                return fl_error(FL_ERR_INVALID_ARG, "PiecewiseConstantDecay: values[%d] = %g, expected >= 0", i,
                                s->values[i]);
        for (int i = 1; i < s->n_boundaries; i++)
            if (!(s->boundaries[i] > s->boundaries[i - 1]))
                return fl_error(FL_ERR_INVALID_ARG, "PiecewiseConstantDecay: boundaries[%d] = %g after %g, expected "
                                "increasing boundaries", i, s->boundaries[i], s->boundaries[i - 1]);
        return FL_OK;
    }
    return fl_error(FL_ERR_INVALID_ARG, "learning-rate schedule: unknown kind %d", (int)s->kind);
}

/* CosineDecay's _decay_function: lr * ((1 - alpha) * 0.5 * (1 + cos(pi * step / steps)) + alpha) */
static float cosine(float step, float steps, float from, float alpha) {
    float frac = step / steps;
    float cd = 0.5f * (1.0f + cosf((float)M_PI * frac));
    return from * ((1.0f - alpha) * cd + alpha);
}

float fl_lr_schedule_value(const fl_lr_schedule *s, int64_t step) {
    if (!s) return 0.0f;
    float lr0 = (float)s->initial_learning_rate, steps = (float)s->decay_steps, rate = (float)s->decay_rate;
    float t = (float)step;
    switch (s->kind) {
    case FL_SCHEDULE_NONE: return lr0;
    case FL_SCHEDULE_EXPONENTIAL_DECAY: {
        float p = t / steps;
        if (s->staircase) p = floorf(p);
        return lr0 * powf(rate, p);
    }
    case FL_SCHEDULE_INVERSE_TIME_DECAY: {
        float p = t / steps;
        if (s->staircase) p = floorf(p);
        return lr0 / (1.0f + rate * p);
    }
    case FL_SCHEDULE_COSINE_DECAY: {
        float alpha = (float)s->alpha;
        if (s->warmup_target == 0.0) return cosine(fminf(t, steps), steps, lr0, alpha);
        float target = (float)s->warmup_target, ws = (float)s->warmup_steps;
        t = fminf(t, steps + ws);
        if (t < ws) return (target - lr0) * (t / ws) + lr0;
        return cosine(t - ws, steps, target, alpha);
    }
    case FL_SCHEDULE_PIECEWISE_CONSTANT_DECAY: {
        int n = s->n_boundaries;
        if (n < 1) return 0.0f;
        /* Keras: values[0] for step <= b[0], values[i] for b[i-1] < step <= b[i], values[n] after b[n-1] */
        for (int i = 0; i < n; i++)
            if ((double)step <= s->boundaries[i]) return (float)s->values[i];
        return (float)s->values[n];
    }
    }
    return lr0;
}
