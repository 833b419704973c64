/*
 * cuda_backend.cu — the CUDA backend (libflynn_cuda.so): the same table as
 * the CPU backend (backend/backend.h), on one stream. cuBLAS does the dense
 * matrix products, cuDNN the convolutions other than the depthwise ones
 * (algorithm found once per shape and cached); own kernels do the rest,
 * calling the per-element formulas of ops/math.h that the CPU backend calls
 * too, so that the CPU tests already check the GPU's math. A caching
 * allocator keeps cudaMalloc/cudaFree out of the training loop. Every
 * CUDA/cuBLAS/cuDNN status is checked and turned into a flynn error naming
 * the call and the status.
 *
 * Layout conventions are the CPU's: NHWC activations, Keras kernels
 * (kh, kw, in, out); cuDNN wants (out, kh, kw, in), so kernels are
 * transposed into a cached copy before each forward pass.
 *
 * One translation unit in parts: this file holds the state, the table and the plugin's entry point, and
 * includes the host glue by family (cu_*.cuh, at most ~600 lines each) and the kernels it shares with
 * the OpenCL plugin (src/backend/kernels/*.cl).
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "flynn/flynn.h"
#include "backend/backend.h"
#include "backend/cuda/plugin.h"
}
#include "backend/kernels/dialect.h"
#include "ops/math.h"
#include "ops/rnn_math.h"
/* the kernels CUDA shares with OpenCL (src/backend/kernels/, dialect.h), one file per family */
#include "backend/kernels/act.cl"
#include "backend/kernels/merge.cl"
#include "backend/kernels/reduce.cl"
#include "backend/kernels/loss.cl"
#include "backend/kernels/conv.cl"
#include "backend/kernels/pool.cl"
#include "backend/kernels/layout.cl"
#include "backend/kernels/norm.cl"
#include "backend/kernels/seq.cl"
#include "backend/kernels/attention.cl"
#include "backend/kernels/rnn.cl"
#include "backend/kernels/optim.cl"

#ifndef FLYNN_CUDA_ARCHS
#define FLYNN_CUDA_ARCHS "unknown"
#endif

/* One source, two plugins: libflynn_cuda.so is built by nvcc with CUDA 13,
 * libflynn_cuda12.so by clang with CUDA 12 from pip wheels (docs/gpu.md,
 * "Building the CUDA 12 plugin"). What differs is said here: the oldest
 * driver of each CUDA major (NVIDIA's minor version compatibility table),
 * the CMake variable that lists the architectures, and __grid_constant__,
 * which clang has only from version 17 (without it, the descriptor
 * argument is read from parameter space all the same unless its address is
 * taken; flynn's kernels index it with a loop counter, so a copy may be
 * made in local memory: slower, not wrong). */
#if CUDART_VERSION >= 13000
#define FL_PLUGIN_MIN_DRIVER "580"
#define FL_PLUGIN_ARCH_VAR "CMAKE_CUDA_ARCHITECTURES (FLYNN_CUDA_ARCHITECTURES)"
#else
#define FL_PLUGIN_MIN_DRIVER "525"
#define FL_PLUGIN_ARCH_VAR "FLYNN_CUDA12_ARCHITECTURES"
#endif
#define FL_PLUGIN_CUDA_MAJOR (CUDART_VERSION / 1000)
#if defined(__clang__) && __clang_major__ < 17
#define FL_GRID_CONSTANT
#else
#define FL_GRID_CONSTANT __grid_constant__
#endif

/* flynn's status codes, from the one public list */
enum { ST_INVALID_ARG = FL_ERR_INVALID_ARG, ST_NOMEM = FL_ERR_NOMEM, ST_DEVICE = FL_ERR_DEVICE };

static const fl_cuda_host *g_host;
static cudaStream_t g_stream;
static cublasHandle_t g_cublas;
static cudnnHandle_t g_cudnn;
static int g_tf32 = 1;             /* TensorFlow's default: TF32 allowed */
static int g_sticky = 0;           /* an asynchronous error was seen */
static char g_sticky_msg[512];
static cudaDeviceProp g_prop;
/* CUDA graphs. A captured training step reads what changes from step to
 * step from two device counters, g_dsteps[0] = optimizer steps done before
 * the step (Adam's t - 1) and g_dsteps[1] = the graph step its dropout
 * streams mix in. They are written from the host's counters right before
 * every replay (cu_graph_launch), never advanced on the device: eager steps
 * between replays (the partial last batch of an epoch) move only the host's
 * counters, and a device copy that moved by itself would fall behind. */
