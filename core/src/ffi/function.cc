// SPDX-License-Identifier: Apache-2.0
#include "kiln/function.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <new>

#include "ffi/error_object.h"

namespace kiln {
namespace detail {

void raise_and_free(KilnError* error) { ffi::raise_plugin_error(error, {}); }

KilnError* error_from_current_exception(const std::string& context) {
  int32_t code = 1;
  std::string message;
  try {
    throw;
  } catch (const Error& e) {
    code = e.code();
    message = e.what();
  } catch (const std::bad_alloc&) {
    code = 8;
    message = "out of memory";
  } catch (const std::exception& e) {
    code = 5;
    message = e.what();
  } catch (...) {
    message = "unknown exception";
  }
  return ffi::new_error(code, context.empty() ? message : context + ": " + message);
}

}  // namespace detail

namespace {

// A Function whose body takes the packed arguments as Anys.
class PackedFunctionObj : public FunctionObj {
 public:
  using Body = std::function<Any(const Any*, int32_t)>;
  PackedFunctionObj(std::string name, Body body)
      : FunctionObj(KilnCallable{&PackedFunctionObj::invoke, nullptr}, {}, std::move(name)),
        body_(std::move(body)) {
    set_self(this);
  }
  const Body& body() const { return body_; }

 private:
  static KilnError* invoke(void* self, const KilnAny* args, int32_t num_args, KilnAny* ret) {
    auto* obj = static_cast<PackedFunctionObj*>(self);
    try {
      // Most calls (VM builtins, kernels) take a few arguments: those stay on the stack, so a
      // call allocates nothing of its own.
      constexpr int32_t kInline = 8;
      if (num_args <= kInline) {
        Any values[kInline];
        for (int32_t i = 0; i < num_args; ++i) values[i] = Any::from_abi(args[i]);
        detail::store_result(obj->body_(values, num_args), ret);
        return nullptr;
      }
      std::vector<Any> values;
      values.reserve(static_cast<size_t>(num_args));
      for (int32_t i = 0; i < num_args; ++i) values.push_back(Any::from_abi(args[i]));
      detail::store_result(obj->body_(values.data(), num_args), ret);
      return nullptr;
    } catch (...) {
      return detail::error_from_current_exception("");
    }
  }
  Body body_;
};

}  // namespace

Function Function::from_abi(KilnCallable callable, Ref<Object> keep_alive, std::string name) {
  return Function(make_object<FunctionObj>(callable, std::move(keep_alive), std::move(name)));
}

Function Function::from_packed(std::string name,
                               std::function<Any(const Any* args, int32_t num_args)> body) {
  return Function(Ref<FunctionObj>(new PackedFunctionObj(std::move(name), std::move(body))));
}

const Function::PackedBody* Function::packed_body() const {
  const auto* packed = dynamic_cast<const PackedFunctionObj*>(obj_.get());
  return packed != nullptr ? &packed->body() : nullptr;
}

Any Function::call_packed(const std::vector<Any>& args) const {
  std::vector<KilnAny> packed;
  packed.reserve(args.size());
  for (const Any& a : args) packed.push_back(a.to_abi());
  return call_abi(packed.data(), static_cast<int32_t>(packed.size()));
}

namespace registry {
namespace {
struct Registry {
  std::mutex mu;
  std::map<std::string, Function> functions;
};
Registry& instance() {
  static Registry* r = new Registry();  // never destroyed: globals may be used at exit
  return *r;
}
}  // namespace

void set(const std::string& name, Function f, bool allow_override) {
  Registry& r = instance();
  std::lock_guard<std::mutex> lock(r.mu);
  auto [it, inserted] = r.functions.try_emplace(name, f);
  if (!inserted) {
    if (!allow_override) {
      throw ValueError(fmt::format("global function '{}' is already registered", name));
    }
    it->second = std::move(f);
  }
}

std::optional<Function> get(const std::string& name) {
  Registry& r = instance();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.functions.find(name);
  if (it == r.functions.end()) return std::nullopt;
  return it->second;
}

Function require(const std::string& name) {
  if (auto f = get(name)) return *f;
  throw NotFoundError(fmt::format("no global function '{}' is registered", name));
}

bool remove(const std::string& name) {
  Registry& r = instance();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.functions.erase(name) > 0;
}

std::vector<std::string> names() {
  Registry& r = instance();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> out;
  for (const auto& [name, f] : r.functions) out.push_back(name);
  return out;
}

}  // namespace registry
}  // namespace kiln

namespace kiln::ffi {

void raise_plugin_error(KilnError* error, std::string_view context) {
  const int32_t code = error->code;
  std::string message =
      context.empty() ? std::move(error->message) : std::string(context) + ": " + error->message;
  delete error;
  throw_error(code, message);
}

std::string release_error(KilnError* error) noexcept {
  std::string message = std::move(error->message);
  delete error;
  return message;
}

}  // namespace kiln::ffi
