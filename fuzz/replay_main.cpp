// fuzz/replay_main.cpp - runs a fuzz target's LLVMFuzzerTestOneInput on files, without libFuzzer.
//
//   opfuse_fuzz_replay_<target> PATH...   (files, or folders whose files are read in name order)
//
// The regression tests (ctest fuzz.replay.<target>) replay fuzz/regressions/<target>/ - every
// input that once crashed or tripped a sanitizer - with any compiler and in every build, so a
// fixed finding stays fixed even where clang's libFuzzer is not installed.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    std::error_code ec;
    if (fs::is_directory(argv[i], ec)) {
      for (const fs::directory_entry& e : fs::directory_iterator(argv[i]))
        // Not the folder's notes (README.md, .keep).
        if (e.is_regular_file() && e.path().filename() != "README.md" && !e.path().filename().string().starts_with("."))
          files.push_back(e.path());
    } else if (fs::is_regular_file(argv[i], ec)) {
      files.emplace_back(argv[i]);
    } else {
      std::fprintf(stderr, "replay: %s: no such file or folder\n", argv[i]);
      return 2;
    }
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& p : files) {
    std::ifstream f(p, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::printf("replay: %s (%zu bytes)\n", p.c_str(), bytes.size());
    std::fflush(stdout);
    LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("replay: %zu inputs, no crash\n", files.size());
  return 0;
}
