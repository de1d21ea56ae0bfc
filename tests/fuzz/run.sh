#!/usr/bin/env bash
# Runs kiln's libFuzzer targets (tests/fuzz; built by the fuzz preset into build/fuzz/tests/fuzz).
#
#   run.sh SECONDS BIN_DIR [NAME...]        campaign (make fuzz): every target (or the named ones) for
#                                           SECONDS each, FUZZ_JOBS at a time (default 1). The corpus
#                                           grows in BIN_DIR/corpus/<name> (kept between runs; the
#                                           checked-in seeds are read too), crash inputs land in
#                                           BIN_DIR/artifacts/<name>/, logs in BIN_DIR/logs/. Prints
#                                           executions, coverage and corpus size per target.
#   run.sh --ctest SECONDS BIN_DIR NAME     one CTest (label fuzz): replays corpus/<name> (seeds and
#                                           past crash inputs: the regression part), then fuzzes from
#                                           it for SECONDS into a scratch folder that is emptied first.
# Exits non-zero when any target crashed, leaked, timed out on an input or broke an oracle
# (FUZZ_CHECK); the input that did it is saved as BIN_DIR/artifacts/<name>/crash-<sha1> (or leak-,
# timeout-, oom-). Reproduce with: BIN_DIR/fuzz_<name> that-file
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ctest=0
if [[ "${1:-}" == "--ctest" ]]; then
  ctest=1
  shift
fi
if [[ $# -lt 2 ]]; then
  sed -n '2,16p' "${BASH_SOURCE[0]}" >&2
  exit 2
fi
seconds="$1"
bin_dir="$(cd "$2" && pwd)"
shift 2

all_targets() {
  local f
  for f in "$bin_dir"/fuzz_*; do
    [[ -x "$f" && -f "$f" ]] && basename "$f" | sed 's/^fuzz_//'
  done
}
if [[ $# -gt 0 ]]; then
  targets=("$@")
else
  mapfile -t targets < <(all_targets)
fi
if [[ ${#targets[@]} -eq 0 ]]; then
  echo "run.sh: no fuzz targets in $bin_dir (cmake --build --preset fuzz first)" >&2
  exit 2
fi

# ASan and UBSan halt on the first report with a stack (sanitizer_options.cc, built into every
# target); libFuzzer turns it into a saved crash input.

# run_one NAME WORK_CORPUS LOG EXTRA_FLAGS...: fuzz NAME for `seconds`, reading WORK_CORPUS and
# the checked-in seeds, writing new inputs to WORK_CORPUS.
run_one() {
  local name="$1" work="$2" log="$3"
  shift 3
  local bin="$bin_dir/fuzz_$name" seeds="$here/corpus/$name" dict="$here/dict/$name.dict"
  local flags=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
               -artifact_prefix="$bin_dir/artifacts/$name/" "$@")
  [[ -f "$dict" ]] && flags+=(-dict="$dict")
  mkdir -p "$work" "$bin_dir/artifacts/$name"
  local dirs=("$work")
  [[ -d "$seeds" ]] && dirs+=("$seeds")
  "$bin" "${flags[@]}" "${dirs[@]}" >"$log" 2>&1
}

# One summary line from a libFuzzer log: executions, exec/s, edges (cov), features (ft), corpus.
summary() {
  local name="$1" log="$2" rc="$3"
  local execs rate last cov ft corp
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  rate="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)"
  last="$(grep -E '^#[0-9]+.* cov: ' "$log" | tail -1 || true)"
  cov="$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")"
  ft="$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")"
  corp="$(sed -n 's/.* corp: \([0-9]*\/[0-9a-zA-Z]*\).*/\1/p' <<<"$last")"
  local result="ok"
  if [[ "$rc" -ne 0 ]]; then
    result="FAILED (exit $rc): $(grep -m1 -E 'ERROR: |FUZZ_CHECK failed|runtime error' "$log" || echo 'see log')"
  fi
  printf '%-14s %12s %8s %7s %8s %14s  %s\n' "$name" "${execs:-?}" "${rate:-?}" "${cov:-?}" \
    "${ft:-?}" "${corp:-?}" "$result"
}

header() {
  printf '%-14s %12s %8s %7s %8s %14s  %s\n' target executions exec/s edges features \
    corpus/bytes result
}

if [[ $ctest -eq 1 ]]; then
  name="${targets[0]}"
  scratch="$bin_dir/ctest-corpus/$name"
  rm -rf "$scratch"
  mkdir -p "$bin_dir/logs"
  log="$bin_dir/logs/ctest-$name.log"
  rc=0
  run_one "$name" "$scratch" "$log" || rc=$?
  header
  summary "$name" "$log" "$rc"
  if [[ $rc -ne 0 ]]; then
    echo "---- tail of $log"
    tail -60 "$log"
  fi
  exit "$rc"
fi

jobs="${FUZZ_JOBS:-1}"
mkdir -p "$bin_dir/logs"
echo "fuzzing ${#targets[@]} target(s) for ${seconds}s each, ${jobs} at a time; logs in $bin_dir/logs"
names=()
# Each target's exit status goes to a file: polling `jobs` to keep FUZZ_JOBS running reaps finished jobs, after which
# `wait PID` no longer knows them (it said "not a child of this shell" and reported 127 for a clean target).
for name in "${targets[@]}"; do
  while [[ $(jobs -rp | wc -l) -ge $jobs ]]; do sleep 1; done
  rm -f "$bin_dir/logs/$name.rc"
  ( rc=0; run_one "$name" "$bin_dir/corpus/$name" "$bin_dir/logs/$name.log" -use_value_profile=1 || rc=$?
    echo "$rc" >"$bin_dir/logs/$name.rc" ) &
  names+=("$name")
done
wait
failed=0
rcs=()
for name in "${names[@]}"; do
  rc="$(cat "$bin_dir/logs/$name.rc" 2>/dev/null || echo 127)"
  rcs+=("$rc")
  [[ $rc -ne 0 ]] && failed=1
done
header
for i in "${!names[@]}"; do
  summary "${names[$i]}" "$bin_dir/logs/${names[$i]}.log" "${rcs[$i]}"
done
if [[ $failed -ne 0 ]]; then
  echo "make fuzz: findings saved under $bin_dir/artifacts/ (reproduce: $bin_dir/fuzz_<name> FILE)"
  exit 1
fi
echo "make fuzz: OK"
