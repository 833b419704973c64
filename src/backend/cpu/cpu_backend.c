/*
 * cpu_backend.c — the CPU backend's table: host memory, Dense (CBLAS sgemm
 * plus fused epilogues), element-wise activations, dropout, batch norm,
 * losses, metrics and the fused optimizer step. OpenMP parallelises the
 * element-wise work; OpenBLAS (its OpenMP build) the large GEMMs.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "cpu_internal.h"
#include "cpu_load.h"
#include "cpu_simd.h"
#include "cpu_fastmath.h"
#include "core/clock.h"
#include "core/error.h"

#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#if FL_HAVE_AVX2_TARGET
#include <immintrin.h>
#endif
#include <unistd.h>

/* ------------------------------------------------------------ threads */

static int g_threads = 0; /* part of the backend registry: 0 = the default */
/* the threads in use: g_threads, or fewer while other processes keep the CPUs busy (fl_threads_follow_load);
 * read by any thread, written by the thread that runs the steps, between them */
static int g_active = 0;

extern void openblas_set_num_threads(int);

static void use_threads(int n) {
    __atomic_store_n(&g_active, n, __ATOMIC_RELAXED);
    openblas_set_num_threads(n);
    omp_set_num_threads(n);
}

/* the first use: the default (cpu_env.c), which OpenBLAS follows too */
int fl_cpu_threads(void) {
    int a = __atomic_load_n(&g_active, __ATOMIC_RELAXED);
    if (a > 0) return a;
    g_threads = fl_cpu_default_threads(NULL, 0);
    __atomic_store_n(&g_active, g_threads, __ATOMIC_RELAXED);
    openblas_set_num_threads(g_threads);
    return g_threads;
}
int fl_default_num_threads(char *why, size_t n) { return fl_cpu_default_threads(why, n); }
int fl_cpu_thread_id(void) { return omp_get_thread_num(); }

void fl_set_num_threads(int n) {
    g_threads = n > 0 ? n : fl_cpu_default_threads(NULL, 0);
    use_threads(g_threads);
}
int fl_cpu_threads_configured(void) {
    (void)fl_cpu_threads();
    return g_threads;
}
int fl_get_num_threads(void) { return fl_cpu_threads_configured(); }
int fl_num_threads_in_use(void) { return fl_cpu_threads(); }

/* Between steps: about once a second, the CPU time the CPUs this process may run on spent busy (/proc/stat)
 * against this process's own; the threads then follow what other processes leave idle
 * (fl_cpu_threads_for_load; flynn.h, fl_num_threads_in_use). Off with FLYNN_FOLLOW_LOAD=0, under a cgroup
 * CPU quota (a container's /proc/stat counts the host's CPUs, busy with other containers' work) and where
 * /proc/stat cannot be read. Called by the thread that runs the steps, outside parallel regions: a count
 * read once by a loop stays the same until the loop ends. */
typedef struct load_state {
    int on; /* -1: not decided yet */
    int looks; /* 0 before the first, 1 after it, 2 after the second */
    double t0, own0;
    unsigned long long busy0;
    char text[1 << 16];
} load_state;

static void follow_load(load_state *ls) {
    if (ls->on < 0) ls->on = fl_cpu_follows_load();
    if (!ls->on) return;
    const double now = fl_clock_seconds();
    /* the first look 0.1 s after the first step (ten jiffies a CPU at 100 Hz): a machine busy from the start
     * sheds the threads that would wait within a few steps; then once a second */
    if (ls->looks && now - ls->t0 < (ls->looks > 1 ? 1.0 : 0.1)) return;
    uint64_t mask[CPU_SETSIZE / 64];
    const bool aff = fl_cpu_allowed_mask(mask, CPU_SETSIZE / 64) > 0;
    FILE *f = fopen("/proc/stat", "r");
    const size_t got = f ? fread(ls->text, 1, sizeof ls->text - 1, f) : 0;
    if (f) fclose(f);
    ls->text[got] = 0;
    unsigned long long busy, steal, total;
    const int cpus = fl_cpu_stat_jiffies(ls->text, aff ? mask : NULL, CPU_SETSIZE / 64, &busy, &steal, &total);
    const long hz = sysconf(_SC_CLK_TCK);
    if (cpus == 0 || hz <= 0) {
        ls->on = 0;
        return;
    }
    const double own = fl_clock_cpu_seconds();
    if (ls->looks && busy >= ls->busy0 && now > ls->t0) {
        /* steal is not counted busy: the hypervisor ran another guest, not a process here */
        const double other = ((double)(busy - ls->busy0) / (double)hz - (own - ls->own0)) / (now - ls->t0);
        const int t = fl_cpu_threads_for_load(fl_cpu_threads_configured(), cpus, other);
        if (t != __atomic_load_n(&g_active, __ATOMIC_RELAXED)) use_threads(t);
    }
    ls->t0 = now;
    ls->own0 = own;
    ls->busy0 = busy;
    if (ls->looks < 2) ls->looks++;
}

void fl_threads_follow_load(void) {
    static load_state ls = {.on = -1};
    static int inside; /* two threads stepping two models: one looks, the other goes on */
    if (__atomic_exchange_n(&inside, 1, __ATOMIC_ACQUIRE)) return;
    follow_load(&ls);
    __atomic_store_n(&inside, 0, __ATOMIC_RELEASE);
}

/* ------------------------------------------------------------- memory */

/* A batch's buffers (the graph's arena, the workspace) are hundreds of MB
 * on a conv net: with 4 KiB pages the first predict or fit faults each page
 * in (85k faults on MobileNetV2's first predict at batch 128, which ran at
 * 560-860 samples/s against 1,050-1,390 for the calls after it) and
 * every pass over them walks that many TLB entries. Buffers of 4 MiB and
 * more are therefore placed on 2 MiB boundaries and marked MADV_HUGEPAGE,
 * which transparent huge pages honour in their default "madvise" mode
 * (700 faults instead). A kernel without THP ignores the advice.
 * FLYNN_HUGE_PAGES=0 turns it off (for comparison). */
#define HUGE_PAGE ((size_t)2 << 20)
static int huge_pages(void) {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("FLYNN_HUGE_PAGES");
        on = !(e && e[0] == '0' && !e[1]);
    }
    return on;
}

static void *cpu_alloc(size_t bytes) {
    if (bytes < 2 * HUGE_PAGE || !huge_pages()) return fl_malloc_aligned(bytes, "CPU buffer");
    void *p = fl_malloc_aligned_to(bytes, HUGE_PAGE, "CPU buffer");
    if (p) (void)madvise(p, (bytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1), MADV_HUGEPAGE); /* advice only */
    return p;
}
/* Zero-filled buffers of ZERO_MAP bytes or more are anonymous mappings of their own, whose pages the kernel
 * fills with zeros when they are first touched: a weight's gradient and the optimizer's slots, which a process
 * that only predicts never writes, take neither memory nor the time of clearing them (VGG16 at 64x64 holds
 * 152 MB of weights, as much again in gradients and twice that in Adam's slots). Placed like cpu_alloc's
 * (2 MiB boundaries and MADV_HUGEPAGE from 4 MiB on). cpu_free knows them by this list: allocator state,
 * locked, changed only when such a buffer is made or freed. */
#define ZERO_MAP ((size_t)1 << 20)
typedef struct zero_map { void *p; size_t len; } zero_map;
static struct {
    pthread_mutex_t lock;
    zero_map *m;
    int n, cap;
} g_maps = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0};

