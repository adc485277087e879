# SPDX-License-Identifier: Apache-2.0
# Runs `${KILN} ${ARGS}` and checks its exit code and that its output matches EXPECT_REGEX.
set(args ${ARGS})  # a CMake list
execute_process(COMMAND ${KILN} ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL EXPECT_EXIT)
  message(FATAL_ERROR "exit code ${rc}, expected ${EXPECT_EXIT}")
endif()
string(REPLACE "\n" " " flat "${out}${err}")
if(NOT flat MATCHES "${EXPECT_REGEX}")
  message(FATAL_ERROR "output does not match '${EXPECT_REGEX}'")
endif()
