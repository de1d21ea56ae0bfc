#!/usr/bin/env bash
# Runs kiln's benchmarks (make bench). Expects the release preset built and .venv created
# (deploy/install-deps.sh); `make bench` does both first.
#
#   1. every Google Benchmark binary build/release/tests/bench/bench_* (kiln_add_bench in
#      tests/CMakeLists.txt puts them there), with BENCH_ARGS appended (e.g.
#      BENCH_ARGS='--benchmark_filter=Rewrite --benchmark_min_time=0.1s');
#   2. every tests/bench/*_compare.py with .venv/bin/python from the repo root (kiln vs tinygrad /
#      numpy comparisons; load_compare.py: kilnd with and without dynamic batching vs Triton
#      Inference Server itself on the Fashion-MNIST CNN, perf_analyzer + grpc_infer_bench, about
#      6 minutes; it installs Triton into .venv-bench on first use, from
#      tests/bench/requirements-bench.txt, and still runs the kiln rows where Triton cannot run;
#      LOAD_COMPARE_ARGS adds flags, e.g. '--seconds 2 --servers kiln-batched,kiln'),
#      tests/bench/serve_bench.py (closed-loop gRPC load on kilnd),
#      tests/bench/rest_slow_clients.py (healthy REST latency beside slow clients), and
#      train_compare.py (Fashion-MNIST training step, kiln JIT / JIT=0 vs tinygrad; 4 steps
#      each by default, a few minutes on 2 cores) taking its flags from TRAIN_COMPARE_ARGS, e.g.
#      TRAIN_COMPARE_ARGS='--steps 10 --batch 512 --cold'.
# tests/bench/soak.py (30-minute soak + overload of kilnd) is not run here: run it by hand
# (--minutes to shorten); tests/e2e/test_kilnd_soak.py runs a one-minute version in make test.
# Prints a banner per run and a summary; exits non-zero if any run failed.
set -uo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo_root"
build_dir="${KILN_BUILD_DIR:-build/release}"
python="$repo_root/.venv/bin/python"
read -r -a bench_args <<<"${BENCH_ARGS:-}"

passed=()
failed=()

run_one() {
  local label="$1"
  shift
  printf '\n==== bench: %s ====\n' "$label"
  local start end rc
  start=$(date +%s)
  "$@"
  rc=$?
  end=$(date +%s)
  if [[ $rc -eq 0 ]]; then
    printf '==== ok: %s (%ss) ====\n' "$label" "$((end - start))"
    passed+=("$label")
  else
    printf '==== FAILED: %s (exit %d) ====\n' "$label" "$rc"
    failed+=("$label")
  fi
}

shopt -s nullglob
binaries=()
for f in "$build_dir"/tests/bench/bench_*; do
  [[ -f "$f" && -x "$f" ]] && binaries+=("$f")
done
scripts=(tests/bench/*_compare.py tests/bench/serve_bench.py tests/bench/rest_slow_clients.py)

if [[ ${#binaries[@]} -eq 0 && ${#scripts[@]} -eq 0 ]]; then
  echo "bench: no benchmarks yet (no $build_dir/tests/bench/bench_* and no tests/bench/*_compare.py)"
  exit 0
fi

for b in "${binaries[@]}"; do
  run_one "$(basename "$b")" "$b" "${bench_args[@]}"
done

if [[ ${#scripts[@]} -gt 0 ]]; then
  if [[ ! -x "$python" ]]; then
    echo "bench: $python missing; run deploy/install-deps.sh (make bench does)" >&2
    for s in "${scripts[@]}"; do failed+=("$(basename "$s")"); done
  else
    for s in "${scripts[@]}"; do
      script_args=()
      if [[ "$(basename "$s")" == train_compare.py ]]; then
        read -r -a script_args <<<"${TRAIN_COMPARE_ARGS:-}"
      elif [[ "$(basename "$s")" == load_compare.py ]]; then
        read -r -a script_args <<<"${LOAD_COMPARE_ARGS:-}"
      fi
      run_one "$(basename "$s")" env KILN_BUILD_DIR="$build_dir" "$python" "$s" "${script_args[@]}"
    done
  fi
fi

printf '\nbench summary: %d passed, %d failed\n' "${#passed[@]}" "${#failed[@]}"
if [[ ${#failed[@]} -gt 0 ]]; then
  printf '  failed: %s\n' "${failed[*]}"
  exit 1
fi
exit 0
