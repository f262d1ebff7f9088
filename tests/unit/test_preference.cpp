// Preference training: the pair losses against their plain formulas (one pair, doubles written
// out), the pair data (ranking records, LlamaFactory's pair truncation, the pairs kept whole and
// in order), the stage dpo config rules, and the reward model's (stage rm) loss, weights, head and
// rules.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <string>
#include <vector>

#include "lft/config/config.h"
#include "lft/data/sft_dataset.h"
#include "lft/data/sft_records.h"
#include "lft/data/sft_sequences.h"
#include "lft/model/causal_lm.h"
#include "lft/model/families.h"
#include "lft/model/finetuning.h"
#include "lft/runtime/error.h"
#include "lft/train/preference.h"
#include "test_util.h"

namespace lft {
namespace {

double log_sigmoid(double x) { return -std::log1p(std::exp(-x)); }

// One pair: policy (chosen, rejected) summed log-probabilities, lengths, reference.
const double kC = -12.0, kR = -15.0, kLc = 4, kLr = 6, kRc = -13.0, kRr = -14.0;

train::PairTerms one_pair(const train::PreferenceOptions& o) {
  const at::Tensor logps = at::tensor({kC, kR}, at::kDouble);
  const at::Tensor lengths = at::tensor({kLc, kLr}, at::kDouble);
  const at::Tensor ref = at::tensor({kRc, kRr}, at::kDouble);
  return train::pair_terms(o, logps, lengths, o.uses_reference() ? ref : at::Tensor());
}

double loss_of(const train::PreferenceOptions& o) { return one_pair(o).losses.item<double>(); }

TEST(PreferenceLoss, SigmoidWithLabelSmoothing) {
  train::PreferenceOptions o;
  o.beta = 0.2;
  o.label_smoothing = 0.1;
  const double logits = (kC - kR) - (kRc - kRr);
  EXPECT_NEAR(loss_of(o), -log_sigmoid(0.2 * logits) * 0.9 - log_sigmoid(-0.2 * logits) * 0.1, 1e-12);
  const train::PairTerms t = one_pair(o);
  EXPECT_NEAR(t.chosen_rewards.item<double>(), 0.2 * (kC - kRc), 1e-12);
  EXPECT_NEAR(t.rejected_rewards.item<double>(), 0.2 * (kR - kRr), 1e-12);
  EXPECT_NEAR(t.chosen_logps.item<double>(), kC, 1e-12);  // summed, not averaged
}

TEST(PreferenceLoss, HingeIsTheRectifiedMargin) {
  train::PreferenceOptions o;
  o.loss = "hinge";
  o.beta = 0.1;
  const double logits = (kC - kR) - (kRc - kRr);  // 2
  EXPECT_NEAR(loss_of(o), std::max(0.0, 1.0 - 0.1 * logits), 1e-12);
  o.beta = 1.0;  // margin past 1: no loss
  EXPECT_NEAR(loss_of(o), 0.0, 1e-12);
}

TEST(PreferenceLoss, IpoOnPerTokenMeans) {
  train::PreferenceOptions o;
  o.loss = "ipo";
  o.beta = 0.5;
  const double logits = (kC / kLc - kR / kLr) - (kRc / kLc - kRr / kLr);
  EXPECT_NEAR(loss_of(o), std::pow(logits - 1.0 / (2 * 0.5), 2), 1e-12);
  EXPECT_NEAR(one_pair(o).chosen_logps.item<double>(), kC / kLc, 1e-12);
}

TEST(PreferenceLoss, OrpoIsNllPlusOddsRatio) {
  train::PreferenceOptions o;
  o.loss = "orpo";
  o.beta = 0.1;
  const double c = kC / kLc, r = kR / kLr;
  const double log_odds = (c - r) - (std::log1p(-std::exp(c)) - std::log1p(-std::exp(r)));
  EXPECT_NEAR(loss_of(o), -c - 0.1 * log_sigmoid(log_odds), 1e-12);
  EXPECT_NEAR(one_pair(o).chosen_rewards.item<double>(), 0.1 * c, 1e-12);  // reference-free rewards
}

TEST(PreferenceLoss, SimpoHasATargetMargin) {
  train::PreferenceOptions o;
  o.loss = "simpo";
  o.beta = 2.0;
  o.simpo_gamma = 0.5;
  const double c = kC / kLc, r = kR / kLr;
  EXPECT_NEAR(loss_of(o), -log_sigmoid(2.0 * ((c - r) - 0.5 / 2.0)), 1e-12);
}

TEST(PreferenceLoss, FtxAddsTheChosenAnswersMeanNll) {
  train::PreferenceOptions o;
  const double plain = loss_of(o);
  o.ftx = 0.5;
  EXPECT_NEAR(loss_of(o), plain + 0.5 * (-kC / kLc), 1e-12);
}

// LD-DPO: in each pair, the trained tokens beyond the shorter answer's count weigh ld_alpha (the
// prompt and the shorter answer untouched), as LlamaFactory's get_batch_logps.
TEST(PreferenceLoss, LengthDesensitizedWeightsScaleTheLongerAnswersTail) {
  const at::Tensor w = at::tensor({0.f, 0.f, 1.f, 1.f, 1.f, 1.f,    // chosen: 4 trained tokens
                                   0.f, 1.f, 1.f, 0.f, 0.f, 0.f,    // rejected: 2
                                   0.f, 1.f, 1.f, 1.f, 0.f, 0.f,    // a second pair: 3
                                   0.f, 0.f, 0.f, 2.f, 2.f, 2.f})   // and 3 (loss_weight 2)
                           .view({4, 6});
  const at::Tensor want = at::tensor({0.f, 0.f, 1.f, 1.f, .5f, .5f, 0.f, 1.f, 1.f, 0.f, 0.f, 0.f,
                                      0.f, 1.f, 1.f, 1.f, 0.f, 0.f, 0.f, 0.f, 0.f, 2.f, 2.f, 2.f})
                              .view({4, 6});
  EXPECT_TRUE(at::equal(train::length_desensitized_weights(w, 0.5), want));
}

TEST(PreferenceLoss, ObjectiveSumsPairLossesFromTokenLosses) {
  train::PreferenceOptions o;
  engine::MicroBatch b;
  // Two sequences (one pair) of 3 targets; the first target of each is prompt (weight 0).
  b.weights = at::tensor({0.f, 1.f, 1.f, 0.f, 1.f, 0.f}).view({2, 3});
  b.reference_logps = at::tensor({-2.0f, -3.0f});
  at::Tensor losses = (at::tensor({9.f, 0.5f, 0.7f, 9.f, 1.5f, 0.f}).view({2, 3}) * b.weights).requires_grad_();
  const at::Tensor total = train::preference_objective(o)(losses, b);
  const double logits = (-1.2 - -1.5) - (-2.0 - -3.0);
  EXPECT_NEAR(total.item<double>(), -log_sigmoid(0.1 * logits), 1e-6);
  total.backward();
  // d loss / d token loss is the same for every token of a sequence; a higher token loss of the
  // chosen answer lowers its log-probability and raises the pair's loss, of the rejected one lowers it.
  const at::Tensor g = losses.grad();
  EXPECT_FLOAT_EQ(g[0][1].item<float>(), g[0][2].item<float>());
  EXPECT_GT(g[0][1].item<float>(), 0.0f);
  EXPECT_LT(g[1][1].item<float>(), 0.0f);
}

TEST(PreferenceData, AlpacaAndSharegptRankingRecords) {
  test::TempDir dir;
  const std::string alpaca = dir.write(
      "a.json", R"([{"instruction": "What is 1 + 1?", "input": "", "chosen": "2", "rejected": "3"},
                   {"instruction": "x", "chosen": "y"}])");
  data::RecordOptions o;
  o.columns.ranking = true;
  data::SftRecords r = data::read_sft_records({alpaca}, o);
  ASSERT_EQ(r.conversations.size(), 1u);
  EXPECT_EQ(r.files[0].bad, 1);
  EXPECT_NE(r.files[0].first_bad[0].find("\"rejected\""), std::string::npos) << r.files[0].first_bad[0];
  const data::Conversation& c = r.conversations[0];
  ASSERT_TRUE(c.is_pair);
  EXPECT_EQ(c.messages.back().text, "2");
  EXPECT_EQ(c.rejected.text, "3");
  EXPECT_EQ(c.rejected.role, data::Role::Assistant);

