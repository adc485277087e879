// SPDX-License-Identifier: Apache-2.0
// HIP code objects as the rocm backend reads them, with no device and no HIP library: raw
// AMDGPU ELF files (e_machine 0xe0) and clang offload bundles ("__CLANG_OFFLOAD_BUNDLE__"),
// AMDGPU target IDs ("gfx90a:sramecc+:xnack-") and the choice of the code object a device
// runs. Every function here is pure and bounds-checks everything it reads, so garbage,
// truncated or hostile input gives a kiln::sdk::Error (KILN_ERROR_VALUE), never a crash.
#ifndef KILN_PLUGINS_ROCM_CODE_OBJECT_H_
#define KILN_PLUGINS_ROCM_CODE_OBJECT_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::rocm {

// An AMDGPU target ID: a processor and the settings of the target features it names, e.g.
// "gfx90a:sramecc+:xnack-" = {"gfx90a", {{"sramecc", true}, {"xnack", false}}}. A feature
// left out means "any" in a code object and "unknown" in a device's gcnArchName.
struct TargetId {
  std::string processor;
  std::vector<std::pair<std::string, bool>> features;  // in the order written

  // "gfx90a:sramecc+:xnack-".
  std::string str() const;
  // The setting of `feature`, or nullopt when it is not named.
  std::optional<bool> feature(std::string_view name) const;
};

// Parses a target ID: a processor name of letters, digits and '-' (e.g. "gfx90a",
// "gfx10-3-generic") and any number of ":<feature>+" / ":<feature>-". nullopt when malformed.
std::optional<TargetId> parse_target_id(std::string_view text);

// True when code built for `code` may run on a device of target `device`: the processors are
// equal and every feature `code` sets has the same setting on the device, where the device
// names it (a device that does not name a feature leaves the decision to the HIP runtime).
bool target_compatible(const TargetId& code, const TargetId& device);

// The processor name of an AMDGPU ELF e_flags machine value (EF_AMDGPU_MACH, the low 8 bits),
// e.g. 0x3f -> "gfx90a"; "" when the value is not one this plugin knows.
std::string processor_of_mach(uint32_t mach);

// What the rocm backend needs from an AMDGPU code object ELF.
struct AmdgpuElf {
  int code_object_version = 0;  // 2..6 from EI_ABIVERSION (ELFOSABI_AMDGPU_HSA)
  uint32_t flags = 0;           // e_flags
  uint32_t mach = 0;            // e_flags & 0xff
  // The target ID the ELF header describes: the processor (empty when the machine value is
  // unknown) and, for code object v3 and later, the sramecc / xnack settings it fixes.
  TargetId target;
  // The kernels the symbol tables define (".kd" kernel descriptors, or STT_AMDGPU_HSA_KERNEL
  // symbols in code object v2), sorted and unique.
  std::vector<std::string> kernels;

  // "gfx90a" or "unknown machine 0x51".
  std::string target_name() const;
};

// True when `data` starts with the ELF magic.
bool is_elf(std::span<const uint8_t> data);
// True when `data` starts with "__CLANG_OFFLOAD_BUNDLE__" (an uncompressed bundle).
bool is_offload_bundle(std::span<const uint8_t> data);
// True when `data` starts with "CCOB" (a compressed offload bundle, which this plugin does not
// unpack).
bool is_compressed_offload_bundle(std::span<const uint8_t> data);

// Parses an AMDGPU code object: a 64-bit little-endian ELF with e_machine EM_AMDGPU (0xe0)
// and OS ABI AMDGPU_HSA (64). Reads the header, the section table and the symbol tables
// (SHT_SYMTAB and SHT_DYNSYM). Throws kiln::sdk::Error(KILN_ERROR_VALUE) naming `what` (e.g.
// "the code object") and the problem for anything else or anything out of bounds.
AmdgpuElf parse_amdgpu_elf(std::span<const uint8_t> data,
                           const std::string& what = "the code object");

// One entry of a clang offload bundle.
struct BundleEntry {
  std::string triple;  // as written, e.g. "hipv4-amdgcn-amd-amdhsa--gfx90a"
  uint64_t offset = 0;
  uint64_t size = 0;
  // For HIP entries for amdgcn ("hip…-amdgcn-amd-amdhsa-…"): their target ID. Host entries
  // and entries of other offload kinds have none.
  std::optional<TargetId> target;
};

// The most entries a bundle may declare; more is treated as corrupt.
inline constexpr uint64_t kMaxBundleEntries = 4096;

// Parses the header of an uncompressed clang offload bundle: the magic, a 64-bit entry count,
// then per entry a 64-bit offset, size and triple length and the triple itself (all
// little-endian). Checks every length against the data, the count against kMaxBundleEntries
// and the room the header has, and each entry's range. Throws kiln::sdk::Error
// (KILN_ERROR_VALUE) naming the entry and field that is wrong.
std::vector<BundleEntry> parse_offload_bundle(std::span<const uint8_t> data);

// The code object chosen for a device.
struct SelectedCodeObject {
  std::span<const uint8_t> image;  // points into the data given to select_code_object
  std::string origin;              // e.g. "offload bundle entry 'hipv4-amdgcn-amd-amdhsa--gfx90a'"
  AmdgpuElf elf;
};

// Picks the code object in `data` that a device of target `device_target` (its gcnArchName,
// e.g. "gfx90a:sramecc+:xnack-") runs: a raw AMDGPU ELF is checked against the target (when
// its machine value is known), a bundle's compatible HIP entry with the most matching
// feature settings is taken (the first one on a tie). Throws kiln::sdk::Error
// (KILN_ERROR_VALUE): for data that is neither, a compressed bundle, a bundle with no entry for
// the target (listing the bundle's targets), an ELF for another processor, or an entry that is
// not a valid AMDGPU ELF.
SelectedCodeObject select_code_object(std::span<const uint8_t> data,
                                      std::string_view device_target);

// Throws kiln::sdk::Error(KILN_ERROR_VALUE) when a name of `kernels` (the kernels the metadata
// describes) is not a kernel of `elf`, naming the kernel, `origin` and the kernels the code
// object has.
void check_kernels_present(const AmdgpuElf& elf, const std::vector<std::string>& kernels,
                           const std::string& origin);

// The first bytes of `data` as hex ("74 68 69 73 ..."), for error messages.
std::string leading_bytes(std::span<const uint8_t> data, size_t count = 8);

}  // namespace kiln::rocm

#endif  // KILN_PLUGINS_ROCM_CODE_OBJECT_H_
