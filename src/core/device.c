/*
 * device.c — finding out whether the GPU can be used, and loading the CUDA
 * backend, without linking CUDA. The checks run in the order a person would
 * debug an install and stop at the first failure, which becomes the one-line
 * reason that `--device auto` prints and `--device gpu` fails with:
 *
 *   1. not disabled ($FLYNN_DISABLE_GPU)
 *   2. the NVIDIA kernel driver is loaded (/proc/driver/nvidia/version, /dev/nvidia*)
 *   3. libcuda.so.1 loads and supports the CUDA version the plugin is built for
 *   4. cuBLAS and cuDNN are found (system paths, the CUDA toolkit, or pip
 *      wheels under site-packages/nvidia/.../lib; $FLYNN_CUDA_LIB_PATH
 *      replaces the search)
 *   5. the flynn CUDA plugin libflynn_cuda.so loads ($FLYNN_CUDA_PLUGIN)
 *   6. the plugin finds a device it can run on and sets up cuBLAS/cuDNN
 *
 * The result is computed once per process (the backend registry).
 * Test hooks: $FLYNN_NVIDIA_PROC replaces /proc/driver/nvidia/version (and
 * skips /dev/nvidia*), $FLYNN_LIBCUDA replaces libcuda.so.1.
 */
#include "device.h"
#include "error.h"
#include "backend/cuda/plugin.h"

#include <dlfcn.h>
#include <glob.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PLUGIN_NAME "libflynn_cuda.so"

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

static int add_dir(char dirs[][512], int n, int max, const char *d) {
    if (n >= max || access(d, R_OK) != 0) return n;
    for (int i = 0; i < n; i++)
        if (strcmp(dirs[i], d) == 0) return n;
    snprintf(dirs[n], 512, "%s", d);
    return n + 1;
}

static int add_glob(char dirs[][512], int n, int max, const char *pattern) {
    glob_t g;
    if (glob(pattern, GLOB_NOSORT | GLOB_ONLYDIR, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++) n = add_dir(dirs, n, max, g.gl_pathv[i]);
        globfree(&g);
    }
    return n;
}

/* Where CUDA libraries are looked for, in order. "" stands for the
 * system's own search (LD_LIBRARY_PATH, the ld.so cache). */
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
    snprintf(dirs[n++], 512, "%s", "");
    n = add_dir(dirs, n, max, "/usr/local/cuda/lib64");
    n = add_dir(dirs, n, max, "/usr/local/cuda/lib");
    n = add_glob(dirs, n, max, "/usr/local/cuda-1[3-9]*/lib64");
    n = add_glob(dirs, n, max, "/usr/local/cuda-1[3-9]*/lib");
    /* pip wheels: nvidia-cublas, nvidia-cudnn-cu13, ... */
    const char *prefixes[] = {getenv("VIRTUAL_ENV"), getenv("CONDA_PREFIX"), "/usr", "/usr/local", "/opt/*", "/opt/*/.venv",
                              "/opt/conda", NULL};
    char pat[1024];
    const char *home = getenv("HOME");
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < (int)(sizeof prefixes / sizeof prefixes[0]); i++) {
            const char *p = pass == 0 ? prefixes[i] : (i == 0 && home ? home : NULL);
            if (!p || !*p) continue;
            const char *sub = pass == 0 ? "" : "/.local";
            snprintf(pat, sizeof pat, "%s%s/lib/python3*/*-packages/nvidia/cu1[3-9]/lib", p, sub);
            n = add_glob(dirs, n, max, pat);
            snprintf(pat, sizeof pat, "%s%s/lib/python3*/*-packages/nvidia/*/lib", p, sub);
            n = add_glob(dirs, n, max, pat);
        }
    }
    return n;
}

/* dlopen `name` from the search dirs; *where gets the file (or "system"). */
static void *open_lib(const char *name, char dirs[][512], int ndirs, char *where, size_t wlen) {
    for (int i = 0; i < ndirs; i++) {
        char path[1024];
        if (dirs[i][0]) snprintf(path, sizeof path, "%.511s/%.200s", dirs[i], name);
        else snprintf(path, sizeof path, "%s", name);
        void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
        if (h) {
            if (dirs[i][0]) snprintf(where, wlen, "%s", path);
            else {
                /* ask the loader which file it took */
                char origin[512] = "";
                void *sym = dlsym(h, "cublasGetVersion_v2");
                if (!sym) sym = dlsym(h, "cudnnGetVersion");
                if (!sym) sym = dlsym(h, "cublasLtGetVersion");
                Dl_info info;
                if (sym && dladdr(sym, &info) && info.dli_fname) snprintf(origin, sizeof origin, "%s", info.dli_fname);
                snprintf(where, wlen, "%s", origin[0] ? origin : name);
            }
            return h;
        }
    }
    return NULL;
}

static void dirs_list(char dirs[][512], int n, char *out, size_t len) {
    size_t o = 0;
    out[0] = 0;
    for (int i = 0; i < n && o + 4 < len; i++)
        o += (size_t)snprintf(out + o, len - o, "%s%s", i ? ", " : "", dirs[i][0] ? dirs[i] : "the system library path");
}

