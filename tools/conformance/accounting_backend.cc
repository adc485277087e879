// SPDX-License-Identifier: Apache-2.0
#include "accounting_backend.h"

#include <fmt/format.h>

#include <utility>

#include "kiln/object.h"

namespace kiln::conformance {

void AllocationLedger::on_alloc(void* ptr, size_t nbytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++totals_.allocations;
  totals_.allocated_bytes += nbytes;
  auto [it, fresh] = live_.emplace(ptr, nbytes);
  if (!fresh) {
    // Two live allocations at one address: a later free of either frees both.
    problems_.push_back(fmt::format(
        "alloc of {} bytes returned {}, which an earlier alloc of {} bytes had returned and "
        "which was not freed",
        nbytes, ptr, it->second));
    totals_.outstanding_bytes -= it->second;
    --totals_.outstanding;
    it->second = nbytes;
  }
  ++totals_.outstanding;
  totals_.outstanding_bytes += nbytes;
}

void AllocationLedger::on_free(void* ptr, bool ok) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!ok) {
    ++totals_.failed_frees;
    return;
  }
  ++totals_.frees;
  const auto it = live_.find(ptr);
  // A pointer the ledger never saw was allocated before the test began: not this test's.
  if (it == live_.end()) return;
  --totals_.outstanding;
  totals_.outstanding_bytes -= it->second;
  live_.erase(it);
}

AllocationLedger::Totals AllocationLedger::totals() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return totals_;
}

std::vector<std::string> AllocationLedger::problems() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return problems_;
}

namespace {

// The table the accounting DeviceBackend reads: its `self` is this object, and each slot
// forwards to `inner`'s slot with `inner`'s own `self`. A slot the plugin leaves NULL stays NULL,
// so the has_*() queries answer as for the plugin.
class DispatchTable : public Object {
 public:
  DispatchTable(Ref<DeviceBackend> plugin_backend, std::shared_ptr<AllocationLedger> ledger)
      : plugin_backend_(std::move(plugin_backend)),
        inner_(plugin_backend_->table()),
        ledger_(std::move(ledger)) {
    table_ = inner_;  // struct_size, next (the plugin's extensions), dl_device_type
    table_.self = this;
    table_.device_count = device_count;
    table_.device_attributes = inner_.device_attributes ? device_attributes : nullptr;
    table_.alloc = alloc;
    table_.free = free;
    table_.copy_to_device = copy_to_device;
    table_.copy_to_host = copy_to_host;
    table_.copy_on_device = copy_on_device;
    table_.synchronize = synchronize;
    table_.stream_create = inner_.stream_create ? stream_create : nullptr;
    table_.stream_destroy = inner_.stream_destroy ? stream_destroy : nullptr;
    table_.timer_create = inner_.timer_create ? timer_create : nullptr;
    table_.timer_start = inner_.timer_start ? timer_start : nullptr;
    table_.timer_stop = inner_.timer_stop ? timer_stop : nullptr;
    table_.timer_elapsed_ns = inner_.timer_elapsed_ns ? timer_elapsed_ns : nullptr;
    table_.timer_destroy = inner_.timer_destroy ? timer_destroy : nullptr;
    table_.module_load = inner_.module_load ? module_load : nullptr;
    table_.module_get_kernel = inner_.module_get_kernel ? module_get_kernel : nullptr;
    table_.module_unload = inner_.module_unload ? module_unload : nullptr;
    table_.launch = inner_.launch ? launch : nullptr;
  }

  const KilnDeviceBackend* table() const { return &table_; }
  const DeviceBackend& plugin_backend() const { return *plugin_backend_; }

 private:
  static const KilnDeviceBackend& in(void* self) {
    return static_cast<DispatchTable*>(self)->inner_;
  }

