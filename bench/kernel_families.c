/*
 * kernel_families.c — each kernel family of the backend table (backend.h,
 * fl_backend) timed on every backend this process has, side by side in one
 * run: the CPU, CUDA (the plugin, where a GPU is usable) and OpenCL (the
 * plugin's device: a GPU where there is one, else PoCL's CPU device).
 * Issue 46 asks for the OpenCL plugin within 2x of the CUDA one on a GPU;
 * a GPU run of this program gives those figures, family by family.
 *
 * Each family is one realistic layer (a ResNet/MobileNet convolution, a
 * transformer's attention and LayerNormalization, an LSTM, Adam over ~1M
 * weights, ...), its entries called directly with the descriptors the ops
 * (src/ops/, src/nn/) fill. Buffers come from the backend's alloc with
 * seeded random data uploaded; a call is timed up to the backend's sync;
 * each part (forward, backward) is warmed up once, then the fastest of R
 * calls is kept (fewer where one call takes more than the budget allows).
 * A part that mutates its input in place (the attention softmax, the LSTM's
 * aux, Adam's weights) has its input restored before each call, untimed, so
 * that every call does the same work and its output can be compared: the
 * "diff" columns are each backend's largest difference from the CPU's
 * output, relative to the CPU output's largest magnitude. An entry the
 * backend lacks (NULL) prints "-".
 *
 * build (after cmake --build build; the binary goes next to the plugins,
 * which are looked for beside the program):
 *   cc -O2 -fopenmp -Iinclude -Isrc bench/kernel_families.c build/libflynn.a \
 *      $(pkg-config --cflags --libs openblas libzip json-c zlib) -lm -o build/bench_kernel_families
 * (tests/gpu/prepare.sh packs build-gpu/bench_kernel_families: the same command with build-gpu/ for build/.)
 * usage: build/bench_kernel_families [--scale S] [--reps R] [--budget SECONDS] [--deadline SECONDS]
 *          [--only FAMILY,...] [--backends cpu,cuda,opencl] [--tf32] [--json [FILE]]
 *   --scale    multiplies every family's batch (default 1; 0.25 for a quick run)
 *   --reps     calls timed per part, the fastest kept (default 5)
 *   --budget   seconds a part may take on one backend: fewer calls where one is slow (default 3)
 *   --deadline start no family after SECONDS from the start (default: none); the rest are listed as skipped
 *   --tf32     let CUDA use TF32 tensor cores (default off: OpenCL has only float32)
 *   --json     also write the results to FILE as JSON, one object per family per backend; without FILE
 *              (or FILE "-") the JSON goes to stdout and the table to stderr (tests/gpu/run.sh keeps it so)
 *   --only, --backends: a subset of the families (--help lists them) and of the backends
 * FLYNN_OPENCL_PLUGIN, FLYNN_OPENCL_DEVICE and FLYNN_CUDA_PLUGIN pick the plugins and the OpenCL device as
 * for flynn itself. The CPU's threads follow the load as training's do (fl_threads_follow_load); the JSON
 * records them. Exit status 1 when a part failed (a device error, out of memory), 2 on bad arguments.
 */
#define _GNU_SOURCE
#include "backend/backend.h"
#include "device/gpu.h"
#include "device/opencl.h"
#include "ops/math.h"
#include "flynn/flynn.h"

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "bench_util.h"

/* ------------------------------------------------------------ options */

static double g_scale = 1.0, g_budget = 3.0, g_deadline = 0; /* 0: none */
static int g_reps = 5;

/* a family's batch at this scale */
static int64_t B(int64_t base) {
    int64_t b = (int64_t)llround((double)base * g_scale);
    return b < 1 ? 1 : b;
}

/* ------------------------------------------------------------ buffers */

#define MAXMEM 48
#define NSLOT 24
typedef struct ctx {
    const fl_backend *be;
    void *mem[MAXMEM];
    int nmem, failed;
    float *p[NSLOT];       /* the family's buffers, by slot */
    void *ws;              /* convolution workspace */
    int32_t *argmax;       /* max pooling */
    fl_param_ref prm[4];   /* Adam */
    double *acc;           /* the loss's running sum */
} ctx;

static uint64_t g_rng;
static float frand(void) { /* splitmix64: the same numbers on every machine */
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(z >> 40) * (1.0f / 16777216.0f);
}

static void *dev_alloc(ctx *c, size_t bytes) {
    if (c->failed || c->nmem == MAXMEM) { c->failed = 1; return NULL; }
    void *p = c->be->alloc(bytes ? bytes : 4);
    if (!p) {
        fprintf(stderr, "%s: allocating %zu bytes failed: %s\n", c->be->name, bytes, fl_last_error());
        c->failed = 1;
        return NULL;
    }
    c->mem[c->nmem++] = p;
    return p;
}

static float *dev_upload(ctx *c, const void *host, size_t bytes) {
    void *p = dev_alloc(c, bytes);
    if (p) c->be->upload(p, host, bytes);
    return p;
}

/* n floats uniform in [lo, hi), seeded: the same data on every backend */
static float *dev_rand(ctx *c, size_t n, unsigned seed, float lo, float hi) {
    float *h = malloc(n * sizeof(float));
    if (!h) { fprintf(stderr, "out of memory (%zu floats)\n", n); exit(1); }
    g_rng = seed * 0x2545F4914F6CDD1Dull + 1;
    for (size_t i = 0; i < n; i++) h[i] = lo + (hi - lo) * frand();
    float *p = dev_upload(c, h, n * sizeof(float));
    free(h);
    return p;
}

static float *dev_zero(ctx *c, size_t n) {
    float *p = dev_alloc(c, n * sizeof(float));
    if (p) c->be->zero(p, n * sizeof(float));
    return p;
}

static void ctx_free(ctx *c) {
    for (int i = 0; i < c->nmem; i++) c->be->free(c->mem[i]);
    const fl_backend *be = c->be;
    memset(c, 0, sizeof *c);
    c->be = be;
}

static void cp(ctx *c, float *dst, const float *src, int64_t n) { c->be->copy(dst, src, (size_t)n * sizeof(float)); }

/* ------------------------------------------------------------ families */

#define NEED(e) offsetof(fl_backend, e)
#define MAXNEED 6

typedef struct part {
    const char *name;              /* "fwd", "bwd", ... */
    void (*run)(ctx *c);
    void (*reset)(ctx *c);         /* untimed, before every call; NULL: none */
    size_t need[MAXNEED];          /* the entries it calls (NEED()), 0-terminated (offset 0 is `name`) */
    int check;                     /* the slot compared with the CPU's after the part, -1: none */
    const char *check_name;
} part;

typedef struct family {
    const char *name;
    const char *layer;             /* the layer the shape stands for */
    void (*init)(struct family *f);/* descriptors and the shape line, from g_scale */
    void (*setup)(ctx *c);         /* the buffers */
    part parts[2];
    int nparts;
    char shape[200];
    int64_t check_n[2];            /* floats compared per part */
} family;

static int has_entries(const fl_backend *be, const size_t *need) {
    for (int i = 0; i < MAXNEED && need[i]; i++)
        if (!*(void *const *)((const char *)be + need[i])) return 0;
    return 1;
}

/* Y_BWD: the backward of a layer with a fused activation reads y for act'(y); it gets a y uploaded as the
 * other inputs are, the same bits on every backend, rather than its own forward's: a pre-activation that
 * rounds to either side of 0 on two backends would flip a ReLU's mask and show as a difference of the
 * weights' gradient that says nothing about the backward. The work is the same. */

/* -- dense: a transformer's feed-forward layer (y = relu(x W + b)) */
static fl_dense_desc DD;
static void dense_init(family *f) {
    DD = (fl_dense_desc){.m = B(256), .k = 1024, .n = 1024, .act = FL_ACT_RELU, .has_bias = 1};
    snprintf(f->shape, sizeof f->shape, "x %lldx%d @ w %dx%d + b, relu", (long long)DD.m, DD.k, DD.k, DD.n);
    f->check_n[0] = DD.m * DD.n;
    f->check_n[1] = (int64_t)DD.k * DD.n;
}
static void dense_setup(ctx *c) {
    c->p[0] = dev_rand(c, (size_t)(DD.m * DD.k), 1, -1, 1);
    c->p[1] = dev_rand(c, (size_t)DD.k * DD.n, 2, -0.05f, 0.05f);
    c->p[2] = dev_rand(c, (size_t)DD.n, 3, -0.1f, 0.1f);
    c->p[3] = dev_zero(c, (size_t)(DD.m * DD.n));
    c->p[4] = dev_rand(c, (size_t)(DD.m * DD.n), 4, -1, 1);
    c->p[5] = dev_zero(c, (size_t)(DD.m * DD.k));
    c->p[6] = dev_zero(c, (size_t)DD.k * DD.n);
    c->p[7] = dev_zero(c, (size_t)DD.n);
    c->p[8] = dev_rand(c, (size_t)(DD.m * DD.n), 5, -1, 1); /* the y backward reads (see Y_BWD) */
}
static void dense_fwd(ctx *c) { c->be->dense_fwd(&DD, c->p[0], c->p[1], c->p[2], c->p[3]); }
static void dense_bwd(ctx *c) {
    c->be->dense_bwd(&DD, c->p[0], c->p[1], c->p[8], c->p[4], c->p[5], 0.0f, c->p[6], c->p[7]);
}

