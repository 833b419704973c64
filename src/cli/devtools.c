/*
 * devtools.c — `flynn devices`, `flynn bandwidth` and `flynn doctor`: what
 * the CUDA samples deviceQuery and bandwidthTest print, and the install
 * doctor, built on the GPU checks of src/device/gpu.c. Each ends with
 * "Result = PASS" or "Result = FAIL" and exits 0 or 1 to match; --json gives
 * the same facts in the stable form described in docs/device-tools.md.
 */
#include "dist/mpi.h"
#include "dist/nccl.h"
#include "devtools.h"

#include "device/gpu.h"
#include "device/opencl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ JSON out */

void flynn_json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static bool has_flag(int argc, char **argv, const char *flag) {
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], flag) == 0) return true;
    return false;
}

static const char *opt_value(int argc, char **argv, const char *key) {
    size_t kl = strlen(key);
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], key) == 0 && i + 1 < argc) return argv[i + 1];
        if (strncmp(argv[i], key, kl) == 0 && argv[i][kl] == '=') return argv[i] + kl + 1;
    }
    return NULL;
}

static int unknown_options(const char *cmd, int argc, char **argv, const char *const *known) {
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "--", 2) != 0) {
            fprintf(stderr, "flynn %s: unexpected argument %s (see `flynn %s --help`)\n", cmd, argv[i], cmd);
            return 2;
        }
        bool ok = false;
        for (int k = 0; known[k] && !ok; k++) {
            size_t kl = strlen(known[k]);
            ok = strncmp(argv[i], known[k], kl) == 0 && (argv[i][kl] == 0 || argv[i][kl] == '=');
            if (ok && argv[i][kl] == 0 && strcmp(known[k], "--json") != 0) i++; /* skip its value */
        }
        if (!ok) {
            fprintf(stderr, "flynn %s: unknown option %s (see `flynn %s --help`)\n", cmd, argv[i], cmd);
            return 2;
        }
    }
    return 0;
}

static void versions(const fl_gpu_state *s, char *out, size_t len) {
    const fl_cuda_report *r = &s->rep;
    snprintf(out, len, "driver supports CUDA %d.%d, CUDA runtime %d.%d (static), cuBLAS %d.%d.%d, cuDNN %zu.%zu.%zu",
             s->driver_cuda / 1000, (s->driver_cuda % 1000) / 10, r->runtime_version / 1000,
             (r->runtime_version % 1000) / 10, r->cublas_version / 10000, (r->cublas_version % 10000) / 100,
             r->cublas_version % 100, r->cudnn_version / 10000, (r->cudnn_version % 10000) / 100,
             r->cudnn_version % 100);
}

/* Which plugin and libraries the loader took, and why (devices and doctor). */
static void json_choice(const fl_gpu_state *s) {
    printf("\"environment\": {\"driver\": ");
    flynn_json_str(stdout, s->driver_kind);
    printf(", \"driver_module\": ");
    flynn_json_str(stdout, s->driver_module);
    printf(", \"container\": ");
    flynn_json_str(stdout, s->container);
    printf("}, \"plugin\": {\"cuda_major\": %d, \"file\": ", s->plugin_cuda);
    flynn_json_str(stdout, s->plugin_file);
    printf(", \"why\": ");
    flynn_json_str(stdout, s->plugin_choice);
    printf(", \"libcuda\": ");
    flynn_json_str(stdout, s->libcuda_file);
    printf(", \"cublas\": ");
    flynn_json_str(stdout, s->cublas_file);
    printf(", \"cudnn\": ");
    flynn_json_str(stdout, s->cudnn_file);
    printf("}, ");
}

/* ------------------------------------------------------------- devices */

