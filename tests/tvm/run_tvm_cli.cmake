# SPDX-License-Identifier: Apache-2.0
# Runs tests/cli/run_cli.cmake when the TVM fixtures exist (CONFIG, the run config); otherwise
# prints why, which the test's SKIP_REGULAR_EXPRESSION turns into a skip.
if(NOT EXISTS "${CONFIG}")
  message(FATAL_ERROR "skipped: no TVM fixtures (${CONFIG} is missing; see tests/tvm/CMakeLists.txt)")
endif()
include(${CMAKE_CURRENT_LIST_DIR}/../cli/run_cli.cmake)
