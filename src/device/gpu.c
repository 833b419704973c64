/*
 * gpu.c — finding out whether the GPU can be used, and loading the CUDA
 * backend, without linking CUDA. The checks run in the order a person would
 * debug an install and stop at the first failure, which becomes the one-line
 * reason that `--device auto` prints and `--device gpu` fails with:
 *
 *   1. not disabled ($FLYNN_DISABLE_GPU)
 *   2. an NVIDIA driver: the Linux kernel driver (/proc/driver/nvidia/version,
 *      /dev/nvidia*) or WSL2's (/dev/dxg); in a container without either,
 *      the docker remedy (--gpus all)
 *   3. libcuda.so.1 loads (system search, /usr/lib/wsl/lib, ...) and tells
 *      the CUDA version the driver supports
 *   4. the plugin: the newest installed one the driver supports
 *      (libflynn_cuda.so, CUDA 13, driver >= 580; libflynn_cuda12.so,
 *      CUDA 12, driver >= 525), and the cuBLAS and cuDNN of its CUDA major
 *      (system and toolkit paths, pip wheels in any Python environment,
 *      $FLYNN_CUDA_LIB_PATH replacing the search), loaded by absolute path;
 *      an older plugin is taken when the newer one's libraries are missing
 *   5. that plugin loads ($FLYNN_CUDA_PLUGIN names one file instead)
 *   6. the plugin finds a device it can run on and sets up cuBLAS/cuDNN
 *
 * The result is computed once per process (the backend registry).
 * Test hooks: $FLYNN_NVIDIA_PROC replaces /proc/driver/nvidia/version (and
 * skips /dev/nvidia*, /dev/dxg and the container checks), $FLYNN_LIBCUDA
 * replaces libcuda.so.1,
 * $FLYNN_TEST_ROOT prefixes every fixed path (see test_root()).
 */
#include "gpu.h"
#include "core/error.h"
#include "backend/cuda/plugin.h"

#include <dlfcn.h>
#include <glob.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static bool g_done = false;
static fl_gpu_state g_state;
/* -1: not set (the plugin applies $FLYNN_MATMUL_PRECISION, default high) */
static int g_tf32_choice = -1;

static void add_check(fl_gpu_state *s, const char *name, int status, const char *remedy, const char *fmt, ...)
    FL_PRINTF(5, 6);
static void add_check(fl_gpu_state *s, const char *name, int status, const char *remedy, const char *fmt, ...) {
    if (s->nchecks >= FL_GPU_MAX_CHECKS) return;
    fl_gpu_check *c = &s->checks[s->nchecks++];
    snprintf(c->name, sizeof c->name, "%s", name);
    c->status = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->detail, sizeof c->detail, fmt, ap);
    va_end(ap);
    snprintf(c->remedy, sizeof c->remedy, "%s", remedy ? remedy : "");
}

/* The first failed check is the reason. */
static void fail(fl_gpu_state *s, const char *name, const char *remedy, const char *fmt, ...) FL_PRINTF(4, 5);
static void fail(fl_gpu_state *s, const char *name, const char *remedy, const char *fmt, ...) {
    char detail[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    add_check(s, name, FL_GPU_FAIL, remedy, "%s", detail);
    snprintf(s->reason, sizeof s->reason, "%s%s%s", detail, remedy && *remedy ? ": " : "", remedy ? remedy : "");
}

/* ------------------------------------------------------ library search */

/* Test hook: $FLYNN_TEST_ROOT is put in front of every fixed path the checks
 * look at (/proc, /dev, /usr/lib/wsl/lib, /.dockerenv, /usr/local/cuda, ...),
 * and the system's own library search is skipped, so that a test arranges a
 * WSL2 machine or a container in a temporary folder. Not for users. */
static const char *test_root(void) {
    const char *r = getenv("FLYNN_TEST_ROOT");
    return r && *r ? r : NULL;
}

static void rooted(char *out, size_t len, const char *path) {
    const char *r = test_root();
    snprintf(out, len, "%s%s", r ? r : "", path);
}

static bool rooted_exists(const char *path) {
    char p[1024];
    rooted(p, sizeof p, path);
    return access(p, F_OK) == 0;
}

static int add_dir(char dirs[][512], int n, int max, const char *d) {
    if (n >= max || access(d, R_OK) != 0) return n;
    for (int i = 0; i < n; i++)
        if (strcmp(dirs[i], d) == 0) return n;
    snprintf(dirs[n], 512, "%s", d);
    return n + 1;
}

static int add_glob(char dirs[][512], int n, int max, const char *pattern) {
    glob_t g;
    if (glob(pattern, GLOB_ONLYDIR, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++) n = add_dir(dirs, n, max, g.gl_pathv[i]);
        globfree(&g);
    }
    return n;
}

/* pip wheels under one Python prefix (a virtualenv, a conda environment,
 * /usr/local, ~/.local): site-packages/nvidia/<lib>/lib, where the CUDA 12
 * wheels put them (nvidia/cublas/lib, nvidia/cudnn/lib), and
 * site-packages/nvidia/cu13/lib, where the CUDA 13 ones do. */
static int add_python_prefix(char dirs[][512], int n, int max, const char *prefix) {
    if (!prefix || !*prefix) return n;
    char pat[1024];
    snprintf(pat, sizeof pat, "%.900s/lib/python3*/*-packages/nvidia/cu1[2-9]/lib", prefix);
    n = add_glob(dirs, n, max, pat);
    snprintf(pat, sizeof pat, "%.900s/lib/python3*/*-packages/nvidia/*/lib", prefix);
    return add_glob(dirs, n, max, pat);
}

/* The prefix of the first python3 on $PATH (a virtualenv's bin/python3 is
 * a link to the system's: its prefix is the folder above bin, unresolved). */
static bool path_python_prefix(char *out, size_t len) {
    const char *path = getenv("PATH");
    if (!path) return false;
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *save = NULL, *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        char exe[1024];
        snprintf(exe, sizeof exe, "%.1000s/python3", d);
        if (access(exe, X_OK) != 0) continue;
        snprintf(out, len, "%s", d);
        char *slash = strrchr(out, '/');
        if (!slash || strcmp(slash, "/bin") != 0) return false;
        *slash = 0;
        if (!out[0]) snprintf(out, len, "/");
        return true;
    }
    return false;
}

/* Where CUDA libraries are looked for, in order. "" stands for the
 * system's own search (LD_LIBRARY_PATH, the ld.so cache). The file names
 * carry the CUDA major (libcublas.so.12, .13); cuDNN's do not, so the loader
 * asks each libcudnn.so.9 which CUDA it is built for. */
