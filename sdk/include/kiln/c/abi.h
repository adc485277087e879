// SPDX-License-Identifier: Apache-2.0
/* Kiln plugin ABI: base types shared by every component.
 *
 * This header is C11 (C99 plus _Static_assert) and is the only thing a plugin or kernel module must
 * agree on with the host. Everything here follows the rules of docs/plugin-abi.md:
 *   - every struct that may grow starts with `struct_size` (and, where marked, `next`);
 *   - function tables are append-only, a NULL slot means "not implemented";
 *   - errors are KilnError objects created through the host's factory; NULL means success;
 *   - every pointer field says who owns it and how long it lives.
 */
#ifndef KILN_C_ABI_H_
#define KILN_C_ABI_H_

#include <dlpack/dlpack.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ABI version this header describes. Minor versions only append; see docs/plugin-abi.md. */
#define KILN_ABI_VERSION_MAJOR 1
#define KILN_ABI_VERSION_MINOR 0

/* Bytes of `type` up to and including `field`: the size of a layout that ends at `field`. The
 * KILN_<STRUCT>_SIZE_1_0 minimums are written with it and never change. */
#define KILN_SIZE_THROUGH(type, field) (offsetof(type, field) + sizeof(((type*)0)->field))

/* Marks the symbols a plugin or kernel library exports. */
#if defined(_WIN32)
#define KILN_EXPORT __declspec(dllexport)
#else
#define KILN_EXPORT __attribute__((visibility("default")))
#endif

/* DLPack 0.6 (Debian 12) predates kDLBool; Kiln uses the value DLPack 0.8 assigned to it. */
#define KILN_DL_BOOL 6

/* Error codes carried by KilnError. They map 1:1 to the typed C++ errors of the core. */
typedef enum KilnErrorCode {
  KILN_ERROR_UNKNOWN = 1,       /* kiln::Error */
  KILN_ERROR_VALUE = 2,         /* kiln::ValueError: a bad argument value */
  KILN_ERROR_TYPE = 3,          /* kiln::TypeError: an argument of the wrong kind */
  KILN_ERROR_INDEX = 4,         /* kiln::IndexError */
  KILN_ERROR_RUNTIME = 5,       /* kiln::RuntimeError: the operation failed */
  KILN_ERROR_NOT_FOUND = 6,     /* kiln::NotFoundError: no such function, device, file */
  KILN_ERROR_UNAVAILABLE = 7,   /* kiln::UnavailableError: driver or device missing */
  KILN_ERROR_OUT_OF_MEMORY = 8, /* kiln::OutOfMemoryError */
  KILN_ERROR_UNIMPLEMENTED = 9, /* kiln::UnimplementedError */
  KILN_ERROR_ABI = 10           /* kiln::AbiError: version or struct-size mismatch */
} KilnErrorCode;

/* Opaque error object. Created only through KilnHostServices::error_new (or the kernel
 * environment's copy of it), owned by the host; whoever receives one returned from a call
 * either returns it further up or frees it with KilnHostServices::error_free. */
typedef struct KilnError KilnError;

/* Type codes of KilnAny. Values 0..127 are the ABI; 128..255 are reserved for the host's
 * private use and never cross a plugin boundary. */
typedef enum KilnTypeCode {
  KILN_TYPE_NONE = 0,
  KILN_TYPE_BOOL = 1,      /* v_int64: 0 or 1 */
  KILN_TYPE_INT = 2,       /* v_int64 */
  KILN_TYPE_FLOAT = 3,     /* v_float64 */
  KILN_TYPE_STRING = 4,    /* v_str: NUL-terminated UTF-8, borrowed (see KilnAny) */
  KILN_TYPE_BYTES = 5,     /* v_bytes: borrowed KilnByteArray */
  KILN_TYPE_DEVICE = 6,    /* v_device */
  KILN_TYPE_DTYPE = 7,     /* v_dtype */
  KILN_TYPE_SHAPE = 8,     /* v_shape: borrowed KilnShape */
  KILN_TYPE_TENSOR = 9,    /* v_tensor: borrowed DLTensor */
  KILN_TYPE_FUNCTION = 10, /* v_callable: borrowed KilnCallable */
  KILN_TYPE_OPAQUE = 11    /* v_ptr: a raw pointer the two sides agree on */
} KilnTypeCode;

/* A length-delimited byte string. `data` is borrowed. */
typedef struct KilnByteArray {
  const uint8_t* data;
  size_t size;
} KilnByteArray;

/* A shape. `dims` is borrowed. */
typedef struct KilnShape {
  const int64_t* dims;
  int32_t ndim;
} KilnShape;

