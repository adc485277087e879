// SPDX-License-Identifier: Apache-2.0
#include "rpc/session_server.h"

#include <fmt/format.h>

#include <sys/stat.h>
#include <algorithm>
#include <atomic>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "kiln/detail/cancellation.h"
#include "kiln/error.h"
#include "kiln/evaluator.h"
#include "kiln/held_tensors.h"
#include "kiln/logging.h"
#include "kiln/module.h"
#include "kiln/rpc/rpc_error.h"
#include "kiln/sdk/error.hpp"
#include "kiln/sdk/support/atomic_file.hpp"
#include "kiln/tensor.h"
#include "kiln/vm/virtual_machine.h"
#include "rpc/diagnostic_functions.h"
#include "rpc/evaluation_bounds.h"
#include "rpc/hangup_watcher.h"
#include "rpc/protocol.h"
#include "rpc/remote_objects.h"
#include "vm/allocator.h"
#include "vm/memory_budget.h"

namespace kiln::rpc {

namespace fs = std::filesystem;
using wire::Code;
using wire::Tag;

// Whether `resolved` (symlinks resolved) lies inside the canonical directory `root`.
bool lies_inside(const fs::path& root, const fs::path& resolved) {
  const auto [root_end, ignored] =
      std::mismatch(root.begin(), root.end(), resolved.begin(), resolved.end());
  return root_end == root.end();
}

fs::path sandboxed_path(const fs::path& root, const std::string& relative) {
  if (relative.find('\0') != std::string::npos) {
    throw ValueError("path contains a NUL byte");
  }
  const fs::path p(relative);
  if (p.is_absolute()) {
    throw ValueError(fmt::format(
        "'{}' is an absolute path; paths are relative to the session's work directory", relative));
  }
  for (const auto& part : p) {
    if (part == "..") {
      throw ValueError(
          fmt::format("'{}' leaves the session's work directory ('..' is not allowed)", relative));
    }
  }
  fs::path canonical_root, resolved;
  try {
    canonical_root = fs::canonical(root);
    resolved = fs::weakly_canonical(canonical_root / p);
  } catch (const fs::filesystem_error& e) {
    // Its what() names the absolute paths: only the client's own path is told.
    throw ValueError(fmt::format("cannot resolve '{}' in the session's work directory: {}",
                                 relative, e.code().message()));
  }
  if (!lies_inside(canonical_root, resolved)) {
    throw ValueError(fmt::format("'{}' leads out of the session's work directory", relative));
  }
  return resolved;
}

namespace {

constexpr uint64_t kStagingBytes = 4ull << 20;
constexpr auto kPrivateDir = fs::perms::owner_all;
// The slowest a client may take a reply or send a request's data (Connection::
// set_min_throughput): a message gets the write (idle) timeout plus 1 s per MiB.
constexpr uint64_t kMinSessionBytesPerSecond = 1ull << 20;

// The global function `name` as a session of `state` serves it: the application's (the global
// registry) under any name, else one of Kiln's own that the server offers. Kiln's own are told
// apart by where they come from, not by their names: they are never in the registry.
std::optional<Function> served_function(const SessionState& state, const std::string& name) {
  if (auto f = registry::get(name)) return f;
  if (state.enable_test_functions) return diagnostic_function(name);
  if (state.enable_echo && name == kEchoFunctionName) return echo_function();
  return std::nullopt;
}

// What a session is charged for one storage its handles keep alive: the object that owns the
// memory (the key: each storage is counted once however many handles, views and tuples refer
// to it) and the memory's full size, never a view's.
struct StorageCharge {
  const void* key = nullptr;
  uint64_t bytes = 0;
};

// The bytes tensor `t` spans from its memory's start (saturating: a shape cannot wrap it).
uint64_t extent_of(const TensorObj& t) {
  uint64_t n = t.dl.dtype.bits == 0 ? 0 : (uint64_t{t.dl.dtype.bits} * t.dl.dtype.lanes + 7) / 8;
  for (int64_t d : t.shape) {
    const auto extent = static_cast<uint64_t>(std::max<int64_t>(d, 0));
    n = extent != 0 && n > UINT64_MAX / extent ? UINT64_MAX : n * extent;
  }
  return n > UINT64_MAX - t.dl.byte_offset ? UINT64_MAX : n + t.dl.byte_offset;
}

// The storage behind `t`: views (of views) lead to the object that owns the memory. A VM
// storage has its own size — nothing when its allocator charges `budget` already (the session's
// VMs charge their allocations as they make them). Other owners (Alloc's memory, a backend's,
// a DLPack producer's) are sized by the tensor that refers to them directly: every core path
// that allocates makes that tensor span the whole allocation. A view of memory nobody owns
// here is charged what it spans.
StorageCharge storage_of(const Tensor& t, const vm::MemoryBudget* budget) {
  const TensorObj* owner = t.get();
  const Object* o = owner;
  while (const auto* tensor = dynamic_cast<const TensorObj*>(o)) {
    owner = tensor;
    if (!tensor->storage) {
      return {tensor->dl.data != nullptr ? tensor->dl.data : tensor, extent_of(*tensor)};
    }
    o = tensor->storage.get();
  }
  if (const auto* storage = dynamic_cast<const vm::StorageObj*>(o)) {
    return {storage, vm::charged_to(*storage, budget) ? 0 : storage->size()};
  }
  return {o, extent_of(*owner)};
}

// One server-side object a client holds a handle to.
struct Entry {
  enum class Kind { kBuffer, kFunction, kModule, kObject } kind = Kind::kObject;
  Tensor buffer{};  // kBuffer: keeps the memory alive
  Function function{};
  Module module{};
  Any object{};
  // The storages counted for it in SessionServer::held_: a buffer's, or those an object (a VM
  // tuple, storage or closure) keeps alive, each once per time it refers to them.
  std::vector<const void*> storages{};