  const std::string sharegpt = dir.write(
      "s.json", R"([{"conversations": [{"from": "human", "value": "a"}, {"from": "gpt", "value": "b"},
                                        {"from": "human", "value": "c"}],
                     "chosen": {"from": "gpt", "value": "good"}, "rejected": {"from": "gpt", "value": "bad"}},
                    {"conversations": [{"from": "human", "value": "a"}, {"from": "gpt", "value": "b"}],
                     "chosen": {"from": "gpt", "value": "good"}, "rejected": {"from": "gpt", "value": "bad"}}])");
  r = data::read_sft_records({sharegpt}, o);
  ASSERT_EQ(r.conversations.size(), 1u);  // an even-length prompt ends with an answer: not a pair
  EXPECT_EQ(r.files[0].bad, 1);
  EXPECT_EQ(r.conversations[0].messages.size(), 4u);
  EXPECT_EQ(r.conversations[0].messages.back().text, "good");
  EXPECT_EQ(r.conversations[0].rejected.text, "bad");

  const std::string messages = dir.write("m.jsonl", R"({"messages": [{"role": "user", "content": "a"}]})");
  EXPECT_NE(test::message_of<UsageError>([&] { data::read_sft_records({messages}, o); }).find("alpaca or sharegpt"),
            std::string::npos);
}

