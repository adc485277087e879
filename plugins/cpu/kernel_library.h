// SPDX-License-Identifier: Apache-2.0
// The cpu plugin's kernel libraries: the SDK's loader (kiln/sdk/support/kernel_library.hpp)
// with the environments of the plugin's pool.
#ifndef KILN_PLUGINS_CPU_KERNEL_LIBRARY_H_
#define KILN_PLUGINS_CPU_KERNEL_LIBRARY_H_

#include "kiln/sdk/support/kernel_library.hpp"

namespace kiln::cpu {

class PluginState;

// One loaded kernel library, shared by the "so" loader and the cpu backend's module_load.
using KernelLibrary = sdk::KernelLibrary;

// How the cpu plugin loads kernel libraries: with the environments of `state` (one per dlopen
// handle, PluginState::kernel_envs: errors and logs to the host, parallel_for on the plugin's
// pool), initialised one at a time under the state's init mutex, and "the cpu plugin" named
// in ABI messages. `state` is borrowed and must outlive every library loaded with the result.
sdk::KernelLibraryOptions kernel_library_options(PluginState& state);

}  // namespace kiln::cpu

#endif  // KILN_PLUGINS_CPU_KERNEL_LIBRARY_H_
