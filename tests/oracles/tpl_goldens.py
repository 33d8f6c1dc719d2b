#!/usr/bin/python3
"""Chat-template goldens for the C++ Jinja engine (src/tokenizer/jinja/).

Renders exactly as transformers' apply_chat_template does (utils/chat_template_utils.py
`_compile_jinja_template`): ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
extensions=[AssistantTracker, loopcontrols]); the `tojson` filter replaced by
json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False); globals
raise_exception (TemplateError) and strftime_now (here pinned to FIXED_TIME so goldens are stable);
the `{% generation %}` block renders its body.

Outputs (run from the repo root with the Debian python3-jinja2):
  tests/golden/templates/<model>.json      every chat_template of ../shared/models/tokenizer-*/
                                            tokenizer_config.json x conversations x options
  tests/golden/templates/constructs.json   small templates exercising each construct/filter/test
Each case: {"name", "context", "output"} or {"name", "context", "error_type", "error"}.
"""
import glob
import hashlib
import json
import os
import sys
import time

import jinja2
from jinja2 import nodes
from jinja2.exceptions import TemplateError
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

FIXED_TIME = 1721995200  # 2024-07-26 12:00:00 UTC; formats used stay TZ-independent (date only)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.path.join(ROOT, "..", "shared")
OUT = os.path.join(ROOT, "tests", "golden", "templates")


class AssistantTracker(Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    @jinja2.pass_eval_context
    def _generation_support(self, context, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return time.strftime(format, time.localtime(FIXED_TIME))

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


ENV = make_env()

ERROR_TYPES = {
    "TemplateSyntaxError": "Syntax",
    "TemplateAssertionError": "Syntax",
    "UndefinedError": "Undefined",
    "SecurityError": "Security",
    "TemplateRuntimeError": "Runtime",
    "TypeError": "Type",
    "ValueError": "Type",
    "ZeroDivisionError": "Type",
    "IndexError": "Type",
    "KeyError": "Type",
    "AttributeError": "Type",
    "OverflowError": "Type",
    "TemplateError": "Raised",
}


def render_case(source, context):
    try:
        tmpl = ENV.from_string(source)
        return {"output": tmpl.render(**context)}
    except Exception as e:  # noqa: BLE001 - every exception is recorded as an expected error
        kind = ERROR_TYPES.get(type(e).__name__)
        if kind is None:
            raise
        return {"error_type": kind, "error": str(e)}


# ---- conversations -------------------------------------------------------------------------------

WEATHER_TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Wetter für Köln — current weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name, e.g. 東京"},
                                                                "unit": {"type": "string", "enum": ["c", "f"]}},
                               "required": ["city"]}}}
CALC_TOOL = {"type": "function", "function": {"name": "calc", "description": "Evaluate <expr> & return \"value\"",
             "parameters": {"type": "object", "properties": {"expr": {"type": "string"}, "precision": {"type": "integer", "default": 2}},
                            "required": ["expr"]}, "return": {"type": "number"}}}

