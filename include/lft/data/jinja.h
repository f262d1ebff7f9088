// A Jinja2 subset that renders Hugging Face chat templates byte for byte as transformers'
// apply_chat_template does: jinja2's ImmutableSandboxedEnvironment with trim_blocks and
// lstrip_blocks, the loopcontrols extension, transformers' {% generation %} block, its tojson
// filter (ensure_ascii=False) and its raise_exception / strftime_now / namespace / dict globals.
//
// The subset is what real chat templates use (NOTES.md lists it). Anything outside it fails when
// the template is parsed (unknown tag, filter or test) or when the construct runs, with an Error
// that names the template and line; it never renders something jinja2 would render differently.
//
// The context is JSON: pass what apply_chat_template passes (messages, tools, documents,
// add_generation_prompt, the special tokens, extra keyword arguments such as enable_thinking),
// with null for an absent tools/documents (transformers passes None, which templates test with
// `is none`, not `is defined`). Object key order is kept, as Python dicts keep it.
#pragma once

#include <cstddef>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace lft::data::jinja {

// Why a template failed; the names are jinja2's exception classes.
enum class ErrorKind {
  kSyntax,        // TemplateSyntaxError / TemplateAssertionError: found when parsing
  kUndefined,     // UndefinedError: an undefined value was used
  kType,          // TypeError raised by an operation, filter or method
  kValue,         // ValueError (unpacking, str.index, ...)
  kZeroDivision,  // ZeroDivisionError
  kOverflow,      // OverflowError (the sandbox's range limit)
  kSecurity,      // SecurityError: the immutable sandbox forbids it (list.append, ...)
  kRaised,        // raise_exception(message) called by the template
  kRuntime,       // TemplateRuntimeError and other failures while rendering
};

// The jinja2 / Python class name of a kind ("TemplateSyntaxError", "TypeError", ...).
const char* error_kind_name(ErrorKind kind);

// Every failure of parse() or render(). what() is "<name>:<line>: <Kind>: <message>", except for
// kRaised, where it is the template's message as-is (as transformers reports it).
class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string message, std::string template_name = {}, int line = 0);
  ErrorKind kind() const { return kind_; }
  const std::string& message() const { return message_; }  // without name and line
  const std::string& template_name() const { return template_name_; }
  int line() const { return line_; }  // 1-based; 0 when unknown

 private:
  ErrorKind kind_;
  std::string message_;
  std::string template_name_;
  int line_;
};

// [begin, end) offsets into the rendered string.
using Span = std::pair<std::size_t, std::size_t>;
// Bytes suit C++ consumers (tokenizer offsets); code points are what transformers reports.
enum class SpanUnit { kBytes, kCodePoints };

struct Program;  // the parsed template (jinja_ast.h)

class Template {
 public:
  // Parses `text`; `name` appears in error messages. Throws Error (kSyntax) naming the line and
  // what was expected.
  static Template parse(const std::string& text, const std::string& name = "<template>");

  // Renders with `context` as the template's variables. With `generation_spans`, appends the span
  // of the text each {% generation %} block produced, measured as transformers measures it: begin
  // is the length of the template's top-level output so far, end = begin + the block's length (so
  // a block inside a macro or set block is offset by what the enclosing capture has not emitted
  // yet, as in transformers). Throws Error.
  std::string render(const nlohmann::ordered_json& context,
                     std::vector<Span>* generation_spans = nullptr,
                     SpanUnit unit = SpanUnit::kBytes) const;

  const std::string& name() const;

 private:
  explicit Template(std::shared_ptr<const Program> program) : program_(std::move(program)) {}
  std::shared_ptr<const Program> program_;
};

// Python's json.dumps(value) with its defaults (ensure_ascii, ", " and ": " separators): the text
// LlamaFactory main's converters keep of a record's tools, on which its special-token escaping works.
std::string python_json_dumps(const nlohmann::ordered_json& value);

}  // namespace lft::data::jinja
