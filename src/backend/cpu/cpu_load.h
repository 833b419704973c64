/* cpu_load.h — how busy this process's CPUs are (cpu_env.c): what the flynn
 * command reads once to choose how OpenMP threads wait (src/cli/omp_setup.c)
 * and the CPU backend reads between steps to choose how many threads run
 * (fl_num_threads_in_use). */
#ifndef FL_CPU_LOAD_H
#define FL_CPU_LOAD_H

#include <stdint.h>

/* Jiffies summed over the "cpuN" lines of a /proc/stat text whose N is in
 * allowed[0..words) (CPU c: bit c % 64 of word c / 64; NULL: every CPU):
 * busy (user, nice, system, irq, softirq; guest time is inside user), steal
 * (the hypervisor ran something else) and total (all of them, idle and
 * iowait too). Returns the number of CPUs counted, 0 if there were none. */
int fl_cpu_stat_jiffies(const char *text, const uint64_t *allowed, int words, unsigned long long *busy,
                        unsigned long long *steal, unsigned long long *total);

/* The CPUs this process may run on (its affinity mask) as bits of
 * mask[0..words), CPU c at bit c % 64 of word c / 64; returns how many, or
 * 0 (mask all zero) where the mask cannot be read. */
int fl_cpu_allowed_mask(uint64_t *mask, int words);

/* Threads to run with `configured` of them, on `cpus` CPUs of which other
 * processes kept `other` busy: one per CPU they leave idle, where a CPU
 * counts as taken when they kept 60% of it busy (not for a daemon's bursts;
 * but a CPU-bound process beside threads that spin while they wait, as
 * libgomp's do by default, gets only two thirds of one), at least one, at
 * most configured. */
int fl_cpu_threads_for_load(int configured, int cpus, double other);

/* Whether the threads follow the load between steps (fl_threads_follow_load): 1 unless FLYNN_FOLLOW_LOAD=0,
 * a cgroup CPU quota (a container's /proc/stat counts the host's CPUs) or an unreadable /proc/stat. */
int fl_cpu_follows_load(void);

#endif
