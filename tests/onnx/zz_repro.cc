#include <cstdio>
#include <cstdlib>
#include <vector>
#include "backends/register_all.h"
#include "engine/tensor/tensor.h"
using namespace kiln;
static void Show(const char* what, const Tensor& t) {
  auto v = t.Contiguous().ToVector<int64_t>();
  if (!v.ok()) { printf("%s: error %s\n", what, std::string(v.status().message()).c_str()); return; }
  printf("%s:", what); for (auto x : *v) printf(" %ld", (long)x); printf("\n");
}
static Tensor Part(const Tensor& b, int64_t i) { return b.Shrink({{i, i + 1}}); }
int main() {
  backends::RegisterAllBackends();
  for (int rep = 0; rep < (getenv("REPS") ? atoi(getenv("REPS")) : 2); ++rep) {
    std::vector<int64_t> d4 = {2, 3, 5, 6};
    Tensor b4 = Tensor::FromVector(d4, {4});
    Tensor c = Tensor::Cat({Part(b4, 0), Part(b4, 1), Tensor::Full({1}, int64_t{1}, dtypes::kInt64), Part(b4, 2), Part(b4, 3)}, 0);
    Show("2d-like cat[2:5]", c.Shrink({{2, 5}}));
  }
  std::vector<int64_t> d5 = {2, 3, 4, 5, 6};
  Tensor b5 = Tensor::FromVector(d5, {5});
  Tensor c = Tensor::Cat({Part(b5, 0), Part(b5, 1), Part(b5, 2), Part(b5, 3), Part(b5, 4)}, 0);
  Show("3d-like cat[2:5]", c.Shrink({{2, 5}}));
  Show("3d-like D", Part(b5, 2));
  return 0;
}
