/*
 * rnn_math.h — the per-unit formulas of the recurrent cells (SimpleRNN,
 * LSTM, GRU) for one step, forward and backward, written once for every
 * backend (FL_HD, as math.h): the CPU and CUDA orchestrations (GEMMs for
 * the projections, these for the gates) differ only in how they loop.
 * Shapes and gate orders: fl_rnn_desc in backend/backend.h.
 */
#ifndef FL_OPS_RNN_MATH_H
#define FL_OPS_RNN_MATH_H

#include "ops/math.h" /* (from src/: cl_embed expands it for OpenCL) */

/* The layout of the recurrent op's aux buffer, the same on every backend:
 * A (n, t, G*u) gate activations, DP and DR (n, t, G*u) pre-activation and
 * recurrent gradients, HP and CP (n, t, u) states, RH (n, t, u) GRU's saved
 * part, RG (n, G*u) one step's recurrent projection, then ST. The host's
 * view: a kernel takes each buffer as its own argument (OpenCL passes no
 * pointers inside a struct). */
#if !defined(__OPENCL_VERSION__)
typedef struct fl_rnn_bufs { float *A, *DP, *DR, *HP, *CP, *RH, *RG, *ST, *XS, *HM; } fl_rnn_bufs;

static inline fl_rnn_bufs fl_rnn_split(const fl_rnn_desc *d, float *aux) {
    const int64_t n = d->n, t = d->t, u = d->u, gu = (int64_t)fl_rnn_gates(d) * u;
    fl_rnn_bufs b;
    b.A = aux;
    b.DP = b.A + n * t * gu;
    b.DR = b.DP + n * t * gu;
    b.HP = b.DR + n * t * gu;
    b.CP = b.HP + n * t * u;
    b.RH = b.CP + n * t * u;
    b.RG = b.RH + n * t * u;
    b.ST = b.RG + n * gu;
    /* drop_scratch only: XS (n, t, max(d, u)) a masked copy of x or of the
     * states, HM (n, G*u) one step's masked states or their gradients */
    b.XS = b.ST + 3 * n * u;
    b.HM = b.XS + n * t * (d->d > u ? d->d : u);
    return b;
}
#endif

/* GRU with reset_after False runs each step in two phases around a second
 * GEMM ((r h') Rh); every other cell runs phase 0 only. */
enum { FL_RNN_PHASE_ALL = 0, FL_RNN_PHASE_ZR = 1, FL_RNN_PHASE_H = 2 };

/* Forward of unit j of one sample. a: the step's G*u input projections
 * (x W), overwritten with the gates' activations (LSTM i, f, g, o; GRU z,
 * r, hh; SimpleRNN h); rg: the recurrent projection h' R (GRU reset_after
 * False: only z and r in phase 1, Rh's product (r h') Rh in phase 2); bi,
 * br: input and recurrent bias (NULL: none); h0, c0: the state before the
 * step; m: the mask (0: carry the state over); *rh: GRU's saved recurrent
 * candidate part (reset_after: h' Rh + brh; else r h'); *hout, *cout: the
 * state after the step. The buffers are a kernel's (FL_G: OpenCL's global memory); *hout, *cout the
 * caller's own variables. */