/* -- conv2d: a ResNet stage (3x3, stride 1, "same", 64 -> 64, relu) */
static fl_conv_desc CD;
static void conv_init(family *f) {
    CD = (fl_conv_desc){.n = B(32), .h = 32, .w = 32, .c = 64, .oh = 32, .ow = 32, .oc = 64, .kh = 3, .kw = 3,
                        .sh = 1, .sw = 1, .pt = 1, .pl = 1, .act = FL_ACT_RELU, .has_bias = 1, .dil_h = 1,
                        .dil_w = 1, .groups = 1};
    snprintf(f->shape, sizeof f->shape, "%lld x %dx%dx%d, 3x3 s1 same -> %d, relu", (long long)CD.n, CD.h, CD.w,
             CD.c, CD.oc);
    f->check_n[0] = CD.n * CD.oh * CD.ow * CD.oc;
    f->check_n[1] = (int64_t)9 * CD.c * CD.oc;
}
static void conv_setup(ctx *c) {
    const size_t nx = (size_t)(CD.n * CD.h * CD.w * CD.c), ny = (size_t)(CD.n * CD.oh * CD.ow * CD.oc);
    const size_t nw = (size_t)CD.kh * CD.kw * CD.c * CD.oc;
    c->p[0] = dev_rand(c, nx, 11, -1, 1);
    c->p[1] = dev_rand(c, nw, 12, -0.06f, 0.06f);
    c->p[2] = dev_rand(c, (size_t)CD.oc, 13, -0.1f, 0.1f);
    c->p[3] = dev_zero(c, ny);
    c->p[4] = dev_rand(c, ny, 14, -1, 1);
    c->p[5] = dev_zero(c, nx);
    c->p[6] = dev_zero(c, nw);
    c->p[7] = dev_zero(c, (size_t)CD.oc);
    c->p[8] = dev_rand(c, ny, 15, -1, 1); /* Y_BWD */
    if (!c->be->conv_workspace) return;
    size_t a = c->be->conv_workspace(&CD, 0), b = c->be->conv_workspace(&CD, 1);
    if (a > b) b = a;
    c->ws = b ? dev_alloc(c, b) : NULL;
}
static void conv_fwd(ctx *c) { c->be->conv2d_fwd(&CD, c->p[0], c->p[1], c->p[2], c->p[3], c->ws); }
static void conv_bwd(ctx *c) {
    c->be->conv2d_bwd(&CD, c->p[0], c->p[1], c->p[8], c->p[4], c->p[5], 0.0f, c->p[6], c->p[7], c->ws);
}

/* -- depthwise: MobileNetV2's 56x56x144 (3x3, stride 1, "same", relu6) */
static fl_conv_desc DW;
static void dw_init(family *f) {
    DW = (fl_conv_desc){.n = B(32), .h = 56, .w = 56, .c = 144, .oh = 56, .ow = 56, .oc = 144, .kh = 3, .kw = 3,
                        .sh = 1, .sw = 1, .pt = 1, .pl = 1, .act = FL_ACT_RELU6, .has_bias = 1, .dil_h = 1,
                        .dil_w = 1, .groups = 1};
    snprintf(f->shape, sizeof f->shape, "%lld x %dx%dx%d, 3x3 s1 same, relu6", (long long)DW.n, DW.h, DW.w, DW.c);
    f->check_n[0] = DW.n * DW.oh * DW.ow * DW.oc;
    f->check_n[1] = (int64_t)9 * DW.c;
}
static void dw_setup(ctx *c) {
    const size_t nx = (size_t)(DW.n * DW.h * DW.w * DW.c), nw = (size_t)9 * DW.c;
    c->p[0] = dev_rand(c, nx, 21, -1, 1);
    c->p[1] = dev_rand(c, nw, 22, -0.3f, 0.3f);
    c->p[2] = dev_rand(c, (size_t)DW.oc, 23, -0.1f, 0.1f);
    c->p[3] = dev_zero(c, nx);
    c->p[4] = dev_rand(c, nx, 24, -1, 1);
    c->p[5] = dev_zero(c, nx);
    c->p[6] = dev_zero(c, nw);
    c->p[7] = dev_zero(c, (size_t)DW.oc);
    c->p[8] = dev_rand(c, nx, 25, -1, 7); /* Y_BWD: both of ReLU6's edges */
}
static void dw_fwd(ctx *c) { c->be->depthwise_fwd(&DW, c->p[0], c->p[1], c->p[2], c->p[3]); }
static void dw_bwd(ctx *c) {
    c->be->depthwise_bwd(&DW, c->p[0], c->p[1], c->p[8], c->p[4], c->p[5], 0.0f, c->p[6], c->p[7]);
}

/* -- pooling: 2x2 stride 2 on a 32x32x64 feature map (max and average); global average of ResNet's 7x7x512 */
static fl_conv_desc PL;
static void pool_init(family *f) {
    PL = (fl_conv_desc){.n = B(32), .h = 32, .w = 32, .c = 64, .oh = 16, .ow = 16, .oc = 64, .kh = 2, .kw = 2,
                        .sh = 2, .sw = 2};
    snprintf(f->shape, sizeof f->shape, "%lld x %dx%dx%d, 2x2 s2 -> %dx%d", (long long)PL.n, PL.h, PL.w, PL.c, PL.oh,
             PL.ow);
    f->check_n[0] = PL.n * PL.oh * PL.ow * PL.c;
    f->check_n[1] = PL.n * PL.h * PL.w * PL.c;
}
static void pool_setup(ctx *c) {
    const size_t nx = (size_t)(PL.n * PL.h * PL.w * PL.c), ny = (size_t)(PL.n * PL.oh * PL.ow * PL.c);
    c->p[0] = dev_rand(c, nx, 31, -1, 1);
    c->p[1] = dev_zero(c, ny);
    c->p[2] = dev_rand(c, ny, 32, -1, 1);
    c->p[3] = dev_zero(c, nx);
    c->argmax = dev_alloc(c, ny * sizeof(int32_t));
}
static void maxpool_fwd(ctx *c) { c->be->maxpool_fwd(&PL, c->p[0], c->p[1], c->argmax); }
static void maxpool_bwd(ctx *c) { c->be->maxpool_bwd(&PL, c->p[2], c->argmax, c->p[3], 0.0f); }
static void avgpool_fwd(ctx *c) { c->be->avgpool_fwd(&PL, c->p[0], c->p[1]); }
static void avgpool_bwd(ctx *c) { c->be->avgpool_bwd(&PL, c->p[2], c->p[3], 0.0f); }

static int64_t GN;
static const int GHW = 49, GC = 512;
static void gap_init(family *f) {
    GN = B(32);
    snprintf(f->shape, sizeof f->shape, "%lld x 7x7x%d -> %lld x %d", (long long)GN, GC, (long long)GN, GC);
    f->check_n[0] = GN * GC;
    f->check_n[1] = GN * GHW * GC;
}
static void gap_setup(ctx *c) {
    c->p[0] = dev_rand(c, (size_t)(GN * GHW * GC), 41, -1, 1);
    c->p[1] = dev_zero(c, (size_t)(GN * GC));
    c->p[2] = dev_rand(c, (size_t)(GN * GC), 42, -1, 1);
    c->p[3] = dev_zero(c, (size_t)(GN * GHW * GC));
}
static void gap_fwd(ctx *c) { c->be->gap_fwd(GN, GHW, GC, c->p[0], c->p[1]); }
static void gap_bwd(ctx *c) { c->be->gap_bwd(GN, GHW, GC, c->p[2], c->p[3], 0.0f); }

