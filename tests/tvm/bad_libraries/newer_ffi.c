// SPDX-License-Identifier: Apache-2.0
/* A tvm-ffi library that imports a C function outside the subset Kiln provides, as one built
 * for a later tvm-ffi might. */
extern int TVMFFIFunctionGetGlobal(const void* name, void** out);
int __tvm_ffi_main(void* self, const void* args, int num_args, void* result) {
  (void)self, (void)args, (void)num_args, (void)result;
  void* f = 0;
  return TVMFFIFunctionGetGlobal(0, &f);
}
