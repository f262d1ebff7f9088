// ModelConfig: Hugging Face config.json (transformers 5 and 4.x forms), the inline [model] table,
// parameter counts, and the errors that name the file and field.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "lft/config/config.h"
#include "lft/model/families.h"
#include "lft/model/model_config.h"
#include "test_util.h"

namespace lft::model {
namespace {

using lft::config::ConfigError;

std::string fixture_dir(const std::string& name) {
  const std::string here = __FILE__;
  return here.substr(0, here.rfind('/')) + "/../fixtures/" + name;
}

std::string error_of(const std::string& json) {
  return test::message_of<ConfigError>([&] { ModelConfig::from_hf_json(json, "m/config.json"); });
}

// A transformers 4.x style Llama config with the given extra fields (`,"k":v` ...).
std::string llama_json(const std::string& extra = "") {
  return R"({"model_type":"llama","vocab_size":259,"hidden_size":128,"intermediate_size":352,)"
         R"("num_hidden_layers":4,"num_attention_heads":4,"num_key_value_heads":2,)"
         R"("max_position_embeddings":512,"rms_norm_eps":1e-5,"rope_theta":10000.0)" +
         extra + "}";
}

TEST(ModelConfig, ReadsTransformers5LlamaFixture) {
  const ModelConfig c = ModelConfig::from_hf_folder(fixture_dir("llama-tiny"));
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.vocab_size, 61);
  EXPECT_EQ(c.hidden_size, 32);
  EXPECT_EQ(c.intermediate_size, 28);
  EXPECT_EQ(c.num_hidden_layers, 2);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim(), 8);
  EXPECT_EQ(c.max_position_embeddings, 64);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);  // from rope_parameters
  EXPECT_EQ(c.rope_type, "default");
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.dtype, "float32");
  EXPECT_EQ(c.num_parameters(), 15584);  // as counted by transformers (make-model-fixture.py)
  EXPECT_EQ(c.num_non_embedding_parameters(), 15584 - 2 * 61 * 32);
}

TEST(ModelConfig, ReadsTiedAndQwen2Fixtures) {
  const ModelConfig tied = ModelConfig::from_hf_folder(fixture_dir("llama-tiny-tied"));
  EXPECT_TRUE(tied.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(tied.rope_theta, 500000.0);
  EXPECT_EQ(tied.num_parameters(), 7808);
  EXPECT_EQ(tied.num_non_embedding_parameters(), 7808 - 61 * 32);

  const ModelConfig qwen = ModelConfig::from_hf_folder(fixture_dir("qwen2-tiny"));
  EXPECT_EQ(qwen.model_type, "qwen2");
  EXPECT_TRUE(qwen.attention_bias);
  EXPECT_FALSE(qwen.attention_out_bias);
  EXPECT_EQ(qwen.sliding_window, 0);  // use_sliding_window false
  EXPECT_DOUBLE_EQ(qwen.rope_theta, 1000000.0);
  EXPECT_EQ(qwen.num_parameters(), 7872);
}

TEST(ModelConfig, ReadsTransformers4Fields) {
  const ModelConfig c = ModelConfig::from_hf_json(
      llama_json(R"(,"rope_scaling":null,"torch_dtype":"bfloat16","tie_word_embeddings":true)"),
      "x.json");
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.dtype, "bfloat16");
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.summary(), "llama 4 layers, hidden 128, 4 heads (2 kv), ffn 352, vocab 259 tied: "
                         "0.77 M parameters");
  // num_key_value_heads absent: as many as the attention heads.
  const ModelConfig mha = ModelConfig::from_hf_json(
      R"({"model_type":"llama","vocab_size":10,"hidden_size":16,"intermediate_size":20,)"
      R"("num_hidden_layers":1,"num_attention_heads":2})",
      "x.json");
  EXPECT_EQ(mha.num_key_value_heads, 2);
  EXPECT_EQ(mha.max_position_embeddings, 2048);
}

