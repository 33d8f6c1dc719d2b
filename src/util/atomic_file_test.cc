// AtomicFile: the final name appears only on commit; an abandoned or interrupted write leaves no
// temporary behind (DESIGN: writers never leave a half-written output under the final name).
#include "util/atomic_file.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "util/error.h"

namespace cortiq {
namespace {

namespace fs = std::filesystem;

fs::path scratch(const char* name) {
  const fs::path d = fs::temp_directory_path() / ("cortiq_atomic_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d / name;
}

TEST(AtomicFile, CommitRenamesAndAbandonRemoves) {
  const fs::path out = scratch("a.bin");
  {
    AtomicFile f(out.string());
    f.write("abc", 3);
    EXPECT_TRUE(fs::exists(f.temp_path()));
    EXPECT_FALSE(fs::exists(out));
    f.commit();
    EXPECT_FALSE(fs::exists(f.temp_path()));
  }
  EXPECT_EQ(fs::file_size(out), 3u);
  std::string temp;
  {
    AtomicFile f(scratch("b.bin").string());
    f.write("x", 1);
    temp = f.temp_path();
  }  // no commit: an error path
  EXPECT_FALSE(fs::exists(temp));
  EXPECT_FALSE(fs::exists(scratch("b.bin")));
  fs::remove_all(out.parent_path());
}

// A process killed by SIGTERM, SIGINT, SIGHUP or SIGQUIT in the middle of a write, or crashing
// (std::abort as std::terminate does, a fault), removes its temporary and still dies of that signal.
TEST(AtomicFile, SignalRemovesTheTemporary) {
  for (const int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGABRT, SIGFPE, SIGSEGV, SIGBUS}) {
    const fs::path out = scratch("c.bin");
    const std::string temp = out.string() + ".tmp.";
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      const rlimit no_core{0, 0};  // the crash signals would dump core
      ::setrlimit(RLIMIT_CORE, &no_core);
      ::signal(sig, SIG_DFL);
      remove_temporaries_on_signals();
      AtomicFile f(out.string());
      f.write("partial", 7);
      if (sig == SIGABRT)
        std::abort();
      else
        ::raise(sig);
      ::_exit(0);  // not reached
    }
    int st = 0;
    ASSERT_EQ(::waitpid(pid, &st, 0), pid);
    EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == sig) << sig << ": " << st;
    EXPECT_FALSE(fs::exists(temp + std::to_string(pid))) << sig;
    EXPECT_FALSE(fs::exists(out)) << sig;
    fs::remove_all(out.parent_path());
  }
}

// read_file gives the bytes, and names a folder or a missing file instead of reading "" from it.
// An output that names a folder is refused before anything is written (it used to fail only at
// the final rename, after a whole conversion).
TEST(AtomicFile, RefusesAFolderAsOutput) {
  const fs::path d = scratch("x").parent_path();
  // (output, what it is, the suggested file): one '/' before the name, the caller's example name
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {d.string(), "is a folder", (d / "model.cmf").string()},
      {d.string() + "/", "is a folder", (d / "model.cmf").string()},
      {(d / "new").string() + "/", "ends in '/'", (d / "new" / "model.cmf").string()},
  };
  for (const auto& [bad, what, example] : cases) try {
      AtomicFile f(bad);
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
      EXPECT_NE(e.message().find("'" + bad + "' " + what + ": give a file name (e.g. " + example + ")"),
                std::string::npos)
          << e.what();
    }
  try {
    AtomicFile f(d.string() + "/", "bench.json");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("(e.g. " + (d / "bench.json").string() + ")"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::is_empty(d));  // no temporary left behind
  fs::remove_all(d);
}

TEST(AtomicFile, ReadFileRefusesAFolder) {
  const fs::path f = scratch("r.bin");
  write_file_atomic(f.string(), std::span<const uint8_t>(reinterpret_cast<const uint8_t*>("a\0b"), 3));
  EXPECT_EQ(read_file(f.string()), std::string("a\0b", 3));
  for (const fs::path& bad : {f.parent_path(), f.parent_path() / "missing"}) try {
      (void)read_file(bad.string());
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Io) << e.what();
      EXPECT_NE(e.message().find(bad.string()), std::string::npos) << e.what();
    }
  fs::remove_all(f.parent_path());
}

}  // namespace
}  // namespace cortiq
