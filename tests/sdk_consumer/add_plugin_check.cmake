# SPDX-License-Identifier: Apache-2.0
# kiln_add_plugin() writes a manifest's `version` and `abi` from one source (its VERSION and
# MIN_ABI, defaulting to the project's version and the SDK headers' ABI) and refuses a template
# that sets them by hand or a MIN_ABI the SDK cannot serve (docs/plugin-abi.md §12).
# Driven by ctest with KILN_SOURCE_DIR and WORK_DIR.
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
file(STRINGS ${KILN_SOURCE_DIR}/sdk/include/kiln/c/abi.h abi_lines
     REGEX "^#define KILN_ABI_VERSION_(MAJOR|MINOR) ")
string(REGEX MATCH "MAJOR ([0-9]+)" _ "${abi_lines}")
set(major ${CMAKE_MATCH_1})
string(REGEX MATCH "MINOR ([0-9]+)" _ "${abi_lines}")
set(minor ${CMAKE_MATCH_1})

set(good ${WORK_DIR}/good.yaml.in)
file(WRITE ${good} "name: check\nkind: device\nlibrary: @KILN_PLUGIN_LIBRARY@\n"
                   "provides:\n  devices: [check]\n")
set(by_hand ${WORK_DIR}/by_hand.yaml.in)
file(WRITE ${by_hand} "name: check\nkind: device\nlibrary: @KILN_PLUGIN_LIBRARY@\n"
                      "abi: \"${major}.${minor}\"\nprovides:\n  devices: [check]\n")

# configure(<name> <template> <expect success: TRUE|FALSE> <regex the output must match>
#           [kiln_add_plugin arguments...])
function(configure name template expect_success pattern)
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${CMAKE_CURRENT_LIST_DIR}/add_plugin
                          -B ${WORK_DIR}/${name} -DKILN_SOURCE_DIR=${KILN_SOURCE_DIR}
                          -DTEMPLATE=${template} "-DEXTRA_ARGS=${ARGN}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(all "${out}${err}")
  if(expect_success AND NOT rc EQUAL 0)
    message(FATAL_ERROR "${name}: configure failed:\n${all}")
  elseif(NOT expect_success AND rc EQUAL 0)
    message(FATAL_ERROR "${name}: configure succeeded but must fail:\n${all}")
  endif()
  # CMake wraps long messages: a space in the pattern matches any run of blanks and newlines.
  string(REPLACE " " "[ \n]+" pattern "${pattern}")
  if(NOT all MATCHES "${pattern}")
    message(FATAL_ERROR "${name}: output does not match '${pattern}':\n${all}")
  endif()
  message(STATUS "${name}: as expected")
endfunction()

# Defaults: the project's version and the SDK's ABI, in the manifest.
configure(defaults ${good} TRUE "Generating done")
file(READ ${WORK_DIR}/defaults/plugins/good.yaml manifest)
if(NOT manifest MATCHES "\nversion: 4\\.5\\.6\nabi: \"${major}\\.${minor}\"\n")
  message(FATAL_ERROR "the manifest lacks the project's version and the SDK's ABI:\n${manifest}")
endif()
# VERSION overrides the project's version.
configure(version ${good} TRUE "Generating done" VERSION 7.8.9)
file(READ ${WORK_DIR}/version/plugins/good.yaml manifest)
if(NOT manifest MATCHES "\nversion: 7\\.8\\.9\n")
  message(FATAL_ERROR "VERSION 7.8.9 is not in the manifest:\n${manifest}")
endif()
# A template that sets abi (or version) by hand is refused, naming the key.
configure(by_hand ${by_hand} FALSE "sets 'abi:'; remove it")
# A MIN_ABI newer than the SDK's, or of another major, is refused.
math(EXPR newer "${minor} + 1")
configure(newer_min_abi ${good} FALSE "MIN_ABI ${major}\\.${newer} is not served by the SDK"
          MIN_ABI ${major}.${newer})
math(EXPR other_major "${major} + 1")
configure(other_major ${good} FALSE "is not served by the SDK" MIN_ABI ${other_major}.0)
configure(bad_min_abi ${good} FALSE "MIN_ABI must be MAJOR\\.MINOR" MIN_ABI one)
