/*
 * test_omp_setup.c — how the `flynn` command chooses its OpenMP threads'
 * wait (src/cli/omp_setup.c): the busy CPUs read from two /proc/stat texts,
 * over the CPUs the process may use, and the rule that lets the threads spin
 * only where the idle CPUs hold them all; and the rule by which the threads
 * in use follow what other processes leave idle (cpu_load.h).
 */
#include "check.h"
#include "backend/cpu/cpu_load.h"
#include "cli/omp_setup.h"

#include <stdint.h>

/* cpu0 busy 30 of 100 jiffies, cpu1 100 of 100, cpu2 0 of 100 */
static const char *const before =
    "cpu  1000 0 500 9000 0 0 0 0 0 0\n"
    "cpu0 100 0 50 800 10 0 0 0 0 0\n"
    "cpu1 200 10 20 700 0 1 1 0 0 0\n"
    "cpu2 300 0 0 600 0 0 0 0 0 0\n"
    "intr 12345 1 2 3\n"
    "ctxt 999\n";
static const char *const after =
    "cpu  1200 0 600 9300 0 0 0 0 0 0\n"
    "cpu0 120 0 55 865 15 0 0 5 0 0\n"    /* busy 20 + 5 + 5 steal = 30, idle 65 + iowait 5 */
    "cpu1 280 10 30 700 0 6 6 0 0 0\n"    /* busy 80 + 10 + 5 + 5 = 100 */
    "cpu2 300 0 0 700 0 0 0 0 0 0\n"      /* idle 100 */
    "intr 23456 1 2 3\n"
    "ctxt 1999\n";

int main(void) {
    /* every CPU: 130 of 300 jiffies busy, times 3 CPUs = 1.3 CPUs */
    CHECK_CLOSE(flynn_omp_busy_cpus(before, after, NULL, 0), 1.3, 1e-12, 1e-12);
    /* only cpu0 and cpu2 (mask 0b101): 30 of 200, times 2 = 0.3 */
    const uint64_t m02 = 5, m1 = 2;
    CHECK_CLOSE(flynn_omp_busy_cpus(before, after, &m02, 1), 0.3, 1e-12, 1e-12);
    CHECK_CLOSE(flynn_omp_busy_cpus(before, after, &m1, 1), 1.0, 1e-12, 1e-12);
    /* a CPU beyond the mask's words is not allowed; no allowed CPU gives -1 */
    const uint64_t none = 0;
    CHECK(flynn_omp_busy_cpus(before, after, &none, 1) < 0.0);
    /* texts that do not give it: empty, no time passed, CPUs that differ, garbage */
    CHECK(flynn_omp_busy_cpus("", after, NULL, 0) < 0.0);
    CHECK(flynn_omp_busy_cpus(before, before, NULL, 0) < 0.0);
    CHECK(flynn_omp_busy_cpus(before, "cpu0 120 0 55 865 15 0 0 5 0 0\n", NULL, 0) < 0.0);
    CHECK(flynn_omp_busy_cpus("cpu0 x\nnonsense", "cpuX 1 2 3 4\n", NULL, 0) < 0.0);
    CHECK(flynn_omp_busy_cpus(after, before, NULL, 0) < 0.0); /* counters that went back */

    /* the rule: spin only where the idle CPUs hold every thread (a quarter CPU to spare) */
    CHECK(flynn_omp_should_spin(0.0, 2, 2));
    CHECK(flynn_omp_should_spin(0.2, 2, 2));
    CHECK(!flynn_omp_should_spin(0.3, 2, 2));
    CHECK(!flynn_omp_should_spin(1.0, 2, 2)); /* one CPU-bound process beside: passive */
    CHECK(flynn_omp_should_spin(1.0, 2, 1));  /* one thread beside it fits */
    CHECK(flynn_omp_should_spin(5.9, 16, 10));
    CHECK(!flynn_omp_should_spin(6.5, 16, 10));
    CHECK(!flynn_omp_should_spin(-1.0, 2, 2)); /* unknown: passive */
    CHECK(!flynn_omp_should_spin(0.0, 0, 2));
    CHECK(!flynn_omp_should_spin(0.0, 2, 0));

    /* the jiffies apart: steal is not busy (the hypervisor ran another guest) */
    unsigned long long busy, steal, total;
    CHECK(fl_cpu_stat_jiffies(after, &m02, 1, &busy, &steal, &total) == 2);
    CHECK(busy == 120 + 55 + 300 && steal == 5 && total == busy + steal + 865 + 15 + 700);
    CHECK(fl_cpu_stat_jiffies("nonsense\n", NULL, 0, &busy, &steal, &total) == 0);

    /* threads in use: a CPU counts as taken when others keep 60% of it busy */
    CHECK(fl_cpu_threads_for_load(2, 2, 0.0) == 2);
    CHECK(fl_cpu_threads_for_load(2, 2, 0.55) == 2); /* a daemon's bursts: keep both */
    CHECK(fl_cpu_threads_for_load(2, 2, 0.67) == 1); /* a CPU-bound process beside two spinning threads */
    CHECK(fl_cpu_threads_for_load(2, 2, 1.0) == 1);
    CHECK(fl_cpu_threads_for_load(2, 2, 2.0) == 1);  /* never none */
    CHECK(fl_cpu_threads_for_load(2, 2, 7.0) == 1);
    CHECK(fl_cpu_threads_for_load(16, 16, 5.5) == 11);
    CHECK(fl_cpu_threads_for_load(16, 16, 5.7) == 10);
    CHECK(fl_cpu_threads_for_load(8, 16, 5.2) == 8);  /* never more than configured */
    CHECK(fl_cpu_threads_for_load(4, 2, 0.0) == 4);   /* more threads than CPUs, asked for: kept while idle */
    CHECK(fl_cpu_threads_for_load(4, 2, 0.55) == 4);
    CHECK(fl_cpu_threads_for_load(4, 2, 1.0) == 1);
    CHECK(fl_cpu_threads_for_load(2, 2, -0.3) == 2);  /* the jiffies' coarseness can go below zero */
    CHECK(fl_cpu_threads_for_load(2, 2, 0.0 / 0.0) == 2);
    CHECK(fl_cpu_threads_for_load(0, 2, 0.0) == 1);
    return check_report("test_omp_setup");
}
