// SPDX-License-Identifier: Apache-2.0
// kiln_host_app [MODULE.so] [N]: runs out = a + alpha * b through the CPU plugin and prints
// the inputs and outputs. The smallest complete use of the library.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "kiln/kiln.h"

namespace {

void print(const char* name, const kiln::Tensor& t) {
  auto values = t.host_span<float>();
  std::printf("  %-4s = [", name);
  for (size_t i = 0; i < values.size(); ++i) {
    if (values.size() > 8 && i == 4) {
      std::printf(" ...");
      i = values.size() - 4;
    }
    std::printf("%s%g", i == 0 ? "" : ", ", values[i]);
  }
  std::printf("]\n");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : KILN_DEFAULT_MODULE;
  const int64_t n = argc > 2 ? std::atoll(argv[2]) : 8;
  if (n <= 0) {
    std::fprintf(stderr, "usage: kiln_host_app [MODULE.so] [N > 0]\n");
    return 2;
  }
  try {
    kiln::Module module = kiln::load_module(path);
    kiln::Tensor a = kiln::Tensor::empty({n}, kiln::DataType::Float(32));
    kiln::Tensor b = kiln::Tensor::empty({n}, kiln::DataType::Float(32));
    kiln::Tensor out = kiln::Tensor::empty({n}, kiln::DataType::Float(32));
    for (int64_t i = 0; i < n; ++i) {
      a.host_span<float>()[i] = static_cast<float>(i);
      b.host_span<float>()[i] = 10.0f;
    }
    const double alpha = 0.5;
    module.entry()(a, b, out, alpha);
    std::printf("%s: %s(a, b, out, alpha=%g) on %s\n", path.c_str(), module.entry_name().c_str(),
                alpha, out.device().str().c_str());
    print("a", a);
    print("b", b);
    print("out", out);
    for (int64_t i = 0; i < n; ++i) {
      if (out.host_span<float>()[i] != static_cast<float>(i) + 5.0f) {
        std::fprintf(stderr, "wrong result at %lld\n", static_cast<long long>(i));
        return 1;
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln_host_app: %s\n", e.what());
    return 3;
  }
}