int fl_cuda_search_dirs(char dirs[][512], int max) {
    int n = 0;
    const char *over = getenv("FLYNN_CUDA_LIB_PATH");
    if (over && *over) {
        char buf[4096];
        snprintf(buf, sizeof buf, "%s", over);
        for (char *save = NULL, *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save))
            if (n < max) snprintf(dirs[n++], 512, "%s", d);
        return n;
    }
    if (!test_root()) snprintf(dirs[n++], 512, "%s", "");
    char p[1024];
    /* the CUDA toolkit */
    static const char *const toolkit[] = {"/usr/local/cuda/lib64", "/usr/local/cuda/lib",
                                          "/usr/local/cuda/targets/x86_64-linux/lib",
                                          "/usr/local/cuda-1[2-9]*/lib64", "/usr/local/cuda-1[2-9]*/lib",
                                          "/usr/local/cuda-1[2-9]*/targets/x86_64-linux/lib",
                                          "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/aarch64-linux-gnu"};
    for (size_t i = 0; i < sizeof toolkit / sizeof toolkit[0]; i++) {
        rooted(p, sizeof p, toolkit[i]);
        n = add_glob(dirs, n, max, p);
    }
    /* pip wheels: the active environment first, then the python3 on PATH,
     * then environments that are not activated */
    n = add_python_prefix(dirs, n, max, getenv("VIRTUAL_ENV"));
    n = add_python_prefix(dirs, n, max, getenv("CONDA_PREFIX"));
    char py[1024];
    if (path_python_prefix(py, sizeof py)) n = add_python_prefix(dirs, n, max, py);
    const char *home = getenv("HOME");
    static const char *const in_home[] = {"/.local", "/.venv", "/venv", "/.virtualenvs/*", "/miniconda3",
                                          "/miniconda3/envs/*", "/anaconda3", "/anaconda3/envs/*", "/miniforge3",
                                          "/miniforge3/envs/*", "/mambaforge", "/mambaforge/envs/*"};
    char pat[1024];
    for (size_t i = 0; home && *home && i < sizeof in_home / sizeof in_home[0]; i++) {
        snprintf(pat, sizeof pat, "%.900s%s", home, in_home[i]);
        glob_t g;
        if (glob(pat, GLOB_ONLYDIR, NULL, &g) == 0) {
            for (size_t k = 0; k < g.gl_pathc; k++) n = add_python_prefix(dirs, n, max, g.gl_pathv[k]);
            globfree(&g);
        }
    }
    static const char *const common[] = {"/usr/local", "/usr", "/opt/conda", "/opt/conda/envs/*", "/opt/*/.venv",
                                         "/opt/*/venv", "/opt/*"};
    for (size_t i = 0; i < sizeof common / sizeof common[0]; i++) {
        rooted(pat, sizeof pat, common[i]);
        glob_t g;
        if (glob(pat, GLOB_ONLYDIR, NULL, &g) == 0) {
            for (size_t k = 0; k < g.gl_pathc; k++) n = add_python_prefix(dirs, n, max, g.gl_pathv[k]);
            globfree(&g);
        }
    }
    return n;
}

static void dirs_list(char dirs[][512], int n, char *out, size_t len) {
    size_t o = 0;
    out[0] = 0;
    for (int i = 0; i < n && o + 4 < len; i++)
        o += (size_t)snprintf(out + o, len - o, "%s%s", i ? ", " : "", dirs[i][0] ? dirs[i] : "the system library path");
    if (n == 0) snprintf(out, len, "no folder");
}

/* The file a handle was loaded from (found through one of its symbols). */
static void handle_file(void *h, const char *sym, const char *fallback, char *out, size_t len) {
    void *p = dlsym(h, sym);
    Dl_info info;
    if (p && dladdr(p, &info) && info.dli_fname) snprintf(out, len, "%s", info.dli_fname);
    else snprintf(out, len, "%s", fallback);
}

static void dir_of(const char *file, char *out, size_t len) {
    snprintf(out, len, "%s", file);
    char *slash = strrchr(out, '/');
    if (slash) *slash = 0;
    else out[0] = 0;
}

/* The folder of the file that holds this code (libflynn.so, or the program
 * it is linked into): the plugins are installed next to it. */
void fl_plugin_dir(char *out, size_t len) {
    Dl_info info;
    out[0] = 0;
    if (dladdr((void *)&fl_gpu_probe, &info) && info.dli_fname) {
        snprintf(out, len, "%s", info.dli_fname);
        char *slash = strrchr(out, '/');
        if (slash) *slash = 0;
        else snprintf(out, len, ".");
        /* "prefix/bin/../lib" (through the RUNPATH $ORIGIN/../lib) as "prefix/lib" */
        char *real = realpath(out, NULL);
        if (real) {
            snprintf(out, len, "%s", real);
            free(real);
        }
    }
}

int fl_plugin_host_error(int status, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return (int)fl_error((fl_status)status, "%s", msg);
}

const fl_cuda_plugin_kind fl_cuda_plugins[] = {
    {13, "libflynn_cuda.so", 580, 75},   /* CUDA 13 dropped Maxwell, Pascal and Volta */
    {12, "libflynn_cuda12.so", 525, 60},
};
const int fl_cuda_plugin_count = (int)(sizeof fl_cuda_plugins / sizeof fl_cuda_plugins[0]);

/* ------------------------------------------------- the machine's driver */

/* Whether this process's root filesystem is a block device's (the mount namespace, /proc/self/mountinfo):
 * 1 for a root on /dev/... other than docker's device-mapper volumes, as a virtual machine's or a bare
 * machine's; 0 for an overlay, a docker volume, or anything else a container engine mounts; -1 where it
 * cannot be read. */
static int root_on_block_device(void) {
    char p[1024], line[2048];
    rooted(p, sizeof p, "/proc/self/mountinfo");
    FILE *f = fopen(p, "r");
    if (!f) return -1;
    int r = -1;
    while (fgets(line, sizeof line, f)) {
        /* id parent major:minor root mountpoint options [optional...] - fstype source superoptions */
        char root[512], mnt[512];
        if (sscanf(line, "%*s %*s %*s %511s %511s", root, mnt) != 2 || strcmp(mnt, "/") != 0) continue;
        const char *sep = strstr(line, " - ");
        char fstype[64] = "", source[512] = "";
        if (!sep || sscanf(sep + 3, "%63s %511s", fstype, source) < 1) continue;
        r = strncmp(source, "/dev/", 5) == 0 && !strstr(source, "docker") && strcmp(fstype, "overlay") != 0;
    }
    fclose(f);
    return r;
}

/* A container: podman's /run/.containerenv, systemd's /run/systemd/container, the first process's control
 * groups (kubernetes, docker, podman, containerd, lxc), or docker's /.dockerenv where the mount namespace
 * agrees. /.dockerenv alone is weak: a disk image made from a docker image keeps it, and a virtual machine
 * booted from one (root on /dev/vda) said "no NVIDIA GPU is visible in this container" and advised
 * `docker run --gpus all` (issue 43). */
static void detect_container(char *out, size_t len) {
    out[0] = 0;
    if (rooted_exists("/run/.containerenv")) { snprintf(out, len, "podman"); return; }
    if (rooted_exists("/run/systemd/container")) { snprintf(out, len, "container"); return; }
    if (rooted_exists("/.dockerenv") && root_on_block_device() != 1) { snprintf(out, len, "docker"); return; }
    char p[1024], line[512];
    rooted(p, sizeof p, "/proc/1/cgroup");
    FILE *f = fopen(p, "r");
    if (!f) return;
    static const char *const kinds[][2] = {{"kubepods", "kubernetes"}, {"docker", "docker"}, {"libpod", "podman"},
                                           {"containerd", "containerd"}, {"lxc", "lxc"}};
    while (!out[0] && fgets(line, sizeof line, f))
        for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
            if (strstr(line, kinds[i][0])) { snprintf(out, len, "%s", kinds[i][1]); break; }
    fclose(f);
}

