// SPDX-License-Identifier: Apache-2.0
#include "tar_exporter.h"

#include <archive.h>
#include <archive_entry.h>

#include <algorithm>
#include <ctime>
#include <memory>
#include <string>

#include "kiln/sdk/plugin.hpp"
#include "kiln/sdk/support/atomic_file.hpp"
#include "package_manifest.h"

namespace kiln::package {
namespace {

// How much archive_write_data() is given at a time: it takes a signed size, and bounded
// chunks keep that far from overflowing for multi-GiB artifacts.
constexpr size_t kWriteChunk = size_t{1} << 20;

// Frees a libarchive writer. archive_write_free() also closes it, but the result of closing
// is checked separately: that is where the final compressed block is written.
struct WriterDeleter {
  void operator()(struct archive* a) const { archive_write_free(a); }
};
using Writer = std::unique_ptr<struct archive, WriterDeleter>;
// Frees a libarchive entry.
struct EntryDeleter {
  void operator()(struct archive_entry* e) const { archive_entry_free(e); }
};

// Throws KILN_ERROR_RUNTIME "cannot write <file>: <what>: <libarchive's reason>".
[[noreturn]] void fail(struct archive* a, const std::string& file, const std::string& what) {
  const char* why = archive_error_string(a);
  throw sdk::Error(KILN_ERROR_RUNTIME,
                   "cannot write " + file + ": " + what + ": " + (why != nullptr ? why : "?"));
}

// Appends a regular file `name` holding `size` bytes at `data` (borrowed) to `a`, which writes
// `file` (for messages).
void add_file(struct archive* a, const std::string& name, const uint8_t* data, size_t size,
              time_t mtime, const std::string& file) {
  std::unique_ptr<struct archive_entry, EntryDeleter> entry(archive_entry_new());
  if (!entry) throw sdk::Error(KILN_ERROR_OUT_OF_MEMORY, "cannot create an archive entry");
  archive_entry_set_pathname(entry.get(), name.c_str());
  archive_entry_set_filetype(entry.get(), AE_IFREG);
  archive_entry_set_perm(entry.get(), 0644);
  archive_entry_set_size(entry.get(), static_cast<la_int64_t>(size));
  archive_entry_set_mtime(entry.get(), mtime, 0);
  if (archive_write_header(a, entry.get()) != ARCHIVE_OK) fail(a, file, "entry '" + name + "'");
  for (size_t offset = 0; offset < size;) {
    const size_t n = std::min(kWriteChunk, size - offset);
    const la_ssize_t written = archive_write_data(a, data + offset, n);
    if (written <= 0) fail(a, file, "data of entry '" + name + "'");
    offset += static_cast<size_t>(written);
  }
  if (archive_write_finish_entry(a) != ARCHIVE_OK) fail(a, file, "entry '" + name + "'");
}

// KilnExporter::export_module; see make_tar_exporter.
KilnError* export_tar(void* /*self*/, const KilnExportRequest* request, const char* path) {
  return sdk::guard("tar exporter", [&] {
    if (path == nullptr) throw sdk::Error(KILN_ERROR_VALUE, "the output path is NULL");
    // Everything that can be checked is checked before the temporary file exists.
    const PackageManifest manifest = manifest_for(request);
    const std::string json = to_json(manifest);

    sdk::AtomicFile out(path);
    const int fd = out.open();
    const std::string temp = out.temp_path().string();
    Writer writer(archive_write_new());
    if (!writer) throw sdk::Error(KILN_ERROR_OUT_OF_MEMORY, "cannot create an archive writer");
    struct archive* a = writer.get();
    // pax: no limit on name length or file size; readers without pax support still see
    // plain ustar entries for the short names a package has.
    if (archive_write_add_filter_gzip(a) != ARCHIVE_OK ||
        archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
        // Block padding is for tapes; after compression it would be trailing garbage.
        archive_write_set_bytes_in_last_block(a, 1) != ARCHIVE_OK ||
        archive_write_open_fd(a, fd) != ARCHIVE_OK) {
      fail(a, temp, "setting up gzip-compressed tar output");
    }
    const time_t now = std::time(nullptr);
    add_file(a, kManifestName, reinterpret_cast<const uint8_t*>(json.data()), json.size(), now,
             temp);
    // manifest_for() checked the array above.
    const sdk::StridedArray<KilnArtifact> artifacts(request->artifacts, request->num_artifacts);
    for (size_t i = 0; i < artifacts.size(); ++i) {
      const KilnArtifact artifact = artifacts[i];
      add_file(a, artifact.name, artifact.data, artifact.size, now, temp);
    }
    if (archive_write_close(a) != ARCHIVE_OK) fail(a, temp, "finishing the archive");
    out.commit();
    sdk::log(KILN_LOG_DEBUG, "wrote module package %s (%d artifacts)", path,
             static_cast<int>(request->num_artifacts));
  });
}

}  // namespace

KilnExporter make_tar_exporter() {
  KilnExporter exporter = sdk::make_table<KilnExporter>();
  exporter.output_format = "tar";
  exporter.export_module = &export_tar;
  return exporter;
}

}  // namespace kiln::package
