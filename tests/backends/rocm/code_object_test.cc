// SPDX-License-Identifier: Apache-2.0
// Code-object parsing of the rocm plugin, on the example code objects built with clang++-15
// (raw AMDGPU ELFs and offload bundles for gfx90a and gfx1030) and on hand-made bad input. No
// device and no HIP library are needed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "code_object.h"
#include "kiln/c/abi.h"
#include "kiln/sdk/error.hpp"
#include "kiln/sdk/support/kernel_metadata.hpp"
#include "rocm_test_util.h"

namespace kiln::rocm {
namespace {

using rocm_test::example_dir;
using rocm_test::read_bytes;
using ::testing::AllOf;
using ::testing::AnyOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::vector<std::string> kKernels = {"vector_add", "relu", "matmul"};
const std::vector<std::string> kArchs = {"gfx90a", "gfx1030"};

// Runs `body`, expecting a kiln::sdk::Error with KILN_ERROR_VALUE; returns its message.
template <typename Body>
std::string value_error(Body&& body) {
  try {
    body();
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), KILN_ERROR_VALUE) << e.what();
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "unexpected exception: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error was raised";
  return "";
}

void put64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// A clang offload bundle of `entries` (triple, bytes), laid out as clang does: the header,
// then the payloads in order.
std::vector<uint8_t> make_bundle(
    const std::vector<std::pair<std::string, std::vector<uint8_t>>>& entries) {
  const std::string magic = "__CLANG_OFFLOAD_BUNDLE__";
  size_t header = magic.size() + 8;
  for (const auto& [triple, bytes] : entries) header += 24 + triple.size();
  std::vector<uint8_t> out(magic.begin(), magic.end());
  put64(out, entries.size());
  uint64_t offset = header;
  for (const auto& [triple, bytes] : entries) {
    put64(out, offset);
    put64(out, bytes.size());
    put64(out, triple.size());
    out.insert(out.end(), triple.begin(), triple.end());
    offset += bytes.size();
  }
  for (const auto& entry : entries) out.insert(out.end(), entry.second.begin(), entry.second.end());
  return out;
}

std::vector<uint8_t> raw_object(const std::string& kernel, const std::string& arch) {
  return read_bytes(example_dir() / (kernel + "_" + arch + ".hsaco"));
}

class CodeObjectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    KILN_ROCM_REQUIRE_EXAMPLE(example_dir() / "vector_add.hsaco");
    KILN_ROCM_REQUIRE_EXAMPLE(example_dir() / "vector_add_gfx90a.hsaco");
  }
};

// ---- target IDs ----

TEST(TargetIdTest, ParsesProcessorAndFeatures) {
  const auto t = parse_target_id("gfx90a:sramecc+:xnack-");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->processor, "gfx90a");
  EXPECT_EQ(t->feature("sramecc"), true);
  EXPECT_EQ(t->feature("xnack"), false);
  EXPECT_EQ(t->feature("wavefrontsize64"), std::nullopt);
  EXPECT_EQ(t->str(), "gfx90a:sramecc+:xnack-");
  EXPECT_EQ(parse_target_id("gfx1030")->str(), "gfx1030");
  EXPECT_EQ(parse_target_id("gfx10-3-generic")->processor, "gfx10-3-generic");
}

TEST(TargetIdTest, RejectsMalformedIds) {
  for (const char* bad : {"", ":xnack+", "gfx90a:", "gfx90a:xnack", "gfx90a:xnack+:xnack-",
                          "gfx 90a", "gfx90a::xnack+", "gfx90a:+"}) {
    EXPECT_FALSE(parse_target_id(bad)) << "'" << bad << "'";
  }
}

TEST(TargetIdTest, CompatibilityFollowsFeatureSettings) {
  auto id = [](const char* s) { return *parse_target_id(s); };
  EXPECT_TRUE(target_compatible(id("gfx90a"), id("gfx90a:sramecc+:xnack-")));
  EXPECT_TRUE(target_compatible(id("gfx90a:xnack-"), id("gfx90a:sramecc+:xnack-")));
  EXPECT_FALSE(target_compatible(id("gfx90a:xnack+"), id("gfx90a:sramecc+:xnack-")));
  EXPECT_FALSE(target_compatible(id("gfx1030"), id("gfx90a")));
  EXPECT_FALSE(target_compatible(id("gfx90a"), id("gfx908")));
  // A device that does not name a feature leaves the decision to the runtime.
  EXPECT_TRUE(target_compatible(id("gfx90a:xnack+"), id("gfx90a")));
}

