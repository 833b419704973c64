/*
 * optim.cl — the optimizers' update and gradient clipping on the GPU, written once for CUDA and OpenCL
 * (dialect.h): the twins of cpu_optimizer_step and cpu_clip_gradients (backend/cpu/cpu_backend.c), with
 * ops/math.h's formulas (fl_sgd_update, fl_adam_update, fl_rmsprop_update, fl_clip_grad). CUDA runs every
 * tensor in one launch from a table of device pointers (cu_optim.cuh's dev_param), which OpenCL cannot
 * take (a device pointer there is no address a kernel can use); OpenCL launches once per tensor
 * (ocl_optim.c). Both run the bodies below: the element's update, the sums of squares of a chunk of a
 * tensor and of its chunks, and the sum over the tensors.
 */

/* Element i of one tensor: the update of w[i] from g[i] and the optimizer's slots (NULL where it has none:
 * SGD's momentum s0; Adam's m, v in s0, s1; RMSprop's v, momentum, mean gradient in s0, s1, s2), as
 * cpu_optimizer_step. lr: the step's rate; lr_t: Adam's, bias-corrected (fl_adam_lr_t). math.h's
 * formulas take pointers to the caller's own copies (OpenCL: private memory). */
FL_DEV void fl_opt_update(const fl_opt_desc *d, float lr, float lr_t, FL_G float *w, const FL_G float *g,
                          FL_G float *s0, FL_G float *s1, FL_G float *s2, int64_t i) {
    float wv = w[i];
    const float gv = g[i];
    if (d->code == FL_OPT_SGD) {
        float m = s0 ? s0[i] : 0.0f;
        fl_sgd_update(&wv, s0 ? &m : 0, gv, lr, d->momentum, d->nesterov);
        if (s0) s0[i] = m;
    } else if (d->code == FL_OPT_ADAM || d->code == FL_OPT_ADAMW) {
        if (d->code == FL_OPT_ADAMW) wv -= wv * d->weight_decay * lr;
        float m = s0[i], v = s1[i];
        fl_adam_update(&wv, &m, &v, gv, lr_t, d->beta1, d->beta2, d->eps);
        s0[i] = m;
        s1[i] = v;
    } else if (d->code == FL_OPT_RMSPROP) {
        float v = s0[i], m = s1 ? s1[i] : 0.0f, mg = s2 ? s2[i] : 0.0f;
        fl_rmsprop_update(&wv, &v, s1 ? &m : 0, s2 ? &mg : 0, gv, lr, d->rho, d->momentum, d->eps, d->centered);
        s0[i] = v;
        if (s1) s1[i] = m;
        if (s2) s2[i] = mg;
    }
    w[i] = wv;
}

/* The sums of squares for clipnorm and global_clipnorm, in a fixed order (docs/gpu.md: no atomics where
 * determinism is promised; float atomicAdd made clip_parity at 1e-5 a coin toss on a 70,000-element
 * tensor, issue 44). Each tensor is cut into chunks of FL_SUMSQ_CHUNK elements; a block of FL_SUMSQ_THREADS
 * sums one chunk, each thread a fixed stride of it in double, then a tree in shared memory; then the
 * chunks of a tensor are added in order. The same bits on every run, and within double rounding of the
 * exact sums (the CPU's sums in double, rounded to float: they differ by the order only).
 * FL_SUMSQ_BODY(g, i0, i1, out): *out = the sum of g[i] * g[i] over [i0, i1), by the whole block
 * (every thread must reach it: barriers), written by thread 0; FL_SUMSQ_SHARED declares its shared
 * memory at the kernel's outer scope (OpenCL allows no other place). */
