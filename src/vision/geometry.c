/*
 * geometry.c — fl_find_geometry (flynn/sift.h): a homography or a fundamental matrix fitted to matched
 * keypoints by RANSAC, then refined on its inliers.
 *
 * Homography (x_b ~ H x_a): samples of 4 matches, each solved by the normalised DLT (Hartley: each image's
 * points moved to their centroid and scaled to a mean distance of sqrt 2; the null vector of the 8 x 9
 * system from the 9 x 9 normal matrix by Jacobi's eigenvalue method). A sample is skipped when 3 of its 4
 * points are collinear in either image, or when the 4 triangles it makes do not keep (or all flip) their
 * orientation from a to b, as OpenCV's checkSubset skips them: no homography maps such a sample. An inlier's
 * reprojection error |x_b - H x_a| is below the threshold (3 px by default, as cv::findHomography). The best
 * model is refined on its inliers by the DLT on all of them, then Levenberg-Marquardt on the reprojection
 * errors (8 parameters, H[8] = 1), and the inliers are counted again; the refined model is kept when it
 * has as many inliers or more.
 *
 * Fundamental (x_b^T F x_a = 0): samples of 8, the normalised 8-point algorithm, rank 2 enforced by
 * zeroing the smallest singular value (F <- F (I - v v^T), v the right singular vector of the smallest,
 * from the eigenvectors of F^T F). A sample whose 8 x 9 system has a null space of more than one dimension
 * is degenerate and skipped. An inlier's Sampson distance, sqrt((x_b^T F x_a)^2 / ((F x_a)_1^2 + (F x_a)_2^2
 * + (F^T x_b)_1^2 + (F^T x_b)_2^2)), is below the threshold (1 px). Refined by the 8-point algorithm on the
 * inliers, reweighted by the Sampson denominators a few times (which minimises the Sampson error), kept
 * when it has as many inliers or more. Scaled to F[8] = 1 where F[8] is not about 0, else to norm 1.
 *
 * RANSAC: iteration t draws its sample from fl_philox_u32(seed, t, k) (k = 0, 1, ... until the sample's
 * indices are distinct), so a seed gives the same models in the same order, and stops after
 * log(1 - confidence) / log(1 - w^s) iterations for the best inlier ratio w so far (s = 4 or 8), or
 * max_iters. Each iteration tries up to MAX_DRAWS samples to find a non-degenerate one.
 */
#include "flynn/flynn.h"
#include "core/error.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_DRAWS = 100, MAX_SAMPLE = 8 };

/* ------------------------------------------------------------ small linear algebra */

/* Eigen-decomposition of the symmetric n x n matrix S (row-major, destroyed) by cyclic Jacobi rotations:
 * eigenvalues into w, eigenvectors as the columns of V. n <= 9. */
static void jacobi_eigen(double *S, int n, double *w, double *V) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) V[i * n + j] = i == j;
    for (int sweep = 0; sweep < 60; sweep++) {
        double off = 0, diag = 0;
        for (int i = 0; i < n; i++) {
            diag += S[i * n + i] * S[i * n + i];
            for (int j = i + 1; j < n; j++) off += S[i * n + j] * S[i * n + j];
        }
        if (off <= 1e-30 * diag || off == 0) break;
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++) {
                const double apq = S[p * n + q];
                if (apq == 0) continue;
                const double theta = (S[q * n + q] - S[p * n + p]) / (2 * apq);
                const double t = (theta >= 0 ? 1 : -1) / (fabs(theta) + sqrt(theta * theta + 1));
                const double c = 1 / sqrt(t * t + 1), s = t * c;
                for (int k = 0; k < n; k++) { /* S <- S J (columns p, q) */
                    const double skp = S[k * n + p], skq = S[k * n + q];
                    S[k * n + p] = c * skp - s * skq;
                    S[k * n + q] = s * skp + c * skq;
                }
                for (int k = 0; k < n; k++) { /* S <- J^T S (rows p, q) */
                    const double spk = S[p * n + k], sqk = S[q * n + k];
                    S[p * n + k] = c * spk - s * sqk;
                    S[q * n + k] = s * spk + c * sqk;
                }
                for (int k = 0; k < n; k++) {
                    const double vkp = V[k * n + p], vkq = V[k * n + q];
                    V[k * n + p] = c * vkp - s * vkq;
                    V[k * n + q] = s * vkp + c * vkq;
                }
            }
    }
    for (int i = 0; i < n; i++) w[i] = S[i * n + i];
}

