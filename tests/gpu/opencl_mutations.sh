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
run src/backend/kernels/norm.cl 'dr[j] = beta == 0.0f ? d : dr[j] + d;' 'dr[j] = beta == 0.0f ? d : dr[j] + d * 1.001f;' norm
cmake --build ${BUILD:-/tmp/build-ocl} --target flynn_opencl test_gpu_parity >/dev/null 2>&1
