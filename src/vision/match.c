/*
 * match.c — matching two sets of descriptors by L2 distance (flynn/sift.h): fl_match_descriptors, brute force
 * and exact as cv::BFMatcher(NORM_L2).knnMatch(a, b, k = 2) followed by Lowe's ratio test, optionally with
 * the cross check (a match is kept only when each of its two descriptors is the other's nearest), and
 * fl_matches_free.
 *
 * Speed: the squared distances of a block of queries to a block of train descriptors come from one GEMM,
 * |a|^2 + |b|^2 - 2 a.b (cblas_sgemm, OpenMP over query blocks, OpenBLAS single-threaded inside each), and
 * each query keeps its K_ROW smallest such values (each train descriptor its K_COL smallest, per thread,
 * for the cross check). Exactness: the GEMM's values carry rounding error, |error| <= B = (d + 8) * 2^-23 *
 * (|a|^2 + max |b|^2) for any order of summation, so the candidates' distances are computed again exactly
 * (double sums of float differences: uint8 data, and SIFT's whole-number floats, give the exact integer),
 * and the nearest two are taken from them when every other train descriptor's GEMM value minus B still
 * exceeds the second nearest; a query (or, for the cross check, a train descriptor) for which that cannot
 * be shown, a tie among them included, is scanned again exactly over the whole other set. So the result is
 * the naive double loop's: ties go to the lower index, as OpenCV's scan keeps the first minimum.
 *
 * Semantics (flynn/sift.h): kept when nearest < ratio * second nearest (float distances, strictly, as
 * `m.distance < 0.75 * n.distance`); a query without a second neighbour (b holds one descriptor) passes the
 * ratio test, since nothing contradicts it. The matches come sorted by query.
 */
#include "flynn/flynn.h"
#include "core/error.h"

#include <cblas.h>
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

enum {
    K_ROW = 4,    /* candidates kept per query (two are needed) */
    K_COL = 2,    /* per train descriptor, for the cross check (one is needed) */
    QB = 256,     /* queries per block */
    TB = 1024,    /* train descriptors per block: a 1 MiB distance block per thread */
};

void fl_matches_free(fl_matches *m) {
    if (!m) return;
    free(m->data);
    m->data = NULL;
    m->n = 0;
}

/* One side: n rows of d floats (borrowed, or converted from uint8 and owned) and their squared norms. */
typedef struct desc_set {
    const char *name;
    int64_t n, d;
    const float *x;
    float *owned;
    float *norm;
    float max_norm;
} desc_set;

static void desc_set_free(desc_set *s) {
    free(s->owned);
    free(s->norm);
}

static fl_status desc_set_init(desc_set *s, const fl_tensor *t, const char *name) {
    memset(s, 0, sizeof *s);
    s->name = name;
    if (!t) return fl_error(FL_ERR_INVALID_ARG, "fl_match_descriptors: %s is NULL, expected (n, d) descriptors", name);
    if (fl_tensor_ndim(t) != 2) {
        char sh[128];
        return fl_error(FL_ERR_SHAPE, "fl_match_descriptors: %s has shape %s, expected 2-D (n, d) descriptors", name,
                        fl_tensor_shape_str(t, sh, sizeof sh));
    }
    fl_dtype dt = fl_tensor_dtype(t);
    if (dt != FL_FLOAT32 && dt != FL_UINT8)
        return fl_error(FL_ERR_INVALID_ARG, "fl_match_descriptors: %s is %s, expected float32 or uint8 descriptors",
                        name, dt == FL_INT32 ? "int32" : "of an unknown dtype");
    s->n = fl_tensor_dim(t, 0);
    s->d = fl_tensor_dim(t, 1);
    if (s->n > INT32_MAX)
        return fl_error(FL_ERR_SHAPE, "fl_match_descriptors: %s holds %lld descriptors, at most %d can be matched",
                        name, (long long)s->n, INT32_MAX);
    if (s->n > 0 && s->d == 0)
        return fl_error(FL_ERR_SHAPE, "fl_match_descriptors: %s has shape (%lld, 0), expected at least one column",
                        name, (long long)s->n);
    const size_t count = (size_t)s->n * (size_t)s->d;
    if (dt == FL_UINT8) {
        const unsigned char *u = fl_tensor_cdata(t);
        if (!(s->owned = fl_malloc(count * sizeof(float) + 1, "the descriptors as floats"))) return FL_ERR_NOMEM;
        for (size_t k = 0; k < count; k++) s->owned[k] = (float)u[k];
        s->x = s->owned;
    } else {
        s->x = fl_tensor_cdata(t);
        for (size_t k = 0; k < count; k++)
            if (!isfinite(s->x[k]))
                return fl_error(FL_ERR_INVALID_ARG,
                                "fl_match_descriptors: %s[%lld, %lld] is %s, expected finite descriptor values", name,
                                (long long)(k / (size_t)s->d), (long long)(k % (size_t)s->d),
                                isnan(s->x[k]) ? "NaN" : s->x[k] > 0 ? "inf" : "-inf");
    }
    if (!(s->norm = fl_malloc((size_t)s->n * sizeof(float) + 1, "the descriptors' norms"))) return FL_ERR_NOMEM;
    for (int64_t i = 0; i < s->n; i++) {
        const float *r = s->x + i * s->d;
        double acc = 0;
        for (int64_t k = 0; k < s->d; k++) acc += (double)r[k] * r[k];
        s->norm[i] = (float)acc;
        if (s->norm[i] > s->max_norm || isinf(s->norm[i])) s->max_norm = s->norm[i];
    }
    return FL_OK;
}

