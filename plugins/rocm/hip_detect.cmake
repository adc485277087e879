# SPDX-License-Identifier: Apache-2.0
# Finds what the rocm plugin and its example kernels need, without find_package(hip): Debian's
# hip-config.cmake pulls in AMDDeviceLibs, whose imported targets ("opencl", "ocml", ...) clash
# with Kiln's own targets. Included by plugins/rocm and examples/kernels/rocm.
#
# Sets KILN_HIP_FOUND (the HIP headers, for the runtime's types) and KILN_HIP_VERSION, and
# KILN_HIP_DEVICE_CODE_FOUND (a clang that compiles HIP for AMD GPUs, plus the ROCm device
# libraries) with KILN_HIP_CLANG, KILN_HIP_ROCM_PATH and KILN_HIP_DEVICE_LIB_DIR.
#
# Switches: -DKILN_WITH_ROCM=OFF (or -DCMAKE_DISABLE_FIND_PACKAGE_hip=ON) builds neither;
# -DKILN_HIP_CLANG=OFF skips only the code objects.
option(KILN_WITH_ROCM "Build the rocm plugin and its example code objects when HIP is found" ON)

set(KILN_HIP_FOUND FALSE)
set(KILN_HIP_DEVICE_CODE_FOUND FALSE)
if(NOT KILN_WITH_ROCM OR CMAKE_DISABLE_FIND_PACKAGE_hip)
  return()
endif()

find_path(KILN_HIP_INCLUDE_DIR hip/hip_runtime_api.h
  PATHS /opt/rocm/include
  DOC "Folder holding hip/hip_runtime_api.h (the rocm plugin only uses its types)")
if(KILN_HIP_INCLUDE_DIR AND EXISTS ${KILN_HIP_INCLUDE_DIR}/hip/hip_version.h)
  file(STRINGS ${KILN_HIP_INCLUDE_DIR}/hip/hip_version.h _kiln_hip_version_lines
       REGEX "#define HIP_VERSION_(MAJOR|MINOR|PATCH) ")
  set(KILN_HIP_VERSION "")
  foreach(part MAJOR MINOR PATCH)
    foreach(line ${_kiln_hip_version_lines})
      if(line MATCHES "#define HIP_VERSION_${part} ([0-9]+)")
        list(APPEND KILN_HIP_VERSION ${CMAKE_MATCH_1})
      endif()
    endforeach()
  endforeach()
  list(JOIN KILN_HIP_VERSION "." KILN_HIP_VERSION)
  set(KILN_HIP_FOUND TRUE)
endif()
if(NOT KILN_HIP_FOUND)
  return()
endif()

# Device code: clang++-15 (Debian's hipcc uses it) or ROCm's own clang, with the device
# library bitcode (ocml.bc, ...).
find_program(KILN_HIP_CLANG NAMES clang++-15
  DOC "clang++ that compiles HIP for AMD GPUs (OFF: do not build the example code objects)")
# ROCm's own clang (not a plain clang++ from PATH: its device libraries must match).
find_program(KILN_HIP_CLANG NAMES clang++ PATHS /opt/rocm/llvm/bin NO_DEFAULT_PATH)
find_path(KILN_HIP_DEVICE_LIB_DIR ocml.bc
  PATHS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/amdgcn/bitcode
        /usr/lib/x86_64-linux-gnu/amdgcn/bitcode /opt/rocm/amdgcn/bitcode
  NO_DEFAULT_PATH DOC "ROCm device library bitcode (ocml.bc, ockl.bc, ...)")
get_filename_component(_kiln_hip_prefix ${KILN_HIP_INCLUDE_DIR} DIRECTORY)
set(KILN_HIP_ROCM_PATH ${_kiln_hip_prefix} CACHE PATH
  "--rocm-path given to clang for HIP (the prefix of the HIP headers)")
if(KILN_HIP_CLANG AND KILN_HIP_DEVICE_LIB_DIR)
  set(KILN_HIP_DEVICE_CODE_FOUND TRUE)
endif()