CONVERSATIONS = {
    "single_user": {"messages": [{"role": "user", "content": "Hello!"}]},
    "system_user": {"messages": [{"role": "system", "content": "You are a terse assistant."},
                                 {"role": "user", "content": "What is 2+2?"}]},
    "multi_turn": {"messages": [{"role": "user", "content": "Hi there"},
                                {"role": "assistant", "content": "Hello! How can I help?"},
                                {"role": "user", "content": "  Tell me a joke.  \n"},
                                {"role": "assistant", "content": "Why did the chicken cross the road?"},
                                {"role": "user", "content": "Why?"}]},
    "system_multi_turn": {"messages": [{"role": "system", "content": "Be kind.\nAlways."},
                                       {"role": "user", "content": "Привет"},
                                       {"role": "assistant", "content": "Здравствуйте! 😀"},
                                       {"role": "user", "content": "Как дела? 👩‍👩‍👧"}]},
    "tools_defined": {"messages": [{"role": "user", "content": "Weather in Köln?"}], "tools": [WEATHER_TOOL, CALC_TOOL]},
    "tools_system": {"messages": [{"role": "system", "content": "Use tools when needed."},
                                  {"role": "user", "content": "Compute 3*7"}], "tools": [CALC_TOOL]},
    "tool_call_roundtrip": {"messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call12345", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}}]},
        {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": "{\"temp\": 18, \"sky\": \"cloudy\"}"},
        {"role": "assistant", "content": "It is 18°C and cloudy in Paris."},
        {"role": "user", "content": "Thanks"}], "tools": [WEATHER_TOOL]},
    "tool_call_string_args": {"messages": [
        {"role": "user", "content": "Compute 1/3"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "abcdefghi", "type": "function", "function": {"name": "calc", "arguments": "{\"expr\": \"1/3\"}"}}]},
        {"role": "tool", "tool_call_id": "abcdefghi", "content": "0.333"}], "tools": [CALC_TOOL]},
    "parallel_tool_calls": {"messages": [
        {"role": "user", "content": "Weather in Oslo and Rome?"},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [
            {"id": "call00001", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}},
            {"id": "call00002", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Rome"}}}]},
        {"role": "tool", "tool_call_id": "call00001", "content": "-3"},
        {"role": "tool", "tool_call_id": "call00002", "content": "21"}], "tools": [WEATHER_TOOL]},
    "parts_content": {"messages": [
        {"role": "system", "content": [{"type": "text", "text": "System in parts."}]},
        {"role": "user", "content": [{"type": "text", "text": "Describe this:"}, {"type": "image"}, {"type": "text", "text": " please "}]}]},
    "thinking_history": {"messages": [
        {"role": "user", "content": "What is 7*6?"},
        {"role": "assistant", "content": "<think>\n7*6 = 42\n</think>\n\n42"},
        {"role": "user", "content": "And 6*7?"}]},
    "reasoning_content": {"messages": [
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "A1", "reasoning_content": "thinking about Q1"},
        {"role": "user", "content": "Q2"},
        {"role": "assistant", "content": "A2"}]},
    "not_alternating": {"messages": [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}]},
    "special_chars": {"messages": [{"role": "user", "content": "{{ not a template }} {% raw %} \\n \"quotes\" 'single' \t tab"},
                                   {"role": "assistant", "content": "<|im_end|> lookalike </s> [INST]"},
                                   {"role": "user", "content": "\u2028line sep \x00 nul? no: \x01"}]},
}

# (suffix, add_generation_prompt, enable_thinking or None)
OPTIONS = [("agp", True, None), ("noagp", False, None)]
THINK_OPTIONS = [("agp_think_off", True, False), ("agp_think_on", True, True), ("noagp_think_off", False, False)]
THINK_CONVS = {"single_user", "system_multi_turn", "thinking_history", "tool_call_roundtrip", "reasoning_content"}


def special_token(v):
    if isinstance(v, dict):
        return v.get("content")
    return v


def model_context(cfg, conv, agp, think):
    # Mirrors apply_chat_template: messages, tools (None when absent), documents=None,
    # add_generation_prompt, then the special tokens map and template kwargs.
    ctx = {"messages": conv["messages"], "tools": conv.get("tools"), "documents": None,
           "add_generation_prompt": agp}
    for key in ("bos_token", "eos_token", "unk_token", "pad_token"):
        tok = special_token(cfg.get(key))
        if tok is not None:
            ctx[key] = tok
    if think is not None:
        ctx["enable_thinking"] = think
    return ctx


def templates_of(cfg):
    t = cfg.get("chat_template")
    if t is None:
        return []
    if isinstance(t, str):
        return [("default", t)]
    return [(x["name"], x["template"]) for x in t]


