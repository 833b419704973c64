/*
 * test_threads_load.c — the CPU threads follow what other processes leave
 * idle (fl_num_threads_in_use; the rule itself is in test_omp_setup): with
 * two threads on two CPUs and one CPU-bound process beside them, training
 * goes on with one thread after about a second, and what it computes does
 * not change. A conv net with BatchNormalization trained that way ends with
 * the same weights, to the bit, as the same training in a quiet process:
 * its sums do not depend on how many threads run them (parts and blocks
 * fixed by the shape, docs/architecture.md).
 *
 * Needs two CPUs and no cgroup CPU quota (where the following is off);
 * skipped (77) otherwise. Other work on the machine only adds load, so the
 * drop to one thread holds under ctest -j too.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "check.h"
#include "backend/cpu/cpu_internal.h"

#include <flynn/flynn.h>

#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { N = 256, H = 16, C = 3, K = 4 };

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static fl_model *net(void) {
    fl_model *m = fl_sequential(fl_input(H, H, C), fl_conv2d(16, 3, .padding = FL_SAME, .activation = FL_RELU),
                                fl_batch_normalization(), fl_conv2d(16, 3, .padding = FL_SAME, .no_bias = true),
                                fl_batch_normalization(), fl_global_average_pooling2d(),
                                fl_dense(K, .activation = FL_SOFTMAX));
    fl_model_set_seed(m, 3);
    fl_compile(m, fl_adam(.learning_rate = 1e-3f), FL_SPARSE_CATEGORICAL_CROSSENTROPY, FL_ACCURACY);
    return m;
}

typedef struct watch {
    double until; /* stop after this time (0: never) */
    int least;    /* the fewest threads in use seen at an epoch's end */
    int epochs;
} watch;

static bool on_epoch(fl_model *m, int epoch, const fl_history *h, void *user) {
    (void)m, (void)h;
    watch *w = user;
    const int t = fl_num_threads_in_use();
    if (t < w->least) w->least = t;
    w->epochs = epoch + 1;
    return w->until == 0 || now() < w->until;
}

int main(void) {
    cpu_set_t set, two;
    if (sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) < 2) {
        printf("test_threads_load: skipped: fewer than 2 CPUs to run on\n");
        return 77;
    }
    if (fl_cpu_quota() > 0) {
        printf("test_threads_load: skipped: a cgroup CPU quota (the threads do not follow the load there)\n");
        return 77;
    }
    unsetenv("FLYNN_FOLLOW_LOAD");
    /* two CPUs, shared with the spinning child (it inherits them) */
    CPU_ZERO(&two);
    for (int c = 0, got = 0; c < CPU_SETSIZE && got < 2; c++)
        if (CPU_ISSET(c, &set)) CPU_SET(c, &two), got++;
    CHECK(sched_setaffinity(0, sizeof two, &two) == 0);
    fl_set_num_threads(2);
    CHECK(fl_num_threads_in_use() == 2 && fl_get_num_threads() == 2);

    fl_tensor *x = fl_tensor_zeros(FL_FLOAT32, N, H, H, C);
    fl_tensor *y = fl_tensor_zeros(FL_INT32, N);
    float *xv = fl_tensor_data(x);
    int32_t *yv = fl_tensor_data(y);
    uint64_t s = 12345;
    for (int64_t i = 0; i < (int64_t)N * H * H * C; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        xv[i] = (float)((double)(s >> 11) / 9007199254740992.0);
    }
    for (int i = 0; i < N; i++) yv[i] = (i * 7 + i / 5) % K;

    pid_t spin = fork();
    if (spin == 0) {
        volatile unsigned long long k = 0;
        for (;;) k++;
    }
    CHECK(spin > 0);
    /* about 3 s of training beside it: the threads look once a second */
    fl_model *busy = net();
    watch wb = {now() + 3.0, 2, 0};
    fl_history *hb = fl_fit(busy, x, y, .batch_size = 32, .epochs = 100000, .verbose = FL_VERBOSE_SILENT,
                            .on_epoch_end = on_epoch, .user = &wb);
    kill(spin, SIGKILL);
    waitpid(spin, NULL, 0);
    CHECK(hb != NULL);
    CHECK_MSG(wb.least == 1, "beside a CPU-bound process on 2 CPUs the threads in use stayed %d", wb.least);
    CHECK(fl_get_num_threads() == 2); /* the configured count is the user's */

    /* the same epochs alone: the same weights, bit for bit */
    fl_model *quiet = net();
    watch wq = {0, 2, 0};
    fl_history *hq = fl_fit(quiet, x, y, .batch_size = 32, .epochs = wb.epochs, .verbose = FL_VERBOSE_SILENT,
                            .on_epoch_end = on_epoch, .user = &wq);
    CHECK(hq != NULL && wq.epochs == wb.epochs);
    int differ = 0;
    for (int i = 0; i < fl_model_num_layers(busy); i++)
        for (int k = 0; k < fl_layer_num_weights(fl_model_layer(busy, i)); k++) {
            const fl_tensor *a = fl_layer_weight(fl_model_layer(busy, i), k);
            const fl_tensor *b = fl_layer_weight(fl_model_layer(quiet, i), k);
            if (memcmp(fl_tensor_cdata(a), fl_tensor_cdata(b), (size_t)fl_tensor_size(a) * sizeof(float)) != 0)
                differ++;
        }
    CHECK_MSG(differ == 0, "%d weights differ between the run whose threads followed the load and the quiet one",
              differ);
    printf("test_threads_load: %d epochs; fewest threads in use %d beside the CPU-bound process\n", wb.epochs,
           wb.least);
    fl_history_free(hb);
    fl_history_free(hq);
    fl_model_free(busy);
    fl_model_free(quiet);
    fl_tensor_free(x);
    fl_tensor_free(y);
    return check_report("test_threads_load");
}