static void *cpu_alloc_zeroed(size_t bytes) {
    if (bytes < ZERO_MAP) {
        void *p = cpu_alloc(bytes);
        if (p) memset(p, 0, bytes);
        return p;
    }
    const int huge = bytes >= 2 * HUGE_PAGE && huge_pages();
    const size_t align = huge ? HUGE_PAGE : (size_t)4096, len = (bytes + align - 1) & ~(align - 1);
    const size_t map = huge ? len + HUGE_PAGE : len;
    char *base = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
        fl_error(FL_ERR_NOMEM, "out of memory mapping %zu zeroed bytes for a CPU buffer", bytes);
        return NULL;
    }
    char *p = base;
    if (huge) { /* the 2 MiB boundary inside, the rest given back */
        p = (char *)(((uintptr_t)base + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
        if (p > base) munmap(base, (size_t)(p - base));
        const size_t tail = (size_t)((base + map) - (p + len));
        if (tail) munmap(p + len, tail);
        (void)madvise(p, len, MADV_HUGEPAGE); /* advice only */
    }
    pthread_mutex_lock(&g_maps.lock);
    if (g_maps.n == g_maps.cap) {
        const int cap = g_maps.cap ? 2 * g_maps.cap : 64;
        zero_map *m = realloc(g_maps.m, (size_t)cap * sizeof *m);
        if (!m) {
            pthread_mutex_unlock(&g_maps.lock);
            munmap(p, len);
            fl_error(FL_ERR_NOMEM, "out of memory recording a CPU buffer of %zu bytes", bytes);
            return NULL;
        }
        g_maps.m = m;
        g_maps.cap = cap;
    }
    g_maps.m[g_maps.n++] = (zero_map){p, len};
    pthread_mutex_unlock(&g_maps.lock);
    return p;
}

static void cpu_free(void *p) {
    if (!p) return;
    size_t len = 0;
    pthread_mutex_lock(&g_maps.lock);
    for (int i = 0; i < g_maps.n; i++)
        if (g_maps.m[i].p == p) {
            len = g_maps.m[i].len;
            g_maps.m[i] = g_maps.m[--g_maps.n];
            break;
        }
    pthread_mutex_unlock(&g_maps.lock);
    if (len) munmap(p, len);
    else fl_free_aligned(p);
}
static void cpu_copy(void *dst, const void *src, size_t bytes) { if (bytes) memcpy(dst, src, bytes); }
static void cpu_zero(void *dst, size_t bytes) { if (bytes) memset(dst, 0, bytes); }
static void cpu_sync(void) {}

static void cpu_mem_info(size_t *free_bytes, size_t *total_bytes) {
    long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    *total_bytes = pages > 0 && psz > 0 ? (size_t)pages * (size_t)psz : 0;
    *free_bytes = avail > 0 && psz > 0 ? (size_t)avail * (size_t)psz : 0;
}

static void cpu_gather_rows(const float *src, const int64_t *idx, int64_t n, int64_t row, float *dst) {
    const size_t bytes = (size_t)row * sizeof(float);
#pragma omp parallel for schedule(static) num_threads(n * row < 65536 ? 1 : fl_cpu_threads())
    for (int64_t i = 0; i < n; i++) memcpy(dst + (size_t)i * row, src + (size_t)idx[i] * row, bytes);
}

/* ---------------------------------------------------------- epilogues */

/* y += b (when b), then the activation: one pass per row, the ReLUs
 * branch-free and vectorised (ReLU6: a folded BatchNormalization's
 * epilogue in inference) */
#define BIAS_ACT_LOOP(expr)                                                      \
    do {                                                                         \
        if (b) for (int j = 0; j < n; j++) { float v = yr[j] + b[j]; yr[j] = (expr); } \
        else for (int j = 0; j < n; j++) { float v = yr[j]; yr[j] = (expr); }  \
    } while (0)

void fl_cpu_bias_act_rows(int64_t rows, int n, const float *b, int act, float *y) {
    if (!b && act == FL_ACT_LINEAR) return;
    for (int64_t r = 0; r < rows; r++) {
        float *yr = y + (size_t)r * n;
        switch (act) {
        case FL_ACT_LINEAR: BIAS_ACT_LOOP(v); break;
        case FL_ACT_RELU: BIAS_ACT_LOOP(v > 0.0f ? v : 0.0f); break;
        case FL_ACT_RELU6: BIAS_ACT_LOOP(v > 0.0f ? (v < 6.0f ? v : 6.0f) : 0.0f); break;
        default: /* the bias, then the activation on vectors where cpu_act.c has it */
            if (b) BIAS_ACT_LOOP(v);
            if (!fl_cpu_act_vec(act, n, yr, yr))
                for (int j = 0; j < n; j++) yr[j] = fl_act_forward(act, yr[j]);
        }
    }
}
#undef BIAS_ACT_LOOP

/* Rows of about FL_EW_CHUNK elements, for loops split as PAR_EW splits elements. */
static int64_t ew_rows(int n) { return n >= FL_EW_CHUNK ? 1 : FL_EW_CHUNK / n; }

/* The same over the rows in parallel (callers outside a parallel region). */
void fl_cpu_bias_act_rows_par(int64_t rows, int n, const float *b, int act, float *y) {
    if (!b && act == FL_ACT_LINEAR) return;
    const int64_t rb = ew_rows(n), nblk = (rows + rb - 1) / rb;
#pragma omp parallel for schedule(dynamic) PAR(rows * n)
    for (int64_t k = 0; k < nblk; k++) {
        int64_t r0 = k * rb, r1 = r0 + rb < rows ? r0 + rb : rows;
        fl_cpu_bias_act_rows(r1 - r0, n, b, act, y + (size_t)r0 * n);
    }
}

void fl_cpu_act_grad_rows(int64_t rows, int n, int act, const float *y, float *dy, float *db) {
    for (int64_t r = 0; r < rows; r++) {
        float *g = dy + (size_t)r * n;
        const float *yr = y + (size_t)r * n;
        switch (act) {
        case FL_ACT_LINEAR: break;
        case FL_ACT_RELU:
            for (int j = 0; j < n; j++) g[j] = yr[j] > 0.0f ? g[j] : 0.0f;
            break;
        default:
            if (!fl_cpu_act_grad_y_vec(act, n, yr, g))
                for (int j = 0; j < n; j++) g[j] *= fl_act_grad_y(act, yr[j]);
        }
        if (db)
            for (int j = 0; j < n; j++) db[j] += g[j];
    }
}

/* dy *= act'(y) over row blocks in parallel, each thread with a private
 * column-sum buffer, then reduces into db (overwritten) in thread order. */
#define COLSUM_STACK 4096
static void act_grad_colsum(int64_t m, int n, int act, const float *y, float *dy, float *db) {
    int nt = fl_cpu_threads();
    if (m * n < 32768) nt = 1;
    const int simd = fl_cpu_simd() && (act == FL_ACT_RELU || act == FL_ACT_LINEAR);
    float stack_part[COLSUM_STACK];
    float *part = NULL;
    if (db) {
        part = (size_t)nt * n <= COLSUM_STACK ? stack_part : calloc((size_t)nt * n, sizeof(float));
        if (!part) { /* fall back to one thread, no extra memory */
            memset(db, 0, (size_t)n * sizeof(float));
            fl_cpu_act_grad_rows(m, n, act, y, dy, db);
            return;
        }
        memset(part, 0, (size_t)nt * n * sizeof(float));
    }
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), T = omp_get_num_threads();
        int64_t r0 = m * t / T, r1 = m * (t + 1) / T;
        float *pt = part ? part + (size_t)t * n : NULL;
        if (simd)
            fl_simd_relu_grad_colsum(r1 - r0, n, act == FL_ACT_RELU, y + (size_t)r0 * n, dy + (size_t)r0 * n,
                                     dy + (size_t)r0 * n, pt);
        else fl_cpu_act_grad_rows(r1 - r0, n, act, y + (size_t)r0 * n, dy + (size_t)r0 * n, pt);
    }
    if (db) {
        memset(db, 0, (size_t)n * sizeof(float));
        for (int t = 0; t < nt; t++)
            for (int j = 0; j < n; j++) db[j] += part[(size_t)t * n + j];
        if (part != stack_part) free(part);
    }
}

