// load_sft_data: options -> cache or (records -> template -> sequences) -> train/eval split.
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include "lft/data/sft_cache.h"
#include "lft/data/jinja_sft.h"
#include "lft/data/python_random.h"
#include "lft/data/sft_dataset.h"
#include "lft/data/v1_render.h"
#include "lft/runtime/error.h"
#include "lft/runtime/stage.h"

namespace lft::data {
namespace {

constexpr const char* kCacheVersion = "lftrain tokenized data 4";  // 2: per-file formats, max_samples; 3: special tokens escaped in the model template's text; 4: tool calls and definitions read

void say(const SftOptions& o, const std::string& line) {
  if (o.log) o.log(line);
}

std::string cache_file(const std::string& path) {
  struct stat st {};
  if (!path.empty() && ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return path + "/tokenized.lftok";
  }
  return path;
}

// Every input the sequences depend on, one per line (see sft_cache.h).
std::string cache_key(const std::vector<DatasetSource>& sources, const SftOptions& o,
                      const Tokenizer& tok, const SpecialTokens& sp, bool packing) {
  std::string key = std::string(kCacheVersion) + "\nstage=" + o.stage + "\n";
  for (const DatasetSource& s : sources) {
    const SftColumns& c = s.options.columns;
    key += "file=" + s.path + " " + file_stamp(s.path) + " max_samples=" + std::to_string(s.max_samples) +
           " v1_size=" + std::to_string(s.v1_size) + " v1_weight=" + std::to_string(s.v1_weight) +
           "\ndataset_format=" + s.options.format + "\ncolumns=" + c.prompt + "," + c.query + "," +
           c.response + "," + c.history + "," + c.system + "," + c.messages + "," + c.role_tag + "," +
           c.content_tag + "," + c.user_tag + "," + c.assistant_tag + "," + c.observation_tag + "," +
           c.function_tag + "," + c.system_tag + "," + c.text + ",sep=" + c.query_separator +
           (c.ranking ? ",ranking=" + c.chosen + "," + c.rejected : std::string()) + "\n";
  }
  key += "template=" + o.template_name + "\n";
  if (o.jinja) key += "jinja=" + std::to_string(std::hash<std::string>{}(o.jinja->text())) + "\n";
  key += "tokenizer=" + tok.name() +
         " vocab=" + std::to_string(tok.vocab_size()) + " bos=" + std::to_string(tok.bos_id()) +
         " eos=" + std::to_string(tok.eos_id()) + " " + o.tokenizer_fingerprint + "\n";
  key += "special_tokens=bos=" + std::to_string(sp.bos) + ",eos=" + std::to_string(sp.eos) + "\n";
  key += "cutoff_len=" + std::to_string(o.cutoff_len) + "\npacking=" + (packing ? "1" : "0") +
         " neat_packing=" + (o.neat_packing ? "1" : "0") + "\n";
  return key;
}

// LlamaFactory v1's adjust_data_index, per dataset in order, with Python's random seeded as v1's
// set_seed(seed) leaves it: `size` draws that many records with replacement, then `weight` draws
// len * weight of those. A size or weight of 0 is ignored, as v1's `if size or weight` does.
void apply_v1_sizes(SftRecords& records, const std::vector<DatasetSource>& sources, std::uint64_t seed) {
  const bool any = std::any_of(sources.begin(), sources.end(),
                               [](const DatasetSource& s) { return s.v1_size > 0 || s.v1_weight > 0; });
  if (!any || records.files.size() != sources.size()) return;
  PythonRandom rng(seed);
  std::vector<Conversation> out;
  std::size_t begin = 0;
  for (std::size_t f = 0; f < sources.size(); ++f) {
    const auto n = static_cast<std::int64_t>(records.files[f].used);
    std::vector<std::int64_t> index(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) index[static_cast<std::size_t>(i)] = i;
    const DatasetSource& s = sources[f];
    if (s.v1_size > 0 || s.v1_weight > 0) {
      const auto pick = [&](std::int64_t k) {
        std::vector<std::int64_t> picked;
        for (const std::int64_t i : rng.choices(static_cast<std::int64_t>(index.size()), k))
          picked.push_back(index[static_cast<std::size_t>(i)]);
        index = std::move(picked);
      };
      if (s.v1_size >= 0) pick(s.v1_size);
      if (s.v1_weight >= 0) {
        // len * weight records, each held as an index and a copy before tokenizing: a count past
        // what one process can hold is the file's mistake, named, not an allocation failure.
        const double drawn = static_cast<double>(index.size()) * s.v1_weight;
        if (!(drawn <= static_cast<double>(std::numeric_limits<std::int32_t>::max())))
          throw UsageError("dataset \"" + s.name + "\" (" + s.path + "): weight " + std::to_string(s.v1_weight) + " x " +
                           std::to_string(index.size()) + " records would draw " + std::to_string(drawn) +
                           " records, more than one process holds\n  hint: give the weight as the share of the "
                           "dataset to draw, e.g. weight: 0.5 or 2");
        pick(static_cast<std::int64_t>(drawn));
      }
    }
    for (const std::int64_t i : index) out.push_back(records.conversations[begin + static_cast<std::size_t>(i)]);
    begin += static_cast<std::size_t>(n);
    records.files[f].used = static_cast<std::int64_t>(index.size());
  }
  records.conversations = std::move(out);
}

// A pair with the model's own template, as LlamaFactory main's v1 DPO makes it: each answer's
// example (jinja_sft.h), the two cut together to cutoff_len tokens (chosen first: the rejected
// one keeps what is left).
std::pair<TokenizedExample, TokenizedExample> jinja_pair(const JinjaChatEncoder& enc, const Conversation& chosen,
                                                         const Conversation& rejected, const Tokenizer& tok,
                                                         const SpecialTokenEscaper& escaper, std::int64_t cutoff_len) {
  TokenizedExample c = enc.encode(chosen, tok, escaper, cutoff_len);
  const auto room = static_cast<std::int64_t>(std::max<std::int64_t>(0, cutoff_len - static_cast<std::int64_t>(c.ids.size())));
  TokenizedExample r = enc.encode(rejected, tok, escaper, std::max<std::int64_t>(room, 1));
  if (room == 0) {
    r.ids.clear();
    r.weights.clear();
    r.truncated = true;
  }
  return {std::move(c), std::move(r)};
}

void check_ids(const TokenizedExample& ex, const Tokenizer& tok) {
  for (const std::int32_t id : ex.ids) {
    if (id < 0 || id >= tok.vocab_size()) {
      throw std::out_of_range("tokenizer '" + tok.name() + "' or the special tokens gave id " +
                              std::to_string(id) + " outside the vocabulary [0, " +
                              std::to_string(tok.vocab_size()) + ")");
    }
  }
}

PackedSequences build(const std::vector<DatasetSource>& sources, const SftOptions& o,
                      const Tokenizer& tok, const SpecialTokens& sp, bool packing,
                      std::string& summary) {
  SftRecords records = read_sft_records(sources);
  apply_v1_sizes(records, sources, o.seed);
  summary = records.summary();
  std::string source;
  for (const DatasetSource& s : sources) source += (source.empty() ? "" : ", ") + s.path;
  if (o.stage == "pt") {
    // As LlamaFactory's pre-training: the first prompt of a record is its document.
    std::vector<std::string> docs;
    for (const Conversation& c : records.conversations) {
      docs.push_back(c.messages[c.messages[0].role == Role::System ? 1 : 0].text);
    }
    return build_pretrain_sequences(docs, tok, o.cutoff_len, packing, o.neat_packing, source);
  }
  for (const FileReport& f : records.files) {
    if (f.format == "text") {
      throw UsageError(f.path +
                       ": holds text documents, which have no responses to train on "
                       "with stage = \"" + o.stage + "\"; use stage = \"pt\", or alpaca, sharegpt or "
                       "messages records");
    }
  }
  const bool pairs = trains_on_pairs(o.stage);
  const bool own = o.template_name == kModelTemplate;  // the model's Jinja template (jinja_sft.h)
  if (own && !o.jinja) throw std::logic_error("SftOptions: template \"model\" without its encoder");
  say(o, "tokenizing " + std::to_string(records.conversations.size()) + (pairs ? " preference pairs" : " conversations") +
             " with template " + (own ? "model (" + o.jinja->source() + ")" : o.template_name));
  std::optional<ChatTemplate> tpl;  // a built-in template (none with the model's own)
  if (!own) tpl.emplace(o.template_name);
  std::optional<SpecialTokenEscaper> escaper;  // the model's template's examples escape special tokens' texts
  if (own) escaper.emplace(tok);
  const bool v1_builtin = tpl && tpl->is_v1();
  if (pairs && v1_builtin)
    throw UsageError("template " + o.template_name + " is one of LlamaFactory v1's; stage = \"dpo\" renders pairs with "
                     "the classic templates (default, llama3, qwen, mistral)");
  // v1 with the model's template trains one example per answer (the conversation up to it).
  std::vector<Conversation> prefixes;
  if (own && !pairs)  // (pairs are not split: their last answers are the pair)
    for (const Conversation& conv : records.conversations)
      for (Conversation& p : JinjaChatEncoder::supervised_prefixes(conv)) prefixes.push_back(std::move(p));
  const std::vector<Conversation>& items = own && !pairs ? prefixes : records.conversations;
  const SftParallel& par = o.parallel;
  std::vector<TokenizedExample> examples;
  std::string error;
  try {
    for (std::size_t i = static_cast<std::size_t>(par.rank); i < items.size(); i += static_cast<std::size_t>(par.ranks)) {
      const Conversation& conv = items[i];
      if (!own)
        for (const Message& m : conv.messages)
          if (!m.reasoning.empty() || !m.tool_calls.empty() || !conv.tools.empty())
            throw UsageError("conversation " + std::to_string(i + 1) + " has " +
                             (m.reasoning.empty() ? "tool calls or tool definitions" : "an answer with reasoning") +
                             ", which template " + o.template_name + " has no place for (lftrain's built-in templates "
                             "render text turns only)\n  hint: leave template unset in a v1 file (or set template = "
                             "\"model\") to render it with the model's own chat template");
      if (!pairs && conv.is_pair)
        throw UsageError("conversation " + std::to_string(i + 1) + " is a preference pair (chosen and rejected "
                         "answers), which trains with stage = \"dpo\", not " + o.stage);
      if (pairs && !conv.is_pair)
        throw UsageError("conversation " + std::to_string(i + 1) + " is not a preference pair: stage = \"dpo\" reads "
                         "ranking data (alpaca or sharegpt records with chosen and rejected answers)");
      if (pairs) {  // the chosen sequence, then the rejected one
        Conversation other = conv;
        other.messages.back() = conv.rejected;
        auto [chosen, rejected] = own ? jinja_pair(*o.jinja, conv, other, tok, *escaper, o.cutoff_len)
                                      : flatten_pair(tpl->encode(conv, tok, sp), tpl->encode(other, tok, sp), o.cutoff_len);
        examples.push_back(std::move(chosen));
        check_ids(examples.back(), tok);
        examples.push_back(std::move(rejected));
      } else if (own) {
        examples.push_back(o.jinja->encode(conv, tok, *escaper, o.cutoff_len));
      } else {
        examples.push_back(v1_builtin ? v1_encode(o.template_name, conv, tok, o.cutoff_len)
                                      : flatten_turns(tpl->encode(conv, tok, sp), o.cutoff_len));
      }
      check_ids(examples.back(), tok);
    }
  } catch (const std::exception& e) {
    if (!par.gather) throw;
    error = e.what();
  }
  if (par.gather) examples = par.gather(std::move(examples), error, pairs ? 2 : 1);
  // Pairs stay whole and in order (sequences 2i and 2i + 1), even an answer cut to nothing.
  // v1 (0.9.5's templates and main's own-template rendering) keeps sequences with nothing to train:
  // each holds its place in v1's sample order.
  return build_sft_sequences(std::move(examples), o.cutoff_len, packing, o.neat_packing, v1_builtin || own || pairs);
}

}  // namespace

SftData load_sft_data(const std::vector<std::string>& paths, const SftOptions& o,
                      const Tokenizer& tok, const SpecialTokens& sp) {
  return load_sft_data(sources_of_files(paths, o.records), o, tok, sp);
}

SftData load_sft_data(const std::vector<DatasetSource>& sources, const SftOptions& o,
                      const Tokenizer& tok, const SpecialTokens& sp) {
  if (o.stage != "sft" && o.stage != "pt" && !trains_on_pairs(o.stage)) {
    throw UsageError("unknown stage \"" + o.stage + "\"; this build trains sft, pt, dpo and rm");
  }
  if (trains_on_pairs(o.stage) && (o.packing || o.neat_packing || o.val_size > 0))
    throw UsageError("stage " + o.stage + ": pairs are neither packed nor split for evaluation");
  if (o.cutoff_len < 2) {
    throw UsageError("cutoff_len must be at least 2, got " + std::to_string(o.cutoff_len));
  }
  if (o.template_name != kModelTemplate) ChatTemplate check_name(o.template_name);  // an unknown one fails first
  if (sp.pad < 0) throw UsageError("no pad token id: resolve the special tokens first");
  if (sources.empty()) throw UsageError("no dataset file given");
  const bool packing = o.packing || o.neat_packing;
  if (o.neat_packing && !o.packing) say(o, "neat_packing = true turns packing on");

  const std::string cache = cache_file(o.tokenized_path);
  const std::string key = cache.empty() ? "" : cache_key(sources, o, tok, sp, packing);
  std::shared_ptr<const PackedSequences> seqs;
  std::string summary;
  if (!cache.empty()) {
    std::string why;
    auto cached = load_sequences(cache, key, why);
    const bool hit = cached.has_value();
    if (o.parallel.all_true ? o.parallel.all_true(hit) : hit) {
      seqs = std::make_shared<const PackedSequences>(std::move(*cached));
      summary = "tokenized data reused from " + cache;
      say(o, summary);
    } else {
      say(o, "tokenized data cache " + cache + ": " + (hit ? "not found on every rank" : why) +
                 "; tokenizing the dataset");
    }
  }
  if (!seqs) {
    seqs = std::make_shared<const PackedSequences>(build(sources, o, tok, sp, packing, summary));
    if (!cache.empty() && o.write_cache) {
      save_sequences(cache, key, *seqs);
      say(o, "tokenized data saved to " + cache);
    }
  }
  if (seqs->num_sequences() == 0) {
    throw UsageError("the dataset yields no training sequence (" +
                     std::to_string(seqs->stats.examples) + " examples, " +
                     std::to_string(seqs->stats.dropped_untrained) +
                     " without a trained token after truncation to cutoff_len = " +
                     std::to_string(o.cutoff_len) + ")");
  }
  auto [train_rows, eval_rows] = split_train_eval(seqs->num_sequences(), o.val_size, o.seed);
  SftData data;
  data.train = SftDataset(seqs, std::move(train_rows), sp.pad);
  if (!eval_rows.empty()) data.eval = SftDataset(seqs, std::move(eval_rows), sp.pad);
  // Every step would divide a loss of 0 by a weight of 0 (NaN): refused before any work.
  if (data.train.trained_tokens() == 0)
    throw UsageError("the training data has no trained token: " + std::to_string(data.train.num_sequences()) +
                     " sequences, every token's loss weight 0 (a v1 message's \"loss_weight\": 0 on every answer, "
                     "or answers that cutoff_len = " + std::to_string(o.cutoff_len) + " cuts away)"
                     "\n  hint: give the answers a loss_weight > 0 (v1's default for an assistant message is 1)");
  const SequenceStats& st = seqs->stats;
  summary += "\n" + o.stage + ": " + std::to_string(st.examples) + " examples -> " +
             std::to_string(seqs->num_sequences()) + " sequences (" +
             (o.stage == "pt" ? "" : "template " + o.template_name + ", ") +
             (o.template_name == kModelTemplate && o.stage == "sft" ? "one example per trained answer, " : "") +
             (packing ? (o.neat_packing ? "neat packing" : "packing") : "no packing") + "), " +
             std::to_string(st.truncated) +
             " truncated to cutoff_len = " + std::to_string(o.cutoff_len);
  if (st.dropped_untrained > 0) {
    summary += ", " + std::to_string(st.dropped_untrained) + " dropped (nothing to train)";
  }
  if (st.dropped_tokens > 0) {
    summary += ", " + std::to_string(st.dropped_tokens) + " tail tokens dropped";
  }
  summary += "\ntrain: " + data.train.describe();
  if (data.eval.num_sequences() > 0) summary += "\neval: " + data.eval.describe();
  data.summary = summary;
  return data;
}

}  // namespace lft::data
