// Render budget of the Jinja engine (see budget.h).
#include "tokenizer/jinja/budget.h"

#include <algorithm>
#include <limits>

#include "tokenizer/jinja/ast.h"

namespace cortiq::jinja {

namespace {
thread_local Budget* t_current = nullptr;

[[noreturn]] void over(const std::string& detail) {
  throw_tpl(TplErrorKind::Runtime, "render budget: " + detail);
}
}  // namespace

Budget::Budget(const Options& opt) : opt_(opt) {
  next_check_ = std::min<uint64_t>(opt.cancelled ? kCancelPollSteps : std::numeric_limits<uint64_t>::max(),
                                   opt.max_steps ? opt.max_steps + 1 : std::numeric_limits<uint64_t>::max());
}

void Budget::slow_step() {
  if (opt_.max_steps && used_ > opt_.max_steps)
    over(fmt::format("{} ran past {} steps (jinja::Options::max_steps)", where(), opt_.max_steps));
  if (opt_.cancelled && opt_.cancelled())
    throw_tpl(TplErrorKind::Cancelled, fmt::format("stopped by its cancel check after {} steps", used_));
  uint64_t next = opt_.cancelled ? used_ + kCancelPollSteps : std::numeric_limits<uint64_t>::max();
  if (opt_.max_steps) next = std::min(next, opt_.max_steps + 1);
  next_check_ = next;
}

void Budget::check_bytes(uint64_t bytes, std::string_view what) const {
  if (bytes > opt_.max_bytes)
    over(fmt::format("{} would be {} bytes, over the limit of {} (jinja::Options::max_bytes)", what, bytes,
                     opt_.max_bytes));
}

void Budget::check_items(uint64_t items, std::string_view what) const {
  if (items > opt_.max_items)
    over(fmt::format("{} would have {} items, over the limit of {} (jinja::Options::max_items)", what, items,
                     opt_.max_items));
}

void Budget::check_output(uint64_t bytes) const {
  if (bytes > opt_.max_bytes)
    over(
        fmt::format("the output of {} passed {} bytes (jinja::Options::max_bytes)", where(), opt_.max_bytes));
}

void Budget::enter_macro(const Stmt& s, const std::string& name) {
  const int limit = std::clamp(opt_.max_macro_depth, 1, kMaxMacroDepth);
  if (macro_depth_ >= limit)
    over(fmt::format("macro '{}' recursion deeper than {} calls (jinja::Options::max_macro_depth)", name,
                     limit));
  ++macro_depth_;
  frames_.push_back({&s, &name});
}

std::string Budget::where() const {
  if (frames_.empty()) return "the template";
  const Frame& f = frames_.back();
  if (f.macro) return fmt::format("macro '{}' (line {})", *f.macro, f.s->line);
  return fmt::format("for loop at line {}", f.s->line);
}

Budget* current_budget() noexcept {
  return t_current;
}

BudgetScope::BudgetScope(Budget& b) noexcept : prev_(t_current) {
  t_current = &b;
}
BudgetScope::~BudgetScope() {
  t_current = prev_;
}

void budget_bytes(uint64_t bytes, std::string_view what) {
  if (t_current) return t_current->check_bytes(bytes, what);
  if (bytes <= kDefaultMaxBytes) return;
  static const Options defaults;
  Budget(defaults).check_bytes(bytes, what);
}

void budget_items(uint64_t items, std::string_view what) {
  if (t_current) return t_current->check_items(items, what);
  if (items <= kDefaultMaxItems) return;
  static const Options defaults;
  Budget(defaults).check_items(items, what);
}

void budget_step(uint64_t n) {
  if (t_current) t_current->step(n);
}

uint64_t value_cost(const Value& v) noexcept {
  switch (v.type) {
    case VType::String:
      return v.s.size() / 64;
    case VType::Array:
      return v.arr->items.size();
    case VType::Object:
    case VType::Namespace:
      return v.obj->items.size();
    default:
      return 0;
  }
}

}  // namespace cortiq::jinja
