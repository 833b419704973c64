/*
 * nccl.c — the NCCL calls that data-parallel training on GPUs needs,
 * bound at run time with dlopen from libnccl.so.2: flynn links no NCCL and
 * includes no NCCL header. The few types it passes are NCCL's stable ABI
 * (nccl.h since 2.0): ncclUniqueId is 128 bytes, a communicator is a
 * pointer, ncclFloat32 is 7 and ncclSum 0; tests/nccl_abi_check.c holds
 * them against the toolkit's nccl.h wherever that is installed.
 */
#include "dist/nccl.h"
#include "dist/mpi.h"
#include "device/gpu.h"
#include "core/error.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIBNCCL "libnccl.so.2"
#define NCCL_ID_BYTES 128
enum { NCCL_SUCCESS = 0, NCCL_FLOAT32 = 7, NCCL_SUM = 0, NCCL_IN_PROGRESS = 7 };

typedef struct { char internal[NCCL_ID_BYTES]; } nccl_id;
typedef void *nccl_comm;

static struct {
    bool tried, on;
    void *lib;
    char path[600];
    int (*get_version)(int *);
    int (*get_unique_id)(nccl_id *);
    int (*comm_init_rank)(nccl_comm *, int, nccl_id, int);
    int (*all_reduce)(const void *, void *, size_t, int, int, nccl_comm, void *);
    int (*group_start)(void);
    int (*group_end)(void);
    int (*comm_destroy)(nccl_comm);
    int (*comm_abort)(nccl_comm);
    const char *(*error_string)(int);
    const char *(*last_error)(nccl_comm);
    int (*async_error)(nccl_comm, int *);
    nccl_comm comm;
} N;

static const char *const INSTALL =
    "install NCCL for the GPU's CUDA (pip install nvidia-nccl-cu12, or -cu13, into any Python environment flynn "
    "searches; or NVIDIA's libnccl2 package), or set FLYNN_NCCL_LIB to its libnccl.so.2";

static void *try_open(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h) snprintf(N.path, sizeof N.path, "%s", path);
    return h;
}

/* libnccl.so.2 from $FLYNN_NCCL_LIB, else where the CUDA libraries are looked for; NULL with why */
static void *open_lib(char *why, size_t len) {
    const char *over = getenv("FLYNN_NCCL_LIB");
    if (over && *over) {
        void *h = try_open(over);
        if (!h) snprintf(why, len, "FLYNN_NCCL_LIB=%s cannot be opened: %s", over, dlerror());
        return h;
    }
    char dirs[64][512];
    int nd = fl_cuda_search_dirs(dirs, 64);
    for (int i = 0; i < nd; i++) {
        char p[600];
        if (dirs[i][0]) snprintf(p, sizeof p, "%.511s/" LIBNCCL, dirs[i]);
        else snprintf(p, sizeof p, LIBNCCL);
        void *h = try_open(p);
        if (h) return h;
    }
    snprintf(why, len, "%s is not in the system's library path, the CUDA toolkit or a Python environment's "
             "nvidia/nccl wheel (%d places searched)", LIBNCCL, nd);
    return NULL;
}

static bool bind(char *why, size_t len) {
    if (N.lib) return true;
    void *h = open_lib(why, len);
    if (!h) return false;
    struct { const char *name; void **slot; bool need; } s[] = {
        {"ncclGetVersion", (void **)&N.get_version, true},
        {"ncclGetUniqueId", (void **)&N.get_unique_id, true},
        {"ncclCommInitRank", (void **)&N.comm_init_rank, true},
        {"ncclAllReduce", (void **)&N.all_reduce, true},
        {"ncclGroupStart", (void **)&N.group_start, true},
        {"ncclGroupEnd", (void **)&N.group_end, true},
        {"ncclCommDestroy", (void **)&N.comm_destroy, true},
        {"ncclCommAbort", (void **)&N.comm_abort, true},
        {"ncclGetErrorString", (void **)&N.error_string, true},
        {"ncclCommGetAsyncError", (void **)&N.async_error, true},
        {"ncclGetLastError", (void **)&N.last_error, false}, /* NCCL 2.13 and later */
    };
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
        *s[i].slot = dlsym(h, s[i].name);
        if (!*s[i].slot && s[i].need) {
            snprintf(why, len, "%s has no %s (an NCCL older than 2.4?)", N.path, s[i].name);
            dlclose(h);
            return false;
        }
    }
    N.lib = h;
    Dl_info info; /* the file the search found, for messages */
    if (dladdr((void *)N.get_version, &info) && info.dli_fname) snprintf(N.path, sizeof N.path, "%s", info.dli_fname);
    return true;
}

