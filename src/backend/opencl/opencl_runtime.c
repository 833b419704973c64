/*
 * opencl_runtime.c — the OpenCL plugin's runtime: the devices across platforms, device memory and the
 * pointers the core holds, the program (built from the embedded kernels at first use, cached on disk per
 * device and driver), kernel launches and their errors. The backend's entries are opencl_backend.c's.
 *
 * Pointers. The core does arithmetic on device pointers (a slice of its arena, one row of a batch) and
 * never dereferences them. OpenCL 1.2 has buffers, not pointers: each allocation here gets an address range
 * of its own (never NULL, with a gap after it), and a pointer is turned back into its buffer and the
 * offset into it when a kernel or a copy takes it (ocl_buf), the way ggml's OpenCL backend passes a buffer
 * and an offset to every kernel.
 */
#include "backend/opencl/opencl_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

extern const char fl_opencl_source[];
extern const size_t fl_opencl_source_len;
extern const char fl_opencl_source_hash[];

const fl_cuda_host *ocl_host;
cl_context ocl_ctx;
cl_command_queue ocl_queue;
cl_device_id ocl_dev;

/* ------------------------------------------------------------------ errors */

static int g_sticky;
static char g_sticky_msg[512];

const char *ocl_err_name(cl_int e) {
    switch (e) {
#define E_(x) case x: return #x;
    E_(CL_DEVICE_NOT_FOUND) E_(CL_DEVICE_NOT_AVAILABLE) E_(CL_COMPILER_NOT_AVAILABLE)
    E_(CL_MEM_OBJECT_ALLOCATION_FAILURE) E_(CL_OUT_OF_RESOURCES) E_(CL_OUT_OF_HOST_MEMORY)
    E_(CL_BUILD_PROGRAM_FAILURE) E_(CL_INVALID_VALUE) E_(CL_INVALID_DEVICE) E_(CL_INVALID_BINARY)
    E_(CL_INVALID_BUILD_OPTIONS) E_(CL_INVALID_PROGRAM_EXECUTABLE) E_(CL_INVALID_KERNEL_NAME)
    E_(CL_INVALID_KERNEL_ARGS) E_(CL_INVALID_ARG_INDEX) E_(CL_INVALID_ARG_VALUE) E_(CL_INVALID_ARG_SIZE)
    E_(CL_INVALID_WORK_GROUP_SIZE) E_(CL_INVALID_WORK_ITEM_SIZE) E_(CL_INVALID_GLOBAL_WORK_SIZE)
    E_(CL_INVALID_MEM_OBJECT) E_(CL_INVALID_BUFFER_SIZE) E_(CL_INVALID_COMMAND_QUEUE) E_(CL_INVALID_CONTEXT)
    E_(CL_INVALID_PLATFORM) E_(CL_INVALID_OPERATION)
    E_(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
#undef E_
    default: return "an OpenCL error";
    }
}

int ocl_ok(cl_int e, const char *call, const char *what) {
    if (e == CL_SUCCESS) return 1;
    if (!g_sticky) {
        g_sticky = 1;
        snprintf(g_sticky_msg, sizeof g_sticky_msg, "OpenCL: %s%s%s failed: %s (%d)", call, what ? " " : "",
                 what ? what : "", ocl_err_name(e), (int)e);
        if (ocl_host) ocl_host->error(e == CL_MEM_OBJECT_ALLOCATION_FAILURE || e == CL_OUT_OF_RESOURCES
                                          ? OCL_ST_NOMEM : OCL_ST_DEVICE, "%s", g_sticky_msg);
    }
    return 0;
}

int ocl_failed(void) { return g_sticky; }

int ocl_check(void) {
    if (!g_sticky) return 0;
    ocl_host->error(OCL_ST_DEVICE, "%s", g_sticky_msg);
    return OCL_ST_DEVICE;
}

/* ----------------------------------------------------------------- devices */

#define MAX_DEVICES 64
static cl_device_id g_devs[MAX_DEVICES];
static cl_platform_id g_dev_plat[MAX_DEVICES];
static int g_ndevs = -2; /* -2: not listed yet */
static char g_list_why[256];

static void list_devices(void) {
    if (g_ndevs != -2) return;
    /* PoCL 3.1's default way of running a work-group ("loopvec") miscompiles kernels whose lanes loop over a
     * row with barriers between the loops (k_loss wrote past its row: a vectorised loop with a wrapped trip
     * count); its "loops" method (plain loops over the work-items, barriers as loop boundaries) runs them
     * right. Set before PoCL reads it, unless the user chose; the program's options then say so too
     * (ocl_program_build), so that PoCL's own kernel cache never hands back a kernel compiled the other way. */
    setenv("POCL_WORK_GROUP_METHOD", "loops", 0);
    /* And with more than one of its threads, PoCL 3.1 gave some lanes of a row group wrong values after a
     * barrier (k_loss's gradient, k_metric's argmax; 1 run in 2 on a 2-core machine, never with one thread,
     * never on the CPU backend): the kernels share nothing between work-groups, so PoCL's threads must be
     * sharing the state it keeps for values live across a barrier. One thread, unless the user chose. */
    setenv("POCL_MAX_PTHREAD_COUNT", "1", 0);
    cl_platform_id plats[16];
    cl_uint np = 0;
    cl_int e = clGetPlatformIDs(16, plats, &np);
    if (e != CL_SUCCESS || np == 0) {
        snprintf(g_list_why, sizeof g_list_why, "no OpenCL platform: clGetPlatformIDs %s (%d): the ICD loader "
                 "(libOpenCL.so.1) finds no driver in /etc/OpenCL/vendors", e ? ocl_err_name(e) : "found none", e);
        g_ndevs = -1;
        return;
    }
    g_ndevs = 0;
    for (cl_uint p = 0; p < np && g_ndevs < MAX_DEVICES; p++) {
        cl_uint nd = 0;
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, (cl_uint)(MAX_DEVICES - g_ndevs), g_devs + g_ndevs, &nd) !=
            CL_SUCCESS)
            continue;
        for (cl_uint d = 0; d < nd; d++) g_dev_plat[g_ndevs + (int)d] = plats[p];
        g_ndevs += (int)nd;
    }
    if (g_ndevs == 0) snprintf(g_list_why, sizeof g_list_why, "%u OpenCL platform(s), no device", np);
}