TEST(PreferenceData, V1PairRecords) {
  test::TempDir dir;
  const std::string path = dir.write(
      "p.jsonl",
      R"({"chosen": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}, {"role": "assistant", "content": "good"}], "rejected": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}, {"role": "assistant", "content": "bad"}]}
{"chosen": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], "rejected": [{"role": "user", "content": "other"}, {"role": "assistant", "content": "b"}]}
)");
  data::RecordOptions o;
  o.format = "pair";
  o.columns.ranking = true;
  const data::SftRecords r = data::read_sft_records({path}, o);
  ASSERT_EQ(r.conversations.size(), 1u);
  EXPECT_NE(r.files[0].first_bad[0].find("differ before their last message"), std::string::npos) << r.files[0].first_bad[0];
  const data::Conversation& c = r.conversations[0];
  ASSERT_TRUE(c.is_pair);
  ASSERT_EQ(c.messages.size(), 3u);  // system, user, chosen
  EXPECT_EQ(c.messages[0].role, data::Role::System);
  EXPECT_EQ(c.messages.back().text, "good");
  EXPECT_EQ(c.rejected.text, "bad");
  o.columns.ranking = false;  // pairs outside stage dpo
  EXPECT_NE(test::message_of<UsageError>([&] { data::read_sft_records({path}, o); }).find("stage = \"dpo\""),
            std::string::npos);
  // LlamaFactory main's native pair records, found by format "auto".
  const std::string main_path = dir.write(
      "m.jsonl",
      R"({"chosen_messages": [{"role": "user", "content": [{"type": "text", "value": "q"}], "loss_weight": 0.0}, {"role": "assistant", "content": [{"type": "text", "value": "good"}], "loss_weight": 1.0}], "rejected_messages": [{"role": "user", "content": [{"type": "text", "value": "q"}], "loss_weight": 0.0}, {"role": "assistant", "content": [{"type": "text", "value": "bad"}], "loss_weight": 1.0}]})"
      "\n");
  data::RecordOptions a;
  a.columns.ranking = true;
  const data::SftRecords m = data::read_sft_records({main_path}, a);
  ASSERT_EQ(m.conversations.size(), 1u);
  EXPECT_EQ(m.files[0].format, "pair");
  EXPECT_EQ(m.conversations[0].messages.back().text, "good");
  EXPECT_EQ(m.conversations[0].rejected.text, "bad");
}

TEST(PreferenceData, PairTruncationFollowsTheLongerAnswer) {
  // History (source 3, target 2), then the last prompt (source 4): the prompt is 9 tokens.
  const data::EncodedTurn history{{1, 1, 1}, {2, 2}, 1.0f};
  const data::EncodedTurn chosen_last{{3, 3, 3, 3}, {7, 7, 7, 7, 7, 7}, 1.0f};
  const data::EncodedTurn rejected_last{{3, 3, 3, 3}, {8, 8, 8}, 1.0f};
  // cutoff 12: target 6 * 2 >= 12, source 9 * 2 >= 12 -> both shrink: target int(12 * 6 / 15) = 4.
  auto [c, r] = data::flatten_pair({history, chosen_last}, {history, rejected_last}, 12);
  EXPECT_EQ(c.ids, (std::vector<std::int32_t>{1, 1, 1, 2, 2, 3, 3, 3, 7, 7, 7, 7}));
  EXPECT_EQ(r.ids, (std::vector<std::int32_t>{1, 1, 1, 2, 2, 3, 3, 3, 8, 8, 8}));
  EXPECT_EQ(c.weights, (std::vector<float>{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1}));
  EXPECT_TRUE(c.truncated);
  EXPECT_TRUE(r.truncated);  // its prompt was cut
  auto [c2, r2] = data::flatten_pair({history, chosen_last}, {history, rejected_last}, 64);
  EXPECT_EQ(c2.ids.size(), 15u);
  EXPECT_EQ(r2.ids.size(), 12u);
  EXPECT_FALSE(c2.truncated);
}

