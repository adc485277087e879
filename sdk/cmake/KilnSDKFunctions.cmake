# SPDX-License-Identifier: Apache-2.0
# CMake functions for plugin and kernel-module authors. Shipped with find_package(KilnSDK) and
# used in-tree by Kiln itself.

# GCC marks some libstdc++ statics as STB_GNU_UNIQUE, which makes dlclose a no-op: a plugin or
# kernel library built that way could never be unloaded.
function(_kiln_allow_unloading target)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fno-gnu-unique>)
  endif()
endfunction()

# kiln_sdk_read_abi_version(<abi.h> <out-var>)
# Reads KILN_ABI_VERSION_MAJOR/MINOR from the SDK's kiln/c/abi.h into <out-var> ("1.0"), so that
# the manifests kiln_add_plugin() writes and the binaries it builds name one ABI version.
function(kiln_sdk_read_abi_version header out_var)
  file(STRINGS ${header} lines REGEX "^#define KILN_ABI_VERSION_(MAJOR|MINOR) [0-9]+")
  set(major "")
  set(minor "")
  foreach(line ${lines})
    if(line MATCHES "MAJOR ([0-9]+)")
      set(major ${CMAKE_MATCH_1})
    elseif(line MATCHES "MINOR ([0-9]+)")
      set(minor ${CMAKE_MATCH_1})
    endif()
  endforeach()
  if(major STREQUAL "" OR minor STREQUAL "")
    message(FATAL_ERROR "cannot read KILN_ABI_VERSION_MAJOR/MINOR from ${header}")
  endif()
  set(${out_var} "${major}.${minor}" PARENT_SCOPE)
endfunction()

# The ABI of the SDK headers this file ships with: the installed package's include folder
# (KilnSDKConfig.cmake sets _kiln_sdk_include_dir before including this file), else the
# source tree's sdk/include.
if(DEFINED _kiln_sdk_include_dir)
  kiln_sdk_read_abi_version(${_kiln_sdk_include_dir}/kiln/c/abi.h _kiln_sdk_abi_version)
else()
  kiln_sdk_read_abi_version(${CMAKE_CURRENT_LIST_DIR}/../include/kiln/c/abi.h
                            _kiln_sdk_abi_version)
endif()
set_property(GLOBAL PROPERTY KILN_SDK_ABI_VERSION ${_kiln_sdk_abi_version})