def model_goldens():
    written = []
    for path in sorted(glob.glob(os.path.join(SHARED, "models", "tokenizer-*", "tokenizer_config.json"))):
        model = os.path.basename(os.path.dirname(path))
        cfg = json.load(open(path, encoding="utf-8"))
        for tname, source in templates_of(cfg):
            cases = []
            for cname, conv in CONVERSATIONS.items():
                opts = OPTIONS + (THINK_OPTIONS if cname in THINK_CONVS else [])
                for suffix, agp, think in opts:
                    ctx = model_context(cfg, conv, agp, think)
                    case = {"name": f"{cname}/{suffix}", "context": ctx}
                    case.update(render_case(source, ctx))
                    cases.append(case)
            doc = {"source": f"shared/models/{model}/tokenizer_config.json#chat_template"
                             + ("" if tname == "default" and isinstance(cfg["chat_template"], str) else f"[{tname}]"),
                   "template_sha256": hashlib.sha256(source.encode()).hexdigest(),
                   "strftime_now_time": FIXED_TIME,
                   "jinja2_version": jinja2.__version__,
                   "template": source, "cases": cases}
            name = model.replace("tokenizer-", "") + ("" if tname == "default" else "-" + tname)
            out = os.path.join(OUT, name + ".json")
            with open(out, "w", encoding="utf-8") as f:
                json.dump(doc, f, ensure_ascii=False, indent=1)
                f.write("\n")
            n_err = sum(1 for c in cases if "error" in c)
            written.append(f"{out}: {len(cases)} cases ({n_err} expected errors)")
    return written


# ---- construct-level unit goldens ------------------------------------------------------------------

CTX = {
    "m": {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]},
    "n": {"role": "assistant", "content": None},
    "t": {"name": "k", "안녕?": "🤗", "html": "<a&b>'", "n": [1, 2.5, True, None]},
    "t2": {"b": 1, "a": [1, 2]},
    "s": "  Hello, World! ",
    "words": ["banana", "Apple", "cherry", "apple"],
    "nums": [3, 1, 4, 1, 5, 9, 2, 6],
    "users": [{"name": "Ann", "age": 31, "tags": ["x"]}, {"name": "bob", "age": 25}, {"name": "Cid", "age": 31, "nick": None}],
    "d": {"z": 1, "a": 2, "M": 3},
    "f": 2.5,
    "i": 7,
    "empty": [],
    "text": "line one\nline two\n\nline four",
    "uni": "Ünïcödé straße ÀÉ",
}