/* The unit vector x minimising |A x| for the 9 x 9 normal matrix N = A^T A (destroyed); *second: the
 * second-smallest eigenvalue over the largest (0 when the null space has two or more dimensions). */
static void smallest_eigvec9(double *N, double x[9], double *second) {
    double w[9], V[81];
    jacobi_eigen(N, 9, w, V);
    int lo = 0;
    for (int i = 1; i < 9; i++)
        if (w[i] < w[lo]) lo = i;
    double hi = 0, sec = INFINITY;
    for (int i = 0; i < 9; i++) {
        if (w[i] > hi) hi = w[i];
        if (i != lo && w[i] < sec) sec = w[i];
    }
    for (int i = 0; i < 9; i++) x[i] = V[i * 9 + lo];
    if (second) *second = hi > 0 ? sec / hi : 0;
}

/* Solves the n x n system M x = r (destroyed) by Gaussian elimination with partial pivoting. */
static bool solve(double *M, double *r, int n, double *x) {
    for (int c = 0; c < n; c++) {
        int p = c;
        for (int i = c + 1; i < n; i++)
            if (fabs(M[i * n + c]) > fabs(M[p * n + c])) p = i;
        if (!(fabs(M[p * n + c]) > 1e-300)) return false;
        if (p != c) {
            for (int k = 0; k < n; k++) {
                const double t = M[c * n + k];
                M[c * n + k] = M[p * n + k];
                M[p * n + k] = t;
            }
            const double t = r[c];
            r[c] = r[p];
            r[p] = t;
        }
        for (int i = c + 1; i < n; i++) {
            const double f = M[i * n + c] / M[c * n + c];
            for (int k = c; k < n; k++) M[i * n + k] -= f * M[c * n + k];
            r[i] -= f * r[c];
        }
    }
    for (int i = n - 1; i >= 0; i--) {
        double s = r[i];
        for (int k = i + 1; k < n; k++) s -= M[i * n + k] * x[k];
        x[i] = s / M[i * n + i];
    }
    return true;
}

static void mat3_mul(const double *A, const double *B, double *C) {
    double t[9];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) t[i * 3 + j] = A[i * 3] * B[j] + A[i * 3 + 1] * B[3 + j] + A[i * 3 + 2] * B[6 + j];
    memcpy(C, t, sizeof t);
}

/* ------------------------------------------------------------ points */

typedef struct pt { double x, y; } pt;

/* Hartley's normalisation of pts[idx[0..n)] (idx NULL: 0..n-1): T maps them to centroid 0, mean distance
 * sqrt 2; false when they all coincide. */
static bool normaliser(const pt *pts, const int *idx, int n, double T[9]) {
    double cx = 0, cy = 0;
    for (int i = 0; i < n; i++) {
        const pt p = pts[idx ? idx[i] : i];
        cx += p.x, cy += p.y;
    }
    cx /= n, cy /= n;
    double md = 0;
    for (int i = 0; i < n; i++) {
        const pt p = pts[idx ? idx[i] : i];
        md += hypot(p.x - cx, p.y - cy);
    }
    md /= n;
    if (!(md > 0) || !isfinite(md)) return false;
    const double s = sqrt(2.0) / md;
    const double t[9] = {s, 0, -s * cx, 0, s, -s * cy, 0, 0, 1};
    memcpy(T, t, sizeof t);
    return true;
}

static pt apply_T(const double T[9], pt p) { return (pt){T[0] * p.x + T[2], T[4] * p.y + T[5]}; }

