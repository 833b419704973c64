/*
 * test_nccl_abi.c — src/dist/nccl.c binds NCCL with dlopen and declares the
 * little of its ABI it passes (a 128-byte id, a pointer communicator,
 * ncclFloat32 = 7, ncclSum = 0, ncclSuccess = 0, ncclInProgress = 7):
 * compiled against the CUDA toolkit's nccl.h and linked with its
 * libnccl.so, this holds those numbers to the header, and checks that
 * flynn's loader opens the same library and reads its version (neither
 * needs a GPU). Built only where the toolkit has nccl.h.
 */
#include "check.h"
#include "dist/nccl.h"

#include <nccl.h>
#include <stdio.h>
#include <string.h>

_Static_assert(NCCL_UNIQUE_ID_BYTES == 128 && sizeof(ncclUniqueId) == 128, "ncclUniqueId: nccl.c passes 128 bytes");
_Static_assert(sizeof(ncclComm_t) == sizeof(void *), "ncclComm_t: nccl.c holds a pointer");
_Static_assert(ncclFloat32 == 7 && ncclSum == 0 && ncclSuccess == 0 && ncclInProgress == 7,
               "the enum values nccl.c passes and compares");

int main(void) {
    int v = 0;
    CHECK(ncclGetVersion(&v) == ncclSuccess && v == NCCL_VERSION_CODE); /* linked: the header's library */
    char buf[1024], want[64];
    CHECK_MSG(fl_nccl_probe(buf, sizeof buf), "flynn's loader: %s", buf);
    snprintf(want, sizeof want, "NCCL %d.%d.%d (", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
    CHECK_MSG(strncmp(buf, want, strlen(want)) == 0, "flynn's loader found '%s', the header is %s", buf, want);
    printf("%s\n", buf);
    return check_report("test_nccl_abi");
}
