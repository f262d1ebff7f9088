#include "lft/train/training_log.h"

#include <nlohmann/json.hpp>

#include "lft/ckpt/checkpoint_files.h"
#include "lft/runtime/error.h"

namespace lft::train {

TrainingLog::TrainingLog(const std::string& output_dir, std::int64_t resumed_step)
    : path_(output_dir + "/trainer_log.jsonl") {
  ckpt::make_directories(output_dir);
  std::string kept;
  if (resumed_step > 0) {
    std::ifstream old(path_);
    for (std::string line; std::getline(old, line);) {
      // A record that is not a JSON object with a step (a line cut short by a crash) is dropped.
      const auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (record.is_object() && record.contains("step") && record["step"].is_number_integer() &&
          record["step"].get<std::int64_t>() <= resumed_step)
        kept += line + "\n";
    }
  }
  out_.open(path_, std::ios::trunc);
  out_ << kept << std::flush;
  if (!out_) throw UsageError("cannot write " + path_ + ": check output_dir and its permissions");
}

void TrainingLog::write(const LogRecord& record) { out_ << to_json_line(record) << "\n" << std::flush; }

void TrainingLog::write_eval(std::int64_t step, std::int64_t total_steps, double eval_loss) {
  out_ << "{\"current_steps\": " << step << ", \"total_steps\": " << total_steps
       << ", \"eval_loss\": " << eval_loss << ", \"step\": " << step << "}\n" << std::flush;
}

}  // namespace lft::train