static bool inv_T(const double T[9], double I[9]) { /* inverse of a normaliser (scale s, shift) */
    if (T[0] == 0) return false;
    const double s = 1 / T[0];
    const double t[9] = {s, 0, -T[2] * s, 0, s, -T[5] * s, 0, 0, 1};
    memcpy(I, t, sizeof t);
    return true;
}

/* Twice the signed area of the triangle pqr. */
static double tri(pt p, pt q, pt r) { return (q.x - p.x) * (r.y - p.y) - (q.y - p.y) * (r.x - p.x); }

/* Whether p, q, r lie on a line, relative to the triangle's size. */
static bool collinear(pt p, pt q, pt r) {
    const double a = fabs(tri(p, q, r));
    const double l = (q.x - p.x) * (q.x - p.x) + (q.y - p.y) * (q.y - p.y) + (r.x - p.x) * (r.x - p.x) +
                     (r.y - p.y) * (r.y - p.y) + (r.x - q.x) * (r.x - q.x) + (r.y - q.y) * (r.y - q.y);
    return !(a > 1e-4 * l);
}

/* ------------------------------------------------------------ homography */

/* H from the matches idx[0..n) (n >= 4) by the normalised DLT; false for a degenerate set. */
static bool homography_dlt(const pt *a, const pt *b, const int *idx, int n, double H[9]) {
    double Ta[9], Tb[9], Tbi[9];
    if (!normaliser(a, idx, n, Ta) || !normaliser(b, idx, n, Tb) || !inv_T(Tb, Tbi)) return false;
    double N[81] = {0};
    for (int i = 0; i < n; i++) {
        const pt p = apply_T(Ta, a[idx ? idx[i] : i]), q = apply_T(Tb, b[idx ? idx[i] : i]);
        const double r1[9] = {p.x, p.y, 1, 0, 0, 0, -q.x * p.x, -q.x * p.y, -q.x};
        const double r2[9] = {0, 0, 0, p.x, p.y, 1, -q.y * p.x, -q.y * p.y, -q.y};
        for (int u = 0; u < 9; u++)
            for (int v = u; v < 9; v++) N[u * 9 + v] += r1[u] * r1[v] + r2[u] * r2[v];
    }
    for (int u = 0; u < 9; u++)
        for (int v = 0; v < u; v++) N[u * 9 + v] = N[v * 9 + u];
    double h[9], second;
    smallest_eigvec9(N, h, &second);
    if (!(second > 1e-14)) return false;
    mat3_mul(Tbi, h, H); /* H = Tb^-1 Hn Ta */
    mat3_mul(H, Ta, H);
    if (!(fabs(H[8]) > 1e-12 * (fabs(H[0]) + fabs(H[4]) + 1e-300))) return false;
    for (int i = 0; i < 9; i++) H[i] /= H[8];
    H[8] = 1;
    for (int i = 0; i < 9; i++)
        if (!isfinite(H[i])) return false;
    return true;
}

/* The squared reprojection error |b - H a|^2 (infinity where H sends a to infinity or behind). */
static double homography_err2(const double H[9], pt a, pt b) {
    const double w = H[6] * a.x + H[7] * a.y + H[8];
    if (!(fabs(w) > DBL_EPSILON)) return INFINITY;
    const double u = (H[0] * a.x + H[1] * a.y + H[2]) / w - b.x, v = (H[3] * a.x + H[4] * a.y + H[5]) / w - b.y;
    return u * u + v * v;
}

/* A 4-sample no homography maps: 3 collinear points in either image, or triangles that change orientation
 * inconsistently. */
