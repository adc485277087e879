// SPDX-License-Identifier: Apache-2.0
// TVM 0.27's tensor cache builtins (src/runtime/vm/tensor_cache_support.cc) over Kiln's
// TensorCache (kiln/llm/tensor_cache.h): the same names and arguments, so that an engine written
// for TVM's runtime (MLC-LLM loads its weights through them) runs on Kiln unchanged.
//
//   vm.builtin.tensor_cache.load(path: str, device_type: int, device_id: int) -> None
//   vm.builtin.tensor_cache.get(name: str) -> Tensor | None
//   vm.builtin.tensor_cache.update(name: str, tensor: Tensor[, override: bool = False]) -> None
//   vm.builtin.tensor_cache.remove(name: str) -> None
//   vm.builtin.tensor_cache.clear() -> None
//   vm.builtin.param_array_from_cache(prefix: str, num_params: int) -> Array[Tensor]
//   vm.builtin.param_array_from_cache_by_name(names: Array[str]) -> Array[Tensor]
//   vm.builtin.param_array_from_cache_by_name_unpacked(*names: str) -> Array[Tensor]
#include <fmt/format.h>

#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "builtin_table.h"
#include "kiln/error.h"
#include "kiln/llm/tensor_cache.h"
#include "kiln/vm/virtual_machine.h"