# kiln_add_plugin(<name> MANIFEST <manifest.yaml.in> SOURCES <src>...
#                 [VERSION <semver>] [MIN_ABI <major.minor>]
#                 [OUTPUT_DIRECTORY <dir>] [INSTALL_DESTINATION <dir>] [OUTPUT_NAME <name>])
# Builds lib<output>.so as a MODULE library against the SDK only, with hidden visibility
# (only the entry symbol is exported), and writes the manifest beside it from the template
# after substituting @VAR@ references (@KILN_PLUGIN_LIBRARY@ is the library's file name).
# The manifest's `version` and `abi` come from here, never from the template (configure fails
# if the template sets them): `version` is VERSION (default: PROJECT_VERSION) and `abi` is
# MIN_ABI (default: the ABI of the SDK headers the plugin is compiled against, as read from
# kiln/c/abi.h). The same values reach the sources as KILN_PLUGIN_VERSION (a string) and
# KILN_PLUGIN_MIN_ABI_MINOR, which kiln::sdk::negotiate() uses, so the manifest and the binary
# always agree. MIN_ABI below the SDK's minor says the plugin also serves older hosts (it must
# then check kiln::sdk::negotiated_abi_minor() before using newer features).
# The library's output name is kiln_<name> unless OUTPUT_NAME says otherwise.
function(kiln_add_plugin name)
  cmake_parse_arguments(ARG ""
    "MANIFEST;OUTPUT_DIRECTORY;INSTALL_DESTINATION;OUTPUT_NAME;VERSION;MIN_ABI" "SOURCES" ${ARGN})
  if(NOT ARG_MANIFEST)
    message(FATAL_ERROR "kiln_add_plugin(${name}): MANIFEST is required")
  endif()
  if(NOT ARG_OUTPUT_NAME)
    set(ARG_OUTPUT_NAME kiln_${name})
  endif()
  if(NOT ARG_OUTPUT_DIRECTORY)
    set(ARG_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  endif()
  if(NOT ARG_VERSION)
    set(ARG_VERSION ${PROJECT_VERSION})
  endif()
  if(NOT ARG_VERSION)
    message(FATAL_ERROR "kiln_add_plugin(${name}): no VERSION given and the project has no "
                        "VERSION (project(<name> VERSION x.y.z))")
  endif()
  get_property(sdk_abi GLOBAL PROPERTY KILN_SDK_ABI_VERSION)
  if(NOT ARG_MIN_ABI)
    set(ARG_MIN_ABI ${sdk_abi})
  endif()
  string(REPLACE "." ";" min_parts "${ARG_MIN_ABI}")
  string(REPLACE "." ";" sdk_parts "${sdk_abi}")
  list(LENGTH min_parts min_length)
  if(NOT min_length EQUAL 2 OR NOT ARG_MIN_ABI MATCHES "^[0-9]+\\.[0-9]+$")
    message(FATAL_ERROR "kiln_add_plugin(${name}): MIN_ABI must be MAJOR.MINOR, got '${ARG_MIN_ABI}'")
  endif()
  list(GET min_parts 0 min_major)
  list(GET min_parts 1 min_minor)
  list(GET sdk_parts 0 sdk_major)
  list(GET sdk_parts 1 sdk_minor)
  if(NOT min_major EQUAL sdk_major OR min_minor GREATER sdk_minor)
    message(FATAL_ERROR "kiln_add_plugin(${name}): MIN_ABI ${ARG_MIN_ABI} is not served by the "
                        "SDK's ABI ${sdk_abi} (same major, minor at most ${sdk_minor})")
  endif()

  add_library(${name} MODULE ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE KilnSDK::sdk)
  target_compile_definitions(${name} PRIVATE KILN_PLUGIN_VERSION="${ARG_VERSION}"
    KILN_PLUGIN_MIN_ABI_MINOR=${min_minor})
  _kiln_allow_unloading(${name})
  set_target_properties(${name} PROPERTIES
    PREFIX "lib" OUTPUT_NAME ${ARG_OUTPUT_NAME}
    LIBRARY_OUTPUT_DIRECTORY ${ARG_OUTPUT_DIRECTORY}
    C_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  if(NOT APPLE)
    target_link_options(${name} PRIVATE -Wl,--no-undefined)
  endif()

  get_filename_component(manifest_name ${ARG_MANIFEST} NAME)
  string(REGEX REPLACE "\\.in$" "" manifest_name ${manifest_name})
  file(READ ${ARG_MANIFEST} template)
  if(template MATCHES "(^|\n)(version|abi)[ \t]*:")
    message(FATAL_ERROR "kiln_add_plugin(${name}): ${ARG_MANIFEST} sets '${CMAKE_MATCH_2}:'; "
                        "remove it: kiln_add_plugin writes version and abi from its VERSION and "
                        "MIN_ABI arguments so that they match the binary")
  endif()
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${ARG_MANIFEST})
  set(KILN_PLUGIN_LIBRARY lib${ARG_OUTPUT_NAME}.so)
  set(manifest "${template}")
  if(NOT manifest MATCHES "\n$")
    string(APPEND manifest "\n")
  endif()
  string(APPEND manifest "# Written by kiln_add_plugin() from its VERSION and MIN_ABI:\n"
                         "version: ${ARG_VERSION}\nabi: \"${ARG_MIN_ABI}\"\n")
  file(CONFIGURE OUTPUT ${ARG_OUTPUT_DIRECTORY}/${manifest_name} CONTENT "${manifest}" @ONLY)
  if(ARG_INSTALL_DESTINATION)
    install(TARGETS ${name} LIBRARY DESTINATION ${ARG_INSTALL_DESTINATION})
    install(FILES ${ARG_OUTPUT_DIRECTORY}/${manifest_name} DESTINATION ${ARG_INSTALL_DESTINATION})
  endif()
endfunction()

# kiln_add_kernel_module(<name> SOURCES <src>... [OUTPUT_DIRECTORY <dir>])
# Builds lib<name>.so, a kernel library that exports kiln_kernel_library (see kiln/sdk/kernel.hpp).
function(kiln_add_kernel_module name)
  cmake_parse_arguments(ARG "" "OUTPUT_DIRECTORY" "SOURCES" ${ARGN})
  add_library(${name} MODULE ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE KilnSDK::sdk)
  _kiln_allow_unloading(${name})
  set_target_properties(${name} PROPERTIES PREFIX "lib"
    C_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  if(ARG_OUTPUT_DIRECTORY)
    set_target_properties(${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${ARG_OUTPUT_DIRECTORY})
  endif()
  if(NOT APPLE)
    target_link_options(${name} PRIVATE -Wl,--no-undefined)
  endif()
endfunction()
