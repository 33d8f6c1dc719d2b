// `cortiq compile <model.cmf> --task NAME --corpus F… -o out.cmf --as specialist|mask` — task
// compilation (specialize/compile.h): a smaller specialist, or a task mask, with its measured
// quality in the file. Exit 3 when the result is not better than dense on the report split beyond
// noise (the file is written, its verdict recorded), unless --accept-worse.
#include "specialize/compile.h"

#include <cstdio>
#include <memory>

#include "cli/command.h"
#include "specialize/report.h"
#include "util/error.h"
#include "util/progress.h"

namespace cortiq::cli {
namespace {

struct CompileArgs {
  specialize::CompileOptions o;
  std::string as = "specialist";
  std::string report;
  bool accept_worse = false, quiet = false;
};

void compile_cmd(CompileArgs& a) {
  if (a.as == "mask")
    a.o.as = specialize::CompileAs::Mask;
  else if (a.as == "specialist")
    a.o.as = specialize::CompileAs::Specialist;
  else if (a.as == "skill")
    a.o.as = specialize::CompileAs::Skill;
  else
    fail(ErrorKind::InvalidArgument, "--as must be 'specialist', 'mask' or 'skill' (got '{}')", a.as);
  refuse_overwriting_input(a.o.model, a.o.output, "compile");
  if (!a.report.empty()) refuse_overwriting_input(a.o.model, a.report, "compile --report");
  if (!a.quiet)
    a.o.log = [](const std::string& s) {
      std::printf("%s\n", s.c_str());
      std::fflush(stdout);
    };
  const auto r = specialize::compile_task(a.o);
  if (!a.report.empty()) {
    specialize::write_report(a.report, r.trace);
    std::printf("wrote %s (report)\n", a.report.c_str());
  }
  std::printf("wrote %s: %llu bytes (source %llu, %.2fx smaller); report ppl dense %.3f, %s %.3f: %s\n",
              a.o.output.c_str(), static_cast<unsigned long long>(r.bytes_after),
              static_cast<unsigned long long>(r.bytes_before),
              static_cast<double>(r.bytes_before) / static_cast<double>(r.bytes_after), r.dense_ppl,
              a.as.c_str(), r.specialist_ppl, r.verdict.c_str());
  if (!r.better && !a.accept_worse) {
    std::fflush(stdout);
    std::fprintf(
        stderr,
        "the %s is not better than the dense model on the report split beyond noise (%s); the file is "
        "written with that verdict; exit 3 (--accept-worse: exit 0)\n",
        a.as.c_str(), r.verdict.c_str());
    throw CLI::RuntimeError(3);
  }
}

void setup(CLI::App& root) {
  auto a = std::make_shared<CompileArgs>();
  auto* c = root.add_subcommand(
      "compile", "Compile a task specialist (or task mask) from a corpus, with its measured quality");
  add_examples(c, {"cortiq compile tb.cmf --task scripture --corpus "
                   "../shared/data/testbed-corpus/scripture/train.txt --as specialist -o tb-scripture.cmf"});
  c->add_option("model", a->o.model, "source model .cmf (dense SwiGLU FFNs)")->required();
  c->add_option("--task", a->o.task, "task name (the mask's name; recorded in the contract)")->required();
  c->add_option("--corpus", a->o.corpus, "UTF-8 task text file(s)")->required()->expected(1, -1);
  c->add_option("-o,--output", a->o.output, "output .cmf")->required();
  c->add_option("--as", a->as,
                "specialist (physically smaller file) | mask (same file + a task mask) | skill (mask + the "
                "trained tail as skill.<task>.* overlays with a routing descriptor)");
  c->add_option("--report", a->report, "write an HTML report (inline SVG plots of the phases) to this path");
  c->add_option("--skill-prompts", a->o.skill_prompts, "skill: train chunks fitted for the router (48)")
      ->check(positive());
  c->add_option("--skill-rank", a->o.skill_rank, "skill: routing descriptor rank (2)")->check(positive());
  c->add_option("--budget", a->o.a.steps, "phase A steps, one chunk each (240)")->check(positive());
  c->add_option("--eval-every", a->o.a.eval_every, "score the hard mask on select every N steps (30)")
      ->check(positive());
  c->add_option("--lr", a->o.a.lr, "phase A Adam learning rate (0.1)")->check(positive());
  c->add_option("--l1-aggression", a->o.a.l1_mult, "multiplier of the L1 schedule 0.01 + 0.005·k (1.0)")
      ->check(non_negative());
  c->add_option("--target-sparsity", a->o.a.target_sparsity,
                "only masks pruning at least this fraction compete (REF; the dense model does not; 0 = off)")
      ->check(in_range(0, 1));
  c->add_flag("--through-attention", a->o.a.through_attention,
              "exact gradient through the frozen attention (default: REF's truncated gradient)");
  c->add_option("--fcd-steps", a->o.b.steps, "phase B steps (120; 0 = no phase B; specialist only)");
  c->add_option("--fcd-layers", a->o.b.layers, "phase B: trainable FFN tail (4 layers)")->check(positive());
  c->add_option("--fcd-lr", a->o.b.lr, "phase B peak learning rate, cosine to 0 (1e-5)")->check(positive());
  c->add_option("--kl", a->o.b.kl, "phase B KL-to-dense weight; CE weight = 1 − kl (0.7; 0 = REF's CE only)")
      ->check(in_range(0, 1));
  c->add_option("--ffn-align", a->o.align,
                "round each layer's kept count up to a multiple of N (32; 1 = off)")
      ->check(positive());
  c->add_option("--chunk", a->o.split.chunk, "tokens per chunk (256, at most the context)")
      ->check(at_least(4));
  c->add_option("--select-chunks", a->o.split.select_chunks, "at most N select chunks (16)")
      ->check(positive());
  c->add_option("--report-chunks", a->o.split.report_chunks, "at most N report chunks (32)")
      ->check(positive());
  c->add_option("--seed", a->o.a.seed, "train-order seed (1)");
  c->add_option("-t,--threads", a->o.threads, "kernel threads (1; 0 = all cores)");
  c->add_flag("--accept-worse", a->accept_worse, "exit 0 even when the result is not better than dense");
  c->add_flag("-q,--quiet", a->quiet, "print only the final line");
  c->callback([a] { compile_cmd(*a); });
}

}  // namespace

CORTIQ_COMMAND(40, setup);

}  // namespace cortiq::cli