/* -- batch normalization in training, after the ResNet convolution above */
static fl_bn_desc BN;
static void bn_init(family *f) {
    BN = (fl_bn_desc){.m = B(32) * 32 * 32, .c = 64, .eps = 1e-3f, .momentum = 0.99f};
    snprintf(f->shape, sizeof f->shape, "%lld x 32x32x%d (m %lld), training", (long long)B(32), BN.c,
             (long long)BN.m);
    f->check_n[0] = BN.m * BN.c;
    f->check_n[1] = BN.m * BN.c;
}
static void bn_setup(ctx *c) {
    const size_t n = (size_t)(BN.m * BN.c), k = (size_t)BN.c;
    c->p[0] = dev_rand(c, n, 51, -1, 3);
    c->p[1] = dev_rand(c, k, 52, 0.5f, 1.5f);
    c->p[2] = dev_rand(c, k, 53, -0.5f, 0.5f);
    c->p[3] = dev_zero(c, n);
    c->p[4] = dev_zero(c, k);                    /* save mean */
    c->p[5] = dev_zero(c, k);                    /* save 1/std */
    c->p[6] = dev_zero(c, k);                    /* moving mean */
    c->p[7] = dev_rand(c, k, 54, 0.5f, 1.5f);    /* moving variance */
    c->p[8] = dev_rand(c, n, 55, -1, 1);         /* dy */
    c->p[9] = dev_zero(c, n);
    c->p[10] = dev_zero(c, k);
    c->p[11] = dev_zero(c, k);
}
static void bn_fwd(ctx *c) {
    c->be->bn_fwd_train(&BN, c->p[0], c->p[1], c->p[2], c->p[3], c->p[4], c->p[5], c->p[6], c->p[7]);
}
static void bn_bwd(ctx *c) {
    c->be->bn_bwd(&BN, c->p[0], c->p[1], c->p[4], c->p[5], c->p[8], c->p[9], 0.0f, c->p[10], c->p[11]);
}

/* -- layer normalization: a transformer's (batch x 128 tokens, 512 features) */
static int64_t LR;
static const int LC = 512;
static void ln_init(family *f) {
    LR = B(32) * 128;
    snprintf(f->shape, sizeof f->shape, "%lld x 128 tokens x %d (rows %lld)", (long long)B(32), LC, (long long)LR);
    f->check_n[0] = LR * LC;
    f->check_n[1] = LR * LC;
}
static void ln_setup(ctx *c) {
    const size_t n = (size_t)(LR * LC);
    c->p[0] = dev_rand(c, n, 61, -2, 2);
    c->p[1] = dev_rand(c, (size_t)LC, 62, 0.5f, 1.5f);
    c->p[2] = dev_rand(c, (size_t)LC, 63, -0.5f, 0.5f);
    c->p[3] = dev_zero(c, n);
    c->p[4] = dev_zero(c, 2 * (size_t)LR);
    c->p[5] = dev_rand(c, n, 64, -1, 1);
    c->p[6] = dev_zero(c, n);
    c->p[7] = dev_zero(c, (size_t)LC);
    c->p[8] = dev_zero(c, (size_t)LC);
}
static void ln_fwd(ctx *c) { c->be->layernorm_fwd(LR, LC, 1e-3f, 0, c->p[0], c->p[1], c->p[2], c->p[3], c->p[4]); }
static void ln_bwd(ctx *c) {
    c->be->layernorm_bwd(LR, LC, 0, c->p[0], c->p[1], c->p[4], c->p[5], c->p[6], 0.0f, c->p[7], c->p[8]);
}

/* -- activations over [rows, c] (act_fwd/act_bwd): the softmax of a 1000-class head, ReLU after the
 * ResNet convolution (memory-bound), GELU in a transformer's feed-forward layer (exp/erf-bound) */
static int64_t AR;
static int AC, AACT;
static void act_set(family *f, int act, int64_t rows, int cols, const char *what) {
    AACT = act; AR = rows; AC = cols;
    snprintf(f->shape, sizeof f->shape, "%lld x %d (%s)", (long long)AR, AC, what);
    f->check_n[0] = f->check_n[1] = AR * AC;
}
static void softmax_init(family *f) { act_set(f, FL_ACT_SOFTMAX, B(2048), 1000, "1000-class head"); }
static void relu_init(family *f) { act_set(f, FL_ACT_RELU, B(32) * 32 * 32, 64, "32x32x64 maps"); }
static void gelu_init(family *f) { act_set(f, FL_ACT_GELU, B(32) * 128, 2048, "transformer FFN"); }
static void act_setup(ctx *c) {
    const size_t n = (size_t)(AR * AC);
    c->p[0] = dev_rand(c, n, 71, -4, 4);
    c->p[1] = dev_zero(c, n);
    c->p[2] = dev_rand(c, n, 72, -1, 1);
    c->p[3] = dev_zero(c, n);
}
static void act_fwd(ctx *c) { c->be->act_fwd(AACT, AR, AC, c->p[0], c->p[1]); }
static void act_bwd(ctx *c) { c->be->act_bwd(AACT, AR, AC, c->p[0], c->p[1], c->p[2], c->p[3], 0.0f); }

/* -- layout: ZeroPadding2D(1) before a convolution, UpSampling2D(2) in a U-Net decoder, and the
 * (batch, tokens, heads, 64) -> (batch, heads, tokens, 64) split of attention heads */
static fl_conv_desc PD, PDB, UP;
static void pad_init(family *f) {
    PD = (fl_conv_desc){.n = B(32), .h = 32, .w = 32, .c = 64, .oh = 34, .ow = 34, .oc = 64, .pt = 1, .pl = 1};
    PDB = PD; /* the backward: the same copy with the roles swapped (ops.c, pad2d_backward) */
    PDB.h = PD.oh; PDB.w = PD.ow; PDB.oh = PD.h; PDB.ow = PD.w; PDB.pt = -PD.pt; PDB.pl = -PD.pl;
    snprintf(f->shape, sizeof f->shape, "%lld x %dx%dx%d -> %dx%d", (long long)PD.n, PD.h, PD.w, PD.c, PD.oh, PD.ow);
    f->check_n[0] = PD.n * PD.oh * PD.ow * PD.c;
    f->check_n[1] = PD.n * PD.h * PD.w * PD.c;
}
static void pad_setup(ctx *c) {
    const size_t nx = (size_t)(PD.n * PD.h * PD.w * PD.c), ny = (size_t)(PD.n * PD.oh * PD.ow * PD.c);
    c->p[0] = dev_rand(c, nx, 81, -1, 1);
    c->p[1] = dev_zero(c, ny);
    c->p[2] = dev_rand(c, ny, 82, -1, 1);
    c->p[3] = dev_zero(c, nx);
}
static void pad_fwd(ctx *c) { c->be->pad2d(&PD, c->p[0], c->p[1], 0.0f); }
static void pad_bwd(ctx *c) { c->be->pad2d(&PDB, c->p[2], c->p[3], 0.0f); }

static void up_init(family *f) {
    UP = (fl_conv_desc){.n = B(32), .h = 16, .w = 16, .c = 64, .oh = 32, .ow = 32, .oc = 64, .sh = 2, .sw = 2};
    snprintf(f->shape, sizeof f->shape, "%lld x %dx%dx%d -> %dx%d, nearest", (long long)UP.n, UP.h, UP.w, UP.c,
             UP.oh, UP.ow);
    f->check_n[0] = UP.n * UP.oh * UP.ow * UP.c;
    f->check_n[1] = UP.n * UP.h * UP.w * UP.c;
}
static void up_setup(ctx *c) {
    const size_t nx = (size_t)(UP.n * UP.h * UP.w * UP.c), ny = (size_t)(UP.n * UP.oh * UP.ow * UP.c);
    c->p[0] = dev_rand(c, nx, 91, -1, 1);
    c->p[1] = dev_zero(c, ny);
    c->p[2] = dev_rand(c, ny, 92, -1, 1);
    c->p[3] = dev_zero(c, nx);
}
static void up_fwd(ctx *c) { c->be->upsample2d_fwd(&UP, 0, c->p[0], c->p[1]); }
static void up_bwd(ctx *c) { c->be->upsample2d_bwd(&UP, 0, c->p[2], c->p[3], 0.0f); }

static int64_t PS[4], PSI[4];
static const int PERM[4] = {0, 2, 1, 3}; /* its own inverse */
static void perm_init(family *f) {
    PS[0] = B(32); PS[1] = 128; PS[2] = 8; PS[3] = 64;
    for (int i = 0; i < 4; i++) PSI[i] = PS[PERM[i]];
    snprintf(f->shape, sizeof f->shape, "%lldx%lldx%lldx%lld, axes (0, 2, 1, 3)", (long long)PS[0],
             (long long)PS[1], (long long)PS[2], (long long)PS[3]);
    f->check_n[0] = f->check_n[1] = PS[0] * PS[1] * PS[2] * PS[3];
}
static void perm_setup(ctx *c) {
    const size_t n = (size_t)(PS[0] * PS[1] * PS[2] * PS[3]);
    c->p[0] = dev_rand(c, n, 101, -1, 1);
    c->p[1] = dev_zero(c, n);
    c->p[2] = dev_rand(c, n, 102, -1, 1);
    c->p[3] = dev_zero(c, n);
}
static void perm_fwd(ctx *c) { c->be->permute(4, PS, PERM, c->p[0], c->p[1], 0.0f); }
static void perm_bwd(ctx *c) { c->be->permute(4, PSI, PERM, c->p[2], c->p[3], 0.0f); }

/* -- attention: a BERT-base-like block (8 heads of 64, 128 tokens): the weights' softmax in place
 * (attn_softmax_fwd/_bwd) and the batched GEMMs around it (gemm_batched), as src/ops/attention.c calls
 * them without the blocked forms */
