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

void expect_too_deep(const std::string& src, const Options& opt = {}) {
  try {
    const std::string out = render(src, opt);
    ADD_FAILURE() << "rendered " << out.size() << " bytes: " << src;
  } catch (const TemplateError& e) {
    EXPECT_EQ(e.tpl_kind(), TplErrorKind::Type) << e.what();
    EXPECT_NE(e.detail().find("nested deeper than 128 levels"), std::string::npos) << e.what();
  }
}

TEST(ValueNesting, DeepListsBuiltByATemplateAreRefused) {
  expect_too_deep(
      "{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}");
  expect_too_deep(
      "{% set ns = namespace(x={}) %}{% for i in range(100000) %}{% set ns.x = {'a': ns.x} %}{% endfor %}"
      "{{ ns.x | tojson }}");
  // 127 levels are fine, and print as Python does
  EXPECT_EQ(render("{% set ns = namespace(x=1) %}{% for i in range(3) %}{% set ns.x = [ns.x] %}{% endfor %}"
                   "{{ ns.x }} {{ ns.x | tojson }} {{ ns.x == [[[1]]] }}"),
            "[[[1]]] [[[1]]] True");
  EXPECT_NO_THROW(render(
      "{% set ns = namespace(x=[]) %}{% for i in range(126) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}"));
}

TEST(ValueNesting, AContainerHoldingItselfIsRefused) {
  Options opt;
  opt.allow_mutation = true;
  expect_too_deep("{% set l = [] %}{{ l.append(l) }}{{ l }}", opt);
  expect_too_deep("{% set l = [] %}{{ l.append(l) }}{{ l | tojson }}", opt);
  expect_too_deep("{% set d = {} %}{{ d.update({'a': d}) }}{{ d }}", opt);
}

}  // namespace
}  // namespace cortiq::jinja
