# SPDX-License-Identifier: Apache-2.0
# `kiln vm` round trip: asm SRC -> A.kvm, disasm A.kvm -> B.kvmt (must equal SRC, which is
# canonical text), asm B.kvmt -> C.kvm (must equal A.kvm byte for byte).
foreach(var KILN SRC OUT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "roundtrip.cmake needs -D${var}=...")
  endif()
endforeach()
file(MAKE_DIRECTORY ${OUT})
function(kiln_run)
  execute_process(COMMAND ${KILN} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out
    ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "kiln ${ARGN}: exit code ${rc}\n${out}${err}")
  endif()
endfunction()
kiln_run(vm asm ${SRC} -o ${OUT}/a.kvm)
kiln_run(vm disasm ${OUT}/a.kvm -o ${OUT}/b.kvmt)
kiln_run(vm asm ${OUT}/b.kvmt -o ${OUT}/c.kvm)
foreach(pair "${SRC};${OUT}/b.kvmt" "${OUT}/a.kvm;${OUT}/c.kvm")
  list(GET pair 0 first)
  list(GET pair 1 second)
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${first} ${second}
    RESULT_VARIABLE differ)
  if(NOT differ EQUAL 0)
    message(FATAL_ERROR "${first} and ${second} differ")
  endif()
endforeach()
message("round trip ok: ${SRC}")
