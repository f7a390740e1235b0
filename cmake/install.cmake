# Install and export rules of the C++ package: find_package(flexkit CONFIG) then gives
# flexkit::flexkit (public headers, the static library and what it links against), and the
# command line is installed as bin/flexkit. Every rule is in the `flexkit` component so that
# another packaging (a Python wheel) can install only its own component from the same build.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(flexkit_install_cmakedir ${CMAKE_INSTALL_LIBDIR}/cmake/flexkit)

set_target_properties(flexkit PROPERTIES EXPORT_NAME flexkit)
install(TARGETS flexkit EXPORT flexkitTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT flexkit)
# Only the public headers (include/flexkit, portable/ included: public headers include it). The
# device headers under rtc/ are embedded into the library, and those under src/ are internal.
# distributed_mpi.hpp stays out: its library (flexkit_mpi, for the command line) is not installed.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/flexkit
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT flexkit
        FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h" PATTERN "distributed_mpi.hpp" EXCLUDE)
install(FILES ${PROJECT_BINARY_DIR}/generated/include/flexkit/version.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/flexkit COMPONENT flexkit)
# Guarded so that a build leaving the command line out still installs the library.
if(TARGET flexkit_cli)
  install(TARGETS flexkit_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT flexkit)
endif()

install(EXPORT flexkitTargets NAMESPACE flexkit:: FILE flexkitTargets.cmake
        DESTINATION ${flexkit_install_cmakedir} COMPONENT flexkit)
# The same targets for use straight from this build tree. The config and version files are
# written beside it, so flexkit_DIR=<build dir> works as well as an installed prefix.
export(EXPORT flexkitTargets NAMESPACE flexkit:: FILE ${CMAKE_BINARY_DIR}/flexkitTargets.cmake)

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/flexkitConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/flexkitConfig.cmake
                              INSTALL_DESTINATION ${flexkit_install_cmakedir})
# 0.x: a minor release may break the API, so only patch releases count as compatible.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/flexkitConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/flexkitConfig.cmake ${CMAKE_BINARY_DIR}/flexkitConfigVersion.cmake
        DESTINATION ${flexkit_install_cmakedir} COMPONENT flexkit)
