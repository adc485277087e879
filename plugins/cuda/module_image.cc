// SPDX-License-Identifier: Apache-2.0
#include "module_image.h"

#include <elf.h>

#include <cstring>
#include <limits>

#include "kiln/sdk/any_cast.hpp"
#include "kiln/sdk/error.hpp"

namespace kiln::cuda {
namespace {

constexpr uint32_t kFatbinMagic = 0xBA55ED50u;
constexpr uint16_t kEmCuda = 190;  // EM_CUDA, absent from older <elf.h>

template <typename T>
T read_at(const uint8_t* data, size_t offset) {
  T value;
  std::memcpy(&value, data + offset, sizeof(T));
  return value;
}

// True when [offset, offset + count * entry) lies inside `size` bytes, without overflow.
bool fits(uint64_t offset, uint64_t count, uint64_t entry, uint64_t size) {
  if (count != 0 && entry > std::numeric_limits<uint64_t>::max() / count) return false;
  const uint64_t bytes = count * entry;
  return offset <= size && bytes <= size - offset;
}

bool starts_with_elf(const uint8_t* data, size_t size) {
  return size >= 4 && data[0] == ELFMAG0 && data[1] == ELFMAG1 && data[2] == ELFMAG2 &&
         data[3] == ELFMAG3;
}

bool starts_with_fatbin(const uint8_t* data, size_t size) {
  return size >= 4 && read_at<uint32_t>(data, 0) == kFatbinMagic;
}

void check_cubin(const uint8_t* data, size_t size) {
  if (!starts_with_elf(data, size)) {
    sdk::throw_value_error(
        starts_with_fatbin(data, size)
            ? "this is not a cubin but a fat binary: pass it as format 'fatbin'"
            : "this is not a cubin: it does not start with the ELF magic (\\x7fELF)");
  }
  if (size < sizeof(Elf64_Ehdr)) {
    sdk::throw_value_error("truncated cubin: " + std::to_string(size) +
                           " bytes, less than an ELF header (" +
                           std::to_string(sizeof(Elf64_Ehdr)) + ")");
  }
  if (data[EI_CLASS] != ELFCLASS64) sdk::throw_value_error("the cubin is not a 64-bit ELF file");
  if (data[EI_DATA] != ELFDATA2LSB)
    sdk::throw_value_error("the cubin is not a little-endian ELF file");
  const auto header = read_at<Elf64_Ehdr>(data, 0);
  if (header.e_machine != kEmCuda) {
    sdk::throw_value_error("the ELF file is for machine " + std::to_string(header.e_machine) +
                           ", not a CUDA cubin (EM_CUDA = 190)");
  }
  if (header.e_phnum > 0) {
    if (header.e_phentsize != sizeof(Elf64_Phdr) ||
        !fits(header.e_phoff, header.e_phnum, header.e_phentsize, size)) {
      sdk::throw_value_error(
          "truncated or malformed cubin: its program header table lies outside the " +
          std::to_string(size) + " bytes given");
    }
    for (uint16_t i = 0; i < header.e_phnum; ++i) {
      const auto ph = read_at<Elf64_Phdr>(data, header.e_phoff + uint64_t{i} * sizeof(Elf64_Phdr));
      if (!fits(ph.p_offset, 1, ph.p_filesz, size)) {
        sdk::throw_value_error("truncated cubin: segment " + std::to_string(i) +
                               " lies outside the " + std::to_string(size) + " bytes given");
      }
    }
  }
  if (header.e_shnum > 0) {
    if (header.e_shentsize != sizeof(Elf64_Shdr) ||
        !fits(header.e_shoff, header.e_shnum, header.e_shentsize, size)) {
      sdk::throw_value_error(
          "truncated or malformed cubin: its section header table lies outside the " +
          std::to_string(size) + " bytes given");
    }
    for (uint16_t i = 0; i < header.e_shnum; ++i) {
      const auto sh = read_at<Elf64_Shdr>(data, header.e_shoff + uint64_t{i} * sizeof(Elf64_Shdr));
      if (sh.sh_type != SHT_NOBITS && !fits(sh.sh_offset, 1, sh.sh_size, size)) {
        sdk::throw_value_error("truncated cubin: section " + std::to_string(i) +
                               " lies outside the " + std::to_string(size) + " bytes given");
      }
    }
    if (header.e_shstrndx >= header.e_shnum && header.e_shstrndx != SHN_UNDEF) {
      sdk::throw_value_error("malformed cubin: its section name table index is out of range");
    }
  } else if (header.e_phnum == 0) {
    sdk::throw_value_error("malformed cubin: it has neither sections nor segments");
  }
}

void check_fatbin(const uint8_t* data, size_t size) {
  if (!starts_with_fatbin(data, size)) {
    sdk::throw_value_error(
        starts_with_elf(data, size)
            ? "this is not a fat binary but an ELF file: pass a cubin as format 'cubin'"
            : "this is not a fat binary: it does not start with the magic 0xBA55ED50");
  }
  constexpr size_t kHeader = 16;  // magic u32, version u16, header size u16, payload size u64
  if (size < kHeader)
    sdk::throw_value_error("truncated fat binary: " + std::to_string(size) + " bytes");
  const auto header_size = read_at<uint16_t>(data, 6);
  const auto fat_size = read_at<uint64_t>(data, 8);
  if (header_size < kHeader || !fits(header_size, 1, fat_size, size)) {
    sdk::throw_value_error("truncated or malformed fat binary: the header announces " +
                           std::to_string(header_size) + " + " + std::to_string(fat_size) +
                           " bytes but " + std::to_string(size) + " were given");
  }
  // Entries: kind u16, version u16, header size u32, payload size u64, ...; they must tile
  // the payload exactly.
  const uint64_t end = header_size + fat_size;
  uint64_t offset = header_size;
  int entries = 0;
  while (offset < end) {
    if (!fits(offset, 1, kHeader, end))
      sdk::throw_value_error("malformed fat binary: truncated entry header");
    const auto entry_header = read_at<uint32_t>(data, offset + 4);
    const auto entry_size = read_at<uint64_t>(data, offset + 8);
    if (entry_header < kHeader || !fits(offset, 1, entry_header, end) ||
        !fits(offset + entry_header, 1, entry_size, end)) {
      sdk::throw_value_error("malformed fat binary: entry " + std::to_string(entries) +
                             " lies outside the announced payload");
    }
    offset += entry_header + entry_size;
    ++entries;
  }
  if (entries == 0) sdk::throw_value_error("the fat binary holds no code");
}

// PTX and CUDA source: text without NUL bytes, then one terminating NUL.
std::vector<uint8_t> text_image(const uint8_t* data, size_t size, ImageFormat format) {
  size_t length = size;
  while (length > 0 && data[length - 1] == 0) --length;  // a NUL-terminated buffer is fine
  const char* what = format == ImageFormat::kPtx ? "PTX" : "CUDA source";
  if (length == 0) sdk::throw_value_error(std::string(what) + " is empty");
  if (format == ImageFormat::kPtx) {
    if (starts_with_elf(data, length))
      sdk::throw_value_error("PTX text starts with the ELF magic: pass a cubin as 'cubin'");
    if (starts_with_fatbin(data, length)) {
      sdk::throw_value_error("PTX text starts with the fat binary magic: pass it as 'fatbin'");
    }
  }
  const void* nul = std::memchr(data, 0, length);
  if (nul != nullptr) {
    sdk::throw_value_error(std::string(what) + " contains a NUL byte at offset " +
                           std::to_string(static_cast<const uint8_t*>(nul) - data) +
                           " (binary data given as text?)");
  }
  std::vector<uint8_t> out(data, data + length);
  out.push_back(0);
  return out;
}

bool is_ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '$' || c == '%';
}

}  // namespace