// A run config of an inline model on one pair file: `head` (stage and its keys) before it.
struct PairRun {
  test::TempDir dir;
  const std::string base = "train_dataset = \"" +
                           dir.write("p.json", R"([{"instruction": "q", "chosen": "a", "rejected": "b"}])") +
                           "\"\n[model]\nvocab_size = 300\nhidden_size = 32\nintermediate_size = 64\n"
                           "num_hidden_layers = 2\nnum_attention_heads = 4\n";
  config::Config parse(const std::string& head) const { return config::parse_config(head + base, "run.toml", {}); }
  std::string error_of(const std::string& head) const {
    return test::message_of<config::ConfigError>([&] { parse(head); });
  }
};

TEST(PreferenceConfig, RulesOfStageDpo) {
  const PairRun run;
  const std::string& base = run.base;
  auto error_of = [&](const std::string& head) { return run.error_of(head); };
  EXPECT_NE(error_of("stage = \"sft\"\npref_beta = 0.2\n").find("applies to stage = \"dpo\""), std::string::npos);
  EXPECT_NE(error_of("stage = \"dpo\"\npref_loss = \"orpo\"\ndpo_label_smoothing = 0.1\n").find("sigmoid"),
            std::string::npos);
  EXPECT_NE(error_of("stage = \"dpo\"\npacking = true\n").find("never packed"), std::string::npos);
  EXPECT_NE(error_of("stage = \"dpo\"\nval_size = 0.1\n").find("not built"), std::string::npos);
  EXPECT_NE(error_of("stage = \"dpo\"\npref_loss = \"kto_pair\"\n").find("pref_loss"), std::string::npos);
  // pref_beta = 0 (issue 50, case 5): refused where the loss divides by it or becomes a constant,
  // at its line; orpo's beta only weighs a term, and sigmoid with pref_ftx still trains its NLL.
  for (const char* loss : {"ipo", "simpo"}) {
    const std::string e = error_of(std::string("stage = \"dpo\"\npref_loss = \"") + loss + "\"\npref_beta = 0\n");
    EXPECT_NE(e.find("run.toml:3"), std::string::npos) << e;
    EXPECT_NE(e.find("divides by 0"), std::string::npos) << e;
  }
  EXPECT_NE(error_of("stage = \"dpo\"\npref_beta = 0.0\n").find("nothing would train"), std::string::npos);
  EXPECT_NE(error_of("stage = \"dpo\"\npref_loss = \"hinge\"\npref_beta = 0\n").find("nothing would train"),
            std::string::npos);
  EXPECT_NO_THROW(config::parse_config("stage = \"dpo\"\npref_loss = \"orpo\"\npref_beta = 0\n" + base, "run.toml", {}));
  EXPECT_NO_THROW(config::parse_config("stage = \"dpo\"\npref_beta = 0\npref_ftx = 1\n" + base, "run.toml", {}));
  const config::Config ok = config::parse_config("stage = \"dpo\"\npref_loss = \"simpo\"\n" + base, "run.toml", {});
  EXPECT_EQ(train::PreferenceOptions::from(ok).loss, "simpo");
  EXPECT_FALSE(train::PreferenceOptions::from(ok).uses_reference());
}