static int g_capturing;
static int64_t g_cap_gstep;        /* the graph step of the step being captured */
static int64_t *g_dsteps;
static float *g_dlr;               /* the learning rate a captured optimizer step reads (graph_set_learning_rate) */
static int g_graphs_live;          /* instantiated graphs not yet freed */
static void *g_cublas_ws;

/* the host glue by family, in this order (each uses what the ones before it define) */
#include "backend/cuda/cu_core.cuh"
#include "backend/cuda/cu_conv.cuh"
#include "backend/cuda/cu_pool.cuh"
#include "backend/cuda/cu_act.cuh"
#include "backend/cuda/cu_norm.cuh"
#include "backend/cuda/cu_merge.cuh"
#include "backend/cuda/cu_layout.cuh"
#include "backend/cuda/cu_seq.cuh"
#include "backend/cuda/cu_attention.cuh"
#include "backend/cuda/cu_optim.cuh"
#include "backend/cuda/cu_graph.cuh"
#include "backend/cuda/cu_rnn.cuh"

/* ----------------------------------------------------------- the table */

static fl_backend g_backend;


static void fill_table(void) {
    fl_backend *b = &g_backend;
    memset(b, 0, sizeof *b);
    b->name = "cuda";
    b->host_memory = 0;
    b->alloc = cu_alloc;
    b->free = cu_free;
    b->upload = cu_upload;
    b->download = cu_download;
    b->copy = cu_copy;
    b->zero = cu_zero;
    b->sync = cu_sync;
    b->check = cu_check;
    b->set_tf32 = cu_set_tf32;
    b->mem_info = cu_mem_info;
    b->gather_rows = cu_gather_rows;
    b->dense_fwd = cu_dense_fwd;
    b->dense_bwd = cu_dense_bwd;
    b->conv_workspace = cu_conv_workspace;
    b->conv2d_fwd = cu_conv2d_fwd;
    b->conv2d_bwd = cu_conv2d_bwd;
    b->conv2d_transpose_fwd = cu_conv2d_transpose_fwd;
    b->conv2d_transpose_bwd = cu_conv2d_transpose_bwd;
    b->depthwise_fwd = cu_depthwise_fwd;
    b->depthwise_bwd = cu_depthwise_bwd;
    b->maxpool_fwd = cu_maxpool_fwd;
    b->maxpool_bwd = cu_maxpool_bwd;
    b->avgpool_fwd = cu_avgpool_fwd;
    b->avgpool_bwd = cu_avgpool_bwd;
    b->gap_fwd = cu_gap_fwd;
    b->gap_bwd = cu_gap_bwd;
    b->act_fwd = cu_act_fwd;
    b->act_bwd = cu_act_bwd;
    b->dropout_fwd = cu_dropout_fwd;
    b->dropout_bwd = cu_dropout_bwd;
    b->bn_fwd_train = cu_bn_fwd_train;
    b->bn_fwd_infer = cu_bn_fwd_infer;
    b->bn_bwd = cu_bn_bwd;
    b->mul = cu_mul;
    b->concat_fwd = cu_concat_fwd;
    b->concat_bwd = cu_concat_bwd;
    b->pad2d = cu_pad2d;
    b->upsample2d_fwd = cu_upsample2d_fwd;
    b->upsample2d_bwd = cu_upsample2d_bwd;
    b->permute = cu_permute;
    b->binary = cu_binary;
    b->fill = cu_fill;
    b->bmerge_fwd = cu_bmerge_fwd;
    b->bmerge_bwd = cu_bmerge_bwd;
    b->axpby = cu_axpby;
    b->minmax_grad = cu_minmax_grad;
    b->pact_fwd = cu_pact_fwd;
    b->pact_bwd = cu_pact_bwd;
    b->softmax_axis_fwd = cu_softmax_axis_fwd;
    b->softmax_axis_bwd = cu_softmax_axis_bwd;
    b->prelu_fwd = cu_prelu_fwd;
    b->prelu_bwd = cu_prelu_bwd;
    b->normalize_fwd = cu_normalize_fwd;
    b->normalize_bwd = cu_normalize_bwd;
    b->accumulate = cu_accumulate;
    b->loss = cu_loss;
    b->metric = cu_metric;
    b->sum_into = cu_sum_into;
    b->optimizer_step = cu_optimizer_step;
    b->graph_begin = cu_graph_begin;
    b->graph_end = cu_graph_end;
    b->graph_launch = cu_graph_launch;
    b->graph_free = cu_graph_free;
    b->layernorm_fwd = cu_layernorm_fwd;
    b->layernorm_bwd = cu_layernorm_bwd;
    b->gemm_batched = cu_gemm_batched;
    b->attn_softmax_fwd = cu_attn_softmax_fwd;
    b->attn_softmax_bwd = cu_attn_softmax_bwd;
    b->rnn_fwd = cu_rnn_fwd;
    b->rnn_bwd = cu_rnn_bwd;
    b->embedding_fwd = cu_embedding_fwd;
    b->embedding_bwd = cu_embedding_bwd;
    b->seq_mask = cu_seq_mask;
    b->masked_gap1d_fwd = cu_masked_gap1d_fwd;
    b->masked_gap1d_bwd = cu_masked_gap1d_bwd;
    b->loss_mask = cu_loss_mask;
    b->loss_weight = cu_loss_weight;
    b->scalar_mul_fwd = cu_scalar_mul_fwd;
    b->scalar_mul_bwd = cu_scalar_mul_bwd;
    b->attn_concat_fwd = cu_attn_concat_fwd;
    b->attn_concat_bwd = cu_attn_concat_bwd;
    b->graph_set_learning_rate = cu_graph_set_learning_rate;
    b->comm_stream_fork = cu_comm_stream_fork;
    b->comm_stream_join = cu_comm_stream_join;
}