int ocl_device_count(char *why, size_t len) {
    list_devices();
    if (g_ndevs <= 0 && why) snprintf(why, len, "%s", g_list_why);
    return g_ndevs;
}

static void dev_str(cl_device_id d, cl_device_info what, char *out, size_t len) {
    out[0] = 0;
    if (clGetDeviceInfo(d, what, len, out, NULL) != CL_SUCCESS) out[0] = 0;
    out[len - 1] = 0;
}

int ocl_device_get(int index, cl_device_id *out, fl_opencl_device_info *info, char *why, size_t len) {
    list_devices();
    if (index < 0 || index >= g_ndevs) {
        snprintf(why, len, "no OpenCL device %d (%d found%s%s)", index, g_ndevs < 0 ? 0 : g_ndevs,
                 g_ndevs <= 0 ? ": " : "", g_ndevs <= 0 ? g_list_why : "");
        return -1;
    }
    cl_device_id d = g_devs[index];
    if (out) *out = d;
    if (!info) return 0;
    memset(info, 0, sizeof *info);
    info->index = index;
    clGetPlatformInfo(g_dev_plat[index], CL_PLATFORM_NAME, sizeof info->platform, info->platform, NULL);
    clGetPlatformInfo(g_dev_plat[index], CL_PLATFORM_VERSION, sizeof info->platform_version,
                      info->platform_version, NULL);
    info->platform[sizeof info->platform - 1] = info->platform_version[sizeof info->platform_version - 1] = 0;
    dev_str(d, CL_DEVICE_NAME, info->name, sizeof info->name);
    dev_str(d, CL_DEVICE_VENDOR, info->vendor, sizeof info->vendor);
    dev_str(d, CL_DRIVER_VERSION, info->driver, sizeof info->driver);
    dev_str(d, CL_DEVICE_VERSION, info->version, sizeof info->version);
    dev_str(d, CL_DEVICE_OPENCL_C_VERSION, info->c_version, sizeof info->c_version);
    cl_device_type t = 0;
    cl_uint cu = 0, mhz = 0;
    cl_ulong gm = 0, ma = 0, lm = 0;
    size_t wg = 0;
    clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof t, &t, NULL);
    clGetDeviceInfo(d, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cu, &cu, NULL);
    clGetDeviceInfo(d, CL_DEVICE_MAX_CLOCK_FREQUENCY, sizeof mhz, &mhz, NULL);
    clGetDeviceInfo(d, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof gm, &gm, NULL);
    clGetDeviceInfo(d, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof ma, &ma, NULL);
    clGetDeviceInfo(d, CL_DEVICE_LOCAL_MEM_SIZE, sizeof lm, &lm, NULL);
    clGetDeviceInfo(d, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof wg, &wg, NULL);
    info->is_gpu = (t & (CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_ACCELERATOR)) != 0;
    info->compute_units = (int)cu;
    info->clock_mhz = (int)mhz;
    info->global_mem = (size_t)gm;
    info->max_alloc = (size_t)ma;
    info->local_mem = (size_t)lm;
    info->max_work_group = wg;
    char ext[8192];
    dev_str(d, CL_DEVICE_EXTENSIONS, ext, sizeof ext);
    info->fp64 = strstr(ext, "cl_khr_fp64") != NULL;
    info->fp16 = strstr(ext, "cl_khr_fp16") != NULL;
    info->subgroups = strstr(ext, "cl_khr_subgroups") != NULL || strstr(ext, "cl_intel_subgroups") != NULL;
    return 0;
}

