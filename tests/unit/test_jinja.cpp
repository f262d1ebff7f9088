// Unit tests of the Jinja subset. Every expected string here is what transformers' jinja2
// environment renders for the same template (checked with tools/check-jinja.py's snippets).
#include <gtest/gtest.h>

#include <string>

#include "lft/data/jinja.h"
#include "lft/data/jinja_chat.h"

namespace lft::data::jinja {
namespace {

using json = nlohmann::ordered_json;

std::string render(const std::string& text, const json& context = json::object()) {
  return Template::parse(text, "t.jinja").render(context);
}

// The error a template raises when parsed or rendered (fails the test when none is raised).
Error error_of(const std::string& text, const json& context = json::object()) {
  try {
    render(text, context);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error for: " << text;
  return Error(ErrorKind::kRuntime, "none");
}

json chat() {
  return json::parse(R"({"messages": [{"role": "system", "content": "  Be brief.  "},
                                      {"role": "user", "content": "Hi"},
                                      {"role": "assistant", "content": "Hello!"}]})");
}

TEST(JinjaWhitespace, TrimBlocksDropsOneNewlineAfterBlockTagsOnly) {
  EXPECT_EQ(render("{% if true %}\nA{% endif %}\n{{ 'B' }}\nC"), "AB\nC");
  EXPECT_EQ(render("{# note #}\nX"), "X");
  EXPECT_EQ(render("{% if true %}\n\nA{% endif %}"), "\nA");
}

TEST(JinjaWhitespace, LstripBlocksRemovesIndentBeforeBlockTagsNotVariables) {
  EXPECT_EQ(render("  {% if true %}x{% endif %}\n    {{ 'v' }}"), "x    v");
  EXPECT_EQ(render("a\n\t {% if true %}b{% endif %}"), "a\nb");
  EXPECT_EQ(render("a {% if true %}b{% endif %}"), "a b");  // not at a line start
  EXPECT_EQ(render("  {%+ if true %}b{% endif %}"), "  b");
}

TEST(JinjaWhitespace, MinusStripsAllWhitespaceIncludingNewlines) {
  EXPECT_EQ(render("a  \n  {%- if true -%}  \n\n b  {%- endif %}"), "ab");
  EXPECT_EQ(render("x\n  {{- 'y' -}}\n  z"), "xyz");
  EXPECT_EQ(render("a {#- c -#} b"), "ab");
}

TEST(JinjaWhitespace, OneTrailingNewlineOfTheTemplateIsDropped) {
  EXPECT_EQ(render("hi\n"), "hi");
  EXPECT_EQ(render("hi\n\n"), "hi\n");
  EXPECT_EQ(render("a\r\nb"), "a\nb");
}

TEST(JinjaWhitespace, RawBlocksAreNotInterpreted) {
  EXPECT_EQ(render("{% raw %}{{ x }}{% if %}{% endraw %}"), "{{ x }}{% if %}");
}

TEST(JinjaLoops, LoopVariables) {
  EXPECT_EQ(render("{% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
                   "{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}"
                   "{{ loop.cycle('a', 'b') }};{% endfor %}",
                   chat()),
            "1032TrueFalse3a;2121FalseFalse3b;3210FalseTrue3a;");
}

TEST(JinjaLoops, FilterElseBreakContinueAndUnpacking) {
  EXPECT_EQ(
      render("{% for m in messages if m.role != 'system' %}{{ loop.index }}{{ m.role }}"
             "{% if loop.previtem is defined %}<{{ loop.previtem.role }}{% endif %} {% endfor %}",
             chat()),
      "1user 2assistant<user ");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for i in range(9) %}{% if i == 1 %}{% continue %}{% endif %}"
                   "{% if i == 4 %}{% break %}{% endif %}{{ i }}{% endfor %}"),
            "023");
  EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }},{% endfor %}"),
            "a=1,b=2,");
}

TEST(JinjaLoops, EachIterationHasItsOwnScope) {
  EXPECT_EQ(
      render(
          "{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + 10 %}[{{ x }}]{% endfor %}{{ x }}"),
      "[11][11]1");
}