TEST(TargetIdTest, KnowsMachineValues) {
  EXPECT_EQ(processor_of_mach(0x3f), "gfx90a");
  EXPECT_EQ(processor_of_mach(0x36), "gfx1030");
  EXPECT_EQ(processor_of_mach(0x30), "gfx908");
  EXPECT_EQ(processor_of_mach(0x2f), "gfx906");
  EXPECT_EQ(processor_of_mach(0x4c), "gfx942");
  EXPECT_EQ(processor_of_mach(0x41), "gfx1100");
  EXPECT_EQ(processor_of_mach(0xfe), "");
}

// ---- the built code objects ----

TEST_F(CodeObjectTest, RawObjectsAreAmdgpuElfsWithTheirKernel) {
  for (const std::string& kernel : kKernels) {
    for (const std::string& arch : kArchs) {
      SCOPED_TRACE(kernel + "_" + arch);
      const std::vector<uint8_t> bytes = raw_object(kernel, arch);
      ASSERT_FALSE(bytes.empty());
      EXPECT_TRUE(is_elf(bytes));
      const AmdgpuElf elf = parse_amdgpu_elf(bytes);
      EXPECT_EQ(elf.target.processor, arch);
      EXPECT_EQ(elf.mach, arch == "gfx90a" ? 0x3fu : 0x36u);
      EXPECT_GE(elf.code_object_version, 4);  // clang-15's default
      EXPECT_THAT(elf.kernels, ElementsAre(kernel));
    }
  }
}

TEST_F(CodeObjectTest, BundleListsItsTargets) {
  for (const std::string& kernel : kKernels) {
    SCOPED_TRACE(kernel);
    const std::vector<uint8_t> bytes = read_bytes(example_dir() / (kernel + ".hsaco"));
    ASSERT_TRUE(is_offload_bundle(bytes));
    const std::vector<BundleEntry> entries = parse_offload_bundle(bytes);
    std::vector<std::string> triples;
    for (const BundleEntry& e : entries) {
      triples.push_back(e.triple);
      if (e.target) {
        const AmdgpuElf elf = parse_amdgpu_elf(std::span(bytes).subspan(e.offset, e.size));
        EXPECT_EQ(elf.target.processor, e.target->processor);
        EXPECT_THAT(elf.kernels, ElementsAre(kernel));
      } else {
        EXPECT_EQ(e.triple.rfind("host-", 0), 0u) << e.triple;
        EXPECT_EQ(e.size, 0u);
      }
    }
    EXPECT_THAT(triples, Contains("hipv4-amdgcn-amd-amdhsa--gfx90a"));
    EXPECT_THAT(triples, Contains("hipv4-amdgcn-amd-amdhsa--gfx1030"));
    EXPECT_EQ(entries.size(), 3u);  // host + 2 architectures
  }
}

TEST_F(CodeObjectTest, PicksTheEntryOfTheDevicesArchitecture) {
  const std::vector<uint8_t> bundle = read_bytes(example_dir() / "vector_add.hsaco");
  for (const char* device : {"gfx90a", "gfx90a:sramecc+:xnack-", "gfx90a:sramecc-:xnack+"}) {
    const SelectedCodeObject s = select_code_object(bundle, device);
    EXPECT_EQ(s.elf.target.processor, "gfx90a") << device;
    EXPECT_THAT(s.origin, HasSubstr("hipv4-amdgcn-amd-amdhsa--gfx90a")) << device;
    EXPECT_GE(s.image.data(), bundle.data());
    EXPECT_LE(s.image.data() + s.image.size(), bundle.data() + bundle.size());
  }
  const SelectedCodeObject s = select_code_object(bundle, "gfx1030");
  EXPECT_EQ(s.elf.target.processor, "gfx1030");
  EXPECT_THAT(s.elf.kernels, ElementsAre("vector_add"));
}

