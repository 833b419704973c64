#!/usr/bin/env bash
# tools/fuzz_long.sh NAME SECONDS [JOBS] — fuzzes one harness of tests/fuzz
# for a long time (the CI smoke runs each for 20 s only). Needs the fuzz build:
#     cmake -S . -B build-fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DFLYNN_FUZZ=ON \
#           -DFLYNN_CUDA=OFF -DFLYNN_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
#     cmake --build build-fuzz -j2
# NAME: idx npy cifar json keras h5 weights_h5 npz csv image, or "all" (one after the other,
# SECONDS each). JOBS = 1 (default): one process that stops at the first
# crash, and the line "NAME: N executions in S s" says how many inputs it
# survived. JOBS > 1: libFuzzer's fork mode (-fork=JOBS -ignore_crashes=1), JOBS
# processes that merge their corpora and go on after a crash, to collect
# crashes (each one in the artifacts folder). FLYNN_FUZZ_FORK=1 uses fork
# mode with one process too; FLYNN_FUZZ_TIMEOUT (10) is the seconds after
# which one input counts as a hang.
# The corpus grows across runs in $FLYNN_FUZZ_WORK/NAME/corpus (default
# build-fuzz/fuzz-work); crash inputs land in $FLYNN_FUZZ_WORK/NAME/artifacts.
# A crash input becomes a regression input: minimise it with
#     build-fuzz/tests/fuzz/fuzz_NAME -minimize_crash=1 -runs=20000 -exact_artifact_path=OUT INPUT
# and add OUT to tests/fuzz/regressions/NAME/.
set -uo pipefail
cd "$(dirname "$0")/.."
name=${1:?usage: tools/fuzz_long.sh NAME SECONDS [JOBS]} seconds=${2:?usage: tools/fuzz_long.sh NAME SECONDS [JOBS]}
jobs=${3:-1}
build=${FLYNN_FUZZ_BUILD:-build-fuzz}
work=${FLYNN_FUZZ_WORK:-$build/fuzz-work}
if [ "$name" = all ]; then
  rc=0
  for h in idx npy cifar json keras h5 weights_h5 npz csv image; do "$0" "$h" "$seconds" "$jobs" || rc=1; done
  exit $rc
fi
fuzzer=$build/tests/fuzz/fuzz_$name
[ -x "$fuzzer" ] || { echo "fuzz_long.sh: no $fuzzer; build the fuzz build first (see the top of this script)" >&2; exit 2; }
mkdir -p "$work/$name/corpus" "$work/$name/artifacts"
log=$work/$name/fuzz-$(date +%Y%m%d-%H%M%S).log
mode=()
{ [ "$jobs" -gt 1 ] || [ "${FLYNN_FUZZ_FORK:-0}" = 1 ]; } && mode=(-fork="$jobs" -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
echo "fuzz_long.sh: $name for ${seconds}s, $jobs process(es); log $log"
"$fuzzer" "${mode[@]}" -max_total_time="$seconds" -timeout="${FLYNN_FUZZ_TIMEOUT:-10}" -rss_limit_mb=2048 -print_final_stats=1 \
  -dict=tests/fuzz/flynn.dict -artifact_prefix="$work/$name/artifacts/" \
  "$work/$name/corpus" "$build/tests/fuzz/corpus/$name" "tests/fuzz/regressions/$name" >"$log" 2>&1
rc=$?
execs=$(grep -oE "^stat::number_of_executed_units: *[0-9]+" "$log" | grep -oE "[0-9]+$" | tail -1)
[ -z "$execs" ] && execs=$(grep -oE "^#[0-9]+" "$log" | tail -1 | tr -d '#')
secs=$(grep -oE "^(Done [0-9]+ runs in|INFO: fuzzed for) [0-9]+ second" "$log" | grep -oE "[0-9]+ second" | grep -oE "[0-9]+")
if [ -n "$secs" ]; then took="in $secs s"; else took="(stopped early, see the log)"; fi
echo "$name: ${execs:-?} executions $took, libFuzzer exit $rc, $(ls "$work/$name/artifacts" | wc -l) file(s) in $work/$name/artifacts"
grep -E "^SUMMARY|ERROR: libFuzzer|fuzz harness:" "$log" | sort | uniq -c | head -20
exit $rc
