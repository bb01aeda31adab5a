# S3 protocol pieces (src/s3: uri, config, sigv4, xml, timefmt): pure C, no network.
s3d_test(test_sigv4 unit/test_sigv4.c)
# http/retry (owner: http): pure tables, no network.
s3d_test(test_retry unit/test_retry.c)
s3d_test(test_http_map unit/test_http_map.c)
s3d_test(test_uri unit/test_uri.c)
s3d_test(test_xml unit/test_xml.c)
s3d_test(test_config unit/test_config.c)
# sigv4_tool: signs JSON request descriptions for tests/py/test_sigv4_botocore.py (not a test).
s3d_test(sigv4_tool unit/sigv4_tool.c)

# Fuzz targets for the XML reader and the INI/endpoint parsers, run here by a plain driver
# (fuzz/fuzz_main.c: corpus, every prefix, seeded mutations) as ordinary tests. For a longer
# soak: S3D_FUZZ_MUTATIONS=100000 BUILD/tests/bin/test_fuzz_xml.
s3d_test(test_fuzz_xml fuzz/fuzz_xml.c fuzz/fuzz_main.c)
target_compile_definitions(test_fuzz_xml PRIVATE
  S3D_FUZZ_CORPUS="${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/xml")
s3d_test(test_fuzz_ini fuzz/fuzz_ini.c fuzz/fuzz_main.c)
target_compile_definitions(test_fuzz_ini PRIVATE
  S3D_FUZZ_CORPUS="${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/ini")
# Real libFuzzer binaries (not run by the test runner):
#   CC=clang cmake -S . -B build-fuzz -DS3D_FUZZ=ON -DS3D_SANITIZE=ON
#   cmake --build build-fuzz --target fuzz_xml fuzz_ini
#   build-fuzz/tests/bin/fuzz_xml -max_total_time=60 tests/fuzz/corpus/xml
option(S3D_FUZZ "Build libFuzzer binaries of the fuzz targets (needs clang)" OFF)
if(S3D_FUZZ AND CMAKE_C_COMPILER_ID MATCHES "Clang")
  foreach(t xml ini)
    add_executable(fuzz_${t} fuzz/fuzz_${t}.c)
    target_compile_options(fuzz_${t} PRIVATE -fsanitize=fuzzer)
    target_link_options(fuzz_${t} PRIVATE -fsanitize=fuzzer)
    target_link_libraries(fuzz_${t} PRIVATE s3direct_internal)
    target_compile_definitions(fuzz_${t} PRIVATE _GNU_SOURCE)
    set_target_properties(fuzz_${t} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${S3D_TEST_BIN})
  endforeach()
elseif(S3D_FUZZ)
  message(WARNING "S3D_FUZZ needs clang (libFuzzer); the fuzz_* binaries are not built")
endif()
