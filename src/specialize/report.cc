// render_report / write_report (report.h).
#include "specialize/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "util/atomic_file.h"

namespace cortiq::specialize {

namespace {

using json = nlohmann::json;

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '&':
        o += "&amp;";
        break;
      case '"':
        o += "&quot;";
        break;
      default:
        o += c;
    }
  }
  return o;
}

double num(const json& j, const char* k, double def = std::numeric_limits<double>::quiet_NaN()) {
  if (!j.is_object() || !j.contains(k) || !j[k].is_number()) return def;
  return j[k].get<double>();
}
std::string str(const json& j, const char* k) {
  if (!j.is_object() || !j.contains(k)) return "?";
  return j[k].is_string() ? j[k].get<std::string>() : j[k].dump();
}

struct Pt {
  double x, y;
  std::string label;
};

/// A scatter/line plot in a 560×300 box; x and y ranges from the points (padded).
class Plot {
 public:
  static constexpr double W = 560, H = 300, L = 60, R = 16, T = 28, B = 44;
  double x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  std::string body;

  void fit(const std::vector<Pt>& pts, bool x_from_zero = false) {
    double a = 1e300, b = -1e300, c = 1e300, d = -1e300;
    for (const auto& p : pts) {
      if (!std::isfinite(p.x) || !std::isfinite(p.y)) continue;
      a = std::min(a, p.x), b = std::max(b, p.x), c = std::min(c, p.y), d = std::max(d, p.y);
    }
    if (a > b) a = 0, b = 1, c = 0, d = 1;
    if (x_from_zero) a = std::min(a, 0.0);
    const double px = std::max((b - a) * 0.06, 1e-3), py = std::max((d - c) * 0.1, 1e-3);
    x0 = a - px, x1 = b + px, y0 = c - py, y1 = d + py;
  }
  double sx(double x) const { return L + (x - x0) / (x1 - x0) * (W - L - R); }
  double sy(double y) const { return H - B - (y - y0) / (y1 - y0) * (H - T - B); }

  /// Tick label of v with enough decimals to tell ticks `step` apart.
  static std::string tick(double v, double step) {
    const int dec =
        std::clamp(static_cast<int>(std::ceil(-std::log10(std::max(std::fabs(step), 1e-9)))), 0, 6);
    return fmt::format("{:.{}f}", v, dec);
  }
  bool int_x = false;  ///< x ticks at the integers in range (layers)