/* ------------------------------------------------------------------ memory */

typedef struct region { uintptr_t base; size_t size; cl_mem mem; } region;
static region *g_regions; /* sorted by base: bases only grow */
static size_t g_nregions, g_cap_regions;
static uintptr_t g_next = (uintptr_t)1 << 44;

void *ocl_alloc(size_t bytes) {
    size_t n = bytes ? bytes : 4;
    if (g_nregions == g_cap_regions) {
        size_t cap = g_cap_regions ? g_cap_regions * 2 : 256;
        region *r = realloc(g_regions, cap * sizeof *r);
        if (!r) { ocl_host->error(OCL_ST_NOMEM, "out of host memory for the OpenCL buffer table"); return NULL; }
        g_regions = r;
        g_cap_regions = cap;
    }
    cl_int e;
    cl_mem m = clCreateBuffer(ocl_ctx, CL_MEM_READ_WRITE, n, NULL, &e);
    if (e != CL_SUCCESS) {
        ocl_host->error(OCL_ST_NOMEM, "OpenCL: cannot allocate %zu bytes on the device: %s (%d)", bytes,
                        ocl_err_name(e), (int)e);
        return NULL;
    }
    region *r = &g_regions[g_nregions++];
    r->base = g_next;
    r->size = n;
    r->mem = m;
    g_next += ((n + 4095) & ~(size_t)4095) + 4096;
    return (void *)r->base;
}

/* the region holding p (its end included: a slice may end there), or NULL */
static region *region_of(const void *p) {
    uintptr_t a = (uintptr_t)p;
    size_t lo = 0, hi = g_nregions;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (g_regions[mid].base <= a) lo = mid + 1;
        else hi = mid;
    }
    if (lo == 0) return NULL;
    region *r = &g_regions[lo - 1];
    return a <= r->base + r->size ? r : NULL;
}

