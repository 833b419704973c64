/*
 * devtools.h — the device commands of the `flynn` tool (devtools.c).
 */
#ifndef FLYNN_CLI_DEVTOOLS_H
#define FLYNN_CLI_DEVTOOLS_H

#include <flynn/flynn.h>
#include <stdbool.h>
#include <stdio.h>

#include "device/gpu.h"

int flynn_cmd_devices(int argc, char **argv);
int flynn_cmd_bandwidth(int argc, char **argv);
int flynn_cmd_doctor(int argc, char **argv);

/* a JSON string; a bandwidth test's points as JSON objects and as bandwidthTest's three tables, with the
 * line that names the host and the device copies (devtools.c) */
void flynn_json_str(FILE *f, const char *s);
void flynn_bw_points_json(const fl_cuda_bw_point *p, int n);
void flynn_bw_table(const fl_cuda_bw_point *p, int n, const char *host_copies, const char *device_copies);

/* the OpenCL half (devtools_opencl.c): the device list as text or as the JSON member "opencl": {...};
 * whether it lists a GPU flynn can run on; the bandwidth test on the device --device opencl takes; the
 * doctor's OpenCL checks (FL_OPENCL_CHECKS of them into checks; true when all pass, gpu then names the
 * device if it is a GPU) */
void flynn_opencl_devices_text(void);
void flynn_opencl_devices_json(void);
bool flynn_opencl_gpu_listed(void);
int flynn_opencl_bandwidth(const size_t *sizes, int ns, const char *mode, bool json);
bool flynn_opencl_doctor(fl_gpu_check *checks, char *gpu, size_t len);

#endif
