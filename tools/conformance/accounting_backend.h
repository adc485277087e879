// SPDX-License-Identifier: Apache-2.0
// The conformance kit's own dispatch to a plugin's device backend (docs/conformance.md, "What
// each test allocated"): a copy of the plugin's KilnDeviceBackend table whose every slot forwards
// to the plugin's, with `alloc` and `free` also counted in a ledger. A test reaches the plugin
// only through it (directly, and through Tensors made with an AccountingContext), so the kit
// knows what each test allocated and what the plugin freed, without the plugin's cooperation.
#ifndef KILN_TOOLS_CONFORMANCE_ACCOUNTING_BACKEND_H_
#define KILN_TOOLS_CONFORMANCE_ACCOUNTING_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/device_backend.h"
#include "kiln/device_context.h"
#include "kiln/runtime.h"

namespace kiln::conformance {

// What went through one accounting backend: every allocation the plugin granted, and which of
// them it has freed. Thread-safe: the concurrency test allocates from several threads.
class AllocationLedger {
 public:
  // The counts so far.
  struct Totals {
    int64_t allocations = 0;  // allocs the plugin granted
    uint64_t allocated_bytes = 0;
    int64_t frees = 0;         // frees the plugin reported done (no error)
    int64_t failed_frees = 0;  // frees the plugin answered with an error
    int64_t outstanding = 0;   // granted and not freed
    uint64_t outstanding_bytes = 0;
  };

  // The plugin granted `nbytes` at `ptr`.
  void on_alloc(void* ptr, size_t nbytes);
  // The plugin was asked to free `ptr`; `ok`: it returned no error. A failed free leaves the
  // allocation outstanding (the plugin says it still holds it).
  void on_free(void* ptr, bool ok);
  Totals totals() const;
  // Contract breaches seen so far, e.g. an alloc that returned a pointer still allocated.
  std::vector<std::string> problems() const;

 private:
  mutable std::mutex mutex_;
  std::unordered_map<void*, size_t> live_;
  Totals totals_;
  std::vector<std::string> problems_;
};

// A DeviceBackend for `plugin_backend`'s device type that forwards every slot to it and records
// allocations and frees in `ledger`. It keeps `plugin_backend` (and so its plugin) and the
// ledger alive while it lives. Errors name the plugin's backend as the plugin's own calls do.
Ref<DeviceBackend> make_accounting_backend(const Ref<DeviceBackend>& plugin_backend,
                                           std::shared_ptr<AllocationLedger> ledger);

// A DeviceContext that serves `backend` (an accounting backend) for its device type and every
// other type from `runtime`, which it keeps alive (Runtime::retain): Tensor::empty(..., context)
// then allocates through the kit's dispatch. Make it with std::make_shared (retain() shares it).
class AccountingContext : public DeviceContext,
                          public std::enable_shared_from_this<AccountingContext> {
 public:
  AccountingContext(const Runtime& runtime, Ref<DeviceBackend> backend);

  Ref<DeviceBackend> find_backend(int32_t device_type) const override;
  Ref<DeviceBackend> backend(int32_t device_type) const override;
  const DeviceTypeNames& device_types() const override;
  std::shared_ptr<const DeviceContext> retain() const override;

 private:
  std::shared_ptr<const DeviceContext> runtime_;
  Ref<DeviceBackend> backend_;
};

}  // namespace kiln::conformance

#endif  // KILN_TOOLS_CONFORMANCE_ACCOUNTING_BACKEND_H_
