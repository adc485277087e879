// SPDX-License-Identifier: Apache-2.0
/* The one in-memory library loader of Kiln: dlopen() of a shared library held in memory,
 * without a file on disk.
 *
 * Written in the common subset of C11 and C++20 on purpose, as static functions in a header:
 * it is compiled into the support library (kiln::sdk::dlopen_bytes, used by the cpu plugin)
 * and, from this very header, into the combined libraries the package plugin's "so" and "ndk"
 * exporters generate (plugins/package/wrapper_source.cc), which are plain C built by the
 * target's C compiler without the support library. One source, checked by both compilers.
 *
 * C includers must define _GNU_SOURCE before any system header (RTLD_NOLOAD and
 * F_DUPFD_CLOEXEC are GNU extensions in <dlfcn.h> and <fcntl.h>); C++ compilers define it. */
#ifndef KILN_SDK_SUPPORT_MEMFD_LOAD_H_
#define KILN_SDK_SUPPORT_MEMFD_LOAD_H_

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#if !defined(RTLD_NOLOAD) || !defined(F_DUPFD_CLOEXEC)
#error "kiln/sdk/support/memfd_load.h needs _GNU_SOURCE defined before the system headers"
#endif

/* The results of kiln_memfd_dlopen. */
#define KILN_MEMFD_OK 0
#define KILN_MEMFD_NO_BYTES 1     /* data NULL or size 0 */
#define KILN_MEMFD_SYSTEM_ERROR 2 /* memfd_create, write or fcntl failed; no free name */
#define KILN_MEMFD_REJECTED 3     /* the dynamic loader rejected the bytes (dlerror() text) */

/* MFD_CLOEXEC of <linux/memfd.h>; not every C library declares it. */
#define KILN_MEMFD_CLOEXEC 1U
/* How many descriptor numbers kiln_memfd_dlopen tries for a name no loaded library has. */
#define KILN_MEMFD_MAX_PROBES 64

/* Writes all `size` bytes at `data` to `fd`, retrying short and interrupted writes; 0 on
 * success, else -1 with errno set. */
static inline int kiln_memfd_write_all(int fd, const uint8_t* data, size_t size) {
  while (size > 0) {
    ssize_t n = write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    data += n;
    size -= (size_t)n;
  }
  return 0;
}

/* Copies `size` bytes at `data` (borrowed) into an anonymous memory file (memfd_create with
 * MFD_CLOEXEC, named `label` in /proc/<pid>/maps; borrowed) and dlopen()s it through
 * /proc/self/fd/<n> with RTLD_NOW | RTLD_LOCAL.
 *
 * The dynamic linker identifies a library by the name it was opened under before it looks at
 * the file, so "/proc/self/fd/<n>" must not be the name of a library still loaded: a descriptor
 * number is reused once closed, and an earlier in-memory library may still be mapped (unloading
 * is deferred while it is in use, or never happens for NODELETE ones). The name is probed with
 * RTLD_NOLOAD and moved to a higher descriptor (a dup) until it is free, under a mutex of the
 * including library. All descriptors are closed before returning: the mapping keeps the memory
 * file alive.
 *
 * On success stores the dlopen handle (owned by the caller: dlclose) in *handle and returns
 * KILN_MEMFD_OK. Otherwise stores NULL, writes the reason (NUL-terminated, truncated to
 * `why_size` bytes) to `why` when `why_size` > 0, and returns one of the KILN_MEMFD_ codes. */
static inline int kiln_memfd_dlopen(const void* data, size_t size, const char* label, void** handle,
                                    char* why, size_t why_size) {
  static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
  int fds[KILN_MEMFD_MAX_PROBES + 1];
  int num_fds = 0;
  int attempt;
  int result = KILN_MEMFD_SYSTEM_ERROR;
  *handle = NULL;
  if (why_size > 0) why[0] = '\0';
  if (data == NULL || size == 0) {
    if (why_size > 0) snprintf(why, why_size, "no bytes given");
    return KILN_MEMFD_NO_BYTES;
  }
#ifdef SYS_memfd_create
  fds[0] = (int)syscall(SYS_memfd_create, label, KILN_MEMFD_CLOEXEC);
#else
  fds[0] = -1;
  errno = ENOSYS;
#endif
  if (fds[0] < 0) {
    if (why_size > 0) snprintf(why, why_size, "memfd_create: %s", strerror(errno));
    return KILN_MEMFD_SYSTEM_ERROR;
  }
  num_fds = 1;
  if (kiln_memfd_write_all(fds[0], (const uint8_t*)data, size) != 0) {
    if (why_size > 0) snprintf(why, why_size, "writing it to a memory file: %s", strerror(errno));
    close(fds[0]);
    return KILN_MEMFD_SYSTEM_ERROR;
  }
  pthread_mutex_lock(&mutex);
  for (attempt = 0;; ++attempt) {
    char path[64];
    void* existing;
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fds[num_fds - 1]);
    existing = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
    if (existing == NULL) {
      /* The loader opens the path again, so MFD_CLOEXEC on our descriptors does not matter
       * here; it only keeps them from leaking into a child that execs in the meantime. */
      dlerror();
      *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
      if (*handle != NULL) {
        result = KILN_MEMFD_OK;
      } else {
        const char* reason = dlerror();
        result = KILN_MEMFD_REJECTED;
        if (why_size > 0) {
          snprintf(why, why_size, "cannot load it from memory: %s",
                   reason != NULL ? reason : "dlopen failed");
        }
      }
      break;
    }
    dlclose(existing);
    if (attempt == KILN_MEMFD_MAX_PROBES) {
      if (why_size > 0) {
        snprintf(why, why_size, "no free /proc/self/fd name after %d tries", KILN_MEMFD_MAX_PROBES);
      }
      break;
    }
    fds[num_fds] = fcntl(fds[0], F_DUPFD_CLOEXEC, fds[num_fds - 1] + 1);
    if (fds[num_fds] < 0) {
      if (why_size > 0) {
        snprintf(why, why_size, "duplicating its memory file: %s", strerror(errno));
      }
      break;
    }
    ++num_fds;
  }
  pthread_mutex_unlock(&mutex);
  while (num_fds > 0) close(fds[--num_fds]);
  return result;
}

#endif /* KILN_SDK_SUPPORT_MEMFD_LOAD_H_ */
