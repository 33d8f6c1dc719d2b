// Test support (header-only; for GoogleTest unit and end-to-end tests): a fresh folder per test.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace cortiq::test {

/// A fresh, empty folder under the system temp dir, named after the running test and the process
/// id (`cortiq_<suite>.<test>_<pid>`, so parallel test processes never share one), removed with
/// everything in it when the object goes out of scope. `d / "x.cmf"` is the path of a file in it.
struct TempDir {
  std::filesystem::path p;
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    p = std::filesystem::temp_directory_path() / ("cortiq_" + std::string(info->test_suite_name()) + "." +
                                                  info->name() + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(p);
    std::filesystem::create_directories(p);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(p, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return (p / name).string(); }
};

}  // namespace cortiq::test
