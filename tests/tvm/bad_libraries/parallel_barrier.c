// SPDX-License-Identifier: Apache-2.0
/* Not a bad library: compiled the way TVM's CPU code reaches Kiln's parallel services (weak
 * context symbols the loader fills, a tvm-ffi entry point), it checks the barrier, which the
 * TVM 0.27 fixtures never emit. Each task writes its slot, meets the others at the barrier,
 * then sums every slot: with a working barrier each sees all of them. */
#include <dlpack/dlpack.h>
#include <stdint.h>

typedef struct {
  int32_t type_index;
  uint32_t zero_padding;
  union {
    int64_t v_int64;
    void* v_ptr;
  };
} Any;
typedef struct {
  void* sync_handle;
  int32_t num_task;
} ParallelEnv;
typedef int (*Lambda)(int task_id, ParallelEnv* env, void* cdata);

void* __TVMBackendParallelLaunch __attribute__((weak)) = 0;
void* __TVMBackendParallelBarrier __attribute__((weak)) = 0;

static int task(int id, ParallelEnv* env, void* cdata) {
  volatile int64_t* slots = (volatile int64_t*)cdata;
  if (env->num_task > 127) return -1; /* more than the slots hold */
  slots[id] = id + 1;
  if (((int (*)(int, ParallelEnv*))__TVMBackendParallelBarrier)(id, env) != 0) return -1;
  int64_t sum = 0;
  for (int i = 0; i < env->num_task; ++i) sum += slots[i];
  slots[128 + id] = sum;
  if (id == 0) slots[255] = env->num_task;
  return 0;
}

/* main(slots: int64[256]): runs the tasks over the tensor's data (at most 127 tasks). */
int __tvm_ffi_main(void* self, const Any* args, int32_t num_args, Any* result) {
  (void)self;
  if (num_args != 1 || args[0].type_index != 7 /* DLTensor* */) return -1;
  void* data = ((DLTensor*)args[0].v_ptr)->data;
  int rc = ((int (*)(Lambda, void*, int))__TVMBackendParallelLaunch)(task, data, 0);
  result->type_index = 0;
  return rc;
}