void ocl_free(void *p) {
    if (!p) return;
    region *r = region_of(p);
    if (!r || r->base != (uintptr_t)p) return;
    clFinish(ocl_queue); /* kernels still queued may read it */
    clReleaseMemObject(r->mem);
    size_t i = (size_t)(r - g_regions);
    memmove(r, r + 1, (g_nregions - i - 1) * sizeof *r);
    g_nregions--;
}

cl_mem ocl_buf(const void *p, size_t *offset) {
    region *r = region_of(p);
    if (!r) {
        if (!g_sticky) {
            g_sticky = 1;
            snprintf(g_sticky_msg, sizeof g_sticky_msg, "OpenCL: pointer %p is not in any buffer of this device", p);
            ocl_host->error(OCL_ST_DEVICE, "%s", g_sticky_msg);
        }
        *offset = 0;
        return NULL;
    }
    *offset = (size_t)((uintptr_t)p - r->base);
    return r->mem;
}

/* ----------------------------------------------------------------- program */

static cl_program g_prog;
static cl_kernel g_kernels[OCL_KERNEL_COUNT];
static const char *const ocl_kernel_names[OCL_KERNEL_COUNT] = {
#define OCL_KERNEL_NAME_(name) #name,
    OCL_KERNELS(OCL_KERNEL_NAME_)
#undef OCL_KERNEL_NAME_
};
#define BUILD_OPTIONS "-cl-std=CL1.2"
static char g_options[128] = BUILD_OPTIONS;

