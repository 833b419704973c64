# cli_lib.sh — what the command-line test scripts share (sourced, not run):
# a scratch folder $tmp removed on exit, the pass/fail counters and
#   expect NAME EXIT_CODE PATTERN -- command...
# which runs the command and checks its exit code and that its output
# (stdout and stderr) matches the extended regular expression.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok()  { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }
expect() { # expect NAME EXIT_CODE PATTERN -- command...
  local name=$1 code=$2 pat=$3; shift 4
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ "$rc" != "$code" ]; then bad "$name: exit $rc, expected $code"; echo "$out" | tail -5 >&2; return; fi
  if ! grep -qE -- "$pat" <<<"$out"; then bad "$name: output lacks /$pat/"; echo "$out" | tail -5 >&2; return; fi
  ok
}