FL_HD void fl_rnn_fwd_unit(const fl_rnn_desc *d, int phase, int j, FL_G float *a, const FL_G float *rg,
                           const FL_G float *bi, const FL_G float *br, float h0, float c0, float m, FL_G float *rh,
                           float *hout, float *cout) {
    const int u = d->u;
#define FL_RNN_BI_(k) (bi ? bi[k] : 0.0f)
#define FL_RNN_BR_(k) (br ? br[k] : 0.0f)
    float h, c = 0.0f;
    if (d->cell == FL_RNN_SIMPLE) {
        h = fl_act_forward(d->act, a[j] + FL_RNN_BI_(j) + rg[j]);
        a[j] = h;
    } else if (d->cell == FL_RNN_LSTM) {
        float i = fl_act_forward(d->ract, a[j] + FL_RNN_BI_(j) + rg[j]);
        float f = fl_act_forward(d->ract, a[u + j] + FL_RNN_BI_(u + j) + rg[u + j]);
        float g = fl_act_forward(d->act, a[2 * u + j] + FL_RNN_BI_(2 * u + j) + rg[2 * u + j]);
        float o = fl_act_forward(d->ract, a[3 * u + j] + FL_RNN_BI_(3 * u + j) + rg[3 * u + j]);
        c = f * c0 + i * g;
        h = o * fl_act_forward(d->act, c);
        a[j] = i; a[u + j] = f; a[2 * u + j] = g; a[3 * u + j] = o;
    } else {
        float z, hh;
        if (phase != FL_RNN_PHASE_H) {
            z = fl_act_forward(d->ract, a[j] + FL_RNN_BI_(j) + rg[j] + FL_RNN_BR_(j));
            float r = fl_act_forward(d->ract, a[u + j] + FL_RNN_BI_(u + j) + rg[u + j] + FL_RNN_BR_(u + j));
            a[j] = z; a[u + j] = r;
            if (phase == FL_RNN_PHASE_ZR) { *rh = r * h0; return; }
            float rec = rg[2 * u + j] + FL_RNN_BR_(2 * u + j);
            *rh = rec;
            hh = fl_act_forward(d->act, a[2 * u + j] + FL_RNN_BI_(2 * u + j) + r * rec);
        } else {
            z = a[j];
            hh = fl_act_forward(d->act, a[2 * u + j] + FL_RNN_BI_(2 * u + j) + rg[2 * u + j]);
        }
        a[2 * u + j] = hh;
        h = z * h0 + (1.0f - z) * hh;
    }
#undef FL_RNN_BI_
#undef FL_RNN_BR_
    int keep = m > 0.5f;
    *hout = keep ? h : h0;
    if (cout) *cout = keep ? c : c0;
}

/* Backward of unit j of one sample and step. a: the saved gates; rh, h0,
 * c0: as forward saved them; *dh, *dc: in, the gradient of the state after
 * the step; out, of the state before it (the part through h' R is added
 * by the caller's GEMM with dr). dp: the step's input pre-activation
 * gradients (G*u), dr: the recurrent ones (the same buffer except for
 * GRU reset_after, whose candidate part is scaled by r). GRU reset_after
 * False: phase 1 writes z's and hh's, phase 2 r's from drh = d(r h'). */
FL_HD void fl_rnn_bwd_unit(const fl_rnn_desc *d, int phase, int j, const FL_G float *a, float rh, float h0, float c0,
                           float m, FL_G float *dh, FL_G float *dc, FL_G float *dp, FL_G float *dr, float drh) {
    const int u = d->u;
    if (phase == FL_RNN_PHASE_H) { /* GRU reset_after False: r's part */
        float r = a[u + j];
        dp[u + j] = drh * h0 * fl_act_grad_y(d->ract, r);
        *dh += drh * r;
        return;
    }
    int keep = m > 0.5f;
    float dhn = keep ? *dh : 0.0f, carry = keep ? 0.0f : *dh;
    if (d->cell == FL_RNN_SIMPLE) {
        dp[j] = dhn * fl_act_grad_y(d->act, a[j]);
        *dh = carry;
    } else if (d->cell == FL_RNN_LSTM) {
        float i = a[j], f = a[u + j], g = a[2 * u + j], o = a[3 * u + j];
        float tc = fl_act_forward(d->act, f * c0 + i * g);
        float dcn = (keep ? *dc : 0.0f) + dhn * o * fl_act_grad_y(d->act, tc);
        dp[j] = dcn * g * fl_act_grad_y(d->ract, i);
        dp[u + j] = dcn * c0 * fl_act_grad_y(d->ract, f);
        dp[2 * u + j] = dcn * i * fl_act_grad_y(d->act, g);
        dp[3 * u + j] = dhn * tc * fl_act_grad_y(d->ract, o);
        *dc = dcn * f + (keep ? 0.0f : *dc);
        *dh = carry;
    } else {
        float z = a[j], r = a[u + j], hh = a[2 * u + j];
        float dz = dhn * (h0 - hh), dph = dhn * (1.0f - z) * fl_act_grad_y(d->act, hh);
        dp[j] = dz * fl_act_grad_y(d->ract, z);
        dp[2 * u + j] = dph;
        *dh = carry + dhn * z;
        if (phase == FL_RNN_PHASE_ALL) { /* reset_after */
            dp[u + j] = dph * rh * fl_act_grad_y(d->ract, r);
            dr[j] = dp[j];
            dr[u + j] = dp[u + j];
            dr[2 * u + j] = dph * r;
        }
    }
}

#endif
