/*
 * cu_tools.cuh — the device query and bandwidth tools.
 * Part of the CUDA plugin's one translation unit: cuda_backend.cu includes it after the state and
 * helpers it uses (no separate object, so the CUDA 12 build by clang stays one compile).
 */
/* ------------------------------------------- device query and bandwidth */

/* CUDA cores per SM by architecture (as deviceQuery's _ConvertSMVer2Cores). */
static int cores_per_sm(int major, int minor) {
    switch (major * 10 + minor) {
    case 60: return 64;  /* Pascal and Volta: the CUDA 12 plugin only */
    case 61: case 62: return 128;
    case 70: case 72: return 64;
    case 75: return 64;
    case 80: return 64;
    case 86: case 87: case 89: return 128;
    case 90: return 128;
    case 100: case 101: case 103: case 110: return 128;
    case 120: case 121: return 128;
    default: return 0;
    }
}

__global__ void k_noop(int *p) { if (p) *p = 1; }

static int tool_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) { cudaGetLastError(); return 0; }
    return n;
}

static int tool_device_info(int i, fl_cuda_device_info *o, char *why, size_t why_len) {
    memset(o, 0, sizeof *o);
    o->index = i;
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, i);
    if (e != cudaSuccess) { snprintf(why, why_len, "cudaGetDeviceProperties(%d): %s", i, cudaGetErrorName(e)); return 1; }
    snprintf(o->name, sizeof o->name, "%s", p.name);
    char *u = o->uuid;
    u += sprintf(u, "GPU-");
    for (int k = 0; k < 16; k++) {
        u += sprintf(u, "%02x", (unsigned char)p.uuid.bytes[k]);
        if (k == 3 || k == 5 || k == 7 || k == 9) *u++ = '-';
    }
    *u = 0;
    o->cc_major = p.major;
    o->cc_minor = p.minor;
    o->multiprocessors = p.multiProcessorCount;
    o->cuda_cores = cores_per_sm(p.major, p.minor) * p.multiProcessorCount;
    int clk = 0, mclk = 0, bus = 0;
    cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, i);
    cudaDeviceGetAttribute(&mclk, cudaDevAttrMemoryClockRate, i);
    cudaDeviceGetAttribute(&bus, cudaDevAttrGlobalMemoryBusWidth, i);
    o->clock_khz = clk;
    o->mem_clock_khz = mclk;
    o->mem_bus_width = bus;
    o->peak_bandwidth_gbs = 2.0 * (double)mclk * 1e3 * (double)bus / 8.0 / 1e9;
    o->total_mem = p.totalGlobalMem;
    int cur = 0;
    cudaGetDevice(&cur);
    if (cudaSetDevice(i) == cudaSuccess) {
        size_t fr = 0, tot = 0;
        if (cudaMemGetInfo(&fr, &tot) == cudaSuccess) o->free_mem = fr;
        /* can this build run here? a trivial kernel tells */
        k_noop<<<1, 1>>>(NULL);
        e = cudaDeviceSynchronize();
        if (e == cudaSuccess) e = cudaGetLastError();
        o->runnable = e == cudaSuccess;
        if (!o->runnable)
            snprintf(o->runnable_why, sizeof o->runnable_why, "%s (this build: %s)", cudaGetErrorName(e), FLYNN_CUDA_ARCHS);
        else
            snprintf(o->runnable_why, sizeof o->runnable_why, "compute capability %d.%d is covered by %s", p.major,
                     p.minor, FLYNN_CUDA_ARCHS);
        cudaGetLastError();
        cudaSetDevice(cur);
    }
    o->l2_bytes = p.l2CacheSize;
    o->shared_per_block = p.sharedMemPerBlock;
    o->shared_per_sm = p.sharedMemPerMultiprocessor;
    o->regs_per_block = p.regsPerBlock;
    o->regs_per_sm = p.regsPerMultiprocessor;
    o->warp_size = p.warpSize;
    o->max_threads_per_block = p.maxThreadsPerBlock;
    o->max_threads_per_sm = p.maxThreadsPerMultiProcessor;
    for (int k = 0; k < 3; k++) { o->max_block[k] = p.maxThreadsDim[k]; o->max_grid[k] = p.maxGridSize[k]; }
    o->ecc = p.ECCEnabled;
    o->pci_domain = p.pciDomainID;
    o->pci_bus = p.pciBusID;
    o->pci_device = p.pciDeviceID;
    o->async_engines = p.asyncEngineCount;
    return 0;
}

