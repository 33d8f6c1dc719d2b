// `cortiq compile --report report.html` (issue 31 item 3): one self-contained HTML page — inline
// SVG, inline CSS, no script, no external resource — drawn from CompileResult::trace:
//   * phase A: select-split ppl against kept FFN fraction for every scored checkpoint (dense
//     first, joined in step order), the threshold sweep, the chosen point and the point after the
//     per-layer alignment (§2, §2.6, §4);
//   * phase B: select ppl against step (step 0 = the phase-A mask; §3);
//   * per-layer kept widths as bars over the dense width;
//   * a summary table (report split through the runtime, sizes, verdict).
// Each plot is an <svg class="plot" id="plot-…"> with a white background and coloured marks, so a
// screenshot shows non-white pixels inside each plot box (what the render test counts).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace cortiq::specialize {

/// The HTML page for `trace` (CompileResult::trace: dense_select, intermediate, widths[], chosen
/// {what, kept, ppl}, aligned {kept, ppl}, phase_a[] / sweep[] {what, kept, ppl}, phase_b[]
/// {what, step, ppl}, report {dense, specialist, verdict}, bytes {before, after}, task, as).
/// Missing or empty series draw an empty plot with a note (never throws on shape; text values
/// are HTML-escaped).
std::string render_report(const nlohmann::json& trace);

/// Writes render_report(trace) to `path` through temp + rename. Throws Error(Io) naming the path.
void write_report(const std::string& path, const nlohmann::json& trace);

}  // namespace cortiq::specialize