static const char *docker_remedy(const char *container) {
    (void)container;
    return "start the container with the GPU passed through: `docker run --gpus all ...` (podman: `--device "
           "nvidia.com/gpu=all`), which needs the NVIDIA Container Toolkit on the host; the image needs no CUDA toolkit";
}

/* libcuda.so.1: the system's search, then where drivers put it (WSL2's
 * /usr/lib/wsl/lib, Debian's nvidia/current, the container toolkit's
 * /usr/local/nvidia/lib64). */
static void *open_libcuda(char *name, size_t len, char *err, size_t elen) {
    const char *lc = getenv("FLYNN_LIBCUDA");
    err[0] = 0;
    if (lc && *lc) {
        snprintf(name, len, "%s", lc);
        void *h = dlopen(lc, RTLD_NOW | RTLD_GLOBAL);
        if (!h) snprintf(err, elen, "%s", dlerror());
        return h;
    }
    if (!test_root()) {
        void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
        if (h) { snprintf(name, len, "libcuda.so.1"); return h; }
        snprintf(err, elen, "%s", dlerror());
    }
    static const char *const places[] = {"/usr/lib/wsl/lib/libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
                                         "/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.1",
                                         "/usr/lib64/libcuda.so.1", "/usr/local/nvidia/lib64/libcuda.so.1",
                                         "/usr/lib/aarch64-linux-gnu/libcuda.so.1"};
    for (size_t i = 0; i < sizeof places / sizeof places[0]; i++) {
        char p[1024];
        rooted(p, sizeof p, places[i]);
        if (access(p, F_OK) != 0) continue;
        void *h = dlopen(p, RTLD_NOW | RTLD_GLOBAL);
        if (h) { snprintf(name, len, "%s", p); return h; }
        snprintf(err, elen, "%s", dlerror());
    }
    snprintf(name, len, "libcuda.so.1");
    if (!err[0]) snprintf(err, elen, "libcuda.so.1: not found in the system library path nor in /usr/lib/wsl/lib");
    return NULL;
}

/* ------------------------------------------------ cuBLAS and cuDNN */

/* The CUDA major a plugin file is built with: libflynn_cuda<NN>.so says it
 * in its name; libflynn_cuda.so is the newest. */
static int plugin_major_of(const char *path) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    for (int i = 0; i < fl_cuda_plugin_count; i++)
        if (strcmp(base, fl_cuda_plugins[i].file) == 0) return fl_cuda_plugins[i].cuda_major;
    const char *c = strstr(base, "cuda");
    if (c && c[4] >= '1' && c[4] <= '9') return atoi(c + 4);
    return fl_cuda_plugins[0].cuda_major;
}

static int min_cc_for(int major) {
    for (int i = 0; i < fl_cuda_plugin_count; i++)
        if (fl_cuda_plugins[i].cuda_major == major) return fl_cuda_plugins[i].min_cc;
    return 0;
}

/* The compute capability of the device flynn will use ($FLYNN_CUDA_DEVICE,
 * else 0), asked of the driver itself, so that a card the newest plugin has
 * no code for gets an older plugin; 0 when the driver does not say. */
static int driver_device_cc(void *cuda) {
    int (*init)(unsigned) = (int (*)(unsigned))dlsym(cuda, "cuInit");
    int (*get)(int *, int) = (int (*)(int *, int))dlsym(cuda, "cuDeviceGet");
    int (*attr)(int *, int, int) = (int (*)(int *, int, int))dlsym(cuda, "cuDeviceGetAttribute");
    if (!init || !get || !attr || init(0) != 0) return 0;
    const char *dv = getenv("FLYNN_CUDA_DEVICE");
    int dev = 0, ordinal = dv && *dv ? atoi(dv) : 0, major = 0, minor = 0;
    /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75, _MINOR = 76 */
    if (get(&dev, ordinal) != 0 || attr(&major, 75, dev) != 0 || attr(&minor, 76, dev) != 0) return 0;
    return major * 10 + minor;
}

static int min_driver_for(int major) {
    for (int i = 0; i < fl_cuda_plugin_count; i++)
        if (fl_cuda_plugins[i].cuda_major == major) return fl_cuda_plugins[i].min_driver;
    return 0;
}

typedef struct libs_found {
    char cublas[1024], cudnn[1024];
    int cublas_version;
    size_t cudnn_version, cudnn_cudart;
    char failed[16];        /* "cublas" or "cudnn" */
    char detail[1536], remedy[512];
} libs_found;

/* cuBLAS for CUDA `major`: libcublasLt.so.<major>, then libcublas.so.<major>,
 * from the first folder that has them, loaded by absolute path (global, so
 * that the plugin's own NEEDED entries resolve to them). */
static bool load_cublas(int major, char dirs[][512], int nd, libs_found *L) {
    char lt[64], bl[64];
    snprintf(lt, sizeof lt, "libcublasLt.so.%d", major);
    snprintf(bl, sizeof bl, "libcublas.so.%d", major);
    for (int i = 0; i < nd; i++) {
        char p1[1024], p2[1024];
        if (dirs[i][0]) {
            snprintf(p1, sizeof p1, "%.511s/%s", dirs[i], lt);
            snprintf(p2, sizeof p2, "%.511s/%s", dirs[i], bl);
            if (access(p2, F_OK) != 0) continue;
        } else {
            snprintf(p1, sizeof p1, "%s", lt);
            snprintf(p2, sizeof p2, "%s", bl);
        }
        void *h1 = dlopen(p1, RTLD_NOW | RTLD_GLOBAL);
        void *h2 = h1 ? dlopen(p2, RTLD_NOW | RTLD_GLOBAL) : NULL;
        if (!h2) continue;
        handle_file(h2, "cublasGetVersion_v2", p2, L->cublas, sizeof L->cublas);
        int (*ver)(void *, int *) = (int (*)(void *, int *))dlsym(h2, "cublasGetVersion_v2");
        L->cublas_version = 0;
        if (ver) ver(NULL, &L->cublas_version);
        return true;
    }
    char list[2048];
    dirs_list(dirs, nd, list, sizeof list);
    snprintf(L->failed, sizeof L->failed, "cublas");
    snprintf(L->detail, sizeof L->detail, "%s (cuBLAS for CUDA %d) not found (searched %.1400s)", lt, major, list);
    snprintf(L->remedy, sizeof L->remedy,
             "install cuBLAS for CUDA %d (pip install %s; or, with NVIDIA's apt repository, apt install libcublas-%d-x), "
             "or point FLYNN_CUDA_LIB_PATH at the folder that holds it",
             major, major >= 13 ? "nvidia-cublas" : "nvidia-cublas-cu12", major);
    return false;
}

