/*
 * omp_setup.c — how the `flynn` command starts the OpenMP runtime: how its
 * threads wait between parallel regions, unless the user chose.
 *
 * libgomp's default is to spin for a while (GOMP_SPINCOUNT, 300,000 rounds)
 * before it sleeps. On a machine whose cores other processes also use, a
 * spinning thread takes the core from the thread that has the work, and
 * every barrier waits for a descheduled thread: measured on the 2-core test
 * machine at a load average of ~8, transformer_text trained at 62-67
 * samples/s with the default and 353-424 with OMP_WAIT_POLICY=passive
 * (GOMP_SPINCOUNT 1,000: 286-367; 10,000: 240-285); docs/performance.md.
 * Passive waiting has its own price on an idle machine: a futex wake-up per
 * parallel region, which at small batches is a large part of a step
 * (transformer_text at batch 32 on an idle 2-core Zen 4: training 3,030-3,294
 * samples/s passive against 4,343-4,694 with GOMP_SPINCOUNT=1000, predict
 * 8,756-9,746 against 14,522-15,796; with one CPU-bound process beside it
 * the order turns: passive 2,778-3,379 / 8,536-10,103, spinning 2,179-2,361
 * / 7,287-7,476).
 *
 * So the commands that compute (train, evaluate, predict, bench) spin
 * 1,000 rounds (tens of microseconds) before they sleep wherever the
 * threads follow the load (fl_cpu_follows_load): between steps, about once
 * a second, flynn runs one thread fewer for each CPU other processes keep
 * busy, so on a busy machine the threads that would wait are gone within a
 * second, and the spin costs nothing there (beside a CPU-bound process,
 * passive and spinning ran at the same speed once the count had dropped:
 * transformer_text training at 32, 6,913-7,082 against 6,976-7,141
 * samples/s). The choice used to rest on /proc/stat read twice, 50 ms
 * apart, at the start: another process's start-up in those 50 ms (a
 * pipeline's next stage) made a whole run wait passively, and
 * EfficientNetB0's predict at batch 1 ran at 219 samples/s instead of
 * ~1,000. That look remains where the threads do not follow the load
 * (FLYNN_FOLLOW_LOAD=0, a cgroup CPU quota): where the CPUs that other
 * processes leave idle hold all of flynn's threads, they spin; otherwise,
 * under MPI (ranks share the cores), or where /proc/stat cannot be read,
 * they wait passively.
 *
 * The runtime reads its environment once, when libgomp is loaded, before
 * main() runs, so the setting cannot be made from inside: when neither
 * OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set, flynn sets one of them and
 * executes itself again (/proc/self/exe, the same arguments;
 * FLYNN_OMP_SETUP=1 marks the second start, FLYNN_OMP_CHOICE says what was
 * chosen and why, for `flynn bench`). Set OMP_WAIT_POLICY (active or
 * passive) or GOMP_SPINCOUNT to choose yourself. A program that links
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

#include "omp_setup.h"
#include "backend/cpu/cpu_load.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double flynn_omp_busy_cpus(const char *before, const char *after, const uint64_t *allowed, int words) {
    unsigned long long b0, s0, t0, b1, s1, t1;
    const int n0 = fl_cpu_stat_jiffies(before, allowed, words, &b0, &s0, &t0);
    const int n1 = fl_cpu_stat_jiffies(after, allowed, words, &b1, &s1, &t1);
    b0 += s0; /* a CPU the hypervisor took is not one flynn's threads can spin on */
    b1 += s1;
    if (n0 == 0 || n0 != n1 || t1 <= t0 || b1 < b0) return -1.0;
    const double share = (double)(b1 - b0) / (double)(t1 - t0);
    return share > 1.0 ? (double)n1 : share * n1;
}

bool flynn_omp_should_spin(double busy_cpus, int cpus, int threads) {
    /* the idle CPUs hold every thread, with a quarter of a CPU to spare for
     * the jiffies' coarseness and the system's own housekeeping */
    return busy_cpus >= 0.0 && threads >= 1 && cpus >= 1 && busy_cpus + threads <= cpus + 0.25;
}