/* The --help text of `flynn devices`. */
static void usage_devices(void) {
    printf("usage: flynn devices [--json]\n\n"
           "Lists every CUDA device as the CUDA sample deviceQuery does (name, compute\n"
           "capability, multiprocessors and cores, clocks, memory, bus width and peak\n"
           "bandwidth, caches, limits, ECC, PCI ids, UUID, copy engines), the driver, runtime,\n"
           "cuBLAS and cuDNN versions, and whether this build of flynn can run on it; then\n"
           "which CUDA plugin was taken (libflynn_cuda.so, CUDA 13, or libflynn_cuda12.so,\n"
           "CUDA 12) and why, and the cuBLAS, cuDNN and libcuda files loaded. Then every\n"
           "OpenCL device of every installed platform (name, vendor, type, driver, OpenCL\n"
           "version, compute units, memory, fp64/fp16/subgroups) and whether flynn runs on it\n"
           "(--device opencl:N takes device N; --device auto takes an OpenCL GPU, never a CPU one).\n"
           "Ends with Result = PASS or Result = FAIL (exit code 0 or 1): PASS when flynn can\n"
           "use a CUDA device or an OpenCL GPU.\n");
}

/* What the device query found: every device's facts, or why there are none. */
typedef struct devices_query {
    const fl_gpu_state *s;
    int n;                      /* devices the plugin reports */
    fl_cuda_device_info *info;  /* n of them (owned) */
    bool ok;
    char why[1536];             /* why not ok */
    char ver[256];              /* the versions line, with a backend */
} devices_query;

/* Asks the CUDA plugin for every device; q->ok false with q->why when it cannot. */
static void devices_run_query(devices_query *q) {
    const fl_gpu_state *s = q->s = fl_gpu_state_get();
    q->n = s->tools ? s->tools->device_count() : 0;
    q->info = calloc((size_t)(q->n > 0 ? q->n : 1), sizeof *q->info);
    q->ok = s->backend && s->tools && q->n > 0 && q->info;
    q->why[0] = q->ver[0] = 0;
    if (!q->ok)
        snprintf(q->why, sizeof q->why, "%s", s->reason[0] ? s->reason : "the CUDA plugin offers no device query");
    for (int i = 0; q->ok && i < q->n; i++)
        if (s->tools->device_info(i, &q->info[i], q->why, sizeof q->why) != 0) q->ok = false;
    if (s->backend) versions(s, q->ver, sizeof q->ver);
}

/* One device as a JSON object. */
static void devices_json_device(const fl_cuda_device_info *d, bool first) {
    printf("%s{\"index\": %d, \"name\": ", first ? "" : ", ", d->index);
    flynn_json_str(stdout, d->name);
    printf(", \"uuid\": \"%s\", \"compute_capability\": \"%d.%d\", \"multiprocessors\": %d, \"cuda_cores\": %d, "
           "\"clock_mhz\": %.0f, \"memory_clock_mhz\": %.0f, \"memory_bus_width_bits\": %d, "
           "\"peak_bandwidth_gbs\": %.1f, \"total_memory_bytes\": %zu, \"free_memory_bytes\": %zu, "
           "\"l2_cache_bytes\": %d, \"shared_memory_per_block_bytes\": %zu, "
           "\"shared_memory_per_multiprocessor_bytes\": %zu, \"registers_per_block\": %d, "
           "\"registers_per_multiprocessor\": %d, \"warp_size\": %d, \"max_threads_per_block\": %d, "
           "\"max_threads_per_multiprocessor\": %d, \"max_block\": [%d, %d, %d], \"max_grid\": [%d, %d, %d], "
           "\"ecc\": %s, \"pci\": \"%04x:%02x:%02x\", \"copy_engines\": %d, \"runnable\": %s, \"runnable_detail\": ",
           d->uuid, d->cc_major, d->cc_minor, d->multiprocessors, d->cuda_cores, d->clock_khz / 1000.0,
           d->mem_clock_khz / 1000.0, d->mem_bus_width, d->peak_bandwidth_gbs, d->total_mem, d->free_mem,
           d->l2_bytes, d->shared_per_block, d->shared_per_sm, d->regs_per_block, d->regs_per_sm, d->warp_size,
           d->max_threads_per_block, d->max_threads_per_sm, d->max_block[0], d->max_block[1], d->max_block[2],
           d->max_grid[0], d->max_grid[1], d->max_grid[2], d->ecc ? "true" : "false", d->pci_domain, d->pci_bus,
           d->pci_device, d->async_engines, d->runnable ? "true" : "false");
    flynn_json_str(stdout, d->runnable_why);
    printf("}");
}

