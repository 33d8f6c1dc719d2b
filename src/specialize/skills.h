// Skills on one backbone (spec §9, §9.1; FORMAT-NOTES §1.14, §1.16; issue 30): `cortiq skill add
// | list | rm | export | apply`. A skill stores only the tensors it changes, as overlays
// `skill.<id>.<backbone name>` (full logical shape, any dtype), plus a `header.skills[]` record with
// an optional routing descriptor (specialize/routing.h).
//
// Writes: with an output path every command writes through cmf::Writer (temp + fsync + rename), so
// nothing is left under the output name on error; backbone payloads are copied verbatim (same
// bytes, same hashes). `skill add` / `skill rm` without an output grow the input in place by true
// append (cmf::append_in_place: old bytes never move, the envelope is patched last; a kill at any
// point leaves the old or the new file) — where the reference rewrites the whole file
// (FORMAT-NOTES §1.16). Removed or replaced overlays become dead bytes until `cortiq compact`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cmf/header.h"
#include "specialize/routing.h"

namespace cortiq::specialize {

/// Throws Error(InvalidArgument) unless `id` is non-empty, at most 64 characters and only
/// [A-Za-z0-9_-] (FORMAT-NOTES §1.14: the CLI's rule).
void check_skill_id(std::string_view id);

/// Which donor tensors `skill add` considers (`--tensors`).
enum class TensorSet { All, Ffn, Attn };
/// "all" | "ffn" | "attn"; Error(InvalidArgument) otherwise.
TensorSet parse_tensor_set(std::string_view s);
/// "4,5", "4-5", "0-2,7" → sorted unique layers. Error(InvalidArgument) for a malformed list.
std::vector<uint32_t> parse_layer_list(std::string_view s);

/// The line that separates prompts that may hold blank lines (the testbed corpus's document
/// separator).
inline constexpr std::string_view kPromptSeparator = "<|endoftext|>";

/// Prompts file for descriptor fitting, in the first format that applies: (1) a line holding only
/// `<|endoftext|>` anywhere → the text between such lines, one prompt each (inner blank lines
/// kept); (2) a blank line between two non-blank ones → the blank-line separated blocks (inner
/// newlines kept); (3) one prompt per non-empty line. Leading/trailing whitespace of each prompt is
/// trimmed. Error(Io) for an unreadable file.
std::vector<std::string> read_prompts(const std::string& path);

/// `skill add` options.
struct SkillAddOptions {
  std::string base;    ///< base .cmf (not a SKILL_FILE)
  std::string from;    ///< donor: an HF folder (converted to f32 first) or a .cmf
  std::string id;      ///< [A-Za-z0-9_-]
  std::string name;    ///< record name ("" = none)
  std::string output;  ///< "" = grow `base` in place by true append
  TensorSet tensors = TensorSet::All;
  std::vector<uint32_t> layers;       ///< empty = every layer (and, for All, the non-layer tensors)
  double min_delta = 0.0;             ///< overlay iff max |donor − base| > min_delta (after decoding both)
  std::string prompts;                ///< prompts file ("" = no descriptor)
  FitOptions fit;                     ///< rank, metric, holdout; phi_layer set from `phi_layer`
  std::optional<uint32_t> phi_layer;  ///< default default_phi_layer(num_layers)
  /// Compute the fit's φ through the donor-applied model (true) or the backbone (false, default:
  /// the router sees the backbone's φ at run time, before any skill is chosen).
  bool phi_from_donor = false;
  uint32_t min_prompt_tokens = 4;  ///< a shorter prompt is an error (naming it)
  uint32_t max_prompt_tokens = 0;  ///< prompts are cut to this many tokens (0 = the model's context)
  std::string skill_quant;         ///< `--skill-quant` spelling ("" = each base tensor's dtype)
  bool replace = false;            ///< replace an existing skill of the same id
  size_t threads = 0;              ///< kernel threads for φ (0 = all cores)
  bool progress = true;
};

/// What skill_add wrote.
struct SkillAddResult {
  std::string output;
  std::vector<std::string> overlays;  ///< backbone names that got an overlay, directory order
  std::vector<uint32_t> layers;       ///< layers touched
  uint64_t overlay_bytes = 0;         ///< payload bytes of the overlays
  size_t prompts = 0;                 ///< prompts fitted (0 = no descriptor)
  std::optional<cmf::SelectionDescriptor> selection;
  std::vector<std::string> warnings;
  bool appended = false;  ///< grown in place by true append (no output path given)
};

/// Adds (or with `replace`, replaces) skill `id` in `base`. The donor must have the base's
/// arch_name, num_layers, hidden_size and vocab_size, and every backbone tensor with the same
/// shape. Each considered tensor whose decoded values differ from the base's by more than
/// min_delta becomes `skill.<id>.<name>`, stored verbatim when the donor's dtype is the target
/// dtype, else encoded at the target (the base tensor's dtype, or `skill_quant` through the convert
/// plan's rules). The descriptor is fitted (fit_descriptor) from the prompts' φ. header.routing
/// (calibration over the old skill set) is dropped, with a warning.
/// Throws Error(InvalidArgument): bad id, duplicate id without replace, a donor that differs in
/// arch (naming the field) or misses / reshapes a backbone tensor (naming the first one), no
/// tensor differing, a prompt shorter than min_prompt_tokens (naming its number), fewer prompts
/// than rank + 1; Error(Unsupported): base is a SKILL_FILE; plus what the reader, convert and the
/// writer throw. Nothing is written on error.
SkillAddResult skill_add(const SkillAddOptions& opt);

/// One skill of a file, for `skill list`.
struct SkillInfo {
  cmf::SkillRecord record;
  size_t tensors = 0;  ///< overlays `skill.<id>.*` in the file
  uint64_t bytes = 0;  ///< their payload bytes
};
/// The skills of `path` in registry order (plus ids that have overlays but no record, flagged by
/// an empty record.layers and a record.id of the overlay's id). Throws what Reader::open throws.
std::vector<SkillInfo> skill_list(const std::string& path);

/// Removes skill `id` (record and overlays) from `input`, writing `output` ("" = in place, by true
/// append: the overlays' bytes become dead until `cortiq compact`).
/// header.routing is dropped. Throws Error(InvalidArgument) when the file has no such skill.
void skill_rm(const std::string& input, const std::string& id, const std::string& output);

/// `skill materialize <file> ID -o out`: the specialist skill `id` of `input` stands for — every
/// backbone tensor, replaced by `skill.<id>.<name>` when the file has it (payload verbatim), no
/// other overlay; header = input's with skills = [the record of `id`] and no routing; masks and
/// vocab carried over. What `run --skill ID` computes, as a plain file (`skill export` cuts it
/// back into a SKILL_FILE). Throws Error(InvalidArgument) when the file has no overlays for `id`.
void skill_materialize(const std::string& input, const std::string& id, const std::string& output);

/// `skill export <specialist> --base <base> -o out` (FORMAT-NOTES §1.14). The specialist and base
/// must agree on arch_name, num_layers and hidden_size (Error(InvalidArgument) naming the field).
/// Keeps every specialist tensor whose (name, hash64) is not in the base; header = specialist's
/// with skills = one record {id, name, layers touched, base_dir_hash, base_arch {arch_name,
/// num_layers, hidden_size}, task (the mask catalog's default task when it has masks), provenance
/// {cut_from, tensors}}; masks = the specialist's; no vocab. Writes a SKILL_FILE (bit 6).
/// Returns the tensors kept. Error(InvalidArgument) when nothing differs or the id is invalid.
std::vector<std::string> skill_export(const std::string& specialist, const std::string& base,
                                      const std::string& id, const std::string& output);

/// `skill apply <base> <skill> -o out [--force]` (FORMAT-NOTES §1.14): every base tensor, replaced by
/// the skill's same-named tensor when present (skill tensors absent from the base are ignored);
/// base header with skills = [the skill's record minus base_dir_hash]; masks = the skill's (none
/// when it has none); vocab = the base's. Refuses (Error(InvalidArgument)) a skill file that is not
/// a SKILL_FILE or whose base_dir_hash differs from the base's directory hash unless `force`, which
/// adds a warning. Returns the warnings.
std::vector<std::string> skill_apply(const std::string& base, const std::string& skill,
                                     const std::string& output, bool force);

}  // namespace cortiq::specialize