  // The memory of a buffer: its base address (as the backend allocated it), size and device.
  void* base() const { return buffer.dl()->data; }
  uint64_t size() const { return buffer.dl()->byte_offset + buffer.nbytes(); }
  Device device() const { return buffer.device(); }
};

class SessionServer {
 public:
  // `work_dir` exists and is canonical.
  SessionServer(SessionState& state, fs::path work_dir, Runtime& runtime)
      : state_(state), conn_(*state.conn), work_dir_(std::move(work_dir)), runtime_(runtime) {}

  // Returns why the session ended.
  std::string serve() {
    // Calls on this thread (time evaluators, functions that poll rpc::call_cancelled()) see
    // the session's end: its timeout, a server that stops, or a client that hung up.
    const kiln::detail::CancellationScope cancellation(state_.cancelled);
    const HangupWatcher hangup(conn_.fd(), state_.cancelled);
    conn_.set_timeouts(state_.idle_timeout, state_.write_timeout);
    conn_.set_min_throughput(kMinSessionBytesPerSecond);
    while (true) {
      Connection::FrameHeader h;
      try {
        h = conn_.read_frame_header(UINT64_MAX >> 1);
      } catch (const ConnectionError& e) {
        return e.closed() ? "the client closed the connection" : e.what();
      }
      if (h.code == static_cast<uint32_t>(Code::kShutdown)) return "the client ended it";
      if (!wire::is_known_request(h.code)) {
        throw wire::ProtocolError(fmt::format("unknown request code {}", h.code));
      }
      const auto code = static_cast<Code>(h.code);
      if (code != Code::kCopyToRemote && code != Code::kUpload &&
          h.length > wire::kMaxMessageBytes) {
        throw wire::ProtocolError(fmt::format("a {} message of {} bytes exceeds the limit of {}",
                                              wire::code_name(code), h.length,
                                              wire::kMaxMessageBytes));
      }
      handle(code, h.body_length());
    }
  }

