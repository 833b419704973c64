/*
 * mpi.c — the MPI calls that data-parallel training needs (init, rank,
 * size, all-reduce of float and double buffers, broadcast, barrier, end),
 * bound at run time with dlopen from Open MPI's libmpi.so.40: flynn links
 * no MPI. Open MPI's handles (MPI_COMM_WORLD, MPI_FLOAT, MPI_SUM...) are
 * addresses of exported objects (ompi_mpi_comm_world...), found with dlsym;
 * MPI_IN_PLACE is (void *)1 in its ABI. MPICH's ABI (integer handles) is
 * not supported: an MPICH launch is refused with that message.
 */
#include "dist/mpi.h"
#include "dist/nccl.h"
#include "core/error.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIBMPI "libmpi.so.40"
#define OMPI_IN_PLACE ((void *)1)

typedef void *mpi_handle; /* Open MPI: a pointer to an ompi_* object */

static struct {
    bool tried, on, ended;
    int rank, size;
    void *lib;
    int (*init)(int *, char ***);
    int (*initialized)(int *);
    int (*finalize)(void);
    int (*abort)(mpi_handle, int);
    int (*comm_rank)(mpi_handle, int *);
    int (*comm_size)(mpi_handle, int *);
    int (*allreduce)(const void *, void *, int, mpi_handle, mpi_handle, mpi_handle);
    int (*iallreduce)(const void *, void *, int, mpi_handle, mpi_handle, mpi_handle, void **);
    int (*testall)(int, void **, int *, void *);
    int (*waitall)(int, void **, void *);
    int (*bcast)(void *, int, mpi_handle, int, mpi_handle);
    int (*barrier)(mpi_handle);
    int (*error_string)(int, char *, int *);
    mpi_handle world, f32, f64, byte, sum;
} D = {.rank = 0, .size = 1};

static const char *launch_size(void) {
    const char *s = getenv("OMPI_COMM_WORLD_SIZE");
    return s ? s : getenv("PMI_SIZE");
}

bool fl_dist_launched(void) {
    const char *s = launch_size();
    return s && atoi(s) > 1;
}

int fl_dist_rank(void) { return D.rank; }
int fl_dist_size(void) { return D.size; }

static fl_status mpi_fail(const char *call, int rc) {
    char msg[256] = "";
    int len = 0;
    if (D.error_string) D.error_string(rc, msg, &len);
    return fl_error(FL_ERR_IO, "MPI (rank %d of %d): %s failed with code %d%s%s", D.rank, D.size, call, rc,
                    msg[0] ? ": " : "", msg);
}

static void *sym(const char *name, bool *ok) {
    void *p = dlsym(D.lib, name);
    if (!p) *ok = false;
    return p;
}

static void at_exit(void) { fl_dist_end(0); }

fl_status fl_dist_init(void) {
    if (D.tried) return D.on || !fl_dist_launched() ? FL_OK : fl_error(FL_ERR_UNSUPPORTED, "MPI could not be started (see the first error)");
    D.tried = true;
    if (!fl_dist_launched()) return FL_OK;
    if (!getenv("OMPI_COMM_WORLD_SIZE"))
        return fl_error(FL_ERR_UNSUPPORTED, "MPI: started by a PMI launcher (PMI_SIZE=%s, MPICH or Slurm?), but flynn "
                        "speaks Open MPI's ABI only: launch with Open MPI's mpirun (Debian: apt-get install openmpi-bin "
                        "libopenmpi3)", getenv("PMI_SIZE"));
    D.lib = dlopen(LIBMPI, RTLD_NOW | RTLD_GLOBAL); /* GLOBAL: Open MPI's own plugins need libmpi's symbols */
    if (!D.lib)
        return fl_error(FL_ERR_UNSUPPORTED, "MPI: mpirun started %s ranks, but %s cannot be opened (%s); install Open "
                        "MPI 4 (Debian: apt-get install libopenmpi3, or libopenmpi-dev)", launch_size(), LIBMPI, dlerror());
    bool ok = true;
    *(void **)&D.init = sym("MPI_Init", &ok);
    *(void **)&D.initialized = sym("MPI_Initialized", &ok);
    *(void **)&D.finalize = sym("MPI_Finalize", &ok);
    *(void **)&D.abort = sym("MPI_Abort", &ok);
    *(void **)&D.comm_rank = sym("MPI_Comm_rank", &ok);
    *(void **)&D.comm_size = sym("MPI_Comm_size", &ok);
    *(void **)&D.allreduce = sym("MPI_Allreduce", &ok);
    *(void **)&D.iallreduce = sym("MPI_Iallreduce", &ok);
    *(void **)&D.testall = sym("MPI_Testall", &ok);
    *(void **)&D.waitall = sym("MPI_Waitall", &ok);
    *(void **)&D.bcast = sym("MPI_Bcast", &ok);
    *(void **)&D.barrier = sym("MPI_Barrier", &ok);
    *(void **)&D.error_string = sym("MPI_Error_string", &ok);
    D.world = sym("ompi_mpi_comm_world", &ok);
    D.f32 = sym("ompi_mpi_float", &ok);
    D.f64 = sym("ompi_mpi_double", &ok);
    D.byte = sym("ompi_mpi_byte", &ok);
    D.sum = sym("ompi_mpi_op_sum", &ok);
    if (!ok) {
        dlclose(D.lib);
        D.lib = NULL;
        return fl_error(FL_ERR_UNSUPPORTED, "MPI: %s lacks Open MPI's symbols (MPI_Init, ompi_mpi_comm_world...): is it "
                        "Open MPI 4?", LIBMPI);
    }
    int already = 0, rc;
    D.initialized(&already);
    if (!already && (rc = D.init(NULL, NULL)) != 0) return mpi_fail("MPI_Init", rc);
    if ((rc = D.comm_rank(D.world, &D.rank)) != 0) return mpi_fail("MPI_Comm_rank", rc);
    if ((rc = D.comm_size(D.world, &D.size)) != 0) return mpi_fail("MPI_Comm_size", rc);
    D.on = true;
    if (!already) atexit(at_exit);
    return FL_OK;
}

