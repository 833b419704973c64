/*
 * omp_setup.c — how the `flynn` command starts the OpenMP runtime: threads
 * that wait passively (sleep in the kernel) between parallel regions,
 * unless the user chose otherwise.
 *
 * libgomp's default is to spin for a while (GOMP_SPINCOUNT, 300,000 rounds)
 * before it sleeps. On a machine whose cores other processes also use, a
 * spinning thread takes the core from the thread that has the work, and
 * every barrier waits for a descheduled thread: measured on the 2-core test
 * machine at a load average of ~8, transformer_text trained at 62-67
 * samples/s with the default and 353-424 with OMP_WAIT_POLICY=passive
 * (GOMP_SPINCOUNT 1,000: 286-367; 10,000: 240-285); docs/performance.md.
 *
 * The runtime reads its environment once, when libgomp is loaded, before
 * main() runs, so the setting cannot be made from inside: when neither
 * OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set, flynn sets
 * OMP_WAIT_POLICY=passive and executes itself again (/proc/self/exe, the
 * same arguments; FLYNN_OMP_SETUP=1 marks the second start). Set
 * OMP_WAIT_POLICY=active to get the spinning back. A program that links
 * libflynn sets the variable itself, before it starts (docs/performance.md).
 *
 * The same start sets OPENBLAS_CORETYPE when OpenBLAS chose kernels older
 * than the CPU runs (fl_blas_info: an OpenBLAS that does not know the CPU
 * falls back to SSE3) and the user set none; FLYNN_BLAS_FALLBACK keeps the
 * core OpenBLAS had chosen, for the bench's header.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <flynn/flynn.h>

#include <stdlib.h>
#include <unistd.h>

void flynn_omp_setup(char **argv);

void flynn_omp_setup(char **argv) {
    if (getenv("FLYNN_OMP_SETUP")) return;
    bool omp = !getenv("OMP_WAIT_POLICY") && !getenv("GOMP_SPINCOUNT");
    fl_blas_info bi;
    fl_blas_info_get(&bi);
    bool blas = bi.weaker && !getenv("OPENBLAS_CORETYPE");
    if (!omp && !blas) return;
    if (omp && setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
    if (blas && (setenv("OPENBLAS_CORETYPE", bi.best_core, 1) != 0 || setenv("FLYNN_BLAS_FALLBACK", bi.core, 1) != 0))
        return;
    if (setenv("FLYNN_OMP_SETUP", "1", 1) == 0) execv("/proc/self/exe", argv);
    /* no exec (no /proc): carry on with the runtimes as they started */
    if (omp) unsetenv("OMP_WAIT_POLICY");
    if (blas) { unsetenv("OPENBLAS_CORETYPE"); unsetenv("FLYNN_BLAS_FALLBACK"); }
    unsetenv("FLYNN_OMP_SETUP");
}