/* --json: the query's result in the form of docs/device-tools.md. */
static void devices_print_json(const devices_query *q, bool ocl) {
    const fl_gpu_state *s = q->s;
    printf("{\"tool\": \"flynn devices\", \"version\": \"%s\", \"result\": \"%s\", ", fl_version(),
           q->ok || ocl ? "PASS" : "FAIL");
    printf("\"reason\": ");
    flynn_json_str(stdout, q->ok ? "" : q->why);
    printf(", \"driver_cuda_version\": %d, \"runtime_version\": %d, \"cublas_version\": %d, \"cudnn_version\": %zu, ",
           s->driver_cuda, s->rep.runtime_version, s->rep.cublas_version, s->rep.cudnn_version);
    json_choice(s);
    printf("\"built_for\": ");
    flynn_json_str(stdout, s->rep.archs);
    printf(", \"devices\": [");
    for (int i = 0; q->ok && i < q->n; i++) devices_json_device(&q->info[i], i == 0);
    printf("], ");
    flynn_opencl_devices_json();
    printf("}\n");
}

/* One device as deviceQuery prints it. */
static void devices_print_device(int i, const fl_cuda_device_info *d) {
    printf("\nDevice %d: \"%s\"\n", i, d->name);
    printf("  CUDA capability:                              %d.%d\n", d->cc_major, d->cc_minor);
    printf("  Multiprocessors, CUDA cores:                  %d, %d\n", d->multiprocessors, d->cuda_cores);
    printf("  GPU max clock rate:                           %.0f MHz\n", d->clock_khz / 1000.0);
    printf("  Memory clock rate:                            %.0f MHz\n", d->mem_clock_khz / 1000.0);
    printf("  Memory bus width:                             %d-bit\n", d->mem_bus_width);
    printf("  Peak memory bandwidth:                        %.1f GB/s\n", d->peak_bandwidth_gbs);
    printf("  Global memory:                                %.0f MiB (%.0f MiB free)\n",
           d->total_mem / 1048576.0, d->free_mem / 1048576.0);
    printf("  L2 cache size:                                %d bytes\n", d->l2_bytes);
    printf("  Shared memory per block / multiprocessor:     %zu / %zu bytes\n", d->shared_per_block,
           d->shared_per_sm);
    printf("  Registers per block / multiprocessor:         %d / %d\n", d->regs_per_block, d->regs_per_sm);
    printf("  Warp size:                                    %d\n", d->warp_size);
    printf("  Max threads per block / multiprocessor:       %d / %d\n", d->max_threads_per_block,
           d->max_threads_per_sm);
    printf("  Max block dimensions:                         (%d, %d, %d)\n", d->max_block[0],
           d->max_block[1], d->max_block[2]);
    printf("  Max grid dimensions:                          (%d, %d, %d)\n", d->max_grid[0], d->max_grid[1],
           d->max_grid[2]);
    printf("  Concurrent copy engines:                      %d\n", d->async_engines);
    printf("  ECC:                                          %s\n", d->ecc ? "enabled" : "disabled");
    printf("  PCI domain / bus / device:                    %d / %d / %d\n", d->pci_domain, d->pci_bus,
           d->pci_device);
    printf("  UUID:                                         %s\n", d->uuid);
    printf("  flynn can run here:                           %s (%s)\n", d->runnable ? "yes" : "NO",
           d->runnable_why);
}

