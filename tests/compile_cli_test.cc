// `cortiq compile` and `cortiq defrag` end to end on the embedded stories260K (converted to f32):
// a tiny compile writes a specialist that verifies and whose quality contract `info` prints; a
// result that is not better than dense exits 3 (0 with --accept-worse); a compiled mask shows in
// `masks` with its quality and `defrag --mask` makes it physical; bad input (output = input, a
// corpus too short, an interrupt) leaves nothing under the output name and no temporary.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>
#include <string>

#include "shell.h"

namespace {

namespace fs = std::filesystem;

std::string cli(const std::string& args, int* rc) {
  return cortiq::test::sh(std::string(CORTIQ_CLI_PATH) + " " + args + " 2>&1", rc);
}

class CompileCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cortiq_compile_cli_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    int rc = -1;
    const std::string o = cli(
        "convert " + std::string(CORTIQ_SOURCE_DIR) + "/models/stories260K --quant f32 -o " + model(), &rc);
    ASSERT_EQ(rc, 0) << o;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string model() const { return (dir_ / "stories.cmf").string(); }
  std::string corpus() const {
    return std::string(CORTIQ_SOURCE_DIR) + "/../shared/data/tinystories-sample/tinystories_sample.txt";
  }
  std::string tiny() const {
    return " --task stories --corpus " + corpus() +
           " --chunk 32 --select-chunks 4 --report-chunks 4 --budget 6 --eval-every 3 --lr 0.5 "
           "--l1-aggression 50 --target-sparsity 0.05 --fcd-steps 0 -q ";
  }
  /// Files in the folder whose name holds ".tmp." or ".stage" (leftovers of a writer).
  std::vector<std::string> leftovers() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) {
      const std::string n = e.path().filename().string();
      if (n.find(".tmp.") != std::string::npos || n.find(".stage") != std::string::npos) out.push_back(n);
    }
    return out;
  }
  fs::path dir_;
};