TEST_F(CodeObjectTest, BundleWithoutTheArchitectureListsItsTargets) {
  const std::vector<uint8_t> bundle = read_bytes(example_dir() / "vector_add.hsaco");
  const std::string message = value_error([&] { select_code_object(bundle, "gfx908:xnack-"); });
  EXPECT_THAT(
      message,
      AllOf(HasSubstr("no code object for the device's architecture gfx908:xnack-"),
            HasSubstr("hipv4-amdgcn-amd-amdhsa--gfx90a"),
            HasSubstr("hipv4-amdgcn-amd-amdhsa--gfx1030"), HasSubstr("--offload-arch=gfx908")));
  EXPECT_THAT(value_error([&] { select_code_object(bundle, "not an arch"); }),
              HasSubstr("not a valid target ID"));
}

TEST_F(CodeObjectTest, RawObjectIsCheckedAgainstTheDevice) {
  const std::vector<uint8_t> gfx90a = raw_object("vector_add", "gfx90a");
  EXPECT_EQ(select_code_object(gfx90a, "gfx90a:sramecc+:xnack-").elf.target.processor, "gfx90a");
  const std::vector<uint8_t> gfx1030 = raw_object("vector_add", "gfx1030");
  EXPECT_THAT(value_error([&] { select_code_object(gfx1030, "gfx90a:sramecc+:xnack-"); }),
              AllOf(HasSubstr("is for gfx1030"), HasSubstr("device is gfx90a:sramecc+:xnack-")));
}

TEST_F(CodeObjectTest, MetadataKernelsMustBeInTheCodeObject) {
  const std::vector<uint8_t> bundle = read_bytes(example_dir() / "vector_add.hsaco");
  const SelectedCodeObject s = select_code_object(bundle, "gfx90a");
  const sdk::ModuleMetadata meta =
      sdk::parse_module_metadata(rocm_test::read_text(example_dir() / "vector_add.hsaco.json"));
  std::vector<std::string> names;
  for (const auto& [name, info] : meta.kernels) names.push_back(name);
  EXPECT_NO_THROW(check_kernels_present(s.elf, names, s.origin));

  const std::string message = value_error([&] {
    check_kernels_present(s.elf, {"vector_add", "vector_sub"}, s.origin);
  });
  EXPECT_THAT(message, AllOf(HasSubstr("kernel 'vector_sub'"), HasSubstr("its kernels: vector_add"),
                             HasSubstr("hipv4-amdgcn-amd-amdhsa--gfx90a")));
  // The relu metadata against the vector_add code object.
  EXPECT_THAT(value_error([&] { check_kernels_present(s.elf, {"relu"}, s.origin); }),
              HasSubstr("kernel 'relu'"));
}

// ---- hand-made bundles ----

TEST_F(CodeObjectTest, PrefersTheMostSpecificCompatibleEntry) {
  const std::vector<uint8_t> elf = raw_object("vector_add", "gfx90a");
  const std::vector<uint8_t> other = raw_object("relu", "gfx90a");
  const std::vector<uint8_t> bundle =
      make_bundle({{"host-x86_64-unknown-linux", {}},
                   {"hipv4-amdgcn-amd-amdhsa--gfx90a", elf},
                   {"hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+", other}});
  EXPECT_THAT(select_code_object(bundle, "gfx90a:sramecc+:xnack+").elf.kernels,
              ElementsAre("relu"));
  EXPECT_THAT(select_code_object(bundle, "gfx90a:sramecc+:xnack-").elf.kernels,
              ElementsAre("vector_add"));
  // The older triple spelling (code object v3 bundles).
  const std::vector<uint8_t> old = make_bundle({{"hip-amdgcn-amd-amdhsa-gfx90a", elf}});
  EXPECT_EQ(select_code_object(old, "gfx90a").elf.target.processor, "gfx90a");
}

