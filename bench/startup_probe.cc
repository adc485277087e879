// SPDX-License-Identifier: Apache-2.0
// A fresh process for kiln_bench_startup, which runs it once per iteration so that loading is
// cold. It times one thing in-process and prints "<milliseconds> <libraries loaded>":
//   kiln_bench_startup_probe              the default Runtime's construction: the plugin set,
//                                         manifest discovery and parsing, dlopen, negotiation
//   kiln_bench_startup_probe --list       the same, then prints each loaded plugin's library,
//                                         one per line (the floor's list of libraries)
//   kiln_bench_startup_probe --dlopen P…  dlopen(RTLD_NOW) of each library P in order: the floor
//                                         (the plugins' own libraries), or TVM's runtime library
// Exits 1 when nothing loaded.
#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <cstring>

#include "kiln/runtime.h"

namespace {

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "--dlopen") == 0) {
    const auto start = std::chrono::steady_clock::now();
    int loaded = 0;
    for (int i = 2; i < argc; ++i) loaded += dlopen(argv[i], RTLD_NOW | RTLD_LOCAL) != nullptr;
    const double ms = ms_since(start);
    std::printf("%.4f %d\n", ms, loaded);
    return loaded == argc - 2 && loaded > 0 ? 0 : 1;
  }
  const auto start = std::chrono::steady_clock::now();
  kiln::Runtime& rt = kiln::Runtime::global();
  const double ms = ms_since(start);
  int loaded = 0;
  for (const auto& s : rt.plugins()) loaded += s.state == kiln::PluginStatus::State::kLoaded;
  std::printf("%.4f %d\n", ms, loaded);
  if (argc >= 2 && std::strcmp(argv[1], "--list") == 0) {
    for (const auto& s : rt.plugins()) {
      if (s.state == kiln::PluginStatus::State::kLoaded) std::printf("%s\n", s.library.c_str());
    }
  }
  return loaded > 0 ? 0 : 1;
}
