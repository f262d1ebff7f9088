// A model's own chat template, as LlamaFactory main's v1 takes it when a file names no `template`
// (docs/data.md, "The model's chat template"): custom_chat_template when given, else the Jinja
// template of the model folder (chat_template.jinja, or tokenizer_config.json's chat_template: a
// string, or the entry named "default" of a list), else v1's ChatML fallback. With it the
// tokenizer's special tokens, which transformers hands every template (bos_token, eos_token, ...).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace lft::data {

struct ModelChatTemplate {
  std::string text;    // the Jinja source
  std::string source;  // where it came from, for the log and errors
  nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object();
};

// v1's fallback for a model without a template: <|im_start|>{role}\n{content}<|im_end|>\n per
// message, and <|im_start|>assistant\n as the generation prompt.
const std::string& chatml_fallback_template();

// Throws lft::UsageError for a folder whose tokenizer_config.json cannot be read or whose
// chat_template is neither a string nor a list of {name, template}.
ModelChatTemplate read_model_chat_template(const std::string& model_folder, const std::string& custom_template);

}  // namespace lft::data
