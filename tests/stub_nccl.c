/*
 * stub_nccl.c — a stand-in libnccl.so.2 for tests/test_mpi.sh on machines
 * without a GPU (loaded through FLYNN_NCCL_LIB): NCCL's entry points as
 * src/dist/nccl.c calls them, the all-reduce done by Open MPI (already
 * initialised by flynn in this process) on the buffers, which the fake
 * device of tests/mpi_fit.c keeps in host memory. It checks what a real
 * NCCL would refuse: ranks that did not get rank 0's id, a wrong data type
 * or operation, calls outside a communicator, groups that do not close.
 * At destroy it writes what it saw to $STUB_NCCL_LOG.<rank>.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct { char internal[128]; } ncclUniqueId;
typedef struct comm { int rank, nranks; } *ncclComm_t;

static struct {
    int (*allreduce)(const void *, void *, int, void *, void *, void *);
    void *world, *f32, *sum;
    long calls, floats, groups, open_groups, bad;
    int rank;
} S = {.rank = -1};

#define MAGIC "flynn-stub-nccl id of pid "

int ncclGetVersion(int *v) { *v = 21805; return 0; }

const char *ncclGetErrorString(int rc) { return rc == 0 ? "no error" : "stub NCCL: invalid usage"; }
const char *ncclGetLastError(ncclComm_t c) { (void)c; return ""; }

int ncclGetUniqueId(ncclUniqueId *id) {
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, MAGIC "%d", (int)getpid());
    return 0;
}

int ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    if (strncmp(id.internal, MAGIC, strlen(MAGIC)) != 0) { /* the id did not come from rank 0's ncclGetUniqueId */
        fprintf(stderr, "stub NCCL: rank %d got an id that no ncclGetUniqueId made\n", rank);
        return 4; /* ncclInvalidArgument */
    }
    void *mpi = dlopen("libmpi.so.40", RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
    if (!mpi) { fprintf(stderr, "stub NCCL: flynn did not load Open MPI\n"); return 3; }
    S.allreduce = (int (*)(const void *, void *, int, void *, void *, void *))dlsym(mpi, "MPI_Allreduce");
    S.world = dlsym(mpi, "ompi_mpi_comm_world");
    S.f32 = dlsym(mpi, "ompi_mpi_float");
    S.sum = dlsym(mpi, "ompi_mpi_op_sum");
    if (!S.allreduce || !S.world || !S.f32 || !S.sum) return 3;
    struct comm *c = calloc(1, sizeof *c);
    c->rank = rank;
    c->nranks = nranks;
    S.rank = rank;
    *comm = c;
    return 0;
}

int ncclAllReduce(const void *send, void *recv, size_t count, int dtype, int op, ncclComm_t comm, void *stream) {
    if (!comm || dtype != 7 || op != 0 || send != recv || !stream) {
        S.bad++;
        return 5;
    }
    S.calls++;
    S.floats += (long)count;
    return S.allreduce((void *)1 /* MPI_IN_PLACE */, recv, (int)count, S.f32, S.sum, S.world) == 0 ? 0 : 2;
}

int ncclGroupStart(void) { S.groups++; S.open_groups++; return 0; }
int ncclGroupEnd(void) { if (S.open_groups-- <= 0) S.bad++; return 0; }
int ncclCommGetAsyncError(ncclComm_t c, int *e) { (void)c; *e = 0; return 0; }

static int finish(ncclComm_t c, const char *how) {
    const char *log = getenv("STUB_NCCL_LOG");
    if (log && c) {
        char p[512];
        snprintf(p, sizeof p, "%s.%d", log, c->rank);
        FILE *f = fopen(p, "w");
        if (f) {
            fprintf(f, "rank %d of %d: %s, %ld all-reduces of %ld floats, %ld groups, %ld bad calls, %ld open groups\n",
                    c->rank, c->nranks, how, S.calls, S.floats, S.groups, S.bad, S.open_groups);
            fclose(f);
        }
    }
    free(c);
    return 0;
}
int ncclCommDestroy(ncclComm_t c) { return finish(c, "destroyed"); }
int ncclCommAbort(ncclComm_t c) { return finish(c, "aborted"); }