/* The deviceQuery-style listing, then the OpenCL devices; a CUDA device flynn cannot run on turns the CUDA
 * half to FAIL (q->ok false); an OpenCL GPU flynn can use (ocl) makes the result PASS all the same. */
static void devices_print_text(devices_query *q, bool ocl) {
    const fl_gpu_state *s = q->s;
    printf("flynn devices (deviceQuery)\n\n");
    if (!q->ok) {
        printf("No usable CUDA device: %s\n", q->why);
        printf("(`flynn doctor` checks the install step by step.)\n");
    } else {
        printf("Detected %d CUDA capable device%s; %s\n", q->n, q->n == 1 ? "" : "s", q->ver);
        printf("Plugin: %s (CUDA %d; %s)\n", s->plugin_file, s->plugin_cuda, s->plugin_choice);
        printf("cuBLAS: %s\ncuDNN:  %s\nlibcuda: %s%s%s%s\n", s->cublas_file, s->cudnn_file, s->libcuda_file,
               strcmp(s->driver_kind, "wsl2") == 0 ? " (WSL2)" : "", s->container[0] ? ", in a container: " : "",
               s->container);
        for (int i = 0; i < q->n; i++) {
            devices_print_device(i, &q->info[i]);
            if (!q->info[i].runnable) q->ok = false;
        }
    }
    flynn_opencl_devices_text();
    printf("\nResult = %s\n", q->ok || ocl ? "PASS" : "FAIL");
}

int flynn_cmd_devices(int argc, char **argv) {
    if (has_flag(argc, argv, "--help")) { usage_devices(); return 0; }
    static const char *const known[] = {"--json", NULL};
    int rc = unknown_options("devices", argc, argv, known);
    if (rc) return rc;
    devices_query q;
    devices_run_query(&q);
    const bool ocl = flynn_opencl_gpu_listed(); /* --device auto takes an OpenCL GPU where CUDA is not usable */
    if (has_flag(argc, argv, "--json")) devices_print_json(&q, ocl);
    else devices_print_text(&q, ocl);
    free(q.info);
    return q.ok || ocl ? 0 : 1;
}

/* ----------------------------------------------------------- bandwidth */

void flynn_bw_points_json(const fl_cuda_bw_point *p, int n) {
    for (int i = 0; i < n; i++)
        printf("%s{\"bytes\": %zu, \"host_to_device\": %.2f, \"device_to_host\": %.2f, \"device_to_device\": %.2f}",
               i ? ", " : "", p[i].bytes, p[i].h2d, p[i].d2h, p[i].d2d);
}

void flynn_bw_table(const fl_cuda_bw_point *p, int n, const char *host_copies, const char *device_copies) {
    const char *names[3] = {"Host to Device", "Device to Host", "Device to Device"};
    for (int k = 0; k < 3; k++) {
        printf("\n %s Bandwidth, 1 Device(s)\n %s\n", names[k], k == 2 ? device_copies : host_copies);
        printf("   Transfer Size (Bytes)\tBandwidth(GB/s)\n");
        for (int i = 0; i < n; i++)
            printf("   %-20zu\t%.1f\n", p[i].bytes, k == 0 ? p[i].h2d : k == 1 ? p[i].d2h : p[i].d2d);
    }
}

