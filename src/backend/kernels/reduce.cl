/*
 * reduce.cl — deterministic column sums on the GPU, written once for CUDA and OpenCL (dialect.h): out[j] =
 * sum_r f(r, j) of a [rows, n] matrix in two stages, partial sums over `chunks` row chunks (a 32 x 8 block
 * per 32 columns and chunk), then the chunks in a fixed order; no atomics, so runs repeat to the bit. Used
 * for bias gradients, batch-norm statistics, the depthwise kernel's gradient and PReLU's alpha gradient.
 * FL_COLSUM_BODY(F) is the partial stage for the summand F (an expression in r and j); each summand is a
 * kernel of its own (OpenCL C has no templates).
 */

#define FL_COLSUM_CHUNKS 64 /* the most chunks, and the default */

#define FL_COLSUM_BODY(F)                                                                                           \
    FL_SHARED float sh_[8][33]; /* OpenCL: local memory only at the kernel's outer scope, so no braces here */    \
    const int j = (int)FL_BID * 32 + FL_TID;                                                                        \
    const int chunk = (int)FL_BIDY;                                                                                 \
    const int64_t r0 = rows * chunk / chunks, r1 = rows * (chunk + 1) / chunks;                                     \
    float s = 0;                                                                                                    \
    if (j < n)                                                                                                      \
        for (int64_t r = r0 + FL_TIDY; r < r1; r += 8) s += (F);                                                    \
    sh_[FL_TIDY][FL_TID] = s;                                                                                       \
    FL_SYNC();                                                                                                      \
    if (FL_TIDY == 0 && j < n) {                                                                                    \
        float t = 0;                                                                                                \
        for (int k = 0; k < 8; k++) t += sh_[k][FL_TID];                                                            \
        partial[(int64_t)chunk * n + j] = t;                                                                        \
    }

/* rows of x, ld floats apart */
FL_KERNEL k_colsum_rows(int64_t rows, int n, int chunks, FL_BUF(const float, x), int64_t ld, FL_BUF(float, partial)) {
    FL_BIND(const float, x);
    FL_BIND(float, partial);
    FL_COLSUM_BODY(x[r * ld + j])
}

/* the chunks' sums in order: out = sum (beta 0) or out += sum */
FL_KERNEL k_colsum_final(int n, int chunks, FL_BUF(const float, partial), FL_BUF(float, out), float beta) {
    FL_BIND(const float, partial);
    FL_BIND(float, out);
    const int j = (int)FL_BID * FL_BDIM + FL_TID;
    if (j >= n) return;
    float t = 0;
    for (int c = 0; c < chunks; c++) t += partial[(int64_t)c * n + j];
    out[j] = beta == 0.0f ? t : out[j] + t;
}
