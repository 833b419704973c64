/*
 * test_device.c — the GPU loader's pieces that can be checked without a GPU:
 * where it looks for cuBLAS/cuDNN (system, CUDA toolkit, pip wheels under a
 * virtualenv, activated or not, a conda env, ~/.local, the python3 on PATH;
 * $FLYNN_CUDA_LIB_PATH replacing all), the matmul precision
 * setting, and that a model stays usable on the CPU when the GPU is not.
 */
#include "check.h"

#include "device/gpu.h"

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

    /* environments that are not activated: ~/.venv, a conda env under
     * ~/miniconda3/envs, pip --user (~/.local), and the python3 on PATH */
    unsetenv("VIRTUAL_ENV");
    unsetenv("CONDA_PREFIX");
    char home[600], venv[700], conda[700], user[700], onpath[700], pybin[700];
    snprintf(home, sizeof home, "%s/home", tmp);
    snprintf(venv, sizeof venv, "%s/.venv/lib/python3.11/site-packages/nvidia/cublas/lib", home);
    snprintf(conda, sizeof conda, "%s/miniconda3/envs/torch/lib/python3.12/site-packages/nvidia/cudnn/lib", home);
    snprintf(user, sizeof user, "%s/.local/lib/python3.11/site-packages/nvidia/cu13/lib", home);
    snprintf(onpath, sizeof onpath, "%s/tool/lib/python3.10/site-packages/nvidia/cublas/lib", tmp);
    snprintf(pybin, sizeof pybin, "%s/tool/bin", tmp);
    char mk[6000];
    snprintf(mk, sizeof mk, "mkdir -p '%s' '%s' '%s' '%s' '%s' && touch '%s/python3' && chmod +x '%s/python3'", venv,
             conda, user, onpath, pybin, pybin, pybin);
    CHECK(system(mk) == 0);
    setenv("HOME", home, 1);
    char path[8192];
    snprintf(path, sizeof path, "%s:%s", pybin, getenv("PATH") ? getenv("PATH") : "/usr/bin");
    setenv("PATH", path, 1);
    n = fl_cuda_search_dirs(dirs, 48);
    CHECK_MSG(listed(dirs, n, venv), "the ~/.venv wheel folder %s is not searched", venv);
    CHECK_MSG(listed(dirs, n, conda), "the conda env wheel folder %s is not searched", conda);
    CHECK_MSG(listed(dirs, n, user), "the pip --user wheel folder %s is not searched", user);
    CHECK_MSG(listed(dirs, n, onpath), "the wheels of the python3 on PATH (%s) are not searched", onpath);
    /* the python3 on PATH comes before the environments that are not activated */
    int i_path = -1, i_venv = -1;
    for (int i = 0; i < n; i++) {
        if (strcmp(dirs[i], onpath) == 0) i_path = i;
        if (strcmp(dirs[i], venv) == 0) i_venv = i;
    }
    CHECK(i_path >= 0 && i_venv >= 0 && i_path < i_venv);

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

    /* threads: $OMP_NUM_THREADS is the default when it is a positive
     * integer (or a list: its first entry); fl_set_num_threads(n > 0) wins */
    unsetenv("OMP_NUM_THREADS");
    fl_set_num_threads(0);
    const int all_cores = fl_get_num_threads();
    CHECK(all_cores >= 1);
    setenv("OMP_NUM_THREADS", "3", 1);
    fl_set_num_threads(0);
    CHECK_MSG(fl_get_num_threads() == 3, "OMP_NUM_THREADS=3 gave %d threads", fl_get_num_threads());
    fl_set_num_threads(5);
    CHECK_MSG(fl_get_num_threads() == 5, "fl_set_num_threads(5) under OMP_NUM_THREADS=3 gave %d", fl_get_num_threads());
    setenv("OMP_NUM_THREADS", "7,2", 1);
    fl_set_num_threads(0);
    CHECK_MSG(fl_get_num_threads() == 7, "OMP_NUM_THREADS=7,2 gave %d threads", fl_get_num_threads());
    const char *invalid[] = {"0", "-2", "abc", "", "3x"};
    for (int i = 0; i < 5; i++) {
        setenv("OMP_NUM_THREADS", invalid[i], 1);
        fl_set_num_threads(0);
        CHECK_MSG(fl_get_num_threads() == all_cores, "OMP_NUM_THREADS='%s' (invalid) gave %d threads, not all %d cores",
                  invalid[i], fl_get_num_threads(), all_cores);
    }
    unsetenv("OMP_NUM_THREADS");
    fl_set_num_threads(0);

    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    CHECK(system(cmd) == 0);
    return check_report("test_device");
}