static fl_attn_desc AD;
static fl_gemm_desc GF[2], GB[4];
static int64_t attn_w(void) { return AD.n * AD.heads * AD.tq * AD.tk; }
static int64_t attn_t(int t, int d) { return AD.n * t * AD.heads * d; }
static void attn_desc(void) {
    AD = (fl_attn_desc){.n = B(32), .heads = 8, .tq = 128, .tk = 128, .dk = 64, .dv = 64, .scale = 0.125f};
}
static void attn_init(family *f) {
    attn_desc();
    snprintf(f->shape, sizeof f->shape, "%lld x %d heads x %dx%d", (long long)AD.n, AD.heads, AD.tq, AD.tk);
    f->check_n[0] = f->check_n[1] = attn_w();
}
static void attn_setup(ctx *c) {
    const size_t w = (size_t)attn_w();
    c->p[0] = dev_rand(c, w, 111, -3, 3);        /* the scores, before the softmax */
    c->p[1] = dev_zero(c, w);                    /* s: the weights (in place) */
    c->p[2] = dev_rand(c, w, 112, -1, 1);        /* the weights' gradient, before */
    c->p[3] = dev_zero(c, w);                    /* dp (in place) */
}
static void attn_reset_fwd(ctx *c) { cp(c, c->p[1], c->p[0], attn_w()); }
static void attn_reset_bwd(ctx *c) { cp(c, c->p[3], c->p[2], attn_w()); }
static void attn_fwd(ctx *c) { c->be->attn_softmax_fwd(&AD, NULL, NULL, NULL, c->p[1]); }
static void attn_bwd(ctx *c) { c->be->attn_softmax_bwd(&AD, NULL, NULL, NULL, c->p[1], c->p[3]); }

/* block (batch, head) of a (batch, steps, heads*d) tensor, or of the (batch, heads, tq, tk) weights */
typedef struct blk { int ld; int64_t so, si; } blk;
static blk seq_blk(int steps, int d) { return (blk){AD.heads * d, (int64_t)steps * AD.heads * d, d}; }
static blk w_blk(void) { return (blk){AD.tk, (int64_t)AD.heads * AD.tq * AD.tk, (int64_t)AD.tq * AD.tk}; }
static fl_gemm_desc gdesc(int ta, int tb, int m, int n, int k, float alpha, blk a, blk b, blk cc) {
    return (fl_gemm_desc){.ta = ta, .tb = tb, .m = m, .n = n, .k = k, .alpha = alpha, .beta = 0.0f, .lda = a.ld,
                          .ldb = b.ld, .ldc = cc.ld, .sa = {a.so, a.si}, .sb = {b.so, b.si}, .sc = {cc.so, cc.si},
                          .nouter = AD.n, .ninner = AD.heads};
}
static void gemm_init(family *f) {
    attn_desc();
    blk q = seq_blk(AD.tq, AD.dk), k = seq_blk(AD.tk, AD.dk), v = seq_blk(AD.tk, AD.dv), o = seq_blk(AD.tq, AD.dv);
    GF[0] = gdesc(0, 1, AD.tq, AD.tk, AD.dk, AD.scale, q, k, w_blk());           /* S = scale Q K^T */
    GF[1] = gdesc(0, 0, AD.tq, AD.dv, AD.tk, 1.0f, w_blk(), v, o);               /* O = P V */
    GB[0] = gdesc(1, 0, AD.tk, AD.dv, AD.tq, 1.0f, w_blk(), o, v);               /* dV = P^T dO */
    GB[1] = gdesc(0, 1, AD.tq, AD.tk, AD.dv, 1.0f, o, v, w_blk());               /* G = dO V^T */
    GB[2] = gdesc(0, 0, AD.tq, AD.dk, AD.tk, AD.scale, w_blk(), k, q);           /* dQ = scale G K */
    GB[3] = gdesc(1, 0, AD.tk, AD.dk, AD.tq, AD.scale, w_blk(), q, k);           /* dK = scale G^T Q */
    snprintf(f->shape, sizeof f->shape, "%lld x %d heads x %d tokens x %d: fwd 2, bwd 4 GEMMs", (long long)AD.n,
             AD.heads, AD.tq, AD.dk);
    f->check_n[0] = attn_t(AD.tq, AD.dv);
    f->check_n[1] = attn_t(AD.tq, AD.dk);
}
static void gemm_setup(ctx *c) {
    const size_t w = (size_t)attn_w(), t = (size_t)attn_t(AD.tq, AD.dk);
    c->p[0] = dev_rand(c, t, 121, -1, 1);        /* q */
    c->p[1] = dev_rand(c, t, 122, -1, 1);        /* k */
    c->p[2] = dev_rand(c, t, 123, -1, 1);        /* v */
    c->p[3] = dev_zero(c, w);                    /* s, then p */
    c->p[4] = dev_zero(c, t);                    /* o */
    c->p[5] = dev_rand(c, t, 124, -1, 1);        /* do */
    c->p[6] = dev_zero(c, t);                    /* dv */
    c->p[7] = dev_zero(c, w);                    /* g */
    c->p[8] = dev_zero(c, t);                    /* dq */
    c->p[9] = dev_zero(c, t);                    /* dk */
}
static void gemm_fwd(ctx *c) {
    c->be->gemm_batched(&GF[0], c->p[0], c->p[1], c->p[3]);
    c->be->gemm_batched(&GF[1], c->p[3], c->p[2], c->p[4]);
}
static void gemm_bwd(ctx *c) {
    c->be->gemm_batched(&GB[0], c->p[3], c->p[5], c->p[6]);
    c->be->gemm_batched(&GB[1], c->p[5], c->p[2], c->p[7]);
    c->be->gemm_batched(&GB[2], c->p[7], c->p[1], c->p[8]);
    c->be->gemm_batched(&GB[3], c->p[7], c->p[0], c->p[9]);
}

/* -- embedding: batch x 128 tokens of a 20,000-word vocabulary, 128 features */
static int64_t EN, EV = 20000;
static const int ED = 128;
static void emb_init(family *f) {
    EN = B(32) * 128;
    snprintf(f->shape, sizeof f->shape, "%lld indices, %lld x %d table", (long long)EN, (long long)EV, ED);
    f->check_n[0] = EN * ED;
    f->check_n[1] = EV * ED;
}
static void emb_setup(ctx *c) {
    int32_t *idx = malloc((size_t)EN * sizeof(int32_t));
    if (!idx) { fprintf(stderr, "out of memory\n"); exit(1); }
    g_rng = 131;
    for (int64_t i = 0; i < EN; i++) idx[i] = (int32_t)(frand() * (float)EV) % (int32_t)EV;
    c->p[0] = dev_upload(c, idx, (size_t)EN * sizeof(int32_t));
    free(idx);
    c->p[1] = dev_rand(c, (size_t)(EV * ED), 132, -1, 1);
    c->p[2] = dev_zero(c, (size_t)(EN * ED));
    c->p[3] = dev_rand(c, (size_t)(EN * ED), 133, -1, 1);
    c->p[4] = dev_zero(c, (size_t)(EV * ED));
}
static void emb_fwd(ctx *c) { c->be->embedding_fwd(EN, ED, EV, 1, c->p[0], c->p[1], c->p[2]); }
static void emb_bwd(ctx *c) { c->be->embedding_bwd(EN, ED, EV, 1, c->p[0], c->p[3], c->p[4]); }

/* -- LSTM: 64 steps of 128 features into 256 units, return_sequences (Keras's defaults: tanh, sigmoid) */
static fl_rnn_desc RD;
static void rnn_init(family *f) {
    RD = (fl_rnn_desc){.cell = FL_RNN_LSTM, .n = B(32), .t = 64, .d = 128, .u = 256, .act = FL_ACT_TANH,
                       .ract = FL_ACT_SIGMOID, .has_bias = 1, .return_sequences = 1};
    snprintf(f->shape, sizeof f->shape, "%lld x %d steps x %d -> %d units, sequences", (long long)RD.n, RD.t, RD.d,
             RD.u);
    f->check_n[0] = RD.n * RD.t * RD.u;
    f->check_n[1] = (int64_t)RD.d * 4 * RD.u;
}
static void rnn_setup(ctx *c) {
    const size_t nx = (size_t)(RD.n * RD.t * RD.d), ny = (size_t)(RD.n * RD.t * RD.u), g = 4 * (size_t)RD.u;
    c->p[0] = dev_rand(c, nx, 141, -1, 1);
    c->p[1] = dev_rand(c, (size_t)RD.d * g, 142, -0.1f, 0.1f);
    c->p[2] = dev_rand(c, (size_t)RD.u * g, 143, -0.06f, 0.06f);
    c->p[3] = dev_rand(c, g, 144, -0.1f, 0.1f);
    c->p[4] = dev_zero(c, ny);
    c->p[5] = dev_zero(c, (size_t)(RD.n * fl_rnn_aux_floats(&RD)));
    c->p[6] = dev_rand(c, ny, 145, -1, 1);
    c->p[7] = dev_zero(c, nx);
    c->p[8] = dev_zero(c, (size_t)RD.d * g);
    c->p[9] = dev_zero(c, (size_t)RD.u * g);
    c->p[10] = dev_zero(c, g);
}
static void rnn_fwd(ctx *c) { c->be->rnn_fwd(&RD, c->p[0], c->p[1], c->p[2], c->p[3], NULL, NULL, c->p[4], c->p[5]); }
static void rnn_bwd(ctx *c) {
    c->be->rnn_bwd(&RD, c->p[0], c->p[1], c->p[2], c->p[3], NULL, NULL, c->p[6], c->p[5], c->p[7], 0.0f, c->p[8],
                   c->p[9], c->p[10]);
}

