// SPDX-License-Identifier: Apache-2.0
// Kiln's RPC session protocol, version 1 (docs/rpc-protocol.md): handshake constants, frame
// codes, and a bounded reader and a writer for message bodies. Every length read from the
// network is checked against what is left in the message and against a fixed limit before
// anything is allocated; a violation throws ProtocolError naming the field and offset.
#ifndef KILN_SRC_RPC_PROTOCOL_H_
#define KILN_SRC_RPC_PROTOCOL_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/any.h"
#include "kiln/device.h"
#include "kiln/dtype.h"
#include "kiln/error.h"
#include "kiln/tensor.h"

namespace kiln::rpc::wire {

// The first 8 bytes either side sends.
inline constexpr char kMagic[8] = {'K', 'I', 'L', 'N', '-', 'R', 'P', 'C'};
// Version 3 (issue 27): under a token the whole connection is TLS 1.3 keyed by the token
// (rpc/tls_psk.h), and the hello inside it carries no challenge; without a token the hello is
// version 2's without its nonce (docs/rpc-protocol.md §2). Other versions are refused with
// kVersionMismatch.
inline constexpr uint16_t kProtocolVersion = 3;
// TVM's RPC magic (0xFF271 as little-endian int32): what a TVM client sends first.
inline constexpr uint32_t kTvmRpcMagic = 0xFF271;
inline constexpr uint32_t kTvmCodeMismatch = 0xFF273;

// Handshake status codes (server hello and auth reply).
enum class HelloStatus : uint16_t {
  kAccepted = 0,         // session starts
  kAuthRequired = 1,     // the server takes only TLS keyed by its token (a plaintext hello came)
  kVersionMismatch = 2,  // message says which versions
  kKeyMismatch = 3,      // the key is not this server's
  kBusy = 4,             // --max-sessions sessions are running
  kAuthFailed = 5,       // too many wrong tokens: try again later
};

inline constexpr uint32_t kMaxKeyBytes = 4096;
inline constexpr uint32_t kMaxHelloMessageBytes = 4096;

// Frame: u64 length (of what follows), u32 code, body. Non-streaming messages are at most
// kMaxMessageBytes; streaming ones (copies and files) carry a bounded header and a payload
// whose size the header states and the frame length must match.
inline constexpr uint64_t kFrameHeaderBytes = 12;
inline constexpr uint64_t kMaxMessageBytes = 64ull << 20;
inline constexpr uint32_t kMaxPathBytes = 4096;
inline constexpr uint32_t kMaxNdim = 64;
inline constexpr uint32_t kMaxValues = 1 << 16;

enum class Code : uint32_t {
  // client -> server
  kShutdown = 1,            // no body, no reply
  kGetGlobalFunc = 2,       // str name -> Return [function]
  kCallFunc = 3,            // u64 handle, values -> Return [value]
  kFreeHandle = 4,          // u64 handle; no reply
  kDeviceCount = 5,         // i32 type -> Return [int count, str why_none]
  kDeviceAttributes = 6,    // device -> Return [str key, value, str key, value, ...]
  kAlloc = 7,               // device, u64 nbytes, u64 alignment -> Return [int handle]
  kCopyToRemote = 8,        // u64 handle, u64 offset, u64 nbytes, payload -> Return []
  kCopyFromRemote = 9,      // u64 handle, u64 offset, u64 nbytes -> Data(payload)
  kCopyOnRemote = 10,       // u64 src, u64 src_offset, u64 dst, u64 dst_offset, u64 nbytes
  kSynchronize = 11,        // device -> Return []
  kUpload = 12,             // str path, u64 nbytes, payload -> Return []
  kDownload = 13,           // str path -> Data(payload)
  kRemove = 14,             // str path -> Return []
  kListDir = 15,            // str path -> Return [str name, ...]
  kLoadModule = 16,         // str path -> Return [module, str entry_name]
  kModuleGetFunction = 17,  // u64 module, str name -> Return [function]
  kTimeEvaluator = 18,      // u64 function, device, options -> Return [function]
  // server -> client
  kReturn = 100,     // values
  kException = 101,  // i32 error code, str message
  kData = 102,       // payload
};

const char* code_name(Code code);
bool is_known_request(uint32_t code);
// Whether work a request starts on a server device may still run after its reply (a kernel
// a call launched, a copy on the device): what a later Synchronize waits for. The others end
// before their reply (the server synchronizes a device copy before it answers), so the
// client skips a Synchronize with nothing of that kind since the device's last one. A new
// request code counts as starting work until listed here.
bool may_leave_device_work(Code code);

// Value tags of the packed value encoding.
enum class Tag : uint8_t {
  kNone = 0,
  kInt = 1,
  kFloat = 2,
  kBool = 3,
  kString = 4,
  kBytes = 5,
  kDevice = 6,
  kDType = 7,
  kShape = 8,
  kTensor = 9,     // u64 buffer handle, u64 byte_offset, device, dtype, u32 ndim, i64 shape[]
  kFunction = 10,  // u64 handle
  kModule = 11,    // u64 handle
  kObject = 12,    // u64 handle of any other remote object (opaque)
};

// A protocol violation by the peer: the session ends with this message.
class ProtocolError : public RuntimeError {
 public:
  using RuntimeError::RuntimeError;
};

// Appends little-endian fields to a byte buffer.
class Writer {
 public:
  explicit Writer(std::vector<uint8_t>& out) : out_(out) {}
  void u8(uint8_t v) { out_.push_back(v); }
  void u16(uint16_t v) { raw(&v, sizeof(v)); }
  void u32(uint32_t v) { raw(&v, sizeof(v)); }
  void i32(int32_t v) { raw(&v, sizeof(v)); }
  void u64(uint64_t v) { raw(&v, sizeof(v)); }
  void i64(int64_t v) { raw(&v, sizeof(v)); }
  void f64(double v) { raw(&v, sizeof(v)); }
  void str(std::string_view s) {
    u64(s.size());
    raw(s.data(), s.size());
  }
  void device(Device d) {
    i32(d.type);
    i32(d.id);
  }
  void dtype(DataType t) {
    u8(t.code);
    u8(t.bits);
    u16(t.lanes);
  }
  // Grows the buffer by `n` bytes, then copies into the new tail. (A range insert of a few
  // bytes at a time made GCC 12 at -O3 see its reallocation path write past a fresh buffer:
  // -Wstringop-overflow / -Warray-bounds.)
  void raw(const void* data, size_t n) {
    if (n == 0) return;
    const size_t at = out_.size();
    out_.resize(at + n);
    std::memcpy(out_.data() + at, data, n);
  }
  size_t size() const { return out_.size(); }

