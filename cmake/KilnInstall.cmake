# `cmake --install`: headers, the static libraries, the shared libkiln.so (KILN_BUILD_SHARED), the
# kiln binary, a KilnConfig.cmake exporting Kiln::kiln (with Kiln::kiln_<folder> behind it) and
# Kiln::kiln_shared, and kiln.pc for pkg-config (the static libraries).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

get_property(kiln_libraries GLOBAL PROPERTY KILN_FOLDER_LIBRARIES)
install(TARGETS ${kiln_libraries} dnnl_cpu onnx_proto EXPORT KilnTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS kiln_cli_main RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/src/kiln DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h")
install(EXPORT KilnTargets NAMESPACE Kiln:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Kiln)
# The same targets as this build tree has them, for another tree of this project that links the
# engine instead of compiling it again (fuzz/CMakeLists.txt's KILN_ENGINE_BUILD).
export(EXPORT KilnTargets NAMESPACE Kiln:: FILE ${PROJECT_BINARY_DIR}/KilnBuildTreeTargets.cmake)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/KilnConfig.cmake.in
  ${PROJECT_BINARY_DIR}/KilnConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Kiln)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/KilnConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/KilnConfig.cmake ${PROJECT_BINARY_DIR}/KilnConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Kiln)

# pkg-config: the libraries in link order (each folder before the ones it uses), then their
# dependencies, and the compile options Kiln::kiln carries.
set(kiln_pc_libs "")
foreach(folder cli onnx profile train parallel data record amp optim models nn graph autograd ops
               comm core)
  get_target_property(kind kiln_${folder} TYPE)
  if(kind STREQUAL "STATIC_LIBRARY")
    string(APPEND kiln_pc_libs " -lkiln_${folder}")
  endif()
  if(folder STREQUAL "onnx")
    string(APPEND kiln_pc_libs " -lonnx_proto")  # the exporter's generated messages
  endif()
endforeach()
set(kiln_pc_dep_libs "")
foreach(lib ${DNNL_LIBRARY} ${MPI_C_LIBRARIES})
  string(APPEND kiln_pc_dep_libs " ${lib}")
endforeach()
set(kiln_pc_cflags "-std=c++20 ${OpenMP_CXX_FLAGS}")
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  string(APPEND kiln_pc_cflags " -fno-tree-slp-vectorize")
endif()
foreach(dir ${MPI_C_INCLUDE_DIRS})
  string(APPEND kiln_pc_cflags " -I${dir}")
endforeach()
# Relocatable: the prefix is found from the .pc file's own folder.
file(RELATIVE_PATH kiln_pc_to_prefix /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(${PROJECT_SOURCE_DIR}/cmake/kiln.pc.in ${PROJECT_BINARY_DIR}/kiln.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/kiln.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