/* The exact squared distance (a double sum; exact for whole numbers below 2^26, as uint8 data). */
static double exact_sq(const float *p, const float *q, int64_t d) {
    double acc = 0;
    for (int64_t k = 0; k < d; k++) {
        const double t = (double)p[k] - q[k];
        acc += t * t;
    }
    return acc;
}

/* Inserts (v, idx) into the ascending list of k (v < vals[k-1] known); equal values keep the earlier entry
 * first, so a scan in increasing idx keeps the lower index ahead. */
static inline void insert_k(float *vals, int32_t *idx, int k, float v, int32_t id) {
    int p = k - 1;
    while (p > 0 && vals[p - 1] > v) {
        vals[p] = vals[p - 1];
        idx[p] = idx[p - 1];
        p--;
    }
    vals[p] = v;
    idx[p] = id;
}

/* Same, but ordered by (value, index) for lists merged from several threads. */
static inline void insert_k_ordered(float *vals, int32_t *idx, int k, float v, int32_t id) {
    if (!(v < vals[k - 1] || (v == vals[k - 1] && (idx[k - 1] < 0 || id < idx[k - 1])))) return;
    int p = k - 1;
    while (p > 0 && (vals[p - 1] > v || (vals[p - 1] == v && idx[p - 1] > id))) {
        vals[p] = vals[p - 1];
        idx[p] = idx[p - 1];
        p--;
    }
    vals[p] = v;
    idx[p] = id;
}

/* The nearest two of row p among the n rows of s, exactly (lowest index first among equals). */
static void exact_top2(const float *p, const desc_set *s, double *d1, int32_t *j1, double *d2, int32_t *j2) {
    *d1 = *d2 = INFINITY;
    *j1 = *j2 = -1;
    for (int64_t j = 0; j < s->n; j++) {
        const double v = exact_sq(p, s->x + j * s->d, s->d);
        if (v < *d1 || *j1 < 0) {
            *d2 = *d1, *j2 = *j1;
            *d1 = v, *j1 = (int32_t)j;
        } else if (v < *d2 || *j2 < 0) {
            *d2 = v, *j2 = (int32_t)j;
        }
    }
}

/* The GEMM pass: for every query its K_ROW smallest approximate squared distances (rv, ri), and with
 * cross-check every train descriptor's K_COL smallest per thread (cv, ci: nthreads * m * K_COL). */