TEST(JinjaNamespace, AttributesSurviveLoops) {
  EXPECT_EQ(
      render("{% set ns = namespace(n=0, s='') %}{% for i in range(4) %}{% set ns.n = ns.n + i %}"
             "{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }}"),
      "6 0123");
}

TEST(JinjaNamespace, UnderscoreAttributesAndNonNamespacesAreRefused) {
  EXPECT_EQ(error_of("{% set ns = namespace() %}{% set ns._x = 1 %}").kind(), ErrorKind::kSecurity);
  const Error e = error_of("{% set x = 1 %}\n{% set x.attr = 2 %}");
  EXPECT_EQ(e.kind(), ErrorKind::kRuntime);
  EXPECT_EQ(e.line(), 2);
}

TEST(JinjaMacros, DefaultsKeywordsCallerAndRecursion) {
  EXPECT_EQ(
      render("{% macro g(name, greeting='Hello', p='!') %}{{ greeting }}, {{ name }}{{ p }}"
             "{% endmacro %}{{ g('A') }} {{ g('B', 'Hi') }} {{ g('C', p='?') }} {{ g(name='D') }}"),
      "Hello, A! Hi, B! Hello, C? Hello, D!");
  EXPECT_EQ(render("{% macro outer(x) %}[{{ caller(x) }}]{% endmacro %}"
                   "{% call(v) outer(5) %}got {{ v }}{% endcall %}"),
            "[got 5]");
  EXPECT_EQ(render("{% macro rec(n) %}{% if n > 0 %}{{ n }}{{ rec(n - 1) }}{% endif %}{% endmacro "
                   "%}{{ rec(3) }}"),
            "321");
  EXPECT_EQ(error_of("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}").kind(), ErrorKind::kType);
}

TEST(JinjaMacros, SeeTopLevelVariablesAtCallTime) {
  EXPECT_EQ(render("{% set x = 5 %}{% macro m() %}{{ x }}{% endmacro %}{% set x = 6 %}{{ m() }}"),
            "6");
}

TEST(JinjaPrinting, ValuesPrintAsPythonStrOfThem) {
  EXPECT_EQ(
      render(
          "{{ none }} {{ true }} {{ 1.0 }} {{ 0.1 }} {{ 1e-5 }} {{ 1.5e16 }} {{ 3/2 }} {{ 2/2 }}"),
      "None True 1.0 0.1 1e-05 1.5e+16 1.5 1.0");
  EXPECT_EQ(render("{{ [1, 'a', \"it's\", none, true] }} {{ {'a': 1, 'b': [1.5]} }} {{ (1,) }}"),
            "[1, 'a', \"it's\", None, True] {'a': 1, 'b': [1.5]} (1,)");
  EXPECT_EQ(render("{{ ['a\\nb', 'é', '\\u200b'] }}"), "['a\\nb', 'é', '\\u200b']");
  EXPECT_EQ(render("[{{ nothing }}]"), "[]");
}

TEST(JinjaArithmetic, FollowsPython) {
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** -1 }} {{ 7.5 // 2 "
                   "}} {{ 'ab' * 2 }}"),
            "3 -4 2 -2 0.5 3.0 abab");
  EXPECT_EQ(error_of("{{ 'a' + 1 }}").message(), "can only concatenate str (not \"int\") to str");
  EXPECT_EQ(error_of("{{ 1 / 0 }}").kind(), ErrorKind::kZeroDivision);
}

TEST(JinjaExpressions, SlicesMembershipTestsAndConditionals) {
  EXPECT_EQ(render("{{ 'abcdef'[1:] }} {{ 'abcdef'[:-1] }} {{ 'abc'[::-1] }} {{ '日本語'[1:] }} {{ "
                   "[1, 2, 3][-2:] }}"),
            "bcdef abcde cba 本語 [2, 3]");
  EXPECT_EQ(render("{{ 'a' in 'abc' }} {{ 'x' not in ['a'] }} {{ 1 < 2 < 3 }} {{ 1 == 1.0 }}"),
            "True True True True");
  EXPECT_EQ(render("{{ 1 is number }} {{ true is integer }} {{ none is none }} {{ 3 is odd }} "
                   "{{ 6 is divisibleby 3 }} {{ x is not defined }}"),
            "True False True True True True");
  EXPECT_EQ(render("{{ 'a' if false else 'b' }}[{{ 'c' if false }}]{{ none or 'd' }}"), "b[]d");
}