namespace kiln::llm {

TensorCache& builtin_tensor_cache() {
  // Never destroyed: at exit the plugins serving its tensors' devices may be unloaded first.
  static TensorCache* const cache = new TensorCache();
  return *cache;
}

namespace detail {
namespace {

// Runs `body`, putting the builtin's name in front of any Kiln error it throws (same kind).
template <typename F>
auto named(const char* builtin, F&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const Error& e) {
    throw_error(e.code(), fmt::format("{}: {}", builtin, e.what()));
  }
}

// Argument `index` of `builtin` as a string; TypeError naming both otherwise.
std::string string_arg(const Any& v, const char* builtin, int32_t index, const char* what) {
  if (v.type_code() != KILN_TYPE_STRING) {
    throw TypeError(fmt::format("{}: argument {} ({}) must be a string, not {}", builtin, index,
                                what, v.type_name()));
  }
  return v.cast<std::string>();
}

void expect_arg_count(const char* builtin, int32_t n, int32_t min, int32_t max) {
  if (n < min || n > max) {
    throw TypeError(min == max
                        ? fmt::format("{} takes {} arguments, got {}", builtin, min, n)
                        : fmt::format("{} takes {} to {} arguments, got {}", builtin, min, max, n));
  }
}

int32_t int32_arg(int64_t v, const char* builtin, const char* what) {
  if (v < 0 || v > std::numeric_limits<int32_t>::max()) {
    throw ValueError(fmt::format("{}: {} {} is out of range", builtin, what, v));
  }
  return static_cast<int32_t>(v);
}

// What the VM takes for TVM's Array<Tensor>: a tuple.
Any tensor_array(const std::vector<Tensor>& tensors) {
  return vm::make_array(std::vector<Any>(tensors.begin(), tensors.end()));
}

// A tensor the cache can hold: `t` itself, unless it is a view of memory it does not own (a
// caller's DLTensor), which may be gone after the call; then a copy on the same device. TVM's
// update copies DLTensors for the same reason.
Tensor owned(const Tensor& t, const std::shared_ptr<const DeviceContext>& context,
             const char* builtin) {
  if (t.get()->storage) return t;
  if (!context) {
    throw RuntimeError(fmt::format(
        "{}: cannot copy a tensor view: the builtins were listed, not registered with a runtime",
        builtin));
  }
  Tensor copy = Tensor::empty(std::vector<int64_t>(t.shape().begin(), t.shape().end()), t.dtype(),
                              t.device(), *context);
  copy.copy_from(t);
  return copy;
}

}  // namespace

BuiltinList tensor_cache_builtins(std::shared_ptr<const DeviceContext> context) {
  BuiltinList out;
  out.emplace_back(
      "vm.builtin.tensor_cache.load",
      Function::from_typed("vm.builtin.tensor_cache.load",
                           [context](std::string path, int64_t device_type, int64_t device_id) {
                             constexpr const char* kName = "vm.builtin.tensor_cache.load";
                             named(kName, [&] {
                               if (!context) {
                                 throw RuntimeError(
                                     "no device context: the builtins were listed, not registered "
                                     "with a runtime");
                               }
                               const Device device{int32_arg(device_type, kName, "device type"),
                                                   int32_arg(device_id, kName, "device id")};
                               builtin_tensor_cache().load(path, device, *context);
                             });
                           }));
  out.emplace_back("vm.builtin.tensor_cache.get",
                   Function::from_typed("vm.builtin.tensor_cache.get", [](const std::string& name) {
                     std::optional<Tensor> t = builtin_tensor_cache().get(name);
                     return t ? Any(*t) : Any();
                   }));
  out.emplace_back(
      "vm.builtin.tensor_cache.update",
      Function::from_packed(
          "vm.builtin.tensor_cache.update", [context](const Any* args, int32_t n) -> Any {
            constexpr const char* kName = "vm.builtin.tensor_cache.update";
            expect_arg_count(kName, n, 2, 3);
            const std::string name = string_arg(args[0], kName, 0, "name");
            if (args[1].type_code() != KILN_TYPE_TENSOR) {
              throw TypeError(
                  fmt::format("{}: argument 1 (the tensor for '{}') must be a tensor, not {}",
                              kName, name, args[1].type_name()));
            }
            bool allow_override = false;
            if (n == 3) {
              const Any& o = args[2];
              if (o.type_code() == KILN_TYPE_INT) {
                allow_override = o.raw_int() != 0;
              } else if (o.type_code() == KILN_TYPE_BOOL) {
                allow_override = o.cast<bool>();
              } else {
                throw TypeError(fmt::format("{}: argument 2 (override) must be a bool, not {}",
                                            kName, o.type_name()));
              }
            }
            named(kName, [&] {
              builtin_tensor_cache().update(name, owned(args[1].cast<Tensor>(), context, kName),
                                            allow_override);
            });
            return Any();
          }));
  out.emplace_back(
      "vm.builtin.tensor_cache.remove",
      Function::from_typed("vm.builtin.tensor_cache.remove",
                           [](const std::string& name) { builtin_tensor_cache().remove(name); }));
  out.emplace_back("vm.builtin.tensor_cache.clear",
                   Function::from_typed("vm.builtin.tensor_cache.clear",
                                        [] { builtin_tensor_cache().clear(); }));
  out.emplace_back(
      "vm.builtin.param_array_from_cache",
      Function::from_typed(
          "vm.builtin.param_array_from_cache", [](std::string prefix, int64_t num_params) {
            return named("vm.builtin.param_array_from_cache", [&] {
              return tensor_array(builtin_tensor_cache().params_by_prefix(prefix, num_params));
            });
          }));
  out.emplace_back(
      "vm.builtin.param_array_from_cache_by_name",
      Function::from_packed(
          "vm.builtin.param_array_from_cache_by_name", [](const Any* args, int32_t n) -> Any {
            constexpr const char* kName = "vm.builtin.param_array_from_cache_by_name";
            expect_arg_count(kName, n, 1, 1);
            Ref<vm::ArrayObj> array = args[0].as_object<vm::ArrayObj>();
            if (!array) {
              throw TypeError(
                  fmt::format("{}: argument 0 (names) must be an array of strings, not {}", kName,
                              args[0].type_code() == kTypeObject ? args[0].object()->type_key()
                                                                 : args[0].type_name()));
            }
            std::vector<std::string> names;
            names.reserve(array->items.size());
            for (size_t i = 0; i < array->items.size(); ++i) {
              const Any& item = array->items[i];
              if (item.type_code() != KILN_TYPE_STRING) {
                throw TypeError(fmt::format("{}: names[{}] must be a string, not {}", kName, i,
                                            item.type_name()));
              }
              names.push_back(item.cast<std::string>());
            }
            return named(
                kName, [&] { return tensor_array(builtin_tensor_cache().params_by_name(names)); });
          }));
  out.emplace_back(
      "vm.builtin.param_array_from_cache_by_name_unpacked",
      Function::from_packed("vm.builtin.param_array_from_cache_by_name_unpacked",
                            [](const Any* args, int32_t n) -> Any {
                              constexpr const char* kName =
                                  "vm.builtin.param_array_from_cache_by_name_unpacked";
                              std::vector<std::string> names;
                              names.reserve(static_cast<size_t>(n));
                              for (int32_t i = 0; i < n; ++i) {
                                names.push_back(string_arg(args[i], kName, i, "a name"));
                              }
                              return named(kName, [&] {
                                return tensor_array(builtin_tensor_cache().params_by_name(names));
                              });
                            }));
  return out;
}

}  // namespace detail
}  // namespace kiln::llm