  void axes(const std::string& title, const std::string& xl, const std::string& yl, bool pct_x) {
    body += fmt::format(R"(<rect x="0" y="0" width="{}" height="{}" fill="#ffffff"/>)", W, H);
    body += fmt::format(R"(<text x="{}" y="18" class="t">{}</text>)", L, esc(title));
    body += fmt::format(R"(<line x1="{0}" y1="{1}" x2="{2}" y2="{1}" class="ax"/>)", L, H - B, W - R);
    body += fmt::format(R"(<line x1="{0}" y1="{1}" x2="{0}" y2="{2}" class="ax"/>)", L, T, H - B);
    if (int_x)
      for (double xv = std::ceil(x0); xv <= x1; xv += 1)
        body += fmt::format(R"(<text x="{:.1f}" y="{}" class="k" text-anchor="middle">{:.0f}</text>)", sx(xv),
                            H - B + 16, xv);
    for (int i = 0; i <= 4; ++i) {
      const double xv = x0 + (x1 - x0) * i / 4, yv = y0 + (y1 - y0) * i / 4;
      if (!int_x)
        body += fmt::format(R"(<text x="{:.1f}" y="{}" class="k" text-anchor="middle">{}</text>)", sx(xv),
                            H - B + 16,
                            pct_x ? tick(100 * xv, 100 * (x1 - x0) / 4) + "%" : tick(xv, (x1 - x0) / 4));
      body += fmt::format(R"(<line x1="{}" y1="{:.1f}" x2="{}" y2="{:.1f}" class="g"/>)", L, sy(yv), W - R,
                          sy(yv));
      body += fmt::format(R"(<text x="{}" y="{:.1f}" class="k" text-anchor="end">{}</text>)", L - 4,
                          sy(yv) + 4, tick(yv, (y1 - y0) / 4));
    }
    body += fmt::format(R"(<text x="{}" y="{}" class="k" text-anchor="middle">{}</text>)", (L + W - R) / 2,
                        H - 8, esc(xl));
    body += fmt::format(
        R"~(<text x="14" y="{}" class="k" transform="rotate(-90 14 {})" text-anchor="middle">{}</text>)~",
        (T + H - B) / 2, (T + H - B) / 2, esc(yl));
  }
  void line(const std::vector<Pt>& pts, const char* color) {
    if (pts.size() < 2) return;
    std::string d;
    for (const auto& p : pts) d += fmt::format("{}{:.1f},{:.1f} ", d.empty() ? "M" : "L", sx(p.x), sy(p.y));
    body += fmt::format(R"(<path d="{}" fill="none" stroke="{}" stroke-width="2.5"/>)", d, color);
  }
  void dots(const std::vector<Pt>& pts, const char* color, double r = 5) {
    for (const auto& p : pts)
      body += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="{}" fill="{}"><title>{}</title></circle>)",
                          sx(p.x), sy(p.y), r, color, esc(p.label));
  }
  void ring(const Pt& p, const char* color, const std::string& text) {
    body +=
        fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="10" fill="none" stroke="{}" stroke-width="3"/>)",
                    sx(p.x), sy(p.y), color);
    body += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" class="k" fill="{}">{}</text>)", sx(p.x) + 13,
                        sy(p.y) - 8, color, esc(text));
  }
  void note(const std::string& text) {
    body += fmt::format(R"(<text x="{}" y="{}" class="k">{}</text>)", L + 10, T + 20, esc(text));
  }
  std::string svg(const std::string& id) const {
    return fmt::format(
        R"(<svg class="plot" id="{}" xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" viewBox="0 0 {} {}">{}</svg>)",
        id, W, H, W, H, body);
  }
};

std::vector<Pt> series(const json& arr, const char* x, const char* y = "ppl") {
  std::vector<Pt> out;
  if (!arr.is_array()) return out;
  for (const auto& p : arr) {
    const double a = num(p, x), b = num(p, y);
    if (std::isfinite(a) && std::isfinite(b)) out.push_back({a, b, str(p, "what")});
  }
  return out;
}

std::string phase_a_plot(const json& t) {
  std::vector<Pt> hist = series(t.value("phase_a", json::array()), "kept");
  std::vector<Pt> sweep = series(t.value("sweep", json::array()), "kept");
  const json& ch = t.value("chosen", json::object());
  const json& al = t.value("aligned", json::object());
  const Pt chosen{num(ch, "kept"), num(ch, "ppl"), str(ch, "what")};
  const Pt aligned{num(al, "kept"), num(al, "ppl"), "aligned"};
  std::vector<Pt> all = hist;
  all.insert(all.end(), sweep.begin(), sweep.end());
  for (const Pt& p : {chosen, aligned})
    if (std::isfinite(p.x) && std::isfinite(p.y)) all.push_back(p);
  Plot pl;
  pl.fit(all);
  pl.axes("Phase A: select ppl vs kept FFN fraction", "kept FFN neurons", "select ppl", true);
  if (std::isfinite(num(t, "dense_select"))) {
    const double y = pl.sy(num(t, "dense_select"));
    pl.body +=
        fmt::format(R"(<line x1="{}" y1="{:.1f}" x2="{}" y2="{:.1f}" stroke="#888" stroke-dasharray="5 4"/>)",
                    Plot::L, y, Plot::W - Plot::R, y);
  }
  if (all.empty()) pl.note("no phase A points recorded");
  pl.line(hist, "#1f77b4");
  pl.dots(hist, "#1f77b4");
  pl.dots(sweep, "#ff7f0e", 6);
  if (std::isfinite(aligned.x) && std::isfinite(aligned.y)) pl.dots({aligned}, "#2ca02c", 6);
  if (std::isfinite(chosen.x) && std::isfinite(chosen.y))
    pl.ring(chosen, "#d62728", "chosen: " + chosen.label);
  return pl.svg("plot-phase-a");
}

