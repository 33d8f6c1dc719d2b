// Skills through the CLI (issue 30): the stories260K checkpoint converted, then two skills added
// with the library (overlay tensors `skill.<id>.<name>` and routing descriptors fitted on prompts'
// φ through the backbone, FORMAT-NOTES §1.14), and `cortiq run / route / explain / ppl` driven on
// it. Oracles: the backbone file itself (`--skill none` must print what it prints), `--skill a`
// (what `--blend a:1` must print), a descriptor fitted on the routed prompt (E ≈ 0, so that skill
// must win). Skips when ../shared is absent.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "cmf/reader.h"
#include "cmf/tensor_names.h"
#include "cmf/writer.h"
#include "quant/codec.h"
#include "runtime/session.h"
#include "shell.h"
#include "specialize/routing.h"

namespace {

namespace fs = std::filesystem;
using namespace cortiq;
using cortiq::test::sh;

const char* kPromptA1 = "Once upon a time there was a little girl named Lily";
const char* kPromptA2 = "Once upon a time there was a big dog named Max";
const char* kPromptB1 = "The sun was hot. The bird sang in the tree all day";
const char* kPromptB2 = "The sun was big. The fish swam in the pond all day";

class SkillsRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string hf = std::string(CORTIQ_SOURCE_DIR) + "/../shared/models/stories260K-hf";
    if (!fs::exists(hf + "/model.safetensors")) return;
    dir_ = fs::temp_directory_path() / ("cortiq_skills_run_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    int rc = 0;
    sh(std::string(CORTIQ_CLI_PATH) + " convert " + hf + " -o " + base() + " --quant f32 2>&1", &rc);
    if (rc != 0) return;
    make_skills();
    ok_ = true;
  }
  static void TearDownTestSuite() {
    if (!dir_.empty() && !std::getenv("CORTIQ_KEEP_TEST_FILES")) fs::remove_all(dir_);  // kept: RSS runs
  }
  static std::string base() { return (dir_ / "s.cmf").string(); }
  static std::string skills() { return (dir_ / "skills.cmf").string(); }
  static std::string skill_file() { return (dir_ / "skill_file.cmf").string(); }

  /// skills.cmf = s.cmf + skill a (layer 1 down_proj × −1.5) + skill b (layer 0 up_proj × 0.5), each
  /// with a rank-1 descriptor fitted on two prompts' φ after the default router layer.
  static void make_skills() {
    const auto r = cmf::Reader::open(base());
    runtime::LoadOptions lo;
    lo.exact = true;
    runtime::LoadedModel lm = runtime::load_model(base(), lo);
    const auto& arch = r.header().arch;
    const uint32_t L = specialize::default_phi_layer(arch.num_layers);
    auto descriptor = [&](const char* p1, const char* p2) {
      std::vector<float> phis;
      for (const char* p : {p1, p2}) {
        const auto ids = lm.encode_raw(p);
        const auto phi = specialize::compute_phi(*lm.model, ids, L);
        phis.insert(phis.end(), phi.begin(), phi.end());
      }
      specialize::FitOptions fo;
      fo.rank = 1;
      fo.phi_layer = L;
      return specialize::fit_descriptor(phis, 2, arch.hidden_size, fo);
    };
    std::vector<cmf::TensorData> td;
    for (const cmf::TensorInfo& t : r.tensors()) {
      const auto p = r.payload(t);
      td.push_back({t.name, t.dtype, t.shape, std::vector<uint8_t>(p.begin(), p.end())});
    }
    auto overlay = [&](const std::string& id, const std::string& name, float k) {
      const cmf::TensorInfo* t = r.find(name);
      std::vector<float> v(t->shape[0] * t->shape[1]);
      quant::decode(t->dtype, t->shape, r.payload(*t), v);
      for (float& x : v) x *= k;
      std::vector<uint8_t> b(v.size() * 4);
      std::memcpy(b.data(), v.data(), b.size());
      td.push_back({cmf::skill_tensor_name(id, name), quant::DType::F32, t->shape, std::move(b)});
    };
    overlay("a", cmf::tensor_name(cmf::TensorRole::FfnDown, 1), -1.5f);
    overlay("b", cmf::tensor_name(cmf::TensorRole::FfnUp, 0), 0.5f);
    cmf::Header h = r.header();
    cmf::SkillRecord a, b;
    a.id = "a";
    a.layers = {1};
    a.selection = descriptor(kPromptA1, kPromptA2);
    b.id = "b";
    b.layers = {0};
    b.selection = descriptor(kPromptB1, kPromptB2);
    h.skills = {a, b};
    const auto vocab = r.vocab();
    cmf::write_file(skills(), h, td, std::nullopt, vocab);
    h.skills[0].base_dir_hash = "0123456789abcdef";
    cmf::write_file(skill_file(), h, td, std::nullopt, vocab);
  }