TEST(RewardModel, PairwiseLossOnScores) {
  train::PreferenceOptions o;
  o.reward_model = true;
  EXPECT_FALSE(o.uses_reference());
  EXPECT_FALSE(o.averages());
  // The engine's per-sequence sums are the scores themselves (not negated log-probabilities).
  const at::Tensor scores = o.sequence_values(at::tensor({1.5, -0.5, 0.25, 0.75}, at::kDouble));
  const train::PairTerms t = train::pair_terms(o, scores, at::ones({4}, at::kDouble), at::Tensor());
  EXPECT_NEAR(t.losses[0].item<double>(), -log_sigmoid(2.0), 1e-12);
  EXPECT_NEAR(t.losses[1].item<double>(), -log_sigmoid(-0.5), 1e-12);
  EXPECT_DOUBLE_EQ(t.chosen_rewards[1].item<double>(), 0.25);
  EXPECT_FALSE(t.chosen_logps.defined());
  train::PreferenceMetrics m;
  m.add(t);
  const auto logged = m.take();
  ASSERT_EQ(logged.size(), 4u);  // rewards/chosen, rejected, accuracies, margins; no logps
  EXPECT_EQ(logged[2].first, "rewards/accuracies");
  EXPECT_DOUBLE_EQ(logged[2].second, 0.5);
  EXPECT_DOUBLE_EQ(logged[3].second, (2.0 - 0.5) / 2);
}

TEST(RewardModel, WeightsPickEachSequencesLastToken) {
  // Rows of 4, 2 and 5 tokens in a batch of 5 positions: the head's column t is position t + 1.
  const at::Tensor mask = at::tensor({1, 1, 1, 1, 0, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1}).view({3, 5}).to(at::kBool);
  const at::Tensor want = at::tensor({0.f, 0.f, 1.f, 0.f, 1.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 1.f}).view({3, 4});
  EXPECT_TRUE(at::equal(train::last_token_weights(mask), want));
  EXPECT_THROW(train::last_token_weights(at::tensor({1, 0, 0}).view({1, 3}).to(at::kBool)), c10::Error);
}

TEST(RewardModel, ValueHeadScoresTheFinalNormedStateAndTrainsAlone) {
  model::ModelConfig c;
  c.model_type = "llama";
  c.vocab_size = 50;
  c.hidden_size = 16;
  c.intermediate_size = 32;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 2;
  c.score_head = model::ScoreHead::ValueHead;
  c.summary_dropout_prob = 0.0;
  const auto m = model::create_causal_lm(c);
  {
    at::NoGradGuard no_grad;
    for (auto& p : m->parameters()) p.normal_(0.0, 0.2);
  }
  const auto names = m->named_parameters();
  ASSERT_NE(names.find("v_head.summary.weight"), nullptr);
  ASSERT_NE(names.find("v_head.summary.bias"), nullptr);
  EXPECT_EQ(c.num_parameters(), static_cast<std::int64_t>([&] {
              std::int64_t n = 0;
              for (const auto& p : m->parameters()) n += p.numel();
              return n;
            }()));
  EXPECT_EQ(m->placement("v_head.summary.weight").units, std::vector<std::int64_t>{m->head_unit()});
  const at::Tensor ids = at::tensor({3, 7, 11, 2}, at::kLong).view({1, 4});
  const at::Tensor out = m->token_losses(ids);
  ASSERT_EQ(out.sizes(), (std::vector<std::int64_t>{1, 3}));
  // Column t: the head on the final normed hidden state of position t + 1.
  const at::Tensor hidden = m->forward_units(0, m->head_unit(), ids, {});
  const at::Tensor want = at::linear(m->model->norm(hidden), m->score->weight, m->score->bias).squeeze(-1);
  EXPECT_TRUE(at::allclose(out, want.narrow(1, 1, 3), 1e-6, 1e-6));
  // Under LoRA the head trains beside the adapters; the unused lm_head never does.
  model::FinetuningSpec spec;
  spec.type = "lora";
  spec.lora_rank = 2;
  spec.lora_alpha = 4;
  spec.lora_target = {"all"};
  model::apply_finetuning(*m, spec, {});
  EXPECT_TRUE(m->score->weight.requires_grad());
  EXPECT_TRUE(m->score->bias.requires_grad());
  EXPECT_FALSE(m->lm_head->weight.requires_grad());
}

TEST(RewardModel, RulesOfStageRm) {
  const PairRun run;
  auto error_of = [&](const std::string& head) { return run.error_of(head); };
  EXPECT_NE(error_of("stage = \"rm\"\npref_beta = 0.2\n").find("applies to stage = \"dpo\""), std::string::npos);
  EXPECT_NE(error_of("stage = \"rm\"\npacking = true\n").find("stage = \"rm\": a pair's"), std::string::npos);
  EXPECT_NE(error_of("stage = \"rm\"\nval_size = 0.1\n").find("not built"), std::string::npos);
  EXPECT_TRUE(train::PreferenceOptions::from(run.parse("stage = \"rm\"\n")).reward_model);
}

}  // namespace
}  // namespace lft