/* -- Adam (Keras's defaults) over ~1M weights in four tensors (a 1024 -> 768 -> 256 MLP), from a fresh state
 * every call (the weights and slots restored, untimed) */
static const int64_t ON[4] = {1024 * 768, 768, 768 * 256, 256};
static fl_opt_desc OD;
static void opt_init(family *f) {
    OD = (fl_opt_desc){.code = FL_OPT_ADAM, .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-7f, .step = 1};
    snprintf(f->shape, sizeof f->shape, "%lld weights in 4 tensors, fused step",
             (long long)(ON[0] + ON[1] + ON[2] + ON[3]));
    f->check_n[0] = ON[0];
}
static void opt_setup(ctx *c) {
    for (int i = 0; i < 4; i++) {
        c->p[i] = dev_rand(c, (size_t)ON[i], 151 + i, -0.1f, 0.1f);           /* the initial weights */
        c->p[4 + i] = dev_zero(c, (size_t)ON[i]);                              /* w */
        c->p[8 + i] = dev_rand(c, (size_t)ON[i], 161 + i, -0.01f, 0.01f);      /* g */
        c->p[12 + i] = dev_zero(c, (size_t)ON[i]);                             /* m */
        c->p[16 + i] = dev_zero(c, (size_t)ON[i]);                             /* v */
        c->prm[i] = (fl_param_ref){.w = c->p[4 + i], .g = c->p[8 + i], .s0 = c->p[12 + i], .s1 = c->p[16 + i],
                                   .n = ON[i]};
    }
}
static void opt_reset(ctx *c) {
    for (int i = 0; i < 4; i++) {
        cp(c, c->p[4 + i], c->p[i], ON[i]);
        c->be->zero(c->p[12 + i], (size_t)ON[i] * sizeof(float));
        c->be->zero(c->p[16 + i], (size_t)ON[i] * sizeof(float));
    }
}
static void opt_step(ctx *c) { c->be->optimizer_step(&OD, c->prm, 4); }

/* -- loss and metric of a 1000-class head: sparse categorical cross-entropy on the softmax (the fused
 * gradient, as fit runs it) with its running sum, then the accuracy with its sum (src/nn/step.c) */
static fl_loss_desc LD;
static void loss_init(family *f) {
    LD = (fl_loss_desc){.code = FL_LC_SCCE, .input = FL_LI_SOFTMAX_FUSED, .rows = B(2048), .c = 1000};
    LD.scale = 1.0f / (float)LD.rows;
    snprintf(f->shape, sizeof f->shape, "%lld x %d, SCCE on softmax; accuracy", (long long)LD.rows, LD.c);
    f->check_n[0] = LD.rows * LD.c;
    f->check_n[1] = LD.rows;
}
static void loss_setup(ctx *c) {
    const int64_t n = LD.rows * LD.c;
    float *h = malloc((size_t)(n + LD.rows) * sizeof(float));
    if (!h) { fprintf(stderr, "out of memory\n"); exit(1); }
    g_rng = 171;
    for (int64_t r = 0; r < LD.rows; r++) { /* each row a distribution */
        double s = 0;
        for (int j = 0; j < LD.c; j++) s += h[r * LD.c + j] = 0.01f + frand();
        for (int j = 0; j < LD.c; j++) h[r * LD.c + j] = (float)(h[r * LD.c + j] / s);
        h[n + r] = (float)((int)(frand() * (float)LD.c) % LD.c);
    }
    c->p[0] = dev_upload(c, h, (size_t)n * sizeof(float));
    c->p[1] = dev_upload(c, h + n, (size_t)LD.rows * sizeof(float));
    free(h);
    c->p[2] = dev_zero(c, (size_t)LD.rows);      /* row losses */
    c->p[3] = dev_zero(c, (size_t)n);            /* gradient */
    c->p[4] = dev_zero(c, (size_t)LD.rows);      /* row scores */
    c->acc = dev_alloc(c, 2 * sizeof(double));
    if (c->acc) c->be->zero(c->acc, 2 * sizeof(double));
}
static void loss_run(ctx *c) {
    c->be->loss(&LD, c->p[0], c->p[1], c->p[2], c->p[3]);
    c->be->sum_into(LD.rows, c->p[2], 1.0, c->acc);
}
static void metric_run(ctx *c) {
    c->be->metric(FL_MC_SPARSE_CATEGORICAL, LD.rows, LD.c, c->p[0], c->p[1], c->p[4]);
    c->be->sum_into(LD.rows, c->p[4], 1.0, c->acc + 1);
}

#define F(n, l, i, s) .name = n, .layer = l, .init = i, .setup = s
static family g_fam[] = {
    {F("dense", "Dense", dense_init, dense_setup), .nparts = 2,
     .parts = {{"fwd", dense_fwd, NULL, {NEED(dense_fwd)}, 3, "y"},
               {"bwd", dense_bwd, NULL, {NEED(dense_bwd)}, 6, "dw"}}},
    {F("conv2d", "Conv2D", conv_init, conv_setup), .nparts = 2,
     .parts = {{"fwd", conv_fwd, NULL, {NEED(conv_workspace), NEED(conv2d_fwd)}, 3, "y"},
               {"bwd", conv_bwd, NULL, {NEED(conv_workspace), NEED(conv2d_bwd)}, 6, "dw"}}},
    {F("depthwise", "DepthwiseConv2D", dw_init, dw_setup), .nparts = 2,
     .parts = {{"fwd", dw_fwd, NULL, {NEED(depthwise_fwd)}, 3, "y"},
               {"bwd", dw_bwd, NULL, {NEED(depthwise_bwd)}, 5, "dx"}}},
    {F("maxpool", "MaxPooling2D", pool_init, pool_setup), .nparts = 2,
     .parts = {{"fwd", maxpool_fwd, NULL, {NEED(maxpool_fwd)}, 1, "y"},
               {"bwd", maxpool_bwd, NULL, {NEED(maxpool_fwd), NEED(maxpool_bwd)}, 3, "dx"}}},
    {F("avgpool", "AveragePooling2D", pool_init, pool_setup), .nparts = 2,
     .parts = {{"fwd", avgpool_fwd, NULL, {NEED(avgpool_fwd)}, 1, "y"},
               {"bwd", avgpool_bwd, NULL, {NEED(avgpool_bwd)}, 3, "dx"}}},
    {F("gap", "GlobalAveragePooling2D", gap_init, gap_setup), .nparts = 2,
     .parts = {{"fwd", gap_fwd, NULL, {NEED(gap_fwd)}, 1, "y"}, {"bwd", gap_bwd, NULL, {NEED(gap_bwd)}, 3, "dx"}}},
    {F("batchnorm", "BatchNormalization", bn_init, bn_setup), .nparts = 2,
     .parts = {{"fwd", bn_fwd, NULL, {NEED(bn_fwd_train)}, 3, "y"},
               {"bwd", bn_bwd, NULL, {NEED(bn_fwd_train), NEED(bn_bwd)}, 9, "dx"}}},
    {F("layernorm", "LayerNormalization", ln_init, ln_setup), .nparts = 2,
     .parts = {{"fwd", ln_fwd, NULL, {NEED(layernorm_fwd)}, 3, "y"},
               {"bwd", ln_bwd, NULL, {NEED(layernorm_fwd), NEED(layernorm_bwd)}, 6, "dx"}}},
    {F("softmax", "Softmax (act_fwd)", softmax_init, act_setup), .nparts = 2,
     .parts = {{"fwd", act_fwd, NULL, {NEED(act_fwd)}, 1, "y"}, {"bwd", act_bwd, NULL, {NEED(act_bwd)}, 3, "dx"}}},
    {F("act_relu", "ReLU (act_fwd)", relu_init, act_setup), .nparts = 2,
     .parts = {{"fwd", act_fwd, NULL, {NEED(act_fwd)}, 1, "y"}, {"bwd", act_bwd, NULL, {NEED(act_bwd)}, 3, "dx"}}},
    {F("act_gelu", "GELU (act_fwd)", gelu_init, act_setup), .nparts = 2,
     .parts = {{"fwd", act_fwd, NULL, {NEED(act_fwd)}, 1, "y"}, {"bwd", act_bwd, NULL, {NEED(act_bwd)}, 3, "dx"}}},
    {F("pad2d", "ZeroPadding2D", pad_init, pad_setup), .nparts = 2,
     .parts = {{"fwd", pad_fwd, NULL, {NEED(pad2d)}, 1, "y"}, {"bwd", pad_bwd, NULL, {NEED(pad2d)}, 3, "dx"}}},
    {F("upsample2d", "UpSampling2D", up_init, up_setup), .nparts = 2,
     .parts = {{"fwd", up_fwd, NULL, {NEED(upsample2d_fwd)}, 1, "y"},
               {"bwd", up_bwd, NULL, {NEED(upsample2d_bwd)}, 3, "dx"}}},
    {F("permute", "Permute", perm_init, perm_setup), .nparts = 2,
     .parts = {{"fwd", perm_fwd, NULL, {NEED(permute)}, 1, "y"}, {"bwd", perm_bwd, NULL, {NEED(permute)}, 3, "dx"}}},
    {F("attn_softmax", "attention weights", attn_init, attn_setup), .nparts = 2,
     .parts = {{"fwd", attn_fwd, attn_reset_fwd, {NEED(attn_softmax_fwd)}, 1, "p"},
               {"bwd", attn_bwd, attn_reset_bwd, {NEED(attn_softmax_fwd), NEED(attn_softmax_bwd)}, 3, "ds"}}},
    {F("gemm_batched", "attention GEMMs", gemm_init, gemm_setup), .nparts = 2,
     .parts = {{"fwd", gemm_fwd, NULL, {NEED(gemm_batched)}, 4, "o"},
               {"bwd", gemm_bwd, NULL, {NEED(gemm_batched)}, 8, "dq"}}},
    {F("embedding", "Embedding", emb_init, emb_setup), .nparts = 2,
     .parts = {{"fwd", emb_fwd, NULL, {NEED(embedding_fwd)}, 2, "y"},
               {"bwd", emb_bwd, NULL, {NEED(embedding_bwd)}, 4, "dw"}}},
    {F("lstm", "LSTM", rnn_init, rnn_setup), .nparts = 2,
     .parts = {{"fwd", rnn_fwd, NULL, {NEED(rnn_fwd)}, 4, "y"},
               {"bwd", rnn_bwd, rnn_fwd, {NEED(rnn_fwd), NEED(rnn_bwd)}, 8, "dw"}}},
    {F("adam", "Adam", opt_init, opt_setup), .nparts = 1,
     .parts = {{"step", opt_step, opt_reset, {NEED(optimizer_step)}, 4, "w"}}},
    {F("loss_metric", "loss + metric", loss_init, loss_setup), .nparts = 2,
     .parts = {{"loss", loss_run, NULL, {NEED(loss), NEED(sum_into)}, 3, "grad"},
               {"metric", metric_run, NULL, {NEED(metric), NEED(sum_into)}, 4, "score"}}},
};
#define NFAM ((int)(sizeof g_fam / sizeof g_fam[0]))