/* -------------------------------------------------------------- dense */

static void cpu_dense_fwd(const fl_dense_desc *d, const float *x, const float *w, const float *b, float *y) {
    const int relu = d->act == FL_ACT_RELU, fused = relu || d->act == FL_ACT_LINEAR;
    if (fl_cpu_own_gemm(0, 0, d->m, d->n, d->k, x, d->k, w, d->n, 0.0f, y, d->n, d->has_bias ? b : NULL, relu,
                        fl_cpu_threads())) {
        if (fused) return;
        b = NULL; /* already added */
    } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)d->m, d->n, d->k, 1.0f, x, d->k, w, d->n, 0.0f,
                    y, d->n);
        if (!d->has_bias && d->act == FL_ACT_LINEAR) return;
    }
    fl_cpu_bias_act_rows_par(d->m, d->n, d->has_bias ? b : NULL, d->act, y);
}

static void cpu_dense_bwd(const fl_dense_desc *d, const float *x, const float *w, const float *y, float *dy,
                          float *dx, float dx_beta, float *dw, float *db) {
    act_grad_colsum(d->m, d->n, d->act, y, dy, d->has_bias ? db : NULL);
    /* dw[k, n] = x^T @ dy */
    if (!fl_cpu_own_gemm(1, 0, d->k, d->n, d->m, x, d->k, dy, d->n, 0.0f, dw, d->n, NULL, 0, fl_cpu_threads()))
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d->k, d->n, (int)d->m, 1.0f, x, d->k, dy, d->n, 0.0f,
                    dw, d->n);
    /* dx[m, k] = dy @ w^T */
    if (dx && !fl_cpu_own_gemm(0, 1, d->m, d->k, d->n, dy, d->n, w, d->n, dx_beta, dx, d->k, NULL, 0,
                               fl_cpu_threads()))
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)d->m, d->k, d->n, 1.0f, dy, d->n, w, d->n, dx_beta,
                    dx, d->k);
}

/* -------------------------------------------------------- activations */

static void cpu_act_fwd(int act, int64_t rows, int c, const float *x, float *y) {
    if (act == FL_ACT_SOFTMAX) {
#pragma omp parallel for schedule(static) num_threads(rows * c < 32768 ? 1 : fl_cpu_threads())
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = x + (size_t)r * c;
            float *yr = y + (size_t)r * c;
            float mx = xr[0];
            for (int j = 1; j < c; j++) mx = xr[j] > mx ? xr[j] : mx;
            float s = 0;
            for (int j = 0; j < c; j++) { yr[j] = expf(xr[j] - mx); s += yr[j]; }
            float inv = 1.0f / s;
            for (int j = 0; j < c; j++) yr[j] *= inv;
        }
        return;
    }
    int64_t n = rows * c;
    if (act == FL_ACT_RELU || act == FL_ACT_RELU6) { /* branch-free and vectorised, as fl_cpu_pact_fwd's ReLU */
        const float hi = act == FL_ACT_RELU6 ? 6.0f : INFINITY;
#pragma omp parallel for simd PAR_EW(n)
        for (int64_t i = 0; i < n; i++) {
            float v = x[i] > 0.0f ? x[i] : 0.0f;
            y[i] = v < hi ? v : hi;
        }
        return;
    }
    const int64_t nblk = fl_ew_chunks(n);
#pragma omp parallel for schedule(dynamic) PAR(n)
    for (int64_t k = 0; k < nblk; k++) {
        const int64_t i0 = k * FL_EW_CHUNK, len = fl_ew_len(n, i0);
        if (!fl_cpu_act_vec(act, len, x + i0, y + i0))
            for (int64_t i = i0; i < i0 + len; i++) y[i] = fl_act_forward(act, x[i]);
    }
}

static void cpu_act_bwd(int act, int64_t rows, int c, const float *x, const float *y, const float *dy, float *dx,
                        float beta) {
    if (act == FL_ACT_SOFTMAX) {
        /* dx = y * (dy - sum(dy * y)) */
#pragma omp parallel for schedule(static) num_threads(rows * c < 32768 ? 1 : fl_cpu_threads())
        for (int64_t r = 0; r < rows; r++) {
            const float *yr = y + (size_t)r * c, *g = dy + (size_t)r * c;
            float *o = dx + (size_t)r * c;
            float s = 0;
            for (int j = 0; j < c; j++) s += g[j] * yr[j];
            for (int j = 0; j < c; j++) o[j] = (beta == 0.0f ? 0.0f : o[j]) + yr[j] * (g[j] - s);
        }
        return;
    }
    int64_t n = rows * c;
    if (act == FL_ACT_RELU || act == FL_ACT_RELU6) { /* dy times a 0/1 mask: no branch on the signs */
        const float hi = act == FL_ACT_RELU6 ? 6.0f : INFINITY;
        if (beta == 0.0f) {
#pragma omp parallel for simd PAR_EW(n)
            for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * (float)((x[i] > 0.0f) & (x[i] < hi));
        } else {
#pragma omp parallel for simd PAR_EW(n)
            for (int64_t i = 0; i < n; i++) dx[i] += dy[i] * (float)((x[i] > 0.0f) & (x[i] < hi));
        }
        return;
    }
    const int64_t nblk = fl_ew_chunks(n);
#pragma omp parallel for schedule(dynamic) PAR(n)
    for (int64_t k = 0; k < nblk; k++) {
        const int64_t i0 = k * FL_EW_CHUNK, len = fl_ew_len(n, i0);
        if (fl_cpu_act_grad_x_vec(act, len, x + i0, y + i0, dy + i0, dx + i0, beta)) continue;
        for (int64_t i = i0; i < i0 + len; i++) {
            float g = dy[i] * fl_act_grad_x(act, x[i], y[i]);
            dx[i] = beta == 0.0f ? g : dx[i] + g;
        }
    }
}

/* ------------------------------------------------------------ dropout */

static void cpu_dropout_fwd(int64_t n, float rate, uint64_t seed, uint64_t stream, int64_t offset, const float *x,
                            float *y, uint8_t *mask) {
    const float scale = 1.0f / (1.0f - rate);
    const int nt = n < 32768 ? 1 : fl_cpu_threads();
    if (fl_cpu_simd()) {
#pragma omp parallel num_threads(nt)
        {
            int t = omp_get_thread_num(), T = omp_get_num_threads();
            /* split on multiples of 64 elements (whole vector groups) */
            int64_t g = (n + 63) / 64, i0 = g * t / T * 64, i1 = g * (t + 1) / T * 64;
            if (i1 > n) i1 = n;
            if (i0 < i1) fl_simd_dropout_fwd(i0, i1, offset, rate, seed, stream, x, y, mask);
        }
        return;
    }
    /* element i is Philox element offset + i: the blocks that cover [offset, offset + n) */
    const int64_t b0 = offset / 4, nb = (offset + n + 3) / 4 - b0;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t k = 0; k < nb; k++) {
        fl_philox4 r = fl_philox_block(seed, stream, (uint64_t)(b0 + k));
        for (int j = 0; j < 4; j++) {
            int64_t i = (b0 + k) * 4 + j - offset;
            if (i < 0) continue;
            if (i >= n) break;
            uint8_t keep = fl_u32_to_unit(r.v[j]) >= rate;
            mask[i] = keep;
            y[i] = keep ? x[i] * scale : 0.0f;
        }
    }
}