/* cuDNN 9 for CUDA `major`. Every CUDA major's cuDNN 9 is libcudnn.so.9, so
 * each candidate is opened on its own first and asked which CUDA it is built
 * for (cudnnGetCudartVersion); the libraries of the first match are then
 * loaded from its folder by absolute path. */
static bool load_cudnn(int major, char dirs[][512], int nd, libs_found *L) {
    static const struct { const char *name; bool required; } parts[] = {
        {"libcudnn_graph.so.9", true}, {"libcudnn_ops.so.9", true}, {"libcudnn_cnn.so.9", true},
        {"libcudnn_heuristic.so.9", true}, {"libcudnn_engines_precompiled.so.9", true},
        {"libcudnn_engines_runtime_compiled.so.9", false}, {"libcudnn.so.9", true},
    };
    char other[1200] = "";
    for (int i = 0; i < nd; i++) {
        char key[1024], dir[1024];
        if (dirs[i][0]) {
            snprintf(key, sizeof key, "%.511s/libcudnn.so.9", dirs[i]);
            if (access(key, F_OK) != 0) continue;
        } else snprintf(key, sizeof key, "libcudnn.so.9");
        void *probe = dlopen(key, RTLD_NOW | RTLD_LOCAL);
        if (!probe) continue;
        char file[1024];
        handle_file(probe, "cudnnGetVersion", key, file, sizeof file);
        size_t (*cudart)(void) = (size_t (*)(void))dlsym(probe, "cudnnGetCudartVersion");
        size_t (*ver)(void) = (size_t (*)(void))dlsym(probe, "cudnnGetVersion");
        size_t built = cudart ? cudart() : 0, v = ver ? ver() : 0;
        dlclose(probe);
        if (built / 1000 != (size_t)major) {
            if (!other[0])
                snprintf(other, sizeof other, "; %s is cuDNN %zu.%zu for CUDA %zu.%zu, not %d", file, v / 10000,
                         (v % 10000) / 100, built / 1000, (built % 1000) / 10, major);
            continue;
        }
        dir_of(file, dir, sizeof dir);
        bool ok = true;
        for (size_t k = 0; k < sizeof parts / sizeof parts[0] && ok; k++) {
            char p[1200];
            if (dir[0]) snprintf(p, sizeof p, "%s/%s", dir, parts[k].name);
            else snprintf(p, sizeof p, "%s", parts[k].name);
            void *h = dlopen(p, RTLD_NOW | RTLD_GLOBAL);
            if (!h && parts[k].required) {
                snprintf(L->failed, sizeof L->failed, "cudnn");
                snprintf(L->detail, sizeof L->detail, "%s (cuDNN) not found next to %s (%s)", parts[k].name, file,
                         dlerror());
                snprintf(L->remedy, sizeof L->remedy,
                         "reinstall cuDNN 9 for CUDA %d (pip install nvidia-cudnn-cu%d): the folder %.380s is incomplete",
                         major, major, dir);
                return false;
            }
        }
        snprintf(L->cudnn, sizeof L->cudnn, "%s", file);
        L->cudnn_version = v;
        L->cudnn_cudart = built;
        return true;
    }
    char list[2048];
    dirs_list(dirs, nd, list, sizeof list);
    snprintf(L->failed, sizeof L->failed, "cudnn");
    snprintf(L->detail, sizeof L->detail, "libcudnn.so.9 (cuDNN 9 for CUDA %d) not found (searched %.1000s)%.400s", major,
             list, other);
    snprintf(L->remedy, sizeof L->remedy,
             "install cuDNN 9 for CUDA %d (pip install nvidia-cudnn-cu%d; or apt install cudnn9-cuda-%d from NVIDIA's "
             "repository), or point FLYNN_CUDA_LIB_PATH at the folder that holds it",
             major, major, major);
    return false;
}

/* The doctor's checks, in order, as a table (issue 45: one 330-line function): each check adds its line to
 * s (add_check, fail) and returns false where it failed and the later ones cannot run. What a check finds
 * for the next ones is in check_ctx. */
typedef struct cand { int major, min_driver; bool present; char path[1024]; } cand_t;
typedef struct check_ctx {
    fl_gpu_state *s;
    const char *pl;                /* FLYNN_CUDA_PLUGIN */
    void *cuda;                    /* libcuda.so.1 */
    char lcname[1024];
    int drv;                       /* the CUDA version the driver supports, 13000 for 13.0 */
    cand_t cand[8];                /* the plugins that could run, and which fit the driver (pick) */
    int nc, pick[8], no;
    bool any_present;
    char cc_note[256];
    char dirs[96][512];            /* where cuBLAS and cuDNN are searched */
    int nd;
    libs_found L;
    int chosen;                    /* the plugin taken: an index into cand */
    void *plugin;
    char path[1024];
    fl_cuda_plugin_open_fn open_fn;
    fl_cuda_tools_fn tools;
} check_ctx;

/* 1: FLYNN_DISABLE_GPU */
static bool check_enabled(check_ctx *c) {
    fl_gpu_state *s = c->s;
    const char *off = getenv("FLYNN_DISABLE_GPU");
    if (off && *off && strcmp(off, "0") != 0) {
        fail(s, "enabled", "unset FLYNN_DISABLE_GPU to use the GPU", "FLYNN_DISABLE_GPU is set");
        return false;
    }
    add_check(s, "enabled", FL_GPU_PASS, NULL, "FLYNN_DISABLE_GPU is not set");

    return true;
}