static fl_status nccl_fail(const char *call, int rc) {
    const char *what = N.error_string ? N.error_string(rc) : "";
    const char *last = N.last_error ? N.last_error(N.comm) : NULL;
    return fl_error(FL_ERR_DEVICE, "NCCL (rank %d of %d, %s): %s failed with code %d (%s)%s%s", fl_dist_rank(),
                    fl_dist_size(), N.path, call, rc, what ? what : "?", last && *last ? ": " : "", last ? last : "");
}

fl_status fl_nccl_init(void) {
    if (N.on) return FL_OK;
    if (N.tried) return fl_error(FL_ERR_UNSUPPORTED, "NCCL could not be started (see the first error)");
    N.tried = true;
    if (fl_dist_size() < 2)
        return fl_error(FL_ERR_STATE, "NCCL: one process (start the ranks with mpirun -np N)");
    char why[768] = "";
    double bad = bind(why, sizeof why) ? 0.0 : 1.0;
    /* every rank learns whether all opened it, so that all fail (or go on) together */
    FL_TRY(fl_dist_allreduce_f64(&bad, 1));
    if (bad > 0)
        return fl_error(FL_ERR_UNSUPPORTED, "NCCL, needed to train on GPUs over %d processes: %s%s: %s",
                        fl_dist_size(), why[0] ? why : "another rank could not open it",
                        why[0] ? "" : " (see its message)", INSTALL);
    /* rank 0's id, through MPI; a failure there stops every rank */
    struct { nccl_id id; int rc; } msg;
    memset(&msg, 0, sizeof msg);
    if (fl_dist_rank() == 0) msg.rc = N.get_unique_id(&msg.id);
    FL_TRY(fl_dist_bcast(&msg, sizeof msg, 0));
    if (msg.rc != NCCL_SUCCESS) return nccl_fail("ncclGetUniqueId (on rank 0)", msg.rc);
    int rc = N.comm_init_rank(&N.comm, fl_dist_size(), msg.id, fl_dist_rank());
    double failed = rc != NCCL_SUCCESS ? 1.0 : 0.0;
    fl_status st = fl_dist_allreduce_f64(&failed, 1);
    if (rc != NCCL_SUCCESS) {
        N.comm = NULL;
        return nccl_fail("ncclCommInitRank", rc);
    }
    if (st != FL_OK || failed > 0) {
        N.comm_abort(N.comm);
        N.comm = NULL;
        return st != FL_OK ? st
                           : fl_error(FL_ERR_DEVICE, "NCCL: %.0f rank(s) could not join the communicator (see their "
                                      "messages; two ranks on one GPU are refused by NCCL: one rank per GPU)", failed);
    }
    N.on = true;
    return FL_OK;
}

fl_status fl_nccl_allreduce_f32(float *buf, int64_t n, void *stream) {
    if (!N.on) return fl_error(FL_ERR_STATE, "NCCL is not started");
    int rc = N.all_reduce(buf, buf, (size_t)n, NCCL_FLOAT32, NCCL_SUM, N.comm, stream);
    return rc == NCCL_SUCCESS ? FL_OK : nccl_fail("ncclAllReduce", rc);
}

fl_status fl_nccl_group_begin(void) {
    int rc = N.on ? N.group_start() : NCCL_SUCCESS;
    return rc == NCCL_SUCCESS ? FL_OK : nccl_fail("ncclGroupStart", rc);
}

fl_status fl_nccl_group_end(void) {
    int rc = N.on ? N.group_end() : NCCL_SUCCESS;
    return rc == NCCL_SUCCESS ? FL_OK : nccl_fail("ncclGroupEnd", rc);
}

fl_status fl_nccl_check(void) {
    if (!N.on) return FL_OK;
    int e = NCCL_SUCCESS, rc = N.async_error(N.comm, &e);
    if (rc != NCCL_SUCCESS) return nccl_fail("ncclCommGetAsyncError", rc);
    return e == NCCL_SUCCESS || e == NCCL_IN_PROGRESS ? FL_OK : nccl_fail("a queued reduction", e);
}

void fl_nccl_end(int status) {
    if (!N.on) return;
    N.on = false;
    if (status) N.comm_abort(N.comm);
    else N.comm_destroy(N.comm);
    N.comm = NULL;
}

bool fl_nccl_probe(char *buf, size_t n) {
    char why[768] = "";
    if (!bind(why, sizeof why)) {
        snprintf(buf, n, "%s", why);
        return false;
    }
    int v = 0;
    N.get_version(&v);
    /* 2.9 on: major * 10000 + minor * 100 + patch; before: major * 1000 + minor * 100 + patch */
    int major = v >= 10000 ? v / 10000 : v / 1000, minor = v >= 10000 ? v / 100 % 100 : v / 100 % 10, patch = v % 100;
    snprintf(buf, n, "NCCL %d.%d.%d (%s)", major, minor, patch, N.path);
    return true;
}