static bool homography_sample_bad(const pt *a, const pt *b, const int *s) {
    static const int tris[4][3] = {{0, 1, 2}, {1, 2, 3}, {2, 3, 0}, {3, 0, 1}};
    int sign = 0;
    for (int t = 0; t < 4; t++) {
        const pt a0 = a[s[tris[t][0]]], a1 = a[s[tris[t][1]]], a2 = a[s[tris[t][2]]];
        const pt b0 = b[s[tris[t][0]]], b1 = b[s[tris[t][1]]], b2 = b[s[tris[t][2]]];
        if (collinear(a0, a1, a2) || collinear(b0, b1, b2)) return true;
        const int sg = (tri(a0, a1, a2) > 0) == (tri(b0, b1, b2) > 0) ? 1 : -1;
        if (sign && sg != sign) return true;
        sign = sg;
    }
    return false;
}

/* Levenberg-Marquardt on the reprojection errors of the matches idx[0..n), H[8] fixed at 1. Works in
 * normalised coordinates (the errors scaled by b's normaliser, the same for every point). */
static void homography_lm(const pt *a, const pt *b, const int *idx, int n, double H[9]) {
    double Ta[9], Tb[9], Tai[9], Tbi[9];
    if (!normaliser(a, idx, n, Ta) || !normaliser(b, idx, n, Tb) || !inv_T(Ta, Tai) || !inv_T(Tb, Tbi)) return;
    double h[9];
    mat3_mul(Tb, H, h); /* Hn = Tb H Ta^-1 */
    mat3_mul(h, Tai, h);
    if (!(fabs(h[8]) > 1e-10)) return;
    for (int i = 0; i < 9; i++) h[i] /= h[8];
    pt *pa = malloc((size_t)n * sizeof *pa), *pb = malloc((size_t)n * sizeof *pb);
    if (!pa || !pb) { free(pa); free(pb); return; }
    for (int i = 0; i < n; i++) pa[i] = apply_T(Ta, a[idx[i]]), pb[i] = apply_T(Tb, b[idx[i]]);
    double cost = 0;
    for (int i = 0; i < n; i++) cost += homography_err2(h, pa[i], pb[i]);
    double lambda = 1e-3;
    bool converged = false;
    for (int it = 0; it < 30 && !converged && isfinite(cost); it++) {
        double JtJ[64] = {0}, Jtr[8] = {0};
        for (int i = 0; i < n; i++) {
            const double x = pa[i].x, y = pa[i].y;
            const double w = h[6] * x + h[7] * y + 1;
            if (!(fabs(w) > DBL_EPSILON)) continue;
            const double u = (h[0] * x + h[1] * y + h[2]) / w, v = (h[3] * x + h[4] * y + h[5]) / w;
            const double jx[8] = {x / w, y / w, 1 / w, 0, 0, 0, -u * x / w, -u * y / w};
            const double jy[8] = {0, 0, 0, x / w, y / w, 1 / w, -v * x / w, -v * y / w};
            const double rx = u - pb[i].x, ry = v - pb[i].y;
            for (int p = 0; p < 8; p++) {
                Jtr[p] += jx[p] * rx + jy[p] * ry;
                for (int q = p; q < 8; q++) JtJ[p * 8 + q] += jx[p] * jx[q] + jy[p] * jy[q];
            }
        }
        for (int p = 0; p < 8; p++)
            for (int q = 0; q < p; q++) JtJ[p * 8 + q] = JtJ[q * 8 + p];
        bool better = false; /* a step that lowers the cost, the damping raised until one does */
        for (int tries = 0; tries < 10 && !better; tries++) {
            double M[64], r[8], dx[8], h2[9];
            memcpy(M, JtJ, sizeof M);
            for (int p = 0; p < 8; p++) M[p * 8 + p] *= 1 + lambda, r[p] = -Jtr[p];
            double c2 = INFINITY;
            if (solve(M, r, 8, dx)) {
                for (int p = 0; p < 8; p++) h2[p] = h[p] + dx[p];
                h2[8] = 1;
                c2 = 0;
                for (int i = 0; i < n; i++) c2 += homography_err2(h2, pa[i], pb[i]);
            }
            if (c2 < cost) {
                converged = cost - c2 < 1e-12 * cost;
                memcpy(h, h2, sizeof h);
                cost = c2;
                lambda = lambda / 10 > 1e-12 ? lambda / 10 : 1e-12;
                better = true;
            } else {
                lambda *= 10;
            }
        }
        if (!better) break;
    }
    free(pa);
    free(pb);
    double Hn[9];
    mat3_mul(Tbi, h, Hn); /* H = Tb^-1 Hn Ta */
    mat3_mul(Hn, Ta, Hn);
    if (!(fabs(Hn[8]) > 1e-300)) return;
    for (int i = 0; i < 9; i++) Hn[i] /= Hn[8];
    for (int i = 0; i < 9; i++)
        if (!isfinite(Hn[i])) return;
    memcpy(H, Hn, sizeof Hn);
    H[8] = 1;
}