TEST(JinjaFilters, TextFilters) {
  EXPECT_EQ(render("{{ '  x  ' | trim }}|{{ 'xxhix' | trim('x') }}|{{ \"don't stop-me\" | title }}|"
                   "{{ 'hELLO' | capitalize }}|{{ 'aXb' | replace('X', '_') }}|{{ 'a\\nb' | "
                   "indent(2, true) }}"),
            "x|hi|Don't Stop-Me|Hello|a_b|  a\n  b");
  EXPECT_EQ(render("{{ \"it's\".title() }} {{ 'a,b'.split(',') }} {{ '  a b '.split(none, 1) }}"),
            "It'S ['a', 'b'] ['a', 'b ']");
}

TEST(JinjaFilters, SequenceFilters) {
  EXPECT_EQ(render("{{ messages | map(attribute='role') | join(',') }} "
                   "{{ messages | selectattr('role', 'equalto', 'user') | list | length }} "
                   "{{ [3, 1, 2] | sort }} {{ ['b', 'A'] | sort }} {{ [1, 2, 2] | unique | list }} "
                   "{{ {'b': 1, 'a': 2} | dictsort }} {{ [1, 2, 3] | select('odd') | list }}",
                   chat()),
            "system,user,assistant 1 [1, 2, 3] ['A', 'b'] [1, 2] [('a', 2), ('b', 1)] [1, 3]");
  EXPECT_EQ(render("{{ x | default('d') }} {{ '' | default('e', true) }} {{ [] | first }}|"),
            "d e |");
}

TEST(JinjaFilters, TojsonIsTransformersVersion) {
  EXPECT_EQ(render("{{ {'a': [1, 2.0, none, true, 'é\"\\n']} | tojson }}"),
            "{\"a\": [1, 2.0, null, true, \"é\\\"\\n\"]}");
  EXPECT_EQ(render("{{ {'a': [1]} | tojson(indent=2) }}"), "{\n  \"a\": [\n    1\n  ]\n}");
  EXPECT_EQ(render("{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}"), "{\"a\": 2, \"b\": 1}");
  EXPECT_EQ(render("{{ [1, 2] | tojson(separators=(',', ':')) }}"), "[1,2]");
  // transformers' first positional argument is ensure_ascii, not indent.
  EXPECT_EQ(render("{{ 'é' | tojson(4) }}"), "\"\\u00e9\"");
}

TEST(JinjaContext, JsonKeyOrderIsKept) {
  const json ctx = json::parse(R"({"d": {"z": 1, "a": 2, "m": [1.5, 1e-7]}})");
  EXPECT_EQ(render("{{ d | tojson }} {{ d }}", ctx),
            "{\"z\": 1, \"a\": 2, \"m\": [1.5, 1e-07]} {'z': 1, 'a': 2, 'm': [1.5, 1e-07]}");
}

TEST(JinjaSandbox, MutatingMethodsAreRefused) {
  const Error e = error_of("{{ messages.append(1) }}", chat());
  EXPECT_EQ(e.kind(), ErrorKind::kSecurity);
  EXPECT_EQ(e.message(), "access to attribute 'append' of 'list' object is unsafe.");
  EXPECT_EQ(render("{{ messages.append is defined }}", chat()), "False");
}

