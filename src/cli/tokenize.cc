// `cortiq tokenize <model.cmf|tokenizer.json> (--text S | -f FILE) [--ids-only] [--no-special]`:
// prints one line per token, "<id> -> '<piece>'" (like llama-tokenize, with control characters,
// quotes, backslashes and bytes that are not UTF-8 escaped C-style), or the id list with --ids-only. For a
// .cmf the tokenizer is the vocab section (HF tokenizer.json verbatim).
// `cortiq tokenize TOKENIZER -f FILE... --bin out.bin` writes the files' tokens as the trainer's
// memory-mapped token file instead (format and joining rule: train/token_file.h).
#include <utf8proc.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "cli/command.h"
#include "cmf/reader.h"
#include "runtime/session.h"
#include "tokenizer/tokenizer.h"
#include "train/token_file.h"
#include "util/error.h"

namespace cortiq::cli {
namespace {

/// A token's text for one line of output: \n, \t, \r, \\, \' and other control characters or bytes
/// that are not valid UTF-8 (a piece of a multi-byte character) as C-style escapes.
std::string escape_piece(const std::string& s) {
  std::string out;
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  utf8proc_ssize_t i = 0;
  const auto n = static_cast<utf8proc_ssize_t>(s.size());
  while (i < n) {
    utf8proc_int32_t cp = 0;
    const utf8proc_ssize_t len = utf8proc_iterate(p + i, n - i, &cp);
    if (len <= 0) {  // not UTF-8: this byte alone
      out += fmt::format("\\x{:02x}", p[i]);
      ++i;
      continue;
    }
    switch (cp) {
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\'':
        out += "\\'";
        break;
      default:
        if (cp < 0x20 || cp == 0x7f)
          out += fmt::format("\\x{:02x}", cp);
        else
          out.append(s, static_cast<size_t>(i), static_cast<size_t>(len));
    }
    i += len;
  }
  return out;
}

struct TokenizeArgs {
  std::string model;
  std::string text;
  std::vector<std::string> files;
  std::string bin;
  bool ids_only = false;
  bool no_special = false;
};

/// Whether the file starts with the 4 bytes `magic`.
bool has_magic(const std::string& path, const char (&magic)[5]) {
  std::ifstream f(path, std::ios::binary);
  char got[4] = {};
  f.read(got, 4);
  return f.gcount() == 4 && std::memcmp(got, magic, 4) == 0;
}
bool is_cmf(const std::string& path) {
  return has_magic(path, "CMF\x01");
}

void run(const TokenizeArgs& a) {
  std::unique_ptr<Tokenizer> tok;
  namespace fs = std::filesystem;
  if (fs::is_directory(a.model)) {  // an HF folder: its tokenizer.json
    if (!fs::exists(fs::path(a.model) / "tokenizer.json"))
      fail(ErrorKind::InvalidArgument,
           "'{}' is a folder without tokenizer.json: give a .cmf or a tokenizer.json", a.model);
    tok = std::make_unique<Tokenizer>(Tokenizer::from_file((fs::path(a.model) / "tokenizer.json").string()));
  } else if (is_cmf(a.model)) {
    tok = runtime::load_tokenizer(cmf::Reader::open(a.model), a.model);  // the vocab section or the sidecar
    if (!tok)
      fail(ErrorKind::Parse, "{}: the CMF file has no vocab section and no tokenizer.json beside it",
           a.model);
  } else if (has_magic(a.model, "GGUF")) {
    fail(ErrorKind::Unsupported,
         "'{}' is a GGUF file: tokenize takes a .cmf or a tokenizer.json (convert it first: `cortiq "
         "convert FILE.gguf -o out.cmf`)",
         a.model);
  } else if (fs::path(a.model).filename() == "tokenizer_config.json") {
    fail(ErrorKind::InvalidArgument,
         "'{}' holds the chat template and special-token settings, not the vocabulary: give the "
         "tokenizer.json beside it, or the folder",
         a.model);
  } else {
    tok = std::make_unique<Tokenizer>(Tokenizer::from_file(a.model));
  }
  if (!a.bin.empty()) {
    const auto ids = train::tokenize_files(*tok, a.files, "input");
    train::write_token_file(a.bin, ids);
    std::printf("✓ wrote %s: %zu tokens (u%u) from %zu files, each followed by id %u\n", a.bin.c_str(),
                ids.size(), train::TokenFile(a.bin).width() * 8, a.files.size(),
                train::document_separator(*tok));
    return;
  }
  if (a.files.size() > 1) fail(ErrorKind::InvalidArgument, "give one -f FILE (several files need --bin)");
  const std::string input = a.files.empty() ? a.text : read_input(a.files[0]);
  std::vector<uint32_t> ids = tok->encode(input, !a.no_special);
  if (a.ids_only) {
    std::string out = "[";
    for (size_t i = 0; i < ids.size(); ++i) out += fmt::format("{}{}", i ? ", " : "", ids[i]);
    out += "]\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
    return;
  }
  for (uint32_t id : ids) {
    // the text the token adds inside a text (llama-tokenize's piece): SentencePiece's "▁He" is " He";
    // as bytes, so a token holding part of a UTF-8 character shows them ('\xc3'), not U+FFFD
    const std::string piece = escape_piece(tok->token_bytes(id));
    std::string line = fmt::format("{:6} -> '{}'\n", id, piece);
    std::fwrite(line.data(), 1, line.size(), stdout);
  }
}

void setup(CLI::App& root) {
  auto a = std::make_shared<TokenizeArgs>();
  auto* c = root.add_subcommand("tokenize", "Tokenize text with a model's tokenizer (HF tokenizers parity)");
  add_examples(c, {"cortiq tokenize build/stories260K.cmf --text \"Once upon a time\"",
                   "cortiq tokenize tokenizer.json -f a.txt b.txt --bin tokens.bin"});
  c->add_option("model", a->model, "model.cmf, tokenizer.json or a Hugging Face folder")->required();
  auto* t = c->add_option("--text", a->text, "text to tokenize");
  auto* f = c->add_option("-f,--file", a->files,
                          "file whose bytes are tokenized (- = standard input); several with --bin");
  t->excludes(f);
  auto* b = c->add_option(
      "--bin", a->bin, "write the files' tokens (each + <|endoftext|>) as a token file for `train --data`");
  b->needs(f);
  b->excludes(t);
  c->add_flag("--ids-only", a->ids_only, "print only the id list, e.g. [1, 2, 3]");
  c->add_flag("--no-special", a->no_special, "do not add BOS/EOS (add_special_tokens=false)");
  c->callback([a, t, f] {
    // --text "" is a valid input (HF: [] or just the special prefix); only a missing flag is an error
    if (t->count() == 0 && f->count() == 0) fail(ErrorKind::InvalidArgument, "give --text or -f/--file");
    run(*a);
  });
}

}  // namespace
CORTIQ_COMMAND(35, setup);
}  // namespace cortiq::cli