/* ------------------------------------------------------------ running */

enum { BE_CPU, BE_CUDA, BE_OPENCL, NBE };
static const char *const BE_NAME[NBE] = {"cpu", "cuda", "opencl"};
static const fl_backend *g_be[NBE];
static char g_desc[NBE][1024], g_why[NBE][1536];

enum { ST_NONE = 0, ST_OK, ST_ERR }; /* no entry ("-"), timed, failed */
typedef struct result {
    int state;
    double ms;
    int reps;
    double diff; /* vs the CPU; < 0: not compared */
    int threads; /* the CPU's: the threads in use when the part ran */
    char err[256];
} result;
static result g_res[NFAM][NBE][2];
static float *g_ref[2]; /* the CPU's outputs of the family being run */

static int failed_now(const fl_backend *be, char *err, size_t len) {
    if (be->check && be->check() != 0) {
        snprintf(err, len, "%s", fl_last_error());
        return 1;
    }
    if (fl_last_status() != FL_OK) {
        snprintf(err, len, "%s", fl_last_error());
        return 1;
    }
    return 0;
}

static double max_abs(const float *a, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        if (fabs((double)a[i]) > m) m = fabs((double)a[i]);
    return m;
}

static double rel_diff(const float *a, const float *ref, int64_t n) {
    double m = 0, scale = max_abs(ref, n);
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)ref[i]);
        if (d != d) return INFINITY;
        if (d > m) m = d;
    }
    return scale > 0 ? m / scale : m;
}

/* one part on one backend: warm-up, then the fastest of the calls the budget allows */
static void time_part(ctx *c, family *f, int pi, result *r, int be_id) {
    const part *p = &f->parts[pi];
    const fl_backend *be = c->be;
    fl_clear_error();
    if (be_id == BE_CPU) { /* as training does before each step: fewer threads while other processes hold CPUs */
        fl_threads_follow_load();
        r->threads = fl_num_threads_in_use();
    }
    double best = INFINITY;
    int reps = g_reps, done = 0;
    for (int i = -1; i < reps; i++) { /* -1: the warm-up (the first call builds kernels, plans, caches) */
        if (p->reset) p->reset(c);
        be->sync();
        double t0 = now();
        p->run(c);
        be->sync();
        double t = now() - t0;
        if (failed_now(be, r->err, sizeof r->err)) { r->state = ST_ERR; return; }
        if (i < 0) continue;
        done++;
        if (t < best) best = t;
        if (i == 0 && t * reps > g_budget) { /* a slow call: as many as fit the budget, at least one */
            int fit = (int)(g_budget / (t > 1e-9 ? t : 1e-9));
            reps = fit < 1 ? 1 : fit < reps ? fit : reps;
        }
    }
    r->state = ST_OK;
    r->ms = best * 1e3;
    r->reps = done;
    r->diff = -1;
    if (p->check < 0 || !c->p[p->check]) return;
    const int64_t n = f->check_n[pi];
    float *h = malloc((size_t)n * sizeof(float));
    if (!h) return;
    be->download(h, c->p[p->check], (size_t)n * sizeof(float));
    be->sync();
    if (be_id == BE_CPU) {
        free(g_ref[pi]);
        g_ref[pi] = h;
        return;
    }
    if (g_ref[pi]) r->diff = rel_diff(h, g_ref[pi], n);
    free(h);
}

static void run_family(int fi) {
    family *f = &g_fam[fi];
    for (int pi = 0; pi < 2; pi++) { free(g_ref[pi]); g_ref[pi] = NULL; }
    for (int b = 0; b < NBE; b++) {
        if (!g_be[b]) continue;
        int any = 0;
        for (int pi = 0; pi < f->nparts; pi++) any |= has_entries(g_be[b], f->parts[pi].need);
        if (!any) continue;
        ctx c = {.be = g_be[b]};
        fl_clear_error();
        f->setup(&c);
        g_be[b]->sync();
        if (c.failed || failed_now(g_be[b], g_res[fi][b][0].err, sizeof g_res[fi][b][0].err)) {
            for (int pi = 0; pi < f->nparts; pi++) {
                g_res[fi][b][pi].state = ST_ERR;
                if (c.failed) snprintf(g_res[fi][b][pi].err, sizeof g_res[fi][b][pi].err, "out of memory");
            }
            ctx_free(&c);
            continue;
        }
        for (int pi = 0; pi < f->nparts; pi++) {
            if (!has_entries(g_be[b], f->parts[pi].need)) continue;
            time_part(&c, f, pi, &g_res[fi][b][pi], b);
            if (g_res[fi][b][pi].state == ST_ERR) break; /* a device in error: the rest of it would fail too */
        }
        ctx_free(&c);
    }
}

/* ------------------------------------------------------------ output */

static FILE *g_tab; /* the table: stdout, or stderr when the JSON goes to stdout */
__attribute__((format(printf, 1, 2))) static void tprintf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfprintf(g_tab, fmt, ap);
    va_end(ap);
}

static int g_ratio_base; /* BE_CUDA, or BE_CPU where there is no CUDA */

static void cell(const result *r) {
    if (r->state == ST_OK) tprintf(" %10.3f", r->ms);
    else tprintf(" %10s", r->state == ST_ERR ? "error" : "-");
}

static void print_header(void) {
    tprintf("\n%-20s %-6s", "family", "part");
    for (int b = 0; b < NBE; b++)
        if (g_be[b]) tprintf(" %7s ms", BE_NAME[b]);
    if (g_be[BE_OPENCL]) tprintf(" %10s", g_ratio_base == BE_CUDA ? "ocl/cuda" : "ocl/cpu");
    for (int b = 1; b < NBE; b++)
        if (g_be[b]) tprintf(" %9s", b == BE_CUDA ? "diff cuda" : "diff ocl");
    tprintf("  shape\n");
}