  /// `cortiq <args>` → stdout; stderr into `err` when given.
  static std::string cli(const std::string& args, int* rc = nullptr, std::string* err = nullptr) {
    const std::string ef = (dir_ / "stderr.txt").string();
    std::string out = sh(std::string(CORTIQ_CLI_PATH) + " " + args + " 2>" + ef, rc);
    if (err) *err = sh("cat " + ef);
    return out;
  }
  static inline fs::path dir_;
  static inline bool ok_ = false;
};

#define REQUIRE_FILE()                                   \
  if (dir_.empty()) GTEST_SKIP() << "../shared missing"; \
  ASSERT_TRUE(ok_) << "setup failed"

TEST_F(SkillsRun, RunRoutesAutomaticallyAndFlagsChooseTheSkill) {
  REQUIRE_FILE();
  const std::string gen = std::string(" -p '") + kPromptA1 + "' --greedy -n 12 --exact --threads 1";
  int rc = 0;
  std::string err;
  const std::string backbone = cli("run " + base() + gen, &rc);
  ASSERT_EQ(rc, 0);
  // No flag: routes (E ≈ 0 against the descriptor fitted on this prompt) and says so.
  const std::string routed = cli("run " + skills() + gen, &rc, &err);
  ASSERT_EQ(rc, 0) << err;
  EXPECT_NE(err.find("routed to skill: a (E = "), std::string::npos) << err;
  const std::string a = cli("run " + skills() + gen + " --skill a", &rc, &err);
  ASSERT_EQ(rc, 0) << err;
  EXPECT_NE(err.find("skill: a"), std::string::npos) << err;
  EXPECT_EQ(routed, a);
  // The backbone of the skills file is the original file, token for token.
  EXPECT_EQ(cli("run " + skills() + gen + " --skill none", &rc), backbone);
  EXPECT_NE(a, backbone);  // layer 1's FFN × −1.5 changes the greedy story
  // A blend of one skill is that skill; a real blend runs and says what it mixed.
  EXPECT_EQ(cli("run " + skills() + gen + " --blend a:1", &rc), a);
  cli("run " + skills() + gen + " --blend a:0.7,b:0.3", &rc, &err);
  EXPECT_EQ(rc, 0) << err;
  EXPECT_NE(err.find("blend: a 0.70, b 0.30"), std::string::npos) << err;
  cli("run " + skills() + gen + " --blend auto", &rc, &err);
  EXPECT_EQ(rc, 0) << err;
  EXPECT_NE(err.find("blend auto: a "), std::string::npos) << err;
}