int flynn_cmd_bandwidth(int argc, char **argv) {
    if (has_flag(argc, argv, "--help")) {
        printf("usage: flynn bandwidth [--json] [--memory pinned|pageable] [--mode quick|range|shmoo]\n"
               "                       [--device N|opencl|opencl:N]\n\n"
               "Measures host-to-device, device-to-host and device-to-device copy bandwidth as the\n"
               "CUDA sample bandwidthTest does: copies timed with CUDA events, several repetitions\n"
               "per size, GB/s = 10^9 bytes/s (device-to-device counts bytes read and written).\n"
               "  quick: 32 MB copies (default); range: 1 MB to 64 MB; shmoo: 1 KB to 64 MB.\n"
               "--device N is CUDA device N; opencl (or opencl:N) measures the OpenCL device that\n"
               "--device opencl takes (blocking copies from and to malloc'ed memory, timed by the host).\n"
               "Ends with Result = PASS or Result = FAIL (exit code 0 or 1).\n");
        return 0;
    }
    static const char *const known[] = {"--json", "--memory", "--mode", "--device", NULL};
    int rc = unknown_options("bandwidth", argc, argv, known);
    if (rc) return rc;
    bool json = has_flag(argc, argv, "--json");
    const char *mem = opt_value(argc, argv, "--memory"), *mode = opt_value(argc, argv, "--mode");
    const char *devs = opt_value(argc, argv, "--device");
    if (!mem) mem = "pinned";
    if (!mode) mode = "quick";
    if (strcmp(mem, "pinned") && strcmp(mem, "pageable")) {
        fprintf(stderr, "flynn bandwidth: --memory wants pinned or pageable, got %s\n", mem);
        return 2;
    }
    size_t sizes[64];
    int ns = 0;
    if (strcmp(mode, "quick") == 0) sizes[ns++] = 32000000;
    else if (strcmp(mode, "range") == 0)
        for (size_t b = 1 << 20; b <= (size_t)64 << 20; b <<= 1) sizes[ns++] = b;
    else if (strcmp(mode, "shmoo") == 0)
        for (size_t b = 1024; b <= (size_t)64 << 20 && ns < 64; b = b < 65536 ? b * 2 : b + b / 2) sizes[ns++] = b;
    else {
        fprintf(stderr, "flynn bandwidth: --mode wants quick, range or shmoo, got %s\n", mode);
        return 2;
    }
    if (devs && strncmp(devs, "opencl", 6) == 0) {
        if (devs[6] == ':' && devs[7] >= '0' && devs[7] <= '9') setenv("FLYNN_OPENCL_DEVICE", devs + 7, 1);
        else if (devs[6]) {
            fprintf(stderr, "flynn bandwidth: --device wants N, opencl or opencl:N, got %s\n", devs);
            return 2;
        }
        return flynn_opencl_bandwidth(sizes, ns, mode, json);
    }
    int dev = devs ? atoi(devs) : 0;
    const fl_gpu_state *s = fl_gpu_state_get();
    fl_cuda_bw_point pts[64];
    char why[1536] = "";
    bool ok = s->backend && s->tools;
    if (!ok) snprintf(why, sizeof why, "%s", s->reason[0] ? s->reason : "the CUDA plugin offers no bandwidth test");
    if (ok && (dev < 0 || dev >= s->tools->device_count())) {
        snprintf(why, sizeof why, "--device %d: there are %d CUDA devices", dev, s->tools->device_count());
        ok = false;
    }
    if (ok && s->tools->bandwidth(dev, strcmp(mem, "pinned") == 0, sizes, ns, 10, pts, why, sizeof why) != 0) ok = false;
    for (int i = 0; ok && i < ns; i++)
        if (!(pts[i].h2d > 0 && pts[i].d2h > 0 && pts[i].d2d > 0)) {
            snprintf(why, sizeof why, "a copy of %zu bytes measured no bandwidth", pts[i].bytes);
            ok = false;
        }
    if (json) {
        printf("{\"tool\": \"flynn bandwidth\", \"version\": \"%s\", \"result\": \"%s\", \"reason\": ", fl_version(),
               ok ? "PASS" : "FAIL");
        flynn_json_str(stdout, ok ? "" : why);
        printf(", \"device\": %d, \"memory\": \"%s\", \"mode\": \"%s\", \"unit\": \"GB/s\", \"points\": [", dev, mem, mode);
        if (ok) flynn_bw_points_json(pts, ns);
        printf("]}\n");
    } else {
        printf("flynn bandwidth (bandwidthTest)\n\n");
        if (!ok) printf("%s\n", why);
        else {
            printf(" Device %d: %s\n %s Mode\n", dev, s->rep.device_name, mode);
            flynn_bw_table(pts, ns, strcmp(mem, "pinned") == 0 ? "PINNED Memory Transfers" : "PAGEABLE Memory Transfers",
                           " Memory Transfers");
        }
        printf("\nResult = %s\n", ok ? "PASS" : "FAIL");
    }
    return ok ? 0 : 1;
}