 private:
  void handle(Code code, uint64_t body_length) {
    const char* what = wire::code_name(code);
    // Streaming requests read their own fixed header, then the payload.
    if (code == Code::kCopyToRemote) return copy_to_remote(body_length);
    if (code == Code::kUpload) return upload(body_length);
    conn_.read_body(body_length, body_, what);
    wire::Reader r(body_.data(), body_.size(), what);
    if (code == Code::kFreeHandle) {
      const uint64_t handle = r.u64("handle");
      r.finish();
      auto it = handles_.find(handle);
      if (it == handles_.end()) {
        log(LogLevel::kDebug, "rpc", fmt::format("FreeHandle of unknown handle {}", handle));
        return;
      }
      forget(it->second);
      handles_.erase(it);
      return;
    }
    std::vector<Any> result;
    try {
      switch (code) {
        case Code::kGetGlobalFunc: {
          const std::string name = r.str("name", wire::kMaxPathBytes);
          r.finish();
          auto f = served_function(state_, name);
          if (!f) throw NotFoundError(fmt::format("no global function '{}' on the server", name));
          result.push_back(*f);
          break;
        }
        case Code::kCallFunc:
          result.push_back(call(r));
          break;
        case Code::kDeviceCount: {
          const int32_t type = r.i32("type");
          r.finish();
          std::string why;
          int32_t count = 0;
          Ref<DeviceBackend> backend;
          if (type >= 0 && type < kRemoteDeviceMask) backend = runtime_.find_backend(type);
          if (backend) {
            count = backend->device_count(&why);
          } else {
            why = fmt::format("the server has no backend for device type {}", type);
          }
          result = {Any(count), Any(why)};
          break;
        }
        case Code::kDeviceAttributes: {
          const Device d = local_device(r.device("device"));
          r.finish();
          for (auto& [key, value] : runtime_.backend(d.type)->attributes(d.id)) {
            result.emplace_back(key);
            result.push_back(std::move(value));
          }
          break;
        }
        case Code::kAlloc: {
          const Device d = local_device(r.device("device"));
          const uint64_t nbytes = r.u64("nbytes");
          r.u64("alignment");  // the server's allocator aligns to at least 64 bytes
          r.finish();
          // The size is a length from the network too: bounded before allocating.
          check_memory(nbytes);
          if (nbytes > static_cast<uint64_t>(INT64_MAX)) {
            throw OutOfMemoryError(fmt::format("cannot allocate {} bytes", nbytes));
          }
          Tensor t = Tensor::empty({static_cast<int64_t>(nbytes)}, DataType::UInt(8), d, runtime_);
          const uint64_t handle = add_buffer(t);
          result.emplace_back(static_cast<int64_t>(handle));
          break;
        }
        case Code::kCopyFromRemote:
          return copy_from_remote(r);
        case Code::kCopyOnRemote:
          copy_on_remote(r);
          break;
        case Code::kSynchronize: {
          const Device d = local_device(r.device("device"));
          r.finish();
          runtime_.backend(d.type)->synchronize(d.id);
          break;
        }
        case Code::kDownload:
          return download(r);
        case Code::kRemove: {
          const std::string relative = r.str("path", wire::kMaxPathBytes);
          r.finish();
          with_relative_paths([&] {
            const fs::path p = sandboxed_path(work_dir_, relative);
            // Never the work directory itself (rpc_run removes "" as TVM does: a no-op).
            if (p != work_dir_) {
              std::error_code ec;
              fs::remove_all(p, ec);
            }
          });
          break;
        }
        case Code::kListDir: {
          const std::string relative = r.str("path", wire::kMaxPathBytes);
          r.finish();
          with_relative_paths([&] {
            const fs::path p = sandboxed_path(work_dir_, relative);
            if (!fs::is_directory(p)) {
              throw NotFoundError(fmt::format("'{}' is not a directory of the session",
                                              fs::relative(p, work_dir_).string()));
            }
            std::vector<std::string> names;
            for (const auto& e : fs::directory_iterator(p)) {
              names.push_back(e.path().filename().string() + (e.is_directory() ? "/" : ""));
            }
            std::sort(names.begin(), names.end());
            for (auto& n : names) result.emplace_back(std::move(n));
          });
          break;
        }
        case Code::kLoadModule: {
          const std::string relative = r.str("path", wire::kMaxPathBytes);
          r.finish();
          with_relative_paths([&] {
            const fs::path p = sandboxed_path(work_dir_, relative);
            if (!fs::is_regular_file(p)) {
              throw NotFoundError(
                  fmt::format("no file '{}' in the session's work directory", relative));
            }
            Module m = load_sandboxed_module(p);
            result.push_back(Any(m));
            result.emplace_back(m.entry_name());
          });
          break;
        }
        case Code::kModuleGetFunction: {
          Entry& e = entry(r.u64("module"), Entry::Kind::kModule, "module");
          const std::string name = r.str("name", wire::kMaxPathBytes);
          r.finish();
          result.push_back(e.module.get_function(name));
          break;
        }
        case Code::kTimeEvaluator: {
          Entry& e = entry(r.u64("function"), Entry::Kind::kFunction, "function");
          const Device d = local_device(r.device("device"));
          TimeEvaluatorOptions options = decode_evaluator_options(r);
          r.finish();
          // Options whose plan cannot finish within the session are refused here; for the
          // rest the evaluator polls the session's cancellation (serve() installs it).
          check_evaluation_bounds(options, {.session_timeout_s = state_.timeout_s,
                                            .max_memory_bytes = state_.max_memory_bytes});
          auto evaluator = std::make_shared<TimeEvaluator>(e.function, d, options, runtime_);
          result.push_back(Function::from_packed(
              "time_evaluator:" + e.function.name(), [evaluator](const Any* args, int32_t n) {
                return Any(
                    benchmark_result_to_wire((*evaluator)(std::vector<Any>(args, args + n))));
              }));
          break;
        }
        default:
          throw wire::ProtocolError(fmt::format("request {} is not served", what));
      }
    } catch (const wire::ProtocolError&) {
      throw;
    } catch (const ConnectionError&) {
      throw;
    } catch (const Error& e) {
      return send_exception(e.code(), e.what());
    } catch (const std::exception& e) {
      return send_exception(KILN_ERROR_RUNTIME, e.what());
    }
    send_return(result);
  }

  // ---- values ----

  Device local_device(Device d) const {
    if (d.type >= kRemoteDeviceMask) {
      throw ValueError(fmt::format("device type {} is not a device of this server", d.type));
    }
    return d;
  }

  Entry& entry(uint64_t handle, Entry::Kind kind, const char* what) {
    auto it = handles_.find(handle);
    if (it == handles_.end() || it->second.kind != kind) {
      throw ValueError(fmt::format("{} is not a {} handle of this session", handle, what));
    }
    return it->second;
  }

  uint64_t add(Entry e) {
    if (state_.max_handles > 0 && handles_.size() >= state_.max_handles) {
      throw OutOfMemoryError(fmt::format(
          "the session already holds {} handles, its limit (the server's --max-handles); free "
          "some first",
          handles_.size()));
    }
    const uint64_t h = next_handle_++;
    handles_.emplace(h, std::move(e));
    return h;
  }

  // Throws when holding `nbytes` more would pass the session's memory limit.
  void check_memory(uint64_t nbytes) const {
    if (!budget_->fits(nbytes)) {
      throw OutOfMemoryError(fmt::format(
          "allocating {} bytes would exceed the session's memory limit of {} bytes ({} held; the "
          "server's --max-session-memory)",
          nbytes, budget_->limit(), budget_->used()));
    }
  }

  // Counts storage `c` once more against the memory limit: its bytes the first time (more if
  // it shows a larger size than before). OutOfMemoryError, counting nothing, when they would
  // pass the limit.
  const void* hold(const StorageCharge& c) {
    auto it = held_.find(c.key);
    if (it == held_.end()) {
      budget_->charge(c.bytes, "holding");
      it = held_.emplace(c.key, Held{0, c.bytes}).first;
    } else if (c.bytes > it->second.bytes) {
      budget_->charge(c.bytes - it->second.bytes, "holding");
      it->second.bytes = c.bytes;
    }
    ++it->second.refs;
    return c.key;
  }

  // Undoes one hold() of `storage`.
  void release(const void* storage) {
    auto it = held_.find(storage);
    if (it != held_.end() && --it->second.refs == 0) {
      budget_->refund(it->second.bytes);
      held_.erase(it);
    }
  }