// Each family's count (FamilySpec::layer_parameters) is what its model builds: the parameters of
// a meta-device model, every family with every optional part switched on; and a token's matmul
// weights are the layers' 2-D weights (a dense layer uses all of them).
TEST(ModelConfig, EachFamilyCountsTheParametersItsModelBuilds) {
  for (const FamilySpec& family : families()) {
    SCOPED_TRACE(family.model_type);
    std::string json = llama_json();
    json.replace(json.find("\"llama\""), 7, "\"" + family.model_type + "\"");
    ModelConfig c = ModelConfig::from_hf_json(json, "x.json");
    for (const bool extras : {false, true}) {
      c.attention_bias = c.attention_out_bias = c.mlp_bias = extras;
      const auto model = create_causal_lm(c, at::TensorOptions().device(at::kMeta));
      // A token goes through every layer matrix but the experts it is not routed to: of a
      // mixture of experts' layer, the router and k of the (equal) experts.
      std::int64_t all = 0, layer_matmul = 0;
      for (const auto& item : model->named_parameters()) {
        all += item.value().numel();
        const bool in_layer = item.key().rfind("model.layers.", 0) == 0;
        const std::size_t at = item.key().find(".experts.");
        const bool unused_expert =
            at != std::string::npos && std::stoll(item.key().substr(at + 9)) >= c.moe.experts_per_token;
        if (in_layer && item.value().dim() == 2 && !unused_expert) layer_matmul += item.value().numel();
      }
      EXPECT_EQ(c.num_parameters(), all);
      EXPECT_EQ(c.token_matmul_parameters(), layer_matmul);
    }
  }
}

TEST(ModelConfig, SummaryAndParameterCount) {
  ModelConfig c = ModelConfig::from_hf_json(llama_json(), "x.json");
  // Per layer: 2*128 norms + q 128*128 + k,v 2*128*64 + o 128*128 + 3*128*352.
  const std::int64_t layer = 256 + 16384 + 16384 + 16384 + 135168;
  EXPECT_EQ(c.num_non_embedding_parameters(), 4 * layer + 128);
  EXPECT_EQ(c.num_parameters(), 4 * layer + 128 + 2 * 259 * 128);
  EXPECT_EQ(c.summary(),
            "llama 4 layers, hidden 128, 4 heads (2 kv), ffn 352, vocab 259: 0.80 M parameters");
  c.attention_bias = c.attention_out_bias = c.mlp_bias = true;
  EXPECT_EQ(c.num_non_embedding_parameters(),
            4 * (layer + (128 + 2 * 64) + 128 + (2 * 352 + 128)) + 128);
}

TEST(ModelConfig, LlamaAttentionBiasAndHeadDim) {
  const ModelConfig c =
      ModelConfig::from_hf_json(llama_json(R"(,"attention_bias":true,"head_dim":64)"), "x.json");
  EXPECT_TRUE(c.attention_bias);
  EXPECT_TRUE(c.attention_out_bias);  // HF Llama: attention_bias also gives o_proj a bias
  EXPECT_EQ(c.head_dim(), 64);        // not 128 / 4
}

TEST(ModelConfig, RopeScaling) {
  const ModelConfig v5 = ModelConfig::from_hf_json(
      llama_json(R"(,"rope_parameters":{"rope_theta":500000.0,"rope_type":"llama3","factor":32.0,)"
                 R"("low_freq_factor":1.0,"high_freq_factor":4.0,)"
                 R"("original_max_position_embeddings":8192})"),
      "x.json");
  EXPECT_EQ(v5.rope_type, "llama3");
  EXPECT_DOUBLE_EQ(v5.rope_theta, 500000.0);
  EXPECT_DOUBLE_EQ(v5.rope_factor, 32.0);
  EXPECT_EQ(v5.rope_original_max_position_embeddings, 8192);
  const ModelConfig v4 = ModelConfig::from_hf_json(
      llama_json(R"(,"rope_scaling":{"type":"linear","factor":2.0})"), "x.json");
  EXPECT_EQ(v4.rope_type, "linear");
  EXPECT_DOUBLE_EQ(v4.rope_factor, 2.0);
  EXPECT_CONTAINS(error_of(llama_json(R"(,"rope_scaling":{"rope_type":"yarn","factor":4.0})")),
                  "m/config.json: field 'rope_scaling.rope_type': 'yarn' is not supported");
}