TEST_F(SkillsRun, BadChoicesFailClearly) {
  REQUIRE_FILE();
  int rc = 0;
  std::string err;
  cli("run " + skills() + " -p hi -n 2 --skill nope", &rc, &err);
  EXPECT_NE(rc, 0);
  EXPECT_NE(err.find("unknown skill 'nope'; skills in this file: a, b"), std::string::npos) << err;
  cli("run " + skills() + " -p hi -n 2 --blend a:-1,b:2", &rc, &err);
  EXPECT_NE(rc, 0);
  EXPECT_NE(err.find("negative"), std::string::npos) << err;
  cli("run " + skills() + " -p hi -n 2 --blend a:0,b:0", &rc, &err);
  EXPECT_NE(rc, 0);
  EXPECT_NE(err.find("sum to 0"), std::string::npos) << err;
  cli("run " + skill_file() + " -p hi -n 2", &rc, &err);
  EXPECT_NE(rc, 0);
  EXPECT_NE(err.find("is a skill file (SKILL_FILE)"), std::string::npos) << err;
  EXPECT_NE(err.find("cortiq skill apply"), std::string::npos) << err;
  cli("run " + base() + " -p hi -n 2 --skill auto", &rc, &err);
  EXPECT_NE(rc, 0);
  EXPECT_NE(err.find("has no skills"), std::string::npos) << err;
}

TEST_F(SkillsRun, RouteAndExplainPrintEnergiesAndTheChoice) {
  REQUIRE_FILE();
  int rc = 0;
  std::string err;
  std::string out = cli("route " + skills() + " -p '" + kPromptB1 + "' --threads 1", &rc, &err);
  ASSERT_EQ(rc, 0) << err;
  EXPECT_NE(out.find("  a                    E = "), std::string::npos) << out;
  EXPECT_NE(out.find("  b                    E = "), std::string::npos) << out;
  EXPECT_NE(out.find("winner: b"), std::string::npos) << out;
  out = cli("explain " + skills() + " -p '" + kPromptA1 + "' --top 3 --threads 1", &rc, &err);
  ASSERT_EQ(rc, 0) << err;
  EXPECT_NE(out.find("winner: a"), std::string::npos) << out;
  EXPECT_NE(out.find("why: "), std::string::npos) << out;
  EXPECT_NE(out.find("first token (skill a):"), std::string::npos) << out;
  EXPECT_NE(out.find("top-1 confidence: "), std::string::npos) << out;
  out = cli("route " + base() + " -p hi --threads 1", &rc, &err);
  EXPECT_EQ(rc, 0) << err;
  EXPECT_EQ(out, "no routable skills in this container\n");
}

TEST_F(SkillsRun, PplTakesTheSkillFlags) {
  REQUIRE_FILE();
  const std::string text = (dir_ / "text.txt").string();
  sh(std::string("printf '%s. %s. %s.\\n' '") + kPromptA1 + "' '" + kPromptA2 + "' '" + kPromptB1 + "' > " +
     text);
  int rc = 0;
  std::string err;
  auto ppl = [&](const std::string& model, const std::string& flags) {
    const std::string out =
        cli("ppl " + model + " -f " + text + " --mode prefix --threads 1" + flags, &rc, &err);
    EXPECT_EQ(rc, 0) << err;
    return out.substr(0, out.find('\n'));
  };
  const std::string base_ppl = ppl(base(), "");
  EXPECT_EQ(ppl(skills(), ""), base_ppl);  // ppl routes only when asked
  EXPECT_EQ(ppl(skills(), " --skill none"), base_ppl);
  EXPECT_NE(ppl(skills(), " --skill a"), base_ppl);
  // --skill auto routes on the text's first 128 tokens and then equals the skill it names.
  const std::string routed = ppl(skills(), " --skill auto");
  const size_t at = err.find("routed to skill: ");
  ASSERT_NE(at, std::string::npos) << err;
  const std::string id = err.substr(at + 17, 1);
  EXPECT_EQ(routed, ppl(skills(), " --skill " + id)) << id;
}

/// POST/GET over a fresh loopback connection (Connection: close) → the response body (chunked
/// bodies are not expected: no streaming here); "" when the server cannot be reached.
std::string http(int port, const std::string& method, const std::string& path, const std::string& body = "") {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return "";
  }
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  if (method == "POST")
    req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  req += "\r\n" + body;
  (void)::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string resp;
  char buf[8192];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) resp.append(buf, static_cast<size_t>(n));
  ::close(fd);
  const size_t h = resp.find("\r\n\r\n");
  return h == std::string::npos ? "" : resp.substr(h + 4);
}