/* 2: the kernel driver */
static bool check_driver(check_ctx *c) {
    fl_gpu_state *s = c->s;
    /* 2: the kernel driver: native (/proc/driver/nvidia, /dev/nvidia*) or
     * WSL2's (/dev/dxg, the Windows driver) */
    const char *proc = getenv("FLYNN_NVIDIA_PROC");
    if (!(proc && *proc)) detect_container(s->container, sizeof s->container);
    char pfile[1024];
    if (proc && *proc) snprintf(pfile, sizeof pfile, "%s", proc);
    else rooted(pfile, sizeof pfile, "/proc/driver/nvidia/version");
    char line[256] = "";
    FILE *f = fopen(pfile, "r");
    if (f) {
        if (!fgets(line, sizeof line, f)) line[0] = 0;
        fclose(f);
        line[strcspn(line, "\n")] = 0;
    }
    bool hooked = proc && *proc;
    bool dev = !hooked && (rooted_exists("/dev/nvidiactl") || rooted_exists("/dev/nvidia0"));
    bool dxg = !hooked && rooted_exists("/dev/dxg");
    const char *km = strstr(line, "Kernel Module");
    if (km) {
        km += strlen("Kernel Module");
        while (*km == ' ' || *km == '\t') km++;
        snprintf(s->driver_module, sizeof s->driver_module, "%.*s", (int)strcspn(km, " \t"), km);
    }
    if (!f && !dev && !dxg) {
        char pv[1024], ver[256] = "";
        rooted(pv, sizeof pv, "/proc/version");
        FILE *v = hooked ? NULL : fopen(pv, "r");
        if (v) {
            if (!fgets(ver, sizeof ver, v)) ver[0] = 0;
            fclose(v);
        }
        if (s->container[0])
            fail(s, "driver", docker_remedy(s->container),
                 "no NVIDIA GPU is visible in this container (%s: %s, /dev/nvidia* and /dev/dxg are missing)",
                 s->container, pfile);
        else if (strstr(ver, "icrosoft") || strstr(ver, "WSL"))
            fail(s, "driver",
                 "under WSL the GPU comes from the NVIDIA driver installed on Windows: install or update it there "
                 "(not a Linux driver inside WSL), run `wsl --update`, and use WSL 2 (`wsl --set-version <distro> 2`)",
                 "WSL without a GPU: /dev/dxg is missing");
        else
            fail(s, "driver",
                 "if this machine has an NVIDIA GPU, install its driver, version 580 or newer (525 or newer is enough "
                 "for flynn's CUDA 12 plugin; Debian: apt install nvidia-driver; check with nvidia-smi); without one, "
                 "flynn trains on the CPU and there is nothing to fix",
                 "no NVIDIA driver is loaded (%s and /dev/nvidia* are missing)", pfile);
        return false;
    }
    snprintf(s->driver_kind, sizeof s->driver_kind, "%s", f || dev ? "native" : "wsl2");
    char where_ctr[96] = "";
    if (s->container[0]) snprintf(where_ctr, sizeof where_ctr, ", in a %s container", s->container);
    if (f || dev)
        add_check(s, "driver", FL_GPU_PASS, NULL, "NVIDIA kernel driver loaded (%s)%s",
                  km ? strstr(line, "Kernel Module") : (f ? pfile : "/dev/nvidia* present"), where_ctr);
    else
        add_check(s, "driver", FL_GPU_PASS, NULL, "WSL2: the Windows NVIDIA driver, through /dev/dxg%s", where_ctr);

    return true;
}

/* 3: libcuda.so.1 */
static bool check_libcuda(check_ctx *c) {
    fl_gpu_state *s = c->s;
    char *lcname = c->lcname;
    /* 3: libcuda.so.1 and the CUDA version it supports */
    char lcerr[768];
    void *cuda = c->cuda = open_libcuda(lcname, sizeof c->lcname, lcerr, sizeof lcerr);
    if (!cuda) {
        char remedy[512];
        if (strcmp(s->driver_kind, "wsl2") == 0)
            snprintf(remedy, sizeof remedy, "WSL2 takes libcuda.so.1 from the Windows NVIDIA driver "
                     "(/usr/lib/wsl/lib): install or update that driver on Windows, then `wsl --shutdown`; do not "
                     "install a Linux NVIDIA driver inside WSL (/dev/dxg is there for any GPU: without an NVIDIA one, "
                     "flynn trains on the CPU and there is nothing to fix)");
        else if (s->container[0])
            snprintf(remedy, sizeof remedy, "the container has the GPU's device files but not the driver's "
                     "libcuda.so.1: %s", docker_remedy(s->container));
        else
            snprintf(remedy, sizeof remedy, "the driver's user-space library is missing: reinstall the NVIDIA driver "
                     "(or, in a container, run it with the NVIDIA container toolkit)");
        fail(s, "libcuda", remedy, "%s cannot be loaded (%s)", lcname, lcerr);
        return false;
    }
    int (*get_ver)(int *) = (int (*)(int *))dlsym(cuda, "cuDriverGetVersion");
    int drv = 0;
    if (!get_ver || get_ver(&drv) != 0 || drv <= 0) {
        fail(s, "libcuda", "reinstall the NVIDIA driver", "%s does not report a CUDA version (cuDriverGetVersion failed)",
             lcname);
        return false;
    }
    s->driver_cuda = c->drv = drv;
    {
        Dl_info info;
        const char *file = dladdr((void *)get_ver, &info) && info.dli_fname ? info.dli_fname : lcname;
        snprintf(s->libcuda_file, sizeof s->libcuda_file, "%s", file);
        add_check(s, "libcuda", FL_GPU_PASS, NULL, "%s%s%s%s", file, s->driver_module[0] ? " (driver " : "",
                  s->driver_module, s->driver_module[0] ? ")" : "");
    }

    return true;
}

/* 4: the plugins that fit the driver and the device */
static bool check_plugin_fit(check_ctx *c) {
    fl_gpu_state *s = c->s;
    cand_t *cand = c->cand;
    int *pick = c->pick;
    const int drv = c->drv;
    void *cuda = c->cuda;
    char *cc_note = c->cc_note;
    /* 4: the plugin the driver supports, and its cuBLAS and cuDNN. The
     * newest plugin installed that the driver supports is taken, unless its
     * libraries are missing and an older plugin's are there. */
    int nc = 0;
    const char *pl = c->pl = getenv("FLYNN_CUDA_PLUGIN");
    char pdir[1024];
    const char *pde = getenv("FLYNN_CUDA_PLUGIN_DIR");
    if (pde && *pde) snprintf(pdir, sizeof pdir, "%s", pde);
    else fl_plugin_dir(pdir, sizeof pdir);
    if (pl && *pl) {
        cand[0].major = plugin_major_of(pl);
        cand[0].min_driver = min_driver_for(cand[0].major);
        cand[0].present = access(pl, F_OK) == 0;
        snprintf(cand[0].path, sizeof cand[0].path, "%s", pl);
        nc = 1;
    } else
        for (int i = 0; i < fl_cuda_plugin_count && nc < 8; i++, nc++) {
            cand[nc].major = fl_cuda_plugins[i].cuda_major;
            cand[nc].min_driver = fl_cuda_plugins[i].min_driver;
            snprintf(cand[nc].path, sizeof cand[nc].path, "%.900s/%s", pdir, fl_cuda_plugins[i].file);
            cand[nc].present = access(cand[nc].path, F_OK) == 0;
        }
    bool any_present = false;
    for (int i = 0; i < nc; i++) any_present |= cand[i].present;
    int no = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < nc; i++)
            if (cand[i].major <= drv / 1000 && (pass == 0 ? cand[i].present : !cand[i].present && !any_present))
                pick[no++] = i;
    const int dmaj = drv / 1000, dmin = (drv % 1000) / 10;
    /* a card older than a plugin's oldest architecture goes to an older
     * plugin that has code for it, when one is installed */
    s->device_cc = driver_device_cc(cuda);
    if (s->device_cc > 0 && no > 1) {
        int keep = 0;
        for (int k = 0; k < no; k++)
            if (s->device_cc >= min_cc_for(cand[pick[k]].major)) keep++;
        if (keep > 0) {
            int w = 0;
            for (int k = 0; k < no; k++) {
                const int m = cand[pick[k]].major, need = min_cc_for(m);
                if (s->device_cc >= need) pick[w++] = pick[k];
                else if (!cc_note[0])
                    snprintf(cc_note, sizeof c->cc_note, "; the CUDA %d plugin has no code for compute capability %d.%d "
                             "(it starts at %d.%d)", m, s->device_cc / 10, s->device_cc % 10, need / 10, need % 10);
            }
            no = w;
        }
    }
    if (no == 0) {
        char need[512] = "", absent[256] = "";
        size_t o = 0;
        int listed = 0, nlist = 0;
        for (int i = 0; i < nc; i++) nlist += cand[i].present || !any_present;
        for (int i = 0; i < nc && o < sizeof need; i++) {
            if (!cand[i].present && any_present) {
                if (cand[i].major <= dmaj && !absent[0])
                    snprintf(absent, sizeof absent, "; its CUDA %d plugin (driver %d or newer) would fit, but it is "
                             "not installed", cand[i].major, cand[i].min_driver);
                continue;
            }
            o += (size_t)snprintf(need + o, sizeof need - o, "%sCUDA %d (driver %d or newer)",
                                  listed ? (listed == nlist - 1 ? " or " : ", ") : "", cand[i].major,
                                  cand[i].min_driver);
            listed++;
        }
        bool too_old = true;
        for (int i = 0; i < nc; i++) too_old &= cand[i].major > dmaj;
        char remedy[512];
        if (too_old)
            snprintf(remedy, sizeof remedy, "update the NVIDIA driver to version %d or newer (CUDA %d, flynn's newest "
                     "plugin); the GPU is fine, only the driver is too old", cand[0].min_driver, cand[0].major);
        else
            snprintf(remedy, sizeof remedy, "update the NVIDIA driver to version %d or newer, or use a flynn built "
                     "with its CUDA %d plugin (scripts/setup.sh --cuda12, then rebuild), which runs on drivers %d and "
                     "newer", cand[0].min_driver, dmaj, min_driver_for(dmaj) ? min_driver_for(dmaj) : 525);
        fail(s, "driver_version", remedy, "the NVIDIA driver supports CUDA %d.%d; flynn's GPU plugin%s need%s %s%s",
             dmaj, dmin, nlist > 1 ? "s" : "", nlist > 1 ? "" : "s", need, absent);
        return false;
    }
    c->nc = nc;
    c->no = no;
    c->any_present = any_present;
    return true;
}

