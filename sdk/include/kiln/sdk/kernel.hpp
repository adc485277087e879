// SPDX-License-Identifier: Apache-2.0
// Header-only C++ helpers for kernel-library authors.
//
//   void vector_add(DLTensor* a, DLTensor* b, DLTensor* out, double alpha) { ... }
//   KILN_EXPORT_FUNCTION(vector_add, vector_add);
//   KILN_KERNEL_LIBRARY("vector_add", "vector_add");
//
// KILN_EXPORT_FUNCTION wraps a typed C++ function in the packed calling convention: it checks
// the argument count and kinds, converts them, and turns a thrown exception into a KilnError
// (kiln::sdk::Error keeps its code; anything else becomes KILN_ERROR_RUNTIME).
// KILN_KERNEL_LIBRARY defines the one exported symbol, kiln_kernel_library.
#ifndef KILN_SDK_KERNEL_HPP_
#define KILN_SDK_KERNEL_HPP_

#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/c/kernel.h"
#include "kiln/sdk/any_cast.hpp"

namespace kiln::sdk {

// The environment the loader passed in; set before any exported function runs.
inline const KilnKernelEnv*& kernel_env() {
  static const KilnKernelEnv* env = nullptr;
  return env;
}

// Number of elements of `t`.
inline int64_t numel(const DLTensor* t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; ++i) n *= t->shape[i];
  return n;
}

// Throws a ValueError unless `t` holds `dtype` elements (e.g. {kDLFloat, 32, 1}).
inline void expect_dtype(const DLTensor* t, DLDataType dtype, const char* what) {
  if (t->dtype.code != dtype.code || t->dtype.bits != dtype.bits || t->dtype.lanes != dtype.lanes) {
    throw Error(KILN_ERROR_VALUE, std::string(what) + " has dtype " + dtype_name(t->dtype) +
                                      ", expected " + dtype_name(dtype));
  }
}

// Runs body(begin, end) over [begin, end) in chunks of at least `grain`, in parallel when
// the loader offers a parallel-for. The first exception a chunk throws is rethrown here.
template <typename Body>
void parallel_for(int64_t begin, int64_t end, int64_t grain, Body&& body) {
  const KilnKernelEnv* env = kernel_env();
  if (env == nullptr || env->parallel_for == nullptr || end - begin <= grain) {
    if (begin < end) body(begin, end);
    return;
  }
  struct Closure {
    std::remove_reference_t<Body>* body;  // Body is an lvalue reference for a named lambda
    std::mutex mu;
    std::exception_ptr first;
  } closure{&body, {}, nullptr};
  auto trampoline = [](void* c, int64_t b, int64_t e) -> KilnError* {
    auto* self = static_cast<Closure*>(c);
    try {
      (*self->body)(b, e);
    } catch (...) {
      std::lock_guard<std::mutex> lock(self->mu);
      if (!self->first) self->first = std::current_exception();
    }
    return nullptr;
  };
  KilnError* err = env->parallel_for(env->ctx, begin, end, grain, trampoline, &closure);
  if (closure.first) {
    if (err != nullptr) ForeignError discard(err);  // the chunk's exception says more
    std::rethrow_exception(closure.first);
  }
  if (err != nullptr) throw ForeignError(err);
}