TEST_F(CodeObjectTest, RejectsAnEntryHoldingAnotherArchitecture) {
  const std::vector<uint8_t> bundle =
      make_bundle({{"hipv4-amdgcn-amd-amdhsa--gfx90a", raw_object("vector_add", "gfx1030")}});
  EXPECT_THAT(value_error([&] { select_code_object(bundle, "gfx90a"); }),
              HasSubstr("holds a code object for gfx1030, not gfx90a"));
  const std::vector<uint8_t> garbage =
      make_bundle({{"hipv4-amdgcn-amd-amdhsa--gfx90a", {1, 2, 3, 4}}});
  EXPECT_THAT(value_error([&] { select_code_object(garbage, "gfx90a"); }),
              HasSubstr("is not an ELF file"));
}

TEST_F(CodeObjectTest, EveryTruncationOfABundleIsRejected) {
  const std::vector<uint8_t> bundle = read_bytes(example_dir() / "vector_add.hsaco");
  const std::vector<BundleEntry> entries = parse_offload_bundle(bundle);
  uint64_t end = 0;
  for (const BundleEntry& e : entries) end = std::max(end, e.offset + e.size);
  ASSERT_EQ(end, bundle.size());
  for (size_t n = 0; n < bundle.size(); ++n) {
    const std::span<const uint8_t> prefix(bundle.data(), n);
    EXPECT_THROW(parse_offload_bundle(prefix), sdk::Error) << "prefix of " << n << " bytes";
    EXPECT_THROW(select_code_object(prefix, "gfx90a"), sdk::Error) << "prefix of " << n << " bytes";
  }
}

TEST_F(CodeObjectTest, EveryTruncationOfAnElfIsRejected) {
  const std::vector<uint8_t> elf = raw_object("matmul", "gfx90a");
  for (size_t n = 0; n < elf.size(); ++n) {
    EXPECT_THROW(parse_amdgpu_elf(std::span(elf.data(), n)), sdk::Error) << n << " bytes";
  }
}

TEST(BundleHeaderTest, RejectsHugeAndZeroCounts) {
  std::vector<uint8_t> huge = make_bundle({{"hipv4-amdgcn-amd-amdhsa--gfx90a", {1, 2, 3}}});
  for (uint64_t count : {uint64_t{1} << 63, uint64_t{5000}, uint64_t{2}, ~uint64_t{0}}) {
    std::vector<uint8_t> b = huge;
    std::memcpy(b.data() + 24, &count, 8);
    EXPECT_THAT(value_error([&] { parse_offload_bundle(b); }),
                AnyOf(HasSubstr("declares " + std::to_string(count) + " entries"),
                      HasSubstr("truncated or corrupt")))
        << count;
  }
  std::vector<uint8_t> zero = huge;
  std::memset(zero.data() + 24, 0, 8);
  EXPECT_THAT(value_error([&] { parse_offload_bundle(zero); }), HasSubstr("no entries"));
}

TEST(BundleHeaderTest, RejectsOutOfRangeEntries) {
  const std::vector<uint8_t> good = make_bundle({{"hipv4-amdgcn-amd-amdhsa--gfx90a", {1, 2, 3}}});
  const size_t entry = 32;  // offset, size, triple length of entry 0
  auto with = [&](size_t at, uint64_t v) {
    std::vector<uint8_t> b = good;
    std::memcpy(b.data() + at, &v, 8);
    return b;
  };
  EXPECT_THAT(value_error([&] { parse_offload_bundle(with(entry, ~uint64_t{0} - 1)); }),
              HasSubstr("entry 0"));
  EXPECT_THAT(value_error([&] { parse_offload_bundle(with(entry + 8, ~uint64_t{0})); }),
              HasSubstr("entry 0"));
  EXPECT_THAT(value_error([&] { parse_offload_bundle(with(entry + 16, uint64_t{1} << 62)); }),
              HasSubstr("entry 0 triple"));
  std::vector<uint8_t> control = good;
  control[entry + 24] = 0x01;  // a control character in the triple
  EXPECT_THAT(value_error([&] { parse_offload_bundle(control); }), HasSubstr("non-printable"));
}

