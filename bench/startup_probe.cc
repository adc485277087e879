// Prints the milliseconds a fresh process spends discovering and loading the default plugin
// set (Runtime construction), and how many plugins loaded. Run by startup_bench.cc.
#include <chrono>
#include <cstdio>

#include "kiln/runtime.h"

int main() {
  const auto start = std::chrono::steady_clock::now();
  kiln::Runtime& rt = kiln::Runtime::global();
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  int loaded = 0;
  for (const auto& s : rt.plugins()) loaded += s.state == kiln::PluginStatus::State::kLoaded;
  std::printf("%.4f %d\n", ms, loaded);
  return loaded > 0 ? 0 : 1;
}