  // Holds every storage of `charges`, all or none.
  std::vector<const void*> hold_all(const std::vector<StorageCharge>& charges) {
    std::vector<const void*> held;
    try {
      for (const StorageCharge& c : charges) held.push_back(hold(c));
    } catch (...) {
      for (const void* storage : held) release(storage);
      throw;
    }
    return held;
  }

  // Every tensor that enters the handle table is counted against the memory limit by its
  // storage, once, by the storage's full size, whoever allocated it (an Alloc, or a function
  // that returned a tensor or a view of any size into a larger storage).
  uint64_t add_buffer(const Tensor& t) {
    std::vector<const void*> held = hold_all({storage_of(t, budget_.get())});
    try {
      return add({.kind = Entry::Kind::kBuffer, .buffer = t, .storages = held});
    } catch (...) {
      for (const void* storage : held) release(storage);
      throw;
    }
  }

  // An object is counted by every storage it keeps alive (collect_storages), as if each had
  // been returned on its own; one the session cannot measure is refused (ValueError).
  uint64_t add_object(const Any& v) {
    std::vector<StorageCharge> charges;
    std::unordered_set<const Object*> visited;
    std::vector<size_t> path;
    collect_storages(v, charges, visited, path);
    std::vector<const void*> held = hold_all(charges);
    try {
      return add({.kind = Entry::Kind::kObject, .object = v, .storages = held});
    } catch (...) {
      for (const void* storage : held) release(storage);
      throw;
    }
  }

  // "the returned value" or "element [1][0] of the returned value", for errors.
  static std::string value_at(const std::vector<size_t>& path) {
    if (path.empty()) return "the returned value";
    std::string at = "element ";
    for (size_t i : path) at += fmt::format("[{}]", i);
    return at + " of the returned value";
  }

  // The storages `v` keeps alive, each time it refers to one: a tensor's (by its storage), a
  // bare VM storage, and those inside VM tuples and closures (captured values, wrapped
  // closures), nested; each tuple or closure is walked once (a program can share them into a
  // DAG with exponentially many paths). Plain values, devices, functions and modules keep no
  // storage of their own (a VM module's allocations are charged as its VM makes them).
  // ValueError for what cannot cross the wire or cannot be measured: a raw pointer
  // (KILN_TYPE_OPAQUE, such as the VM context), an object of another kind, a nesting past the
  // VM's own limit. `path`: where in `v` the walk is, for errors.
  void collect_storages(const Any& v, std::vector<StorageCharge>& out,
                        std::unordered_set<const Object*>& visited, std::vector<size_t>& path) {
    if (v.type_code() == KILN_TYPE_TENSOR) {
      out.push_back(storage_of(v.cast<Tensor>(), budget_.get()));
      return;
    }
    if (v.type_code() == KILN_TYPE_OPAQUE) throw_raw_pointer(path);
    if (v.type_code() != kTypeObject) return;
    const Object* o = v.object();
    if (!visited.insert(o).second) return;
    if (path.size() > static_cast<size_t>(vm::kMaxValueNesting)) {
      throw ValueError(
          fmt::format("{} nests more than {} deep: the session cannot measure the memory it holds",
                      value_at(path), vm::kMaxValueNesting));
    }
    const auto walk = [&](const std::vector<Any>& items) {
      for (size_t i = 0; i < items.size(); ++i) {
        path.push_back(i);
        collect_storages(items[i], out, visited, path);
        path.pop_back();
      }
    };
    if (const auto* storage = dynamic_cast<const vm::StorageObj*>(o)) {
      out.push_back(
          {storage, vm::charged_to(*storage, budget_.get()) ? 0 : uint64_t{storage->size()}});
    } else if (const auto* array = dynamic_cast<const vm::ArrayObj*>(o)) {
      walk(array->items);
    } else if (const auto* closure = dynamic_cast<const vm::ClosureObj*>(o)) {
      walk(closure->captured);
      walk({closure->wrapped});
    } else if (const auto* holder = dynamic_cast<const HeldTensors*>(o)) {
      // An object that owns tensors it does not expose (an LLM's KV cache: its pages).
      std::unordered_set<const void*> counted;
      for (const Tensor& t : holder->held_tensors()) {
        StorageCharge charge = storage_of(t, budget_.get());
        if (counted.insert(charge.key).second) out.push_back(charge);
      }
    } else {
      throw ValueError(fmt::format(
          "{} is a {}, which cannot cross the wire: the session cannot measure the memory it "
          "holds",
          value_at(path), o->type_key()));
    }
  }

  [[noreturn]] static void throw_raw_pointer(const std::vector<size_t>& path) {
    throw ValueError(fmt::format(
        "{} is a raw pointer (an opaque handle, such as the VM context %vm), which cannot cross "
        "the wire: only objects the session holds do",
        value_at(path)));
  }

  // Stops counting what `e` held (its handle is going).
  void forget(const Entry& e) {
    for (const void* storage : e.storages) release(storage);
  }

  // The memory [offset, offset + n) of buffer `handle`, checked.
  Entry& buffer_range(uint64_t handle, uint64_t offset, uint64_t n) {
    Entry& e = entry(handle, Entry::Kind::kBuffer, "memory");
    if (offset > e.size() || n > e.size() - offset) {
      throw IndexError(fmt::format("bytes [{}, {}) are outside the {} bytes of memory handle {}",
                                   offset, offset + n, e.size(), handle));
    }
    return e;
  }