CONSTRUCTS = [
    # output, literals, operators
    ("literals", "{{ 1 }} {{ -2 }} {{ 1.5 }} {{ 1e3 }} {{ 1_000 }} {{ 'a' \"b\" }} {{ true }} {{ True }} {{ none }} {{ None }} {{ [1, 'x', none] }} {{ {'k': [1, 2]} }} {{ (1,) }} {{ () }} {{ (1, 2) }}"),
    ("string_escapes", "{{ 'a\\nb\\tc\\\\d\\'e\\x41\\u00e9\\U0001F600\\q' }}|{{ \"\\\"\" }}"),
    ("float_repr", "{{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 1.5e-5 }} {{ 0.0001 }} {{ 100.0 }} {{ 2 ** -1 }} {{ 1 / 3 }} {{ -0.0 }}"),
    ("math", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** 3 ** 2 }} {{ 7 / 2 }} {{ 6 / 3 }} {{ 1 + 2 * 3 - 4 }} {{ 7.5 // 2 }} {{ 7.5 % 2 }} {{ true + 1 }}"),
    ("concat_tilde", "{{ 'a' ~ 1 ~ none ~ undefined_var ~ [1] }}"),
    ("string_mul_add", "{{ 'ab' * 3 }} {{ [1] * 2 }} {{ [1] + [2, 3] }} {{ 'x' + 'y' }}"),
    ("compare", "{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 != 2 }} {{ 2 >= 2 }} {{ 'b' > 'a' }} {{ true == 1 }}"),
    ("in_not_in", "{{ 'ell' in 'hello' }} {{ 2 in [1, 2] }} {{ 'a' in {'a': 1} }} {{ 3 not in [1, 2] }} {{ 'z' not in 'abc' }}"),
    ("logic", "{{ 1 and 2 }} {{ 0 and 2 }} {{ 0 or 'x' }} {{ '' or [] }} {{ not 0 }} {{ not [] }} {{ none or 'd' }}"),
    ("ternary", "{{ 'yes' if 1 else 'no' }} {{ 'yes' if 0 else 'no' }} [{{ 'yes' if 0 }}] {{ 'a' if false else 'b' if true else 'c' }}"),
    ("precedence_filters", "{{ -3|abs }} {{ 1 + [1,2]|length }} {{ 'ab'|upper ~ 'c' }} {{ not 1 is odd }} {{ 2 * 3|string }}"),
    ("attr_subscript", "{{ users[0].name }} {{ users[0]['age'] }} {{ users.1.name }} {{ users[-1].name }} {{ d.z }} {{ d['a'] }} [{{ users[10] }}] [{{ d.missing }}]"),
    ("slicing", "{{ nums[1:3] }} {{ nums[::-1] }} {{ nums[-2:] }} {{ nums[:2] }} {{ nums[::3] }} {{ 'hello'[1:-1] }} {{ 'héllo'[::-1] }} {{ uni[0:3] }} {{ nums[5:1] }} {{ nums[-100:2] }}"),
    ("dict_method_precedence", "{{ {'items': 5}.items() | list }} {{ {'get': 1}.get('get') }} {{ {'a': 1}.get('b', 'dflt') }} {{ {'a': 1}.get('b') }}"),
    # statements
    ("if_elif_else", "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}other{% endif %},{% endfor %}"),
    ("for_loop_vars", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}"),
    ("for_prev_next_cycle", "{% for x in [1, 2, 3] %}[{{ loop.previtem }}-{{ loop.nextitem }}-{{ loop.cycle('a', 'b') }}]{% endfor %}"),
    ("for_else", "{% for x in empty %}x{% else %}empty{% endfor %}{% for x in [1] %}{{ x }}{% else %}no{% endfor %}"),
    ("for_filter", "{% for x in nums if x > 2 %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% endfor %}"),
    ("for_unpack", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}"),
    ("for_dict_iter", "{% for k in d %}{{ k }}{% endfor %}"),
    ("break_continue", "{% for x in nums %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 9 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
    ("nested_loops", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }}|{% endfor %}"),
    ("loop_scope", "{% set x = 0 %}{% for i in [1, 2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}{{ x }}"),
    ("namespace", "{% set ns = namespace(count=0, items=[]) %}{% for i in nums %}{% set ns.count = ns.count + i %}{% endfor %}{{ ns.count }} {{ ns.items }}"),
    ("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = 1, 2 %}{{ c }}"),
    ("set_block", "{% set blk %}Hello {{ 'X' }}!{% endset %}[{{ blk }}]{% set up | upper %}shout{% endset %}{{ up }}"),
    ("macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', '?') }} {{ greet(name='Cy', punct='.') }}"),
    ("macro_caller", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ 1 + 1 }}{% endcall %}"),
    ("call_with_args", "{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(item) each([1, 2]) %}<{{ item }}>{% endcall %}"),
    ("filter_block", "{% filter upper %}hello {{ 'world' }}{% endfilter %}{% filter trim | title %}  two words  {% endfilter %}"),
    ("generation_block", "A{% generation %}gen {{ 1 }}{% endgeneration %}B"),
    ("with_block", "{% with a = 1, b = 'x' %}{{ a }}{{ b }}{% endwith %}[{{ a }}]"),
    ("raw_block", "{% raw %}{{ not rendered }} {% if %}{% endraw %}"),
    ("comments", "a{# comment #}b{#- trim -#}  c"),
    # whitespace control
    ("ws_trim_blocks", "{% if true %}\nline\n{% endif %}\nend"),
    ("ws_lstrip_blocks", "  {% if true %}\n    x\n  {% endif %}\ny"),
    ("ws_minus", "a  {%- if true -%}  b  {%- endif -%}  c {{- ' d ' -}} e"),
    ("ws_plus", "  {%+ if true %}\nx{% endif +%}\ny"),
    ("ws_var_no_lstrip", "  {{ 'v' }}\n  {# c #}\nz"),
    ("ws_trailing_newline", "text\n"),
    ("ws_crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc"),
    ("ws_comment_trim", "a\n{# c #}\nb"),
    ("ws_inline_block", "x {% if true %}y{% endif %} z\n   {% set q = 1 %}   w"),
    # tests
    ("tests_basic", "{{ x is defined }} {{ x is undefined }} {{ none is none }} {{ 's' is string }} {{ d is mapping }} {{ nums is iterable }} {{ 's' is sequence }} {{ 1 is number }} {{ 1 is integer }} {{ 1.0 is float }} {{ true is boolean }} {{ true is true }} {{ false is false }} {{ 1 is true }}"),
    ("tests_more", "{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 'ab' is lower }} {{ 'AB' is upper }} {{ 2 is in [1, 2] }} {{ 'a' is eq 'a' }} {{ 'a' is equalto 'b' }} {{ 1 is ne 2 }} {{ 1 is lt 2 }} {{ 1 is gt 2 }} {{ 2 is ge 2 }} {{ 2 is le 1 }} {{ range is callable }} {{ x is not defined }}"),
    ("tests_undefined_iterable", "{{ undefined_thing is iterable }} {{ undefined_thing is sequence }} {{ true is number }} {{ none is string }} {{ d is iterable }}"),
    # filters
    ("f_tojson", "{{ t | tojson }}|{{ t2 | tojson(indent=2) }}|{{ t | tojson(ensure_ascii=True) }}|{{ t2 | tojson(separators=(',', ':')) }}|{{ t2 | tojson(sort_keys=true) }}|{{ 'é\\n\"' | tojson }}|{{ [1.0, 1e20, -0.5] | tojson }}|{{ none | tojson }}"),
    ("f_tojson_indent_str", "{{ t2 | tojson(indent='\\t') }}|{{ t2 | tojson(indent=0) }}|{{ {} | tojson(indent=2) }}|{{ [] | tojson(indent=2) }}"),
    ("f_strings", "[{{ s | trim }}] [{{ 'xxhixx' | trim('x') }}] {{ s | upper }} {{ s | lower }} {{ 'hello wORLD-foo(bar' | title }} {{ 'hELLO world' | capitalize }} {{ uni | upper }} {{ uni | lower }}"),
    ("f_length_count", "{{ nums | length }} {{ 'héllo' | count }} {{ d | length }} {{ undefined_x | length }}"),
    ("f_first_last", "{{ nums | first }} {{ nums | last }} {{ 'abc' | first }} {{ 'abc' | last }} [{{ empty | first }}]"),
    ("f_join", "{{ nums | join(',') }} {{ words | join }} {{ users | join(', ', attribute='name') }} {{ [1, none, 'x'] | join('-') }}"),
    ("f_replace", "{{ 'aaa' | replace('a', 'b') }} {{ 'aaa' | replace('a', 'b', 2) }} {{ 'abc' | replace('', '-') }}"),
    ("f_default", "{{ undefined_x | default('dflt') }} {{ undefined_x | d('d2') }} {{ '' | default('e', true) }} {{ '' | default('e') }} {{ none | default('n') }} {{ none | default('n', boolean=true) }} [{{ undefined_x | default }}]"),
    ("f_items_list", "{{ d | items | list }} {{ 'ab' | list }} {{ d | list }} {{ undefined_x | items | list }}"),
    ("f_map", "{{ users | map(attribute='name') | list }} {{ words | map('upper') | join(',') }} {{ users | map(attribute='nick', default='?') | list }} {{ nums | map('string') | join }}"),
    ("f_select_reject", "{{ nums | select('odd') | list }} {{ nums | reject('odd') | list }} {{ [0, 1, '', 'a', none] | select | list }} {{ nums | select('gt', 4) | list }} {{ nums | select('in', [1, 2]) | list }}"),
    ("f_selectattr", "{{ users | selectattr('age', 'equalto', 31) | map(attribute='name') | list }} {{ users | rejectattr('nick', 'defined') | map(attribute='name') | list }} {{ users | selectattr('tags') | map(attribute='name') | list }} {{ users | selectattr('nick', 'none') | list | length }}"),
    ("f_indent", "{{ text | indent }}|{{ text | indent(2, true) }}|{{ text | indent(2, blank=true) }}|{{ text | indent('> ', first=true) }}|{{ 'x\\n' | indent(2) }}"),
    ("f_safe_string_escape", "{{ '<b>' | safe }} {{ 12 | string }} {{ '<a href=\"x\">&\\'' | escape }} {{ '<>' | e }}"),
    ("f_int_float", "{{ '42' | int }} {{ ' 7 ' | int }} {{ '3.9' | int }} {{ 'x' | int }} {{ 'x' | int(5) }} {{ 3.99 | int }} {{ '0x1A' | int(0, 16) }} {{ 'ff' | int(base=16) }} {{ '2.5' | float }} {{ 'abc' | float }} {{ 3 | float }} {{ true | int }}"),
    ("f_round", "{{ 2.5 | round }} {{ 3.5 | round }} {{ 2.675 | round(2) }} {{ 3 | round }} {{ 2.1 | round(0, 'ceil') }} {{ 2.9 | round(method='floor') }} {{ -0.5 | round }} {{ 1.25 | round(1) }}"),
    ("f_unique_dictsort", "{{ words | unique | list }} {{ words | unique(true) | list }} {{ d | dictsort }} {{ d | dictsort(true) }} {{ d | dictsort(by='value', reverse=true) }}"),
    ("f_batch", "{{ nums | batch(3) | list }} {{ nums | batch(3, 'x') | list }}"),
    ("f_abs_min_max_sum", "{{ -3 | abs }} {{ -2.5 | abs }} {{ nums | min }} {{ nums | max }} {{ words | min }} {{ words | max(case_sensitive=true) }} {{ nums | sum }} {{ users | sum(attribute='age') }} {{ [1.5, 2] | sum(start=10) }} {{ users | max(attribute='age') }}"),
    ("f_sort_reverse", "{{ nums | sort }} {{ nums | sort(reverse=true) }} {{ words | sort }} {{ words | sort(case_sensitive=true) }} {{ users | sort(attribute='age') | map(attribute='name') | list }} {{ 'abc' | reverse }} {{ nums | reverse | list }}"),
    ("f_wordcount_center_format", "{{ 'hello big   world_x 42' | wordcount }} [{{ 'ab' | center(7) }}] [{{ 'abc' | center(6) }}] {{ '%s-%d-%05.1f|%-4s|%r' | format('a', 3, 2.25, 'b', 'q') }} {{ '%(x)s!' | format(x=1) }}"),
    ("f_attr", "{{ users[0] | attr('name') }}|{{ 'abc' | attr('upper') is callable }}"),
    # python methods
    ("m_str", "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'xxhixx'.strip('x') }}|{{ s.startswith('  He') }}|{{ s.endswith(('!', '! ')) }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a b c'.rsplit(' ', 1) }}|{{ '  a  b  '.rsplit(None, 1) }}"),
    ("m_split_edge", "{{ '  a  b  '.split(None, 1) }}{{ ' x '.split(None, 0) }}{{ ' x y '.rsplit(None, 0) }}{{ ''.split() }}{{ 'a,b,c'.rsplit(',', 1) }}"),
    ("m_str2", "{{ 'Hello'.upper() }} {{ 'Hello'.lower() }} {{ 'hello world 1st'.title() }} {{ 'hELLO'.capitalize() }} {{ 'abcabc'.find('c') }} {{ 'abcabc'.rfind('c') }} {{ 'abc'.find('z') }} {{ 'abcabc'.count('ab') }} {{ '-'.join(['a', 'b']) }} {{ 'a\\nb\\r\\nc'.splitlines() }} {{ 'abc'.replace('b', 'B') }} {{ '42'.isdigit() }} {{ 'ab'.isalpha() }} {{ '7'.zfill(3) }} {{ 'ab'.center(6, '*') }} {{ 'ab'.ljust(4) }}|"),
    ("m_str_format", "{{ '{} and {}'.format('x', 1) }} {{ '{1}{0}'.format('a', 'b') }} {{ '{name}!'.format(name='N') }} {{ '{:>5}|{:<4}|{:^6}|{:05d}|{:.2f}'.format('r', 'l', 'c', 42, 3.14159) }} {{ '{{}}'.format() }}"),
    ("m_list_dict", "{{ nums.index(4) }} {{ nums.count(1) }} {{ d.keys() | list }} {{ d.values() | list }} {{ d.items() | list }} {{ d.get('z') }} {{ users[2].get('nick', 'x') }}"),
    ("m_partition_prefix", "{{ 'a=b=c'.partition('=') }} {{ 'a=b=c'.rpartition('=') }} {{ 'prefix_x'.removeprefix('prefix_') }}"),
    # globals
    ("g_range_dict", "{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(5, 0, -2) | list }} {{ dict(a=1, b='x') }} {% for i in range(2) %}{{ i }}{% endfor %}"),
    ("g_strftime", "{{ strftime_now('%Y-%m-%d') }} {{ strftime_now('%d %b %Y') }}"),
    ("g_raise", "{% if true %}{{ raise_exception('Custom failure: ' ~ 42) }}{% endif %}"),
    # undefined / none semantics (PITFALLS TPL-2)
    ("undef_print", "[{{ m.content }}] [{{ n.content }}] [{{ nosuch }}]"),
    ("undef_in", "{{ '</think>' in m.content }}"),
    ("undef_if", "{% if m.content %}T{% else %}F{% endif %}{% if n.content %}T{% else %}F{% endif %}"),
    ("undef_defined", "{{ m.content is defined }} {{ n.content is defined }} {{ n.content is none }} {{ m.content is none }}"),
    ("undef_length", "{{ m.content | length }}"),
    ("undef_iterate", "{% for x in nosuch %}x{% else %}empty{% endfor %}{% for x in m.content %}y{% endfor %}"),
    ("undef_eq", "{{ nosuch == nosuch2 }} {{ nosuch == none }} {{ nosuch != 1 }}"),
    ("undef_concat_error", "{{ 'x' + m.content }}"),
    ("undef_attr_error", "{{ m.content.split('a') }}"),
    ("undef_name_attr_error", "{{ nosuch.attr }}"),
    ("none_in_error", "{{ '</think>' in n.content }}"),
    ("none_concat_error", "{{ 'x' + n.content }}"),
    ("none_slice_error", "{{ n.content[:5] }}"),
    ("none_attr_ok", "[{{ n.content.foo }}]"),
    ("none_iter_error", "{% for x in n.content %}{% endfor %}"),
    ("type_error_str_int", "{{ 'a' + 1 }}"),
    ("zero_div", "{{ 1 / 0 }}"),
    ("sandbox_append", "{% set l = [1] %}{{ l.append(2) }}"),
    ("sandbox_update", "{% set q = {} %}{{ q.update({'a': 1}) }}"),
    ("ns_assign_error", "{% set x = 5 %}{% set x.attr = 1 %}"),
    ("undefined_call_error", "{{ nosuch() }}"),
    ("compare_error", "{{ 1 < 'a' }}"),
    # syntax errors (error_type Syntax; the C++ side must report line and column)
    ("syntax_unclosed_if", "{% if true %}\nabc"),
    ("syntax_unknown_tag", "line1\n  {% frobnicate %}"),
    ("syntax_bad_expr", "{{ 1 + }}"),
    ("syntax_unknown_filter", "{{ 1 | nosuchfilter }}"),
    ("syntax_unknown_test", "{{ 1 is nosuchtest }}"),
    ("syntax_unclosed_var", "{{ 1 "),
    ("syntax_endfor_mismatch", "{% for x in y %}{% endif %}"),
    ("syntax_missing_comment_end", "{# never closed"),
]


def construct_goldens():
    cases = []
    for name, src in CONSTRUCTS:
        case = {"name": name, "template": src}
        case.update(render_case(src, CTX))
        cases.append(case)
    doc = {"source": "tests/oracles/tpl_goldens.py CONSTRUCTS", "strftime_now_time": FIXED_TIME,
           "jinja2_version": jinja2.__version__, "context": CTX, "cases": cases}
    out = os.path.join(OUT, "constructs.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    return [f"{out}: {len(cases)} cases ({sum(1 for c in cases if 'error' in c)} expected errors)"]


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    for line in construct_goldens() + model_goldens():
        print(line)
    sys.exit(0)
