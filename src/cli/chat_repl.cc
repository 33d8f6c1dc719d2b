// The interactive chat's input side: libedit line editing and history, multi-line messages, /set,
// conversations as JSON (cli/chat_repl.h).
#include "cli/chat_repl.h"

#include <histedit.h>
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <clocale>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "util/atomic_file.h"
#include "util/error.h"

namespace cortiq::cli {
namespace {

struct termios g_saved_tty;
std::atomic<bool> g_tty_saved{false};

/// libedit's prompt callback: the prompt LineReader::read was given (EL_CLIENTDATA).
char* prompt_of(EditLine* el) {
  void* p = nullptr;
  el_get(el, EL_CLIENTDATA, &p);
  return p ? static_cast<std::string*>(p)->data() : const_cast<char*>("");
}

/// `s` without trailing spaces, tabs and carriage returns.
std::string rstrip(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.pop_back();
  return s;
}

bool ends_with(const std::string& s, const std::string& t) {
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

double number(const std::string& key, const std::string& v) {
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || errno != 0)
    fail(ErrorKind::InvalidArgument, "/set {}: '{}' is not a number", key, v);
  return x;
}

/// An integer value ≥ lo (or exactly -1 when `minus_one`).
int64_t integer(const std::string& key, const std::string& v, int64_t lo, bool minus_one) {
  const double x = number(key, v);
  if (x != static_cast<double>(static_cast<int64_t>(x)))
    fail(ErrorKind::InvalidArgument, "/set {}: '{}' is not an integer", key, v);
  const auto i = static_cast<int64_t>(x);
  if (i < lo && !(minus_one && i == -1))
    fail(ErrorKind::InvalidArgument, "/set {}: must be ≥ {}{}, got {}", key, lo, minus_one ? " or -1" : "",
         v);
  return i;
}

float ranged(const std::string& key, const std::string& v, double lo, double hi, bool open_lo = false) {
  const double x = number(key, v);
  if (x < lo || x > hi || (open_lo && x == lo))
    fail(ErrorKind::InvalidArgument, "/set {}: must be in {}{}, {}], got {}", key, open_lo ? "(" : "[", lo,
         hi, v);
  return static_cast<float>(x);
}

}  // namespace

struct LineReader::Impl {
  std::string history_path;
  EditLine* el = nullptr;
  History* hist = nullptr;
  std::string prompt;
  bool save_failed = false;
};

LineReader::LineReader(std::string history_path) : impl_(std::make_unique<Impl>()) {
  impl_->history_path = std::move(history_path);
  if (!::isatty(STDIN_FILENO) || !::isatty(STDERR_FILENO)) return;
  std::setlocale(LC_CTYPE, "");  // libedit edits multibyte (UTF-8) characters as one
  if (!g_tty_saved.load() && ::tcgetattr(STDIN_FILENO, &g_saved_tty) == 0) g_tty_saved.store(true);
  impl_->el = el_init("cortiq", stdin, stderr, stderr);
  if (!impl_->el) return;  // no terminal capabilities: plain reading
  impl_->hist = history_init();
  HistEvent ev;
  history(impl_->hist, &ev, H_SETSIZE, 1000);
  history(impl_->hist, &ev, H_SETUNIQUE, 1);
  if (!impl_->history_path.empty()) history(impl_->hist, &ev, H_LOAD, impl_->history_path.c_str());
  el_set(impl_->el, EL_EDITOR, "emacs");
  el_set(impl_->el, EL_HIST, history, impl_->hist);
  el_set(impl_->el, EL_CLIENTDATA, static_cast<void*>(&impl_->prompt));
  el_set(impl_->el, EL_PROMPT, &prompt_of);
}

LineReader::~LineReader() {
  if (impl_->el) el_end(impl_->el);
  if (impl_->hist) history_end(impl_->hist);
}

bool LineReader::editing() const {
  return impl_->el != nullptr;
}

std::optional<std::string> LineReader::read(const std::string& prompt) {
  if (!impl_->el) {
    std::fputs(prompt.c_str(), stderr);
    std::fflush(stderr);
    std::string line;
    if (!std::getline(std::cin, line)) return std::nullopt;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    return line;
  }
  impl_->prompt = prompt;
  int count = 0;
  const char* s = el_gets(impl_->el, &count);
  if (!s || count <= 0) {
    std::fputc('\n', stderr);  // Ctrl+D leaves the cursor after the prompt
    return std::nullopt;
  }
  std::string line(s, static_cast<size_t>(count));
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  return line;
}

void LineReader::remember(const std::string& line) {
  if (!impl_->hist || line.empty()) return;
  HistEvent ev;
  history(impl_->hist, &ev, H_ENTER, line.c_str());
  if (impl_->history_path.empty() || impl_->save_failed) return;
  if (history(impl_->hist, &ev, H_SAVE, impl_->history_path.c_str()) < 0) {
    impl_->save_failed = true;
    std::fprintf(stderr, "note: cannot write the history file '%s'; history is kept for this chat only\n",
                 impl_->history_path.c_str());
  }
}

void restore_terminal() noexcept {
  if (g_tty_saved.load()) ::tcsetattr(STDIN_FILENO, TCSANOW, &g_saved_tty);
}

std::string default_history_path() {
  if (const char* h = std::getenv("CORTIQ_HISTORY")) return h;
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cortiq_history";
  return "";
}

std::optional<std::string> read_message(LineReader& in) {
  std::optional<std::string> first = in.read("> ");
  if (!first) return std::nullopt;
  in.remember(*first);
  std::string line = rstrip(*first);
  if (line.rfind("\"\"\"", 0) == 0) {  // a """ block
    std::string text = line.substr(3);
    if (text.size() >= 3 && ends_with(text, "\"\"\"")) return text.substr(0, text.size() - 3);
    for (;;) {
      const std::optional<std::string> next = in.read("... ");
      if (!next) return text;
      in.remember(*next);
      const std::string l = rstrip(*next);
      const bool last = ends_with(l, "\"\"\"");
      text += (text.empty() ? "" : "\n") + (last ? l.substr(0, l.size() - 3) : *next);
      if (last) return text;
    }
  }
  std::string text;
  while (ends_with(line, "\\")) {  // continuation
    text += line.substr(0, line.size() - 1) + "\n";
    const std::optional<std::string> next = in.read("... ");
    if (!next) return text;
    in.remember(*next);
    line = rstrip(*next);
  }
  return text.empty() ? *first : text + line;
}

std::string apply_set(const std::string& args, runtime::GenerateParams& gp) {
  std::istringstream is(args);
  std::string key, value, extra;
  is >> key >> value >> extra;
  for (char& c : key)
    if (c == '-') c = '_';
  auto& s = gp.sampler;
  if (key == "greedy") {
    if (!value.empty()) fail(ErrorKind::InvalidArgument, "/set greedy takes no value");
    s.temperature = 0.0f;
    s.repeat_penalty = 1.0f;
    return "greedy: temperature = 0, repeat_penalty = 1";
  }
  if (key.empty() || value.empty() || !extra.empty())
    fail(ErrorKind::InvalidArgument,
         "usage: /set KEY VALUE (keys: temp, top_k, top_p, min_p, repeat_penalty, "
         "presence_penalty, seed, n; or /set greedy)");
  if (key == "temp" || key == "temperature") {
    s.temperature = ranged(key, value, 0, 100);
  } else if (key == "top_k") {
    s.top_k = static_cast<int>(integer(key, value, 0, false));
  } else if (key == "top_p") {
    s.top_p = ranged(key, value, 0, 1);
  } else if (key == "min_p") {
    s.min_p = ranged(key, value, 0, 1);
  } else if (key == "repeat_penalty" || key == "rep_penalty") {
    s.repeat_penalty = ranged(key, value, 0, 100, true);
  } else if (key == "presence_penalty") {
    s.presence_penalty = ranged(key, value, -100, 100);
  } else if (key == "seed") {
    if (value == "-1") {
      s.seed.reset();
    } else {
      if (value.find_first_not_of("0123456789") != std::string::npos)
        fail(ErrorKind::InvalidArgument, "/set seed: must be an integer ≥ 0 or -1 (random), got {}", value);
      errno = 0;
      const unsigned long long v = std::strtoull(value.c_str(), nullptr, 10);
      if (errno != 0) fail(ErrorKind::InvalidArgument, "/set seed: out of range: {}", value);
      s.seed = v;
    }
  } else if (key == "n" || key == "max_tokens") {
    const int64_t n = integer(key, value, 0, true);
    gp.max_tokens = n < 0 ? std::numeric_limits<size_t>::max() : static_cast<size_t>(n);
  } else {
    fail(
        ErrorKind::InvalidArgument,
        "/set: unknown key '{}' (keys: temp, top_k, top_p, min_p, repeat_penalty, presence_penalty, seed, n, "
        "greedy)",
        key);
  }
  return describe_settings(gp);
}

std::string describe_settings(const runtime::GenerateParams& gp) {
  const auto& s = gp.sampler;
  const std::string n =
      gp.max_tokens == std::numeric_limits<size_t>::max() ? "-1" : std::to_string(gp.max_tokens);
  const std::string seed = s.seed ? std::to_string(*s.seed) : "-1";
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "temp %g · top_k %d · top_p %g · min_p %g · repeat_penalty %g · presence_penalty %g"
                " · seed %s · n %s",
                static_cast<double>(s.temperature), s.top_k, static_cast<double>(s.top_p),
                static_cast<double>(s.min_p), static_cast<double>(s.repeat_penalty),
                static_cast<double>(s.presence_penalty), seed.c_str(), n.c_str());
  return buf;
}

void save_conversation(const std::string& path, const std::vector<runtime::ChatMessage>& messages) {
  nlohmann::ordered_json arr = nlohmann::ordered_json::array();
  for (const auto& m : messages) arr.push_back({{"role", m.role}, {"content", m.content}});
  const std::string text = nlohmann::ordered_json{{"messages", arr}}.dump(2) + "\n";
  write_file_atomic(path, {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

std::vector<runtime::ChatMessage> load_conversation(const std::string& path) {
  const std::string text = read_file(path);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) fail(ErrorKind::Parse, "{}: not JSON", path);
  if (j.is_object() && j.contains("messages")) j = j["messages"];
  if (!j.is_array())
    fail(ErrorKind::Parse, "{}: expected a JSON array of messages or an object with \"messages\"", path);
  std::vector<runtime::ChatMessage> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const auto& m = j[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !m["content"].is_string())
      fail(ErrorKind::Parse, "{}: message {} needs string \"role\" and \"content\"", path, i);
    out.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  return out;
}

}  // namespace cortiq::cli
