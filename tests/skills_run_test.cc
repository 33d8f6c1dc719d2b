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
#include <cmath>
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
  static std::string cli(const std::string& args, int* rc = nullptr, std::string* err = nullptr,
                         const std::string& env = "") {
    const std::string ef = (dir_ / "stderr.txt").string();
    std::string out = sh(env + std::string(CORTIQ_CLI_PATH) + " " + args + " 2>" + ef, rc);
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

TEST_F(SkillsRun, RouteDynamicSwitchesWhenThePromptChangesDomain) {
  REQUIRE_FILE();
  int rc = 0;
  std::string err;
  const std::string tail = " --greedy -n 10 --exact --threads 1";
  // A prompt that stays in a's domain: the dynamic router keeps a, and the sequence (which now
  // carries its skill through the engine) prints what `--skill a` prints.
  const std::string same = std::string(" -p '") + kPromptA1 + ". " + kPromptA2 + "'";
  const std::string a = cli("run " + skills() + same + tail + " --skill a", &rc, &err);
  ASSERT_EQ(rc, 0) << err;
  EXPECT_EQ(err.find("[route:"), std::string::npos) << err;  // no flag: no re-routing
  EXPECT_EQ(cli("run " + skills() + same + tail + " --skill a --route-dynamic", &rc, &err), a);
  ASSERT_EQ(rc, 0) << err;
  EXPECT_NE(err.find("dynamic routing: EON 0.62, EOFF 0.74, MARGIN 0.03, PERIOD 8"), std::string::npos)
      << err;
  EXPECT_EQ(err.find("[route:"), std::string::npos) << err;
  // Starting on a with a prompt whose last 32 tokens are b's text: the first evaluation (right
  // after the prefill) switches to b, and the text differs from a run that stays on a.
  const std::string change = std::string(" -p '") + kPromptA1 + ". " + kPromptB1 + ". " + kPromptB2 + "'";
  const std::string stay = cli("run " + skills() + change + tail + " --skill a", &rc, &err);
  ASSERT_EQ(rc, 0) << err;
  const std::string dyn = cli("run " + skills() + change + tail + " --skill a --route-dynamic", &rc, &err);
  ASSERT_EQ(rc, 0) << err;
  EXPECT_NE(err.find("[route: a -> b at token "), std::string::npos) << err;
  EXPECT_NE(dyn, stay);
  // Bad input: a blend, thresholds that are not numbers or leave no band, a file without skills.
  cli("run " + skills() + change + tail + " --blend a:1 --route-dynamic", &rc, &err);
  EXPECT_NE(rc, 0);
  EXPECT_NE(err.find("--route-dynamic and --blend"), std::string::npos) << err;
  cli("run " + skills() + change + tail + " --route-dynamic", &rc, &err, "CMF_ROUTE_EON=x ");
  EXPECT_NE(rc, 0);
  EXPECT_NE(err.find("CMF_ROUTE_EON='x' is not a number"), std::string::npos) << err;
  cli("run " + skills() + change + tail + " --route-dynamic", &rc, &err, "CMF_ROUTE_EON=0.9 ");
  EXPECT_NE(rc, 0);
  EXPECT_NE(err.find("EON 0.9 above EOFF 0.74"), std::string::npos) << err;
  cli("run " + base() + change + tail + " --route-dynamic", &rc, &err);
  EXPECT_NE(rc, 0);
  EXPECT_NE(err.find("no skill of this file has a routing descriptor"), std::string::npos) << err;
}

TEST_F(SkillsRun, CalibrateWritesHeaderRoutingThatRoutingThenUses) {
  REQUIRE_FILE();
  int rc = 0;
  std::string err;
  const std::string fa = (dir_ / "held-a.txt").string(), fb = (dir_ / "held-b.txt").string();
  {
    std::ofstream a(fa), b(fb);
    for (int i = 0; i < 12; ++i) {
      a << kPromptA1 << ". " << kPromptA2 << ". ";
      b << kPromptB1 << ". " << kPromptB2 << ". ";
    }
  }
  const std::string cal = (dir_ / "cal.cmf").string();
  const std::string args = "skill calibrate " + skills() + " --domain a=" + fa + " --domain b=" + fb +
                           " --tokens 12 --samples 10 --threads 1";
  const std::string out = cli(args + " -o " + cal, &rc, &err);
  ASSERT_EQ(rc, 0) << err;
  EXPECT_NE(out.find("header.routing: temperature "), std::string::npos) << out;
  const auto r = cmf::Reader::open(cal);
  ASSERT_TRUE(r.header().routing.has_value());
  const auto& j = *r.header().routing;
  const double t = j["temperature"].get<double>(), theta = j["novelty_theta"].get<double>();
  // T lies on the grid 1e-3·1.15^k; θ in (0, 0.999]; 20 windows; the default target fpr
  const double k = std::log(t / 1e-3) / std::log(1.15);
  EXPECT_NEAR(k, std::round(k), 1e-6) << t;
  EXPECT_GT(theta, 0.0);
  EXPECT_LE(theta, 0.999);
  EXPECT_EQ(j["samples"], 20);
  EXPECT_EQ(j["target_fpr"], 0.05);
  // the original is untouched; routing on the calibrated file uses the calibration
  EXPECT_FALSE(cmf::Reader::open(skills()).header().routing.has_value());
  const std::string ex = cli("explain " + cal + " -p '" + kPromptA1 + "' --threads 1", &rc, &err);
  ASSERT_EQ(rc, 0) << err;
  EXPECT_NE(ex.find("calibrated novelty"), std::string::npos) << ex;
  // bad input names the field; nothing written
  const std::string none = (dir_ / "none.cmf").string();
  cli(args + " --fpr 1.5 -o " + none, &rc, &err);
  EXPECT_NE(rc, 0);
  EXPECT_NE(err.find("--fpr 1.5 is not in (0, 1)"), std::string::npos) << err;
  cli("skill calibrate " + skills() + " --domain zz=" + fa + " -o " + none, &rc, &err);
  EXPECT_NE(rc, 0);
  EXPECT_NE(err.find("--domain zz"), std::string::npos) << err;
  cli("skill calibrate " + skills() + " --domain a -o " + none, &rc, &err);
  EXPECT_NE(rc, 0);
  EXPECT_NE(err.find("expected ID=FILE"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(none));
}

/// POST/GET over a fresh loopback connection (Connection: close) → the response body (chunked
/// bodies are not expected: no streaming here); "" when the server cannot be reached.
std::string http(int port, const std::string& method, const std::string& path, const std::string& body = "",
                 const std::string& headers = "") {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return "";
  }
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + headers;
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

/// Starts `cortiq serve MODEL --port 0 FLAGS` in the background; its pid and port (0: it did not come up).
std::pair<pid_t, int> start_server(const fs::path& dir, const std::string& model, const std::string& flags) {
  const fs::path out = dir / "serve.out";
  fs::remove(out);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const std::string cmd = std::string("exec ") + CORTIQ_CLI_PATH + " serve " + model + " --port 0 " +
                            flags + " >" + out.string() + " 2>" + (dir / "serve.err").string();
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
  return {pid, port};
}

TEST_F(SkillsRun, ServeListsSkillsAndDecodesMixedSkillsInOneBatch) {
  REQUIRE_FILE();
  const auto [pid, port] = start_server(dir_, skills(), "--parallel 3 --threads 1 --exact");
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

TEST_F(SkillsRun, ServeHotLoadsAndDropsASkillFile) {
  REQUIRE_FILE();
  int rc = 0;
  std::string err;
  // skill a cut into a SKILL_FILE against s.cmf (the server's file): materialize → export
  const std::string spec = (dir_ / "spec-a.cmf").string(), file_a = (dir_ / "a.skill.cmf").string();
  cli("skill materialize " + skills() + " a -o " + spec, &rc, &err);
  ASSERT_EQ(rc, 0) << err;
  cli("skill export " + spec + " --base " + base() + " --id a -o " + file_a, &rc, &err);
  ASSERT_EQ(rc, 0) << err;
  const std::string other = (dir_ / "a-other-base.skill.cmf").string();  // cut against skills.cmf
  cli("skill export " + spec + " --base " + skills() + " --id a -o " + other, &rc, &err);
  ASSERT_EQ(rc, 0) << err;
  const auto [pid, port] = start_server(dir_, base(), "--threads 1 --exact --api-key k1 --admin-key k2");
  ASSERT_GT(port, 0) << sh("cat " + (dir_ / "serve.err").string());
  using json = nlohmann::json;
  const std::string user = "Authorization: Bearer k1\r\n", admin = "Authorization: Bearer k2\r\n";
  auto post = [&](const std::string& body, const std::string& h) {
    return json::parse(http(port, "POST", "/v1/cortiq/skills", body, h), nullptr, false);
  };
  const std::string add = "{\"path\": \"" + file_a + "\"}";
  const json no_admin = post(add, user);
  const json added = post(add, admin);
  const json again = post(add, admin);
  const json missing = post("{\"path\": \"" + (dir_ / "nope.cmf").string() + "\"}", admin);
  const json not_skill = post("{\"path\": \"" + base() + "\"}", admin);
  const json other_base = post("{\"path\": \"" + other + "\", \"id\": \"x\"}", admin);
  const json bad_field = post("{\"path\": 3}", admin);
  const json listed = json::parse(http(port, "GET", "/v1/cortiq/skills", "", user), nullptr, false);
  const std::string req = std::string("{\"prompt\": \"") + kPromptA1 +
                          "\", \"max_tokens\": 12, \"temperature\": 0, \"cortiq\": {\"skill\": \"a\"}}";
  const json ran = json::parse(http(port, "POST", "/v1/completions", req, user), nullptr, false);
  const json dropped = json::parse(http(port, "DELETE", "/v1/cortiq/skills/a", "", admin), nullptr, false);
  const json gone = json::parse(http(port, "POST", "/v1/completions", req, user), nullptr, false);
  const json dropped2 = json::parse(http(port, "DELETE", "/v1/cortiq/skills/a", "", admin), nullptr, false);
  ::kill(pid, SIGTERM);
  ::waitpid(pid, nullptr, 0);

  EXPECT_EQ(no_admin["error"]["code"], "invalid_admin_key") << no_admin.dump();
  ASSERT_EQ(added["id"], "a") << added.dump();
  EXPECT_EQ(added["source"], "hot-loaded");
  EXPECT_EQ(added["tensors"], 1);
  EXPECT_EQ(again["error"]["code"], "skill_exists") << again.dump();
  EXPECT_EQ(missing["error"]["code"], "invalid_skill_file") << missing.dump();
  EXPECT_EQ(missing["error"]["param"], "path");
  EXPECT_EQ(not_skill["error"]["code"], "invalid_skill_file") << not_skill.dump();
  EXPECT_EQ(other_base["error"]["code"], "skill_base_mismatch") << other_base.dump();
  EXPECT_EQ(bad_field["error"]["param"], "path") << bad_field.dump();
  ASSERT_EQ(listed["skills"].size(), 1u) << listed.dump();
  EXPECT_EQ(listed["skills"][0]["id"], "a");
  // the hot-loaded skill runs what the file's own skill a runs
  std::string want =
      cli("run " + skills() + " -p '" + kPromptA1 + "' --greedy -n 12 --exact --threads 1 --skill a");
  if (!want.empty() && want.back() == '\n') want.pop_back();
  ASSERT_TRUE(ran.contains("choices")) << ran.dump();
  EXPECT_EQ(ran["choices"][0]["text"], want);
  EXPECT_EQ(ran["system_fingerprint"], "skill:a");
  EXPECT_EQ(dropped["deleted"], true) << dropped.dump();
  EXPECT_EQ(gone["error"]["code"], "skill_not_found") << gone.dump();
  EXPECT_EQ(dropped2["error"]["code"], "skill_not_found") << dropped2.dump();
}

}  // namespace
