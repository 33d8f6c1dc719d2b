// Skills on the testbed model (issue 30): `cortiq skill eval-routing` routes held-out windows of
// each domain's test split to that domain's skill of models/testbed/testbed-skills.cmf (made by
// scripts/make_skills.sh), and the skill commands refuse bad input on the real file with nothing
// written. Skipped when ../shared (the corpus) or the skills file is absent.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <sstream>
#include <string>

#include "shell.h"

namespace {

namespace fs = std::filesystem;

std::string cli(const std::string& args, int* rc) {
  return cortiq::test::sh(std::string(CORTIQ_CLI_PATH) + " " + args + " 2>&1", rc);
}

const std::string kSrc = CORTIQ_SOURCE_DIR;
const std::string kSkills = kSrc + "/models/testbed/testbed-skills.cmf";
const std::string kCorpus = kSrc + "/../shared/data/testbed-corpus";
const char* kDomains[] = {"code", "scripture", "dictionary", "manuals"};

bool have_testbed() {
  return fs::exists(kSkills) && fs::exists(kCorpus + "/code/test.txt");
}

TEST(SkillsTestbed, RoutingPicksEachDomainsSkill) {
  if (!have_testbed()) GTEST_SKIP() << "needs " << kSkills << " and " << kCorpus;
  std::string args = "skill eval-routing " + kSkills + " --tokens 32 --samples 16 --seed 11 --threads 1";
  for (const char* d : kDomains)
    args += std::string(" --domain ") + d + "=" + kCorpus + "/" + d + "/test.txt";
  int rc = -1;
  std::string out = cli(args, &rc);
  ASSERT_EQ(rc, 0) << out;
  std::istringstream in(out);
  std::string line;
  std::getline(in, line);  // header
  std::map<std::string, double> argmin;
  double sum = 0;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string id, a;
    unsigned tokens = 0, samples = 0;
    ls >> id >> tokens >> samples >> a;
    ASSERT_EQ(tokens, 32u) << line;
    ASSERT_EQ(samples, 16u) << line;
    argmin[id] = std::stod(a);
    sum += argmin[id];
  }
  ASSERT_EQ(argmin.size(), 4u) << out;
  for (const char* d : kDomains) EXPECT_GE(argmin[d], 75.0) << d << "\n" << out;  // 12 of 16 at least
  EXPECT_GE(sum / 4, 90.0) << out;
}

TEST(SkillsTestbed, CommandsRefuseBadInputOnTheRealFile) {
  if (!have_testbed()) GTEST_SKIP() << "needs " << kSkills << " and " << kCorpus;
  fs::path dir = fs::temp_directory_path() / ("cortiq_skills_e2e_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string out = (dir / "out.cmf").string();
  int rc = -1;
  std::string o = cli("skill list " + kSkills, &rc);
  ASSERT_EQ(rc, 0) << o;
  for (const char* d : kDomains) EXPECT_NE(o.find(d), std::string::npos) << o;
  // A duplicate id, an id outside [A-Za-z0-9_-], a donor of another shape: refused, nothing written.
  o = cli("skill add " + kSkills + " --from " + kSkills + " --id code -o " + out, &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(o.find("already has a skill 'code'"), std::string::npos) << o;
  o = cli("skill add " + kSkills + " --from " + kSkills + " --id 'a b' -o " + out, &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(o.find("only A-Z"), std::string::npos) << o;
  o = cli("skill add " + kSkills + " --from " + kSrc + "/models/stories260K --id x -o " + out,
          &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(o.find("differs from the base"), std::string::npos) << o;
  EXPECT_FALSE(fs::exists(out));
  // materialize → export → apply is the specialist again; run refuses the SKILL_FILE itself.
  const std::string spec = (dir / "spec.cmf").string(), skill = (dir / "skill.cmf").string(),
                    back = (dir / "back.cmf").string();
  ASSERT_EQ((cli("skill materialize " + kSkills + " code -o " + spec, &rc), rc), 0);
  // The backbone alone: the skills file minus its four skills.
  const std::string base = (dir / "base.cmf").string();
  std::string rm = kSkills;
  for (const char* d : kDomains) {
    const std::string next = (dir / (std::string("rm-") + d + ".cmf")).string();
    ASSERT_EQ((cli("skill rm " + rm + " " + d + " -o " + next, &rc), rc), 0);
    rm = next;
  }
  fs::rename(rm, base);
  o = cli("skill export " + spec + " --base " + base + " --id code -o " + skill, &rc);
  ASSERT_EQ(rc, 0) << o;
  EXPECT_NE(o.find("6 tensors"), std::string::npos) << o;
  o = cli("run " + skill + " -p hi -n 1", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(o.find("skill apply"), std::string::npos) << o;
  o = cli("skill apply " + base + " " + skill + " -o " + back, &rc);
  ASSERT_EQ(rc, 0) << o;
  o = cli("diff " + spec + " " + back, &rc);  // every tensor identical (the headers' skill records differ)
  EXPECT_NE(o.find(" 0 changed, 0 only in a, 0 only in b"), std::string::npos) << o;
  // Another base: refused without --force.
  o = cli("skill apply " + spec + " " + skill + " -o " + (dir / "f.cmf").string(), &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(o.find("--force"), std::string::npos) << o;
  EXPECT_FALSE(fs::exists(dir / "f.cmf"));
  fs::remove_all(dir);
}

}  // namespace
