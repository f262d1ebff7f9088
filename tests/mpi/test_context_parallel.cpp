// Context parallelism ([mesh] cp, Ulysses and ring attention): the sequence exchanges are each
// other's inverse and their backward passes are the exchanges' transposes, and every engine trains as
// the one-rank run of the same global batch (fp32: step 1 within 1e-6, later steps and gradient
// norms within 1e-5 relative), with padding (cutoff not a multiple of cp), packed sequences (neat
// packing: segments across the chunks), checkpointing, LoRA and dp x cp layouts.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>

#include "lft/engine/context_parallel.h"
#include "lft/train/trainer.h"
#include "mpi_test_util.h"
#include "trainer_util.h"

namespace lft {
namespace {

using test::make_trainer;
using test::world;

TEST(ContextParallel, ExchangesAreInversesAndTheirGradientsTransposes) {
  LFT_REQUIRE_RANKS(2);  // a cp group of 2 or more
  engine::CommSequenceExchange group(world(), false);
  const int n = world().size();
  at::manual_seed(11 + world().rank());
  const at::Tensor x = at::randn({2, 3, 2 * n, 4}, at::kDouble).requires_grad_();  // [B, chunk, heads, d]
  const at::Tensor whole = model::sequence_to_heads(group, x);
  ASSERT_EQ(whole.sizes(), (std::vector<int64_t>{2, 3 * n, 2, 4}));
  // Rank r's heads [2r, 2r + 2) of chunk c are chunk c's rows of the result.
  at::Tensor gathered = at::empty({n * x.numel()}, at::kDouble);
  world().all_gather(x.detach().contiguous().reshape({-1}), gathered);
  const at::Tensor all = gathered.view({n, 2, 3, 2 * n, 4});
  for (int c = 0; c < n; ++c)
    EXPECT_TRUE(at::equal(whole.detach().narrow(1, 3 * c, 3), all[c].narrow(2, 2 * world().rank(), 2)));
  const at::Tensor back = model::heads_to_sequence(group, whole);
  EXPECT_TRUE(at::equal(back.detach(), x.detach()));
  // <g, f(x)> summed over the ranks equals <f^T(g), x>: each exchange's backward is its transpose.
  const at::Tensor g = at::randn(whole.sizes(), at::kDouble);
  (whole * g).sum().backward();
  auto dot = at::full({2}, 0.0, at::kDouble);
  dot[0] = (whole.detach() * g).sum();
  dot[1] = (x.grad() * x.detach()).sum();
  world().all_reduce(dot);
  EXPECT_NEAR(dot[0].item<double>(), dot[1].item<double>(), 1e-9 * std::abs(dot[0].item<double>()));
  // gather_sequence: every chunk in rank order; backward keeps this rank's chunk.
  const at::Tensor piece = at::full({2, 3}, static_cast<double>(world().rank()), at::kDouble).requires_grad_();
  const model::SequenceChunk chunk = model::sequence_chunk(group, at::zeros({2, 3 * n}, at::kLong), {});
  ASSERT_EQ(chunk.chunk, 3);
  const at::Tensor seq = model::gather_sequence(group, piece, chunk);
  for (int c = 0; c < n; ++c) EXPECT_TRUE(at::equal(seq.detach().narrow(1, 3 * c, 3), at::full({2, 3}, double(c), at::kDouble)));
  (seq * at::arange(3 * n, at::kDouble)).sum().backward();
  EXPECT_TRUE(at::equal(piece.grad()[0], at::arange(3 * n, at::kDouble).narrow(0, 3 * world().rank(), 3)));
}

// Ring attention against one process's attention over the whole sequence, in double: the output
// and the gradients of q, k and v at this rank's positions (the load-balanced pieces), causal,
// within packed segments, and within a sliding window.
TEST(ContextParallel, RingAttentionIsAttentionOverTheWholeSequence) {
  LFT_REQUIRE_RANKS(2);  // a cp group of 2 or more
  const int n = world().size();
  engine::CommSequenceExchange group(world(), true);
  const std::int64_t b = 2, h = 3, d = 4, length = 4 * n - 1;  // padded to 4n: pieces of 2
  const model::SequenceChunk chunk = model::sequence_chunk(group, at::zeros({b, length}, at::kLong), {});
  ASSERT_EQ(chunk.padded, 4 * n);
  const std::int64_t p = chunk.padded;
  at::manual_seed(3);  // the same whole tensors on every rank
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor q = at::randn({b, h, p, d}, f64), k = at::randn({b, h, p, d}, f64), v = at::randn({b, h, p, d}, f64);
  const at::Tensor dout = at::randn({b, h, p, d}, f64);
  const at::Tensor segments = at::tensor({0, 0, 0, 1, 1, 1, 1, 2}, at::kLong).repeat({(p + 7) / 8}).narrow(0, 0, p).cumsum(0);
  for (const auto& [label, segmented, window] : {std::tuple<const char*, bool, std::int64_t>{"causal", false, 0},
                                                 {"segments", true, 0}, {"window 3", false, 3}}) {
    SCOPED_TRACE(label);
    model::ContextSplit split{&group, chunk.positions, chunk.host_positions,
                              segmented ? segments.unsqueeze(0).expand({b, p}).contiguous() : at::Tensor()};
    const at::Tensor mine = chunk.local_positions();
    at::Tensor ql = q.index_select(2, mine).requires_grad_(), kl = k.index_select(2, mine).requires_grad_(),
               vl = v.index_select(2, mine).requires_grad_();
    const at::Tensor out = model::ring_attention(split, ql, kl, vl, window);
    (out * dout.index_select(2, mine)).sum().backward();
    // The whole sequence in one process.
    const at::Tensor i = at::arange(p).unsqueeze(1), j = at::arange(p).unsqueeze(0);
    at::Tensor mask = j <= i;
    if (window > 0) mask = mask.logical_and((i - j) < window);
    if (segmented) mask = mask.logical_and(segments.unsqueeze(1).eq(segments.unsqueeze(0)));
    at::Tensor qw = q.clone().requires_grad_(), kw = k.clone().requires_grad_(), vw = v.clone().requires_grad_();
    const at::Tensor whole = at::scaled_dot_product_attention(qw, kw, vw, mask);
    (whole * dout).sum().backward();
    EXPECT_TRUE(at::allclose(out, whole.index_select(2, mine), 1e-10, 1e-10));
    EXPECT_TRUE(at::allclose(ql.grad(), qw.grad().index_select(2, mine), 1e-10, 1e-10));
    EXPECT_TRUE(at::allclose(kl.grad(), kw.grad().index_select(2, mine), 1e-10, 1e-10));
    EXPECT_TRUE(at::allclose(vl.grad(), vw.grad().index_select(2, mine), 1e-10, 1e-10));
  }
}

constexpr int kSteps = 6;
constexpr int kGlobal = 12;  // sequences per step

std::string run_toml(const std::string& engine, int micro, int accum, int kv_heads, int cutoff, const std::string& extra) {
  const bool own_data = extra.find("train_dataset") != std::string::npos;
  return "distributed = \"" + engine + "\"\n" + (own_data ? "" : "train_dataset = \"inputs/data/arithmetic.txt\"\n") +
         "per_device_train_batch_size = " + std::to_string(micro) + "\ngradient_accumulation_steps = " +
         std::to_string(accum) + "\ncutoff_len = " + std::to_string(cutoff) + "\nlearning_rate = 3e-3\nweight_decay = 0.01\nwarmup_steps = 2\n"
         "max_steps = 20\nseed = 7\n" + extra +
         "[model]\nvocab_size = 259\nhidden_size = 32\nintermediate_size = 64\nnum_hidden_layers = 2\n"
         "num_attention_heads = 4\nnum_key_value_heads = " + std::to_string(kv_heads) + "\n";
}

std::vector<std::pair<double, double>> steps_of(const std::string& toml, MpiCommunicator& comm) {
  return test::losses_and_grad_norms(toml, comm, kSteps);
}

struct Case {
  std::string label, engine, top, mesh;  // top: keys before [mesh]; mesh: its lines
  int ranks, dp, kv_heads;
  int cutoff = 32;
};

std::vector<Case> cases() {
  const std::string ring = "[dist_config]\ncp_mode = \"ring\"\n";
  const std::string sft = "stage = \"sft\"\ntrain_dataset = \"inputs/data/arithmetic_alpaca.json\"\ntemplate = \"default\"\n";
  return {
      {"ddp cp 2", "ddp", "", "cp = 2\n", 2, 1, 2},
      {"fsdp2 cp 2", "fsdp2", "", "cp = 2\n", 2, 1, 2},
      {"fsdp2 cp 2, checkpointing", "fsdp2", "gradient_checkpointing = true\n", "cp = 2\n", 2, 1, 2},
      {"fsdp cp 2", "fsdp", "", "cp = 2\n", 2, 1, 2},
      {"ZeRO-3 cp 2", "deepspeed", "", "cp = 2\n", 2, 1, 2},
      {"ddp cp 2, LoRA", "ddp", "finetuning_type = \"lora\"\nlora_rank = 4\n", "cp = 2\n", 2, 1, 2},
      {"fsdp2 cp 2, sft with neat packing", "fsdp2", sft + "packing = true\nneat_packing = true\n", "cp = 2\n", 2, 1, 2},
      {"ddp cp 2, sft, cutoff 31 (chunks padded)", "ddp", sft, "cp = 2\n", 2, 1, 2, 31},
      {"fsdp2 cp 2, pt, cutoff 31 (chunks padded)", "fsdp2", "", "cp = 2\n", 2, 1, 2, 31},
      {"fsdp2 dp_shard 2 x cp 2", "fsdp2", "", "dp_shard = 2\ncp = 2\n", 4, 2, 2},
      {"fsdp2 HSDP dp_replicate 2 x cp 2", "fsdp2", "", "dp_replicate = 2\ndp_shard = 1\ncp = 2\n", 4, 2, 2},
      {"ddp dp 2 x cp 2, sft with neat packing", "ddp", sft + "packing = true\nneat_packing = true\n", "cp = 2\n", 4, 2, 2},
      {"ddp cp 4", "ddp", "", "cp = 4\n", 4, 1, 4},
      {"fsdp2 cp 4, 2 kv heads (repeated per query head)", "fsdp2", "", "cp = 4\n", 4, 1, 2},
      {"megatron cp 2", "megatron", "", "cp = 2\n", 2, 1, 2},
      {"megatron tp 2 x cp 2 (1 kv head per tp rank, repeated)", "megatron", "", "tp = 2\ncp = 2\n", 4, 1, 2},
      {"megatron tp 2 sp x cp 2, cutoff 30", "megatron", "", "tp = 2\ncp = 2\n[dist_config]\nsequence_parallel = true\n", 4, 1,
       4, 30},
      {"megatron pp 2 x cp 2, sft with neat packing", "megatron", sft + "packing = true\nneat_packing = true\n",
       "pp = 2\ncp = 2\n", 4, 1, 2},
      {"megatron dp 2 x cp 2, distributed optimizer", "megatron", "",
       "cp = 2\n[dist_config]\nuse_distributed_optimizer = true\n", 4, 2, 2},
      {"megatron cp 2, ZeRO-3 over dp_shard x cp", "megatron", "",
       "cp = 2\n[dist_config]\ndata_parallel_sharding_strategy = \"optim_grads_params\"\n", 2, 1, 2},
      {"megatron tp 2 x dp_shard 2 x cp 2, ZeRO-2, checkpointing", "megatron", "gradient_checkpointing = true\n",
       "tp = 2\ncp = 2\n[dist_config]\ndata_parallel_sharding_strategy = \"optim_grads\"\n", 8, 2, 2},
      {"megatron tp 2 x cp 2 x pp 2, checkpointing", "megatron", "gradient_checkpointing = true\n",
       "tp = 2\ncp = 2\npp = 2\n", 8, 1, 2},
      // Ring attention.
      {"ring: ddp cp 2", "ddp", "", "cp = 2\n" + ring, 2, 1, 2},
      {"ring: fsdp2 cp 2, checkpointing, cutoff 31", "fsdp2", "gradient_checkpointing = true\n", "cp = 2\n" + ring, 2, 1, 2, 31},
      {"ring: ddp cp 2, sft with neat packing", "ddp", sft + "packing = true\nneat_packing = true\n", "cp = 2\n" + ring, 2, 1, 2},
      {"ring: ZeRO-3 cp 2, LoRA", "deepspeed", "finetuning_type = \"lora\"\nlora_rank = 4\n", "cp = 2\n" + ring, 2, 1, 2},
      {"ring: fsdp2 cp 4", "fsdp2", "", "cp = 4\n" + ring, 4, 1, 2},
      {"ring: fsdp2 dp_shard 2 x cp 2, sft", "fsdp2", sft, "dp_shard = 2\ncp = 2\n" + ring, 4, 2, 2},
      {"ring: megatron tp 2 sp x cp 2", "megatron", "", "tp = 2\ncp = 2\n" + ring + "sequence_parallel = true\n", 4, 1, 2},
      {"ring: megatron pp 2 x cp 2, neat packing", "megatron", sft + "packing = true\nneat_packing = true\n",
       "pp = 2\ncp = 2\n" + ring, 4, 1, 2},
      {"ring: megatron tp 2 x cp 2 x pp 2", "megatron", "", "tp = 2\ncp = 2\npp = 2\n" + ring, 8, 1, 2},
  };
}

TEST(ContextParallel, EveryEngineMatchesTheOneRankRun) {
  const int n = world().size();
  if (n != 2 && n != 4 && n != 8) GTEST_SKIP() << "runs at 2, 4 and 8 ranks";
  at::set_num_threads(1);
  MpiCommunicator self(MPI_COMM_SELF, "self", false);
  for (const Case& c : cases()) {
    if (c.ranks != n) continue;
    SCOPED_TRACE(c.label);
    const int micro = 2, accum = kGlobal / (micro * c.dp);
    const auto reference = steps_of(run_toml("none", micro, kGlobal / micro, c.kv_heads, c.cutoff, c.top), self);
    const std::string own = c.engine == "deepspeed" ? "deepspeed = \"inputs/ds_z3_config.json\"\n" : "";
    const auto got = steps_of(run_toml(c.engine, micro, accum, c.kv_heads, c.cutoff, own + c.top + "[mesh]\n" + c.mesh), world());
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double tol = i == 0 ? 1e-6 : 1e-5;
      EXPECT_NEAR(got[i].first, reference[i].first, tol * std::abs(reference[i].first)) << c.label << " step " << i + 1;
      EXPECT_NEAR(got[i].second, reference[i].second, 1e-5 * std::abs(reference[i].second))
          << c.label << " gradient norm, step " << i + 1;
    }
  }
}

// Per micro-batch and decoder layer, Ulysses exchanges q, k, v and the attention output forward
// and their gradients backward (and q, k, v, o again when a checkpointed layer is recomputed):
// each all-to-all hands the wire this rank's B x chunk x heads x head_dim values; the losses are
// gathered once per micro-batch (B x padded fp32). The cp communicator counts exactly that.
TEST(ContextParallel, BytesPerStepMatchTheExchanges) {
  if (world().size() != 2) GTEST_SKIP() << "runs at 2 ranks";
  for (const bool checkpointing : {false, true}) {
    SCOPED_TRACE(checkpointing ? "checkpointing" : "no checkpointing");
    const int micro = 2, accum = 3, cutoff = 31, cp = 2, layers = 2, heads = 4, kv = 2, head_dim = 8;
    std::unique_ptr<DeviceMesh> mesh;
    auto trainer = make_trainer(run_toml("ddp", micro, accum, kv, cutoff,
                                         std::string(checkpointing ? "gradient_checkpointing = true\n" : "") + "[mesh]\ncp = 2\n"),
                                world(), mesh);
    Communicator& group = mesh->device_comm(MeshDim::CP);
    group.reset_stats();
    trainer->step();
    const std::uint64_t padded = (cutoff + cp - 1) / cp * cp, chunk = padded / cp;
    const std::uint64_t passes = checkpointing ? 3 : 2;  // forward, backward (+ the recomputed forward)
    const std::uint64_t per_layer = passes * micro * chunk * head_dim * (2 * heads + 2 * kv) * 4;
    EXPECT_EQ(group.stats()[CollKind::AllToAll].calls, static_cast<std::uint64_t>(accum * layers * passes * 4));
    EXPECT_EQ(group.stats()[CollKind::AllToAll].bytes, accum * layers * per_layer);
    EXPECT_EQ(group.stats()[CollKind::AllGather].calls, static_cast<std::uint64_t>(accum));
    EXPECT_EQ(group.stats()[CollKind::AllGather].bytes, accum * micro * padded * 4);
  }
}

// Ring attention at cp 2, per micro-batch and decoder layer: forward passes the key/value block on
// n - 1 times (2 x B x chunk x heads x head_dim values: the kv heads repeated per query head),
// backward the block with its gradient n - 1 times (twice that) and the gradient home once;
// checkpointing adds a forward.
TEST(ContextParallel, RingBytesPerStepMatchTheShifts) {
  if (world().size() != 2) GTEST_SKIP() << "runs at 2 ranks";
  for (const bool checkpointing : {false, true}) {
    SCOPED_TRACE(checkpointing ? "checkpointing" : "no checkpointing");
    const int micro = 2, accum = 3, cutoff = 31, n = 2, layers = 2, heads = 4, head_dim = 8;
    std::unique_ptr<DeviceMesh> mesh;
    auto trainer = make_trainer(run_toml("ddp", micro, accum, 2, cutoff,
                                         std::string(checkpointing ? "gradient_checkpointing = true\n" : "") +
                                             "[mesh]\ncp = 2\n[dist_config]\ncp_mode = \"ring\"\n"),
                                world(), mesh);
    Communicator& group = mesh->device_comm(MeshDim::CP);
    group.reset_stats();
    trainer->step();
    const std::uint64_t padded = 32, chunk = padded / n, forwards = checkpointing ? 2 : 1;
    const std::uint64_t block = 2ull * micro * chunk * heads * head_dim * 4;  // k and v, fp32
    const std::uint64_t shifts = forwards * (n - 1) + (n - 1) + 1;
    const std::uint64_t bytes = forwards * (n - 1) * block + (n - 1) * 2 * block + block;
    EXPECT_EQ(group.stats()[CollKind::Send].calls, static_cast<std::uint64_t>(accum * layers) * shifts);
    EXPECT_EQ(group.stats()[CollKind::Send].bytes, accum * layers * bytes);
    EXPECT_EQ(group.stats()[CollKind::Recv].bytes, accum * layers * bytes);
    EXPECT_EQ(group.stats()[CollKind::AllToAll].calls, 0u);
  }
}

}  // namespace
}  // namespace lft