  Any decode(wire::Reader& r) {
    const auto tag = static_cast<Tag>(r.u8("tag"));
    Any plain;
    if (wire::decode_plain_value(r, tag, plain)) return plain;
    switch (tag) {
      case Tag::kDevice:
        return Any(local_device(r.device("device")));
      case Tag::kTensor: {
        const wire::TensorHeader h = wire::read_tensor_header(r);
        const Device device = local_device(h.device);
        Entry& e = buffer_range(h.handle, h.byte_offset, h.nbytes);
        if (e.device() != device) {
          throw ValueError(fmt::format("tensor argument on {} refers to memory on {}", device.str(),
                                       e.device().str()));
        }
        return Any(Tensor(wire::make_tensor(h, e.base(), device, Ref<Object>(e.buffer.get()),
                                            e.buffer.get()->backend)));
      }
      case Tag::kFunction:
        return Any(entry(r.u64("handle"), Entry::Kind::kFunction, "function").function);
      case Tag::kModule:
        return Any(entry(r.u64("handle"), Entry::Kind::kModule, "module").module);
      case Tag::kObject:
        return entry(r.u64("handle"), Entry::Kind::kObject, "object").object;
      default:
        break;
    }
    r.fail("tag", fmt::format("unknown value tag {}", static_cast<int>(tag)));
  }

  void encode(wire::Writer& w, const Any& v) {
    // Nothing the client's reader would refuse (wire::read_tensor_header, decode_plain_value):
    // a reply it cannot read would end the session.
    if (v.type_code() == KILN_TYPE_SHAPE &&
        v.cast<std::vector<int64_t>>().size() > wire::kMaxNdim) {
      throw ValueError(fmt::format("a shape of more than {} dimensions cannot be returned over RPC",
                                   wire::kMaxNdim));
    }
    if (v.type_code() == KILN_TYPE_DTYPE) check_wire_dtype(v.cast<DataType>());
    if (wire::encode_plain_value(w, v)) return;
    switch (v.type_code()) {
      case KILN_TYPE_DEVICE:
        w.u8(static_cast<uint8_t>(Tag::kDevice));
        w.device(v.cast<Device>());
        return;
      case KILN_TYPE_TENSOR: {
        const Tensor t = v.cast<Tensor>();
        if (!t.is_contiguous()) throw ValueError("a strided tensor cannot be returned over RPC");
        if (t.ndim() > static_cast<int64_t>(wire::kMaxNdim)) {
          throw ValueError(fmt::format(
              "a tensor of more than {} dimensions cannot be returned over RPC", wire::kMaxNdim));
        }
        check_wire_dtype(t.dtype());
        wire::write_tensor_header(w, add_buffer(t), *t.dl());
        return;
      }
      case KILN_TYPE_FUNCTION:
        return write_handle(w, Tag::kFunction,
                            {.kind = Entry::Kind::kFunction, .function = v.cast<Function>()});
      case kTypeModule:
        return write_handle(w, Tag::kModule,
                            {.kind = Entry::Kind::kModule, .module = v.cast<Module>()});
      case KILN_TYPE_OPAQUE:
        throw_raw_pointer({});
      default:
        w.u8(static_cast<uint8_t>(Tag::kObject));
        w.u64(add_object(v));
        return;
    }
  }

  // ValueError for a dtype the wire has no form for (0 bits or lanes: the void dtype).
  static void check_wire_dtype(DataType dtype) {
    if (dtype.bits == 0 || dtype.lanes == 0) {
      throw ValueError(
          fmt::format("a value of dtype {} (no bits) cannot be returned over RPC", dtype.str()));
    }
  }

  // Keeps `e` in the handle table and writes its handle as a `tag` value.
  void write_handle(wire::Writer& w, Tag tag, Entry e) {
    w.u8(static_cast<uint8_t>(tag));
    w.u64(add(std::move(e)));
  }

  Any call(wire::Reader& r) {
    Entry& e = entry(r.u64("handle"), Entry::Kind::kFunction, "function");
    const Function f = e.function;  // the call may free handles
    const uint32_t n = r.u32("count");
    if (n > wire::kMaxValues) r.fail("count", "too many arguments");
    std::vector<Any> args;
    args.reserve(n);
    for (uint32_t i = 0; i < n; ++i) args.push_back(decode(r));
    r.finish();
    return f.call_packed(args);
  }

  // ---- replies ----

  void send_return(const std::vector<Any>& values) {
    reply_.clear();
    wire::Writer w(reply_);
    w.u32(static_cast<uint32_t>(values.size()));
    try {
      for (const Any& v : values) encode(w, v);
    } catch (const Error& e) {
      return send_exception(e.code(), e.what());
    }
    std::lock_guard lock(state_.write_mu);
    conn_.write_frame(Code::kReturn, reply_);
  }

  void send_exception(int32_t code, const std::string& message) {
    reply_.clear();
    wire::Writer w(reply_);
    w.i32(code);
    w.str(message.substr(0, wire::kMaxMessageBytes / 2));
    std::lock_guard lock(state_.write_mu);
    conn_.write_frame(Code::kException, reply_);
  }

  // ---- copies and files ----

  bool host_memory(const Entry& e) const { return e.device().type == kDLCPU; }