ImageFormat parse_image_format(std::string_view format) {
  if (format == "ptx") return ImageFormat::kPtx;
  if (format == "cubin") return ImageFormat::kCubin;
  if (format == "fatbin") return ImageFormat::kFatbin;
  if (format == "cuda_source") return ImageFormat::kCudaSource;
  sdk::throw_value_error("the cuda backend cannot load format '" + std::string(format) +
                         "' (it loads ptx, cubin, fatbin and cuda_source)");
}

const char* to_string(ImageFormat format) {
  switch (format) {
    case ImageFormat::kPtx:
      return "ptx";
    case ImageFormat::kCubin:
      return "cubin";
    case ImageFormat::kFatbin:
      return "fatbin";
    case ImageFormat::kCudaSource:
      return "cuda_source";
  }
  return "?";
}

std::vector<uint8_t> prepare_image(const void* data, size_t size, ImageFormat format) {
  if (data == nullptr && size > 0) sdk::throw_value_error("device code pointer is NULL");
  const auto* bytes = static_cast<const uint8_t*>(data);
  if (size == 0)
    sdk::throw_value_error(std::string("empty ") + to_string(format) + " image (0 bytes)");
  switch (format) {
    case ImageFormat::kPtx:
    case ImageFormat::kCudaSource:
      return text_image(bytes, size, format);
    case ImageFormat::kCubin:
      check_cubin(bytes, size);
      break;
    case ImageFormat::kFatbin:
      check_fatbin(bytes, size);
      break;
  }
  return std::vector<uint8_t>(bytes, bytes + size);
}