TEST(CodeObjectInputTest, GarbageIsNotACodeObject) {
  const std::string text = "this is not device code";
  const std::vector<uint8_t> bytes(text.begin(), text.end());
  EXPECT_THAT(value_error([&] { select_code_object(bytes, "gfx90a"); }),
              AllOf(HasSubstr("not a HIP code object"), HasSubstr("74 68 69 73")));
  EXPECT_THAT(value_error([&] { select_code_object({}, "gfx90a"); }), HasSubstr("(no bytes)"));
  std::mt19937 rng(42);
  for (int round = 0; round < 200; ++round) {
    std::vector<uint8_t> noise(rng() % 512);
    for (uint8_t& b : noise) b = static_cast<uint8_t>(rng());
    if (round % 3 == 0 && noise.size() >= 32) {
      // Garbage behind a valid magic reaches the header checks.
      const std::string magic = round % 2 == 0 ? "__CLANG_OFFLOAD_BUNDLE__"
                                               : "\x7f"
                                                 "ELF";
      std::memcpy(noise.data(), magic.data(), magic.size());
    }
    try {
      select_code_object(noise, "gfx90a");
    } catch (const sdk::Error& e) {
      EXPECT_EQ(e.code(), KILN_ERROR_VALUE);
    }
  }
  const std::vector<uint8_t> compressed = {'C', 'C', 'O', 'B', 1, 0, 0, 0};
  EXPECT_THAT(value_error([&] { select_code_object(compressed, "gfx90a"); }),
              HasSubstr("compressed offload bundle"));
}

TEST(CodeObjectInputTest, OtherElfsAreRejected) {
  // This test binary: an x86-64 ELF.
  std::vector<uint8_t> self(64);
  {
    std::ifstream in("/proc/self/exe", std::ios::binary);
    in.read(reinterpret_cast<char*>(self.data()), static_cast<std::streamsize>(self.size()));
    ASSERT_TRUE(in) << "cannot read /proc/self/exe";
  }
  EXPECT_THAT(value_error([&] { parse_amdgpu_elf(self); }), HasSubstr("machine 62 (x86-64)"));
  std::vector<uint8_t> elf32(self.begin(), self.begin() + 64);
  elf32[4] = 1;
  EXPECT_THAT(value_error([&] { parse_amdgpu_elf(elf32); }), HasSubstr("32-bit"));
}

TEST_F(CodeObjectTest, CorruptSectionAndSymbolTablesAreRejected) {
  const std::vector<uint8_t> elf = raw_object("vector_add", "gfx90a");
  uint64_t shoff = 0;
  uint16_t shnum = 0;
  std::memcpy(&shoff, elf.data() + 40, 8);
  std::memcpy(&shnum, elf.data() + 60, 2);
  auto patched = [&](size_t at, const void* value, size_t n) {
    std::vector<uint8_t> b = elf;
    std::memcpy(b.data() + at, value, n);
    return b;
  };
  const uint64_t far = uint64_t{1} << 40;
  EXPECT_THAT(value_error([&] { parse_amdgpu_elf(patched(40, &far, 8)); }),
              HasSubstr("section table"));
  const uint16_t entsize = 40;
  EXPECT_THAT(value_error([&] { parse_amdgpu_elf(patched(58, &entsize, 2)); }),
              HasSubstr("e_shentsize"));
  // Find a symbol table and break its link, its range and its first name.
  bool found = false;
  for (uint16_t i = 0; i < shnum; ++i) {
    const size_t sh = shoff + size_t{i} * 64;
    uint32_t type = 0;
    std::memcpy(&type, elf.data() + sh + 4, 4);
    if (type != 2 && type != 11) continue;
    found = true;
    const uint32_t bad_link = 0;
    EXPECT_THAT(value_error([&] { parse_amdgpu_elf(patched(sh + 40, &bad_link, 4)); }),
                HasSubstr("not a string table"));
    const uint64_t huge_size = far;
    EXPECT_THAT(value_error([&] { parse_amdgpu_elf(patched(sh + 32, &huge_size, 8)); }),
                HasSubstr("symbol table"));
    uint64_t symbols = 0;
    std::memcpy(&symbols, elf.data() + sh + 24, 8);
    const uint32_t bad_name = 0x7fffffff;
    EXPECT_THAT(value_error([&] { parse_amdgpu_elf(patched(symbols + 24, &bad_name, 4)); }),
                HasSubstr("outside its string table"));
  }
  EXPECT_TRUE(found) << "the code object has no symbol table";
}

}  // namespace
}  // namespace kiln::rocm
