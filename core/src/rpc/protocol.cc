// SPDX-License-Identifier: Apache-2.0
#include "rpc/protocol.h"

#include <fmt/format.h>

#include <limits>

namespace kiln::rpc::wire {

const char* code_name(Code code) {
  switch (code) {
    case Code::kShutdown:
      return "Shutdown";
    case Code::kGetGlobalFunc:
      return "GetGlobalFunc";
    case Code::kCallFunc:
      return "CallFunc";
    case Code::kFreeHandle:
      return "FreeHandle";
    case Code::kDeviceCount:
      return "DeviceCount";
    case Code::kDeviceAttributes:
      return "DeviceAttributes";
    case Code::kAlloc:
      return "Alloc";
    case Code::kCopyToRemote:
      return "CopyToRemote";
    case Code::kCopyFromRemote:
      return "CopyFromRemote";
    case Code::kCopyOnRemote:
      return "CopyOnRemote";
    case Code::kSynchronize:
      return "Synchronize";
    case Code::kUpload:
      return "Upload";
    case Code::kDownload:
      return "Download";
    case Code::kRemove:
      return "Remove";
    case Code::kListDir:
      return "ListDir";
    case Code::kLoadModule:
      return "LoadModule";
    case Code::kModuleGetFunction:
      return "ModuleGetFunction";
    case Code::kTimeEvaluator:
      return "TimeEvaluator";
    case Code::kReturn:
      return "Return";
    case Code::kException:
      return "Exception";
    case Code::kData:
      return "Data";
  }
  return "?";
}

bool is_known_request(uint32_t code) {
  return code >= static_cast<uint32_t>(Code::kShutdown) &&
         code <= static_cast<uint32_t>(Code::kTimeEvaluator);
}

bool may_leave_device_work(Code code) {
  switch (code) {
    case Code::kShutdown:
    case Code::kGetGlobalFunc:
    case Code::kFreeHandle:
    case Code::kDeviceCount:
    case Code::kDeviceAttributes:
    case Code::kAlloc:
    case Code::kCopyToRemote:
    case Code::kCopyFromRemote:
    case Code::kSynchronize:
    case Code::kUpload:
    case Code::kDownload:
    case Code::kRemove:
    case Code::kListDir:
    case Code::kModuleGetFunction:
      return false;
    default:
      return true;  // CallFunc, CopyOnRemote, LoadModule, TimeEvaluator, anything new
  }
}

void Reader::need(uint64_t bytes, const char* field) const {
  if (bytes > n_ - off_) {
    fail(field, fmt::format("needs {} bytes, {} left", bytes, n_ - off_));
  }
}

void Reader::fail(const char* field, const std::string& why) const {
  throw ProtocolError(
      fmt::format("malformed {} message: field '{}' at byte {}: {}", what_, field, off_, why));
}

std::string Reader::str(const char* field, uint64_t limit) {
  const uint64_t len = u64(field);
  if (len > limit) fail(field, fmt::format("length {} exceeds the limit of {}", len, limit));
  need(len, field);
  std::string s(reinterpret_cast<const char*>(p_ + off_), len);
  off_ += len;
  return s;
}

Device Reader::device(const char* field) {
  Device d;
  d.type = i32(field);
  d.id = i32(field);
  if (d.type < 0 || d.id < 0) fail(field, fmt::format("invalid device ({}, {})", d.type, d.id));
  return d;
}

DataType Reader::dtype(const char* field) {
  DataType t;
  t.code = u8(field);
  t.bits = u8(field);
  t.lanes = u16(field);
  if (t.lanes == 0 || t.bits == 0) fail(field, "dtype with 0 bits or lanes");
  return t;
}

void Reader::finish() const {
  if (off_ != n_) {
    throw ProtocolError(fmt::format("malformed {} message: {} unexpected trailing bytes at byte {}",
                                    what_, n_ - off_, off_));
  }
}

bool encode_plain_value(Writer& w, const Any& v) {
  switch (v.type_code()) {
    case KILN_TYPE_NONE:
      w.u8(static_cast<uint8_t>(Tag::kNone));
      return true;
    case KILN_TYPE_INT:
      w.u8(static_cast<uint8_t>(Tag::kInt));
      w.i64(v.raw_int());
      return true;
    case KILN_TYPE_FLOAT:
      w.u8(static_cast<uint8_t>(Tag::kFloat));
      w.f64(v.raw_float());
      return true;
    case KILN_TYPE_BOOL:
      w.u8(static_cast<uint8_t>(Tag::kBool));
      w.u8(v.raw_int() != 0);
      return true;
    case KILN_TYPE_STRING:
      w.u8(static_cast<uint8_t>(Tag::kString));
      w.str(v.cast<std::string>());
      return true;
    case KILN_TYPE_BYTES:
      w.u8(static_cast<uint8_t>(Tag::kBytes));
      w.str(v.cast<std::string>());
      return true;
    case KILN_TYPE_DTYPE:
      w.u8(static_cast<uint8_t>(Tag::kDType));
      w.dtype(v.cast<DataType>());
      return true;
    case KILN_TYPE_SHAPE: {
      const auto dims = v.cast<std::vector<int64_t>>();
      w.u8(static_cast<uint8_t>(Tag::kShape));
      w.u32(static_cast<uint32_t>(dims.size()));
      for (int64_t d : dims) w.i64(d);
      return true;
    }
    default:
      return false;
  }
}

bool decode_plain_value(Reader& r, Tag tag, Any& out) {
  switch (tag) {
    case Tag::kNone:
      out = Any();
      return true;
    case Tag::kInt:
      out = Any(r.i64("int"));
      return true;
    case Tag::kFloat:
      out = Any(r.f64("float"));
      return true;
    case Tag::kBool:
      out = Any(r.u8("bool") != 0);
      return true;
    case Tag::kString:
      out = Any(r.str("string"));
      return true;
    case Tag::kBytes:
      out = Any::bytes(r.str("bytes"));
      return true;
    case Tag::kDType:
      out = Any(r.dtype("dtype"));
      return true;
    case Tag::kShape: {
      const uint32_t ndim = r.u32("ndim");
      if (ndim > kMaxNdim) r.fail("ndim", "too many dimensions");
      std::vector<int64_t> dims(ndim);
      for (auto& d : dims) d = r.i64("dim");
      out = Any::shape(std::move(dims));
      return true;
    }
    default:
      return false;
  }
}

void write_tensor_header(Writer& w, uint64_t handle, const DLTensor& t) {
  w.u8(static_cast<uint8_t>(Tag::kTensor));
  w.u64(handle);
  w.u64(t.byte_offset);
  w.device(Device::from_dlpack(t.device));
  w.dtype(t.dtype);
  w.u32(static_cast<uint32_t>(t.ndim));
  for (int32_t i = 0; i < t.ndim; ++i) w.i64(t.shape[i]);
}

TensorHeader read_tensor_header(Reader& r) {
  TensorHeader h;
  h.handle = r.u64("handle");
  h.byte_offset = r.u64("byte_offset");
  h.device = r.device("device");
  h.dtype = r.dtype("dtype");
  const uint32_t ndim = r.u32("ndim");
  if (ndim > kMaxNdim) r.fail("ndim", "too many dimensions");
  h.shape.resize(ndim);
  for (auto& d : h.shape) d = r.i64("shape");
  h.nbytes = checked_nbytes(h.shape, h.dtype, "tensor value");
  return h;
}

Ref<TensorObj> make_tensor(const TensorHeader& h, void* data, Device device, Ref<Object> storage,
                           Ref<DeviceBackend> backend) {
  auto obj = make_object<TensorObj>();
  obj->shape = h.shape;
  obj->storage = std::move(storage);
  obj->backend = std::move(backend);
  obj->dl.data = data;
  obj->dl.byte_offset = h.byte_offset;
  obj->dl.device = device.to_dlpack();
  obj->dl.dtype = h.dtype;
  obj->dl.ndim = static_cast<int32_t>(h.shape.size());
  obj->dl.shape = obj->shape.data();
  obj->dl.strides = nullptr;
  return obj;
}

uint64_t checked_nbytes(const std::vector<int64_t>& shape, DataType dtype, const char* what) {
  uint64_t elements = 1;
  for (int64_t d : shape) {
    if (d < 0) throw ProtocolError(fmt::format("{}: negative dimension {}", what, d));
    if (d != 0 && elements > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d)) {
      throw ProtocolError(fmt::format("{}: tensor size overflows", what));
    }
    elements *= static_cast<uint64_t>(d);
  }
  const uint64_t lane_bits = static_cast<uint64_t>(dtype.bits) * dtype.lanes;
  if (elements != 0 && elements > std::numeric_limits<uint64_t>::max() / lane_bits) {
    throw ProtocolError(fmt::format("{}: tensor size overflows", what));
  }
  // As DataType::bytes(): whole bytes per element.
  return elements * ((lane_bits + 7) / 8);
}

}  // namespace kiln::rpc::wire
