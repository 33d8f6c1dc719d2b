// The interactive chat's input side (`cortiq run` without -p/-f): line editing and history with
// libedit on a terminal, plain line reading otherwise; multi-line messages; the `/set` sampling
// knobs; a conversation saved to and loaded from JSON.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/session.h"

namespace cortiq::cli {

/// Reads the chat's input lines. On a terminal (stdin and stderr both ttys) libedit edits the line
/// (emacs keys, Up/Down recall) and keeps a history loaded from and saved to `history_path` after
/// each remembered line ("" = history in memory only); otherwise lines are read from stdin with
/// std::getline and the prompt is still written to stderr. Not thread-safe.
class LineReader {
 public:
  explicit LineReader(std::string history_path);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;
  /// The next line without its newline, after writing `prompt` to stderr; nullopt at end of input
  /// (Ctrl+D).
  std::optional<std::string> read(const std::string& prompt);
  /// Adds `line` to the history (Up recalls it) and saves the history file; a file that cannot
  /// be written is reported once on stderr and the chat goes on.
  void remember(const std::string& line);
  /// Whether libedit is in use (input from a terminal).
  bool editing() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Puts the terminal back as it was before the first LineReader took it (async-signal-safe:
/// tcsetattr only); for the SIGINT handler that ends the program at the prompt.
void restore_terminal() noexcept;

/// The history file: $CORTIQ_HISTORY when set ("" = none), else $HOME/.cortiq_history, else "".
std::string default_history_path();

/// One message of the chat: a line; or, when the line starts with `"""`, every line up to the one
/// that ends with `"""` (the quotes dropped, lines joined by '\n'); or lines ending in `\`, joined
/// with the next (the backslash becomes a '\n'). Continuation lines are prompted with "... ". Each
/// line read is remembered in the history. nullopt at end of input (an unfinished block is
/// returned as it stands when input ends inside it, or nullopt when nothing was typed).
std::optional<std::string> read_message(LineReader& in);

/// `/set KEY VALUE` applied to `gp`: temp|temperature, top_k, top_p, min_p, repeat_penalty,
/// presence_penalty, seed (-1 = random), n|max_tokens (-1 = until the context is full), greedy
/// (temperature 0, repeat penalty 1); '-' may spell '_'. Returns the line to print ("temperature =
/// 0.7"). Throws Error(InvalidArgument) naming the key for an unknown key or a bad value (the
/// ranges of run's flags).
std::string apply_set(const std::string& args, runtime::GenerateParams& gp);

/// The current sampling settings as `/set` spells them, one line.
std::string describe_settings(const runtime::GenerateParams& gp);

/// Writes `messages` to `path` as {"messages": [{"role", "content"}, …]} (what `cortiq template
/// --messages` and `/load` read), atomically (util/atomic_file.h). Throws Error(Io).
void save_conversation(const std::string& path, const std::vector<runtime::ChatMessage>& messages);

/// Reads a conversation: a JSON array of messages or an object with "messages"; each message an
/// object with string "role" and "content". Throws Error(Io) for a file that cannot be read and
/// Error(Parse) naming the file (and the message index) for anything else.
std::vector<runtime::ChatMessage> load_conversation(const std::string& path);

}  // namespace cortiq::cli
