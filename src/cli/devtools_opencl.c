/*
 * devtools_opencl.c — the OpenCL half of `flynn devices`, `flynn bandwidth --device opencl` and `flynn
 * doctor` (devtools.c prints the CUDA half and calls these): every OpenCL platform's devices as clinfo
 * would summarize them, the copy bandwidth on the device that --device opencl takes, and the doctor's
 * OpenCL checks (src/device/opencl.c). The device list needs no device opened; bandwidth and the doctor
 * open one (its kernels are built, or read from the cache).
 */
#include "devtools.h"

#include "device/opencl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The device list from the plugin; n < 0 with why when there is none to list. */
typedef struct opencl_list {
    int n;
    fl_opencl_device_info *info;
    char why[2048];
} opencl_list;

static void list_devices(opencl_list *l) {
    const fl_opencl_state *s = fl_opencl_plugin_get();
    l->n = -1;
    l->info = NULL;
    l->why[0] = 0;
    if (!s->tools) {
        snprintf(l->why, sizeof l->why, "%s", s->reason);
        return;
    }
    int n = s->tools->device_count();
    if (n < 0) {
        snprintf(l->why, sizeof l->why, "no OpenCL platform is installed (no ICD in /etc/OpenCL/vendors): install "
                 "your GPU's OpenCL driver (nvidia-opencl-icd, mesa-opencl-icd, intel-opencl-icd) or pocl-opencl-icd");
        return;
    }
    l->info = calloc((size_t)(n > 0 ? n : 1), sizeof *l->info);
    if (!l->info) { snprintf(l->why, sizeof l->why, "out of memory"); return; }
    l->n = n;
    for (int i = 0; i < n; i++)
        if (s->tools->device_info(i, &l->info[i], l->why, sizeof l->why) != 0) {
            l->n = -1;
            return;
        }
}

/* whether flynn's kernels can run on d (what they need: cl_khr_fp64) and whether --device auto takes it */
static const char *runnable(const fl_opencl_device_info *d) {
    if (!d->fp64) return "NO (it lacks cl_khr_fp64, which flynn's kernels need)";
    return d->is_gpu ? "yes (--device auto takes it when CUDA is not usable)"
                     : "with --device opencl (a CPU device: --device auto never takes it)";
}

bool flynn_opencl_gpu_listed(void) {
    opencl_list l;
    list_devices(&l);
    bool any = false;
    for (int i = 0; i < l.n; i++) any |= l.info[i].is_gpu && l.info[i].fp64;
    free(l.info);
    return any;
}

static void print_device(const fl_opencl_device_info *d) {
    printf("\nOpenCL device %d: \"%s\"\n", d->index, d->name);
    printf("  Platform:                                     %s (%s)\n", d->platform, d->platform_version);
    printf("  Vendor, type:                                 %s, %s\n", d->vendor, d->is_gpu ? "GPU" : "CPU");
    printf("  Driver, OpenCL, OpenCL C:                     %s, %s, %s\n", d->driver, d->version, d->c_version);
    printf("  Compute units, max clock:                     %d, %d MHz\n", d->compute_units, d->clock_mhz);
    printf("  Global memory, largest allocation:            %.0f MiB, %.0f MiB\n", d->global_mem / 1048576.0,
           d->max_alloc / 1048576.0);
    printf("  Local memory, largest work-group:             %zu bytes, %zu\n", d->local_mem, d->max_work_group);
    printf("  fp64, fp16, subgroups:                        %s, %s, %s\n", d->fp64 ? "yes" : "no",
           d->fp16 ? "yes" : "no", d->subgroups ? "yes" : "no");
    printf("  flynn can run here:                           %s\n", runnable(d));
}

void flynn_opencl_devices_text(void) {
    opencl_list l;
    list_devices(&l);
    printf("\n---- OpenCL (any vendor's GPU; libflynn_opencl.so)\n");
    if (l.n < 0) printf("No OpenCL device: %s\n", l.why);
    else {
        printf("Detected %d OpenCL device%s (plugin %s)\n", l.n, l.n == 1 ? "" : "s", fl_opencl_plugin_get()->plugin_file);
        for (int i = 0; i < l.n; i++) print_device(&l.info[i]);
    }
    free(l.info);
}

