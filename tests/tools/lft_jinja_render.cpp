// lft_jinja_render: renders chat templates for tools/check-jinja.py.
// stdin: one JSON object per line, {"template": "...", "context": {...}, "name": "..."(optional)},
// or {"template": "...", "chat": {"messages": [...], "tools": [...]|null, "documents": ...,
// "add_generation_prompt": bool, "special_tokens": {...}, "kwargs": {...}}}, which builds the
// context as apply_chat_template does (make_chat_context).
// stdout: one JSON line per input, {"text": "...", "spans": [[begin, end], ...]} with the
// {% generation %} spans in code points (as transformers reports them), or
// {"error": "...", "kind": "UndefinedError" | ..., "message": "..."}.
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "lft/data/jinja.h"
#include "lft/data/jinja_chat.h"


int main() {
  using lft::data::jinja::Template;
  std::map<std::string, Template> cache;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    nlohmann::json reply;
    try {
      const auto request = nlohmann::ordered_json::parse(line);
      const std::string text = request.at("template").get<std::string>();
      const std::string name = request.value("name", std::string("<template>"));
      auto it = cache.find(text);
      if (it == cache.end()) it = cache.emplace(text, Template::parse(text, name)).first;
      nlohmann::ordered_json context;
      if (request.contains("chat")) {
        const auto& chat = request.at("chat");
        lft::data::jinja::ChatInput input;
        input.messages = chat.at("messages");
        input.tools = chat.value("tools", nlohmann::ordered_json());
        input.documents = chat.value("documents", nlohmann::ordered_json());
        input.add_generation_prompt = chat.value("add_generation_prompt", false);
        input.special_tokens = chat.value("special_tokens", nlohmann::ordered_json::object());
        input.extra = chat.value("kwargs", nlohmann::ordered_json::object());
        context = lft::data::jinja::make_chat_context(input);
      } else {
        context = request.at("context");
      }
      std::vector<lft::data::jinja::Span> spans;
      const std::string out =
          it->second.render(context, &spans, lft::data::jinja::SpanUnit::kCodePoints);
      reply["text"] = out;
      reply["spans"] = nlohmann::json::array();
      for (const auto& s : spans) reply["spans"].push_back({s.first, s.second});
    } catch (const lft::data::jinja::Error& e) {
      reply = {{"error", e.what()}, {"kind", lft::data::jinja::error_kind_name(e.kind())}, {"message", e.message()}};
    } catch (const std::exception& e) {
      reply = {{"error", e.what()}, {"kind", "InputError"}, {"message", e.what()}};
    }
    std::cout << reply.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n"
              << std::flush;
  }
  return 0;
}
