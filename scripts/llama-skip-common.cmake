# Included right after project("llama.cpp") inside llama-cpp-python's vendored llama.cpp (the
# Makefile passes -DCMAKE_PROJECT_llama.cpp_INCLUDE=<this file> in CMAKE_ARGS). llama-cpp-python's
# top-level CMakeLists FORCE-sets LLAMA_BUILD_COMMON=ON, but none of the libraries it ships (llama,
# ggml*, mtmd) link llama-common, so skipping it saves about a third of the build.
set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama: build common utils library" FORCE)