/* 5: cuBLAS and cuDNN for the newest plugin that fits, or an older one whose are there */
static bool check_libraries(check_ctx *c) {
    fl_gpu_state *s = c->s;
    const cand_t *cand = c->cand;
    const int *pick = c->pick, no = c->no, nc = c->nc, drv = c->drv;
    const int dmaj = drv / 1000, dmin = (drv % 1000) / 10;
    const char *cc_note = c->cc_note;
    char (*dirs)[512] = c->dirs;
    int nd = c->nd = fl_cuda_search_dirs(dirs, 96);
    libs_found L, first;
    memset(&first, 0, sizeof first);
    int chosen = -1;
    char skipped[768] = "", older[512] = "";
    for (int k = 0; k < no && chosen < 0; k++) {
        memset(&L, 0, sizeof L);
        bool ok = load_cublas(cand[pick[k]].major, dirs, nd, &L) && load_cudnn(cand[pick[k]].major, dirs, nd, &L);
        if (ok) chosen = pick[k];
        else {
            if (k == 0) first = L;
            else {
                size_t o = strlen(older);
                snprintf(older + o, sizeof older - o, "%sthe CUDA %d plugin's %s is missing too", o ? "; " : "",
                         cand[pick[k]].major, strcmp(L.failed, "cublas") == 0 ? "cuBLAS" : "cuDNN");
            }
            size_t o = strlen(skipped);
            snprintf(skipped + o, sizeof skipped - o, "%sthe CUDA %d plugin's %s is missing", o ? "; " : "",
                     cand[pick[k]].major, strcmp(L.failed, "cublas") == 0 ? "cuBLAS" : "cuDNN");
        }
    }
    if (chosen < 0) {
        char detail[1536];
        snprintf(detail, sizeof detail, "%s", first.detail);
        if (older[0]) {
            size_t o = strlen(detail);
            snprintf(detail + o, sizeof detail - o, " (%s)", older);
        }
        /* what passed before the failure */
        add_check(s, "driver_version", FL_GPU_PASS, NULL, "the driver supports CUDA %d.%d: the CUDA %d plugin fits",
                  dmaj, dmin, cand[pick[0]].major);
        fail(s, first.failed, first.remedy, "%s", detail);
        return false;
    }
    c->chosen = chosen;
    const cand_t *C = &cand[chosen];
    s->plugin_cuda = C->major;
    s->cublas_found = L.cublas_version;
    s->cudnn_found = L.cudnn_version;
    s->cudnn_cudart = L.cudnn_cudart;
    {
        char why[512] = "";
        for (int i = 0; i < nc; i++)
            if (cand[i].major > C->major && cand[i].present && cand[i].major > dmaj) {
                snprintf(why, sizeof why, "; the CUDA %d plugin needs driver %d or newer", cand[i].major,
                         cand[i].min_driver);
                break;
            }
        if (cc_note[0]) snprintf(why, sizeof why, "%s", cc_note);
        if (skipped[0]) snprintf(why, sizeof why, "; %.500s", skipped);
        snprintf(s->plugin_choice, sizeof s->plugin_choice, "the driver supports CUDA %d.%d: taking the CUDA %d plugin%s",
                 dmaj, dmin, C->major, why);
        if (skipped[0]) snprintf(s->plugin_choice_short, sizeof s->plugin_choice_short, "%.250s", skipped);
        else if (cc_note[0]) snprintf(s->plugin_choice_short, sizeof s->plugin_choice_short, "compute capability "
                                      "%d.%d", s->device_cc / 10, s->device_cc % 10);
        else if (why[0]) snprintf(s->plugin_choice_short, sizeof s->plugin_choice_short, "the driver is older than "
                                  "CUDA %d", C->major + 1);
        else snprintf(s->plugin_choice_short, sizeof s->plugin_choice_short, "the newest plugin installed");
    }
    add_check(s, "driver_version", FL_GPU_PASS, NULL, "%s", s->plugin_choice);
    snprintf(s->cublas_file, sizeof s->cublas_file, "%s", L.cublas);
    snprintf(s->cudnn_file, sizeof s->cudnn_file, "%s", L.cudnn);
    add_check(s, "cublas", FL_GPU_PASS, NULL, "cuBLAS %d.%d.%d for CUDA %d: %s", L.cublas_version / 10000,
              (L.cublas_version % 10000) / 100, L.cublas_version % 100, C->major, L.cublas);
    add_check(s, "cudnn", FL_GPU_PASS, NULL, "cuDNN %zu.%zu.%zu for CUDA %zu.%zu: %s", L.cudnn_version / 10000,
              (L.cudnn_version % 10000) / 100, L.cudnn_version % 100, L.cudnn_cudart / 1000,
              (L.cudnn_cudart % 1000) / 10, L.cudnn);
    {
        char nv[32];
        snprintf(nv, sizeof nv, "libnvrtc.so.%d", C->major); /* optional: cuDNN's runtime-compiled engines */
        for (int i = 0; i < nd; i++) {
            char p[1024];
            if (dirs[i][0]) snprintf(p, sizeof p, "%.511s/%s", dirs[i], nv);
            else snprintf(p, sizeof p, "%s", nv);
            if ((!dirs[i][0] || access(p, F_OK) == 0) && dlopen(p, RTLD_NOW | RTLD_GLOBAL)) break;
        }
    }

    c->L = L;
    return true;
}