static void cpu_dropout_bwd(int64_t n, float rate, const uint8_t *mask, const float *dy, float *dx, float beta) {
    const float scale = 1.0f / (1.0f - rate);
    const int nt = n < 32768 ? 1 : fl_cpu_threads();
    if (fl_cpu_simd()) {
#pragma omp parallel num_threads(nt)
        {
            int t = omp_get_thread_num(), T = omp_get_num_threads();
            int64_t g = (n + 63) / 64, i0 = g * t / T * 64, i1 = g * (t + 1) / T * 64;
            if (i1 > n) i1 = n;
            if (i0 < i1) fl_simd_dropout_bwd(i0, i1, scale, mask, dy, dx, beta != 0.0f);
        }
        return;
    }
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t i = 0; i < n; i++) {
        float g = mask[i] ? dy[i] * scale : 0.0f;
        dx[i] = beta == 0.0f ? g : dx[i] + g;
    }
}

/* -------------------------------------------------------- batch norm */

/* The statistics' sums run over fixed blocks of rows in parallel, the blocks added in order after: the same
 * numbers for any thread count (the serial loops were a third of MobileNetV2's BatchNormalization time on one
 * of two threads). Within a block, BN_CHUNK rows at a time are summed in float, 8 channels a vector, and
 * each chunk's sums added into the block's double totals (a double for every element kept the loops to
 * 2-wide SSE2 conversions: 5-9 GB/s, bench/bn.c). The loops are compiled twice, for AVX2+FMA and for the
 * baseline, and the CPU picks; either way each channel's rows are added in the same order. */
static int bn_blocks(int64_t m) {
    int64_t b = m / 256;
    return b < 1 ? 1 : b > 64 ? 64 : (int)b;
}
#define BN_CHUNK 16

/* Block sums over rows [r0, r1) into a, b (c doubles each; fa, fb: c floats of scratch):
 * X: a += x - k, b += (x - k)^2, with k the channel's value in row 0 (the shift keeps the one-pass variance
 * from cancelling: the values summed are deviations, as in a two-pass one); DY: a += dy, b += dy * (x - k)
 * with k the batch mean, dy first masked by the fused ReLU's derivative where coef (the forward's s, t) is
 * given (fl_relu_mask). */
typedef enum { BN_SUM_X, BN_SUM_DY } bn_sum_kind;
/* The fused ReLU's input and its derivative: ops/math.h's fl_bn_pre and fl_relu_mask, which the GPUs'
 * kernels (kernels/norm.cl) call too. */

/* Channels j0 .. j0 + w (w <= 8) of rows [r, re) into fa, fb, each channel's rows added in order. Summing
 * a block of channels over the chunk's rows, rather than every channel row by row into fa and fb, keeps the
 * sums out of memory: there each row's add waited on the last row's store. */
static inline __attribute__((always_inline)) void bn_sums_block(bn_sum_kind kind, int64_t r, int64_t re, int c,
                                                                int j0, int w, const float *restrict x,
                                                                const float *restrict dy, const float *restrict coef,
                                                                float hi, float slope, const float *restrict mean,
                                                                float *restrict fa, float *restrict fb) {
    float sa[8] = {0}, sb[8] = {0};
    for (int64_t i = r; i < re; i++) {
        const float *restrict xr = x + (size_t)i * c + j0, *restrict mr = mean + j0;
        if (kind == BN_SUM_X) {
#pragma omp simd
            for (int j = 0; j < w; j++) { float t = xr[j] - mr[j]; sa[j] += t; sb[j] += t * t; }
        } else if (!coef) {
            const float *restrict g = dy + (size_t)i * c + j0;
#pragma omp simd
            for (int j = 0; j < w; j++) { sa[j] += g[j]; sb[j] += g[j] * (xr[j] - mr[j]); }
        } else {
            const float *restrict g = dy + (size_t)i * c + j0, *restrict fs = coef + j0, *restrict ft = fs + c;
#pragma omp simd
            for (int j = 0; j < w; j++) {
                float gj = g[j] * fl_relu_mask(fl_bn_pre(xr[j], fs[j], ft[j]), hi, slope);
                sa[j] += gj;
                sb[j] += gj * (xr[j] - mr[j]);
            }
        }
    }
    for (int j = 0; j < w; j++) { fa[j0 + j] = sa[j]; fb[j0 + j] = sb[j]; }
}

#if FL_HAVE_AVX2_TARGET
/* bn_sums_block for NB blocks of 8 channels (j0 .. j0 + 8 NB), with the sums in registers: GCC kept
 * bn_sums_block's arrays on the stack (a store and a reload per row). The same operations in the same order,
 * each channel's rows added in turn: the same sums to the bit. Several blocks at once, because one block's
 * two sums are two chains of dependent adds, each row waiting on the last (bench/bn.c, MobileNetV2's
 * shapes: the backward with its ReLU6 9.2 -> 7.5 ms on one thread, 5.6 -> 5.0 ms on two). */
FL_AVX2_TARGET static inline __attribute__((always_inline)) void
bn_sums_blocks_avx2(const int NB, bn_sum_kind kind, int64_t r, int64_t re, int c, int j0, const float *x,
                    const float *dy, const float *coef, float hi, float slope, const float *mean, float *fa,
                    float *fb) {
    const __m256 zero = _mm256_setzero_ps(), cap = _mm256_set1_ps(hi), one = _mm256_set1_ps(1.0f);
    const __m256 slv = _mm256_set1_ps(slope);
    __m256 sa[4], sb[4];
    for (int k = 0; k < NB; k++) sa[k] = sb[k] = zero;
    for (int64_t i = r; i < re; i++) {
        for (int k = 0; k < NB; k++) {
            const int j = j0 + 8 * k;
            const size_t o = (size_t)i * c + (size_t)j;
            const __m256 xv = _mm256_loadu_ps(x + o), t = _mm256_sub_ps(xv, _mm256_loadu_ps(mean + j));
            if (kind == BN_SUM_X) {
                sa[k] = _mm256_add_ps(sa[k], t);
                sb[k] = _mm256_add_ps(sb[k], _mm256_mul_ps(t, t));
                continue;
            }
            __m256 g = _mm256_loadu_ps(dy + o);
            if (coef) { /* fl_bn_pre, unfused: a multiply, then an add */
                const __m256 v =
                    _mm256_add_ps(_mm256_mul_ps(xv, _mm256_loadu_ps(coef + j)), _mm256_loadu_ps(coef + c + j));
                const __m256 mk =
                    _mm256_and_ps(_mm256_cmp_ps(v, zero, _CMP_GT_OQ), _mm256_cmp_ps(v, cap, _CMP_LT_OQ));
                /* fl_relu_mask: 1, or the slope where v < 0 (or-ed: one of the two is +0) */
                g = _mm256_mul_ps(g, _mm256_or_ps(_mm256_and_ps(mk, one),
                                                  _mm256_and_ps(_mm256_cmp_ps(v, zero, _CMP_LT_OQ), slv)));
            }
            sa[k] = _mm256_add_ps(sa[k], g);
            sb[k] = _mm256_add_ps(sb[k], _mm256_mul_ps(g, t));
        }
    }
    for (int k = 0; k < NB; k++) {
        _mm256_storeu_ps(fa + j0 + 8 * k, sa[k]);
        _mm256_storeu_ps(fb + j0 + 8 * k, sb[k]);
    }
}
/* Channels [j0, j0 + 8 * nb) of rows [r, re), 32 at a time, then 16, then 8 */
FL_AVX2_TARGET static void bn_sums_blocks8_avx2(int nb, bn_sum_kind kind, int64_t r, int64_t re, int c, int j0,
                                                const float *x, const float *dy, const float *coef, float hi,
                                                float slope, const float *mean, float *fa, float *fb) {
    for (; nb >= 4; nb -= 4, j0 += 32) bn_sums_blocks_avx2(4, kind, r, re, c, j0, x, dy, coef, hi, slope, mean, fa, fb);
    if (nb >= 2) {
        bn_sums_blocks_avx2(2, kind, r, re, c, j0, x, dy, coef, hi, slope, mean, fa, fb);
        nb -= 2, j0 += 16;
    }
    if (nb) bn_sums_blocks_avx2(1, kind, r, re, c, j0, x, dy, coef, hi, slope, mean, fa, fb);
}
#endif

