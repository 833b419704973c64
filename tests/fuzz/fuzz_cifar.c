/*
 * fuzz_cifar.c — libFuzzer harness for the CIFAR-10 binary loader
 * (src/io/cifar.c). Input: one control byte, then the bytes of a batch file.
 * The bytes become data_batch_1.bin ... data_batch_5.bin and test_batch.bin
 * in a folder (control bit 4 clear) or in its cifar-10-batches-bin
 * subfolder (bit 4 set); max_train = control & 3, max_test =
 * (control >> 2) & 3 (0 = all).
 * Property: no crash, no leak; on success x is (N, 32, 32, 3) and y (N,)
 * with labels 0..9, N within max; on failure *out is all NULL.
 */
#include "fuzz.h"

static const char *const names[] = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                                    "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin"};

static void check_split(const fl_tensor *x, const fl_tensor *y, int64_t max) {
    if (!x || !y) fuzz_fail("fl_load_cifar10 returned FL_OK with a NULL tensor");
    int64_t n = fl_tensor_dim(x, 0);
    if (fl_tensor_ndim(x) != 4 || fl_tensor_dim(x, 1) != 32 || fl_tensor_dim(x, 2) != 32 || fl_tensor_dim(x, 3) != 3 ||
        fl_tensor_ndim(y) != 1 || fl_tensor_dim(y, 0) != n)
        fuzz_fail("fl_load_cifar10: wrong shapes");
    if (max > 0 && n > max) fuzz_fail("fl_load_cifar10: more records than max_train/max_test");
    const float *l = fl_tensor_cdata(y);
    for (int64_t i = 0; i < n; i++)
        if (!(l[i] >= 0 && l[i] <= 9)) fuzz_fail("fl_load_cifar10: a label outside 0..9");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    unsigned ctl = data[0];
    int64_t max_train = ctl & 3, max_test = (ctl >> 2) & 3;
    bool sub = ctl & 16;
    char top[600];
    memcpy(top, fuzz_mkdir(sub ? "c1" : "c0"), sizeof top);
    if (sub) fuzz_mkdir("c1/cifar-10-batches-bin");
    for (int i = 0; i < 6; i++) {
        char name[100];
        snprintf(name, sizeof name, "%s/%s", sub ? "c1/cifar-10-batches-bin" : "c0", names[i]);
        fuzz_file(name, data + 1, size - 1);
    }
    fl_dataset d;
    fl_status s = fl_load_cifar10(top, max_train, max_test, &d);
    if (s == FL_OK) {
        check_split(d.x_train, d.y_train, max_train);
        check_split(d.x_test, d.y_test, max_test);
    } else if (d.x_train || d.y_train || d.x_test || d.y_test) {
        fuzz_fail("fl_load_cifar10 failed but left tensors in *out");
    }
    fl_dataset_free(&d);
    return 0;
}