void flynn_opencl_devices_json(void) {
    opencl_list l;
    list_devices(&l);
    printf("\"opencl\": {\"reason\": ");
    flynn_json_str(stdout, l.n < 0 ? l.why : "");
    printf(", \"plugin\": ");
    flynn_json_str(stdout, fl_opencl_plugin_get()->plugin_file);
    printf(", \"devices\": [");
    for (int i = 0; i < l.n; i++) {
        const fl_opencl_device_info *d = &l.info[i];
        printf("%s{\"index\": %d, \"name\": ", i ? ", " : "", d->index);
        flynn_json_str(stdout, d->name);
        printf(", \"platform\": ");
        flynn_json_str(stdout, d->platform);
        printf(", \"vendor\": ");
        flynn_json_str(stdout, d->vendor);
        printf(", \"driver\": ");
        flynn_json_str(stdout, d->driver);
        printf(", \"opencl_version\": ");
        flynn_json_str(stdout, d->version);
        printf(", \"type\": \"%s\", \"compute_units\": %d, \"clock_mhz\": %d, \"global_memory_bytes\": %zu, "
               "\"max_alloc_bytes\": %zu, \"local_memory_bytes\": %zu, \"max_work_group\": %zu, \"fp64\": %s, "
               "\"fp16\": %s, \"subgroups\": %s, \"runnable\": ", d->is_gpu ? "gpu" : "cpu", d->compute_units,
               d->clock_mhz, d->global_mem, d->max_alloc, d->local_mem, d->max_work_group, d->fp64 ? "true" : "false",
               d->fp16 ? "true" : "false", d->subgroups ? "true" : "false");
        flynn_json_str(stdout, runnable(d));
        printf("}");
    }
    printf("]}");
    free(l.info);
}

int flynn_opencl_bandwidth(const size_t *sizes, int ns, const char *mode, bool json) {
    const fl_opencl_state *s = fl_opencl_state_get();
    fl_opencl_bw_point pts[64];
    char why[2048] = "";
    bool ok = s->backend && s->tools;
    if (!ok) snprintf(why, sizeof why, "%s", s->reason);
    if (ok && s->tools->bandwidth(sizes, ns, 10, pts, why, sizeof why) != 0) ok = false;
    for (int i = 0; ok && i < ns; i++)
        if (!(pts[i].h2d > 0 && pts[i].d2h > 0 && pts[i].d2d > 0)) {
            snprintf(why, sizeof why, "a copy of %zu bytes measured no bandwidth", pts[i].bytes);
            ok = false;
        }
    const fl_opencl_device_info *d = &s->rep.dev;
    if (json) {
        printf("{\"tool\": \"flynn bandwidth\", \"version\": \"%s\", \"result\": \"%s\", \"reason\": ", fl_version(),
               ok ? "PASS" : "FAIL");
        flynn_json_str(stdout, ok ? "" : why);
        printf(", \"device\": \"opencl:%d\", \"name\": ", d->index);
        flynn_json_str(stdout, ok ? d->name : "");
        printf(", \"memory\": \"pageable\", \"mode\": \"%s\", \"unit\": \"GB/s\", \"points\": [", mode);
        if (ok) flynn_bw_points_json(pts, ns);
        printf("]}\n");
        return ok ? 0 : 1;
    }
    printf("flynn bandwidth (bandwidthTest, OpenCL)\n\n");
    if (!ok) printf("%s\n", why);
    else {
        printf(" OpenCL device %d: %s (%s)\n %s Mode\n", d->index, d->name, d->platform, mode);
        flynn_bw_table(pts, ns, "PAGEABLE Memory Transfers (clEnqueueWriteBuffer/ReadBuffer, blocking)", "");
    }
    printf("\nResult = %s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}

bool flynn_opencl_doctor(fl_gpu_check *checks, char *gpu, size_t len) {
    fl_opencl_checks(checks);
    bool ok = true;
    for (int i = 0; i < FL_OPENCL_CHECKS; i++) ok &= checks[i].status == FL_GPU_PASS;
    const fl_opencl_device_info *d = &fl_opencl_state_get()->rep.dev;
    snprintf(gpu, len, "%s", ok && d->is_gpu ? d->name : "");
    return ok;
}