/* -------------------------------------------------------------- doctor */

/* The --help text of `flynn doctor`. */
static void usage_doctor(void) {
    printf("usage: flynn doctor [--json]\n\n"
           "Checks, in order, everything flynn needs to train on an NVIDIA GPU: the kernel\n"
           "driver, libcuda and the CUDA version it supports, cuBLAS and cuDNN (which files),\n"
           "the flynn CUDA plugin, the CUDA runtime, a device, its compute capability against\n"
           "this build, the cuDNN version, free GPU memory, and a small convolution and matrix\n"
           "product on the GPU compared with the CPU. Each check prints PASS, FAIL or SKIP with\n"
           "what it found; the first failure says what to do. Exit code 1 if any check fails.\n\n"
           "flynn has two CUDA plugins: libflynn_cuda.so (CUDA 13, NVIDIA driver 580 or newer)\n"
           "and libflynn_cuda12.so (CUDA 12, driver 525 or newer). The driver_version check\n"
           "says which one the driver's CUDA version selects, and why; cublas and cudnn say\n"
           "which files of that CUDA version were taken (system, CUDA toolkit, pip wheels in\n"
           "any virtualenv or conda environment, or $FLYNN_CUDA_LIB_PATH). Under WSL2 the\n"
           "driver is the Windows one (/dev/dxg); in a container without the GPU, the remedy\n"
           "is `docker run --gpus all`. Exit codes: 0 all PASS, 1 a check failed, 2 usage.\n"
           "Two last lines (not checks) say whether Open MPI is there for `mpirun -np N flynn\n"
           "train` (data-parallel training, docs/scale-out.md) and NCCL for the same on GPUs,\n"
           "with their versions.\n\n"
           "Then the OpenCL checks (lettered): the flynn OpenCL plugin, the ICD loader, CLBlast,\n"
           "an installed platform, the device --device opencl takes (FLYNN_OPENCL_DEVICE picks\n"
           "one), the extensions flynn's kernels need, building them, and a test kernel. The\n"
           "result is PASS when CUDA passes, or when OpenCL passes on a GPU (--device auto then\n"
           "trains there); an OpenCL CPU device (PoCL) serves --device opencl only.\n");
}

#define DOCTOR_MAX_CHECKS (FL_GPU_MAX_CHECKS + 4)

/* Everything the doctor prints: the checks in order, the verdict, and the two optional libraries. */
typedef struct doctor_report {
    fl_gpu_check all[DOCTOR_MAX_CHECKS];
    int n;
    bool ok;            /* no check failed */
    const char *next;   /* the first failure's remedy, or what to do now that all pass */
    bool have_mpi, have_nccl;
    char mpi[512], nccl[1024];
    fl_gpu_check ocl[FL_OPENCL_CHECKS]; /* the OpenCL checks (devtools_opencl.c), a section of their own */
    bool ocl_ok;
    char ocl_gpu[256];                  /* the OpenCL GPU --device auto would take ("" none) */
    char ocl_next[512];
} doctor_report;

/* The "memory" check: enough free GPU memory. */
static void doctor_check_memory(fl_gpu_check *c) {
    c->status = fl_gpu_check_memory(c->detail, sizeof c->detail, c->remedy, sizeof c->remedy);
}

/* The "hello" check: a small convolution and matrix product on the GPU against the CPU. */
static void doctor_check_hello(fl_gpu_check *c) {
    c->status = fl_gpu_check_hello(c->detail, sizeof c->detail);
    if (c->status == FL_GPU_FAIL)
        snprintf(c->remedy, sizeof c->remedy, "the GPU computes wrong results or fails: update the driver, and "
                 "report it with `flynn doctor --json`");
}