static inline __attribute__((always_inline)) void bn_sums_rows(bn_sum_kind kind, bool avx2, int64_t r0, int64_t r1,
                                                               int c,
                                                               const float *restrict x, const float *restrict dy,
                                                               const float *restrict coef, float hi, float slope,
                                                               const float *restrict mean, double *restrict a,
                                                               double *restrict b, float *restrict fa,
                                                               float *restrict fb) {
    for (int64_t r = r0; r < r1; r += BN_CHUNK) {
        const int64_t re = r + BN_CHUNK < r1 ? r + BN_CHUNK : r1;
        int j0 = 0;
#if FL_HAVE_AVX2_TARGET
        if (avx2 && c >= 8) {
            bn_sums_blocks8_avx2(c / 8, kind, r, re, c, 0, x, dy, coef, hi, slope, mean, fa, fb);
            j0 = c / 8 * 8;
        }
#endif
        for (; j0 + 8 <= c; j0 += 8) bn_sums_block(kind, r, re, c, j0, 8, x, dy, coef, hi, slope, mean, fa, fb);
        if (j0 < c) bn_sums_block(kind, r, re, c, j0, c - j0, x, dy, coef, hi, slope, mean, fa, fb);
        for (int j = 0; j < c; j++) { a[j] += fa[j]; b[j] += fb[j]; }
    }
}
#if FL_HAVE_AVX2_TARGET
FL_AVX2_TARGET static void bn_sums_avx2(bn_sum_kind kind, int64_t r0, int64_t r1, int c, const float *x,
                                        const float *dy, const float *coef, float hi, float slope,
                                        const float *mean, double *a,
                                        double *b, float *fa, float *fb) {
    bn_sums_rows(kind, true, r0, r1, c, x, dy, coef, hi, slope, mean, a, b, fa, fb);
}
#endif
static void bn_sums_base(bn_sum_kind kind, int64_t r0, int64_t r1, int c, const float *x, const float *dy,
                         const float *coef, float hi, float slope, const float *mean, double *a, double *b, float *fa,
                         float *fb) {
    bn_sums_rows(kind, false, r0, r1, c, x, dy, coef, hi, slope, mean, a, b, fa, fb);
}

/* part[k*2c + j]: block k's sums a (j < c) and b (c <= j < 2c), zeroed here; false when out of memory */
static bool bn_block_sums(bn_sum_kind kind, int64_t m, int c, const float *x, const float *dy, const float *coef,
                          float hi, float slope, const float *mean, double *part, int nb) {
    float *scratch = malloc((size_t)nb * 2 * c * sizeof(float));
    if (!scratch) return false;
    memset(part, 0, (size_t)nb * 2 * c * sizeof(double));
    const int avx2 = fl_cpu_avx2();
#pragma omp parallel for schedule(dynamic) num_threads(m * c < 32768 ? 1 : fl_cpu_threads())
    for (int k = 0; k < nb; k++) {
        double *a = part + (size_t)k * 2 * c;
        float *fa = scratch + (size_t)k * 2 * c;
        const int64_t r0 = m * k / nb, r1 = m * (k + 1) / nb;
#if FL_HAVE_AVX2_TARGET
        if (avx2) { bn_sums_avx2(kind, r0, r1, c, x, dy, coef, hi, slope, mean, a, a + c, fa, fa + c); continue; }
#endif
        bn_sums_base(kind, r0, r1, c, x, dy, coef, hi, slope, mean, a, a + c, fa, fa + c);
    }
    (void)avx2;
    free(scratch);
    for (int k = 1; k < nb; k++) /* the blocks' sums added in block order into part[0 .. 2c) */
        for (int j = 0; j < 2 * c; j++) part[j] += part[(size_t)k * 2 * c + j];
    return true;
}

/* y = x * s + t per channel over rows [r0, r1), through a ReLU capped at hi where hi > 0, or a LeakyReLU where
 * rl.slope is nonzero (the forward with the ReLU after it); or, given g, y (accumulate: +)= s * g + t +
 * u * (x - mean) (dx of the backward
 * pass, see cpu_bn_bwd), g masked by the fused ReLU's derivative at fl_bn_pre(x, s', t') where coef (s', then
 * t') is given. */
typedef struct bn_relu { const float *coef; float hi, slope; } bn_relu;
/* The backward's fused ReLU (act, and slope for a LeakyReLU) where its forward's s, t (coef) are given */
static bn_relu grad_relu(const float *coef, int act, float slope) {
    return (bn_relu){coef, coef ? fl_cpu_relu_cap(act) : 0.0f, coef ? slope : 0.0f};
}
static inline __attribute__((always_inline)) void bn_affine_rows(int64_t r0, int64_t r1, int c,
                                                                 const float *restrict x, const float *restrict g,
                                                                 const float *restrict mean, const float *restrict s,
                                                                 const float *restrict t, const float *restrict u,
                                                                 float *restrict y, bool accumulate, bn_relu rl) {
    const float hi = rl.hi;
    for (int64_t i = r0; i < r1; i++) {
        const float *restrict xr = x + (size_t)i * c;
        float *restrict yr = y + (size_t)i * c;
        if (!g && rl.slope != 0.0f) { /* a LeakyReLU (no cap): fl_pact_forward's arithmetic */
            const float a = rl.slope;
#pragma omp simd
            for (int j = 0; j < c; j++) {
                /* max(v, 0) + a min(v, 0): one term is 0, so the sum is exact (but a product that underflows
                 * to -0 gives +0), and it vectorizes (a select of the product did not) */
                const float v = fl_bn_pre(xr[j], s[j], t[j]), p = v > 0.0f ? v : 0.0f, q = v < 0.0f ? v : 0.0f;
                yr[j] = p + a * q;
            }
        } else if (!g && hi > 0.0f) {
#pragma omp simd
            for (int j = 0; j < c; j++) {
                float v = fl_bn_pre(xr[j], s[j], t[j]);
                v = v > 0.0f ? v : 0.0f;
                yr[j] = v < hi ? v : hi;
            }
        } else if (!g) {
#pragma omp simd
            for (int j = 0; j < c; j++) yr[j] = xr[j] * s[j] + t[j];
        } else if (rl.coef) {
            const float *restrict gr = g + (size_t)i * c, *restrict fs = rl.coef, *restrict ft = fs + c;
            if (accumulate) {
#pragma omp simd
                for (int j = 0; j < c; j++)
                    yr[j] += gr[j] * fl_relu_mask(fl_bn_pre(xr[j], fs[j], ft[j]), hi, rl.slope) * s[j] + t[j] +
                             u[j] * (xr[j] - mean[j]);
            } else {
#pragma omp simd
                for (int j = 0; j < c; j++)
                    yr[j] = gr[j] * fl_relu_mask(fl_bn_pre(xr[j], fs[j], ft[j]), hi, rl.slope) * s[j] + t[j] +
                            u[j] * (xr[j] - mean[j]);
            }
        } else {
            const float *restrict gr = g + (size_t)i * c;
            if (accumulate) {
#pragma omp simd
                for (int j = 0; j < c; j++) yr[j] += gr[j] * s[j] + t[j] + u[j] * (xr[j] - mean[j]);
            } else {
#pragma omp simd
                for (int j = 0; j < c; j++) yr[j] = gr[j] * s[j] + t[j] + u[j] * (xr[j] - mean[j]);
            }
        }
    }
}
#if FL_HAVE_AVX2_TARGET
FL_AVX2_TARGET static void bn_affine_avx2(int64_t r0, int64_t r1, int c, const float *x, const float *g,
                                          const float *mean, const float *s, const float *t, const float *u, float *y,
                                          bool accumulate, bn_relu rl) {
    bn_affine_rows(r0, r1, c, x, g, mean, s, t, u, y, accumulate, rl);
}
#endif
static void bn_affine_base(int64_t r0, int64_t r1, int c, const float *x, const float *g, const float *mean,
                           const float *s, const float *t, const float *u, float *y, bool accumulate, bn_relu rl) {
    bn_affine_rows(r0, r1, c, x, g, mean, s, t, u, y, accumulate, rl);
}
static void bn_affine(int64_t m, int c, const float *x, const float *g, const float *mean, const float *s,
                      const float *t, const float *u, float *y, bool accumulate, bn_relu rl) {
    const int avx2 = fl_cpu_avx2();
    const int64_t rb = ew_rows(c), nblk = (m + rb - 1) / rb;
#pragma omp parallel for schedule(dynamic) PAR(m * c)
    for (int64_t k = 0; k < nblk; k++) {
        const int64_t r0 = k * rb, r1 = r0 + rb < m ? r0 + rb : m;
#if FL_HAVE_AVX2_TARGET
        if (avx2) bn_affine_avx2(r0, r1, c, x, g, mean, s, t, u, y, accumulate, rl);
        else
#endif
            bn_affine_base(r0, r1, c, x, g, mean, s, t, u, y, accumulate, rl);
    }
    (void)avx2;
}

