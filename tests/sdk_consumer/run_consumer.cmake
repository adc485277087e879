# Driven by ctest (see CMakeLists.txt). Fails loudly at the first step that fails.
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)

# step(<what> [EXPECT <regex>] COMMAND <command>...)
function(step what)
  cmake_parse_arguments(ARG "" "EXPECT" "COMMAND" ${ARGN})
  execute_process(COMMAND ${ARG_COMMAND} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  message(STATUS "${what}:\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (exit ${rc})")
  endif()
  if(ARG_EXPECT AND NOT out MATCHES "${ARG_EXPECT}")
    message(FATAL_ERROR "${what}: output does not match '${ARG_EXPECT}'")
  endif()
endfunction()

step("install Kiln into ${prefix}" COMMAND ${CMAKE_COMMAND} --install ${KILN_BUILD_DIR} --prefix ${prefix})
step("configure the consumer" COMMAND ${CMAKE_COMMAND} -S ${CONSUMER_SOURCE_DIR} -B ${WORK_DIR}/build
     -G Ninja -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=RelWithDebInfo
     "-DCMAKE_CXX_FLAGS=${SANITIZE_FLAGS}" "-DCMAKE_C_FLAGS=${SANITIZE_FLAGS}")
step("build the consumer" COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build)
step("configure the example collector (sdk/examples/rusage_collector)" COMMAND ${CMAKE_COMMAND}
     -S ${SDK_EXAMPLES_DIR}/rusage_collector -B ${WORK_DIR}/rusage -G Ninja
     -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=RelWithDebInfo
     "-DCMAKE_CXX_FLAGS=${SANITIZE_FLAGS}")
step("build the example collector" COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/rusage)
step("run the consumer host app"
     EXPECT "triple\\(14\\) = 42.*rusage::user \\(us\\).*consumer OK"
     COMMAND ${WORK_DIR}/build/consumer_app ${WORK_DIR}/build/plugins
     ${WORK_DIR}/build/libtriple.so ${WORK_DIR}/rusage/plugins)
step("list plugins with the installed kiln tool" EXPECT "oot +2\\.3\\.4 +1\\.0 +loaded"
     COMMAND ${CMAKE_COMMAND} -E env KILN_PLUGINS=oot,cpu
     ${prefix}/bin/kiln --plugin-path ${WORK_DIR}/build/plugins plugins)
