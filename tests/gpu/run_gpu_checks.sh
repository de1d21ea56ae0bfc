#!/usr/bin/env bash
# The GPU check (issue #7): on a machine with an NVIDIA GPU, build kiln with the CUDA backend and run
#   1. the CUDA backend tests (cuda_backend_test; none may skip),
#   2. the op conformance suite on CUDA (every case must pass, same tolerances as CPU),
#   3. the TinyJit tests on CUDA (KILN_TEST_DEVICE=CUDA): JIT unset (CUDA graphs by default), JIT=2 (graphs) and
#      JIT=1 (plain replay),
#   4. kiln matmul throughput at 4096^3, float32, float16 with tensor cores (the default; the TC opt must have been
#      applied) and float16 with TC=0 (float32 accumulation), results checked on the host,
#   4b. tensor-core correctness: a 1024^3 float16 TC matmul, every entry against a float64 host reference (fp16
#      tolerances), and tc_test (INTERP's emulated TC + NVRTC cubins for this GPU's arch),
#   5. cuBLAS at the same sizes (tests/gpu/cublas_matmul.cu, built here with the toolkit's nvcc),
#   6. Fashion-MNIST training steps on CUDA (loss must be finite and fall),
# then print one summary table. Exits 1 if any step fails or mismatches (loudly, with the log's tail); never skips a
# failure. Budget: under 8 minutes on an H200 (each step has its own timeout; the build is the largest part).
#
#   tests/gpu/run_gpu_checks.sh [--dry-run] [--build-dir DIR] [--jobs N]
#
# --dry-run checks what can be checked without a GPU: the tools are present, the targets build, the cuBLAS benchmark
# compiles, and the CUDA-facing tests skip cleanly; it prints the plan and runs nothing that needs a GPU.
# Environment: CUDA_HOME (default /usr/local/cuda), MNIST_STEPS (default 20), MATMUL_N (default 4096).
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="$repo/build/gpu"
jobs="$(nproc 2>/dev/null || echo 4)"
dry_run=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dry-run) dry_run=1 ;;
    --build-dir) build="$2"; shift ;;
    --jobs) jobs="$2"; shift ;;
    *) echo "usage: $0 [--dry-run] [--build-dir DIR] [--jobs N]" >&2; exit 2 ;;
  esac
  shift
done
cuda_home="${CUDA_HOME:-/usr/local/cuda}"
mnist_steps="${MNIST_STEPS:-20}"
matmul_n="${MATMUL_N:-4096}"
logs="$build/gpu-check-logs"
mkdir -p "$logs"
export PATH="$cuda_home/bin:$PATH"
export KILN_NVRTC_PATH="${KILN_NVRTC_PATH:-$cuda_home/lib64/libnvrtc.so}"
export KILN_CACHE_DIR="$build/kiln-cache"   # a private compile cache: the check compiles what it measures

declare -a names=() states=() details=()
failed=0
start_all=$SECONDS

record() {  # name state detail
  names+=("$1"); states+=("$2"); details+=("$3")
  if [[ "$2" == FAIL ]]; then
    failed=1
    echo "!!!!! FAIL: $1 -- $3" >&2
  fi
}

# run NAME TIMEOUT_S CMD...: runs with a timeout, logs to $logs/NAME.log; returns the command's status.
run() {
  local name="$1" limit="$2"; shift 2
  local log="$logs/$name.log" t0=$SECONDS rc
  echo "=== $name: $*" | tee "$log"
  timeout --kill-after=10 "$limit" "$@" >>"$log" 2>&1
  rc=$?
  echo "=== $name: exit $rc after $((SECONDS - t0)) s" | tee -a "$log"
  if [[ $rc -ne 0 ]]; then
    echo "----- last lines of $log -----" >&2
    tail -n 40 "$log" >&2
  fi
  return $rc
}

# ---- preflight ----
for tool in cmake ninja g++ nvcc; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    record "tools" FAIL "$tool not found (PATH=$PATH)"
  fi
