// Bounded shutdown (issue 27 §3): the requests in flight at a stop signal get the grace period,
// the rest are cancelled (their job's cancel) and, if still running, their connections cut; each is
// named as finished or cancelled.
#include "server/shutdown.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <mutex>
#include <thread>
#include <vector>

#include "runtime/engine.h"

namespace cortiq::server {
namespace {

struct Log {
  std::mutex mu;
  std::vector<std::string> lines;
  std::function<void(const std::string&)> sink() {
    return [this](const std::string& l) {
      std::lock_guard<std::mutex> g(mu);
      lines.push_back(l);
    };
  }
  bool has(const std::string& s) {
    std::lock_guard<std::mutex> g(mu);
    for (const auto& l : lines)
      if (l == s) return true;
    return false;
  }
  std::string all() {
    std::lock_guard<std::mutex> g(mu);
    std::string out;
    for (const auto& l : lines) out += l + "\n";
    return out;
  }
};

TEST(Shutdown, FinishedCancelledAndAbandonedAreNamed) {
  Log log;
  InFlight f(log.sink());
  const uint64_t before = f.begin("GET /health");
  f.end(before, 200);  // ended before the signal: not part of the shutdown's report

  const uint64_t quick = f.begin("POST /v1/completions");
  auto quick_job = std::make_shared<Job>();
  f.attach(quick, "cmpl-quick", quick_job, -1);
  const uint64_t slow = f.begin("POST /v1/chat/completions");
  auto slow_job = std::make_shared<Job>();
  f.attach(slow, "chatcmpl-slow", slow_job, -1);
  // the third never ends; its connection is cut (a socket pair stands for the client's socket)
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  const uint64_t stuck = f.begin("POST /v1/completions");
  f.attach(stuck, "cmpl-stuck", std::make_shared<Job>(), sv[0]);
  EXPECT_EQ(f.size(), 3u);

  std::thread quick_end([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    f.end(quick, 200);
  });
  std::thread slow_end([&] {  // ends once cancelled, as a job does at its next engine step
    while (!slow_job->cancel.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    f.end(slow, 503);
  });
  EXPECT_FALSE(drain(f, "SIGTERM", 0.3));
  quick_end.join();
  slow_end.join();

  EXPECT_TRUE(
      log.has("SIGTERM: stopping: new requests get 503; 3 request(s) in flight get up to 0.3 s to "
              "finish: #2 POST /v1/completions cmpl-quick, #3 POST /v1/chat/completions chatcmpl-slow, "
              "#4 POST /v1/completions cmpl-stuck"))
      << log.all();
  EXPECT_TRUE(log.has("finished: #2 POST /v1/completions cmpl-quick (200)")) << log.all();
  EXPECT_TRUE(
      log.has("cancelling 2 request(s): #3 POST /v1/chat/completions chatcmpl-slow, #4 POST "
              "/v1/completions cmpl-stuck"))
      << log.all();
  EXPECT_TRUE(log.has("cancelled: #3 POST /v1/chat/completions chatcmpl-slow (503)")) << log.all();
  EXPECT_TRUE(
      log.has("closing the connections of 1 request(s) still running: #4 POST /v1/completions cmpl-stuck"))
      << log.all();
  EXPECT_FALSE(quick_job->cancel.load());
  EXPECT_TRUE(slow_job->cancel.load());
  // the cut: the client side reads end-of-stream
  char c;
  EXPECT_EQ(::read(sv[1], &c, 1), 0);
  const std::string last = log.lines.back();
  EXPECT_EQ(last.rfind("stopped after ", 0), 0u) << last;
  EXPECT_NE(last.find(" s: 1 finished, 1 cancelled; abandoned: #4 POST /v1/completions cmpl-stuck"),
            std::string::npos)
      << last;
  EXPECT_TRUE(f.stopping());
  EXPECT_TRUE(f.cancelling());
  ::close(sv[0]);
  ::close(sv[1]);
}

TEST(Shutdown, IdleServerAndSecondSignal) {
  Log log;
  InFlight idle(log.sink());
  EXPECT_TRUE(drain(idle, "SIGINT", 3600));  // nothing in flight: no wait at all
  EXPECT_FALSE(idle.cancelling());
  const std::string tail = ": 0 finished, 0 cancelled";
  EXPECT_EQ(log.lines.back().substr(log.lines.back().size() - tail.size()), tail) << log.all();

  // A second signal (hurry) ends an hour's grace at once; a job queued after the cancel (its
  // handler was still rendering) is cancelled as it is attached.
  InFlight f(log.sink());
  const uint64_t n = f.begin("POST /v1/chat/completions");
  auto job = std::make_shared<Job>();
  f.attach(n, "chatcmpl-a", job, -1);
  std::thread ender([&] {
    while (!job->cancel.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const uint64_t late = f.begin("POST /v1/completions");
    auto late_job = std::make_shared<Job>();
    f.attach(late, "cmpl-late", late_job, -1);
    EXPECT_TRUE(late_job->cancel.load());
    f.end(late, 503);
    f.end(n, 503);
  });
  int polls = 0;
  EXPECT_TRUE(drain(f, "SIGTERM", 3600, [&] { return ++polls >= 2; }));
  ender.join();
  EXPECT_TRUE(log.has("cancelled: #1 POST /v1/chat/completions chatcmpl-a (503)")) << log.all();
  EXPECT_TRUE(log.has("cancelled: #2 POST /v1/completions cmpl-late (503)")) << log.all();
}

}  // namespace
}  // namespace cortiq::server
