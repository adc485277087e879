// SPDX-License-Identifier: Apache-2.0
/* A small shared library that memfd_library_test loads from bytes: a counter private to each
 * loaded copy. */
static int counter;

__attribute__((visibility("default"))) int kiln_memfd_test_bump(void) { return ++counter; }
