#!/bin/bash
# tests/gpu/opencl_mutations.sh — proof that test_opencl_parity catches a broken kernel: one mutation per
# kernel family of src/backend/kernels/ (each a small change of a result), the OpenCL plugin rebuilt and the
# parity run on the OpenCL device (PoCL in CI); every line must say rc=1. The sources are restored after
# each. Needs a build folder configured with the OpenCL plugin (BUILD, default /tmp/build-ocl):
#   cmake -S . -B /tmp/build-ocl -G Ninja -DFLYNN_CUDA=OFF && tests/gpu/opencl_mutations.sh
# Not run by ctest (it edits the sources while it runs).
set -u
cd "$(dirname "$0")/../.."
run() {
  local file=$1 from=$2 to=$3 name=$4
  cp $file ${BUILD:-/tmp/build-ocl}/mut.bak
  python3 - "$file" "$from" "$to" <<'PY'
import sys
p,a,b=sys.argv[1:4]; t=open(p).read(); assert a in t, a; open(p,'w').write(t.replace(a,b,1))
PY
  cmake --build ${BUILD:-/tmp/build-ocl} --target flynn_opencl test_gpu_parity >/dev/null 2>&1
  FLYNN_PARITY_BACKEND=opencl FLYNN_OPENCL_PLUGIN=${BUILD:-/tmp/build-ocl}/libflynn_opencl.so FLYNN_OPENCL_CACHE=${BUILD:-/tmp/build-ocl}/occ ${BUILD:-/tmp/build-ocl}/tests/test_gpu_parity > ${BUILD:-/tmp/build-ocl}/mut-$name.txt 2>&1
  echo "$name: rc=$? $(tail -1 ${BUILD:-/tmp/build-ocl}/mut-$name.txt)"
  cp ${BUILD:-/tmp/build-ocl}/mut.bak $file
}
run src/backend/kernels/act.cl 'y[e] = fl_act_forward(act, x[e]);' 'y[e] = fl_act_forward(act, x[e]) * 1.001f;' act
run src/backend/kernels/merge.cl 'if (mode == FL_BIN_SUB) v = a[i] - b[i];' 'if (mode == FL_BIN_SUB) v = a[i] - b[i] * 1.001f;' merge
run src/backend/kernels/reduce.cl 'for (int c = 0; c < chunks; c++) t += partial' 'for (int c = 0; c < chunks - 1; c++) t += partial' reduce
run src/backend/kernels/loss.cl 'L = FL_ROW_SUM(L) / (float)c;
    } else { /* FL_LC_MSE */' 'L = FL_ROW_SUM(L) / (float)c * 1.001f;
    } else { /* FL_LC_MSE */' loss
run src/backend/kernels/seq.cl 'if (r >= 0 && r < v && r % FL_EMB_PARTS == p) dw[r * d + j] += dy[i * d + j];' 'if (r >= 0 && r < v && r % FL_EMB_PARTS == p) dw[r * d + j] += dy[i * d + j] * 1.001f;' seq
run src/backend/kernels/attention.cl 'const float e = on ? expf(sr[j] - mx) : 0.0f;' 'const float e = on ? expf(1.001f * (sr[j] - mx)) : 0.0f;' attention
run src/backend/kernels/pool.cl 'y[e] = s * (cnt ? 1.0f / (float)cnt : 0.0f);' 'y[e] = s * (cnt ? 1.0f / (float)cnt : 0.0f) * 1.001f;' pool
run src/backend/kernels/layout.cl 'g += fl_pool_mul_rn(wh * ww, gr[(int64_t)q * C]);' 'g += fl_pool_mul_rn(wh * ww * 1.001f, gr[(int64_t)q * C]);' layout
run src/backend/kernels/conv.cl 'dx[o] = beta == 0.0f ? s : dx[o] + s;' 'dx[o] = beta == 0.0f ? s * 1.001f : dx[o] + s;' conv
run src/backend/kernels/conv.cl 'y[e] = fl_act_forward(g.act, acc);' 'y[e] = fl_act_forward(g.act, acc * 1.001f);' conv_depthwise
run src/backend/kernels/rnn.cl 'if (yo) yo[j] = d.zero_masked && !(m > 0.5f) ? 0.0f : hv;' 'if (yo) yo[j] = d.zero_masked && !(m > 0.5f) ? 0.0f : hv * 1.001f;' rnn_fwd
run src/backend/kernels/rnn.cl 'dh[e] += dy[(b * T + tout) * u + j];' 'dh[e] += dy[(b * T + tout) * u + j] * 1.001f;' rnn_bwd
run src/backend/kernels/optim.cl '    w[i] = wv;' '    w[i] = wv * 1.0001f;' optim
run src/backend/kernels/optim.cl 'acc_ += v_ * v_;' 'acc_ += v_ * v_ * 1.001;' optim_clip
# the row loop as it was before FL_ROW_COLS's guarded body: PoCL 3.1 wrote past k_loss's gradient (the canary)
run src/backend/kernels/dialect.h 'for (int j##_b_ = 0, j = FL_LANE; j##_b_ < (n); j##_b_ += FL_ROW_LANES, j += FL_ROW_LANES)                      \
        if (j >= (n)) {                                                                                             \
        } else' 'for (int j = FL_LANE; j < (n); j += FL_ROW_LANES)' row_cols
run src/backend/kernels/norm.cl 'dr[j] = beta == 0.0f ? d : dr[j] + d;' 'dr[j] = beta == 0.0f ? d : dr[j] + d * 1.001f;' norm
cmake --build ${BUILD:-/tmp/build-ocl} --target flynn_opencl test_gpu_parity >/dev/null 2>&1
