#include "lft/data/model_chat_template.h"

#include <fstream>
#include <sstream>

#include "lft/runtime/error.h"

namespace lft::data {
namespace {

bool read_file(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  out = s.str();
  return true;
}

// A special token as tokenizer_config.json writes it: "<s>" or {"content": "<s>", ...}.
const nlohmann::ordered_json* token_text(const nlohmann::ordered_json& v) {
  if (v.is_string()) return &v;
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return &v["content"];
  return nullptr;
}

}  // namespace

const std::string& chatml_fallback_template() {
  static const std::string text =
      "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
      "'\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  return text;
}

ModelChatTemplate read_model_chat_template(const std::string& model_folder, const std::string& custom_template) {
  ModelChatTemplate out;
  const std::string config_path = model_folder + "/tokenizer_config.json";
  std::string text;
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  if (!model_folder.empty() && read_file(config_path, text)) {
    try {
      config = nlohmann::ordered_json::parse(text);
    } catch (const std::exception& e) {
      throw UsageError(config_path + ": not JSON (" + e.what() + ")");
    }
  }
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"})
    if (config.contains(key))
      if (const auto* t = token_text(config[key])) out.special_tokens[key] = *t;
  if (!custom_template.empty()) {
    out.text = custom_template;
    out.source = "custom_chat_template";
    return out;
  }
  if (!model_folder.empty() && read_file(model_folder + "/chat_template.jinja", out.text)) {
    out.source = model_folder + "/chat_template.jinja";
    return out;
  }
  if (config.contains("chat_template")) {
    const auto& t = config["chat_template"];
    if (t.is_string()) {
      out.text = t.get<std::string>();
    } else if (t.is_array()) {
      for (const auto& entry : t)
        if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
            entry["template"].is_string())
          out.text = entry["template"].get<std::string>();
      if (out.text.empty())
        throw UsageError(config_path + ": chat_template is a list without an entry named \"default\"; lftrain renders "
                         "the default one\n  hint: give the template to use as custom_chat_template");
    } else if (!t.is_null()) {
      throw UsageError(config_path + ": chat_template is neither a string nor a list of {name, template}");
    }
    if (!out.text.empty()) {
      out.source = config_path + " (chat_template)";
      return out;
    }
  }
  out.text = chatml_fallback_template();
  out.source = "LlamaFactory v1's ChatML fallback (the model folder has no chat template)";
  return out;
}

}  // namespace lft::data