/* The folder of the file that holds this code (libflynn.so, or the program
 * it is linked into): the plugin is installed next to it. */
static void self_dir(char *out, size_t len) {
    Dl_info info;
    out[0] = 0;
    if (dladdr((void *)&fl_gpu_probe, &info) && info.dli_fname) {
        snprintf(out, len, "%s", info.dli_fname);
        char *slash = strrchr(out, '/');
        if (slash) *slash = 0;
        else snprintf(out, len, ".");
    }
}

static int host_error(int status, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return (int)fl_error((fl_status)status, "%s", msg);
}

static void run_checks(fl_gpu_state *s) {
    memset(s, 0, sizeof *s);
    /* 1 */
    const char *off = getenv("FLYNN_DISABLE_GPU");
    if (off && *off && strcmp(off, "0") != 0) {
        fail(s, "enabled", "unset FLYNN_DISABLE_GPU to use the GPU", "FLYNN_DISABLE_GPU is set");
        return;
    }
    add_check(s, "enabled", FL_GPU_PASS, NULL, "FLYNN_DISABLE_GPU is not set");

    /* 2: the kernel driver */
    const char *proc = getenv("FLYNN_NVIDIA_PROC");
    const char *pfile = proc && *proc ? proc : "/proc/driver/nvidia/version";
    char line[256] = "";
    FILE *f = fopen(pfile, "r");
    if (f) {
        if (!fgets(line, sizeof line, f)) line[0] = 0;
        fclose(f);
        line[strcspn(line, "\n")] = 0;
    }
    bool dev = !(proc && *proc) && (access("/dev/nvidiactl", F_OK) == 0 || access("/dev/nvidia0", F_OK) == 0);
    if (!f && !dev) {
        fail(s, "driver",
             "if this machine has an NVIDIA GPU, install its driver, version 580 or newer (Debian: apt install "
             "nvidia-driver; check with nvidia-smi); without one, flynn trains on the CPU and there is nothing to fix",
             "no NVIDIA driver is loaded (%s and /dev/nvidia* are missing)", pfile);
        return;
    }
    const char *ver = strstr(line, "Kernel Module");
    add_check(s, "driver", FL_GPU_PASS, NULL, "NVIDIA kernel driver loaded (%s)",
              ver ? ver : (f ? pfile : "/dev/nvidia* present"));

    /* 3: libcuda.so.1 and the CUDA version it supports */
    const char *lc = getenv("FLYNN_LIBCUDA");
    const char *lcname = lc && *lc ? lc : "libcuda.so.1";
    void *cuda = dlopen(lcname, RTLD_NOW | RTLD_GLOBAL);
    if (!cuda) {
        fail(s, "libcuda", "the driver's user-space library is missing: reinstall the NVIDIA driver (or, in a container, "
             "run it with the NVIDIA container toolkit)", "%s cannot be loaded (%s)", lcname, dlerror());
        return;
    }
    int (*get_ver)(int *) = (int (*)(int *))dlsym(cuda, "cuDriverGetVersion");
    int drv = 0;
    if (!get_ver || get_ver(&drv) != 0 || drv <= 0) {
        fail(s, "libcuda", "reinstall the NVIDIA driver", "%s does not report a CUDA version (cuDriverGetVersion failed)",
             lcname);
        return;
    }
    s->driver_cuda = drv;
    if (drv / 1000 < FL_CUDA_BUILD_MAJOR) {
        fail(s, "driver_version",
             "update the NVIDIA driver to version 580 or newer (CUDA 13); the GPU is fine, only the driver is too old",
             "the NVIDIA driver supports CUDA %d.%d, flynn's GPU backend is built with CUDA %d.0", drv / 1000,
             (drv % 1000) / 10, FL_CUDA_BUILD_MAJOR);
        return;
    }
    {
        Dl_info info;
        const char *file = dladdr((void *)get_ver, &info) && info.dli_fname ? info.dli_fname : lcname;
        add_check(s, "libcuda", FL_GPU_PASS, NULL, "%s", file);
    }
    add_check(s, "driver_version", FL_GPU_PASS, NULL, "the driver supports CUDA %d.%d (flynn needs %d.0 or newer)",
              drv / 1000, (drv % 1000) / 10, FL_CUDA_BUILD_MAJOR);

    /* 4: cuBLAS and cuDNN */
    char dirs[48][512];
    int nd = fl_cuda_search_dirs(dirs, 48);
    static const struct { const char *name; const char *what; bool required; } libs[] = {
        {"libcublasLt.so.13", "cuBLAS", true},
        {"libcublas.so.13", "cuBLAS", true},
        {"libcudnn_graph.so.9", "cuDNN", true},
        {"libcudnn_ops.so.9", "cuDNN", true},
        {"libcudnn_cnn.so.9", "cuDNN", true},
        {"libcudnn_heuristic.so.9", "cuDNN", true},
        {"libcudnn_engines_precompiled.so.9", "cuDNN", true},
        {"libnvrtc.so.13", "NVRTC", false},
        {"libcudnn_engines_runtime_compiled.so.9", "cuDNN", false},
        {"libcudnn.so.9", "cuDNN", true},
    };
    for (size_t i = 0; i < sizeof libs / sizeof libs[0]; i++) {
        char where[1024];
        void *h = open_lib(libs[i].name, dirs, nd, where, sizeof where);
        if (!h && libs[i].required) {
            char list[2048];
            dirs_list(dirs, nd, list, sizeof list);
            const char *remedy = strcmp(libs[i].what, "cuBLAS") == 0
                                     ? "install cuBLAS for CUDA 13 (Debian/Ubuntu with NVIDIA's repository: apt install "
                                       "libcublas-13-0; or pip install nvidia-cublas), or point FLYNN_CUDA_LIB_PATH at "
                                       "the folder that holds it"
                                     : "install cuDNN 9 for CUDA 13 (apt install cudnn9-cuda-13; or pip install "
                                       "nvidia-cudnn-cu13), or point FLYNN_CUDA_LIB_PATH at the folder that holds it";
            fail(s, strcmp(libs[i].what, "cuBLAS") == 0 ? "cublas" : "cudnn", remedy, "%s (%s) not found (searched %s)",
                 libs[i].name, libs[i].what, list);
            return;
        }
        if (h && (strcmp(libs[i].name, "libcublas.so.13") == 0 || strcmp(libs[i].name, "libcudnn.so.9") == 0)) {
            bool cublas = strcmp(libs[i].name, "libcublas.so.13") == 0;
            snprintf(cublas ? s->cublas_file : s->cudnn_file, sizeof s->cublas_file, "%s", where);
            add_check(s, cublas ? "cublas" : "cudnn", FL_GPU_PASS, NULL, "%s", where);
        }
    }

    /* 5: the plugin */
    char path[1024], self[512];
    const char *pl = getenv("FLYNN_CUDA_PLUGIN");
    void *plugin = NULL;
    char err1[512] = "";
    if (pl && *pl) {
        snprintf(path, sizeof path, "%s", pl);
        plugin = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!plugin) snprintf(err1, sizeof err1, "%s", dlerror());
    } else {
        self_dir(self, sizeof self);
        snprintf(path, sizeof path, "%s/%s", self, PLUGIN_NAME);
        plugin = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!plugin) {
            snprintf(err1, sizeof err1, "%s", dlerror());
            plugin = dlopen(PLUGIN_NAME, RTLD_NOW | RTLD_LOCAL);
            if (plugin) snprintf(path, sizeof path, "%s", PLUGIN_NAME);
        }
    }
    if (!plugin) {
        fail(s, "plugin",
             "this flynn was built without its CUDA plugin (rebuild on a machine with the CUDA 13 toolkit, nvcc, "
             "cuBLAS and cuDNN), or set FLYNN_CUDA_PLUGIN to its path",
             "the flynn CUDA plugin cannot be loaded (%s)", err1);
        return;
    }
    snprintf(s->plugin_file, sizeof s->plugin_file, "%s", path);
    fl_cuda_plugin_open_fn open_fn = (fl_cuda_plugin_open_fn)dlsym(plugin, FL_CUDA_PLUGIN_ENTRY);
    if (!open_fn) {
        fail(s, "plugin", "reinstall flynn: the plugin does not match this libflynn", "%s has no %s", path,
             FL_CUDA_PLUGIN_ENTRY);
        return;
    }
    add_check(s, "plugin", FL_GPU_PASS, NULL, "%s", path);
    fl_cuda_tools_fn tools = (fl_cuda_tools_fn)dlsym(plugin, FL_CUDA_TOOLS_ENTRY);

    /* 6: the device, as the plugin sees it */
    fl_cuda_host host = {FL_CUDA_PLUGIN_ABI, host_error};
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
        if (i == 2) add_check(s, "cudnn_version", FL_GPU_PASS, NULL, "cuDNN %zu.%zu.%zu (built with %zu.%zu.%zu)",
                              r->cudnn_version / 10000, (r->cudnn_version % 10000) / 100, r->cudnn_version % 100,
                              r->cudnn_built / 10000, (r->cudnn_built % 10000) / 100, r->cudnn_built % 100);
    }
    if (!be) {
        snprintf(s->reason, sizeof s->reason, "%s", r->reason[0] ? r->reason : "the CUDA plugin failed to start");
        add_check(s, failed, FL_GPU_FAIL, NULL, "%s", s->reason);
        return;
    }
    s->tools = tools ? tools() : NULL;
    if (g_tf32_choice >= 0 && be->set_tf32) be->set_tf32(g_tf32_choice);
    s->backend = be;
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
    snprintf(out, len, "%s (compute capability %d.%d, %.1f GiB), driver CUDA %d.%d, runtime %d.%d, cuDNN %zu.%zu.%zu",
             r->device_name, r->cc_major, r->cc_minor, (double)r->total_mem / (1024.0 * 1024 * 1024),
             r->driver_version / 1000, (r->driver_version % 1000) / 10, r->runtime_version / 1000,
             (r->runtime_version % 1000) / 10, r->cudnn_version / 10000, (r->cudnn_version % 10000) / 100,
             r->cudnn_version % 100);
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