/* ------------------------------------------------------------ fundamental matrix */

/* The squared Sampson distance of (a, b) to F. */
static double sampson_err2(const double F[9], pt a, pt b) {
    const double fa0 = F[0] * a.x + F[1] * a.y + F[2], fa1 = F[3] * a.x + F[4] * a.y + F[5],
                 fa2 = F[6] * a.x + F[7] * a.y + F[8];
    const double fb0 = F[0] * b.x + F[3] * b.y + F[6], fb1 = F[1] * b.x + F[4] * b.y + F[7];
    const double e = b.x * fa0 + b.y * fa1 + fa2;
    const double den = fa0 * fa0 + fa1 * fa1 + fb0 * fb0 + fb1 * fb1;
    return den > 0 ? e * e / den : (e == 0 ? 0 : INFINITY);
}

/* F <- the nearest rank-2 matrix (Frobenius): the smallest singular value zeroed. */
static void rank2(double F[9]) {
    double FtF[9], w[3], V[9];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) FtF[i * 3 + j] = F[i] * F[j] + F[3 + i] * F[3 + j] + F[6 + i] * F[6 + j];
    jacobi_eigen(FtF, 3, w, V);
    int lo = 0;
    for (int i = 1; i < 3; i++)
        if (w[i] < w[lo]) lo = i;
    const double v[3] = {V[lo], V[3 + lo], V[6 + lo]};
    double G[9];
    for (int i = 0; i < 3; i++) {
        const double fv = F[i * 3] * v[0] + F[i * 3 + 1] * v[1] + F[i * 3 + 2] * v[2];
        for (int j = 0; j < 3; j++) G[i * 3 + j] = F[i * 3 + j] - fv * v[j];
    }
    memcpy(F, G, sizeof G);
}

static bool fundamental_scale(double F[9]) {
    double nrm = 0;
    for (int i = 0; i < 9; i++) nrm += F[i] * F[i];
    nrm = sqrt(nrm);
    if (!(nrm > 0) || !isfinite(nrm)) return false;
    const double s = fabs(F[8]) > 1e-10 * nrm ? F[8] : nrm;
    for (int i = 0; i < 9; i++) F[i] /= s;
    return true;
}

/* F from the matches idx[0..n) (n >= 8) by the normalised 8-point algorithm, each equation weighted by
 * wt[i] (NULL: 1); false for a degenerate set. */
static bool fundamental_8pt(const pt *a, const pt *b, const int *idx, int n, const double *wt, double F[9]) {
    double Ta[9], Tb[9];
    if (!normaliser(a, idx, n, Ta) || !normaliser(b, idx, n, Tb)) return false;
    double N[81] = {0};
    for (int i = 0; i < n; i++) {
        const pt p = apply_T(Ta, a[idx ? idx[i] : i]), q = apply_T(Tb, b[idx ? idx[i] : i]);
        const double r[9] = {q.x * p.x, q.x * p.y, q.x, q.y * p.x, q.y * p.y, q.y, p.x, p.y, 1};
        const double w = wt ? wt[i] : 1;
        for (int u = 0; u < 9; u++)
            for (int v = u; v < 9; v++) N[u * 9 + v] += w * r[u] * r[v];
    }
    for (int u = 0; u < 9; u++)
        for (int v = 0; v < u; v++) N[u * 9 + v] = N[v * 9 + u];
    double f[9], second;
    smallest_eigvec9(N, f, &second);
    if (!(second > 1e-14)) return false;
    rank2(f);
    double TbT[9] = {Tb[0], Tb[3], Tb[6], Tb[1], Tb[4], Tb[7], Tb[2], Tb[5], Tb[8]};
    mat3_mul(TbT, f, F); /* F = Tb^T Fn Ta */
    mat3_mul(F, Ta, F);
    return fundamental_scale(F);
}