TEST_F(CompileCli, SpecialistMaskDefragAndVerdictExit) {
  const std::string spec = (dir_ / "spec.cmf").string();
  int rc = -1;
  std::string o = cli("compile " + model() + tiny() + "-o " + spec, &rc);
  // a 5 % cut of a model trained on this text is not better than dense on report: exit 3
  EXPECT_EQ(WEXITSTATUS(rc), 3) << o;
  EXPECT_NE(o.find("not better than the dense model"), std::string::npos) << o;
  ASSERT_TRUE(fs::exists(spec)) << "the file is written, its verdict recorded";
  o = cli("verify " + spec, &rc);
  EXPECT_EQ(rc, 0) << o;
  o = cli("info " + spec, &rc);
  ASSERT_EQ(rc, 0) << o;
  EXPECT_NE(o.find("Specialist:  task stories (l1-mask, as specialist)"), std::string::npos) << o;
  EXPECT_NE(o.find("kernels):"), std::string::npos) << o;
  EXPECT_NE(o.find("corpus tinystories_sample.txt sha256 "), std::string::npos) << o;
  o = cli("compile " + model() + tiny() + "--accept-worse -o " + (dir_ / "spec2.cmf").string(), &rc);
  EXPECT_EQ(rc, 0) << o;

  const std::string masked = (dir_ / "masked.cmf").string();
  o = cli("compile " + model() + tiny() + "--as mask --accept-worse -o " + masked, &rc);
  ASSERT_EQ(rc, 0) << o;
  o = cli("masks " + masked, &rc);
  EXPECT_NE(o.find("stories"), std::string::npos) << o;
  EXPECT_NE(o.find("\"baseline_dense\""), std::string::npos) << o;
  EXPECT_NE(o.find("report ppl"), std::string::npos) << o;
  const std::string cut = (dir_ / "cut.cmf").string();
  o = cli("defrag " + masked + " --mask stories -o " + cut, &rc);
  ASSERT_EQ(rc, 0) << o;
  EXPECT_LT(fs::file_size(cut), fs::file_size(masked));
  o = cli("verify " + cut, &rc);
  EXPECT_EQ(rc, 0) << o;
  // the same text under the mask and on the cut file: equal perplexity (f32, exact kernels)
  const std::string a = cli("ppl " + masked + " --task stories --exact --ctx 64 -f " + corpus(), &rc);
  const std::string b = cli("ppl " + cut + " --exact --ctx 64 -f " + corpus(), &rc);
  const auto ppl = [](const std::string& s) { return s.substr(s.find("PPL = "), 16); };
  EXPECT_EQ(ppl(a), ppl(b)) << a << b;
  o = cli("defrag " + masked + " --mask nope -o " + (dir_ / "x.cmf").string(), &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(o.find("no task mask 'nope' (masks: stories)"), std::string::npos) << o;
  EXPECT_TRUE(leftovers().empty());
}

TEST_F(CompileCli, SkillAndReportRenders) {
  const std::string skill = (dir_ / "skill.cmf").string(), html = (dir_ / "report.html").string();
  int rc = -1;
  std::string o =
      cli("compile " + model() + " --task stories --corpus " + corpus() +
              " --chunk 32 --select-chunks 4 --report-chunks 4 --budget 6 --eval-every 3 --lr 0.5 "
              "--l1-aggression 50 --target-sparsity 0.05 --fcd-steps 20 --fcd-layers 2 --fcd-lr 1e-4 "
              "--skill-prompts 8 --as skill --accept-worse -q --report " +
              html + " -o " + skill,
          &rc);
  ASSERT_EQ(rc, 0) << o;
  o = cli("skill list " + skill, &rc);
  EXPECT_EQ(rc, 0) << o;
  EXPECT_NE(o.find("stories"), std::string::npos) << o;
  o = cli("verify " + skill, &rc);
  EXPECT_EQ(rc, 0) << o;
  // self-contained: three inline SVG plots, no script, nothing fetched
  const std::string page = cortiq::test::sh("cat " + html);
  for (const char* id : {"plot-phase-a", "plot-phase-b", "plot-widths"})
    EXPECT_NE(page.find(std::string("id=\"") + id + "\""), std::string::npos) << id;
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_EQ(page.find("src="), std::string::npos);
  EXPECT_EQ(page.find("href="), std::string::npos);
  if (cortiq::test::sh("command -v chromium").empty()) GTEST_SKIP() << "chromium is not installed";
  // rendered: the three plots sit side by side in an 1800-px window; each third of the screenshot
  // must hold the plot's coloured marks (series, sweep, chosen ring, bars)
  const std::string png = (dir_ / "report.png").string();
  o = cortiq::test::sh(
      "timeout 120 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars "
      "--window-size=1800,900 --screenshot=" +
          png + " file://" + html + " 2>&1",
      &rc);
  ASSERT_TRUE(fs::exists(png)) << o;
  o = cortiq::test::sh(
      "python3 " + std::string(CORTIQ_SOURCE_DIR) + "/tests/tools/png_colored.py " + png + " 3", &rc);
  ASSERT_EQ(rc, 0) << o;
  std::istringstream in(o);
  long a = 0, b = 0, c = 0;
  in >> a >> b >> c;
  EXPECT_GT(a, 300) << o << " (phase A plot)";
  EXPECT_GT(b, 300) << o << " (phase B plot)";
  EXPECT_GT(c, 300) << o << " (widths plot)";
}

TEST_F(CompileCli, BadInputLeavesNothing) {
  int rc = -1;
  std::string o = cli("compile " + model() + tiny() + "-o " + model(), &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(o.find("is the input file"), std::string::npos) << o;
  const std::string out = (dir_ / "out.cmf").string();
  o = cli("compile " + model() + tiny() + "--chunk 256 -o " + out, &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(o.find("too short"), std::string::npos) << o;
  o = cli("compile " + model() + tiny() + "--as skills -o " + out, &rc);
  EXPECT_NE(o.find("--as must be"), std::string::npos) << o;
  o = cli("compile " + model() + tiny() + "--as skill -o " + out, &rc);
  EXPECT_NE(o.find("--fcd-steps 0 leaves nothing to store"), std::string::npos) << o;
  // an interrupt half-way (SIGTERM: a background job of a non-interactive shell ignores SIGINT):
  // nothing under the output name, no temporary
  const std::string cmd = "timeout 60 " + std::string(CORTIQ_CLI_PATH) + " compile " + model() +
                          " --task stories --corpus " + corpus() +
                          " --chunk 32 --budget 100000 --eval-every 1000 -q -o " + out;
  // (timeout: never hang the suite if the signal were lost)
  cortiq::test::sh("(" + cmd + " >/dev/null 2>&1 & p=$!; sleep 1.5; kill -TERM $p; wait $p) 2>/dev/null",
                   &rc);
  EXPECT_FALSE(fs::exists(out));
  EXPECT_TRUE(leftovers().empty());
}

}  // namespace