/* MPI counts are int: larger buffers go in pieces. */
#define CHUNK (1 << 30)

fl_status fl_dist_allreduce_f32(float *buf, int64_t n) {
    if (!D.on) return FL_OK;
    for (int64_t i = 0; i < n; i += CHUNK) {
        int c = (int)(n - i < CHUNK ? n - i : CHUNK);
        int rc = D.allreduce(OMPI_IN_PLACE, buf + i, c, D.f32, D.sum, D.world);
        if (rc) return mpi_fail("MPI_Allreduce (float)", rc);
    }
    return FL_OK;
}

fl_status fl_dist_allreduce_f64(double *buf, int64_t n) {
    if (!D.on) return FL_OK;
    for (int64_t i = 0; i < n; i += CHUNK) {
        int c = (int)(n - i < CHUNK ? n - i : CHUNK);
        int rc = D.allreduce(OMPI_IN_PLACE, buf + i, c, D.f64, D.sum, D.world);
        if (rc) return mpi_fail("MPI_Allreduce (double)", rc);
    }
    return FL_OK;
}

fl_status fl_dist_iallreduce_f32(float *buf, int64_t n, fl_dist_req *req) {
    *req = NULL;
    if (!D.on) return FL_OK;
    if (n > INT_MAX) return fl_error(FL_ERR_INVALID_ARG, "MPI_Iallreduce: %lld elements, at most INT_MAX", (long long)n);
    int rc = D.iallreduce(OMPI_IN_PLACE, buf, (int)n, D.f32, D.sum, D.world, req);
    return rc ? mpi_fail("MPI_Iallreduce (float)", rc) : FL_OK;
}

/* MPI_STATUSES_IGNORE is a null pointer in Open MPI's ABI */
fl_status fl_dist_progress(int n, fl_dist_req *reqs) {
    if (!D.on || n <= 0) return FL_OK;
    int done = 0, rc = D.testall(n, reqs, &done, NULL);
    return rc ? mpi_fail("MPI_Testall", rc) : FL_OK;
}

fl_status fl_dist_wait_all(int n, fl_dist_req *reqs) {
    if (!D.on || n <= 0) return FL_OK;
    int rc = D.waitall(n, reqs, NULL);
    return rc ? mpi_fail("MPI_Waitall", rc) : FL_OK;
}

fl_status fl_dist_bcast(void *buf, size_t bytes, int root) {
    if (!D.on) return FL_OK;
    for (size_t i = 0; i < bytes; i += CHUNK) {
        int c = (int)(bytes - i < CHUNK ? bytes - i : CHUNK);
        int rc = D.bcast((char *)buf + i, c, D.byte, root, D.world);
        if (rc) return mpi_fail("MPI_Bcast", rc);
    }
    return FL_OK;
}

fl_status fl_dist_barrier(void) {
    if (!D.on) return FL_OK;
    int rc = D.barrier(D.world);
    return rc ? mpi_fail("MPI_Barrier", rc) : FL_OK;
}

void fl_dist_end(int status) {
    if (!D.on || D.ended) return;
    fl_nccl_end(status); /* before MPI: a failed rank aborts its communicator rather than wait in it */
    D.ended = true;
    fflush(stdout);
    fflush(stderr);
    if (status == 0) D.finalize();
    else D.abort(D.world, status);
}

bool fl_dist_probe(char *buf, size_t n) {
    void *lib = dlopen(LIBMPI, RTLD_LAZY | RTLD_LOCAL);
    if (!lib) {
        snprintf(buf, n, "%s not found (Debian: apt-get install openmpi-bin libopenmpi3)", LIBMPI);
        return false;
    }
    int (*ver)(char *, int *) = (int (*)(char *, int *))dlsym(lib, "MPI_Get_library_version");
    char v[8192] = "";
    int len = 0;
    if (ver) ver(v, &len); /* callable before MPI_Init (MPI 3.0) */
    v[strcspn(v, ",\n")] = '\0';
    snprintf(buf, n, "%s (%s)", v[0] ? v : "version unknown", LIBMPI);
    dlclose(lib);
    return true;
}
