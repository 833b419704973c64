/*
 * cpu_env.c — what the CPU path runs on: how many threads it may use, and
 * whether OpenBLAS's kernels fit this CPU.
 *
 * Threads. $OMP_NUM_THREADS when set (its first entry), else the CPUs this
 * process may run on: the affinity mask (taskset, docker --cpuset-cpus; what
 * omp_get_num_procs counts) and the cgroup CPU quota (docker --cpus,
 * Kubernetes limits, systemd CPUQuota: cgroup v2 cpu.max, v1
 * cpu.cfs_quota_us / cpu.cfs_period_us), rounded up. More threads than the
 * quota only queue behind each other at every barrier.
 *
 * OpenBLAS's kernels. A DYNAMIC_ARCH OpenBLAS picks its kernels from the CPU
 * when it loads; one older than the CPU does not know it and falls back to
 * its oldest kernels (Debian 12's 0.3.21 on a 5th-generation Xeon, family 6
 * model 207, runs "Prescott", SSE3: a quarter of the AVX-512 speed, measured
 * in docs/performance.md). The kernels OpenBLAS chose are compared with the
 * best this CPU runs (SkylakeX with AVX-512, Haswell or Zen with AVX2+FMA);
 * fl_blas_info says so and names OPENBLAS_CORETYPE, which OpenBLAS reads
 * only when it loads: the flynn command sets it and starts itself again
 * (src/cli/omp_setup.c), a program linking libflynn sets it before it starts.
 *
 * flynn's own kernels. FLYNN_CPU_KERNELS caps the instruction set they use:
 * "generic" the portable loops (and OpenBLAS), "avx2" no AVX-512 (a CPU
 * with it runs what a CPU without it runs: Zen 1-3, Intel's client cores),
 * anything else (unset, "auto") the best this CPU has.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "cpu_internal.h"
#include "cpu_simd.h"
#include "cpu_fastmath.h" /* fl_cpu_avx2 */
#include "cpu_load.h"
#include "core/error.h"

#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------ own kernels */

int fl_cpu_kernels_cap(void) {
    static int cap = -1;
    int v = __atomic_load_n(&cap, __ATOMIC_RELAXED);
    if (v >= 0) return v;
    const char *e = getenv("FLYNN_CPU_KERNELS");
    v = !e ? 2 : strcmp(e, "generic") == 0 ? 0 : strcmp(e, "avx2") == 0 ? 1 : 2;
    __atomic_store_n(&cap, v, __ATOMIC_RELAXED);
    return v;
}

/* Which level of own kernels runs, decided here once for every CPU file (the AVX-512 and AVX2 files only
 * provide kernels; they asked each other before, a circle: issue 45): AVX-512 where the CPU has it and
 * FLYNN_CPU_KERNELS allows it, else AVX2 + FMA, else the portable code. */
/* -1: not decided yet; else the answer of fl_cpu_simd() */
static int g_simd = -1;

int fl_cpu_simd_available(void) {
#if FL_HAVE_AVX512
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
#else
    return 0;
#endif
}

void fl_cpu_simd_force(int on) {
    __atomic_store_n(&g_simd, on < 0 ? -1 : (on && fl_cpu_simd_available()), __ATOMIC_RELAXED);
}

int fl_cpu_simd(void) {
    int v = __atomic_load_n(&g_simd, __ATOMIC_RELAXED);
    if (v >= 0) return v;
    v = fl_cpu_simd_available() && fl_cpu_kernels_cap() >= 2;
    __atomic_store_n(&g_simd, v, __ATOMIC_RELAXED);
    return v;
}

static int g_avx2 = -1; /* -1: not decided yet */

int fl_cpu_avx2_kernels(void) {
    int v = __atomic_load_n(&g_avx2, __ATOMIC_RELAXED);
    if (v >= 0) return v;
    /* (from what the CPU has, not from fl_cpu_simd(): a test forcing the AVX-512 kernels off wants the portable
     * code, not these) */
    v = fl_cpu_avx2() && (fl_cpu_kernels_cap() == 1 || (fl_cpu_kernels_cap() == 2 && !fl_cpu_simd_available()));
    __atomic_store_n(&g_avx2, v, __ATOMIC_RELAXED);
    return v;
}

void fl_cpu_avx2_kernels_force(int on) {
    __atomic_store_n(&g_avx2, on < 0 ? -1 : (on && fl_cpu_avx2()), __ATOMIC_RELAXED);
}

/* flynn's own GEMM at the level that runs: fl_cpu_own_gemm at AVX-512 for every shape, at AVX2 where
 * fl_cpu_avx2_gemm_wins; fl_cpu_own_gemm_if_wins where that rule says so at either width (the convolutions'
 * im2col products: the two widths then take the same kernels, and give the same bits, whichever OpenBLAS
 * kernels the process loaded). 0: not taken, the caller runs OpenBLAS. */