TEST(ModelConfig, SlidingWindow) {
  const std::string mistral =
      R"({"model_type":"mistral","vocab_size":10,"hidden_size":16,"intermediate_size":20,)"
      R"("num_hidden_layers":2,"num_attention_heads":2,"num_key_value_heads":1,)"
      R"("max_position_embeddings":4096,"sliding_window":)";
  const ModelConfig m = ModelConfig::from_hf_json(mistral + "128}", "x.json");
  EXPECT_EQ(m.sliding_window, 128);
  EXPECT_TRUE(m.uses_sliding_window(0));
  EXPECT_FALSE(m.attention_bias);
  EXPECT_EQ(ModelConfig::from_hf_json(mistral + "null}", "x.json").sliding_window, 0);
  // A window no shorter than max_position_embeddings never masks anything.
  EXPECT_EQ(ModelConfig::from_hf_json(mistral + "4096}", "x.json").sliding_window, 0);

  const std::string qwen =
      R"({"model_type":"qwen2","vocab_size":10,"hidden_size":16,"intermediate_size":20,)"
      R"("num_hidden_layers":4,"num_attention_heads":2,"num_key_value_heads":1,)"
      R"("max_position_embeddings":32768,"sliding_window":64,"max_window_layers":2,)";
  const ModelConfig off = ModelConfig::from_hf_json(qwen + R"("use_sliding_window":false})", "x");
  EXPECT_EQ(off.sliding_window, 0);
  const ModelConfig on = ModelConfig::from_hf_json(qwen + R"("use_sliding_window":true})", "x");
  EXPECT_EQ(on.sliding_window, 64);
  EXPECT_FALSE(on.uses_sliding_window(1));
  EXPECT_TRUE(on.uses_sliding_window(2));
}

TEST(ModelConfig, ErrorsNameFileAndField) {
  EXPECT_CONTAINS(error_of("{not json"), "m/config.json: not valid JSON");
  EXPECT_CONTAINS(error_of("[1]"), "m/config.json: expected a JSON object");
  EXPECT_CONTAINS(error_of(R"({"vocab_size":3})"), "m/config.json: field 'model_type': missing");
  EXPECT_CONTAINS(error_of(R"({"model_type":"gpt2"})"),
                  "m/config.json: field 'model_type': 'gpt2' is not supported");
  EXPECT_CONTAINS(
      error_of(R"({"model_type":"llama","vocab_size":10,"intermediate_size":20,)"
               R"("num_hidden_layers":1,"num_attention_heads":2})"),
      "m/config.json: field 'hidden_size': missing");
  EXPECT_CONTAINS(error_of(llama_json(R"(,"vocab_size":"259")")),
                  "m/config.json: field 'vocab_size': expected an integer, got a string \"259\"");
  EXPECT_CONTAINS(error_of(llama_json(R"(,"tie_word_embeddings":1)")),
                  "field 'tie_word_embeddings': expected true or false");
  EXPECT_CONTAINS(error_of(llama_json(R"(,"hidden_act":"gelu")")),
                  "field 'hidden_act': 'gelu' is not supported");
  EXPECT_CONTAINS(error_of(llama_json(R"(,"num_key_value_heads":3)")),
                  "field 'num_key_value_heads': 3 does not divide num_attention_heads 4");
  EXPECT_CONTAINS(error_of(llama_json(R"(,"num_attention_heads":3,"num_key_value_heads":1)")),
                  "field 'num_attention_heads': 3 does not divide hidden_size 128");
  EXPECT_CONTAINS(error_of(llama_json(R"(,"num_hidden_layers":0)")),
                  "field 'num_hidden_layers': must be at least 1");
  try {
    ModelConfig::from_hf_folder("/nonexistent/model");
    ADD_FAILURE() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_CONTAINS(e.what(), "/nonexistent/model/config.json: cannot open");
  }
}