done
gpu_name=""
if command -v nvidia-smi >/dev/null 2>&1; then
  gpu_name="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1)"
fi
if [[ $dry_run -eq 0 && -z "$gpu_name" ]]; then
  record "gpu" FAIL "no NVIDIA GPU visible (nvidia-smi); use --dry-run on machines without one"
fi
[[ $failed -eq 0 ]] && record "preflight" PASS "${gpu_name:-no GPU (dry run)}, nvcc $(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"

# ---- build ----
targets=(conformance_test tiny_jit_test cuda_backend_test train_fashion_mnist gpu_matmul_bench tc_test)
if [[ $failed -eq 0 ]]; then
  # The release preset's settings (asserts kept: no NDEBUG), without -g to build faster, without the server. An
  # existing build directory (--build-dir build/release) is reused as configured.
  if { [[ -f "$build/CMakeCache.txt" ]] && echo "reusing $build"; } || run configure 300 cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++ \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 \
        -DKILN_ENABLE_TESTS=ON -DKILN_ENABLE_BENCH=OFF -DKILN_ENABLE_SERVER=OFF -DKILN_ENABLE_CUDA=ON \
     && run build 420 cmake --build "$build" -j "$jobs" --target "${targets[@]}"; then
    record "build" PASS "${targets[*]}"
  else
    record "build" FAIL "see $logs/configure.log and $logs/build.log"
  fi
fi
if run cublas_build 180 nvcc -O2 -std=c++17 -o "$build/cublas_matmul" "$repo/tests/gpu/cublas_matmul.cu" -lcublas; then
  record "cublas build" PASS "nvcc -lcublas"
else
  record "cublas build" FAIL "see $logs/cublas_build.log"
fi

bin() { find "$build" -type f -name "$1" -perm -u+x | head -n1; }

if [[ $dry_run -eq 1 ]]; then
  # Without a GPU the CUDA tests must skip (not fail) and NVRTC must compile every rendered kernel.
  if [[ $failed -eq 0 ]] && run cuda_tests_dry 120 "$(bin cuda_backend_test)"; then
    record "cuda_backend_test (dry)" PASS "$(grep -c '^\[  SKIPPED \] [A-Za-z].*ms)$' "$logs/cuda_tests_dry.log") skipped without a GPU"
  else
    record "cuda_backend_test (dry)" FAIL "see $logs/cuda_tests_dry.log"
  fi
  # Tensor cores need no GPU to be checked for correctness: INTERP emulates the warp, NVRTC compiles (sm_80 cubins).
  if [[ $failed -eq 0 ]] && run tc_test_dry 300 "$(bin tc_test)"; then
    record "tc_test (dry)" PASS "$(grep -o '[0-9]* tests\? from [0-9]* test suites\? ran' "$logs/tc_test_dry.log" | tail -n1)"
  else
    record "tc_test (dry)" FAIL "see $logs/tc_test_dry.log"
  fi
  echo "dry run: the GPU steps would be: cuda_backend_test; conformance on CUDA; tiny_jit_test on CUDA (JIT unset, 2, 1);" \
       "gpu_matmul_bench float32/float16 (TC)/float16 (TC=0) n=$matmul_n; TC check n=1024 and tc_test;" \
       "cublas_matmul $matmul_n; train_fashion_mnist --device CUDA --steps $mnist_steps"