/* Training: the batch's mean and biased variance (one pass over x, shifted by its first row: see
 * bn_sums_rows), and y by Keras's formula: inv = rsqrt(var + eps) * gamma, y = x * inv + (beta - mean * inv);
 * then through the ReLU when act says (bn_fwd_train_act), leaving inv and res in coef where given. */
static void bn_fwd_train(const fl_bn_desc *d, int act, const float *x, const float *gamma, const float *beta,
                         float *y, float *coef, float *save_mean, float *save_invstd, float *moving_mean,
                         float *moving_var) {
    const int c = d->c;
    const int64_t m = d->m;
    const int nb = bn_blocks(m);
    double *part = malloc((size_t)nb * 2 * c * sizeof(double));
    float *st = coef ? coef : malloc((size_t)2 * c * sizeof(float));
    /* small buffers (the graph preallocates the large ones); x's row 0 is the shift */
    if (!part || !st || !bn_block_sums(BN_SUM_X, m, c, x, NULL, NULL, 0.0f, 0.0f, x, part, nb)) {
        free(part);
        if (st != coef) free(st);
        return;
    }
    float *s = st, *t = st + c;
    for (int j = 0; j < c; j++) {
        double d1 = part[j] / (double)m, v = part[c + j] / (double)m - d1 * d1;
        float mean = (float)((double)x[j] + d1), var = (float)(v > 0 ? v : 0);
        save_mean[j] = mean;
        save_invstd[j] = 1.0f / sqrtf(var + d->eps);
        moving_mean[j] = moving_mean[j] * d->momentum + mean * (1.0f - d->momentum);
        moving_var[j] = moving_var[j] * d->momentum + var * (1.0f - d->momentum);
        s[j] = gamma ? save_invstd[j] * gamma[j] : save_invstd[j];
        t[j] = -mean * s[j] + (beta ? beta[j] : 0.0f);
    }
    free(part);
    if (y) /* none where the Add after it applies s and t (add_affine) */
        bn_affine(m, c, x, NULL, NULL, s, t, NULL, y, false,
                  (bn_relu){NULL, act == FL_ACT_LINEAR ? 0.0f : fl_cpu_relu_cap(act), d->slope});
    if (st != coef) free(st);
}

static void cpu_bn_fwd_train(const fl_bn_desc *d, const float *x, const float *gamma, const float *beta, float *y,
                             float *save_mean, float *save_invstd, float *moving_mean, float *moving_var) {
    bn_fwd_train(d, FL_ACT_LINEAR, x, gamma, beta, y, NULL, save_mean, save_invstd, moving_mean, moving_var);
}

static void cpu_bn_fwd_train_act(const fl_bn_desc *d, int act, const float *x, const float *gamma, const float *beta,
                                 float *y, float *coef, float *save_mean, float *save_invstd, float *moving_mean,
                                 float *moving_var) {
    bn_fwd_train(d, act, x, gamma, beta, y, coef, save_mean, save_invstd, moving_mean, moving_var);
}

/* Inference: Keras's (and TensorFlow's) formula, per channel inv = rsqrt(var + eps) * gamma and
 * res = beta - mean * inv, then y = x * inv + res: one multiply-add per element (it was a division and a
 * square root per element, 10% of MobileNetV2's predict, perf, 1 thread). */
static void cpu_bn_fwd_infer(const fl_bn_desc *d, const float *x, const float *gamma, const float *beta,
                             const float *mm, const float *mv, float *y) {
    const int c = d->c;
    float *inv = malloc((size_t)c * 2 * sizeof(float));
    if (!inv) return;
    float *res = inv + c;
    for (int j = 0; j < c; j++) {
        inv[j] = 1.0f / sqrtf(mv[j] + d->eps);
        if (gamma) inv[j] *= gamma[j];
        res[j] = -mm[j] * inv[j];
        if (beta) res[j] += beta[j];
    }
    bn_affine(d->m, c, x, NULL, NULL, inv, res, NULL, y, false, (bn_relu){NULL, 0.0f, 0.0f});
    free(inv);
}

/* dx = gamma * invstd * (dy - mean(dy) - xhat * mean(dy * xhat)), xhat = (x - mean) * invstd, as
 * dx = s * dy + t + u * (x - mean) with per-channel s = gamma * invstd, t = -s * mean(dy) and
 * u = -s * invstd^2 * mean(dy * (x - mean)): two multiply-adds and a subtraction an element (x - mean
 * first, so an x far from zero loses nothing). dgamma = sum(dy * xhat), dbeta = sum(dy). With the ReLU
 * fused (rl.coef: the forward's s, t), dy is the ReLU's output gradient, masked as it is read. */
