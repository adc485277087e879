// SPDX-License-Identifier: Apache-2.0
/* Shaped like a library of TVM 0.20 or earlier (before tvm-ffi): it exports __tvm_main__ and
 * its functions under their plain names, and reports errors through TVMAPISetLastError. Kiln
 * must refuse it, saying why, before running any of it. */
extern void TVMAPISetLastError(const char* message);
const char* __tvm_main__ = "vadd";
void* __tvm_module_ctx = 0;
int vadd(void* args, int* type_codes, int num_args, void* ret, int* ret_code, void* handle) {
  (void)args, (void)type_codes, (void)num_args, (void)ret, (void)ret_code, (void)handle;
  TVMAPISetLastError("not reached");
  return -1;
}