  static KilnError* device_count(void* self, int32_t* count, const char** why_none) {
    return in(self).device_count(in(self).self, count, why_none);
  }
  static KilnError* device_attributes(void* self, int32_t id, KilnAttributeVisitor visit,
                                      void* ctx) {
    return in(self).device_attributes(in(self).self, id, visit, ctx);
  }
  static KilnError* alloc(void* self, int32_t id, size_t nbytes, size_t alignment, void** out) {
    KilnError* err = in(self).alloc(in(self).self, id, nbytes, alignment, out);
    if (err == nullptr) static_cast<DispatchTable*>(self)->ledger_->on_alloc(*out, nbytes);
    return err;
  }
  static KilnError* free(void* self, int32_t id, void* ptr) {
    KilnError* err = in(self).free(in(self).self, id, ptr);
    static_cast<DispatchTable*>(self)->ledger_->on_free(ptr, err == nullptr);
    return err;
  }
  static KilnError* copy_to_device(void* self, int32_t id, const void* src, void* dst,
                                   size_t dst_offset, size_t nbytes, void* stream) {
    return in(self).copy_to_device(in(self).self, id, src, dst, dst_offset, nbytes, stream);
  }
  static KilnError* copy_to_host(void* self, int32_t id, const void* src, size_t src_offset,
                                 void* dst, size_t nbytes, void* stream) {
    return in(self).copy_to_host(in(self).self, id, src, src_offset, dst, nbytes, stream);
  }
  static KilnError* copy_on_device(void* self, int32_t id, const void* src, size_t src_offset,
                                   void* dst, size_t dst_offset, size_t nbytes, void* stream) {
    return in(self).copy_on_device(in(self).self, id, src, src_offset, dst, dst_offset, nbytes,
                                   stream);
  }
  static KilnError* synchronize(void* self, int32_t id, void* stream) {
    return in(self).synchronize(in(self).self, id, stream);
  }
  static KilnError* stream_create(void* self, int32_t id, void** stream) {
    return in(self).stream_create(in(self).self, id, stream);
  }
  static KilnError* stream_destroy(void* self, int32_t id, void* stream) {
    return in(self).stream_destroy(in(self).self, id, stream);
  }
  static KilnError* timer_create(void* self, int32_t id, void** timer) {
    return in(self).timer_create(in(self).self, id, timer);
  }
  static KilnError* timer_start(void* self, void* timer, void* stream) {
    return in(self).timer_start(in(self).self, timer, stream);
  }
  static KilnError* timer_stop(void* self, void* timer, void* stream) {
    return in(self).timer_stop(in(self).self, timer, stream);
  }
  static KilnError* timer_elapsed_ns(void* self, void* timer, int64_t* ns) {
    return in(self).timer_elapsed_ns(in(self).self, timer, ns);
  }
  static void timer_destroy(void* self, void* timer) {
    in(self).timer_destroy(in(self).self, timer);
  }
  static KilnError* module_load(void* self, int32_t id, const void* data, size_t size,
                                const char* format, const char* metadata_json, void** module) {
    return in(self).module_load(in(self).self, id, data, size, format, metadata_json, module);
  }
  static KilnError* module_get_kernel(void* self, void* module, const char* name, void** kernel) {
    return in(self).module_get_kernel(in(self).self, module, name, kernel);
  }
  static void module_unload(void* self, void* module) {
    in(self).module_unload(in(self).self, module);
  }
  static KilnError* launch(void* self, void* kernel, const KilnAny* args, int32_t num_args,
                           const uint32_t grid[3], const uint32_t block[3],
                           uint32_t dynamic_shared_bytes, void* stream) {
    return in(self).launch(in(self).self, kernel, args, num_args, grid, block, dynamic_shared_bytes,
                           stream);
  }

  Ref<DeviceBackend> plugin_backend_;
  // The host's copy of the plugin's table (zero-extended to the host's layout).
  const KilnDeviceBackend& inner_;
  std::shared_ptr<AllocationLedger> ledger_;
  KilnDeviceBackend table_{};
};

}  // namespace

Ref<DeviceBackend> make_accounting_backend(const Ref<DeviceBackend>& plugin_backend,
                                           std::shared_ptr<AllocationLedger> ledger) {
  Ref<DispatchTable> dispatch = make_object<DispatchTable>(plugin_backend, std::move(ledger));
  const KilnDeviceBackend* table = dispatch->table();
  return make_object<DeviceBackend>(table, plugin_backend->name(), plugin_backend->plugin_name(),
                                    Ref<Object>(dispatch));
}

AccountingContext::AccountingContext(const Runtime& runtime, Ref<DeviceBackend> backend)
    : runtime_(runtime.retain()), backend_(std::move(backend)) {}

Ref<DeviceBackend> AccountingContext::find_backend(int32_t device_type) const {
  if (device_type == backend_->dl_device_type()) return backend_;
  return runtime_->find_backend(device_type);
}

Ref<DeviceBackend> AccountingContext::backend(int32_t device_type) const {
  if (device_type == backend_->dl_device_type()) return backend_;
  return runtime_->backend(device_type);
}

const DeviceTypeNames& AccountingContext::device_types() const { return runtime_->device_types(); }

std::shared_ptr<const DeviceContext> AccountingContext::retain() const {
  return shared_from_this();
}

}  // namespace kiln::conformance