  void copy_to_remote(uint64_t body_length) {
    struct {
      uint64_t handle, offset, nbytes;
    } h{};
    if (body_length < sizeof(h)) {
      throw wire::ProtocolError(
          fmt::format("CopyToRemote frame of {} bytes is too short", body_length));
    }
    conn_.read_exact(&h, sizeof(h), "CopyToRemote header");
    if (body_length - sizeof(h) != h.nbytes) {
      throw wire::ProtocolError(fmt::format("CopyToRemote states {} bytes but its frame carries {}",
                                            h.nbytes, body_length - sizeof(h)));
    }
    Entry* e = nullptr;
    try {
      e = &buffer_range(h.handle, h.offset, h.nbytes);
    } catch (const Error& err) {
      conn_.skip(h.nbytes, "CopyToRemote data");  // stay in step with the stream
      return send_exception(err.code(), err.what());
    }
    if (host_memory(*e)) {
      conn_.read_exact(static_cast<uint8_t*>(e->base()) + h.offset, h.nbytes, "CopyToRemote data");
    } else {
      auto backend = runtime_.backend(e->device().type);
      std::vector<uint8_t>& staging = staging_buffer();
      uint64_t done = 0;
      std::string error;
      while (done < h.nbytes) {
        const uint64_t n = std::min<uint64_t>(staging.size(), h.nbytes - done);
        conn_.read_exact(staging.data(), n, "CopyToRemote data");
        if (error.empty()) {
          try {
            backend->copy_to_device(e->device().id, staging.data(), e->base(), h.offset + done, n);
            backend->synchronize(e->device().id);  // the staging buffer is reused
          } catch (const Error& err) {
            error = err.what();
          }
        }
        done += n;
      }
      if (!error.empty()) return send_exception(KILN_ERROR_RUNTIME, error);
    }
    send_return({});
  }

  void copy_from_remote(wire::Reader& r) {
    const uint64_t handle = r.u64("handle");
    const uint64_t offset = r.u64("offset");
    const uint64_t nbytes = r.u64("nbytes");
    r.finish();
    Entry* e = nullptr;
    try {
      e = &buffer_range(handle, offset, nbytes);
      if (!host_memory(*e)) runtime_.backend(e->device().type)->synchronize(e->device().id);
    } catch (const Error& err) {
      return send_exception(err.code(), err.what());
    }
    std::lock_guard lock(state_.write_mu);
    if (host_memory(*e)) {
      // Header and data in one sendmsg: the header does not go out as a segment of its own.
      conn_.write_frame(Code::kData, {}, static_cast<uint8_t*>(e->base()) + offset, nbytes);
      return;
    }
    conn_.write_frame_start(Code::kData, {}, nbytes);
    // Once the header is out, a failing device copy can only end the session.
    auto backend = runtime_.backend(e->device().type);
    std::vector<uint8_t>& staging = staging_buffer();
    for (uint64_t done = 0; done < nbytes;) {
      const uint64_t n = std::min<uint64_t>(staging.size(), nbytes - done);
      backend->copy_to_host(e->device().id, e->base(), offset + done, staging.data(), n);
      backend->synchronize(e->device().id);
      conn_.write_all(staging.data(), n);
      done += n;
    }
  }

  void copy_on_remote(wire::Reader& r) {
    const uint64_t src = r.u64("src");
    const uint64_t src_offset = r.u64("src_offset");
    const uint64_t dst = r.u64("dst");
    const uint64_t dst_offset = r.u64("dst_offset");
    const uint64_t nbytes = r.u64("nbytes");
    r.finish();
    Entry& s = buffer_range(src, src_offset, nbytes);
    Entry& d = buffer_range(dst, dst_offset, nbytes);
    if (s.device() != d.device()) {
      throw ValueError(fmt::format("copy between devices {} and {}: copy through the host",
                                   s.device().str(), d.device().str()));
    }
    auto backend = runtime_.backend(s.device().type);
    backend->copy_on_device(s.device().id, s.base(), src_offset, d.base(), dst_offset, nbytes);
    backend->synchronize(s.device().id);
  }