else
  # ---- 1. backend tests: nothing may skip on a GPU machine ----
  if run cuda_tests 120 "$(bin cuda_backend_test)"; then
    if grep -q '^\[  SKIPPED \] [A-Z]' "$logs/cuda_tests.log"; then
      record "cuda_backend_test" FAIL "tests skipped on a GPU machine"
    else
      record "cuda_backend_test" PASS "$(grep -o '[0-9]* tests\? from [0-9]* test suites\? ran' "$logs/cuda_tests.log" | tail -n1)"
    fi
  else
    record "cuda_backend_test" FAIL "see $logs/cuda_tests.log"
  fi

  # ---- 2. conformance on CUDA ----
  python="$repo/.venv/bin/python"
  [[ -x "$python" ]] || python=python3
  if run conformance 300 "$python" "$repo/tests/conformance/run_conformance.py" --binary "$(bin conformance_test)" \
       -- --gtest_filter=Backends/Conformance.AllCases/CUDA; then
    line="$(grep -o 'conformance on CUDA: .*' "$logs/conformance.log" | tail -n1)"
    if [[ -z "$line" ]]; then
      record "conformance CUDA" FAIL "the CUDA case did not run (skipped?)"
    else
      record "conformance CUDA" PASS "${line#conformance on CUDA: }"
    fi
  else
    record "conformance CUDA" FAIL "$(grep -c '^FAIL\|Failure' "$logs/conformance.log") failures; see $logs/conformance.log"
  fi

  # ---- 3. TinyJit on CUDA: JIT unset (CUDA graphs are the default there), JIT=2, JIT=1 (plain replay) ----
  for mode in default 2 1; do
    jit_env=(KILN_TEST_DEVICE=CUDA)
    [[ $mode != default ]] && jit_env+=("JIT=$mode")
    if run "jit_$mode" 120 env "${jit_env[@]}" "$(bin tiny_jit_test)"; then
      # Only GraphModeFollowsTheJitKnob may skip (it does when JIT is set); anything else skipping is a failure.
      if grep '^\[  SKIPPED \] [A-Z]' "$logs/jit_$mode.log" | grep -qv GraphModeFollowsTheJitKnob; then
        record "tiny_jit_test CUDA JIT=$mode" FAIL "skipped: the CUDA device was not found"
      else
        record "tiny_jit_test CUDA JIT=$mode" PASS "$(grep -o '[0-9]* tests\? from [0-9]* test suites\? ran' "$logs/jit_$mode.log" | tail -n1)"
      fi
    else
      record "tiny_jit_test CUDA JIT=$mode" FAIL "see $logs/jit_$mode.log"
    fi
  done

  # ---- 4./5. matmul throughput: kiln vs cuBLAS ----
  # float16 runs with DEBUG=3 so the log shows the applied opts: with TC on, the matmul kernel's must start with TC.
  declare -A kiln_tf=() cublas_tf=()
  for dt in float32 float16 float16_notc; do
    bench_env=(DEBUG=0)
    [[ $dt == float16 ]] && bench_env=(DEBUG=3)
    [[ $dt == float16_notc ]] && bench_env=(DEBUG=3 TC=0)
    if run "matmul_$dt" 150 env "${bench_env[@]}" "$(bin gpu_matmul_bench)" --device CUDA --n "$matmul_n" \
         --dtype "${dt%_notc}" --iters 5; then
      kiln_tf[$dt]="$(sed -n 's/^RESULT matmul .* tflops=\([0-9.]*\).*/\1/p' "$logs/matmul_$dt.log")"
      if [[ $dt == float16 ]] && ! grep -q 'opts: \[TC(' "$logs/matmul_$dt.log"; then
        record "kiln matmul $dt" FAIL "the TC opt was not applied (see $logs/matmul_$dt.log)"
      elif [[ $dt == float16_notc ]] && grep -q 'opts: \[TC(' "$logs/matmul_$dt.log"; then
        record "kiln matmul $dt" FAIL "TC=0 still applied the TC opt"
      else
        record "kiln matmul $dt" PASS "${kiln_tf[$dt]} TFLOP/s at ${matmul_n}^3 (values checked)"
      fi
    else
      record "kiln matmul $dt" FAIL "see $logs/matmul_$dt.log"
    fi
  done

  # ---- 4b. tensor cores: every entry of a TC matmul, and the emulated-TC + NVRTC tests for this arch ----
  if run tc_check 120 env DEBUG=3 "$(bin gpu_matmul_bench)" --device CUDA --n 1024 --dtype float16 --iters 1 \
       --check all; then
    if grep -q 'opts: \[TC(' "$logs/tc_check.log"; then
      record "TC correctness" PASS "1024^3 float16 with TC: all $(sed -n 's/.*checked=\([0-9]*\).*/\1/p' "$logs/tc_check.log") entries within fp16 tolerance"
    else
      record "TC correctness" FAIL "the TC opt was not applied (see $logs/tc_check.log)"
    fi
  else
    record "TC correctness" FAIL "mismatches; see $logs/tc_check.log"
  fi
  gpu_arch="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d '. ')"
  if run tc_test 300 env KILN_NVRTC_ARCH="${gpu_arch:-80}" "$(bin tc_test)"; then
    record "tc_test sm_${gpu_arch:-80}" PASS "$(grep -o '[0-9]* tests\? from [0-9]* test suites\? ran' "$logs/tc_test.log" | tail -n1)"
  else
    record "tc_test sm_${gpu_arch:-80}" FAIL "see $logs/tc_test.log"
  fi
  if run cublas 120 "$build/cublas_matmul" "$matmul_n" 10; then
    for dt in float32 float16; do
      cublas_tf[$dt]="$(sed -n "s/^RESULT cublas $dt .* tflops=\([0-9.]*\).*/\1/p" "$logs/cublas.log")"
      ratio="$(awk -v k="${kiln_tf[$dt]:-0}" -v c="${cublas_tf[$dt]:-0}" 'BEGIN { if (c > 0) printf "%.1f%%", 100 * k / c; else print "n/a" }')"
      extra=""
      if [[ $dt == float16 ]]; then
        notc="$(awk -v k="${kiln_tf[float16_notc]:-0}" -v c="${cublas_tf[$dt]:-0}" 'BEGIN { if (c > 0) printf "%.1f%%", 100 * k / c; else print "n/a" }')"
        extra=" with TC; $notc without"
      fi
      record "cuBLAS matmul $dt" PASS "${cublas_tf[$dt]} TFLOP/s (kiln at $ratio of cuBLAS$extra)"
    done
  else
    record "cuBLAS matmul" FAIL "see $logs/cublas.log"
  fi

  # ---- 6. Fashion-MNIST training on CUDA ----
  if run mnist 240 "$(bin train_fashion_mnist)" --device CUDA --steps "$mnist_steps" --batch 512; then
    first="$(sed -n 's/^step *0 *loss \([0-9.na-]*\).*/\1/p' "$logs/mnist.log")"
    last="$(sed -n 's/^step *[0-9]* *loss \([0-9.na-]*\).*/\1/p' "$logs/mnist.log" | tail -n1)"
    ms="$(sed -n 's/^ms\/step.*: \([0-9.]*\)/\1/p' "$logs/mnist.log")"
    acc="$(sed -n 's/^test accuracy: \(.*\)/\1/p' "$logs/mnist.log")"
    if awk -v a="$first" -v b="$last" 'BEGIN { exit !(b == b + 0 && a == a + 0 && b < a) }'; then
      record "fashion-mnist CUDA" PASS "loss $first -> $last in $mnist_steps steps, $ms ms/step, test acc $acc"
    else
      record "fashion-mnist CUDA" FAIL "loss did not fall or is not finite ($first -> $last)"
    fi
  else
    record "fashion-mnist CUDA" FAIL "see $logs/mnist.log"
  fi
fi

# ---- summary ----
echo
printf '%-26s %-5s %s\n' "check" "state" "detail"
printf '%-26s %-5s %s\n' "--------------------------" "-----" "------"
for i in "${!names[@]}"; do printf '%-26s %-5s %s\n' "${names[$i]}" "${states[$i]}" "${details[$i]}"; done
echo "total $((SECONDS - start_all)) s; logs in $logs"
if [[ $failed -ne 0 ]]; then
  echo "!!!!! GPU CHECK FAILED" >&2
  exit 1
fi
echo "GPU check passed"
