// cuBLAS reference throughput for tests/gpu/run_gpu_checks.sh (built there with the toolkit's nvcc):
//   cublas_matmul <n> <iters>   ->  `RESULT cublas float32 ...` and `RESULT cublas float16 ...` lines
// float32: cublasSgemm. float16: cublasGemmEx with half inputs and float32 accumulation/output (what kiln computes).
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                        \
  do {                                                                  \
    if ((x) != 0) {                                                     \
      std::fprintf(stderr, "FAILED %s at line %d\n", #x, __LINE__);     \
      return 1;                                                         \
    }                                                                   \
  } while (0)

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 4096;
  const int iters = argc > 2 ? std::atoi(argv[2]) : 10;
  const size_t nn = static_cast<size_t>(n) * n;
  std::vector<float> host(nn);
  for (size_t i = 0; i < nn; ++i) host[i] = static_cast<float>((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
  std::vector<__half> hh(nn);
  for (size_t i = 0; i < nn; ++i) hh[i] = __float2half(host[i]);
  float *a, *b, *c;
  __half *ah, *bh;
  CHECK(cudaMalloc(&a, nn * 4));
  CHECK(cudaMalloc(&b, nn * 4));
  CHECK(cudaMalloc(&c, nn * 4));
  CHECK(cudaMalloc(&ah, nn * 2));
  CHECK(cudaMalloc(&bh, nn * 2));
  CHECK(cudaMemcpy(a, host.data(), nn * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(b, host.data(), nn * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(ah, hh.data(), nn * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(bh, hh.data(), nn * 2, cudaMemcpyHostToDevice));
  cublasHandle_t h;
  CHECK(cublasCreate(&h));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  const float one = 1.0f, zero = 0.0f;
  for (int mode = 0; mode < 2; ++mode) {
    float best = 1e30f;
    for (int it = 0; it < iters + 1; ++it) {  // the first call warms up
      CHECK(cudaEventRecord(e0));
      if (mode == 0) {
        CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, b, n, &zero, c, n));
      } else {
        CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, ah, CUDA_R_16F, n, bh, CUDA_R_16F, n, &zero, c,
                           CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      }
      CHECK(cudaEventRecord(e1));
      CHECK(cudaEventSynchronize(e1));
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, e0, e1));
      if (it > 0 && ms < best) best = ms;
    }
    std::printf("RESULT cublas %s n=%d best_ms=%.3f tflops=%.2f\n", mode == 0 ? "float32" : "float16", n, best,
                2.0 * n * n * n / (best * 1e-3) * 1e-12);
  }
  cublasDestroy(h);
  return 0;
}