static fl_status gemm_pass(const desc_set *A, const desc_set *B, float *rv, int32_t *ri, float *cv, int32_t *ci,
                           int nthreads) {
    const int64_t n = A->n, m = B->n, d = A->d, nqb = (n + QB - 1) / QB;
    int failed = 0;
#pragma omp parallel num_threads(nthreads)
    {
        float *C = malloc((size_t)QB * TB * sizeof(float));
        const int tid = omp_get_thread_num();
        float *tcv = cv ? cv + (size_t)tid * (size_t)m * K_COL : NULL;
        int32_t *tci = ci ? ci + (size_t)tid * (size_t)m * K_COL : NULL;
        if (!C) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t qb = 0; qb < nqb; qb++) {
            if (!C) continue;
            const int64_t i0 = qb * QB, qn = n - i0 < QB ? n - i0 : QB;
            for (int64_t t = i0 * K_ROW; t < (i0 + qn) * K_ROW; t++) rv[t] = INFINITY, ri[t] = -1;
            for (int64_t j0 = 0; j0 < m; j0 += TB) {
                const int64_t tn = m - j0 < TB ? m - j0 : TB;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)qn, (int)tn, (int)d, -2.f, A->x + i0 * d,
                            (int)d, B->x + j0 * d, (int)d, 0.f, C, (int)tn);
                const float *bn = B->norm + j0;
                for (int64_t r = 0; r < qn; r++) {
                    float *row = C + r * tn;
                    const float na = A->norm[i0 + r];
                    for (int64_t c = 0; c < tn; c++) row[c] += bn[c] + na; /* vectorised */
                    float *v = rv + (i0 + r) * K_ROW;
                    int32_t *ix = ri + (i0 + r) * K_ROW;
                    float thr = v[K_ROW - 1];
                    for (int64_t c = 0; c < tn; c++)
                        if (row[c] < thr) {
                            insert_k(v, ix, K_ROW, row[c], (int32_t)(j0 + c));
                            thr = v[K_ROW - 1];
                        }
                    if (tcv)
                        for (int64_t c = 0; c < tn; c++) {
                            float *w = tcv + (j0 + c) * K_COL;
                            if (row[c] < w[K_COL - 1])
                                insert_k(w, tci + (j0 + c) * K_COL, K_COL, row[c], (int32_t)(i0 + r));
                        }
                }
            }
        }
        free(C);
    }
    return failed ? fl_error(FL_ERR_NOMEM, "fl_match_descriptors: out of memory for the distance blocks")
                  : FL_OK;
}

/* Per query: the exact nearest two from the candidates, or from a whole scan where the bound cannot show
 * them to be the nearest. */
static void rows_exact(const desc_set *A, const desc_set *B, const float *rv, const int32_t *ri, double *best1,
                       int32_t *bj1, double *best2, int nthreads) {
    const int64_t n = A->n, m = B->n, d = A->d;
    const double eps = (double)(d + 8) * FLT_EPSILON;
#pragma omp parallel for schedule(dynamic, 64) num_threads(nthreads)
    for (int64_t i = 0; i < n; i++) {
        const float *p = A->x + i * d;
        const float *v = rv + i * K_ROW;
        const int32_t *ix = ri + i * K_ROW;
        double d1 = INFINITY, d2 = INFINITY;
        int32_t j1 = -1, j2 = -1;
        int got = 0;
        for (int k = 0; k < K_ROW && ix[k] >= 0; k++, got++) {
            const double e = exact_sq(p, B->x + (int64_t)ix[k] * d, d);
            const int32_t j = ix[k];
            if (j1 < 0 || e < d1 || (e == d1 && j < j1)) {
                d2 = d1, j2 = j1;
                d1 = e, j1 = j;
            } else if (j2 < 0 || e < d2 || (e == d2 && j < j2)) {
                d2 = e, j2 = j;
            }
        }
        /* every train descriptor is a candidate, or every other one is provably farther than the second */
        const double bound = eps * ((double)A->norm[i] + (double)B->max_norm);
        const bool all = got == m;
        const bool shown = got == K_ROW && isfinite(bound) && (double)v[K_ROW - 1] - bound > d2;
        if (!all && !shown) exact_top2(p, B, &d1, &j1, &d2, &j2);
        best1[i] = d1;
        bj1[i] = j1;
        best2[i] = d2;
    }
}

/* Whether query i is train descriptor j's nearest (at exact squared distance e): from the merged column
 * candidates (cv, ci: m * K_COL) or a whole scan of the queries. */
static bool nearest_of_train(const desc_set *A, const desc_set *B, const float *cv, const int32_t *ci, int64_t i,
                             int64_t j, double e) {
    const int64_t n = A->n, d = A->d;
    const float *q = B->x + j * d;
    const float *v = cv + j * K_COL;
    const int32_t *ix = ci + j * K_COL;
    const double eps = (double)(d + 8) * FLT_EPSILON;
    int got = 0;
    for (int k = 0; k < K_COL && ix[k] >= 0; k++, got++) {
        if (ix[k] == i) continue;
        const double o = exact_sq(A->x + (int64_t)ix[k] * d, q, d);
        if (o < e || (o == e && ix[k] < i)) return false;
    }
    const double bound = eps * ((double)A->max_norm + (double)B->norm[j]);
    if (got == n || (got == K_COL && isfinite(bound) && (double)v[K_COL - 1] - bound > e)) return true;
    for (int64_t t = 0; t < n; t++) {
        if (t == i) continue;
        const double o = exact_sq(A->x + t * d, q, d);
        if (o < e || (o == e && t < i)) return false;
    }
    return true;
}