  void upload(uint64_t body_length) {
    uint64_t path_len = 0;
    if (body_length < 16) throw wire::ProtocolError("Upload frame is too short");
    conn_.read_exact(&path_len, 8, "Upload path length");
    if (path_len > wire::kMaxPathBytes || path_len > body_length - 16) {
      throw wire::ProtocolError(fmt::format("Upload path of {} bytes is too long", path_len));
    }
    std::string relative(path_len, '\0');
    conn_.read_exact(relative.data(), path_len, "Upload path");
    uint64_t nbytes = 0;
    conn_.read_exact(&nbytes, 8, "Upload size");
    if (body_length - 16 - path_len != nbytes) {
      throw wire::ProtocolError(fmt::format("Upload states {} bytes but its frame carries {}",
                                            nbytes, body_length - 16 - path_len));
    }
    std::string error;
    int32_t error_code = KILN_ERROR_RUNTIME;
    const uint64_t limit = state_.max_upload_bytes;
    if (limit > 0 && (nbytes > limit || uploaded_bytes_ > limit - nbytes)) {
      error = fmt::format(
          "uploading {} bytes would exceed the session's upload limit of {} bytes ({} uploaded; "
          "the server's --max-upload-bytes)",
          nbytes, limit, uploaded_bytes_);
      error_code = KILN_ERROR_OUT_OF_MEMORY;
    } else {
      uploaded_bytes_ += nbytes;
    }
    // The one atomic writer: a temporary file beside the target, renamed over it once every
    // byte arrived; removed when anything fails, so a failed upload leaves nothing behind.
    std::optional<sdk::AtomicFile> file;
    try {
      if (!error.empty()) throw OutOfMemoryError(error);
      if (relative.empty()) throw ValueError("Upload needs a file name");
      const fs::path target = sandboxed_path(work_dir_, relative);
      make_private_dirs(target.parent_path());
      if (fs::is_directory(target)) throw ValueError(fmt::format("'{}' is a directory", relative));
      file.emplace(target);
      // Before any byte is written: session files are the session's alone.
      if (::fchmod(file->open(), S_IRUSR | S_IWUSR) != 0) {
        throw RuntimeError(fmt::format("cannot make '{}' private on the server: {}", relative,
                                       std::strerror(errno)));
      }
    } catch (const Error& e) {
      error = relative_paths(e.what());
      error_code = e.code();
    } catch (const sdk::Error& e) {
      error =
          fmt::format("cannot write '{}' on the server: {}", relative, relative_paths(e.what()));
    } catch (const std::exception& e) {
      error =
          fmt::format("cannot write '{}' on the server: {}", relative, relative_paths(e.what()));
    }
    std::vector<uint8_t>& chunk = staging_buffer();
    for (uint64_t done = 0; done < nbytes;) {
      const uint64_t n = std::min<uint64_t>(chunk.size(), nbytes - done);
      conn_.read_exact(chunk.data(), n, "Upload data");
      if (error.empty()) {
        try {
          file->write(chunk.data(), n);
        } catch (const sdk::Error& e) {
          error = fmt::format("writing '{}' on the server failed: {}", relative,
                              relative_paths(e.what()));
        }
      }
      done += n;
    }
    if (error.empty()) {
      try {
        file->commit();
      } catch (const sdk::Error& e) {
        error =
            fmt::format("cannot store '{}' on the server: {}", relative, relative_paths(e.what()));
      }
    }
    if (!error.empty()) {
      file.reset();  // removes the temporary file
      return send_exception(error_code, error);
    }
    send_return({});
  }

  void download(wire::Reader& r) {
    const std::string relative = r.str("path", wire::kMaxPathBytes);
    r.finish();
    std::ifstream in;
    uint64_t size = 0;
    try {
      with_relative_paths([&] {
        const fs::path p = sandboxed_path(work_dir_, relative);
        if (!fs::is_regular_file(p)) {
          throw NotFoundError(
              fmt::format("no file '{}' in the session's work directory", relative));
        }
        size = fs::file_size(p);
        in.open(p, std::ios::binary);
        if (!in) throw RuntimeError(fmt::format("cannot read '{}' on the server", relative));
      });
    } catch (const Error& e) {
      return send_exception(e.code(), e.what());
    }
    std::lock_guard lock(state_.write_mu);
    conn_.write_frame_start(Code::kData, {}, size);
    std::vector<uint8_t>& chunk = staging_buffer();
    for (uint64_t done = 0; done < size;) {
      const uint64_t n = std::min<uint64_t>(chunk.size(), size - done);
      in.read(reinterpret_cast<char*>(chunk.data()), static_cast<std::streamsize>(n));
      if (static_cast<uint64_t>(in.gcount()) != n) {
        throw ConnectionError(fmt::format("'{}' shrank while it was sent", relative));
      }
      conn_.write_all(chunk.data(), n);
      done += n;
    }
  }

  // Creates the directories of `dir` below the work directory, each 0700.
  void make_private_dirs(const fs::path& dir) {
    std::vector<fs::path> missing;
    for (fs::path p = dir; p != work_dir_ && !fs::exists(p); p = p.parent_path()) {
      missing.push_back(p);
    }
    for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
      fs::create_directory(*it);
      fs::permissions(*it, kPrivateDir, fs::perm_options::replace);
    }
  }

  std::vector<uint8_t>& staging_buffer() {
    if (staging_.empty()) staging_.resize(kStagingBytes);
    return staging_;
  }

  // Loads the module at `path` (inside the work directory) so that every file the load opens —
  // imports, imports of imports, device code sidecars — must lie inside the work directory too,
  // checked before the file is looked at (so errors tell nothing about files outside), with
  // import cycles and depth bounded. Errors name paths relative to the work directory.
  Module load_sandboxed_module(const fs::path& path) {
    const fs::path root = fs::canonical(work_dir_);
    ModuleLoadOptions options;
    options.check_path = [&root](const fs::path& p) {
      const fs::path resolved = fs::weakly_canonical(p);
      if (!lies_inside(root, resolved)) {
        // Named relative to the session's directory: an absolute path would tell where the
        // server keeps its sessions.
        throw ValueError(fmt::format(
            "a module may only open files inside the session's work directory, not '{}'",
            resolved.lexically_relative(root).string()));
      }
    };
    try {
      return runtime_.load_module(path, options);
    } catch (const Error& e) {
      throw_error(e.code(), relative_paths(e.what()));
    }
  }

  // `message` without the work directory's absolute path: paths inside it read relative to it,
  // the directory itself as ".". Errors a client sees tell nothing of where the server keeps
  // its sessions.
  std::string relative_paths(std::string message) const {
    const std::string dir = work_dir_.string();
    for (const auto& [from, to] : {std::pair<std::string, std::string>{dir + "/", ""},
                                   std::pair<std::string, std::string>{dir, "."}}) {
      for (size_t at = message.find(from); at != std::string::npos;
           at = message.find(from, at + to.size())) {
        message.replace(at, from.size(), to);
      }
    }
    return message;
  }

