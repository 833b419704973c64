/*
 * npy_close.c — a test tool for the shell tests: do two .npy files hold the
 * same shape and values within |a - b| <= atol + rtol |b|?
 *     npy_close GOT.npy WANT.npy RTOL ATOL
 * Exit 0 (and the worst error) when they do, 1 with the first element that
 * does not, 2 on a usage or file error. Reads through flynn's own loader, so
 * the shell tests need no NumPy.
 */
#include "flynn/flynn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: npy_close GOT.npy WANT.npy RTOL ATOL\n");
        return 2;
    }
    fl_tensor *a = fl_load_npy(argv[1]), *b = fl_load_npy(argv[2]);
    fl_tensor *fa = a ? fl_to_float(a, 1.0f) : NULL, *fb = b ? fl_to_float(b, 1.0f) : NULL;
    if (!fa || !fb) {
        fprintf(stderr, "npy_close: %s\n", fl_last_error());
        return 2;
    }
    double rtol = atof(argv[3]), atol = atof(argv[4]);
    int rc = 0;
    char sa[128], sb[128];
    bool same = fl_tensor_ndim(fa) == fl_tensor_ndim(fb);
    for (int d = 0; same && d < fl_tensor_ndim(fa); d++) same = fl_tensor_dim(fa, d) == fl_tensor_dim(fb, d);
    if (!same) {
        printf("npy_close: shapes differ: %s %s, %s %s\n", argv[1], fl_tensor_shape_str(fa, sa, sizeof sa), argv[2],
               fl_tensor_shape_str(fb, sb, sizeof sb));
        rc = 1;
    } else {
        const float *x = fl_tensor_data(fa), *y = fl_tensor_data(fb);
        double worst = 0;
        for (int64_t i = 0; i < fl_tensor_size(fa); i++) {
            double e = fabs((double)x[i] - (double)y[i]);
            if (!(e <= atol + rtol * fabs((double)y[i]))) {
                printf("npy_close: element %lld: %s has %.9g, %s has %.9g\n", (long long)i, argv[1], (double)x[i],
                       argv[2], (double)y[i]);
                rc = 1;
                break;
            }
            if (e > worst) worst = e;
        }
        if (rc == 0) printf("npy_close: %lld values agree, worst |error| %.3g\n", (long long)fl_tensor_size(fa), worst);
    }
    fl_tensor_free(a);
    fl_tensor_free(b);
    fl_tensor_free(fa);
    fl_tensor_free(fb);
    return rc;
}