/* bandwidthTest's method: the copies of one size timed together with CUDA
 * events on one stream, GB/s = bytes * reps / time. */
static int tool_bandwidth(int dev, int pinned, const size_t *sizes, int nsizes, int reps, fl_cuda_bw_point *out,
                          char *why, size_t why_len) {
    size_t maxb = 0;
    for (int i = 0; i < nsizes; i++) if (sizes[i] > maxb) maxb = sizes[i];
    int cur = 0;
    cudaGetDevice(&cur);
    cudaError_t e = cudaSetDevice(dev);
    void *h = NULL, *d1 = NULL, *d2 = NULL;
    cudaStream_t st = NULL;
    cudaEvent_t a = NULL, b = NULL;
    int rc = 1;
    if (e == cudaSuccess) e = pinned ? cudaMallocHost(&h, maxb) : ((h = malloc(maxb)) ? cudaSuccess : cudaErrorMemoryAllocation);
    if (e == cudaSuccess) e = cudaMalloc(&d1, maxb);
    if (e == cudaSuccess) e = cudaMalloc(&d2, maxb);
    if (e == cudaSuccess) e = cudaStreamCreate(&st);
    if (e == cudaSuccess) e = cudaEventCreate(&a);
    if (e == cudaSuccess) e = cudaEventCreate(&b);
    if (e == cudaSuccess) {
        memset(h, 1, maxb);
        e = cudaMemset(d1, 2, maxb);
    }
    for (int i = 0; e == cudaSuccess && i < nsizes; i++) {
        size_t n = sizes[i];
        float ms = 0;
        out[i].bytes = n;
        /* warm-up, then timed */
        e = cudaMemcpyAsync(d1, h, n, cudaMemcpyHostToDevice, st);
        if (e == cudaSuccess) e = cudaEventRecord(a, st);
        for (int r = 0; e == cudaSuccess && r < reps; r++) e = cudaMemcpyAsync(d1, h, n, cudaMemcpyHostToDevice, st);
        if (e == cudaSuccess) e = cudaEventRecord(b, st);
        if (e == cudaSuccess) e = cudaEventSynchronize(b);
        if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, a, b);
        out[i].h2d = e == cudaSuccess && ms > 0 ? (double)n * reps / (ms * 1e-3) / 1e9 : 0;
        if (e == cudaSuccess) e = cudaEventRecord(a, st);
        for (int r = 0; e == cudaSuccess && r < reps; r++) e = cudaMemcpyAsync(h, d1, n, cudaMemcpyDeviceToHost, st);
        if (e == cudaSuccess) e = cudaEventRecord(b, st);
        if (e == cudaSuccess) e = cudaEventSynchronize(b);
        if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, a, b);
        out[i].d2h = e == cudaSuccess && ms > 0 ? (double)n * reps / (ms * 1e-3) / 1e9 : 0;
        if (e == cudaSuccess) e = cudaEventRecord(a, st);
        for (int r = 0; e == cudaSuccess && r < reps; r++) e = cudaMemcpyAsync(d2, d1, n, cudaMemcpyDeviceToDevice, st);
        if (e == cudaSuccess) e = cudaEventRecord(b, st);
        if (e == cudaSuccess) e = cudaEventSynchronize(b);
        if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, a, b);
        /* bandwidthTest counts device-to-device bytes twice (read + write) */
        out[i].d2d = e == cudaSuccess && ms > 0 ? 2.0 * (double)n * reps / (ms * 1e-3) / 1e9 : 0;
    }
    if (e == cudaSuccess) rc = 0;
    else snprintf(why, why_len, "bandwidth test on device %d: %s", dev, cudaGetErrorName(e));
    cudaGetLastError();
    if (a) cudaEventDestroy(a);
    if (b) cudaEventDestroy(b);
    if (st) cudaStreamDestroy(st);
    if (d1) cudaFree(d1);
    if (d2) cudaFree(d2);
    if (h) { if (pinned) cudaFreeHost(h); else free(h); }
    cudaSetDevice(cur);
    return rc;
}

static const fl_cuda_tools g_tools = {tool_device_count, tool_device_info, tool_bandwidth};

extern "C" __attribute__((visibility("default"))) const fl_cuda_tools *fl_cuda_plugin_tools(void) { return &g_tools; }
