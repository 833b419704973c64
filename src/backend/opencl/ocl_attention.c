/*
 * ocl_attention.c — the OpenCL backend's entries for attention: the batched GEMMs of the (batch, head) blocks
 * (CLBlast), the masked softmax of the weights and the Attention layer's learned score scales
 * (kernels/attention.cl, which CUDA compiles too). attn_fwd_blocked and attn_bwd_blocked, optional, stay NULL:
 * the op then runs the same steps through gemm_batched and the softmax (src/ops/attention.c).
 */
#include "backend/opencl/opencl_internal.h"

#include <clblast_c.h>
#include <stdio.h>
#include <stdlib.h>

/* fl_gemm_desc's blocks i = o * ninner + j at X + o * sX[0] + j * sX[1]: one CLBlastSgemmBatched call with
 * each block's offset (every block of one operand lies in the same allocation, so in one buffer). The offset
 * arrays are kept between calls. */
static size_t *g_offs;
static float *g_ab;
static size_t g_cap;

static void be_gemm_batched(const fl_gemm_desc *d, const float *a, const float *b, float *c) {
    const size_t total = (size_t)d->nouter * (size_t)d->ninner;
    if (!total || !d->m || !d->n || ocl_failed()) return;
    size_t ao, bo, co;
    cl_mem A = ocl_buf(a, &ao), B = ocl_buf(b, &bo), C = ocl_buf(c, &co);
    if (!A || !B || !C) return;
    if (total > g_cap) {
        size_t *o = realloc(g_offs, 3 * total * sizeof *o);
        if (o) g_offs = o;
        float *ab = o ? realloc(g_ab, 2 * total * sizeof *ab) : NULL;
        if (ab) g_ab = ab;
        if (!o || !ab) {
            ocl_ok(CL_OUT_OF_HOST_MEMORY, "CLBlastSgemmBatched", "(its offsets)");
            return;
        }
        g_cap = total;
    }
    size_t *oa = g_offs, *ob = g_offs + total, *oc = g_offs + 2 * total;
    float *alphas = g_ab, *betas = g_ab + total;
    for (size_t i = 0; i < total; i++) {
        const int64_t o = (int64_t)(i / (size_t)d->ninner), j = (int64_t)(i % (size_t)d->ninner);
        oa[i] = ao / 4 + (size_t)(o * d->sa[0] + j * d->sa[1]);
        ob[i] = bo / 4 + (size_t)(o * d->sb[0] + j * d->sb[1]);
        oc[i] = co / 4 + (size_t)(o * d->sc[0] + j * d->sc[1]);
        alphas[i] = d->alpha;
        betas[i] = d->beta;
    }
    CLBlastStatusCode s = CLBlastSgemmBatched(CLBlastLayoutRowMajor, d->ta ? CLBlastTransposeYes : CLBlastTransposeNo,
                                              d->tb ? CLBlastTransposeYes : CLBlastTransposeNo, (size_t)d->m,
                                              (size_t)d->n, (size_t)d->k, alphas, A, oa, (size_t)d->lda, B, ob,
                                              (size_t)d->ldb, betas, C, oc, (size_t)d->ldc, total, &ocl_queue, NULL);
    if (s != CLBlastSuccess && !ocl_failed()) {
        char what[160];
        snprintf(what, sizeof what, "(%d x %d x %d, %zu blocks): CLBlast status %d", d->m, d->n, d->k, total, (int)s);
        ocl_ok((cl_int)(s < 0 && s > -100 ? s : CL_OUT_OF_RESOURCES), "CLBlastSgemmBatched", what);
    }
}

static void be_attn_softmax_fwd(const fl_attn_desc *d, const float *qmask, const float *vmask, const float *amask,
                                float *s) {
    ocl_launch l = ocl_args(OCL_k_attn_softmax_fwd);
    ocl_arg_raw(&l, d, sizeof *d); BUF(l, qmask); BUF(l, vmask); BUF(l, amask); BUF(l, s);
    ocl_run_rows(&l, d->n * d->heads * d->tq);
}

static void be_attn_softmax_bwd(const fl_attn_desc *d, const float *qmask, const float *vmask, const float *amask,
                                const float *p, float *dp) {
    ocl_launch l = ocl_args(OCL_k_attn_softmax_bwd);
    ocl_arg_raw(&l, d, sizeof *d); BUF(l, qmask); BUF(l, vmask); BUF(l, amask); BUF(l, p); BUF(l, dp);
    ocl_run_rows(&l, d->n * d->heads * d->tq);
}

static void be_scalar_mul_fwd(int64_t n, const float *x, const float *s, float *y) {
    ocl_launch l = ocl_args(OCL_k_scalar_mul_fwd);
    ocl_arg_i64(&l, n); BUF(l, x); BUF(l, s); BUF(l, y);
    ocl_run1(&l, n, 256);
}

/* ds first (dx may be dy): one work-group of 256 sums in a fixed order */
static void be_scalar_mul_bwd(int64_t n, const float *x, const float *s, const float *dy, float *dx, float dx_beta,
                              float *ds) {
    if (ds) {
        ocl_launch l = ocl_args(OCL_k_dot_sum);
        ocl_arg_i64(&l, n); BUF(l, dy); BUF(l, x); BUF(l, ds);
        ocl_run1(&l, 256, 256);
    }
    if (dx) {
        ocl_launch l = ocl_args(OCL_k_scalar_mul_dx);
        ocl_arg_i64(&l, n); BUF(l, s); BUF(l, dy); BUF(l, dx); ocl_arg_f32(&l, dx_beta);
        ocl_run1(&l, n, 256);
    }
}

static void be_attn_concat_fwd(const fl_attn_desc *d, const float *q, const float *k, const float *scale, float *s) {
    ocl_launch l = ocl_args(OCL_k_attn_concat_fwd);
    ocl_arg_raw(&l, d, sizeof *d); BUF(l, q); BUF(l, k); BUF(l, scale); BUF(l, s);
    ocl_run1(&l, d->n * d->tq * (int64_t)d->tk, 256);
}

static void be_attn_concat_bwd(const fl_attn_desc *d, const float *q, const float *k, const float *scale,
                               const float *ds, int which, float *dst, float beta, float *dscale) {
    if (dst) {
        ocl_launch l = ocl_args(OCL_k_attn_concat_bwd);
        ocl_arg_raw(&l, d, sizeof *d); BUF(l, q); BUF(l, k); BUF(l, scale); BUF(l, ds); ocl_arg_i32(&l, which);
        BUF(l, dst); ocl_arg_f32(&l, beta);
        ocl_run1(&l, d->n * (int64_t)(which ? d->tk : d->tq) * d->dk, 256);
    }
    if (dscale && scale) {
        ocl_launch l = ocl_args(OCL_k_attn_concat_dscale);
        ocl_arg_raw(&l, d, sizeof *d); BUF(l, q); BUF(l, k); BUF(l, scale); BUF(l, ds); BUF(l, dscale);
        ocl_run1(&l, 256, 256);
    }
}

void ocl_fill_attention(fl_backend *b) {
    b->gemm_batched = be_gemm_batched;
    b->attn_softmax_fwd = be_attn_softmax_fwd;
    b->attn_softmax_bwd = be_attn_softmax_bwd;
    b->scalar_mul_fwd = be_scalar_mul_fwd;
    b->scalar_mul_bwd = be_scalar_mul_bwd;
    b->attn_concat_fwd = be_attn_concat_fwd;
    b->attn_concat_bwd = be_attn_concat_bwd;
}