std::string phase_b_plot(const json& t) {
  std::vector<Pt> b = series(t.value("phase_b", json::array()), "step");
  Plot pl;
  pl.fit(b, true);
  pl.axes("Phase B (FCD of the tail): select ppl vs step", "step", "select ppl", false);
  if (b.empty()) pl.note("no phase B (mask, or --fcd-steps 0)");
  pl.line(b, "#9467bd");
  pl.dots(b, "#9467bd");
  return pl.svg("plot-phase-b");
}

std::string widths_plot(const json& t) {
  Plot pl;
  const double full = num(t, "intermediate", 1);
  std::vector<double> w;
  if (t.contains("widths") && t["widths"].is_array())
    for (const auto& x : t["widths"])
      if (x.is_number()) w.push_back(x.get<double>());
  pl.int_x = true;
  pl.x0 = -0.5, pl.x1 = std::max<double>(w.size(), 1) - 0.5, pl.y0 = 0, pl.y1 = std::max(full, 1.0) * 1.05;
  pl.axes("Kept FFN width per layer", "layer", "neurons", false);
  if (w.empty()) pl.note("no widths recorded");
  const double bw = (Plot::W - Plot::L - Plot::R) / std::max<double>(w.size(), 1) * 0.7;
  for (size_t l = 0; l < w.size(); ++l) {
    const double cx = pl.sx(static_cast<double>(l));
    pl.body += fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="#dddddd"/>)",
                           cx - bw / 2, pl.sy(full), bw, pl.sy(0) - pl.sy(full));
    pl.body += fmt::format(
        R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="#17becf"><title>layer {}: {}</title></rect>)",
        cx - bw / 2, pl.sy(w[l]), bw, pl.sy(0) - pl.sy(w[l]), l, w[l]);
  }
  return pl.svg("plot-widths");
}

}  // namespace

std::string render_report(const json& t) {
  const json& rep = t.value("report", json::object());
  const json& by = t.value("bytes", json::object());
  const double before = num(by, "before"), after = num(by, "after");
  std::string h;
  h += "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>cortiq compile: " +
       esc(str(t, "task")) + "</title>\n";
  h += "<style>body{font-family:sans-serif;margin:20px;background:#fff;color:#222}"
       "svg.plot{border:1px solid #ccc;margin:8px}.t{font-size:15px;font-weight:bold}.k{font-size:12px}"
       ".ax{stroke:#333;stroke-width:1.5}.g{stroke:#eee}td,th{padding:2px 10px;text-align:left}</style>"
       "</head><body>\n";
  h += fmt::format("<h1>Task compilation: {} (as {})</h1>\n", esc(str(t, "task")), esc(str(t, "as")));
  h += "<table>";
  h += fmt::format("<tr><th>report ppl, dense (runtime)</th><td>{:.4f}</td></tr>", num(rep, "dense"));
  h += fmt::format("<tr><th>report ppl, compiled (runtime)</th><td>{:.4f}</td></tr>", num(rep, "specialist"));
  h += fmt::format("<tr><th>verdict</th><td>{}</td></tr>", esc(str(rep, "verdict")));
  h += fmt::format("<tr><th>kept FFN fraction (aligned)</th><td>{:.2f}%</td></tr>",
                   100 * num(t.value("aligned", json::object()), "kept"));
  h += fmt::format("<tr><th>file bytes</th><td>{:.0f} → {:.0f} ({:.2f}× smaller)</td></tr>", before, after,
                   before / after);
  h += "</table>\n<div>\n";
  h += phase_a_plot(t) + "\n" + phase_b_plot(t) + "\n" + widths_plot(t) + "\n";
  h += "</div>\n<p class=\"k\">Phase A: blue = scored checkpoints (dense first), orange = threshold sweep, "
       "green = after per-layer alignment, red ring = chosen, dashed = dense select ppl.</p>\n";
  h += "</body></html>\n";
  return h;
}

void write_report(const std::string& path, const json& trace) {
  const std::string s = render_report(trace);
  write_file_atomic(path, {reinterpret_cast<const uint8_t*>(s.data()), s.size()});
}

}  // namespace cortiq::specialize