#define FL_SUMSQ_SHARED FL_SHARED double sumsq_red_[FL_SUMSQ_THREADS]
#define FL_SUMSQ_BODY(g, i0, i1, out)                                                                                  \
    {                                                                                                                  \
        double acc_ = 0.0;                                                                                             \
        for (int64_t i_ = (i0) + FL_TID; i_ < (i1); i_ += FL_SUMSQ_THREADS) {                                          \
            const double v_ = (g)[i_];                                                                                 \
            acc_ += v_ * v_;                                                                                           \
        }                                                                                                              \
        sumsq_red_[FL_TID] = acc_;                                                                                     \
        FL_SYNC();                                                                                                     \
        for (int h_ = FL_SUMSQ_THREADS / 2; h_ > 0; h_ /= 2) {                                                         \
            if (FL_TID < h_) sumsq_red_[FL_TID] += sumsq_red_[FL_TID + h_];                                            \
            FL_SYNC();                                                                                                 \
        }                                                                                                              \
        if (FL_TID == 0) *(out) = sumsq_red_[0];                                                                       \
        FL_SYNC(); /* the tree is read before the next chunk writes it */                                              \
    }

/* a tensor's sum of squares: its nc chunks' partial sums, in order */
FL_DEV float fl_sumsq_chunks(const FL_G double *partial, int64_t nc) {
    double t = 0.0;
    for (int64_t c = 0; c < nc; c++) t += partial[c];
    return (float)t;
}

/* global_clipnorm's sum over the np tensors, in order and in float (cpu_clip_gradients') */
FL_DEV float fl_sumsq_total(const FL_G float *ss, int np) {
    float t = 0.0f;
    for (int k = 0; k < np; k++) t += ss[k];
    return t;
}

#if defined(__OPENCL_VERSION__)
/* OpenCL's kernels, one launch per tensor of n elements (CUDA's multi-tensor ones: cu_optim.cuh) */

FL_KERNEL k_opt_update(fl_opt_desc d, float lr_t, int64_t n, FL_BUF(float, w), FL_BUF(const float, g),
                       FL_BUF(float, s0), FL_BUF(float, s1), FL_BUF(float, s2)) {
    FL_BIND(float, w);
    FL_BIND(const float, g);
    FL_BIND(float, s0);
    FL_BIND(float, s1);
    FL_BIND(float, s2);
    FL_FOR(i, n) fl_opt_update(&d, d.lr, lr_t, w, g, s0, s1, s2, i);
}

/* partial[c] = the sum of squares of chunk c of g (groups of FL_SUMSQ_THREADS) */
FL_KERNEL k_sumsq_partial(int64_t n, FL_BUF(const float, g), FL_BUF(double, partial)) {
    FL_BIND(const float, g);
    FL_BIND(double, partial);
    FL_SUMSQ_SHARED;
    const int64_t nc = (n + FL_SUMSQ_CHUNK - 1) / FL_SUMSQ_CHUNK;
    for (int64_t c = FL_BID; c < nc; c += FL_GDIM) {
        const int64_t i0 = c * FL_SUMSQ_CHUNK, i1 = i0 + FL_SUMSQ_CHUNK < n ? i0 + FL_SUMSQ_CHUNK : n;
        FL_SUMSQ_BODY(g, i0, i1, partial + c)
    }
}

/* ss[0] = the tensor's sum of squares from its chunks' (one work-item) */
FL_KERNEL k_sumsq_final(int64_t n, FL_BUF(const double, partial), FL_BUF(float, ss)) {
    FL_BIND(const double, partial);
    FL_BIND(float, ss);
    if (FL_TID == 0) ss[0] = fl_sumsq_chunks(partial, (n + FL_SUMSQ_CHUNK - 1) / FL_SUMSQ_CHUNK);
}

/* ss[np] = the sum of ss[0, np) (global_clipnorm; one work-item) */
FL_KERNEL k_sumsq_total(int np, FL_BUF(float, ss)) {
    FL_BIND(float, ss);
    if (FL_TID == 0) ss[np] = fl_sumsq_total(ss, np);
}

/* g[i] clipped (fl_clip_grad) with the sum of squares sumsq[0] (clipnorm: the tensor's; global_clipnorm:
 * every tensor's; clipvalue: NULL) */
FL_KERNEL k_clip_tensor(int mode, float clip, FL_BUF(const float, sumsq), int64_t n, FL_BUF(float, g)) {
    FL_BIND(const float, sumsq);
    FL_BIND(float, g);
    const float s = sumsq ? sumsq[0] : 0.0f;
    FL_FOR(i, n) g[i] = fl_clip_grad(mode, clip, s, g[i]);
}
#endif