int fl_cpu_own_gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                    const float *B, int64_t ldb, float beta, float *C, int64_t ldc, const float *bias, int relu,
                    int threads) {
    if (fl_cpu_simd()) {
        fl_simd_gemm(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, bias, relu, threads);
        return 1;
    }
    if (fl_cpu_avx2_kernels() && fl_cpu_avx2_gemm_wins(trans_a, trans_b, M, N, K)) {
        fl_avx2_gemm(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, bias, relu, threads);
        return 1;
    }
    return 0;
}

int fl_cpu_own_gemm_if_wins(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                            const float *B, int64_t ldb, float beta, float *C, int64_t ldc, int threads) {
    if (!fl_cpu_avx2_gemm_wins(trans_a, trans_b, M, N, K)) return 0;
    if (fl_cpu_simd()) fl_simd_gemm(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, NULL, 0, threads);
    else if (fl_cpu_avx2_kernels()) fl_avx2_gemm(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, NULL, 0, threads);
    else return 0;
    return 1;
}

/* ------------------------------------------------------------ threads */

static bool read_line(const char *path, char *buf, size_t n) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    bool ok = fgets(buf, (int)n, f) != NULL;
    fclose(f);
    return ok;
}

/* quota/period from a folder holding cpu.max (v2) or cpu.cfs_quota_us and cpu.cfs_period_us (v1);
 * 0 when unlimited or unreadable */
static double quota_in(const char *dir) {
    char path[PATH_MAX], line[128];
    snprintf(path, sizeof path, "%s/cpu.max", dir);
    if (read_line(path, line, sizeof line)) {
        long long q, p;
        if (sscanf(line, "%lld %lld", &q, &p) == 2 && q > 0 && p > 0) return (double)q / (double)p;
        return 0; /* "max 100000" */
    }
    char qpath[PATH_MAX], pline[128];
    snprintf(path, sizeof path, "%s/cpu.cfs_quota_us", dir);
    snprintf(qpath, sizeof qpath, "%s/cpu.cfs_period_us", dir);
    if (read_line(path, line, sizeof line) && read_line(qpath, pline, sizeof pline)) {
        long long q = atoll(line), p = atoll(pline);
        if (q > 0 && p > 0) return (double)q / (double)p;
    }
    return 0;
}

/* The cgroup CPU quota of this process in CPUs (0: none). $FLYNN_TEST_CGROUP_DIR (tests only) names the one
 * folder to read. Otherwise the process's own cgroup (v2 "0::/path", v1 "N:...cpu...:/path") under
 * /sys/fs/cgroup, and that mount's root, where a container sees its own cgroup. */
double fl_cpu_quota(void) {
    const char *test = getenv("FLYNN_TEST_CGROUP_DIR");
    if (test) return quota_in(test);
    double best = 0;
    FILE *f = fopen("/proc/self/cgroup", "r");
    char line[1024], dir[PATH_MAX];
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c2 = 0;
        const char *ctrl = c1 + 1, *path = c2 + 1;
        double q = 0;
        if (!*ctrl) { /* v2 */
            snprintf(dir, sizeof dir, "/sys/fs/cgroup%s", strcmp(path, "/") == 0 ? "" : path);
            q = quota_in(dir);
            if (q == 0) q = quota_in("/sys/fs/cgroup");
        } else if (strstr(ctrl, "cpu") && !strstr(ctrl, "cpuset")) { /* v1: "cpu", "cpu,cpuacct" */
            const char *mounts[] = {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpuacct,cpu"};
            for (int i = 0; i < 3 && q == 0; i++) {
                snprintf(dir, sizeof dir, "%s%s", mounts[i], strcmp(path, "/") == 0 ? "" : path);
                q = quota_in(dir);
                if (q == 0) q = quota_in(mounts[i]);
            }
        }
        if (q > 0 && (best == 0 || q < best)) best = q;
    }
    if (f) fclose(f);
    return best;
}

int fl_cpu_default_threads(char *why, size_t n) {
    const char *s = getenv("OMP_NUM_THREADS");
    if (s) {
        char *end;
        long v = strtol(s, &end, 10);
        while (*end == ' ') end++;
        if (end != s && v > 0 && v <= 4096 && (*end == '\0' || *end == ',')) {
            if (why) snprintf(why, n, "OMP_NUM_THREADS");
            return (int)v;
        }
    }
    int procs = omp_get_num_procs(); /* the affinity mask */
    double q = fl_cpu_quota();
    if (q > 0 && q < procs) {
        int t = (int)q;
        if (t < q) t++;
        if (why) snprintf(why, n, "cgroup CPU quota %.2f of %d CPUs", q, procs);
        return t > 0 ? t : 1;
    }
    if (why) snprintf(why, n, "%d CPUs available", procs);
    return procs > 0 ? procs : 1;
}