TEST(JinjaErrors, SyntaxErrorsNameTemplateLineAndExpectation) {
  try {
    Template::parse("line 1\n{% if true %}\n{{ x + }}\n{% endif %}", "my.jinja");
    FAIL() << "parsed";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kSyntax);
    EXPECT_EQ(e.line(), 3);
    EXPECT_EQ(std::string(e.what()),
              "my.jinja:3: TemplateSyntaxError: unexpected 'end of print statement'");
  }
  EXPECT_EQ(
      error_of("{% for x in y %}\nno end").message(),
      "Unexpected end of template. Jinja was looking for the following tags: 'endfor' or 'else'. "
      "The innermost block that needs to be closed is 'for'.");
  EXPECT_EQ(error_of("{{ x | nosuchfilter }}").message(), "No filter named 'nosuchfilter'.");
  EXPECT_EQ(error_of("{% for x in y %}{% endif %}").message(),
            "Encountered unknown tag 'endif'. Jinja was looking for the following tags: 'endfor' or "
            "'else'. The innermost block that needs to be closed is 'for'.");
  EXPECT_EQ(error_of("{{ (1 }}").message(), "unexpected '}', expected ')'");
  EXPECT_EQ(error_of("{% include 'x' %}").kind(), ErrorKind::kSyntax);
}

TEST(JinjaErrors, RuntimeErrorsCarryTheLine) {
  const Error e = error_of("a\nb\n{{ missing.attr }}");
  EXPECT_EQ(e.kind(), ErrorKind::kUndefined);
  EXPECT_EQ(e.line(), 3);
  EXPECT_EQ(e.message(), "'missing' is undefined");
  EXPECT_EQ(error_of("{{ messages[0].nope.x }}", chat()).message(),
            "'dict object' has no attribute 'nope'");
}

TEST(JinjaErrors, RaiseExceptionMessageIsReportedAsIs) {
  const Error e = error_of("{{ raise_exception('Roles must alternate!') }}");
  EXPECT_EQ(e.kind(), ErrorKind::kRaised);
  EXPECT_EQ(std::string(e.what()), "Roles must alternate!");
}

TEST(JinjaGeneration, SpansInBytesAndCodePoints) {
  const Template t = Template::parse(
      "{% for m in messages %}<{{ m.role }}>{% if m.role == 'assistant' %}{% generation %}"
      "{{ m.content }}é{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}",
      "g.jinja");
  json ctx = chat();
  ctx["messages"][1]["content"] = "日本";
  std::vector<Span> bytes, cps;
  const std::string out = t.render(ctx, &bytes);
  t.render(ctx, &cps, SpanUnit::kCodePoints);
  ASSERT_EQ(bytes.size(), 1u);
  EXPECT_EQ(out.substr(bytes[0].first, bytes[0].second - bytes[0].first), "Hello!é");
  EXPECT_EQ(cps[0], Span(40, 47));    // what transformers reports
  EXPECT_EQ(bytes[0], Span(44, 52));  // "日本" is 6 bytes
}

TEST(JinjaChatContext, BuiltAsApplyChatTemplateBuildsIt) {
  ChatInput input;
  input.messages = json::parse(R"([{"role": "user", "content": "q"},
      {"role": "assistant", "content": null, "reasoning": "r", "tool_calls": [{"id": "1"}]}])");
  input.special_tokens = json::parse(R"({"bos_token": "<s>", "eos_token": "</s>"})");
  input.extra = json::parse(R"({"eos_token": "<|end|>", "enable_thinking": false})");
  const json context = make_chat_context(input);
  EXPECT_EQ(
      context.dump(),
      R"({"messages":[{"role":"user","content":"q"},{"thinking":"r","role":"assistant",)"
      R"("reasoning":"r","tool_calls":[{"id":"1"}],"reasoning_content":"r"}],"tools":null,)"
      R"("documents":null,"add_generation_prompt":false,"bos_token":"<s>","eos_token":"<|end|>",)"
      R"("enable_thinking":false})");
  input.messages = json::array();
  EXPECT_THROW(make_chat_context(input), Error);
}

TEST(JinjaArithmetic, IntegerOverflowIsRefusedNotWrapped) {
  EXPECT_EQ(render("{{ 2 ** 62 }}"), "4611686018427387904");
  EXPECT_EQ(error_of("{{ 2 ** 64 }}").kind(), ErrorKind::kOverflow);
}

}  // namespace
}  // namespace lft::data::jinja
