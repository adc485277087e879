// SPDX-License-Identifier: Apache-2.0
// Intrusive reference counting for the core's heap objects (strings, tensors, functions,
// modules, plugins). An Object starts with a count of 0; Ref<T> adds and drops references.
#ifndef KILN_OBJECT_H_
#define KILN_OBJECT_H_

#include <atomic>
#include <cstdint>
#include <utility>

namespace kiln {

// Base of every reference-counted core object. Not copyable; deleted when the last Ref goes.
class Object {
 public:
  Object() = default;
  Object(const Object&) = delete;
  Object& operator=(const Object&) = delete;
  virtual ~Object() = default;

  void retain() const { refs_.fetch_add(1, std::memory_order_relaxed); }
  void release() const {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
  int32_t use_count() const { return refs_.load(std::memory_order_relaxed); }
  // A short name of the object's kind for messages ("vm.Array", "vm.Closure", ...).
  virtual const char* type_key() const { return "object"; }

 private:
  mutable std::atomic<int32_t> refs_{0};
};

// A strong reference to a T derived from Object. Null by default.
template <typename T>
class Ref {
 public:
  Ref() = default;
  Ref(std::nullptr_t) {}  // NOLINT: implicit null
  explicit Ref(T* ptr) : ptr_(ptr) {
    if (ptr_ != nullptr) ptr_->retain();
  }
  Ref(const Ref& other) : Ref(other.ptr_) {}
  Ref(Ref&& other) noexcept : ptr_(std::exchange(other.ptr_, nullptr)) {}
  template <typename U>
  Ref(const Ref<U>& other) : Ref(static_cast<T*>(other.get())) {}  // NOLINT: upcast
  ~Ref() {
    if (ptr_ != nullptr) ptr_->release();
  }
  Ref& operator=(Ref other) noexcept {
    std::swap(ptr_, other.ptr_);
    return *this;
  }

  // Takes over a reference the caller already holds (no retain).
  static Ref adopt(T* ptr) {
    Ref r;
    r.ptr_ = ptr;
    return r;
  }
  // Gives up the reference without releasing it.
  T* detach() { return std::exchange(ptr_, nullptr); }

  T* get() const { return ptr_; }
  T* operator->() const { return ptr_; }
  T& operator*() const { return *ptr_; }
  explicit operator bool() const { return ptr_ != nullptr; }
  bool operator==(const Ref& other) const { return ptr_ == other.ptr_; }

 private:
  T* ptr_ = nullptr;
};

// Allocates a T and returns the first reference to it.
template <typename T, typename... Args>
Ref<T> make_object(Args&&... args) {
  return Ref<T>(new T(std::forward<Args>(args)...));
}

}  // namespace kiln

#endif  // KILN_OBJECT_H_
