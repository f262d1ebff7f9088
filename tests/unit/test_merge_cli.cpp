// lfmerge's command line, sizes and dtypes, and the expected parameter shapes (lft/ckpt/merge.h).
// The export itself is tested in tests/mpi/test_merge.cpp.
#include <gtest/gtest.h>

#include "lft/ckpt/merge.h"
#include "lft/runtime/error.h"

namespace lft::ckpt {
namespace {

MergeCommand parse(std::vector<std::string> args) { return parse_merge_command_line(args); }

std::string usage_error(std::vector<std::string> args) {
  try {
    parse(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(MergeCli, DefaultsAreHfFp32At5GB) {
  const MergeCommand c = parse({"out/checkpoint-10", "--out", "export"});
  EXPECT_EQ(c.action, MergeCommand::Action::Merge);
  EXPECT_EQ(c.options.checkpoint, "out/checkpoint-10");
  EXPECT_EQ(c.options.out_dir, "export");
  EXPECT_EQ(c.options.format, ExportFormat::HuggingFace);
  EXPECT_EQ(c.options.dtype, at::kFloat);
  EXPECT_EQ(c.options.max_shard_bytes, 5'000'000'000);
  EXPECT_FALSE(c.options.dry_run);
  EXPECT_FALSE(c.options.force);
}

TEST(MergeCli, EveryOptionInBothSpellings) {
  const MergeCommand c = parse({"--format=hf", "--dtype", "bf16", "--max-shard-size=500MB",
                                "--dry-run", "--force", "--out=x", "ck"});
  EXPECT_EQ(c.options.format, ExportFormat::HuggingFace);
  EXPECT_EQ(c.options.dtype, at::kBFloat16);
  EXPECT_EQ(c.options.max_shard_bytes, 500'000'000);
  EXPECT_TRUE(c.options.dry_run);
  EXPECT_TRUE(c.options.force);
  EXPECT_EQ(c.options.out_dir, "x");
  EXPECT_EQ(c.options.checkpoint, "ck");
  EXPECT_EQ(parse({"ck", "--out", "x", "--dtype", "fp16"}).options.dtype, at::kHalf);
  EXPECT_EQ(parse({"ck", "-o", "x", "--format", "hdf5"}).options.format, ExportFormat::Hdf5);
}

TEST(MergeCli, InspectAndHelp) {
  const MergeCommand c = parse({"--inspect", "out/checkpoint-3"});
  EXPECT_EQ(c.action, MergeCommand::Action::Inspect);
  EXPECT_EQ(c.inspect_path, "out/checkpoint-3");
  EXPECT_EQ(parse({"--help"}).action, MergeCommand::Action::Help);
  EXPECT_EQ(parse({"ck", "-h"}).action, MergeCommand::Action::Help);
  EXPECT_NE(merge_usage().find("--max-shard-size"), std::string::npos);
}

TEST(MergeCli, WrongCommandLinesSayWhatToDo) {
  EXPECT_NE(usage_error({}).find("no checkpoint given"), std::string::npos);
  EXPECT_NE(usage_error({"ck"}).find("missing --out DIR"), std::string::npos);
  EXPECT_NE(usage_error({"a", "b", "--out", "x"}).find("more than one checkpoint"),
            std::string::npos);
  EXPECT_NE(usage_error({"ck", "--out", "x", "--fromat", "hf"}).find("unknown option '--fromat'"),
            std::string::npos);
  EXPECT_NE(usage_error({"ck", "--out", "x", "--format", "gguf"}).find("not one of hf, hdf5"),
            std::string::npos);
  EXPECT_NE(usage_error({"ck", "--out", "x", "--dtype", "int8"}).find("not one of bf16"),
            std::string::npos);
  EXPECT_NE(usage_error({"ck", "--out"}).find("--out needs a value"), std::string::npos);
  EXPECT_NE(usage_error({"ck", "--out", "x", "--force=yes"}).find("takes no value"),
            std::string::npos);
  EXPECT_NE(usage_error({"--inspect", "a", "b"}).find("--inspect takes one checkpoint"),
            std::string::npos);
  EXPECT_NE(usage_error({"--inspect", "a", "--out", "x"}).find("got also '--out'"),
            std::string::npos);
  EXPECT_NE(usage_error({"ck", "--out", "x", "--format", "hdf5", "--max-shard-size", "1GB"})
                .find("--max-shard-size applies to --format hf only"),
            std::string::npos);
}

TEST(MergeCli, ByteSizes) {
  EXPECT_EQ(parse_byte_size("5GB"), 5'000'000'000);
  EXPECT_EQ(parse_byte_size("500MB"), 500'000'000);
  EXPECT_EQ(parse_byte_size("100KB"), 100'000);
  EXPECT_EQ(parse_byte_size("100kb"), 100'000);
  EXPECT_EQ(parse_byte_size("2GiB"), 2LL << 30);
  EXPECT_EQ(parse_byte_size("64KiB"), 64 << 10);
  EXPECT_EQ(parse_byte_size("1.5GB"), 1'500'000'000);
  EXPECT_EQ(parse_byte_size("123"), 123);
  EXPECT_EQ(parse_byte_size("123B"), 123);
  for (const char* bad : {"", "GB", "5XB", "-1GB", "0", "1.2.3MB", "5 GB"})
    EXPECT_THROW(parse_byte_size(bad), UsageError) << bad;
}

TEST(MergeCli, ExportDtypes) {
  EXPECT_EQ(parse_export_dtype("fp32"), at::kFloat);
  EXPECT_EQ(parse_export_dtype("float32"), at::kFloat);
  EXPECT_EQ(parse_export_dtype("bfloat16"), at::kBFloat16);
  EXPECT_EQ(parse_export_dtype("float16"), at::kHalf);
  EXPECT_THROW(parse_export_dtype("fp8"), UsageError);
}

TEST(MergeShapes, FollowTheHfTableWithGqaBiasesAndTying) {
  model::ModelConfig c;
  c.model_type = "qwen2";
  c.vocab_size = 50;
  c.hidden_size = 32;
  c.intermediate_size = 40;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.attention_bias = true;
  c.tie_word_embeddings = true;
  const auto shapes = expected_parameter_shapes(c);
  using V = std::vector<std::int64_t>;
  EXPECT_EQ(shapes.at("model.embed_tokens.weight"), (V{50, 32}));
  EXPECT_EQ(shapes.at("model.layers.1.self_attn.q_proj.weight"), (V{32, 32}));
  EXPECT_EQ(shapes.at("model.layers.1.self_attn.k_proj.weight"), (V{16, 32}));
  EXPECT_EQ(shapes.at("model.layers.1.self_attn.v_proj.bias"), (V{16}));
  EXPECT_EQ(shapes.at("model.layers.0.self_attn.o_proj.weight"), (V{32, 32}));
  EXPECT_EQ(shapes.at("model.layers.0.mlp.gate_proj.weight"), (V{40, 32}));
  EXPECT_EQ(shapes.at("model.layers.0.mlp.down_proj.weight"), (V{32, 40}));
  EXPECT_EQ(shapes.at("model.layers.0.input_layernorm.weight"), (V{32}));
  EXPECT_EQ(shapes.at("model.norm.weight"), (V{32}));
  EXPECT_EQ(shapes.count("lm_head.weight"), 0u);  // tied
  EXPECT_EQ(shapes.count("model.layers.0.self_attn.o_proj.bias"), 0u);
  std::int64_t total = 0;
  for (const auto& [name, shape] : shapes) {
    std::int64_t n = 1;
    for (std::int64_t d : shape) n *= d;
    total += n;
  }
  EXPECT_EQ(total, c.num_parameters());
  c.tie_word_embeddings = false;
  EXPECT_EQ(expected_parameter_shapes(c).at("lm_head.weight"), (V{50, 32}));
}

}  // namespace
}  // namespace lft::ckpt