static void bn_bwd(const fl_bn_desc *d, bn_relu rl, const float *x, const float *gamma, const float *mean,
                   const float *invstd, const float *dy, float *dx, float beta, float *dgamma, float *dbeta,
                   float *stu_out) {
    const int c = d->c;
    const int64_t m = d->m;
    const int nb = bn_blocks(m);
    double *part = malloc((size_t)nb * 2 * c * sizeof(double));
    float *stu = stu_out ? stu_out : malloc((size_t)3 * c * sizeof(float));
    if (!part || !stu || !bn_block_sums(BN_SUM_DY, m, c, x, dy, rl.coef, rl.hi, rl.slope, mean, part, nb)) {
        free(part);
        if (stu != stu_out) free(stu);
        return;
    }
    const double *sdy = part, *sdyd = part + c; /* sum(dy), sum(dy * (x - mean)) */
    if (dgamma)
        for (int j = 0; j < c; j++) dgamma[j] = (float)(sdyd[j] * invstd[j]);
    if (dbeta)
        for (int j = 0; j < c; j++) dbeta[j] = (float)sdy[j];
    if (dx || stu_out) {
        float *s = stu, *t = stu + c, *u = stu + 2 * c;
        for (int j = 0; j < c; j++) {
            double sj = (double)(gamma ? gamma[j] : 1.0f) * invstd[j], iv = invstd[j];
            s[j] = (float)sj;
            t[j] = (float)(-sj * sdy[j] / (double)m);
            u[j] = (float)(-sj * iv * iv * sdyd[j] / (double)m);
        }
        if (dx) bn_affine(m, c, x, dy, mean, s, t, u, dx, beta != 0.0f, rl);
    }
    free(part);
    if (stu != stu_out) free(stu);
}

static void cpu_bn_bwd_coef(const fl_bn_desc *d, int act, const float *coef, const float *x, const float *gamma,
                            const float *mean, const float *invstd, const float *dy, float *dgamma, float *dbeta,
                            float *stu) {
    bn_bwd(d, grad_relu(coef, act, d->slope), x, gamma, mean, invstd, dy, NULL, 0.0f, dgamma, dbeta, stu);
}

/* The normalisation's dx of rows [0, rows) (bn_bwd_coef's coefficients; see bn_affine_rows): the same
 * arithmetic as bn_bwd's pass, for the convolution that forms it a sample at a time (threads: the caller's). */
void fl_cpu_bn_dx_rows(int64_t rows, int c, const fl_bn_grad *bg, const float *g, const float *x, float *dx) {
    const float *s = bg->stu, *t = s + c, *u = s + 2 * c;
    const bn_relu rl = grad_relu(bg->coef, bg->act, bg->slope);
#if FL_HAVE_AVX2_TARGET
    if (fl_cpu_avx2()) {
        bn_affine_avx2(0, rows, c, x, g, bg->mean, s, t, u, dx, false, rl);
        return;
    }
#endif
    bn_affine_base(0, rows, c, x, g, bg->mean, s, t, u, dx, false, rl);
}

void fl_cpu_bn_apply_rows(int64_t rows, int c, const float *st, int act, const float *x, float *y) {
    const bn_relu rl = {NULL, act == FL_ACT_LINEAR ? 0.0f : fl_cpu_relu_cap(act), 0.0f};
#if FL_HAVE_AVX2_TARGET
    if (fl_cpu_avx2()) {
        bn_affine_avx2(0, rows, c, x, NULL, NULL, st, st + c, NULL, y, false, rl);
        return;
    }
#endif
    bn_affine_base(0, rows, c, x, NULL, NULL, st, st + c, NULL, y, false, rl);
}

/* The same over all m rows, in parallel: where the convolution cannot form it as it reads. */
void fl_cpu_bn_dx(int64_t m, int c, const fl_bn_grad *bg, const float *x, float *dx) {
    const float *s = bg->stu;
    bn_affine(m, c, x, bg->g, bg->mean, s, s + c, s + 2 * c, dx, false,
              grad_relu(bg->coef, bg->act, bg->slope));
}

static void cpu_bn_bwd(const fl_bn_desc *d, const float *x, const float *gamma, const float *mean,
                       const float *invstd, const float *dy, float *dx, float beta, float *dgamma, float *dbeta) {
    bn_bwd(d, (bn_relu){NULL, 0.0f, 0.0f}, x, gamma, mean, invstd, dy, dx, beta, dgamma, dbeta, NULL);
}

static void cpu_bn_bwd_act(const fl_bn_desc *d, int act, const float *coef, const float *x, const float *gamma,
                           const float *mean, const float *invstd, const float *dy, float *dx, float beta,
                           float *dgamma, float *dbeta) {
    bn_bwd(d, grad_relu(coef, act, d->slope), x, gamma, mean, invstd, dy, dx, beta, dgamma, dbeta, NULL);
}

static void cpu_accumulate(int64_t n, const float *src, float *dst, float beta) {
#pragma omp parallel for PAR_EW(n)
    for (int64_t i = 0; i < n; i++) dst[i] = beta == 0.0f ? src[i] : dst[i] + src[i];
}

/* ------------------------------------------------------------- losses */

static void cpu_loss(const fl_loss_desc *d, const float *pred, const float *target, float *row_loss, float *grad) {
    const int c = d->c;
#pragma omp parallel for schedule(static) num_threads(d->rows * c < 32768 ? 1 : fl_cpu_threads())
    for (int64_t r = 0; r < d->rows; r++) {
        const float *t = d->code == FL_LC_SCCE ? NULL : target + (size_t)r * c;
        int cls = d->code == FL_LC_SCCE ? (int)target[r] : -1;
        row_loss[r] = fl_loss_row(d->code, d->input, c, d->scale, pred + (size_t)r * c, t, cls,
                                  grad ? grad + (size_t)r * c : NULL);
    }
}

static void cpu_metric(int code, int64_t rows, int c, const float *pred, const float *target, float *score) {
#pragma omp parallel for schedule(static) num_threads(rows * c < 32768 ? 1 : fl_cpu_threads())
    for (int64_t r = 0; r < rows; r++) {
        bool sparse = code == FL_MC_SPARSE_CATEGORICAL;
        score[r] = fl_metric_row(code, c, pred + (size_t)r * c, sparse ? NULL : target + (size_t)r * c,
                                 sparse ? (int)target[r] : -1);
    }
}

static void cpu_sum_into(int64_t n, const float *x, double scale, double *acc) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += x[i];
    acc[0] += scale * s;
}

/* ---------------------------------------------------------- optimizer */

/* Keras's _clip_gradients, in place on the gradients (they are cleared
 * before the next step's backward pass) before the update reads them. */
static float cpu_sumsq(const float *g, int64_t n) {
    double s = 0; /* float32 in Keras; double here: within its rounding */
    for (int64_t i = 0; i < n; i++) s += (double)g[i] * g[i];
    return (float)s;
}

static void cpu_clip_gradients(const fl_opt_desc *d, const fl_param_ref *ps, int np) {
    float total = 0.0f;
    if (d->clip_mode == FL_CLIP_GLOBAL_NORM)
        for (int k = 0; k < np; k++) total += cpu_sumsq(ps[k].g, ps[k].n);
    for (int k = 0; k < np; k++) {
        float sum = d->clip_mode == FL_CLIP_NORM ? cpu_sumsq(ps[k].g, ps[k].n) : total;
        float *g = ps[k].g;
#pragma omp parallel for schedule(static) num_threads(ps[k].n < 32768 ? 1 : fl_cpu_threads())
        for (int64_t i = 0; i < ps[k].n; i++) g[i] = fl_clip_grad(d->clip_mode, d->clip, sum, g[i]);
    }
}