TEST_F(SkillsRun, ServeListsSkillsAndDecodesMixedSkillsInOneBatch) {
  REQUIRE_FILE();
  const fs::path out = dir_ / "serve.out";
  const pid_t pid = ::fork();
  if (pid == 0) {
    const std::string cmd = std::string("exec ") + CORTIQ_CLI_PATH + " serve " + skills() +
                            " --port 0 --parallel 3 --threads 1 --exact >" + out.string() + " 2>" +
                            (dir_ / "serve.err").string();
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int port = 0;
  for (int i = 0; i < 600 && port == 0; ++i) {
    std::ifstream f(out);
    std::string line;
    if (std::getline(f, line) && line.rfind("Listening on http://127.0.0.1:", 0) == 0)
      port = std::stoi(line.substr(line.rfind(':') + 1));
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GT(port, 0) << sh("cat " + (dir_ / "serve.err").string());
  using json = nlohmann::json;
  const json models = json::parse(http(port, "GET", "/v1/models"), nullptr, false);
  ASSERT_TRUE(models.is_object());
  std::vector<std::string> ids;
  for (const auto& m : models["data"]) ids.push_back(m["id"]);
  EXPECT_EQ(ids, (std::vector<std::string>{"llama-cortiq", "llama-cortiq:a", "llama-cortiq:b"}));
  const json sk = json::parse(http(port, "GET", "/v1/cortiq/skills"), nullptr, false);
  EXPECT_EQ(sk["default"], "auto");
  EXPECT_EQ(sk["skills"][0]["tensors"], 1);

  // Three requests at once (backbone, skill a by cortiq.skill, skill b by model): one batch.
  auto body = [](const std::string& extra) {
    return std::string("{\"prompt\": \"") + kPromptA1 + "\", \"max_tokens\": 12, \"temperature\": 0" + extra +
           "}";
  };
  const std::string reqs[3] = {body(", \"cortiq\": {\"skill\": \"none\"}"),
                               body(", \"cortiq\": {\"skill\": \"a\"}"),
                               body(", \"model\": \"llama-cortiq:b\"")};
  json got[3];
  std::vector<std::thread> th;
  for (int i = 0; i < 3; ++i)
    th.emplace_back(
        [&, i] { got[i] = json::parse(http(port, "POST", "/v1/completions", reqs[i]), nullptr, false); });
  for (auto& t : th) t.join();
  const json routed = json::parse(http(port, "POST", "/v1/completions", body("")), nullptr, false);
  const json bad = json::parse(
      http(port, "POST", "/v1/completions", body(", \"cortiq\": {\"skill\": \"zz\"}")), nullptr, false);
  ::kill(pid, SIGTERM);
  ::waitpid(pid, nullptr, 0);

  const std::string gen = std::string(" -p '") + kPromptA1 + "' --greedy -n 12 --exact --threads 1";
  const char* flags[3] = {" --skill none", " --skill a", " --skill b"};
  const char* fps[3] = {"backbone", "skill:a", "skill:b"};
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(got[i].is_object()) << i;
    ASSERT_TRUE(got[i].contains("choices")) << got[i].dump();
    std::string want = cli("run " + skills() + gen + flags[i]);
    if (!want.empty() && want.back() == '\n') want.pop_back();
    EXPECT_EQ(got[i]["choices"][0]["text"], want) << i;
    EXPECT_EQ(got[i]["system_fingerprint"], fps[i]);
  }
  EXPECT_EQ(routed["system_fingerprint"], "skill:a (routed)") << routed.dump();
  EXPECT_EQ(routed["choices"][0]["text"], got[1]["choices"][0]["text"]);
  EXPECT_EQ(bad["error"]["code"], "skill_not_found") << bad.dump();
}

}  // namespace
