#!/bin/sh
# tests/cpu_variant.sh FLAGS CMD [ARGS...] — runs CMD as a test under the machine that ctest's ENVIRONMENT
# describes (cache sizes FLYNN_CPU_L2/L3, OpenBLAS's kernels OPENBLAS_CORETYPE, OMP_NUM_THREADS; see
# tests/CMakeLists.txt), where this CPU has every instruction-set flag of FLAGS (comma-separated, as
# /proc/cpuinfo names them; "-" for none): OpenBLAS's SkylakeX kernels on a CPU without AVX-512 would stop
# at the first instruction. Without them it exits 77, which ctest reports as skipped.
flags=$1
shift
if [ "$flags" != "-" ]; then
  have=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null)
  for f in $(echo "$flags" | tr ',' ' '); do
    case " ${have#*:} " in
      *" $f "*) ;;
      *) echo "cpu_variant: this CPU lacks $f; skipped"; exit 77 ;;
    esac
  done
fi
echo "cpu_variant: FLYNN_CPU_L2=${FLYNN_CPU_L2:-} FLYNN_CPU_L3=${FLYNN_CPU_L3:-} OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-}" \
  "OMP_NUM_THREADS=${OMP_NUM_THREADS:-}"
exec "$@"
