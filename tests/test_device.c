/*
 * test_device.c — the GPU loader's pieces that can be checked without a GPU:
 * where it looks for cuBLAS/cuDNN (system, CUDA toolkit, pip wheels under a
 * virtualenv, $FLYNN_CUDA_LIB_PATH replacing all), the matmul precision
 * setting, and that a model stays usable on the CPU when the GPU is not.
 */
#include "check.h"

#include "core/device.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static bool listed(char dirs[][512], int n, const char *d) {
    for (int i = 0; i < n; i++)
        if (strcmp(dirs[i], d) == 0) return true;
    return false;
}

int main(void) {
    char tmp[] = "/tmp/flynn_dev_XXXXXX";
    CHECK(mkdtemp(tmp) != NULL);
    char wheel[512], cu13[512];
    snprintf(wheel, sizeof wheel, "%s/lib/python3.12/site-packages/nvidia/cudnn/lib", tmp);
    snprintf(cu13, sizeof cu13, "%s/lib/python3.12/site-packages/nvidia/cu13/lib", tmp);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' '%s'", wheel, cu13);
    CHECK(system(cmd) == 0);

    /* pip wheels in a virtualenv are searched, after the system's own search */
    setenv("VIRTUAL_ENV", tmp, 1);
    unsetenv("FLYNN_CUDA_LIB_PATH");
    char dirs[48][512];
    int n = fl_cuda_search_dirs(dirs, 48);
    CHECK(n >= 3);
    CHECK(dirs[0][0] == 0); /* "" = the system's search first */
    CHECK_MSG(listed(dirs, n, wheel), "the cuDNN wheel folder %s is not searched", wheel);
    CHECK_MSG(listed(dirs, n, cu13), "the CUDA 13 wheel folder %s is not searched", cu13);
    if (access("/usr/local/cuda/lib64", R_OK) == 0) CHECK(listed(dirs, n, "/usr/local/cuda/lib64"));

    /* FLYNN_CUDA_LIB_PATH replaces the whole search */
    setenv("FLYNN_CUDA_LIB_PATH", "/a:/b/c", 1);
    n = fl_cuda_search_dirs(dirs, 48);
    CHECK(n == 2 && strcmp(dirs[0], "/a") == 0 && strcmp(dirs[1], "/b/c") == 0);
    unsetenv("FLYNN_CUDA_LIB_PATH");

    /* precision */
    CHECK(strcmp(fl_get_matmul_precision(), "high") == 0); /* TensorFlow's default: TF32 */
    CHECK(fl_set_matmul_precision("highest") == FL_OK);
    CHECK(strcmp(fl_get_matmul_precision(), "highest") == 0);
    CHECK(fl_set_matmul_precision("medium") == FL_ERR_INVALID_ARG);
    CHECK_STR_CONTAINS(fl_last_error(), "'medium'");

    /* without a GPU: auto keeps the CPU and says why; gpu refuses */
    setenv("FLYNN_DISABLE_GPU", "1", 1);
    fl_model *m = fl_builtin_model("mlp", 28, 28, 1, 10);
    char why[2048];
    CHECK(fl_model_set_device(m, FL_DEVICE_AUTO, why, sizeof why) == FL_OK);
    CHECK_STR_CONTAINS(why, "GPU not used: FLYNN_DISABLE_GPU is set");
    CHECK(fl_model_device(m) == FL_DEVICE_CPU);
    CHECK(fl_model_set_device(m, FL_DEVICE_GPU, why, sizeof why) == FL_ERR_DEVICE);
    CHECK_STR_CONTAINS(fl_last_error(), "the GPU cannot be used: FLYNN_DISABLE_GPU is set");
    CHECK(fl_model_device(m) == FL_DEVICE_CPU);
    const fl_gpu_state *s = fl_gpu_state_get();
    CHECK(s->nchecks == 1 && s->checks[0].status == FL_GPU_FAIL && strcmp(s->checks[0].name, "enabled") == 0);
    CHECK(fl_model_set_device(m, FL_DEVICE_CPU, why, sizeof why) == FL_OK);
    CHECK_STR_CONTAINS(why, "device: CPU");
    fl_model_free(m);

    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    CHECK(system(cmd) == 0);
    return check_report("test_device");
}