/* Sampson-weighted 8-point iterations from F on the matches idx[0..n): each equation divided by its
 * Sampson denominator, which turns the algebraic error into the Sampson error. */
static void fundamental_refine(const pt *a, const pt *b, const int *idx, int n, double F[9]) {
    double *wt = malloc((size_t)n * sizeof *wt);
    if (!wt) return;
    for (int it = 0; it < 5; it++) {
        for (int i = 0; i < n; i++) {
            const pt p = a[idx[i]], q = b[idx[i]];
            const double fa0 = F[0] * p.x + F[1] * p.y + F[2], fa1 = F[3] * p.x + F[4] * p.y + F[5];
            const double fb0 = F[0] * q.x + F[3] * q.y + F[6], fb1 = F[1] * q.x + F[4] * q.y + F[7];
            const double den = fa0 * fa0 + fa1 * fa1 + fb0 * fb0 + fb1 * fb1;
            wt[i] = den > 0 && isfinite(den) ? 1 / den : 0;
        }
        /* the weights are those of the pixel equations: the normalised system's differ by a constant */
        double G[9];
        if (!fundamental_8pt(a, b, idx, n, wt, G)) break;
        memcpy(F, G, sizeof G);
    }
    free(wt);
}

/* ------------------------------------------------------------ RANSAC */

typedef struct problem {
    fl_geometry model;
    const pt *a, *b;
    int n, s;      /* matches, sample size */
    double thr2;   /* the threshold squared */
} problem;

static double model_err2(const problem *P, const double M[9], int i) {
    return P->model == FL_HOMOGRAPHY ? homography_err2(M, P->a[i], P->b[i]) : sampson_err2(M, P->a[i], P->b[i]);
}

/* Inliers of M into flags (may be NULL); their count, and the sum of their squared errors into *cost. */
static int count_inliers(const problem *P, const double M[9], unsigned char *flags, double *cost) {
    int k = 0;
    double c = 0;
    for (int i = 0; i < P->n; i++) {
        const double e = model_err2(P, M, i);
        const bool in = e < P->thr2;
        if (flags) flags[i] = in;
        if (in) k++, c += e;
    }
    if (cost) *cost = c;
    return k;
}

static bool fit(const problem *P, const int *idx, int n, double M[9]) {
    return P->model == FL_HOMOGRAPHY ? homography_dlt(P->a, P->b, idx, n, M)
                                     : fundamental_8pt(P->a, P->b, idx, n, NULL, M);
}

/* The sample of iteration t: s distinct indices from Philox(seed, t, k). */
static void draw(uint64_t seed, uint64_t t, int n, int s, int *out) {
    uint64_t k = 0;
    for (int j = 0; j < s;) {
        const int v = (int)(((uint64_t)fl_philox_u32(seed, t, k++) * (uint64_t)n) >> 32);
        bool dup = false;
        for (int q = 0; q < j; q++) dup |= out[q] == v;
        if (!dup) out[j++] = v;
    }
}

static double iterations_needed(double conf, double w, int s) {
    if (w >= 1) return 0;
    const double ws = pow(w, s);
    if (ws <= 0) return INFINITY;
    const double den = log1p(-ws);
    return den < 0 ? log1p(-conf) / den : INFINITY;
}

/* The refinement of the best model on its inliers: the model and flags replaced when the refined one has
 * as many inliers or more (up to 4 rounds while the set changes). */