/* The doctor's own checks, run after the loader's (src/device/gpu.c) when the GPU is usable, in this order. */
static const struct doctor_gpu_check {
    const char *name;
    void (*run)(fl_gpu_check *c);
} doctor_gpu_checks[] = {
    {"memory", doctor_check_memory},
    {"hello", doctor_check_hello},
};

/* The next free entry of the report, cleared and named. */
static fl_gpu_check *doctor_add_check(doctor_report *r, const char *name) {
    fl_gpu_check *c = &r->all[r->n++];
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    return c;
}

/* The loader's checks, then the doctor's own on a usable GPU, then SKIP for every check never reached. */
static void doctor_run_checks(const fl_gpu_state *s, doctor_report *r) {
    r->n = 0;
    for (int i = 0; i < s->nchecks; i++) r->all[r->n++] = s->checks[i];
    for (size_t k = 0; s->backend && k < sizeof doctor_gpu_checks / sizeof doctor_gpu_checks[0]; k++)
        doctor_gpu_checks[k].run(doctor_add_check(r, doctor_gpu_checks[k].name));
    for (int k = 0; k < fl_gpu_check_count; k++) {
        bool seen = false;
        for (int i = 0; i < r->n; i++) seen |= strcmp(r->all[i].name, fl_gpu_check_order[k]) == 0;
        if (!seen && r->n < DOCTOR_MAX_CHECKS) {
            fl_gpu_check *c = doctor_add_check(r, fl_gpu_check_order[k]);
            c->status = FL_GPU_SKIP;
            snprintf(c->detail, sizeof c->detail, "not checked: an earlier check failed");
        }
    }
}

/* PASS when no CUDA check failed, or when every OpenCL check passed on a GPU (--device auto takes it); the
 * next step is then "nothing", else the first CUDA failure's remedy (or its detail). */
static void doctor_verdict(doctor_report *r) {
    r->ok = true;
    r->next = "";
    for (int i = 0; i < r->n; i++)
        if (r->all[i].status == FL_GPU_FAIL) {
            if (r->ok) r->next = r->all[i].remedy[0] ? r->all[i].remedy : r->all[i].detail;
            r->ok = false;
        }
    if (r->ok) r->next = "nothing: `flynn train --device auto` will train on this GPU";
    else if (r->ocl_ok && r->ocl_gpu[0]) {
        snprintf(r->ocl_next, sizeof r->ocl_next, "nothing: `flynn train --device auto` will train on the OpenCL "
                 "GPU %.200s (CUDA is not usable; its fix: %.200s)", r->ocl_gpu, r->next);
        r->next = r->ocl_next;
        r->ok = true;
    }
}

/* Optional, not checks (the result is about the GPU): MPI for multi-process training, NCCL for it on GPUs. */
static void doctor_probe_optional(doctor_report *r) {
    r->have_mpi = fl_dist_probe(r->mpi, sizeof r->mpi);
    size_t l = strlen(r->mpi);
    if (r->have_mpi)
        snprintf(r->mpi + l, sizeof r->mpi - l,
                 "; data-parallel training: mpirun -np N flynn train ... (docs/scale-out.md)");
    else
        snprintf(r->mpi + l, sizeof r->mpi - l, "; needed only to train over several processes");
    r->have_nccl = fl_nccl_probe(r->nccl, sizeof r->nccl);
    l = strlen(r->nccl);
    snprintf(r->nccl + l, sizeof r->nccl - l, "%s",
             r->have_nccl ? "; data-parallel training on GPUs: mpirun -np N flynn train --device gpu ... "
                            "(one rank per GPU)"
                          : "; needed only to train on GPUs over several processes (pip install nvidia-nccl-cu12 or "
                            "-cu13, or FLYNN_NCCL_LIB=/path/to/libnccl.so.2)");
}