fl_status fl_match_descriptors_(const fl_tensor *a, const fl_tensor *b, fl_matches *out, fl_match_args args) {
    if (!out) return fl_error(FL_ERR_INVALID_ARG, "fl_match_descriptors: out is NULL, expected an fl_matches to fill");
    out->n = 0;
    out->data = NULL;
    if (!(args.ratio >= 0)) /* negative or NaN */
        return fl_error(FL_ERR_INVALID_ARG, "fl_match_descriptors: ratio %g, expected 0 (0.75), a value in (0, 1) "
                        "or 1 and more (no ratio test)", (double)args.ratio);
    const float ratio = args.ratio == 0 ? 0.75f : args.ratio;
    desc_set A, B;
    fl_status s = desc_set_init(&A, a, "a");
    if (s != FL_OK) { desc_set_free(&A); return s; }
    if ((s = desc_set_init(&B, b, "b")) != FL_OK) { desc_set_free(&A); desc_set_free(&B); return s; }
    if (A.d != B.d) {
        s = fl_error(FL_ERR_SHAPE, "fl_match_descriptors: a has %lld columns and b %lld, expected descriptors of the "
                     "same length", (long long)A.d, (long long)B.d);
        goto done;
    }
    if (A.n == 0 || B.n == 0) goto done;

    const int nthreads = fl_num_threads_in_use() > 0 ? fl_num_threads_in_use() : 1;
    const size_t n = (size_t)A.n, m = (size_t)B.n;
    float *rv = fl_malloc(n * K_ROW * sizeof(float), "the match candidates");
    int32_t *ri = fl_malloc(n * K_ROW * sizeof(int32_t), "the match candidates");
    double *best1 = fl_malloc(n * sizeof(double), "the nearest distances");
    double *best2 = fl_malloc(n * sizeof(double), "the nearest distances");
    int32_t *bj = fl_malloc(n * sizeof(int32_t), "the nearest neighbours");
    float *cv = NULL;
    int32_t *ci = NULL;
    if (args.cross_check) {
        cv = fl_malloc((size_t)nthreads * m * K_COL * sizeof(float), "the cross check's candidates");
        ci = fl_malloc((size_t)nthreads * m * K_COL * sizeof(int32_t), "the cross check's candidates");
    }
    out->data = fl_malloc(n * sizeof(fl_match), "the matches");
    if (!rv || !ri || !best1 || !best2 || !bj || (args.cross_check && (!cv || !ci)) || !out->data) {
        s = FL_ERR_NOMEM;
        goto free_work;
    }
    if (cv)
        for (size_t t = 0; t < (size_t)nthreads * m * K_COL; t++) cv[t] = INFINITY, ci[t] = -1;
    if ((s = gemm_pass(&A, &B, rv, ri, cv, ci, nthreads)) != FL_OK) goto free_work;
    if (cv) /* the threads' column lists merged into thread 0's, ordered by (value, index) */
        for (int t = 1; t < nthreads; t++)
            for (size_t j = 0; j < m; j++)
                for (int k = 0; k < K_COL; k++) {
                    const size_t src = ((size_t)t * m + j) * K_COL + (size_t)k;
                    if (ci[src] >= 0) insert_k_ordered(cv + j * K_COL, ci + j * K_COL, K_COL, cv[src], ci[src]);
                }
    rows_exact(&A, &B, rv, ri, best1, bj, best2, nthreads);
    for (size_t i = 0; i < n; i++) {
        const float d1 = (float)sqrt(best1[i]), d2 = (float)sqrt(best2[i]);
        const bool pass_ratio = ratio >= 1 || m < 2 || d1 < ratio * d2;
        if (!pass_ratio) continue;
        if (args.cross_check && !nearest_of_train(&A, &B, cv, ci, (int64_t)i, bj[i], best1[i])) continue;
        out->data[out->n++] = (fl_match){.query = (int32_t)i, .train = bj[i], .distance = d1};
    }
free_work:
    free(rv);
    free(ri);
    free(best1);
    free(best2);
    free(bj);
    free(cv);
    free(ci);
done:
    if (s != FL_OK || out->n == 0) {
        free(out->data);
        out->data = NULL;
        out->n = 0;
    }
    desc_set_free(&A);
    desc_set_free(&B);
    return s;
}