static void refine(const problem *P, double M[9], unsigned char *flags, int *count, int *idx) {
    for (int round = 0; round < 4; round++) {
        int n = 0;
        for (int i = 0; i < P->n; i++)
            if (flags[i]) idx[n++] = i;
        if (n < P->s) return;
        double R[9];
        if (!fit(P, idx, n, R)) return;
        if (P->model == FL_HOMOGRAPHY) homography_lm(P->a, P->b, idx, n, R);
        else fundamental_refine(P->a, P->b, idx, n, R);
        unsigned char *nf = malloc((size_t)P->n);
        if (!nf) return;
        double c_old, c_new;
        count_inliers(P, M, NULL, &c_old);
        const int k = count_inliers(P, R, nf, &c_new);
        const bool same = k == *count && memcmp(nf, flags, (size_t)P->n) == 0;
        if (k > *count || (k == *count && c_new <= c_old)) {
            memcpy(M, R, sizeof R);
            memcpy(flags, nf, (size_t)P->n);
            *count = k;
        } else {
            free(nf);
            return;
        }
        free(nf);
        if (same) return;
    }
}

fl_status fl_find_geometry_(const fl_keypoints *a, const fl_keypoints *b, const fl_matches *m, double out[9],
                            int64_t *n_inliers, fl_ransac_args args) {
    const char *fn = "fl_find_geometry";
    if (n_inliers) *n_inliers = 0;
    if (!a || !b || !m || !out)
        return fl_error(FL_ERR_INVALID_ARG, "%s: %s is NULL", fn, !a ? "a" : !b ? "b" : !m ? "m (the matches)" : "out");
    if (args.model != FL_HOMOGRAPHY && args.model != FL_FUNDAMENTAL)
        return fl_error(FL_ERR_INVALID_ARG, "%s: model %d, expected FL_HOMOGRAPHY or FL_FUNDAMENTAL", fn,
                        (int)args.model);
    const char *what = args.model == FL_HOMOGRAPHY ? "a homography" : "a fundamental matrix";
    const int s = args.model == FL_HOMOGRAPHY ? 4 : 8;
    if (!(args.threshold >= 0) || isinf(args.threshold))
        return fl_error(FL_ERR_INVALID_ARG, "%s: threshold %g, expected a distance in pixels > 0 (0: the default)",
                        fn, (double)args.threshold);
    if (!(args.confidence >= 0 && args.confidence < 1))
        return fl_error(FL_ERR_INVALID_ARG, "%s: confidence %g, expected a value in (0, 1) (0: 0.995)", fn,
                        (double)args.confidence);
    if (args.max_iters < 0)
        return fl_error(FL_ERR_INVALID_ARG, "%s: max_iters %d, expected >= 1 (0: 2000)", fn, args.max_iters);
    if (m->n < 0 || (m->n > 0 && !m->data))
        return fl_error(FL_ERR_INVALID_ARG, "%s: the matches hold %lld entries and no data", fn, (long long)m->n);
    if (m->n < s)
        return fl_error(FL_ERR_INVALID_ARG, "%s: %lld match%s, %s needs at least %d", fn, (long long)m->n,
                        m->n == 1 ? "" : "es", what, s);
    if (m->n > INT32_MAX)
        return fl_error(FL_ERR_INVALID_ARG, "%s: %lld matches, at most %d", fn, (long long)m->n, INT32_MAX);
    if ((a->n > 0 && !a->data) || (b->n > 0 && !b->data))
        return fl_error(FL_ERR_INVALID_ARG, "%s: keypoints %s hold %lld entries and no data", fn, a->n > 0 && !a->data ? "a" : "b",
                        (long long)(a->n > 0 && !a->data ? a->n : b->n));
    const int n = (int)m->n;
    pt *pa = malloc((size_t)n * sizeof *pa), *pb = malloc((size_t)n * sizeof *pb);
    unsigned char *flags = malloc((size_t)n), *best_flags = malloc((size_t)n);
    int *idx = malloc((size_t)n * sizeof *idx);
    fl_status st = FL_OK;
    if (!pa || !pb || !flags || !best_flags || !idx) {
        st = fl_error(FL_ERR_NOMEM, "%s: out of memory for %d matches", fn, n);
        goto done;
    }
    for (int i = 0; i < n; i++) {
        const fl_match mt = m->data[i];
        if (mt.query < 0 || mt.query >= a->n || mt.train < 0 || mt.train >= b->n) {
            st = fl_error(FL_ERR_INVALID_ARG, "%s: match %d pairs keypoint %d of a (%lld keypoints) with %d of b (%lld), "
                          "expected indices inside both", fn, i, (int)mt.query, (long long)a->n, (int)mt.train,
                          (long long)b->n);
            goto done;
        }
        const fl_keypoint ka = a->data[mt.query], kb = b->data[mt.train];
        if (!isfinite(ka.x) || !isfinite(ka.y) || !isfinite(kb.x) || !isfinite(kb.y)) {
            st = fl_error(FL_ERR_INVALID_ARG, "%s: match %d: keypoint %s %d is at (%g, %g), expected finite coordinates",
                          fn, i, isfinite(ka.x) && isfinite(ka.y) ? "b" : "a",
                          isfinite(ka.x) && isfinite(ka.y) ? (int)mt.train : (int)mt.query,
                          isfinite(ka.x) && isfinite(ka.y) ? (double)kb.x : (double)ka.x,
                          isfinite(ka.x) && isfinite(ka.y) ? (double)kb.y : (double)ka.y);
            goto done;
        }
        pa[i] = (pt){ka.x, ka.y};
        pb[i] = (pt){kb.x, kb.y};
    }
    const double thr = args.threshold > 0 ? args.threshold : args.model == FL_HOMOGRAPHY ? 3.0 : 1.0;
    const double conf = args.confidence > 0 ? args.confidence : 0.995;
    const int max_iters = args.max_iters > 0 ? args.max_iters : 2000;
    const problem P = {.model = args.model, .a = pa, .b = pb, .n = n, .s = s, .thr2 = thr * thr};

    double best[9] = {0}, best_cost = INFINITY;
    int best_count = 0, degenerate = 0;
    double needed = max_iters;
    for (int t = 0; t < max_iters && t < needed; t++) {
        int sample[MAX_SAMPLE];
        double M[9];
        bool ok = false;
        for (int tries = 0; tries < MAX_DRAWS && !ok; tries++) {
            draw(args.seed, (uint64_t)t * MAX_DRAWS + (uint64_t)tries, n, s, sample);
            if (args.model == FL_HOMOGRAPHY && homography_sample_bad(pa, pb, sample)) continue;
            ok = fit(&P, sample, s, M);
        }
        if (!ok) {
            degenerate++;
            continue;
        }
        double cost;
        const int k = count_inliers(&P, M, flags, &cost);
        if (k > best_count || (k == best_count && k > 0 && cost < best_cost)) {
            best_count = k;
            best_cost = cost;
            memcpy(best, M, sizeof best);
            memcpy(best_flags, flags, (size_t)n);
            const double need = iterations_needed(conf, (double)k / n, s);
            if (need < needed) needed = need;
        }
    }
    if (best_count < s) {
        st = fl_error(FL_ERR_INVALID_ARG, "%s: no %s found among %d matches: %s", fn, what + 2, n,
                      best_count == 0 && degenerate > 0
                          ? "every sample was degenerate (collinear or coincident points)"
                          : "no model had as many inliers as its sample");
        goto done;
    }
    refine(&P, best, best_flags, &best_count, idx);
    memcpy(out, best, sizeof best);
    if (n_inliers) *n_inliers = best_count;
    if (args.inlier)
        for (int i = 0; i < n; i++) args.inlier[i] = best_flags[i];
done:
    free(pa);
    free(pb);
    free(flags);
    free(best_flags);
    free(idx);
    return st;
}