/* 6: the plugin's file */
static bool check_plugin(check_ctx *c) {
    fl_gpu_state *s = c->s;
    const cand_t *C = &c->cand[c->chosen];
    const char *pl = c->pl;
    char *path = c->path;
    /* 5: the plugin */
    void *plugin = NULL;
    char err1[768] = "";
    snprintf(path, sizeof c->path, "%s", C->path);
    plugin = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!plugin) {
        snprintf(err1, sizeof err1, "%s", dlerror());
        if (!(pl && *pl) && !test_root()) {
            const char *base = strrchr(C->path, '/') ? strrchr(C->path, '/') + 1 : C->path;
            plugin = dlopen(base, RTLD_NOW | RTLD_LOCAL);
            if (plugin) snprintf(path, sizeof c->path, "%s", base);
        }
    }
    if (!plugin) {
        fail(s, "plugin",
             "this flynn was built without its CUDA plugin (rebuild on a machine with the CUDA 13 toolkit and cuDNN, "
             "or with the CUDA 12 toolchain of `scripts/setup.sh --cuda12`), or set FLYNN_CUDA_PLUGIN to its path",
             "the flynn CUDA plugin cannot be loaded (%s)", err1);
        return false;
    }
    snprintf(s->plugin_file, sizeof s->plugin_file, "%s", path);
    fl_cuda_plugin_open_fn open_fn = (fl_cuda_plugin_open_fn)dlsym(plugin, FL_CUDA_PLUGIN_ENTRY);
    if (!open_fn) {
        fail(s, "plugin", "reinstall flynn: the plugin does not match this libflynn", "%s has no %s", path,
             FL_CUDA_PLUGIN_ENTRY);
        return false;
    }
    add_check(s, "plugin", FL_GPU_PASS, NULL, "%s (CUDA %d)", path, C->major);
    c->tools = (fl_cuda_tools_fn)dlsym(plugin, FL_CUDA_TOOLS_ENTRY);
    c->plugin = plugin;
    c->open_fn = open_fn;

    return true;
}

/* 7: the device, as the plugin sees it */
static bool check_device(check_ctx *c) {
    fl_gpu_state *s = c->s;
    fl_cuda_plugin_open_fn open_fn = c->open_fn;
    fl_cuda_tools_fn tools = c->tools;
    /* 6: the device, as the plugin sees it */
    fl_cuda_host host = {FL_CUDA_PLUGIN_ABI, FL_BACKEND_ABI, fl_plugin_host_error};
    const fl_backend *be = open_fn(&host, &s->rep);
    const fl_cuda_report *r = &s->rep;
    add_check(s, "cudart", FL_GPU_PASS, NULL, "CUDA runtime %d.%d, linked into the plugin", r->runtime_version / 1000,
              (r->runtime_version % 1000) / 10);
    /* the checks before the one that failed passed */
    static const char *order[] = {"device", "compute_capability", "cudnn_version"};
    const char *failed = be ? "" : (r->failed_check[0] ? r->failed_check : "device");
    for (int i = 0; i < 3; i++) {
        if (strcmp(order[i], failed) == 0 || (!be && strcmp(failed, "driver_version") == 0)) break;
        if (i == 0) add_check(s, "device", FL_GPU_PASS, NULL, "%s (%d multiprocessors, %.1f GiB, %.1f GiB free)",
                              r->device_name, r->multiprocessors, (double)r->total_mem / 1073741824.0,
                              (double)r->free_mem / 1073741824.0);
        if (i == 1) add_check(s, "compute_capability", FL_GPU_PASS, NULL, "%d.%d, covered by this build (%s)",
                              r->cc_major, r->cc_minor, r->archs);
        /* cuDNN keeps its API within a major version, so an older minor loads and runs; but what the build's
         * headers know of (engines, heuristics, fixes) may be missing: said, with the fix (issue 44) */
        if (i == 2 && r->cudnn_version < r->cudnn_built)
            add_check(s, "cudnn_version", FL_GPU_PASS, NULL, "cuDNN %zu.%zu.%zu (built with %zu.%zu.%zu); warning: "
                      "older than the build: it runs, but what cuDNN %zu.%zu added may be missing; if a convolution "
                      "fails or is slow, install cuDNN %zu.%zu or newer (pip install -U nvidia-cudnn-cu%d)",
                      r->cudnn_version / 10000, (r->cudnn_version % 10000) / 100, r->cudnn_version % 100,
                      r->cudnn_built / 10000, (r->cudnn_built % 10000) / 100, r->cudnn_built % 100,
                      r->cudnn_built / 10000, (r->cudnn_built % 10000) / 100, r->cudnn_built / 10000,
                      (r->cudnn_built % 10000) / 100, r->runtime_version / 1000);
        else if (i == 2)
            add_check(s, "cudnn_version", FL_GPU_PASS, NULL, "cuDNN %zu.%zu.%zu (built with %zu.%zu.%zu)",
                      r->cudnn_version / 10000, (r->cudnn_version % 10000) / 100, r->cudnn_version % 100,
                      r->cudnn_built / 10000, (r->cudnn_built % 10000) / 100, r->cudnn_built % 100);
    }
    if (!be) {
        snprintf(s->reason, sizeof s->reason, "%s", r->reason[0] ? r->reason : "the CUDA plugin failed to start");
        add_check(s, failed, FL_GPU_FAIL, NULL, "%s", s->reason);
        return false;
    }
    s->tools = tools ? tools() : NULL;
    if (g_tf32_choice >= 0 && be->set_tf32) be->set_tf32(g_tf32_choice);
    s->backend = be;
    return true;
}

static void run_checks(fl_gpu_state *s) {
    static bool (*const checks[])(check_ctx *) = {check_enabled,   check_driver, check_libcuda, check_plugin_fit,
                                                  check_libraries, check_plugin, check_device};
    memset(s, 0, sizeof *s);
    check_ctx *c = calloc(1, sizeof *c); /* (the search folders: 48 KiB) */
    if (!c) {
        fail(s, "enabled", "free some memory", "out of memory for the GPU checks");
        return;
    }
    c->s = s;
    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++)
        if (!checks[i](c)) break;
    free(c);
}

const fl_gpu_state *fl_gpu_state_get(void) {
    pthread_mutex_lock(&g_lock);
    if (!g_done) {
        run_checks(&g_state);
        g_done = true;
    }
    pthread_mutex_unlock(&g_lock);
    return &g_state;
}

const fl_backend *fl_gpu_backend(char *why, size_t why_len) {
    const fl_gpu_state *s = fl_gpu_state_get();
    if (why && why_len) snprintf(why, why_len, "%s", s->backend ? "" : s->reason);
    return s->backend;
}

fl_status fl_gpu_probe(char *why, size_t why_len) {
    const fl_gpu_state *s = fl_gpu_state_get();
    if (why && why_len) snprintf(why, why_len, "%s", s->backend ? "" : s->reason);
    if (s->backend) return FL_OK;
    return fl_error(FL_ERR_DEVICE, "%s", s->reason);
}

