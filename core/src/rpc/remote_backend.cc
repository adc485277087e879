// SPDX-License-Identifier: Apache-2.0
// Remote devices as device backends: a KilnDeviceBackend table whose slots are requests of
// the session, so Tensor::empty / copy_from / copy_to work unchanged on remote devices.
#include "kiln/runtime.h"

#include <fmt/format.h>

#include <map>
#include <mutex>

#include "ffi/error_object.h"
#include "kiln/function.h"
#include "rpc/client.h"

namespace kiln::rpc {

namespace {

// `self` of the table: the session (weak: remote tensors do not keep a session open; after
// it closes their memory is gone with the server's session) and the server's device type.
struct RemoteBackendState : Object {
  KilnDeviceBackend table{};
  std::weak_ptr<RPCSession::Impl> session;
  int32_t server_type = 0;
  // Per device id: the session's device_work count when its last Synchronize was sent.
  std::mutex synced_mu;
  std::map<int32_t, uint64_t> synced;
};

std::shared_ptr<RPCSession::Impl> session_of(void* self) {
  auto session = static_cast<RemoteBackendState*>(self)->session.lock();
  if (!session) throw RuntimeError("the RPC session of this remote device is closed");
  return session;
}

template <typename Body>
KilnError* guarded(Body&& body) {
  try {
    body();
    return nullptr;
  } catch (...) {
    return ::kiln::detail::error_from_current_exception("");
  }
}

Device server_device(void* self, int32_t id) {
  return {static_cast<RemoteBackendState*>(self)->server_type, id};
}

KilnError* remote_device_count(void* self, int32_t* count, const char** why_none) {
  *why_none = nullptr;
  return guarded([&] {
    std::vector<uint8_t> body;
    wire::Writer w(body);
    w.i32(static_cast<RemoteBackendState*>(self)->server_type);
    auto values = session_of(self)->request(wire::Code::kDeviceCount, body);
    *count = static_cast<int32_t>(values.at(0).cast<int64_t>());
  });
}

KilnError* remote_device_attributes(void* self, int32_t id, KilnAttributeVisitor visit, void* ctx) {
  return guarded([&] {
    std::vector<uint8_t> body;
    wire::Writer w(body);
    w.device(server_device(self, id));
    auto values = session_of(self)->request(wire::Code::kDeviceAttributes, body);
    for (size_t i = 0; i + 1 < values.size(); i += 2) {
      const std::string key = values[i].cast<std::string>();
      const KilnAny value = values[i + 1].to_abi();
      visit(ctx, key.c_str(), &value);
    }
  });
}

KilnError* remote_alloc(void* self, int32_t id, size_t nbytes, size_t alignment, void** out) {
  return guarded([&] {
    std::vector<uint8_t> body;
    wire::Writer w(body);
    w.device(server_device(self, id));
    w.u64(nbytes);
    w.u64(alignment);
    auto values = session_of(self)->request(wire::Code::kAlloc, body);
    *out = reinterpret_cast<void*>(static_cast<uintptr_t>(values.at(0).cast<int64_t>()));
  });
}

KilnError* free_memory(void* self, int32_t, void* ptr) {
  auto session = static_cast<RemoteBackendState*>(self)->session.lock();
  if (session) session->free_handle(reinterpret_cast<uint64_t>(ptr));
  return nullptr;
}

KilnError* remote_copy_to_device(void* self, int32_t, const void* host_src, void* dst,
                                 size_t dst_offset, size_t nbytes, void*) {
  return guarded([&] {
    std::vector<uint8_t> body;
    wire::Writer w(body);
    w.u64(reinterpret_cast<uint64_t>(dst));
    w.u64(dst_offset);
    w.u64(nbytes);
    session_of(self)->request(wire::Code::kCopyToRemote, body, host_src, nbytes);
  });
}

KilnError* remote_copy_to_host(void* self, int32_t, const void* src, size_t src_offset,
                               void* host_dst, size_t nbytes, void*) {
  return guarded([&] {
    std::vector<uint8_t> body;
    wire::Writer w(body);
    w.u64(reinterpret_cast<uint64_t>(src));
    w.u64(src_offset);
    w.u64(nbytes);
    session_of(self)->request_data(wire::Code::kCopyFromRemote, body, host_dst, nbytes);
  });
}

KilnError* remote_copy_on_device(void* self, int32_t, const void* src, size_t src_offset, void* dst,
                                 size_t dst_offset, size_t nbytes, void*) {
  return guarded([&] {
    std::vector<uint8_t> body;
    wire::Writer w(body);
    w.u64(reinterpret_cast<uint64_t>(src));
    w.u64(src_offset);
    w.u64(reinterpret_cast<uint64_t>(dst));
    w.u64(dst_offset);
    w.u64(nbytes);
    session_of(self)->request(wire::Code::kCopyOnRemote, body);
  });
}

KilnError* remote_synchronize(void* self, int32_t id, void*) {
  return guarded([&] {
    auto* state = static_cast<RemoteBackendState*>(self);
    auto session = session_of(self);
    // Nothing that could still run was sent since this device's last Synchronize (copies end
    // before their reply): skip the round trip, a third of a small copy's time.
    const uint64_t work = session->device_work.load();
    {
      std::lock_guard lock(state->synced_mu);
      auto it = state->synced.find(id);
      if (it != state->synced.end() && it->second == work) return;
    }
    std::vector<uint8_t> body;
    wire::Writer w(body);
    w.device(server_device(self, id));
    session->request(wire::Code::kSynchronize, body);
    std::lock_guard lock(state->synced_mu);
    state->synced[id] = work;
  });
}

}  // namespace

Ref<DeviceBackend> RPCSession::Impl::backend_for(int32_t server_type) {
  std::lock_guard lock(backends_mu);
  auto it = backends.find(server_type);
  if (it != backends.end()) return it->second;
  auto state = make_object<RemoteBackendState>();
  state->session = weak_from_this();
  state->server_type = server_type;
  KilnDeviceBackend& t = state->table;
  t.struct_size = sizeof(KilnDeviceBackend);
  t.self = state.get();
  t.dl_device_type = server_type + (index + 1) * kRemoteDeviceMask;
  t.device_count = &remote_device_count;
  t.device_attributes = &remote_device_attributes;
  t.alloc = &remote_alloc;
  t.free = &free_memory;
  t.copy_to_device = &remote_copy_to_device;
  t.copy_to_host = &remote_copy_to_host;
  t.copy_on_device = &remote_copy_on_device;
  t.synchronize = &remote_synchronize;
  const auto name = runtime->device_types().name_of(server_type);
  auto backend = make_object<DeviceBackend>(
      &state->table, fmt::format("remote{}:{}", index, name ? *name : std::to_string(server_type)),
      fmt::format("rpc session with {}", peer), state);
  backends.emplace(server_type, backend);
  return backend;
}

}  // namespace kiln::rpc
