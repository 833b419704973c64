#!/usr/bin/env bash
# smoke.sh FUZZER NAME SECONDS SEEDS REGRESSIONS DICT ARTIFACTS — the ctest
# fuzz_smoke_<NAME>: fuzzes one libFuzzer harness for SECONDS from its seeds
# and regression inputs (read, never written), in a fresh scratch corpus.
# A crash, leak, timeout or out-of-memory fails the test; the input is kept
# under ARTIFACTS, with how to turn it into a regression input.
set -uo pipefail
fuzzer=$1 name=$2 seconds=$3 seeds=$4 regressions=$5 dict=$6 artifacts=$7
work=$(mktemp -d "${TMPDIR:-/tmp}/flynn-fuzz-smoke-$name.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$artifacts/$name"
"$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -dict="$dict" -artifact_prefix="$artifacts/$name/" "$work" "$seeds" "$regressions" >"$work/log" 2>&1
rc=$?
grep -E "^(INFO: Seed|#[0-9]+ +DONE|Done [0-9]+ runs|stat::number_of_executed_units)" "$work/log"
if [ $rc -ne 0 ]; then
  tail -n 80 "$work/log"
  echo "fuzz_smoke_$name: FAILED (libFuzzer exit $rc). The input is in $artifacts/$name/; reproduce with"
  echo "  $fuzzer <input>   (or build/tests/fuzz/fuzz_regress_$name <input> in the ASan build),"
  echo "then minimise it (-minimize_crash=1 -runs=10000) and add it to tests/fuzz/regressions/$name/."
  exit 1
fi
echo "fuzz_smoke_$name: no crash in ${seconds}s"
