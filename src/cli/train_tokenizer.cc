// `cortiq train-tokenizer FILES... -o tokenizer.json [--vocab-size N] [--special T]...
// [--min-frequency N]`: byte-level BPE learned from plain UTF-8 text files (tokenizer/bpe_trainer.h),
// written atomically as a Hugging Face tokenizer.json.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "tokenizer/bpe_trainer.h"
#include "util/atomic_file.h"
#include "util/progress.h"

namespace cortiq::cli {
namespace {

struct TrainTokenizerArgs {
  std::vector<std::string> files;
  std::string output;
  BpeTrainerOptions opt;
  std::vector<std::string> specials;
};

void setup(CLI::App& root) {
  auto a = std::make_shared<TrainTokenizerArgs>();
  auto* c = root.add_subcommand("train-tokenizer",
                                "Learn a byte-level BPE tokenizer from text files (tokenizer.json)");
  add_examples(c, {"cortiq train-tokenizer corpus/*.txt -o tokenizer.json --vocab-size 8192"});
  c->add_option("files", a->files, "plain UTF-8 text files (all of them are one corpus)")->required();
  c->add_option("-o,--output", a->output, "tokenizer.json to write")->required();
  c->add_option("--vocab-size", a->opt.vocab_size, "total tokens: specials + 256 bytes + merges")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  c->add_option("--special", a->specials,
                "a special token (ids 0.. in the order given; repeat the flag); default: <|endoftext|>, "
                "<|im_start|>, <|im_end|>");
  c->add_option("--min-frequency", a->opt.min_frequency, "never merge a pair seen fewer times")
      ->capture_default_str();
  c->callback([a] {
    if (!a->specials.empty()) a->opt.special_tokens = a->specials;
    a->opt.progress = Progress::enabled();
    BpeTrainer trainer(a->opt);
    {
      Progress bar("reading", a->files.size(), "file");
      for (const std::string& f : a->files) {
        trainer.add_text(read_file(f), f);
        bar.advance(1);
      }
    }
    const std::string json = trainer.train();
    write_file_atomic(a->output, {reinterpret_cast<const uint8_t*>(json.data()), json.size()});
    std::printf("wrote %s (%zu bytes of text)\n", a->output.c_str(),
                static_cast<size_t>(trainer.bytes_added()));
  });
}

}  // namespace
CORTIQ_COMMAND(36, setup);
}  // namespace cortiq::cli