static void cpu_optimizer_step(const fl_opt_desc *d, const fl_param_ref *ps, int np) {
    if (d->clip_mode != FL_CLIP_NONE) cpu_clip_gradients(d, ps, np);
    float lr_t = d->lr;
    if (d->code == FL_OPT_ADAM || d->code == FL_OPT_ADAMW) {
        double b1p = pow(d->beta1, (double)d->step), b2p = pow(d->beta2, (double)d->step);
        lr_t = (float)(d->lr * sqrt(1.0 - b2p) / (1.0 - b1p));
    }
    if (fl_cpu_simd() && (d->code == FL_OPT_ADAM || d->code == FL_OPT_ADAMW)) {
        const float wd = d->code == FL_OPT_ADAMW ? d->weight_decay : 0.0f;
#pragma omp parallel num_threads(fl_cpu_threads())
        {
            int t = omp_get_thread_num(), T = omp_get_num_threads();
            for (int k = 0; k < np; k++) {
                const fl_param_ref *p = &ps[k];
                /* thread ranges on multiples of 16 elements */
                int64_t g = (p->n + 15) / 16, i0 = g * t / T * 16, i1 = g * (t + 1) / T * 16;
                if (i1 > p->n) i1 = p->n;
                if (i0 < i1)
                    fl_simd_adam(i0, i1, p->w, p->s0, p->s1, p->g, lr_t, d->beta1, d->beta2, d->eps, wd, d->lr);
            }
        }
        return;
    }
#pragma omp parallel num_threads(fl_cpu_threads())
    for (int k = 0; k < np; k++) {
        const fl_param_ref *p = &ps[k];
        float *w = p->w;
        const float *g = p->g;
#pragma omp for schedule(static) nowait
        for (int64_t i = 0; i < p->n; i++) {
            switch (d->code) {
            case FL_OPT_SGD: fl_sgd_update(&w[i], p->s0 ? &p->s0[i] : NULL, g[i], d->lr, d->momentum, d->nesterov); break;
            case FL_OPT_ADAMW: w[i] -= w[i] * d->weight_decay * d->lr; /* fall through */
            case FL_OPT_ADAM: fl_adam_update(&w[i], &p->s0[i], &p->s1[i], g[i], lr_t, d->beta1, d->beta2, d->eps); break;
            case FL_OPT_RMSPROP:
                fl_rmsprop_update(&w[i], &p->s0[i], p->s1 ? &p->s1[i] : NULL, p->s2 ? &p->s2[i] : NULL, g[i], d->lr,
                                  d->rho, d->momentum, d->eps, d->centered);
                break;
            }
        }
    }
}

static const fl_backend cpu_backend = {
    .name = "cpu",
    .host_memory = 1,
    .infer_budget = fl_cpu_infer_budget,
    .infer_weight_cache = fl_cpu_infer_weight_cache,
    .conv_res = 1,
    .conv_dx_gate = 1,
    .conv_slope = fl_cpu_conv_slope,
    .alloc = cpu_alloc,
    .alloc_zeroed = cpu_alloc_zeroed,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .sync = cpu_sync,
    .mem_info = cpu_mem_info,
    .gather_rows = cpu_gather_rows,
    .dense_fwd = cpu_dense_fwd,
    .dense_bwd = cpu_dense_bwd,
    .conv_workspace = fl_cpu_conv_workspace,
    .conv2d_fwd = fl_cpu_conv2d_fwd,
    .conv2d_bwd = fl_cpu_conv2d_bwd,
    .depthwise_fwd = fl_cpu_depthwise_fwd,
    .depthwise_bwd = fl_cpu_depthwise_bwd,
    .conv2d_maxpool_fwd = fl_cpu_conv2d_maxpool_fwd,
    .conv2d_maxpool_bwd = fl_cpu_conv2d_maxpool_bwd,
    .maxpool_fwd = fl_cpu_maxpool_fwd,
    .maxpool_bwd = fl_cpu_maxpool_bwd,
    .avgpool_fwd = fl_cpu_avgpool_fwd,
    .avgpool_bwd = fl_cpu_avgpool_bwd,
    .gap_fwd = fl_cpu_gap_fwd,
    .gap_bwd = fl_cpu_gap_bwd,
    .act_fwd = cpu_act_fwd,
    .act_bwd = cpu_act_bwd,
    .dropout_fwd = cpu_dropout_fwd,
    .dropout_bwd = cpu_dropout_bwd,
    .bn_fwd_train = cpu_bn_fwd_train,
    .bn_fwd_infer = cpu_bn_fwd_infer,
    .bn_bwd = cpu_bn_bwd,
    .bn_fwd_train_act = cpu_bn_fwd_train_act,
    .bn_bwd_act = cpu_bn_bwd_act,
    .bn_bwd_coef = cpu_bn_bwd_coef,
    .conv2d_bn_bwd = fl_cpu_conv2d_bn_bwd,
    .mul = fl_cpu_mul,
    .concat_fwd = fl_cpu_concat_fwd,
    .concat_bwd = fl_cpu_concat_bwd,
    .pad2d = fl_cpu_pad2d,
    .binary = fl_cpu_binary,
    .add_affine = fl_cpu_add_affine,
    .fill = fl_cpu_fill,
    .bmerge_fwd = fl_cpu_bmerge_fwd,
    .bmerge_bwd = fl_cpu_bmerge_bwd,
    .axpby = fl_cpu_axpby,
    .minmax_grad = fl_cpu_minmax_grad,
    .pact_fwd = fl_cpu_pact_fwd,
    .pact_bwd = fl_cpu_pact_bwd,
    .softmax_axis_fwd = fl_cpu_softmax_axis_fwd,
    .softmax_axis_bwd = fl_cpu_softmax_axis_bwd,
    .prelu_fwd = fl_cpu_prelu_fwd,
    .prelu_bwd = fl_cpu_prelu_bwd,
    .normalize_fwd = fl_cpu_normalize_fwd,
    .normalize_bwd = fl_cpu_normalize_bwd,
    .upsample2d_fwd = fl_cpu_upsample2d_fwd,
    .upsample2d_bwd = fl_cpu_upsample2d_bwd,
    .conv2d_transpose_fwd = fl_cpu_conv2d_transpose_fwd,
    .conv2d_transpose_bwd = fl_cpu_conv2d_transpose_bwd,
    .permute = fl_cpu_permute,
    .accumulate = cpu_accumulate,
    .loss = cpu_loss,
    .metric = cpu_metric,
    .sum_into = cpu_sum_into,
    .optimizer_step = cpu_optimizer_step,
    .layernorm_fwd = fl_cpu_layernorm_fwd,
    .layernorm_bwd = fl_cpu_layernorm_bwd,
    .gemm_batched = fl_cpu_gemm_batched,
    .attn_softmax_fwd = fl_cpu_attn_softmax_fwd,
    .attn_softmax_bwd = fl_cpu_attn_softmax_bwd,
    .attn_fwd_blocked = fl_cpu_attn_fwd_blocked,
    .attn_bwd_blocked = fl_cpu_attn_bwd_blocked,
    .rnn_fwd = fl_cpu_rnn_fwd,
    .rnn_bwd = fl_cpu_rnn_bwd,
    .embedding_fwd = fl_cpu_embedding_fwd,
    .embedding_bwd = fl_cpu_embedding_bwd,
    .seq_mask = fl_cpu_seq_mask,
    .masked_gap1d_fwd = fl_cpu_masked_gap1d_fwd,
    .masked_gap1d_bwd = fl_cpu_masked_gap1d_bwd,
    .loss_mask = fl_cpu_loss_mask,
    .loss_weight = fl_cpu_loss_weight,
    .scalar_mul_fwd = fl_cpu_scalar_mul_fwd,
    .scalar_mul_bwd = fl_cpu_scalar_mul_bwd,
    .attn_concat_fwd = fl_cpu_attn_concat_fwd,
    .attn_concat_bwd = fl_cpu_attn_concat_bwd,
    .conv_pre = fl_cpu_conv_pre,
    .bn_act_slope = 1,
};

const fl_backend *fl_backend_cpu(void) { return &cpu_backend; }