void fl_gpu_describe(char *out, size_t len) {
    const fl_gpu_state *s = fl_gpu_state_get();
    const fl_cuda_report *r = &s->rep;
    if (!s->backend) { snprintf(out, len, "no GPU: %s", s->reason); return; }
    const char *base = strrchr(s->plugin_file, '/') ? strrchr(s->plugin_file, '/') + 1 : s->plugin_file;
    snprintf(out, len, "%s (compute capability %d.%d, %.1f GiB), driver CUDA %d.%d, runtime %d.%d (%s: %s), cuBLAS "
             "%d.%d.%d, cuDNN %zu.%zu.%zu",
             r->device_name, r->cc_major, r->cc_minor, (double)r->total_mem / (1024.0 * 1024 * 1024),
             r->driver_version / 1000, (r->driver_version % 1000) / 10, r->runtime_version / 1000,
             (r->runtime_version % 1000) / 10, base, s->plugin_choice_short, r->cublas_version / 10000,
             (r->cublas_version % 10000) / 100, r->cublas_version % 100, r->cudnn_version / 10000,
             (r->cudnn_version % 10000) / 100, r->cudnn_version % 100);
}

fl_status fl_set_matmul_precision(const char *precision) {
    if (!precision || (strcmp(precision, "high") != 0 && strcmp(precision, "highest") != 0))
        return fl_error(FL_ERR_INVALID_ARG, "matmul precision '%s': expected \"high\" (TF32) or \"highest\" (float32)",
                        precision ? precision : "(null)");
    pthread_mutex_lock(&g_lock);
    g_tf32_choice = strcmp(precision, "high") == 0;
    const fl_backend *be = g_done ? g_state.backend : NULL;
    pthread_mutex_unlock(&g_lock);
    if (be && be->set_tf32) be->set_tf32(g_tf32_choice);
    return FL_OK;
}

const char *fl_get_matmul_precision(void) {
    if (g_tf32_choice >= 0) return g_tf32_choice ? "high" : "highest";
    const char *e = getenv("FLYNN_MATMUL_PRECISION");
    return e && strcmp(e, "highest") == 0 ? "highest" : "high";
}

const char *const fl_gpu_check_order[] = {"enabled", "driver", "libcuda", "driver_version", "cublas", "cudnn", "plugin",
                                          "cudart", "device", "compute_capability", "cudnn_version", "memory", "hello"};
const int fl_gpu_check_count = (int)(sizeof fl_gpu_check_order / sizeof fl_gpu_check_order[0]);

#define FL_MIN_FREE_MIB 512

int fl_gpu_check_memory(char *detail, size_t len, char *remedy, size_t rlen) {
    const fl_gpu_state *s = fl_gpu_state_get();
    if (!s->backend) { snprintf(detail, len, "no GPU"); return FL_GPU_SKIP; }
    size_t fr = 0, tot = 0;
    s->backend->mem_info(&fr, &tot);
    snprintf(detail, len, "%.1f GiB free of %.1f GiB", (double)fr / 1073741824.0, (double)tot / 1073741824.0);
    if (fr < (size_t)FL_MIN_FREE_MIB << 20) {
        snprintf(remedy, rlen, "less than %d MiB of GPU memory is free: stop the other programs using the GPU "
                 "(nvidia-smi lists them)", FL_MIN_FREE_MIB);
        return FL_GPU_FAIL;
    }
    return FL_GPU_PASS;
}

static double max_rel(const float *a, const float *b, int64_t n) {
    double mx = 1e-6, d = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = b[i] < 0 ? -b[i] : b[i], e = a[i] - b[i];
        if (v > mx) mx = v;
        if (e < 0) e = -e;
        if (e > d) d = e;
    }
    return d / mx;
}

/* A 3x3 convolution and a matrix product on the GPU, compared with the CPU. */
int fl_gpu_check_hello(char *detail, size_t len) {
    const fl_gpu_state *s = fl_gpu_state_get();
    const fl_backend *G = s->backend, *C = fl_backend_cpu();
    if (!G) { snprintf(detail, len, "no GPU"); return FL_GPU_SKIP; }
    fl_conv_desc cd = {.n = 8, .h = 12, .w = 12, .c = 4, .oh = 10, .ow = 10, .oc = 8, .kh = 3, .kw = 3, .sh = 1, .sw = 1,
                       .act = 0, .has_bias = 1};
    fl_dense_desc dd = {64, 96, 48, 0, 1};
    size_t nx = 8 * 12 * 12 * 4, nw = 3 * 3 * 4 * 8, ny = 8 * 10 * 10 * 8, na = 64 * 96, nb = 96 * 48, nc = 64 * 48;
    size_t total = nx + nw + 8 + ny + na + nb + 48 + nc;
    float *h = malloc(total * 2 * sizeof(float));
    if (!h) { snprintf(detail, len, "out of host memory"); return FL_GPU_FAIL; }
    float *x = h, *w = x + nx, *b = w + nw, *y = b + 8, *a = y + ny, *bm = a + na, *bb = bm + nb, *c = bb + 48;
    float *gy = h + total, *gc = gy + ny;
    for (size_t i = 0; i < ny; i++) y[i] = 0;
    for (size_t i = 0; i < total; i++) h[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 1.0f;
    void *ws = malloc(C->conv_workspace(&cd, 0) + 64);
    C->conv2d_fwd(&cd, x, w, b, y, ws);
    C->dense_fwd(&dd, a, bm, bb, c);
    free(ws);
    float *d = G->alloc(total * sizeof(float));
    if (!d) { free(h); snprintf(detail, len, "GPU allocation failed: %s", fl_last_error()); return FL_GPU_FAIL; }
    G->upload(d, h, total * sizeof(float));
    float *dx = d, *dw = dx + nx, *db = dw + nw, *dy = db + 8, *da = dy + ny, *dbm = da + na, *dbb = dbm + nb, *dc = dbb + 48;
    G->conv2d_fwd(&cd, dx, dw, db, dy, NULL);
    G->dense_fwd(&dd, da, dbm, dbb, dc);
    G->download(gy, dy, ny * sizeof(float));
    G->download(gc, dc, nc * sizeof(float));
    int err = G->check ? G->check() : 0;
    G->free(d);
    double rc = max_rel(gy, y, (int64_t)ny), rm = max_rel(gc, c, (int64_t)nc);
    free(h);
    if (err) { snprintf(detail, len, "the GPU reported an error: %s", fl_last_error()); return FL_GPU_FAIL; }
    double tol = strcmp(fl_get_matmul_precision(), "high") == 0 ? 2e-2 : 1e-4;
    snprintf(detail, len, "conv2d 3x3 and a 64x96x48 matmul on the GPU match the CPU (max relative difference %.1e and "
             "%.1e, tolerance %.0e for precision \"%s\")", rc, rm, tol, fl_get_matmul_precision());
    if (!(rc <= tol && rm <= tol)) return FL_GPU_FAIL;
    return FL_GPU_PASS;
}
