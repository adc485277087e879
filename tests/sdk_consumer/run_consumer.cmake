# SPDX-License-Identifier: Apache-2.0
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

# `kiln run` of the installed example's kernel on the example device (issue 29: its sidecar had
# no `target`, so kiln run could not load it), with the run config the example ships, unchanged.
# Its output must equal, byte for byte, that of the installed CPU example kernel on the same
# inputs (a = arange, b = random seed 1, alpha = 0.5: both compute a + alpha * b in float32).
set(device_dir ${WORK_DIR}/device_plugin)
step("kiln run of the example device's vector_add with its shipped run config"
     EXPECT "device: +exampledev:0 .*out +float32.4096. min=.*checks:.*out: saved float32.4096. to"
     COMMAND ${prefix}/bin/kiln --plugin-path ${device_dir}/plugins run --no-progress
     ${device_dir}/vector_add.yaml)
file(WRITE ${WORK_DIR}/cpu_vector_add.yaml "module: \${KILN_EXAMPLES}/libvector_add.so
function: vector_add
device: cpu
evaluator: {number: 1, repeat: 1, min_repeat_ms: 0}
inputs:
  - {name: a, shape: [4096], dtype: float32, init: arange}
  - {name: b, shape: [4096], dtype: float32, init: random, seed: 1, low: -1, high: 1}
  - {name: out, shape: [4096], dtype: float32, init: zeros}
  - {name: alpha, scalar: 0.5}
outputs:
  - {name: out, save: cpu_vector_add.out.npy}
")
step("kiln run of the installed CPU vector_add on the same inputs"
     EXPECT "device: +cpu:0 .*out: saved float32.4096."
     COMMAND ${CMAKE_COMMAND} -E env KILN_EXAMPLES=${prefix}/share/kiln/examples/kernels
     ${prefix}/bin/kiln run --no-progress ${WORK_DIR}/cpu_vector_add.yaml)
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${device_dir}/vector_add.out.npy
                ${WORK_DIR}/cpu_vector_add.out.npy RESULT_VARIABLE differ)
if(NOT differ EQUAL 0)
  message(FATAL_ERROR "the example device's vector_add output (${device_dir}/vector_add.out.npy) "
                      "differs from the CPU example's (${WORK_DIR}/cpu_vector_add.out.npy)")
endif()
message(STATUS "the example device's vector_add output equals the CPU example's")