/* ------------------------------------------------- how busy the CPUs are */

int fl_cpu_stat_jiffies(const char *text, const uint64_t *allowed, int words, unsigned long long *busy,
                        unsigned long long *steal, unsigned long long *total) {
    int n = 0;
    *busy = *steal = *total = 0;
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        int cpu;
        unsigned long long v[8] = {0};
        /* user nice system idle iowait irq softirq steal (guest is inside user) */
        if (strncmp(l, "cpu", 3) != 0 || l[3] < '0' || l[3] > '9') continue; /* not "cpu ", the sum */
        if (sscanf(l, "cpu%d %llu %llu %llu %llu %llu %llu %llu %llu", &cpu, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                   &v[6], &v[7]) < 5 || cpu < 0)
            continue;
        if (allowed && (cpu / 64 >= words || !(allowed[cpu / 64] >> (cpu % 64) & 1))) continue;
        const unsigned long long b = v[0] + v[1] + v[2] + v[5] + v[6];
        *busy += b;
        *steal += v[7];
        *total += b + v[7] + v[3] + v[4];
        n++;
    }
    return n;
}

int fl_cpu_allowed_mask(uint64_t *mask, int words) {
    memset(mask, 0, (size_t)words * sizeof *mask);
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
    int n = 0;
    for (int c = 0; c < CPU_SETSIZE && c / 64 < words; c++)
        if (CPU_ISSET(c, &set)) mask[c / 64] |= (uint64_t)1 << (c % 64), n++;
    return n;
}

int fl_cpu_threads_for_load(int configured, int cpus, double other) {
    if (configured < 1) configured = 1;
    if (!(other > 0.0)) return configured; /* also NaN */
    const double taken = other + 0.4 < (double)cpus ? floor(other + 0.4) : (double)cpus;
    if (taken < 1.0) return configured;
    const int left = cpus - (int)taken;
    return left < 1 ? 1 : left < configured ? left : configured;
}

int fl_cpu_follows_load(void) {
    const char *e = getenv("FLYNN_FOLLOW_LOAD");
    if ((e && strcmp(e, "0") == 0) || fl_cpu_quota() > 0) return 0;
    char line[256];
    return read_line("/proc/stat", line, sizeof line);
}

/* -------------------------------------------------------------- cache */

/* The data or unified cache of `level` that cpu0 sees, in bytes: sysfs, else sysconf (name), else dflt.
 * (glibc's sysconf reads CPUID, which a VM can fill as it likes: it gave this machine's L3 as 384 MB, sysfs
 * 32 MB.) */
static size_t cache_bytes(int level, int name, size_t dflt) {
    /* FLYNN_CPU_L2 / FLYNN_CPU_L3 (bytes, or with K or M: "512K", "260M") stand for the machine's: the tests
     * run the kernels and the planner under the cache sizes of every machine seen (tests/CMakeLists.txt), so
     * that a blocking choice that follows the cache cannot surprise on the next one (issue 42). */
    const char *var = level == 2 ? "FLYNN_CPU_L2" : level == 3 ? "FLYNN_CPU_L3" : NULL, *e = var ? getenv(var) : NULL;
    if (e && *e) {
        char *end;
        long long v = strtoll(e, &end, 10);
        if (*end == 'K' || *end == 'k') v <<= 10, end++;
        else if (*end == 'M' || *end == 'm') v <<= 20, end++;
        if (v > 0 && *end == '\0') return (size_t)v;
        fprintf(stderr, "flynn: %s=%s is not a cache size (bytes, or with K or M: 512K, 2M); the CPU's is used\n",
                var, e);
    }
    for (int i = 0; i < 16; i++) {
        char path[96], line[64];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        if (!read_line(path, line, sizeof line)) break;
        if (atoi(line) != level) continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
        if (read_line(path, line, sizeof line) && strncmp(line, "Instruction", 11) == 0) continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if (!read_line(path, line, sizeof line)) break;
        char *end;
        long long v = strtoll(line, &end, 10);
        if (*end == 'K') v <<= 10;
        else if (*end == 'M') v <<= 20;
        if (v > 0) return (size_t)v;
    }
    long v = sysconf(name);
    return v > 0 ? (size_t)v : dflt;
}

/* Inference in steps whose batch buffers fit twice the L2 of the threads in use (about half of each
 * step's buffers are live at once, and a layer's input and output are what is): measured in
 * docs/performance.md, mnist_cnn's predict ran 18,700 samples/s in whole batches of 512 and 27,100 in steps
 * of 16 (24,600 in steps of 32) on the Zen 5 (1 MB of L2 a core, 2 threads). */
