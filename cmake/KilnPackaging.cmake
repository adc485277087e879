# SPDX-License-Identifier: Apache-2.0
# Install rules for the two CMake packages:
#   find_package(Kiln)    -> Kiln::kiln        (host applications)
#   find_package(KilnSDK) -> KilnSDK::sdk, KilnSDK::support, kiln_add_plugin(),
#                            kiln_add_kernel_module()
include(CMakePackageConfigHelpers)
set(KILN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Kiln)
set(KILNSDK_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/KilnSDK)

install(TARGETS kiln_sdk EXPORT KilnTargets)
install(EXPORT KilnTargets NAMESPACE Kiln:: DESTINATION ${KILN_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/KilnConfig.cmake.in
  ${PROJECT_BINARY_DIR}/KilnConfig.cmake INSTALL_DESTINATION ${KILN_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/KilnConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/KilnConfig.cmake ${PROJECT_BINARY_DIR}/KilnConfigVersion.cmake
  DESTINATION ${KILN_CMAKE_DIR})

install(DIRECTORY sdk/include/kiln/c sdk/include/kiln/sdk DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/KilnSDKConfig.cmake.in
  ${PROJECT_BINARY_DIR}/KilnSDKConfig.cmake INSTALL_DESTINATION ${KILNSDK_CMAKE_DIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/KilnSDKConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/KilnSDKConfig.cmake
  ${PROJECT_BINARY_DIR}/KilnSDKConfigVersion.cmake
  sdk/cmake/KilnSDKFunctions.cmake DESTINATION ${KILNSDK_CMAKE_DIR})
# The support library (KilnSDK::support) as an imported target of the SDK package; its headers
# are installed with the rest of kiln/sdk above.
install(TARGETS kiln_sdk_support EXPORT KilnSDKTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT KilnSDKTargets NAMESPACE KilnSDK:: DESTINATION ${KILNSDK_CMAKE_DIR})