static void print_family(int fi) {
    const family *f = &g_fam[fi];
    for (int pi = 0; pi < f->nparts; pi++) {
        tprintf("%-20s %-6s", pi ? "" : f->name, f->parts[pi].name);
        for (int b = 0; b < NBE; b++)
            if (g_be[b]) cell(&g_res[fi][b][pi]);
        if (g_be[BE_OPENCL]) {
            const result *o = &g_res[fi][BE_OPENCL][pi], *base = &g_res[fi][g_ratio_base][pi];
            if (o->state == ST_OK && base->state == ST_OK && base->ms > 0) tprintf(" %9.2fx", o->ms / base->ms);
            else tprintf(" %10s", "-");
        }
        for (int b = 1; b < NBE; b++) {
            if (!g_be[b]) continue;
            const result *r = &g_res[fi][b][pi];
            if (r->state == ST_OK && r->diff >= 0) tprintf(" %9.1e", r->diff);
            else tprintf(" %9s", "-");
        }
        tprintf("  %s\n", pi ? "" : f->shape);
        for (int b = 0; b < NBE; b++) {
            const result *r = &g_res[fi][b][pi];
            if (g_be[b] && r->state == ST_ERR)
                tprintf("    %s %s %s: %s\n", BE_NAME[b], f->name, f->parts[pi].name, r->err);
            if (g_be[b] && r->state == ST_OK && r->diff > 1e-3) /* float32 rounding is far below this */
                tprintf("    %s %s %s: its %s differs from the CPU's by %.2g of the largest value: check the kernel\n",
                        BE_NAME[b], f->name, f->parts[pi].name, f->parts[pi].check_name, r->diff);
        }
    }
    fflush(g_tab);
}

static void json_str(FILE *o, const char *s) {
    fputc('"', o);
    for (; s && *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(o, "\\%c", ch);
        else if (ch < 0x20) fprintf(o, "\\u%04x", ch);
        else fputc(ch, o);
    }
    fputc('"', o);
}

static void json_num(FILE *o, double v) {
    if (isfinite(v)) fprintf(o, "%.6g", v);
    else fprintf(o, "null");
}

/* The JSON is written as the run goes, one line per family and backend, each flushed: a run stopped by a
 * timeout leaves the objects of the families it finished, one to a line. */
static FILE *g_json;
static int g_json_first = 1;

static int json_begin(const char *path, const char *cpu_model, int opencl_is_cpu) {
    FILE *o = g_json = strcmp(path, "-") == 0 ? stdout : fopen(path, "w");
    if (!o) { fprintf(stderr, "cannot write %s\n", path); return 1; }
    fprintf(o, "{\"bench\": \"kernel_families\", \"scale\": ");
    json_num(o, g_scale);
    fprintf(o, ", \"reps\": %d, \"budget_s\": ", g_reps);
    json_num(o, g_budget);
    fprintf(o, ",\n \"devices\": {\"cpu\": ");
    json_str(o, cpu_model);
    fprintf(o, ", \"cpu_threads\": %d", fl_get_num_threads());
    for (int b = 1; b < NBE; b++) {
        fprintf(o, ", \"%s\": ", BE_NAME[b]);
        if (g_be[b]) json_str(o, g_desc[b]);
        else fprintf(o, "null");
        fprintf(o, ", \"%s_why\": ", BE_NAME[b]);
        if (g_be[b]) fprintf(o, "null");
        else json_str(o, g_why[b]);
    }
    fprintf(o, ", \"opencl_is_cpu_device\": %s},\n \"results\": [", opencl_is_cpu ? "true" : "false");
    fflush(o);
    return 0;
}

static void json_family(int fi) {
    FILE *o = g_json;
    if (!o) return;
    const family *f = &g_fam[fi];
    for (int b = 0; b < NBE; b++) {
        if (!g_be[b]) continue;
        fprintf(o, "%s\n  {\"family\": ", g_json_first ? "" : ",");
        g_json_first = 0;
        json_str(o, f->name);
        fprintf(o, ", \"layer\": ");
        json_str(o, f->layer);
        fprintf(o, ", \"shape\": ");
        json_str(o, f->shape);
        fprintf(o, ", \"backend\": \"%s\", \"parts\": {", BE_NAME[b]);
        double total = 0;
        int all = 1;
        for (int pi = 0; pi < f->nparts; pi++) {
            const result *r = &g_res[fi][b][pi];
            fprintf(o, "%s\"%s\": ", pi ? ", " : "", f->parts[pi].name);
            if (r->state == ST_OK) {
                fprintf(o, "{\"ms\": ");
                json_num(o, r->ms);
                fprintf(o, ", \"reps\": %d, ", r->reps);
                if (b == BE_CPU) fprintf(o, "\"threads\": %d, ", r->threads);
                fprintf(o, "\"checked\": ");
                json_str(o, f->parts[pi].check_name);
                fprintf(o, ", \"max_rel_diff_vs_cpu\": ");
                if (r->diff >= 0) json_num(o, r->diff);
                else fprintf(o, "null");
                fprintf(o, "}");
                total += r->ms;
            } else if (r->state == ST_ERR) {
                fprintf(o, "{\"ms\": null, \"error\": ");
                json_str(o, r->err);
                fprintf(o, "}");
                all = 0;
            } else {
                fprintf(o, "null"); /* the backend lacks the entry */
                all = 0;
            }
        }
        fprintf(o, "}, \"total_ms\": ");
        if (all) json_num(o, total);
        else fprintf(o, "null");
        fprintf(o, "}");
    }
    fflush(o);
}

static void json_end(const int *skipped) {
    FILE *o = g_json;
    if (!o) return;
    fprintf(o, "\n ],\n \"skipped_for_deadline\": [");
    int first = 1;
    for (int fi = 0; fi < NFAM; fi++)
        if (skipped[fi]) {
            fprintf(o, "%s", first ? "" : ", ");
            json_str(o, g_fam[fi].name);
            first = 0;
        }
    fprintf(o, "]}\n");
    if (o != stdout) fclose(o);
    else fflush(o);
    g_json = NULL;
}

