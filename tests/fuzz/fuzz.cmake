# Fuzz targets (tests/fuzz): one LLVMFuzzerTestOneInput per parser that reads bytes from
# outside. Each is built two ways:
#  - test_fuzz_T: with the plain driver fuzz_main.c, an ordinary test in `make test` that
#    replays the committed corpus (every file, every prefix, a few hundred seeded mutations);
#  - fuzz_T: with -DS3D_FUZZ=ON under clang, a libFuzzer binary with ASan+UBSan, run by
#    scripts/fuzz.sh (`make fuzz`) from the corpus and dictionary named in that script.
set(S3D_FUZZ_TARGETS safetensors xml ini index uri)
set(S3D_FUZZ_CORPUS_safetensors
    ${CMAKE_CURRENT_SOURCE_DIR}/data/malformed:${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/safetensors)
set(S3D_FUZZ_CORPUS_xml ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/xml)
set(S3D_FUZZ_CORPUS_ini ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/ini)
set(S3D_FUZZ_CORPUS_index ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/index)
set(S3D_FUZZ_CORPUS_uri ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/uri)

foreach(t ${S3D_FUZZ_TARGETS})
  s3d_test(test_fuzz_${t} fuzz/fuzz_${t}.c fuzz/fuzz_main.c)
  target_compile_definitions(test_fuzz_${t} PRIVATE S3D_FUZZ_CORPUS="${S3D_FUZZ_CORPUS_${t}}")
endforeach()

if(S3D_FUZZ)
  add_custom_target(fuzzers)
  foreach(t ${S3D_FUZZ_TARGETS})
    add_executable(fuzz_${t} fuzz/fuzz_${t}.c)
    target_link_options(fuzz_${t} PRIVATE -fsanitize=fuzzer)
    target_link_libraries(fuzz_${t} PRIVATE s3direct_internal)
    target_compile_definitions(fuzz_${t} PRIVATE _GNU_SOURCE)
    set_target_properties(fuzz_${t} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${S3D_TEST_BIN})
    add_dependencies(fuzzers fuzz_${t})
  endforeach()
endif()
