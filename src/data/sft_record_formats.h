// One JSON record -> one Conversation, per format (internal to sft_records.cpp).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "lft/data/sft_records.h"

namespace lft::data::detail {

// Each returns "" and fills `out` for a usable record, else the reason the record is bad.
std::string parse_alpaca(const nlohmann::json& record, const SftColumns& columns,
                         Conversation& out);
std::string parse_sharegpt(const nlohmann::json& record, const SftColumns& columns,
                           Conversation& out);
std::string parse_messages(const nlohmann::json& record, Conversation& out);
// LlamaFactory v1's pair records: {"chosen": [messages], "rejected": [messages]}, two whole
// conversations (v1 messages) that differ only in their last, assistant, message.
std::string parse_pair(const nlohmann::json& record, Conversation& out);
std::string parse_text(const nlohmann::json& record, const SftColumns& c, Conversation& out);

// The format that `record` looks like ("alpaca", "sharegpt", "messages", "text"), or "".
std::string detect_format(const nlohmann::json& record, const SftColumns& columns);

}  // namespace lft::data::detail
