# k3_add_test(NAME name SOURCES a.cc b.cc LIBS lib1 lib2)
# One GoogleTest executable; tests find ../shared through K3_SHARED_DIR and skip when it is absent.
function(k3_add_test)
  cmake_parse_arguments(T "" "NAME" "SOURCES;LIBS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(${T_NAME} PRIVATE K3_SHARED_DIR="${K3_SHARED_DIR}"
                                                K3_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  gtest_discover_tests(${T_NAME} DISCOVERY_TIMEOUT 60
                       PROPERTIES ENVIRONMENT "K3_SHARED_DIR=${K3_SHARED_DIR}")
endfunction()
