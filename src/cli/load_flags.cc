// add_load_flags (cli/command.h): the model-loading flags shared by run, ppl, serve and bench.
#include "cli/command.h"
#include "runtime/session.h"

namespace cortiq::cli {

void add_load_flags(CLI::App* cmd, runtime::LoadOptions& opts, unsigned which) {
  if (which & kLoadThreads) cmd->add_option("-t,--threads", opts.threads, "kernel threads (0 = all cores)");
  if (which & kLoadExact)
    cmd->add_flag("--exact", opts.exact, "f32 activations in every matvec (no int8 approximation)");
  if (which & kLoadNoMmap)
    cmd->add_flag(
        "--no-mmap", opts.no_mmap,
        "load the file into huge-page memory instead of mmap'ing it (faster decode, file-sized RSS)");
  if (which & kLoadKvF16) cmd->add_flag("--kv-f16", opts.kv_f16, "store the KV cache in f16");
  if (which & kLoadCheckTensors)
    cmd->add_flag("--check-tensors", opts.check_tensors,
                  "verify every tensor's hash before running (as `cortiq verify`; reads the whole file). The "
                  "header, directory, masks, vocab and index hashes are checked on every open");
  if (which & kLoadSkill) {
    cmd->add_option("--skill", opts.skill,
                    "skill of the file to run on its backbone: an id, 'auto' (route on the prompt) or 'none' "
                    "(the backbone). Unlike the reference, routing falls back to the backbone when no skill "
                    "fits the prompt (novelty)");
    cmd->add_option("--blend", opts.blend,
                    "blend of skills 'id:w,id:w' (weights normalized; the touched tensors are materialized "
                    "in f32), or 'auto': the 2 skills of lowest routing energy, softmax(-E/0.4)");
  }
}

}  // namespace cortiq::cli
