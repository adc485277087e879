# CMake functions for plugin and kernel-module authors. Shipped with find_package(KilnSDK) and
# used in-tree by Kiln itself.

# GCC marks some libstdc++ statics as STB_GNU_UNIQUE, which makes dlclose a no-op: a plugin or
# kernel library built that way could never be unloaded.
function(_kiln_allow_unloading target)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fno-gnu-unique>)
  endif()
endfunction()

# kiln_add_plugin(<name> MANIFEST <manifest.yaml.in> SOURCES <src>...
#                 [OUTPUT_DIRECTORY <dir>] [INSTALL_DESTINATION <dir>])
# Builds lib<output>.so as a MODULE library against the SDK only, with hidden visibility
# (only the entry symbol is exported), and places the manifest beside it after substituting
# @VAR@ references (e.g. @PROJECT_VERSION@; @KILN_PLUGIN_LIBRARY@ is the library's file name).
# The library's output name is kiln_<name> unless OUTPUT_NAME says otherwise.
function(kiln_add_plugin name)
  cmake_parse_arguments(ARG "" "MANIFEST;OUTPUT_DIRECTORY;INSTALL_DESTINATION;OUTPUT_NAME"
                        "SOURCES" ${ARGN})
  if(NOT ARG_MANIFEST)
    message(FATAL_ERROR "kiln_add_plugin(${name}): MANIFEST is required")
  endif()
  if(NOT ARG_OUTPUT_NAME)
    set(ARG_OUTPUT_NAME kiln_${name})
  endif()
  if(NOT ARG_OUTPUT_DIRECTORY)
    set(ARG_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  endif()
  add_library(${name} MODULE ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE KilnSDK::sdk)
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
  set(KILN_PLUGIN_LIBRARY lib${ARG_OUTPUT_NAME}.so)
  configure_file(${ARG_MANIFEST} ${ARG_OUTPUT_DIRECTORY}/${manifest_name} @ONLY)
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
