# Installs the `flexkit` component of a built tree into a scratch prefix, checks what was
# installed, then configures, builds and runs the project beside this script against it.
#
#   cmake -DBUILD_DIR=<flexkit build dir> -DSCRATCH_DIR=<scratch dir>
#         [-DCONFIG=Release] [-DGENERATOR=Ninja] [-DMAKE_PROGRAM=<ninja>] [-DCXX_COMPILER=<c++>]
#         [-DCUDAToolkit_ROOT=<dir>] [-DCUDA_COMPILER=<nvcc>] [-DCLI=OFF]
#         -P run_consumer_test.cmake
#
# SCRATCH_DIR is deleted first, so every run starts from nothing. CLI=OFF: a build without the
# command line (FLEXKIT_CLI=OFF), so bin/flexkit is not expected.
cmake_minimum_required(VERSION 3.24)

foreach(var BUILD_DIR SCRATCH_DIR)
  if(NOT ${var})
    message(FATAL_ERROR "install_consumer: -D${var}=... is required")
  endif()
endforeach()

set(prefix "${SCRATCH_DIR}/prefix")
set(consumer_build "${SCRATCH_DIR}/consumer-build")
get_filename_component(flexkit_source_dir "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)
file(REMOVE_RECURSE "${SCRATCH_DIR}")
file(MAKE_DIRECTORY "${SCRATCH_DIR}")

set(config_args "")
if(CONFIG)
  set(config_args --config "${CONFIG}")
endif()

# Runs a command; on a non-zero exit, stops with its output.
function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc STREQUAL "0")
    message(FATAL_ERROR "install_consumer: ${what} failed (${rc}):\n${out}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

# 1. Install the C++ package only.
run_step("cmake --install" "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${prefix}"
         --component flexkit ${config_args})

# 2. What was installed: the public headers exactly, the CLI, nothing of another component.
if(NOT DEFINED CLI)
  set(CLI ON)
endif()
set(expected_files include/flexkit/array.hpp include/flexkit/portable/config.hpp)
if(CLI)
  list(APPEND expected_files bin/flexkit)
endif()
foreach(file ${expected_files})
  if(NOT EXISTS "${prefix}/${file}")
    message(FATAL_ERROR "install_consumer: ${prefix}/${file} was not installed")
  endif()
endforeach()
file(GLOB_RECURSE device_headers "${prefix}/*.cuh")
if(device_headers)
  message(FATAL_ERROR "install_consumer: internal device headers installed: ${device_headers}")
endif()
file(GLOB_RECURSE installed_headers RELATIVE "${prefix}/include" "${prefix}/include/*")
file(GLOB_RECURSE public_headers RELATIVE "${flexkit_source_dir}/include"
     "${flexkit_source_dir}/include/flexkit/*.hpp" "${flexkit_source_dir}/include/flexkit/*.h")
list(APPEND public_headers flexkit/version.hpp)  # generated from version.hpp.in
# The MPI communicator's header goes with the command line's flexkit_mpi, which is not installed.
list(REMOVE_ITEM public_headers flexkit/distributed_mpi.hpp)
list(SORT installed_headers)
list(SORT public_headers)
if(NOT installed_headers STREQUAL public_headers)
  message(FATAL_ERROR "install_consumer: the installed headers are not the public ones:\n"
                      "installed: ${installed_headers}\nexpected:  ${public_headers}")
endif()
file(GLOB top_level RELATIVE "${prefix}" "${prefix}/*")
foreach(entry ${top_level})
  if(NOT entry MATCHES "^(bin|include|lib|lib64)$")
    message(FATAL_ERROR "install_consumer: --component flexkit installed ${prefix}/${entry}")
  endif()
endforeach()

# The installed CLI runs on its own and reports the installed headers' version.
if(CLI)
  file(STRINGS "${prefix}/include/flexkit/version.hpp" version_line REGEX "kVersion = \"")
  string(REGEX REPLACE ".*kVersion = \"([^\"]*)\".*" "\\1" version "${version_line}")
  run_step("bin/flexkit --version" "${prefix}/bin/flexkit" --version)
  if(NOT step_output STREQUAL "flexkit ${version}\n")
    message(FATAL_ERROR "install_consumer: bin/flexkit --version printed '${step_output}', "
                        "expected 'flexkit ${version}'")
  endif()
endif()

# 3. Configure, build and run the consumer against the prefix alone.
set(configure_args -S "${CMAKE_CURRENT_LIST_DIR}" -B "${consumer_build}"
    "-DCMAKE_PREFIX_PATH=${prefix}" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
if(GENERATOR)
  list(APPEND configure_args -G "${GENERATOR}")
endif()
if(MAKE_PROGRAM)
  list(APPEND configure_args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()
if(CXX_COMPILER)
  list(APPEND configure_args "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
endif()
if(CONFIG)
  list(APPEND configure_args "-DCMAKE_BUILD_TYPE=${CONFIG}")
endif()
if(CUDAToolkit_ROOT)
  list(APPEND configure_args "-DCUDAToolkit_ROOT=${CUDAToolkit_ROOT}")
endif()
if(CUDA_COMPILER)
  list(APPEND configure_args "-DCMAKE_CUDA_COMPILER=${CUDA_COMPILER}")
endif()
run_step("configuring the consumer" "${CMAKE_COMMAND}" ${configure_args})
message("${step_output}")

# find_package must have taken the installed package, not the build tree or another copy.
file(STRINGS "${consumer_build}/CMakeCache.txt" flexkit_dir_line REGEX "^flexkit_DIR:")
string(REGEX REPLACE "^flexkit_DIR:[A-Z]*=" "" flexkit_dir "${flexkit_dir_line}")
file(REAL_PATH "${prefix}" real_prefix)
file(REAL_PATH "${flexkit_dir}" real_flexkit_dir)
string(FIND "${real_flexkit_dir}/" "${real_prefix}/" at)
if(NOT at EQUAL 0)
  message(FATAL_ERROR "install_consumer: flexkit was found at ${flexkit_dir}, not under ${prefix}")
endif()

run_step("building the consumer" "${CMAKE_COMMAND}" --build "${consumer_build}" ${config_args})

set(app "${consumer_build}/app")
if(CONFIG AND EXISTS "${consumer_build}/${CONFIG}/app")  # multi-config generators
  set(app "${consumer_build}/${CONFIG}/app")
endif()
run_step("running the consumer" "${app}")
message("${step_output}")