// A folder saved quantized: bitsandbytes' 4 bits are read (QLoRA over them); another method or
// 8 bits is refused naming the field.
TEST(ModelConfig, QuantizedFoldersOtherThanBitsandbytes4BitAreRefused) {
  const std::string dir = ::testing::TempDir() + "lft_quantized_folder";
  std::filesystem::create_directories(dir);
  auto with = [&](const std::string& quantization) {
    std::ofstream(dir + "/config.json") << llama_json(",\"quantization_config\":" + quantization);
    try {
      ModelConfig::from_hf_folder(dir);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_CONTAINS(with(R"({"quant_method":"gptq","bits":4})"), "quantization_config.quant_method = \"gptq\"");
  EXPECT_CONTAINS(with(R"({"quant_method":"bitsandbytes","load_in_8bit":true})"), "an 8-bit (LLM.int8) folder");
  EXPECT_EQ(with(R"({"quant_method":"bitsandbytes","load_in_4bit":true,"bnb_4bit_quant_type":"nf4"})"), "");
}

TEST(ModelConfig, HfJsonRoundTrip) {
  ModelConfig c = ModelConfig::from_hf_json(
      llama_json(R"(,"rope_parameters":{"rope_theta":500000.0,"rope_type":"llama3","factor":8.0,)"
                 R"("low_freq_factor":1.0,"high_freq_factor":4.0,)"
                 R"("original_max_position_embeddings":256},"dtype":"bfloat16")"),
      "x.json");
  const ModelConfig back = ModelConfig::from_hf_json(c.to_hf_json(), "back.json");
  EXPECT_EQ(back.to_hf_json(), c.to_hf_json());
  EXPECT_EQ(back.num_parameters(), c.num_parameters());
  EXPECT_EQ(back.rope_type, "llama3");
  EXPECT_EQ(back.rope_original_max_position_embeddings, 256);
  const ModelConfig qwen = ModelConfig::from_hf_folder(fixture_dir("qwen2-tiny"));
  const ModelConfig qwen_back = ModelConfig::from_hf_json(qwen.to_hf_json(), "q.json");
  EXPECT_TRUE(qwen_back.attention_bias);
  EXPECT_TRUE(qwen_back.tie_word_embeddings);
  EXPECT_EQ(qwen_back.num_parameters(), qwen.num_parameters());
  // Each family writes back what it reads (its FamilySpec's read and write).
  for (const char* fixture : {"llama-tiny", "mistral-tiny", "qwen3-tiny", "gemma2-tiny", "gemma-tiny"}) {
    const ModelConfig f = ModelConfig::from_hf_folder(fixture_dir(fixture));
    const ModelConfig f_back = ModelConfig::from_hf_json(f.to_hf_json(), "f.json");
    EXPECT_EQ(f_back.to_hf_json(), f.to_hf_json()) << fixture;
    EXPECT_EQ(f_back.num_parameters(), f.num_parameters()) << fixture;
    EXPECT_EQ(f_back.sliding_window, f.sliding_window) << fixture;
    EXPECT_EQ(f_back.sliding_layers, f.sliding_layers) << fixture;
  }
}

// Gemma2: transformers' defaults where a field is absent, and its null meaning "none".
TEST(ModelConfig, Gemma2DefaultsAndNulls) {
  const std::string sizes =
      R"({"model_type":"gemma2","vocab_size":100,"hidden_size":64,"intermediate_size":96,)"
      R"("num_hidden_layers":3,"num_attention_heads":4,"num_key_value_heads":2)";
  const ModelConfig d = ModelConfig::from_hf_json(sizes + "}", "g.json");
  EXPECT_EQ(d.head_dim(), 256);
  EXPECT_TRUE(d.tie_word_embeddings);
  EXPECT_EQ(d.query_pre_attn_scalar, 256);
  EXPECT_EQ(d.attn_logit_softcapping, 50.0);
  EXPECT_EQ(d.final_logit_softcapping, 30.0);
  EXPECT_EQ(d.hidden_activation, "gelu_pytorch_tanh");
  EXPECT_EQ(d.max_position_embeddings, 8192);
  EXPECT_EQ(d.sliding_layers, (std::vector<bool>{true, false, true}));  // even layers slide
  EXPECT_EQ(d.sliding_window, 4096);
  EXPECT_DOUBLE_EQ(d.embedding_multiplier, 8.0);
  EXPECT_EQ(d.initial_norm_weight(), 0.0);
  const ModelConfig n = ModelConfig::from_hf_json(
      sizes + R"(,"attn_logit_softcapping":null,"final_logit_softcapping":null,"sliding_window":null})", "g.json");
  EXPECT_EQ(n.attn_logit_softcapping, 0.0);
  EXPECT_EQ(n.final_logit_softcapping, 0.0);
  EXPECT_EQ(n.sliding_window, 0);
  EXPECT_FALSE(n.uses_sliding_window(0));
  auto error = [&](const std::string& extra) {
    try {
      ModelConfig::from_hf_json(sizes + extra + "}", "g.json");
    } catch (const lft::config::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error(R"(,"layer_types":["sliding_attention","full_attention"])").find("'layer_types': has 2 entries for 3 layers"),
            std::string::npos);
  EXPECT_NE(error(R"(,"layer_types":["sliding_attention","global",1])").find("g.json: field 'layer_types'"),
            std::string::npos);
  EXPECT_NE(error(R"(,"hidden_activation":"relu")").find("'relu' is not supported"), std::string::npos);
  EXPECT_NE(error(R"(,"use_bidirectional_attention":true)").find("use_bidirectional_attention"), std::string::npos);
}

// The run configuration: an inline [model] table, or model_name_or_path.
const std::string& data_path() {
  static const std::string path = [] {
    std::string p = ::testing::TempDir() + "lft_test_model_config_data.jsonl";
    std::ofstream(p) << "{\"text\": \"hello\"}\n";
    return p;
  }();
  return path;
}

TEST(ModelConfig, FromRunConfigModelTable) {
  const std::string base = "train_dataset = \"" + data_path() +
                           "\"\n[model]\nvocab_size = 259\nhidden_size = 128\n"
                           "intermediate_size = 352\nnum_hidden_layers = 4\n"
                           "num_attention_heads = 4\n";
  const ModelConfig mha = ModelConfig::from_run_config(lft::config::parse_config(base, "run.toml"));
  EXPECT_EQ(mha.model_type, "llama");
  EXPECT_EQ(mha.num_key_value_heads, 4);  // unset: num_attention_heads
  EXPECT_EQ(mha.max_position_embeddings, 2048);
  EXPECT_DOUBLE_EQ(mha.rope_theta, 10000.0);
  EXPECT_FALSE(mha.tie_word_embeddings);
  const ModelConfig gqa = ModelConfig::from_run_config(lft::config::parse_config(
      base + "num_key_value_heads = 2\nrope_theta = 500000.0\ntie_word_embeddings = true\n",
      "run.toml"));
  EXPECT_EQ(gqa.num_key_value_heads, 2);
  EXPECT_DOUBLE_EQ(gqa.rope_theta, 500000.0);
  EXPECT_TRUE(gqa.tie_word_embeddings);
  EXPECT_EQ(gqa.summary(),
            "llama 4 layers, hidden 128, 4 heads (2 kv), ffn 352, vocab 259 tied: 0.77 M "
            "parameters");
}

TEST(ModelConfig, FromRunConfigModelFolder) {
  const std::string text = "train_dataset = \"" + data_path() + "\"\nmodel_name_or_path = \"" +
                           fixture_dir("qwen2-tiny") + "\"\n";
  const ModelConfig c = ModelConfig::from_run_config(lft::config::parse_config(text, "run.toml"));
  EXPECT_EQ(c.model_type, "qwen2");
  EXPECT_EQ(c.num_parameters(), 7872);
}

// The mixture-of-experts keys reach a MoE folder's config, and are refused naming the key on a
// dense folder and on an inline [model] (always dense).
TEST(ModelConfig, MoeKeysApplyToExpertsOnly) {
  const std::string head = "train_dataset = \"" + data_path() + "\"\n";
  const std::string keys = "moe_expert_capacity_factor = 1.25\nmoe_token_drop_policy = \"position\"\n";
  const ModelConfig moe = ModelConfig::from_run_config(lft::config::parse_config(
      head + keys + "model_name_or_path = \"" + fixture_dir("qwen3-moe-tiny") + "\"\n", "run.toml"));
  EXPECT_DOUBLE_EQ(moe.moe.capacity_factor, 1.25);
  EXPECT_TRUE(moe.moe.drop_by_position);
  EXPECT_EQ(moe.moe.expert_capacity(10), 7);  // ceil(10 x 2 / 4 x 1.25)
  for (const std::string& model : {"model_name_or_path = \"" + fixture_dir("qwen2-tiny") + "\"\n",
                                   std::string("[model]\nvocab_size = 259\nhidden_size = 128\nintermediate_size = 352\n"
                                               "num_hidden_layers = 4\nnum_attention_heads = 4\n")}) {
    try {
      ModelConfig::from_run_config(lft::config::parse_config(head + keys + model, "run.toml"));
      ADD_FAILURE() << "a capacity on a dense model was accepted: " << model;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("run.toml:2:1: key 'moe_expert_capacity_factor'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("has no experts"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace lft::model