namespace detail {

// Out of line and cold so that the packed wrappers keep a small stack frame.
[[noreturn, gnu::noinline, gnu::cold]] inline void throw_arity(int32_t expected, int32_t got) {
  throw Error(KILN_ERROR_TYPE,
              "expects " + std::to_string(expected) + " arguments, got " + std::to_string(got));
}

template <typename T>
struct FunctionTraits;
template <typename R, typename... A>
struct FunctionTraits<R (*)(A...)> {
  using Return = R;
  using Args = std::tuple<A...>;
  static constexpr int32_t kArity = sizeof...(A);
};

// The packed wrapper of a typed function `Fn` exported as `Name`.
template <auto Fn, const char* Name>
KilnError* packed(void*, const KilnAny* args, int32_t num_args, KilnAny* ret) {
  using Traits = FunctionTraits<decltype(Fn)>;
  try {
    if (num_args != Traits::kArity) [[unlikely]]
      throw_arity(Traits::kArity, num_args);
    [&]<size_t... I>(std::index_sequence<I...>) {
      if constexpr (std::is_void_v<typename Traits::Return>) {
        Fn(any_cast<std::tuple_element_t<I, typename Traits::Args>>(args[I], I)...);
      } else {
        any_store(ret, Fn(any_cast<std::tuple_element_t<I, typename Traits::Args>>(args[I], I)...));
      }
    }
    (std::make_index_sequence<Traits::kArity>{});
    return nullptr;
  } catch (...) {
    return error_from_current_exception(Name);
  }
}

inline std::vector<KilnKernelFunction>& registered_functions() {
  static std::vector<KilnKernelFunction> functions;
  return functions;
}

template <auto Fn>
std::string signature_of() {
  using Traits = FunctionTraits<decltype(Fn)>;
  std::string sig = "(";
  [&]<size_t... I>(std::index_sequence<I...>) {
    ((sig += (I == 0 ? "" : ", "),
      sig += TypeName<std::remove_cvref_t<std::tuple_element_t<I, typename Traits::Args>>>::kName),
     ...);
  }
  (std::make_index_sequence<Traits::kArity>{});
  sig += ") -> ";
  sig += TypeName<std::remove_cvref_t<typename Traits::Return>>::kName;
  return sig;
}

struct FunctionRegistrar {
  FunctionRegistrar(const char* name, KilnPackedFn fn, std::string signature) {
    static std::deque<std::string> signatures;  // a deque never moves its elements
    signatures.push_back(std::move(signature));
    registered_functions().push_back({name, fn, nullptr, signatures.back().c_str()});
  }
};

}  // namespace detail
}  // namespace kiln::sdk

// Exports the typed C++ function `fn` under `name` (an identifier).
#define KILN_EXPORT_FUNCTION(name, fn)                                                     \
  static constexpr char kiln_export_name_##name[] = #name;                                 \
  static const ::kiln::sdk::detail::FunctionRegistrar kiln_export_registrar_##name(        \
      kiln_export_name_##name, &::kiln::sdk::detail::packed<&fn, kiln_export_name_##name>, \
      ::kiln::sdk::detail::signature_of<&fn>())

// Defines the library's exported table. `entry` names the default function or is NULL.
#define KILN_KERNEL_LIBRARY(library_name, entry)                                                  \
  extern "C" KILN_EXPORT const KilnKernelLibrary* kiln_kernel_library(const KilnKernelEnv* env) { \
    /* An environment below its 1.0 layout cannot even make an error: NULL is the answer. */      \
    if (env == nullptr || env->struct_size < KILN_KERNEL_ENV_SIZE_1_0) return nullptr;            \
    ::kiln::sdk::kernel_env() = env;                                                              \
    ::kiln::sdk::error_factory() = {env->ctx, env->error_new, env->error_free};                   \
    static KilnKernelLibrary library = [] {                                                       \
      auto& fns = ::kiln::sdk::detail::registered_functions();                                    \
      KilnKernelLibrary lib{};                                                                    \
      lib.struct_size = sizeof(KilnKernelLibrary);                                                \
      lib.abi_major = KILN_ABI_VERSION_MAJOR;                                                     \
      lib.abi_minor = KILN_ABI_VERSION_MINOR;                                                     \
      lib.name = library_name;                                                                    \
      lib.entry_name = entry;                                                                     \
      lib.num_functions = static_cast<int32_t>(fns.size());                                       \
      lib.functions = fns.data();                                                                 \
      return lib;                                                                                 \
    }();                                                                                          \
    return &library;                                                                              \
  }

#endif  // KILN_SDK_KERNEL_HPP_