  // Runs `request`, the work of a file request; what it throws leaves with relative_paths()
  // applied (filesystem and SDK errors, whose texts name absolute paths, included), as a typed
  // Error with the same code. Errors that end the session pass unchanged.
  template <typename Request>
  void with_relative_paths(Request&& request) const {
    try {
      request();
    } catch (const wire::ProtocolError&) {
      throw;
    } catch (const ConnectionError&) {
      throw;
    } catch (const Error& e) {
      throw_error(e.code(), relative_paths(e.what()));
    } catch (const sdk::Error& e) {
      throw_error(e.code(), relative_paths(e.what()));
    } catch (const fs::filesystem_error& e) {
      throw_error(e.code() == std::errc::no_such_file_or_directory ? KILN_ERROR_NOT_FOUND
                                                                   : KILN_ERROR_RUNTIME,
                  relative_paths(e.what()));
    } catch (const std::exception& e) {
      throw RuntimeError(relative_paths(e.what()));
    }
  }

  SessionState& state_;
  Connection& conn_;
  fs::path work_dir_;
  Runtime runtime_;  // a handle: the session keeps the runtime alive
  std::unordered_map<uint64_t, Entry> handles_;
  uint64_t next_handle_ = 1;
  struct Held {
    uint64_t refs = 0;   // handles that refer to the storage
    uint64_t bytes = 0;  // counted for it
  };
  std::unordered_map<const void*, Held> held_;  // by storage
  // What the session's memory is charged to: held_'s bytes, and every allocation of the VMs
  // made in the session's calls (installed on this thread while the session is served).
  std::shared_ptr<vm::MemoryBudget> budget_ = std::make_shared<vm::MemoryBudget>(
      state_.max_memory_bytes, "the server's --max-session-memory");
  vm::ScopedMemoryBudget budget_scope_{budget_};
  uint64_t uploaded_bytes_ = 0;
  std::vector<uint8_t> body_;
  std::vector<uint8_t> reply_;
  std::vector<uint8_t> staging_;
};

}  // namespace

bool call_cancelled() { return kiln::detail::cancellation_requested(); }

fs::path make_session_directory(const fs::path& parent) {
  // mkdtemp: a fresh directory nobody else has (another server sharing --work-dir, files a
  // crashed server left, a planted link), 0700. The number makes the name one this process has
  // never used, also after an earlier session's directory is gone: a library a thread-isolated
  // session loaded is known to the dynamic loader by its path, and a later session's file must
  // never come under that path (mkdtemp alone may repeat a name once it is free).
  static std::atomic<uint64_t> sessions{0};
  std::string pattern =
      (parent / fmt::format("session-{}-XXXXXX", sessions.fetch_add(1) + 1)).string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw RuntimeError(fmt::format("cannot create a session directory in {}: {}", parent.string(),
                                   std::strerror(errno)));
  }
  return fs::canonical(pattern);
}

void remove_session_directory(const fs::path& work_dir) noexcept {
  std::error_code ec;
  fs::remove_all(work_dir, ec);  // does not follow links inside
  if (ec) {
    log(LogLevel::kWarn, "rpc",
        fmt::format("cannot remove the work directory {}: {}", work_dir.string(), ec.message()));
  }
}

void serve_session_in(SessionState& state, const fs::path& work_dir, Runtime& runtime) {
  std::string why;
  try {
    SessionServer server(state, work_dir, runtime);
    why = server.serve();
  } catch (const wire::ProtocolError& e) {
    why = fmt::format("protocol error: {}", e.what());
    log(LogLevel::kWarn, "rpc",
        fmt::format("session {} with {}: {}; ending it", state.id, state.conn->peer(), e.what()));
  } catch (const std::exception& e) {
    why = e.what();
  }
  if (state.timed_out) why = fmt::format("session timeout ({} s)", state.timeout_s);
  log(LogLevel::kInfo, "rpc",
      fmt::format("session {} with {} ended: {}", state.id, state.conn->peer(), why));
}

void serve_session(SessionState& state, const fs::path& parent, Runtime& runtime) {
  fs::path work_dir;
  try {
    work_dir = make_session_directory(parent);
  } catch (const std::exception& e) {
    log(LogLevel::kWarn, "rpc",
        fmt::format("session {} with {} not served: {}", state.id, state.conn->peer(), e.what()));
    return;
  }
  serve_session_in(state, work_dir, runtime);
  remove_session_directory(work_dir);
}

void expire_session(SessionState& state) {
  state.timed_out = true;
  state.cancelled = true;
  std::vector<uint8_t> body;
  wire::Writer w(body);
  w.i32(kErrorCodeRpcSessionTimeout);
  w.str(
      fmt::format("RPCSessionTimeoutError: Your {}s session has expired, try to increase the "
                  "\"session_timeout\" value.",
                  state.timeout_s));
  // A reply being written finishes first; one stuck for a second is cut off.
  for (int i = 0; i < 100; ++i) {
    if (state.write_mu.try_lock()) {
      try {
        state.conn->write_frame(wire::Code::kException, body);
      } catch (const std::exception&) {
      }
      state.write_mu.unlock();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  state.conn->shutdown();
}

}  // namespace kiln::rpc
