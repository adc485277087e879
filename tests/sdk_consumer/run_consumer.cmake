# Driven by ctest (see CMakeLists.txt). Fails loudly at the first step that fails.
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
set(examples ${prefix}/share/kiln/examples)

# step(<what> [EXPECT <regex>] COMMAND <command>...)
function(step what)
  cmake_parse_arguments(ARG "" "EXPECT" "COMMAND" ${ARGN})
  execute_process(COMMAND ${ARG_COMMAND} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  # ctest reads GoogleTest's "[  SKIPPED ]" in a test's output as the test being skipped.
  string(REPLACE "[" "|" shown "${out}${err}")
  string(REPLACE "]" "|" shown "${shown}")
  message(STATUS "${what}:\n${shown}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (exit ${rc})")
  endif()
  if(ARG_EXPECT AND NOT out MATCHES "${ARG_EXPECT}")
    message(FATAL_ERROR "${what}: output does not match '${ARG_EXPECT}'")
  endif()
endfunction()

# build_example(<name>): configures and builds <prefix>/share/kiln/examples/<name> into
# ${WORK_DIR}/<name> against the installed packages only.
function(build_example name)
  step("configure the installed example ${name}" COMMAND ${CMAKE_COMMAND}
       -S ${examples}/${name} -B ${WORK_DIR}/${name} -G Ninja
       -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=RelWithDebInfo
       "-DCMAKE_CXX_FLAGS=${SANITIZE_FLAGS}" "-DCMAKE_C_FLAGS=${SANITIZE_FLAGS}")
  step("build the example ${name}" COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/${name})
endfunction()

step("install Kiln into ${prefix}" COMMAND ${CMAKE_COMMAND} --install ${KILN_BUILD_DIR} --prefix ${prefix})
foreach(example device_plugin rusage_collector host_app)
  if(NOT EXISTS ${examples}/${example}/CMakeLists.txt)
    message(FATAL_ERROR "the install has no ${examples}/${example}/CMakeLists.txt")
  endif()
  build_example(${example})
endforeach()

step("run the host app with the example device plugin and collector"
     EXPECT "plugin exampledev +1\\.0\\.0 +loaded.*exampledev:0 round trip OK.*triple\\(14\\) = 42.*rusage::user \\(us\\).*host app OK"
     COMMAND ${WORK_DIR}/host_app/host_app ${WORK_DIR}/host_app/libtriple.so
     ${WORK_DIR}/device_plugin/plugins ${WORK_DIR}/rusage_collector/plugins)
step("list plugins with the installed kiln tool" EXPECT "exampledev +1\\.0\\.0 +1\\.[0-9]+ +loaded"
     COMMAND ${CMAKE_COMMAND} -E env KILN_PLUGINS=exampledev,cpu
     ${prefix}/bin/kiln --plugin-path ${WORK_DIR}/device_plugin/plugins plugins)
# The issue's "done when": the installed kiln-conformance passes the example device plugin and
# the example collector.
step("run the installed kiln-conformance on the example device plugin and collector"
     EXPECT "kiln-conformance [0-9.]+: pass \\([0-9]+ passed, 0 failed.*device +exampledev +exampledev 1\\.0\\.0.*collector +rusage +rusage 1\\.0\\.0"
     COMMAND ${prefix}/bin/kiln-conformance --plugin-path ${WORK_DIR}/device_plugin/plugins
     --plugin-path ${WORK_DIR}/rusage_collector/plugins
     --device exampledev --require-device --collector rusage
     --module exampledev:${WORK_DIR}/device_plugin/vector_add.exampledev:exampledev_so:vector_add
     --report ${WORK_DIR}/conformance.md --report-json ${WORK_DIR}/conformance.json)
file(READ ${WORK_DIR}/conformance.md report)
message(STATUS "conformance report:\n${report}")
if(NOT report MATCHES "Verdict: pass.*Plugin: exampledev 1\\.0\\.0.*LoadsModuleAndLaunchesKernel \\| pass.*Collector `rusage`: pass.*ReportsMetricsForAHostCall \\| pass")
  message(FATAL_ERROR "${WORK_DIR}/conformance.md does not show a pass of the module and collector tests")
endif()