static bool read_file(const char *path, char *buf, size_t n) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    size_t got = fread(buf, 1, n - 1, f);
    fclose(f);
    buf[got] = 0;
    return got > 0;
}

static bool computes(const char *cmd) {
    static const char *const cmds[] = {"train", "evaluate", "predict", "bench", NULL};
    for (int i = 0; cmd && cmds[i]; i++)
        if (strcmp(cmd, cmds[i]) == 0) return true;
    return false;
}

/* Sets GOMP_SPINCOUNT=1000 or OMP_WAIT_POLICY=passive and FLYNN_OMP_CHOICE. */
static bool choose_wait(char **argv) {
    static char before[1 << 16], after[1 << 16];
    char why[160];
    const char *mpi = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (!mpi) mpi = getenv("MPI_LOCALNRANKS");
    bool spin = false;
    if (!computes(argv[0] ? argv[1] : NULL)) {
        snprintf(why, sizeof why, "passive (a command that does not compute)");
    } else if (mpi && atoi(mpi) > 1) {
        snprintf(why, sizeof why, "passive (%s MPI ranks on this machine share its CPUs)", mpi);
    } else if (fl_cpu_follows_load()) {
        spin = true;
        snprintf(why, sizeof why, "spin 1,000 rounds, then sleep (the threads follow the load: where other "
                                  "processes keep CPUs busy, fewer run)");
    } else {
        uint64_t mask[CPU_SETSIZE / 64];
        const int allowed = fl_cpu_allowed_mask(mask, CPU_SETSIZE / 64);
        const bool aff = allowed > 0;
        const int threads = fl_default_num_threads(NULL, 0);
        double busy = -1.0;
        if (read_file("/proc/stat", before, sizeof before)) {
            nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
            if (read_file("/proc/stat", after, sizeof after))
                busy = flynn_omp_busy_cpus(before, after, aff ? mask : NULL, CPU_SETSIZE / 64);
        }
        const int cpus = aff ? allowed : (int)sysconf(_SC_NPROCESSORS_ONLN);
        spin = flynn_omp_should_spin(busy, cpus, threads);
        if (busy < 0.0)
            snprintf(why, sizeof why, "passive (/proc/stat could not be read)");
        else
            snprintf(why, sizeof why, "%s (other processes kept %.1f of %d CPUs busy at the start; %d threads)",
                     spin ? "spin 1,000 rounds, then sleep" : "passive", busy, cpus, threads);
    }
    if (setenv(spin ? "GOMP_SPINCOUNT" : "OMP_WAIT_POLICY", spin ? "1000" : "passive", 1) != 0) return false;
    return setenv("FLYNN_OMP_CHOICE", why, 1) == 0;
}

void flynn_omp_setup(char **argv) {
    if (getenv("FLYNN_OMP_SETUP")) return;
    bool omp = !getenv("OMP_WAIT_POLICY") && !getenv("GOMP_SPINCOUNT");
    fl_blas_info bi;
    fl_blas_info_get(&bi);
    bool blas = bi.weaker && !getenv("OPENBLAS_CORETYPE");
    if (!omp && !blas) return;
    if (omp && !choose_wait(argv)) return;
    if (blas && (setenv("OPENBLAS_CORETYPE", bi.best_core, 1) != 0 || setenv("FLYNN_BLAS_FALLBACK", bi.core, 1) != 0))
        return;
    if (setenv("FLYNN_OMP_SETUP", "1", 1) == 0) execv("/proc/self/exe", argv);
    /* no exec (no /proc): carry on with the runtimes as they started */
    if (omp) { unsetenv("OMP_WAIT_POLICY"); unsetenv("GOMP_SPINCOUNT"); unsetenv("FLYNN_OMP_CHOICE"); }
    if (blas) { unsetenv("OPENBLAS_CORETYPE"); unsetenv("FLYNN_BLAS_FALLBACK"); }
    unsetenv("FLYNN_OMP_SETUP");
}