static void cpu_model(char *out, size_t len) {
    snprintf(out, len, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    int got = 0;
    while (f && fgets(line, sizeof line, f)) {
        /* x86: "model name"; Arm: "Model" or "Hardware", else the "CPU part" */
        const char *keys[] = {"model name", "Model", "Hardware"};
        for (int k = 0; k < 3 && !got; k++) {
            size_t kl = strlen(keys[k]);
            if (strncmp(line, keys[k], kl) == 0 && (line[kl] == '\t' || line[kl] == ' ' || line[kl] == ':')) {
                const char *v = strchr(line, ':');
                if (!v) continue;
                for (v++; *v == ' ' || *v == '\t'; v++) {}
                snprintf(out, len, "%s", v);
                out[strcspn(out, "\n")] = 0;
                got = 1;
            }
        }
        if (got) break;
    }
    if (f) fclose(f);
    if (!got) {
        struct utsname u;
        if (uname(&u) == 0) snprintf(out, len, "unknown %s CPU", u.machine);
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    size_t l = strlen(out);
    if (n > 0 && l + 32 < len) snprintf(out + l, len - l, ", %ld CPUs online", n);
}

static int in_list(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *s = list; s && *s;) {
        const char *e = strchr(s, ',');
        size_t l = e ? (size_t)(e - s) : strlen(s);
        if (l == n && strncmp(s, name, n) == 0) return 1;
        s = e ? e + 1 : NULL;
    }
    return 0;
}

static void usage(FILE *o) {
    fprintf(o, "usage: bench_kernel_families [--scale S] [--reps R] [--budget SECONDS] [--deadline SECONDS]\n"
               "         [--only FAMILY,...] [--backends cpu,cuda,opencl] [--tf32] [--json [FILE]]\n"
               "families:");
    for (int i = 0; i < NFAM; i++) fprintf(o, " %s", g_fam[i].name);
    fprintf(o, "\n");
}

int main(int argc, char **argv) {
    const double t_start = now();
    const char *only = NULL, *backends = "cpu,cuda,opencl", *json = NULL;
    int tf32 = 0;
    g_tab = stdout;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--tf32")) tf32 = 1;
        else if (v && !strcmp(a, "--scale")) { g_scale = atof(v); i++; }
        else if (v && !strcmp(a, "--reps")) { g_reps = atoi(v); i++; }
        else if (v && !strcmp(a, "--budget")) { g_budget = atof(v); i++; }
        else if (v && !strcmp(a, "--deadline")) { g_deadline = atof(v); i++; }
        else if (v && !strcmp(a, "--only")) { only = v; i++; }
        else if (v && !strcmp(a, "--backends")) { backends = v; i++; }
        else if (!strcmp(a, "--json")) { /* --json FILE; alone (or before another option): on stdout */
            json = v && (v[0] != '-' || !strcmp(v, "-")) ? v : "-";
            if (json == v) i++;
        }
        else { fprintf(stderr, "unknown or incomplete argument: %s\n", a); usage(stderr); return 2; }
    }
    if (!(g_scale > 0) || g_reps < 1 || !(g_budget > 0) || !(g_deadline >= 0)) {
        fprintf(stderr, "--scale and --budget must be > 0, --reps >= 1, --deadline >= 0\n");
        return 2;
    }
    int selected[NFAM], nsel = 0;
    for (int i = 0; i < NFAM; i++) nsel += selected[i] = !only || in_list(only, g_fam[i].name);
    if (!nsel) { fprintf(stderr, "--only %s names no family\n", only); usage(stderr); return 2; }

    if (json && !strcmp(json, "-")) g_tab = stderr; /* stdout is the JSON's */
    char cpu[400];
    cpu_model(cpu, sizeof cpu);
    if (in_list(backends, "cpu")) g_be[BE_CPU] = fl_backend_cpu();
    snprintf(g_desc[BE_CPU], sizeof g_desc[BE_CPU], "%s, %d threads", cpu, fl_get_num_threads());
    if (in_list(backends, "cuda")) {
        g_be[BE_CUDA] = fl_gpu_backend(g_why[BE_CUDA], sizeof g_why[BE_CUDA]);
        if (g_be[BE_CUDA]) {
            fl_gpu_describe(g_desc[BE_CUDA], sizeof g_desc[BE_CUDA]);
            if (g_be[BE_CUDA]->set_tf32) g_be[BE_CUDA]->set_tf32(tf32);
        }
    } else snprintf(g_why[BE_CUDA], sizeof g_why[BE_CUDA], "not asked for (--backends)");
    int opencl_is_cpu = 0;
    if (in_list(backends, "opencl")) {
        g_be[BE_OPENCL] = fl_opencl_backend(0, g_why[BE_OPENCL], sizeof g_why[BE_OPENCL]);
        if (g_be[BE_OPENCL]) {
            const fl_opencl_device_info *d = &fl_opencl_state_get()->rep.dev;
            opencl_is_cpu = !d->is_gpu;
            snprintf(g_desc[BE_OPENCL], sizeof g_desc[BE_OPENCL], "%s (%s, %s, driver %s, %d compute units)%s",
                     d->name, d->platform, d->version, d->driver, d->compute_units,
                     opencl_is_cpu ? ", a CPU device" : "");
        }
    } else snprintf(g_why[BE_OPENCL], sizeof g_why[BE_OPENCL], "not asked for (--backends)");
    fl_clear_error();
    g_ratio_base = g_be[BE_CUDA] ? BE_CUDA : BE_CPU;

    tprintf("flynn kernel families: ms per call, the fastest of %d after a warm-up (fewer where a call takes more "
           "than %.3g s / %d), batch scale %.3g\n", g_reps, g_budget, g_reps, g_scale);
    tprintf("CPU:    %s\n", g_desc[BE_CPU]);
    if (!g_be[BE_CPU]) tprintf("        (not timed: --backends)\n");
    if (g_be[BE_CUDA]) tprintf("CUDA:   %s (TF32 %s)\n", g_desc[BE_CUDA], tf32 ? "allowed" : "off: float32, as OpenCL");
    else tprintf("CUDA:   not available: %s\n", g_why[BE_CUDA]);
    if (g_be[BE_OPENCL]) tprintf("OpenCL: %s\n", g_desc[BE_OPENCL]);
    else tprintf("OpenCL: not available: %s\n", g_why[BE_OPENCL]);
    if (g_be[BE_OPENCL] && opencl_is_cpu) {
        const char *thr = getenv("POCL_MAX_PTHREAD_COUNT"), *wg = getenv("POCL_WORK_GROUP_METHOD");
        tprintf("NOTE: the OpenCL device is this machine's CPU (PoCL): its timings are NOT GPU figures. They say\n"
               "      which kernels are slow for their work, not how a GPU runs them (PoCL here: %s thread%s,\n"
               "      work-group method %s, as the plugin sets them unless the environment does).\n",
               thr ? thr : "all", thr && !strcmp(thr, "1") ? "" : "s", wg ? wg : "PoCL's default");
    }
    if (!g_be[BE_CUDA] && !(g_be[BE_OPENCL] && !opencl_is_cpu))
        tprintf("NOTE: no GPU in this run: the %s column compares OpenCL with the CPU backend, not with CUDA.\n",
               g_be[BE_OPENCL] ? "ocl/cpu" : "ratio");
    tprintf("diff: the largest difference from the CPU's output (the slot named in the JSON), relative to its "
           "largest value\n");
    if (json && json_begin(json, g_desc[BE_CPU], opencl_is_cpu)) return 1;
    print_header();

    int skipped[NFAM] = {0}, nskip = 0;
    for (int fi = 0; fi < NFAM; fi++) {
        if (!selected[fi]) continue;
        if (g_deadline > 0 && now() - t_start > g_deadline) { /* no new family past the deadline */
            skipped[fi] = 1;
            selected[fi] = 0;
            nskip++;
            continue;
        }
        g_fam[fi].init(&g_fam[fi]);
        run_family(fi);
        print_family(fi);
        json_family(fi);
    }
    if (nskip) {
        tprintf("not run, past --deadline %.3g s:", g_deadline);
        for (int fi = 0; fi < NFAM; fi++)
            if (skipped[fi]) tprintf(" %s", g_fam[fi].name);
        tprintf("\n");
    }
    for (int pi = 0; pi < 2; pi++) free(g_ref[pi]);

    /* the sums over the families that every backend ran whole, and the ratios, worst first */
    tprintf("\ntotal over the families every backend timed whole:");
    double sum[NBE] = {0};
    int nboth = 0, order[NFAM];
    double ratio[NFAM];
    for (int fi = 0; fi < NFAM; fi++) {
        if (!selected[fi]) continue;
        int whole = 1;
        double t[NBE] = {0};
        for (int b = 0; b < NBE; b++) {
            if (!g_be[b]) continue;
            for (int pi = 0; pi < g_fam[fi].nparts; pi++) {
                whole &= g_res[fi][b][pi].state == ST_OK;
                t[b] += g_res[fi][b][pi].ms;
            }
        }
        if (!whole) continue;
        for (int b = 0; b < NBE; b++) sum[b] += t[b];
        if (g_be[BE_OPENCL] && t[g_ratio_base] > 0) {
            ratio[fi] = t[BE_OPENCL] / t[g_ratio_base];
            order[nboth++] = fi;
        }
    }
    for (int b = 0; b < NBE; b++)
        if (g_be[b]) tprintf(" %s %.1f ms", BE_NAME[b], sum[b]);
    tprintf("\n");
    if (nboth) {
        for (int i = 1; i < nboth; i++) /* insertion sort, largest ratio first */
            for (int j = i; j > 0 && ratio[order[j]] > ratio[order[j - 1]]; j--) {
                int t = order[j]; order[j] = order[j - 1]; order[j - 1] = t;
            }
        tprintf("OpenCL / %s per family (fwd + bwd), slowest first:", g_ratio_base == BE_CUDA ? "CUDA" : "CPU");
        for (int i = 0; i < nboth; i++) tprintf("%s %s %.1fx", i ? "," : "", g_fam[order[i]].name, ratio[order[i]]);
        tprintf("\n");
        if (g_ratio_base == BE_CUDA) {
            int over = 0;
            for (int i = 0; i < nboth; i++) over += ratio[order[i]] > 2.0;
            tprintf("issue 46's goal, OpenCL within 2x of CUDA: met by %d of %d families\n", nboth - over, nboth);
        }
    }
    int missing = 0;
    if (g_be[BE_OPENCL]) {
        tprintf("not on OpenCL (entry NULL):");
        for (int fi = 0; fi < NFAM; fi++)
            for (int pi = 0; selected[fi] && pi < g_fam[fi].nparts; pi++)
                if (g_res[fi][BE_OPENCL][pi].state == ST_NONE) {
                    tprintf(" %s %s", g_fam[fi].name, g_fam[fi].parts[pi].name);
                    missing++;
                }
        tprintf("%s\n", missing ? "" : " none");
    }
    if (g_be[BE_CPU]) {
        int lo = 1 << 30, hi = 0;
        for (int fi = 0; fi < NFAM; fi++)
            for (int pi = 0; pi < 2; pi++)
                if (g_res[fi][BE_CPU][pi].state == ST_OK) {
                    int t = g_res[fi][BE_CPU][pi].threads;
                    lo = t < lo ? t : lo;
                    hi = t > hi ? t : hi;
                }
        if (hi && lo == hi)
            tprintf("CPU threads in use (fl_threads_follow_load, as in training): %d of %d\n", lo,
                    fl_get_num_threads());
        else if (hi)
            tprintf("CPU threads in use (fl_threads_follow_load, as in training): %d to %d of %d\n", lo, hi,
                   fl_get_num_threads());
    }
    int errors = 0;
    for (int fi = 0; fi < NFAM; fi++)
        for (int b = 0; b < NBE; b++)
            for (int pi = 0; pi < 2; pi++) errors += g_res[fi][b][pi].state == ST_ERR;
    tprintf("%d part(s) failed; %.1f s in all\n", errors, now() - t_start);
    json_end(skipped);
    return errors ? 1 : 0;
}