/* A tagged 16-byte value: the unit of the packed calling convention.
 *
 * Arguments are borrowed for the duration of the call: the callee must copy anything it keeps.
 * A value returned in `ret` may only carry NONE, BOOL, INT, FLOAT, DEVICE, DTYPE, or a STRING /
 * BYTES whose storage lives at least until the next call of the same function on the same
 * thread (a thread-local buffer or static storage). `flags` is reserved for the host: a
 * plugin writes 0 and ignores what it reads. */
typedef struct KilnAny {
  int32_t type_code; /* a KilnTypeCode */
  int32_t flags;
  union {
    int64_t v_int64;
    double v_float64;
    const char* v_str;
    const KilnByteArray* v_bytes;
    DLDevice v_device;
    DLDataType v_dtype;
    const KilnShape* v_shape;
    DLTensor* v_tensor;
    const struct KilnCallable* v_callable;
    void* v_ptr;
  } value;
} KilnAny;

/* The packed calling convention. `self` is the callee's state; `args` holds `num_args`
 * borrowed values; the callee writes its result into `ret` (pre-set to NONE by the caller).
 * Returns NULL on success, else an error from the host's factory. */
typedef KilnError* (*KilnPackedFn)(void* self, const KilnAny* args, int32_t num_args, KilnAny* ret);

/* A packed function together with its state. Borrowed wherever it appears in an argument. */
typedef struct KilnCallable {
  KilnPackedFn call;
  void* self;
} KilnCallable;

/* The header every extension struct starts with. Structs marked "next" in docs/plugin-abi.md
 * carry `const KilnExtension* next`: a chain of extension structs, each owned by whoever owns
 * the struct that points at it and living as long as it. A reader looks for the types it knows
 * (kiln_find_extension) and skips every other; 1.0 defines no extension types, so 1.0 writers
 * set `next` to NULL. */
typedef struct KilnExtension {
  size_t struct_size; /* sizeof the whole extension struct, as its writer compiled it */
  int32_t type;       /* which extension this is; see KILN_EXTENSION_TYPE_* */
  int32_t reserved;
  const struct KilnExtension* next; /* the rest of the chain, or NULL */
} KilnExtension;

/* The extension header's size in 1.0: the oldest a 1.x reader accepts. */
#define KILN_EXTENSION_SIZE_1_0 KILN_SIZE_THROUGH(KilnExtension, next)

/* Extension type numbers: 1..0xFFFF are assigned by Kiln minor versions (none in 1.0);
 * KILN_EXTENSION_TYPE_VENDOR_FIRST and up are free for private agreements between a host and
 * its plugins (a reader that does not know one skips it). 0 and negative values are invalid. */
#define KILN_EXTENSION_TYPE_VENDOR_FIRST 0x10000

/* Longest chain a reader follows; a longer chain (or a cycle) is treated as ending there. */
#define KILN_EXTENSION_CHAIN_MAX 64

/* The first extension of `type` in `chain`, or NULL when there is none. Checks nothing beyond
 * the header: the caller checks the extension's struct_size before reading its fields. */
static inline const KilnExtension* kiln_find_extension(const KilnExtension* chain, int32_t type) {
  int hops = 0;
  for (; chain && hops < KILN_EXTENSION_CHAIN_MAX; chain = chain->next, ++hops) {
    if (chain->type == type) return chain;
  }
  return NULL; /* NOLINT(modernize-use-nullptr): this header is C */
}

/* Element `index` of an array of structs that start with `struct_size` (KilnComponent,
 * KilnDeviceBlob, KilnArtifact). The stride is the first element's struct_size, which every
 * element of one array carries, so an array written against a later minor (longer elements)
 * reads correctly here. The caller has checked that the first struct_size is at least the
 * struct's 1.0 minimum and a multiple of sizeof(void*). */
static inline const void* kiln_array_element(const void* base, size_t index) {
  size_t stride;
  memcpy(&stride, base, sizeof(stride));
  return (const char*)base + index * stride;
}

/* Log levels of KilnHostServices::log. */
typedef enum KilnLogLevel {
  KILN_LOG_DEBUG = 0,
  KILN_LOG_INFO = 1,
  KILN_LOG_WARN = 2,
  KILN_LOG_ERROR = 3
} KilnLogLevel;

#ifdef __cplusplus
} /* extern "C" */
/* The calling convention depends on these sizes; they never change within major version 1. */
static_assert(sizeof(KilnAny) == 16, "KilnAny must be 16 bytes");
#else
_Static_assert(sizeof(KilnAny) == 16, "KilnAny must be 16 bytes");
#endif

#endif /* KILN_C_ABI_H_ */