__global__ void k_probe(int *out) { *out = 42; }

static const fl_backend *fail_open(fl_cuda_report *rep, const char *check, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rep->reason, sizeof rep->reason, fmt, ap);
    va_end(ap);
    snprintf(rep->failed_check, sizeof rep->failed_check, "%s", check);
    return NULL;
}

extern "C" __attribute__((visibility("default"))) const fl_backend *fl_cuda_plugin_open(const fl_cuda_host *host,
                                                                                          fl_cuda_report *rep) {
    memset(rep, 0, sizeof *rep);
    snprintf(rep->archs, sizeof rep->archs, "%s", FLYNN_CUDA_ARCHS);
    rep->cudnn_built = CUDNN_VERSION;
    if (!host || host->abi != FL_CUDA_PLUGIN_ABI)
        return fail_open(rep, "plugin", "the CUDA plugin's ABI %d does not match flynn's %d: reinstall flynn",
                         FL_CUDA_PLUGIN_ABI, host ? host->abi : -1);
    if (!host->backend_abi || strcmp(host->backend_abi, FL_BACKEND_ABI) != 0)
        return fail_open(rep, "plugin", "the CUDA plugin was built from another flynn than this libflynn (backend "
                         "table %s, libflynn's %s): reinstall flynn, so that libflynn and its plugins come from one "
                         "build", FL_BACKEND_ABI, host->backend_abi ? host->backend_abi : "?");
    g_host = host;
    cudaRuntimeGetVersion(&rep->runtime_version);
    cudaDriverGetVersion(&rep->driver_version);
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e == cudaErrorInsufficientDriver)
        return fail_open(rep, "driver_version",
                         "CUDA driver version is insufficient for CUDA runtime version %d.%d (the driver supports "
                         "%d.%d): update the NVIDIA driver to " FL_PLUGIN_MIN_DRIVER " or newer",
                         rep->runtime_version / 1000, (rep->runtime_version % 1000) / 10, rep->driver_version / 1000,
                         (rep->driver_version % 1000) / 10);
    if (e == cudaErrorNoDevice || (e == cudaSuccess && count == 0))
        return fail_open(rep, "device", "the driver sees no CUDA device (check CUDA_VISIBLE_DEVICES and nvidia-smi)");
    if (e != cudaSuccess)
        return fail_open(rep, "device", "cudaGetDeviceCount failed: %s (%s)", cudaGetErrorName(e), cudaGetErrorString(e));
    int dev = 0;
    const char *dv = getenv("FLYNN_CUDA_DEVICE"), *local = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (dv && *dv) dev = atoi(dv);
    else if (local && *local) dev = atoi(local) % count; /* mpirun: one GPU per rank of this machine */
    if (dev < 0 || dev >= count)
        return fail_open(rep, "device", "FLYNN_CUDA_DEVICE=%s but there are %d CUDA devices", dv, count);
    if ((e = cudaSetDevice(dev)) != cudaSuccess || (e = cudaGetDeviceProperties(&g_prop, dev)) != cudaSuccess)
        return fail_open(rep, "device", "cannot open CUDA device %d: %s", dev, cudaGetErrorName(e));
    snprintf(rep->device_name, sizeof rep->device_name, "%s", g_prop.name);
    rep->cc_major = g_prop.major;
    rep->cc_minor = g_prop.minor;
    rep->multiprocessors = g_prop.multiProcessorCount;
    cudaMemGetInfo(&rep->free_mem, &rep->total_mem);
    /* can this build's code run on it? */
    int *probe = NULL, val = 0;
    if ((e = cudaMalloc(&probe, sizeof(int))) != cudaSuccess)
        return fail_open(rep, "device", "cudaMalloc of 4 bytes failed on %s: %s", g_prop.name, cudaGetErrorName(e));
    k_probe<<<1, 1>>>(probe);
    e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaMemcpy(&val, probe, sizeof val, cudaMemcpyDeviceToHost);
    cudaFree(probe);
    if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorUnsupportedPtxVersion || e == cudaErrorInvalidKernelImage)
        return fail_open(rep, "compute_capability",
                         "%s has compute capability %d.%d, which this build of flynn has no code for (built for %s): "
                         "rebuild flynn with " FL_PLUGIN_ARCH_VAR " including %d%d",
                         g_prop.name, g_prop.major, g_prop.minor, FLYNN_CUDA_ARCHS, g_prop.major, g_prop.minor);
    if (e != cudaSuccess || val != 42)
        return fail_open(rep, "device", "a test kernel failed on %s: %s", g_prop.name, cudaGetErrorName(e));
    rep->cudnn_version = cudnnGetVersion();
    if (rep->cudnn_version / 10000 != CUDNN_MAJOR)
        return fail_open(rep, "cudnn_version", "the cuDNN library is version %zu.%zu, flynn is built for cuDNN %d: "
                         "install cuDNN %d for CUDA %d", rep->cudnn_version / 10000, (rep->cudnn_version % 10000) / 100,
                         CUDNN_MAJOR, CUDNN_MAJOR, FL_PLUGIN_CUDA_MAJOR);
    if ((e = cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking)) != cudaSuccess)
        return fail_open(rep, "device", "cudaStreamCreate failed: %s", cudaGetErrorName(e));
    cublasStatus_t bs = cublasCreate(&g_cublas);
    if (bs != CUBLAS_STATUS_SUCCESS)
        return fail_open(rep, "cublas_init", "cublasCreate failed: %s", cublasGetStatusName(bs));
    cublasGetVersion(g_cublas, &rep->cublas_version);
    cublasSetStream(g_cublas, g_stream);
    /* a workspace of our own, so that cuBLAS allocates nothing while a graph is captured */
    const size_t ws = (size_t)32 << 20;
    if (cudaMalloc(&g_cublas_ws, ws) == cudaSuccess) cublasSetWorkspace(g_cublas, g_cublas_ws, ws);
    else cudaGetLastError();
    cudnnStatus_t ds = cudnnCreate(&g_cudnn);
    if (ds != CUDNN_STATUS_SUCCESS)
        return fail_open(rep, "cudnn_init", "cudnnCreate failed: %s", cudnnGetErrorString(ds));
    cudnnSetStream(g_cudnn, g_stream);
    const char *prec = getenv("FLYNN_MATMUL_PRECISION");
    int tf32 = !(prec && strcmp(prec, "highest") == 0);
    fill_table();
    cu_set_tf32(tf32);
    return &g_backend;
}

#include "backend/cuda/cu_tools.cuh"