std::set<std::string> ptx_entry_names(std::string_view ptx) {
  std::set<std::string> names;
  size_t pos = 0;
  while (pos < ptx.size()) {
    // Skip comments, which may mention directives.
    if (ptx.compare(pos, 2, "//") == 0) {
      const size_t eol = ptx.find('\n', pos);
      pos = eol == std::string_view::npos ? ptx.size() : eol + 1;
      continue;
    }
    if (ptx.compare(pos, 2, "/*") == 0) {
      const size_t close = ptx.find("*/", pos + 2);
      pos = close == std::string_view::npos ? ptx.size() : close + 2;
      continue;
    }
    if (ptx.compare(pos, 6, ".entry") == 0 && (pos == 0 || !is_ident_char(ptx[pos - 1])) &&
        pos + 6 < ptx.size() && (ptx[pos + 6] == ' ' || ptx[pos + 6] == '\t')) {
      size_t begin = pos + 6;
      while (begin < ptx.size() && (ptx[begin] == ' ' || ptx[begin] == '\t')) ++begin;
      size_t end = begin;
      while (end < ptx.size() && is_ident_char(ptx[end])) ++end;
      if (end > begin) names.emplace(ptx.substr(begin, end - begin));
      pos = end;
      continue;
    }
    ++pos;
  }
  return names;
}

void check_kernels_present(const sdk::ModuleMetadata& metadata,
                           const std::function<bool(const std::string&)>& present,
                           const std::string& what, const std::set<std::string>* available) {
  std::string missing;
  for (const auto& [name, info] : metadata.kernels) {
    if (!present(name)) missing += (missing.empty() ? "" : ", ") + name;
  }
  if (missing.empty()) return;
  std::string message = what + " lacks kernels the metadata describes: " + missing;
  if (available != nullptr) {
    std::string have;
    for (const std::string& name : *available) have += (have.empty() ? "" : ", ") + name;
    message += " (the module has: " + (have.empty() ? std::string("no kernels") : have) + ")";
  }
  message += "; kernels must be extern \"C\" or named by their mangled or C++ expression name";
  throw sdk::Error(KILN_ERROR_NOT_FOUND, message);
}

uint64_t tensor_device_address(const DLTensor& tensor, int32_t device_id, const std::string& kernel,
                               size_t index) {
  const int32_t type = sdk::device_type_code(tensor.device);
  if (type != kDLCUDA || tensor.device.device_id != device_id) {
    throw sdk::Error(KILN_ERROR_VALUE,
                     "kernel '" + kernel + "' argument " + std::to_string(index) +
                         ": the tensor is on device type " + std::to_string(type) + " id " +
                         std::to_string(tensor.device.device_id) +
                         ", but the module is loaded on cuda:" + std::to_string(device_id));
  }
  const auto base = reinterpret_cast<uint64_t>(tensor.data);
  if (tensor.byte_offset > std::numeric_limits<uint64_t>::max() - base) {
    throw sdk::Error(KILN_ERROR_VALUE, "kernel '" + kernel + "' argument " + std::to_string(index) +
                                           ": data + byte_offset overflows");
  }
  return base + tensor.byte_offset;
}

}  // namespace kiln::cuda
