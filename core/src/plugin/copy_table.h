// SPDX-License-Identifier: Apache-2.0
// The host's copy of a plugin's function table (docs/plugin-abi.md §6.3): zeroed storage of
// the host's own sizeof, min(struct_size, sizeof) bytes copied, struct_size set to sizeof. So
// the slots a later minor appends read NULL for an older plugin (zero-extension), and a newer
// plugin's longer table is cut to what this host knows.
#ifndef KILN_PLUGIN_COPY_TABLE_H_
#define KILN_PLUGIN_COPY_TABLE_H_

#include <memory>

#include "kiln/sdk/abi.hpp"

namespace kiln::plugin {

// `table` starts with its size_t struct_size, which the caller has checked against the 1.0
// minimum; no byte at or past struct_size is read.
template <typename Table>
std::unique_ptr<Table> copy_table(const void* table) {
  return std::make_unique<Table>(sdk::zero_extended<Table>(table));
}

}  // namespace kiln::plugin

#endif  // KILN_PLUGIN_COPY_TABLE_H_