static const char *const doctor_status_name[3] = {"PASS", "FAIL", "SKIP"};

/* n checks as JSON objects, comma-separated */
static void json_checks(const fl_gpu_check *c, int n) {
    for (int i = 0; i < n; i++) {
        printf("%s{\"name\": \"%s\", \"status\": \"%s\", \"detail\": ", i ? ", " : "", c[i].name,
               doctor_status_name[c[i].status]);
        flynn_json_str(stdout, c[i].detail);
        printf(", \"remedy\": ");
        flynn_json_str(stdout, c[i].remedy);
        printf("}");
    }
}

/* one check's line after its label (numbered for CUDA, lettered for OpenCL), and its fix when it failed */
__attribute__((format(printf, 2, 3))) static void text_check(const fl_gpu_check *c, const char *label, ...) {
    va_list ap;
    va_start(ap, label);
    vprintf(label, ap);
    va_end(ap);
    printf("%-20s %s  %s\n", c->name, doctor_status_name[c->status], c->detail);
    if (c->status == FL_GPU_FAIL && c->remedy[0]) printf("    %-20s       fix: %s\n", "", c->remedy);
}

/* --json: the report in the form of docs/device-tools.md. */
static void doctor_print_json(const fl_gpu_state *s, const doctor_report *r) {
    printf("{\"tool\": \"flynn doctor\", \"version\": \"%s\", \"result\": \"%s\", ", fl_version(),
           r->ok ? "PASS" : "FAIL");
    json_choice(s);
    printf("\"checks\": [");
    json_checks(r->all, r->n);
    printf("], \"opencl_checks\": [");
    json_checks(r->ocl, FL_OPENCL_CHECKS);
    printf("], \"next_step\": ");
    flynn_json_str(stdout, r->next);
    printf(", \"mpi\": {\"found\": %s, \"detail\": ", r->have_mpi ? "true" : "false");
    flynn_json_str(stdout, r->mpi);
    printf("}, \"nccl\": {\"found\": %s, \"detail\": ", r->have_nccl ? "true" : "false");
    flynn_json_str(stdout, r->nccl);
    printf("}}\n");
}

/* The numbered checks, each failure with its fix, the result, the next step and the optional libraries. */
static void doctor_print_text(const doctor_report *r) {
    printf("flynn doctor: can flynn train on a GPU here?\n\nCUDA (NVIDIA):\n");
    for (int i = 0; i < r->n; i++) text_check(&r->all[i], "%2d. ", i + 1);
    printf("\nOpenCL (any vendor's GPU; a CPU device such as PoCL serves --device opencl only):\n");
    for (int i = 0; i < FL_OPENCL_CHECKS; i++) text_check(&r->ocl[i], " %c. ", 'a' + i);
    printf("\nResult = %s\n", r->ok ? "PASS" : "FAIL");
    printf("Next step: %s\n", r->next);
    printf("\nMPI (optional): %s%s\n", r->have_mpi ? "" : "not found: ", r->mpi);
    printf("NCCL (optional): %s%s\n", r->have_nccl ? "" : "not found: ", r->nccl);
}

int flynn_cmd_doctor(int argc, char **argv) {
    if (has_flag(argc, argv, "--help")) { usage_doctor(); return 0; }
    static const char *const known[] = {"--json", NULL};
    int rc = unknown_options("doctor", argc, argv, known);
    if (rc) return rc;
    const fl_gpu_state *s = fl_gpu_state_get();
    doctor_report r;
    doctor_run_checks(s, &r);
    r.ocl_ok = flynn_opencl_doctor(r.ocl, r.ocl_gpu, sizeof r.ocl_gpu);
    doctor_verdict(&r);
    doctor_probe_optional(&r);
    if (has_flag(argc, argv, "--json")) doctor_print_json(s, &r);
    else doctor_print_text(&r);
    return r.ok ? 0 : 1;
}
