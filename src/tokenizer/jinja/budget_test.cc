// Render budget (issue 27 §3): templates that would hang or exhaust the process end with a
// TemplateError(Runtime) naming the construct and the limit; a cancel check ends a render with
// TemplateError(Cancelled). Normal templates are unaffected (chat_template_test.cc runs every golden
// with a hundredth of the default step budget).
#include "tokenizer/jinja/budget.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "tokenizer/jinja/jinja.h"

namespace cortiq::jinja {
namespace {

using nlohmann::ordered_json;

struct Failure {
  TplErrorKind kind = TplErrorKind::Syntax;
  std::string detail, what;
  int line = 0;
};

// The error `src` renders to under `opt`; fails the test when it renders.
Failure failure(const std::string& src, const Options& opt = {}) {
  try {
    std::string out = Template(src).render(ordered_json::object(), opt);
    ADD_FAILURE() << "rendered " << out.size() << " bytes: " << src;
  } catch (const TemplateError& e) {
    return {e.tpl_kind(), e.detail(), e.what(), e.line()};
  }
  return {};
}

std::string render(const std::string& src, const Options& opt = {}) {
  return Template(src).render(ordered_json::object(), opt);
}

TEST(RenderBudget, NestedRangeLoopsEndAtTheStepBudget) {
  const std::string src =
      "{% for i in range(100000) %}\n"
      "{% for j in range(100000) %}{{ j }}{% endfor %}{% endfor %}";
  Options opt;
  opt.max_steps = 1000000;
  Failure f = failure(src, opt);
  EXPECT_EQ(f.kind, TplErrorKind::Runtime);
  EXPECT_EQ(f.detail, "render budget: for loop at line 2 ran past 1000000 steps (jinja::Options::max_steps)");
  EXPECT_NE(f.what.find("RuntimeError: render budget: for loop at line 2"), std::string::npos) << f.what;
  // The default budget ends it as well (10**10 iterations would run for hours).
  f = failure("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}");
  EXPECT_EQ(f.detail, "render budget: for loop at line 1 ran past " + std::to_string(kDefaultMaxSteps) +
                          " steps (jinja::Options::max_steps)");
  // 0 = unlimited: the same loops with fewer iterations complete.
  opt.max_steps = 0;
  EXPECT_EQ(render("{% for i in range(300) %}{% for j in range(300) %}{% endfor %}{% endfor %}ok", opt),
            "ok");
}

TEST(RenderBudget, StepsCountWorkOnBigValues) {
  // `ns.s ~ x` in a loop copies the growing string each time: quadratic work, cut by the steps
  // (each copy counts its length / 64) long before the string reaches the size limit.
  Failure f = failure(
      "{% set ns = namespace(s='') %}{% for i in range(100000) %}\n\n"
      "{% for j in range(100000) %}{% set ns.s = ns.s ~ 'xxxxxxxxxx' %}{% endfor %}{% endfor %}");
  EXPECT_EQ(f.kind, TplErrorKind::Runtime);
  EXPECT_EQ(f.detail.rfind("render budget: for loop at line 3 ran past", 0), 0u) << f.detail;
  // A filter over a big list in a loop counts the list each time.
  Options opt;
  opt.max_steps = 1000000;
  f = failure(
      "{% set big = range(100000) | list %}{% for i in range(1000) %}{{ big | join | length }}{% endfor %}",
      opt);
  EXPECT_EQ(f.detail.rfind("render budget: for loop at line 1 ran past 1000000 steps", 0), 0u) << f.detail;
}

TEST(RenderBudget, RecursiveMacroNamesTheMacro) {
  Failure f = failure("{% macro f(x) %}{{ f(x) }}{% endmacro %}{{ f(1) }}");
  EXPECT_EQ(f.kind, TplErrorKind::Runtime);
  EXPECT_EQ(f.detail,
            "render budget: macro 'f' recursion deeper than 100 calls (jinja::Options::max_macro_depth)");
  const std::string countdown =
      "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{{ n }}{% endmacro %}{{ f(N) }}";
  Options opt;
  opt.max_macro_depth = 5;
  auto with_n = [&](int n) {
    std::string s = countdown;
    s.replace(s.find('N'), 1, std::to_string(n));
    return s;
  };
  EXPECT_EQ(render(with_n(4), opt), "01234");  // five calls deep
  f = failure(with_n(5), opt);
  EXPECT_EQ(f.detail,
            "render budget: macro 'f' recursion deeper than 5 calls (jinja::Options::max_macro_depth)");
  // Wide instead of deep: a macro called 10**10 times ends at the step budget, named.
  opt = {};
  opt.max_steps = 1000000;
  f = failure(
      "{% macro g() %}{% for k in range(100000) %}{% endfor %}{% endmacro %}\n"
      "{% for i in range(100000) %}{{ g() }}{% endfor %}",
      opt);
  EXPECT_EQ(f.detail, "render budget: for loop at line 1 ran past 1000000 steps (jinja::Options::max_steps)");
}

TEST(RenderBudget, HugeStringsAreRefusedBeforeTheyAreBuilt) {
  const std::string limit = std::to_string(kDefaultMaxBytes);
  Failure f = failure("{{ 'x' * 10**9 }}");
  EXPECT_EQ(f.kind, TplErrorKind::Runtime);
  EXPECT_EQ(f.line, 1);
  EXPECT_EQ(f.detail, "render budget: string '*' would be 1000000000 bytes, over the limit of " + limit +
                          " (jinja::Options::max_bytes)");
  // 10**6 * 10**6 bytes: a product past the limit, and one past 2**64 (no wrap-around)
  EXPECT_EQ(failure("{{ ('x' * 1000000) * 1000000 }}").detail,
            "render budget: string '*' would be 1000000000000 bytes, over the limit of " + limit +
                " (jinja::Options::max_bytes)");
  EXPECT_EQ(failure("{{ ('xx' * 1000000) * 9223372036854775807 }}")
                .detail.rfind("render budget: string '*' would be 18446744073709551615 bytes", 0),
            0u);
  // widths: format specs, printf, str methods, filters, tojson indent
  for (const char* src :
       {"{{ '{:>1000000000}'.format('x') }}", "{{ '%1000000000s' % 'x' }}", "{{ 'x'.center(1000000000) }}",
        "{{ 'x' | center(1000000000) }}", "{{ '7'.zfill(1000000000) }}", "{{ '{:01000000000}'.format(7) }}",
        "{{ 'a\nb' | indent(1000000000) }}", "{{ [[1]] | tojson(indent=1000000000) }}",
        "{{ ('x' * 1000000) | replace('', 'y' * 100) }}", "{{ ['x' * 1000000] * 100 }}"}) {
    f = failure(src);
    EXPECT_EQ(f.kind, TplErrorKind::Runtime) << src;
    EXPECT_EQ(f.detail.rfind("render budget: ", 0), 0u) << src << ": " << f.detail;
    EXPECT_NE(f.detail.find("(jinja::Options::max_bytes)"), std::string::npos) << src << ": " << f.detail;
  }
  // Within the limit it works, and a smaller limit applies.
  EXPECT_EQ(render("{{ ('ab' * 500000) | length }}"), "1000000");
  Options opt;
  opt.max_bytes = 1000;
  EXPECT_EQ(
      failure("{{ 'x' * 1001 }}", opt).detail,
      "render budget: string '*' would be 1001 bytes, over the limit of 1000 (jinja::Options::max_bytes)");
  EXPECT_EQ(render("{{ 'x' * 1000 }}", opt), std::string(1000, 'x'));
}

TEST(RenderBudget, HugeRangesAndListsEnd) {
  // range() keeps Jinja2's sandbox limit (MAX_RANGE) as Jinja2 words it
  Failure f = failure("{{ range(10**9) | list }}");
  EXPECT_EQ(f.kind, TplErrorKind::Type);
  EXPECT_EQ(f.detail, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  f = failure("{{ (range(100000) | list) * 100 }}");
  EXPECT_EQ(f.kind, TplErrorKind::Runtime);
  EXPECT_EQ(f.detail, "render budget: list '*' would have 10000000 items, over the limit of " +
                          std::to_string(kDefaultMaxItems) + " (jinja::Options::max_items)");
  f = failure("{{ [1] | batch(1000000000, 0) }}");
  EXPECT_EQ(f.detail.rfind("render budget: list from filter 'batch' would have 1000000000 items", 0), 0u)
      << f.detail;
  // 1 ** 10**18 is 1 at once (the power loop stops at overflow, and 1 never overflows)
  EXPECT_EQ(render("{{ 1 ** 1000000000000000000 }} {{ (-1) ** 1000000000000000001 }} {{ 0 ** 0 }}"),
            "1 -1 1");
}

TEST(RenderBudget, OutputSizeIsBounded) {
  Options opt;
  opt.max_bytes = 100000;
  Failure f = failure("{% for i in range(100000) %}\n{{ 'x' * 1000 }}{% endfor %}", opt);
  EXPECT_EQ(f.kind, TplErrorKind::Runtime);
  EXPECT_EQ(
      f.detail,
      "render budget: the output of for loop at line 1 passed 100000 bytes (jinja::Options::max_bytes)");
  EXPECT_EQ(render("{% for i in range(99) %}{{ 'x' * 1000 }}{% endfor %}", opt).size(), 99000u);
}

TEST(RenderBudget, CancelCheckEndsTheRender) {
  Options opt;
  opt.max_steps = 0;  // unlimited: only the cancel check can end it
  int polls = 0;
  opt.cancelled = [&] { return ++polls == 3; };
  Failure f =
      failure("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", opt);
  EXPECT_EQ(f.kind, TplErrorKind::Cancelled);
  EXPECT_EQ(polls, 3);
  EXPECT_EQ(f.detail.rfind("stopped by its cancel check after ", 0), 0u) << f.detail;
  EXPECT_NE(f.what.find("render cancelled"), std::string::npos) << f.what;
  EXPECT_EQ(std::string(tpl_error_kind_name(f.kind)), "Cancelled");

  // From another thread, through an atomic flag (as the server does).
  std::atomic<bool> stop{false};
  opt.cancelled = [&] { return stop.load(); };
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    stop = true;
  });
  f = failure("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", opt);
  t.join();
  EXPECT_EQ(f.kind, TplErrorKind::Cancelled);
  // A check that never fires changes nothing.
  opt.cancelled = [] { return false; };
  EXPECT_EQ(render("{% for i in range(3000) %}{% endfor %}done", opt), "done");
}

TEST(RenderBudget, OutsideARenderTheDefaultsApply) {
  EXPECT_EQ(current_budget(), nullptr);
  EXPECT_NO_THROW(budget_bytes(kDefaultMaxBytes, "x"));
  EXPECT_THROW(budget_bytes(kDefaultMaxBytes + 1, "x"), TemplateError);
  EXPECT_THROW(budget_items(kDefaultMaxItems + 1, "x"), TemplateError);
  Options opt;
  Budget b(opt);
  {
    BudgetScope scope(b);
    EXPECT_EQ(current_budget(), &b);
    budget_step(7);
  }
  EXPECT_EQ(current_budget(), nullptr);
  EXPECT_EQ(b.steps_used(), 7u);
}

}  // namespace
}  // namespace cortiq::jinja
