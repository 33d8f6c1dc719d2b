// Values nested too deep, or containing themselves, end a render with TemplateError(Type) instead of
// overflowing the stack (found by jinja_fuzz and by hand, issue 27 §7): a chat template in a model
// file can build `[[[…]]]` 100,000 deep with a namespace, and with allow_mutation a list can hold
// itself; printing, comparing or tojson-ing such a value recursed once per level.
#include <gtest/gtest.h>

#include "tokenizer/jinja/jinja.h"

namespace cortiq::jinja {
namespace {

using nlohmann::ordered_json;

std::string render(const std::string& src, const Options& opt = {}) {
  return Template(src).render(ordered_json::object(), opt);
}

void expect_type_error(const std::string& src, const std::string& want, const Options& opt = {}) {
  try {
    const std::string out = render(src, opt);
    ADD_FAILURE() << "rendered " << out.size() << " bytes: " << src;
  } catch (const TemplateError& e) {
    EXPECT_EQ(e.tpl_kind(), TplErrorKind::Type) << e.what();
    EXPECT_NE(e.detail().find(want), std::string::npos) << e.what();
  }
}
void expect_too_deep(const std::string& src, const Options& opt = {}) {
  expect_type_error(src, "nested deeper than 128 levels", opt);
}

TEST(ValueNesting, DeepListsBuiltByATemplateAreRefused) {
  expect_too_deep(
      "{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x "
      "}}");
  expect_too_deep(
      "{% set ns = namespace(x={}) %}{% for i in range(100000) %}{% set ns.x = {'a': ns.x} %}{% endfor %}"
      "{{ ns.x | tojson }}");
  // 127 levels are fine, and print as Python does
  EXPECT_EQ(render("{% set ns = namespace(x=1) %}{% for i in range(3) %}{% set ns.x = [ns.x] %}{% endfor %}"
                   "{{ ns.x }} {{ ns.x | tojson }} {{ ns.x == [[[1]]] }}"),
            "[[[1]]] [[[1]]] True");
  EXPECT_NO_THROW(
      render("{% set ns = namespace(x=[]) %}{% for i in range(126) %}{% set ns.x = [ns.x] %}{% endfor %}{{ "
             "ns.x }}"));
}

// A container that would hold itself is refused when it would be made (a cycle no walk could end
// and no reference count could free: LeakSanitizer saw the leak), with or without allow_mutation.
TEST(ValueNesting, AContainerHoldingItselfIsRefused) {
  Options opt;
  opt.allow_mutation = true;
  const std::string cycle = "cannot contain itself";
  expect_type_error("{% set l = [] %}{{ l.append(l) }}{{ l }}", cycle, opt);
  expect_type_error("{% set l = [] %}{{ l.append([1, [l]]) }}", cycle, opt);
  expect_type_error("{% set l = [] %}{{ l.insert(0, l) }}", cycle, opt);
  expect_type_error("{% set l = [] %}{{ l.extend([l]) }}", cycle, opt);
  expect_type_error("{% set d = {} %}{{ d.update({'a': d}) }}{{ d }}", cycle, opt);
  expect_type_error("{% set d = {} %}{{ d.update({'a': [d]}) }}", cycle, opt);
  expect_type_error("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", cycle);  // no mutation needed
  // a list holding another list (not itself) is fine
  EXPECT_EQ(render("{% set l = [] %}{% set m = [1] %}{{ l.append(m) }}{{ l.append(m) }}{{ l }}", opt),
            "NoneNone[[1], [1]]");
}

}  // namespace
}  // namespace cortiq::jinja
