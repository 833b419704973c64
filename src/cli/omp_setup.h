/* omp_setup.h — the OpenMP start of the `flynn` command (omp_setup.c). */
#ifndef FLYNN_CLI_OMP_SETUP_H
#define FLYNN_CLI_OMP_SETUP_H

#include <stdbool.h>
#include <stdint.h>

/* Chooses how OpenMP threads wait (and OpenBLAS's core) and executes the
 * program again with that environment; returns where nothing was to set. */
void flynn_omp_setup(char **argv);

/* CPUs that were busy between two /proc/stat texts, over the CPUs whose
 * bits are set in allowed[0..words) (CPU c: bit c % 64 of word c / 64;
 * NULL: all): the busy share of their jiffies times their number; -1 where
 * the texts do not give it. */
double flynn_omp_busy_cpus(const char *before, const char *after, const uint64_t *allowed, int words);

/* Whether `threads` threads may spin before they sleep: the CPUs that the
 * busy ones leave idle hold them all. */
bool flynn_omp_should_spin(double busy_cpus, int cpus, int threads);

#endif
