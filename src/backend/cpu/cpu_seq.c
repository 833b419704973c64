/*
 * cpu_seq.c — the CPU kernels of sequence models: Embedding's gather and
 * its deterministic scatter-add, the mask of a padded sequence, the masked
 * GlobalAveragePooling1D, the mask and the sample weights applied to a loss (backend.h has each
 * one's formula and shapes; cuda_backend.cu has their twins).
 */
#include "cpu_internal.h"

#include <string.h>

/* The i-th index of an Embedding input: an int input's int32 values, or a
 * float truncated toward zero (Keras casts a float input to int32). */
static inline int64_t seq_index(int x_int, const float *x, int64_t i) {
    if (x_int) { int32_t v; memcpy(&v, x + i, sizeof v); return v; }
    return (int64_t)x[i];
}

void fl_cpu_embedding_fwd(int64_t n, int d, int64_t v, int x_int, const float *x, const float *w, float *y) {
#pragma omp parallel for schedule(static) num_threads(n * d < 65536 ? 1 : fl_cpu_threads())
    for (int64_t i = 0; i < n; i++) {
        int64_t r = seq_index(x_int, x, i);
        float *yi = y + (size_t)i * d;
        if (r >= 0 && r < v) memcpy(yi, w + (size_t)r * d, (size_t)d * sizeof(float));
        else memset(yi, 0, (size_t)d * sizeof(float));
    }
}

/* dw = 0, then every dy row added to its index's row in ascending i: the
 * threads split the columns, so each element sums in the same order. */
void fl_cpu_embedding_bwd(int64_t n, int d, int64_t v, int x_int, const float *x, const float *dy, float *dw) {
    memset(dw, 0, (size_t)(v * d) * sizeof(float));
    int nt = n * d < 65536 || d < 64 ? 1 : fl_cpu_threads();
#pragma omp parallel num_threads(nt)
    {
        int t = fl_cpu_thread_id(), T = nt;
        int j0 = (int)((int64_t)d * t / T), j1 = (int)((int64_t)d * (t + 1) / T);
        for (int64_t i = 0; i < n; i++) {
            int64_t r = seq_index(x_int, x, i);
            if (r < 0 || r >= v) continue;
            float *dr = dw + (size_t)r * d;
            const float *g = dy + (size_t)i * d;
            for (int j = j0; j < j1; j++) dr[j] += g[j];
        }
    }
}

void fl_cpu_seq_mask(int64_t rows, int c, int x_int, const float *x, float value, float *m) {
    const int32_t iv = (int32_t)value;
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * c;
        int any = 0;
        for (int j = 0; j < c && !any; j++) {
            if (x_int) { int32_t v; memcpy(&v, xr + j, sizeof v); any = v != iv; }
            else any = xr[j] != value;
        }
        m[r] = any ? 1.0f : 0.0f;
    }
}

void fl_cpu_masked_gap1d_fwd(int64_t n, int64_t t, int c, const float *x, const float *m, float *y) {
#pragma omp parallel for schedule(static) num_threads(n * t * c < 65536 ? 1 : fl_cpu_threads())
    for (int64_t b = 0; b < n; b++) {
        float *yo = y + (size_t)b * c;
        float cnt = 0.0f;
        for (int k = 0; k < c; k++) yo[k] = 0.0f;
        for (int64_t s = 0; s < t; s++) {
            if (m[b * t + s] == 0.0f) continue;
            const float *xs = x + ((size_t)b * t + s) * c;
            for (int k = 0; k < c; k++) yo[k] += xs[k];
            cnt += 1.0f;
        }
        for (int k = 0; k < c; k++) yo[k] /= cnt; /* 0 / 0: NaN, as Keras */
    }
}

void fl_cpu_masked_gap1d_bwd(int64_t n, int64_t t, int c, const float *m, const float *dy, float *dx, float beta) {
#pragma omp parallel for schedule(static) num_threads(n * t * c < 65536 ? 1 : fl_cpu_threads())
    for (int64_t b = 0; b < n; b++) {
        float cnt = 0.0f;
        for (int64_t s = 0; s < t; s++) cnt += m[b * t + s] != 0.0f ? 1.0f : 0.0f;
        const float *g = dy + (size_t)b * c;
        for (int64_t s = 0; s < t; s++) {
            float *d = dx + ((size_t)b * t + s) * c;
            bool on = m[b * t + s] != 0.0f;
            for (int k = 0; k < c; k++) d[k] = (beta == 0.0f ? 0.0f : d[k]) + (on ? g[k] / cnt : 0.0f);
        }
    }
}

void fl_cpu_loss_mask(int64_t rows, int c, const float *m, float *row_loss, float *grad, double *acc) {
    float valid = 0.0f;
    for (int64_t r = 0; r < rows; r++) valid += m[r] != 0.0f ? 1.0f : 0.0f;
    const float w = valid > 0.0f ? (float)rows / valid : 0.0f;
    for (int64_t r = 0; r < rows; r++) {
        float wr = m[r] != 0.0f ? w : 0.0f;
        row_loss[r] *= wr;
        if (grad)
            for (int j = 0; j < c; j++) grad[(size_t)r * c + j] *= wr;
    }
    acc[0] += (double)valid;
}

void fl_cpu_loss_weight(int64_t rows, int c, const float *w, float *row_loss, float *grad) {
    for (int64_t r = 0; r < rows; r++) {
        row_loss[r] *= w[r];
        if (grad)
            for (int j = 0; j < c; j++) grad[(size_t)r * c + j] *= w[r];
    }
}
