/*
 * cu_graph.cuh — CUDA graphs.
 * Part of the CUDA plugin's one translation unit: cuda_backend.cu includes it after the state and
 * helpers it uses (no separate object, so the CUDA 12 build by clang stays one compile).
 */
/* --------------------------------------------------------- CUDA graphs */

/* A training step captured on the stream and replayed (train.c decides
 * when). What the captured kernels must not freeze, they read from
 * g_dsteps (see its comment): the optimizer step (k_optimizer) and the
 * dropout step (k_dropout_fwd). Buffers replaced while a graph is alive wait
 * in the retired list (cu_free_retire). */
static int g_sticky_before;

__global__ void k_set_steps(int64_t *d, int64_t opt_step, int64_t graph_step) {
    d[0] = opt_step;
    d[1] = graph_step;
}

static int cu_graph_begin(int64_t opt_step, int64_t graph_step) {
    const char *e = getenv("FLYNN_CUDA_GRAPHS");
    if (e && strcmp(e, "0") == 0) return 1;
    if (!g_dsteps && !(g_dsteps = (int64_t *)cu_alloc(2 * sizeof(int64_t)))) return 1;
    if (!g_dlr && !(g_dlr = (float *)cu_alloc(sizeof(float)))) return 1;
    g_sticky_before = g_sticky;
    g_cap_gstep = graph_step;
    if (cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
        cudaGetLastError();
        return 1;
    }
    g_capturing = 1;
    return 0;
}

static void *cu_graph_end(void) {
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(g_stream, &graph);
    g_capturing = 0;
    cudaGraphExec_t exec = NULL;
    if (e == cudaSuccess && graph && g_sticky == g_sticky_before) e = cudaGraphInstantiate(&exec, graph, 0);
    else if (e == cudaSuccess) e = cudaErrorStreamCaptureInvalidated;
    if (graph) cudaGraphDestroy(graph);
    if (e != cudaSuccess || !exec) {
        /* capture is an optimisation: forget its errors (the sticky one and
         * the thread's message), run eagerly */
        cudaGetLastError();
        g_sticky = g_sticky_before;
        g_host->error(0, "%s", "");
        release_retired();
        return NULL;
    }
    g_graphs_live++;
    return (void *)exec;
}

/* The counters of the step being replayed go to the device first, in stream
 * order (kernel parameters: nothing on the host has to outlive the call). */
/* The learning rate of the next replay, in stream order as the counters
 * (a kernel parameter: nothing on the host must outlive the call). */
__global__ void k_set_lr(float *d, float lr) { *d = lr; }

static void cu_graph_set_learning_rate(float lr) {
    if (!g_dlr && !(g_dlr = (float *)cu_alloc(sizeof(float)))) return;
    k_set_lr<<<1, 1, 0, g_stream>>>(g_dlr, lr);
    LAUNCHED();
}

/* Data-parallel training: a second stream for the gradients' all-reduces
 * (NCCL), ordered against the compute stream by events, so that a bucket's
 * reduction runs while backward goes on (as PyTorch DDP's comm stream). */
static cudaStream_t g_comm;
static cudaEvent_t g_comm_fork, g_comm_join;

static void *cu_comm_stream_fork(void) {
    if (!g_comm && !(CUDA_OK(cudaStreamCreateWithFlags(&g_comm, cudaStreamNonBlocking)) &&
                     CUDA_OK(cudaEventCreateWithFlags(&g_comm_fork, cudaEventDisableTiming)) &&
                     CUDA_OK(cudaEventCreateWithFlags(&g_comm_join, cudaEventDisableTiming))))
        return (void *)g_stream; /* the error is reported; the compute stream keeps everything in order */
    if (!CUDA_OK(cudaEventRecord(g_comm_fork, g_stream)) || !CUDA_OK(cudaStreamWaitEvent(g_comm, g_comm_fork, 0)))
        return (void *)g_stream;
    return (void *)g_comm;
}

static void cu_comm_stream_join(void) {
    if (!g_comm) return;
    if (CUDA_OK(cudaEventRecord(g_comm_join, g_comm))) (void)CUDA_OK(cudaStreamWaitEvent(g_stream, g_comm_join, 0));
}

static int cu_graph_launch(void *graph, int64_t opt_step, int64_t graph_step) {
    k_set_steps<<<1, 1, 0, g_stream>>>(g_dsteps, opt_step, graph_step);
    if (!LAUNCHED()) return 1;
    return CUDA_OK(cudaGraphLaunch((cudaGraphExec_t)graph, g_stream)) ? 0 : 1;
}

static void cu_graph_free(void *graph) {
    if (!graph) return;
    cudaGraphExecDestroy((cudaGraphExec_t)graph);
    if (g_graphs_live > 0) g_graphs_live--;
    release_retired();
}