size_t fl_cpu_infer_budget(void) {
    static size_t l2;
    if (!l2) l2 = cache_bytes(2, _SC_LEVEL2_CACHE_SIZE, (size_t)1 << 20);
    return 2 * l2 * (size_t)fl_cpu_threads_configured(); /* a step's size must not follow the load */
}

/* The weights an inference step reads stay cached between steps where they fit the last-level cache
 * (backend.h infer_weight_cache): the L3, else the L2 (a CPU without one), else 8 MB. */
size_t fl_cpu_infer_weight_cache(void) {
    static size_t llc;
    if (!llc) {
        llc = cache_bytes(3, _SC_LEVEL3_CACHE_SIZE, 0);
        if (!llc) llc = cache_bytes(2, _SC_LEVEL2_CACHE_SIZE, (size_t)8 << 20);
    }
    return llc;
}

/* ------------------------------------------------------ BLAS kernels */

/* OpenBLAS's x86 core names by the widest vectors their kernels use (0: SSE only, 1: AVX, 2: AVX2+FMA,
 * 3: AVX-512); -1 for a name not listed (another architecture, or a newer OpenBLAS's name) */
static int core_rank(const char *core) {
    static const char *const sse[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Barcelona",
                                      "Opteron", "Opteron_SSE3", "Bobcat", "Katmai", "Coppermine", "Northwood",
                                      "Athlon", "Banias", NULL};
    static const char *const avx[] = {"Sandybridge", "Bulldozer", "Piledriver", "Steamroller", "Excavator", NULL};
    static const char *const avx2[] = {"Haswell", "Zen", "SkylakeX_AVX2", NULL};
    static const char *const avx512[] = {"SkylakeX", "Cooperlake", "SapphireRapids", NULL};
    const char *const *lists[] = {sse, avx, avx2, avx512};
    for (int r = 0; r < 4; r++)
        for (int i = 0; lists[r][i]; i++)
            if (strcasecmp(core, lists[r][i]) == 0) return r;
    return -1;
}

void fl_blas_info_get(fl_blas_info *out) {
    memset(out, 0, sizeof *out);
    /* one tiny product first: a BLAS that chooses its kernels lazily has chosen them by now */
    float a = 1, bb = 1, c = 0;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1, 1, 1, 1.0f, &a, 1, &bb, 1, 0.0f, &c, 1);
    char *(*corename)(void) = (char *(*)(void))dlsym(RTLD_DEFAULT, "openblas_get_corename");
    char *(*config)(void) = (char *(*)(void))dlsym(RTLD_DEFAULT, "openblas_get_config");
    snprintf(out->core, sizeof out->core, "%s", corename ? corename() : "");
    snprintf(out->config, sizeof out->config, "%s", config ? config() : "");
    for (size_t k = strlen(out->config); k > 0 && out->config[k - 1] == ' '; k--) out->config[k - 1] = 0;
    const char *test = getenv("FLYNN_TEST_BLAS_CORE"); /* tests only: the core OpenBLAS would have chosen */
    if (test && !getenv("OPENBLAS_CORETYPE")) snprintf(out->core, sizeof out->core, "%s", test);
    /* the best kernels for this CPU */
    __builtin_cpu_init();
    bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                  __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (avx512) snprintf(out->best_core, sizeof out->best_core, "SkylakeX");
    else if (avx2) snprintf(out->best_core, sizeof out->best_core, "%s", __builtin_cpu_is("amd") ? "Zen" : "Haswell");
    else if (__builtin_cpu_supports("avx")) snprintf(out->best_core, sizeof out->best_core, "Sandybridge");
    int have = out->core[0] ? core_rank(out->core) : -1, best = out->best_core[0] ? core_rank(out->best_core) : -1;
    out->weaker = have >= 0 && best > have;
    static const char *const width[] = {"SSE", "AVX", "AVX2", "AVX-512"};
    if (!out->core[0])
        snprintf(out->note, sizeof out->note, "not OpenBLAS: its kernels are its own");
    else if (out->weaker && getenv("OPENBLAS_CORETYPE"))
        snprintf(out->note, sizeof out->note, "OpenBLAS runs its %s kernels (%s) as OPENBLAS_CORETYPE=%s says; this CPU "
                 "runs %s (%s): unset it or set OPENBLAS_CORETYPE=%s", out->core, width[have], getenv("OPENBLAS_CORETYPE"),
                 out->best_core, width[best], out->best_core);
    else if (out->weaker)
        snprintf(out->note, sizeof out->note, "OpenBLAS chose its %s kernels (%s), older than this CPU: it does not "
                 "know this CPU; set OPENBLAS_CORETYPE=%s before the program starts (the flynn command does)",
                 out->core, width[have], out->best_core);
    else
        snprintf(out->note, sizeof out->note, "OpenBLAS kernels %s fit this CPU", out->core);
}