static uint64_t fnv(uint64_t h, const char *s) {
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* $FLYNN_OPENCL_CACHE, else $XDG_CACHE_HOME/flynn/opencl, else ~/.cache/flynn/opencl; "" when none */
static void cache_dir(char *out, size_t len) {
    const char *d = getenv("FLYNN_OPENCL_CACHE"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    if (d && *d) snprintf(out, len, "%s", d);
    else if (x && *x) snprintf(out, len, "%s/flynn/opencl", x);
    else if (h && *h) snprintf(out, len, "%s/.cache/flynn/opencl", h);
    else out[0] = 0;
}

static void mkdirs(const char *dir) {
    char p[1024];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') { *s = 0; mkdir(p, 0755); *s = '/'; }
    mkdir(p, 0755);
}

/* The first error line of a failed build's log, with what came before it trimmed. */
static void first_error(const char *log, char *out, size_t len) {
    const char *e = strstr(log, "error");
    const char *start = e ? e : log;
    while (e && start > log && start[-1] != '\n') start--;
    snprintf(out, len, "%.*s", (int)strcspn(start, "\n"), start);
}

static int build_log_error(cl_program p, fl_opencl_report *rep) {
    size_t n = 0;
    clGetProgramBuildInfo(p, ocl_dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &n);
    char *log = calloc(n + 1, 1);
    if (log) clGetProgramBuildInfo(p, ocl_dev, CL_PROGRAM_BUILD_LOG, n, log, NULL);
    char first[512];
    first_error(log ? log : "", first, sizeof first);
    snprintf(rep->reason, sizeof rep->reason, "the OpenCL driver could not build flynn's kernels for %.200s: %.500s",
             rep->dev.name, first[0] ? first : "(no build log)");
    snprintf(rep->failed_check, sizeof rep->failed_check, "build");
    free(log);
    return -1;
}

static uint64_t fnv_bytes(const unsigned char *b, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* A cached binary for this key, built (0) or not (-1: absent, stale or damaged; the caller builds anew). The
 * file's first line is the key, the binary's size and its checksum: a damaged binary never reaches the
 * driver (PoCL 3.1 aborts on one). */
static int load_cached(const char *file, const char *key) {
    FILE *f = fopen(file, "rb");
    if (!f) return -1;
    char head[160], want[160];
    unsigned long long size = 0, sum = 0;
    int ok = fgets(head, sizeof head, f) != NULL && sscanf(head, "%159s %*s %llu %llx", want, &size, &sum) == 3;
    ok = ok && strncmp(head, key, strlen(key)) == 0 && head[strlen(key)] == ' ' && size > 0 && size < (1ull << 31);
    unsigned char *bin = ok ? malloc((size_t)size) : NULL;
    ok = bin && fread(bin, 1, (size_t)size, f) == (size_t)size && fgetc(f) == EOF &&
         fnv_bytes(bin, (size_t)size) == (uint64_t)sum;
    fclose(f);
    if (!ok) { free(bin); return -1; }
    size_t sz = (size_t)size;
    const unsigned char *b = bin;
    cl_int st, e;
    cl_program p = clCreateProgramWithBinary(ocl_ctx, 1, &ocl_dev, &sz, &b, &st, &e);
    free(bin);
    if (e != CL_SUCCESS || st != CL_SUCCESS) { if (p) clReleaseProgram(p); return -1; }
    if (clBuildProgram(p, 1, &ocl_dev, g_options, NULL, NULL) != CL_SUCCESS) { clReleaseProgram(p); return -1; }
    g_prog = p;
    return 0;
}

/* the built program's binary, written whole or not at all (a temporary file renamed over the old one) */
static void store_cached(const char *dir, const char *file, const char *key) {
    size_t size = 0;
    if (clGetProgramInfo(g_prog, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL) != CL_SUCCESS || !size) return;
    unsigned char *bin = malloc(size);
    if (!bin) return;
    if (clGetProgramInfo(g_prog, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL) == CL_SUCCESS) {
        mkdirs(dir);
        char tmp[1100];
        snprintf(tmp, sizeof tmp, "%s.%ld.tmp", file, (long)getpid());
        FILE *f = fopen(tmp, "wb");
        int ok = f && fprintf(f, "%s %zu %016llx\n", key, size, (unsigned long long)fnv_bytes(bin, size)) > 0 &&
                 fwrite(bin, 1, size, f) == size;
        if (f && fclose(f) != 0) ok = 0;
        if (ok && rename(tmp, file) == 0) tmp[0] = 0;
        if (tmp[0]) unlink(tmp);
    }
    free(bin);
}

int ocl_program_build(fl_opencl_report *rep) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* the key: the source, the device, its driver and the options; any change builds anew */
    uint64_t h = fnv(1469598103934665603ull, fl_opencl_source_hash);
    h = fnv(fnv(fnv(fnv(h, rep->dev.platform), rep->dev.platform_version), rep->dev.name), rep->dev.driver);
    const char *wg = getenv("POCL_WORK_GROUP_METHOD");
    if (strstr(rep->dev.platform, "Portable Computing Language") && wg && strspn(wg, "abcdefghijklmnopqrstuvwxyz") ==
        strlen(wg) && strlen(wg) < 32)
        snprintf(g_options, sizeof g_options, "%s -DFL_POCL_WG_%s", BUILD_OPTIONS, wg);
    h = fnv(h, g_options);
    char key[64], dir[900];
    snprintf(key, sizeof key, "flynn-opencl %016llx", (unsigned long long)h);
    cache_dir(dir, sizeof dir);
    rep->cache_file[0] = 0;
    if (dir[0]) snprintf(rep->cache_file, sizeof rep->cache_file, "%s/%016llx.bin", dir, (unsigned long long)h);
    rep->cache_hit = rep->cache_file[0] && load_cached(rep->cache_file, key) == 0;
    if (!rep->cache_hit) {
        const char *src = fl_opencl_source;
        size_t len = fl_opencl_source_len;
        cl_int e;
        g_prog = clCreateProgramWithSource(ocl_ctx, 1, &src, &len, &e);
        if (e != CL_SUCCESS) {
            snprintf(rep->reason, sizeof rep->reason, "OpenCL: clCreateProgramWithSource: %s (%d)", ocl_err_name(e), e);
            snprintf(rep->failed_check, sizeof rep->failed_check, "build");
            return -1;
        }
        if (clBuildProgram(g_prog, 1, &ocl_dev, g_options, NULL, NULL) != CL_SUCCESS) {
            build_log_error(g_prog, rep);
            clReleaseProgram(g_prog);
            g_prog = NULL;
            return -1;
        }
        if (rep->cache_file[0]) store_cached(dir, rep->cache_file, key);
    }
    for (int i = 0; i < OCL_KERNEL_COUNT; i++) {
        cl_int e;
        g_kernels[i] = clCreateKernel(g_prog, ocl_kernel_names[i], &e);
        if (e != CL_SUCCESS) {
            snprintf(rep->reason, sizeof rep->reason, "OpenCL: kernel %s of flynn's program: %s (%d)",
                     ocl_kernel_names[i], ocl_err_name(e), e);
            snprintf(rep->failed_check, sizeof rep->failed_check, "build");
            return -1;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    rep->build_seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    return 0;
}

cl_kernel ocl_kernel(int id) { return g_kernels[id]; }

/* ---------------------------------------------------------------- launches */

ocl_launch ocl_args(int id) {
    ocl_launch l = {g_kernels[id], 0, 0, ocl_kernel_names[id]};
    return l;
}

void ocl_arg_raw(ocl_launch *l, const void *v, size_t size) {
    if (!l->bad && !ocl_ok(clSetKernelArg(l->k, l->i, size, v), "clSetKernelArg", l->name)) l->bad = 1;
    l->i++;
}
void ocl_arg_i32(ocl_launch *l, int v) { cl_int x = v; ocl_arg_raw(l, &x, sizeof x); }
void ocl_arg_i64(ocl_launch *l, int64_t v) { cl_long x = v; ocl_arg_raw(l, &x, sizeof x); }
void ocl_arg_u64(ocl_launch *l, uint64_t v) { cl_ulong x = v; ocl_arg_raw(l, &x, sizeof x); }
void ocl_arg_f32(ocl_launch *l, float v) { cl_float x = v; ocl_arg_raw(l, &x, sizeof x); }
void ocl_arg_f64(ocl_launch *l, double v) { cl_double x = v; ocl_arg_raw(l, &x, sizeof x); }

/* FL_BUF's two arguments: the buffer (NULL stays NULL) and the offset in elements of elem bytes */
void ocl_arg_buf(ocl_launch *l, const void *p, size_t elem) {
    size_t off = 0;
    cl_mem m = p ? ocl_buf(p, &off) : NULL;
    if (p && !m) l->bad = 1;
    ocl_arg_raw(l, m ? (const void *)&m : NULL, sizeof m);
    ocl_arg_i64(l, (int64_t)(off / elem));
}

static void enqueue(ocl_launch *l, cl_uint dims, const size_t *global, const size_t *local) {
    if (l->bad) return;
    ocl_ok(clEnqueueNDRangeKernel(ocl_queue, l->k, dims, NULL, global, local, 0, NULL, NULL),
           "clEnqueueNDRangeKernel", l->name);
}

void ocl_run1(ocl_launch *l, int64_t total, int local) {
    if (total <= 0) return;
    int64_t groups = (total + local - 1) / local;
    if (groups > 1024) groups = 1024; /* the kernels stride over the rest */
    size_t g = (size_t)groups * (size_t)local, lo = (size_t)local;
    enqueue(l, 1, &g, &lo);
}

void ocl_run_rows(ocl_launch *l, int64_t rows) {
    if (rows <= 0) return;
    int64_t groups = rows < 4096 ? rows : 4096;
    size_t g = (size_t)groups * 32, lo = 32;
    enqueue(l, 1, &g, &lo);
}

void ocl_run2(ocl_launch *l, size_t gx, size_t gy, size_t lx, size_t ly) {
    if (!gx || !gy) return;
    size_t g[2] = {gx, gy}, lo[2] = {lx, ly};
    enqueue(l, 2, g, lo);
}