 private:
  std::vector<uint8_t>& out_;
};

// Reads fields from a received message body; never reads past its end.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size, const char* what) : p_(data), n_(size), what_(what) {}
  uint8_t u8(const char* field) { return pod<uint8_t>(field); }
  uint16_t u16(const char* field) { return pod<uint16_t>(field); }
  uint32_t u32(const char* field) { return pod<uint32_t>(field); }
  int32_t i32(const char* field) { return pod<int32_t>(field); }
  uint64_t u64(const char* field) { return pod<uint64_t>(field); }
  int64_t i64(const char* field) { return pod<int64_t>(field); }
  double f64(const char* field) { return pod<double>(field); }
  // A length-prefixed string of at most `limit` bytes.
  std::string str(const char* field, uint64_t limit = kMaxMessageBytes);
  Device device(const char* field);
  DataType dtype(const char* field);
  size_t offset() const { return off_; }
  size_t remaining() const { return n_ - off_; }
  // Throws unless every byte was read.
  void finish() const;
  [[noreturn]] void fail(const char* field, const std::string& why) const;

 private:
  template <typename T>
  T pod(const char* field) {
    need(sizeof(T), field);
    T v;
    std::memcpy(&v, p_ + off_, sizeof(T));
    off_ += sizeof(T);
    return v;
  }
  void need(uint64_t bytes, const char* field) const;
  const uint8_t* p_;
  size_t n_;
  size_t off_ = 0;
  const char* what_;
};

// Writes `v` when it is a plain value (none, int, float, bool, string, bytes, dtype, shape)
// and returns true; returns false, writing nothing, for the kinds each side encodes itself
// (device, tensor, function, module, object).
bool encode_plain_value(Writer& w, const Any& v);
// Reads the payload of a plain-value `tag` into `out` and returns true; false for the other
// tags (nothing read).
bool decode_plain_value(Reader& r, Tag tag, Any& out);

// A tensor value's fields (after its tag): where its memory is, and what it holds.
struct TensorHeader {
  uint64_t handle = 0;  // the server's memory handle
  uint64_t byte_offset = 0;
  Device device;  // the server's device
  DataType dtype;
  std::vector<int64_t> shape;
  uint64_t nbytes = 0;  // of shape and dtype, checked for overflow when read
};
void write_tensor_header(Writer& w, uint64_t handle, const DLTensor& t);
TensorHeader read_tensor_header(Reader& r);
// A dense tensor object over `data` (dl.data) described by `h` on `device`, keeping `storage`.
Ref<TensorObj> make_tensor(const TensorHeader& h, void* data, Device device, Ref<Object> storage,
                           Ref<DeviceBackend> backend);

// Bytes of a dense tensor of `shape` and `dtype`; ProtocolError on overflow or a negative
// dimension (`what` names the message).
uint64_t checked_nbytes(const std::vector<int64_t>& shape, DataType dtype, const char* what);

}  // namespace kiln::rpc::wire

#endif  // KILN_SRC_RPC_PROTOCOL_H_
