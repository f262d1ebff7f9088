// The one table of configuration keys, in documentation order. Validation, `lftrain --help-config`
// and docs/config.md are generated from it: add a key here and nowhere else.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lft/config/schema.h"

namespace lft::config {
namespace {

// A small builder so each key reads as one declaration.
class K {
 public:
  K(std::string path, ValueType type, std::string help) {
    spec_.path = std::move(path);
    spec_.type = type;
    spec_.help = std::move(help);
  }
  K& def(bool v) { return set_default(Value{v}); }
  K& def(int v) { return set_default(Value{std::int64_t{v}}); }
  K& def(double v) { return set_default(Value{v}); }
  K& def(const char* v) { return set_default(Value{std::string(v)}); }
  K& allowed(std::vector<std::string> values) {
    spec_.allowed = std::move(values);
    return *this;
  }
  K& min(double v) {
    spec_.min = v;
    return *this;
  }
  K& max(double v) {
    spec_.max = v;
    return *this;
  }
  K& list() {
    spec_.list = true;
    return *this;
  }
  K& engines(std::vector<std::string> names) {
    spec_.engines = std::move(names);
    return *this;
  }
  K& required() {
    spec_.required_in_table = true;
    return *this;
  }
  K& path(PathCheck check) {
    spec_.path_check = check;
    return *this;
  }
  operator KeySpec() const { return spec_; }  // NOLINT: implicit by design

 private:
  K& set_default(Value v) {
    spec_.default_value = std::move(v);
    return *this;
  }
  KeySpec spec_;
};

constexpr ValueType B = ValueType::Bool;
constexpr ValueType I = ValueType::Int;
constexpr ValueType F = ValueType::Float;
constexpr ValueType S = ValueType::String;

std::vector<KeySpec> build() {
  std::vector<KeySpec> t = {
      // ---- top level: what to train, on what, where ----
      K("distributed", S,
        "Parallel engine (multi-node jobs are launched with srun or mpirun, not Ray)")
          .def("none")
          .allowed(engine_names()),
      K("model_name_or_path", S,
        "Local Hugging Face model folder (config.json, tokenizer, *.safetensors) to start from; "
        "or give an inline [model] table instead")
          .path(PathCheck::ModelFolder),
      K("train_dataset", S,
        "Training data: a file, or a list of files (.json, .jsonl, .txt); read in the format of "
        "dataset_format (or name datasets with `dataset`)")
          .path(PathCheck::File)
          .list(),
      K("dataset", S,
        "Training datasets by name, as LlamaFactory's `dataset`: entries of dataset_dir/"
        "dataset_info.json (file_name, formatting, columns, tags), concatenated in order")
          .list(),
      K("dataset_dir", S, "The folder of dataset_info.json and the files it names")
          .def("data")
          .path(PathCheck::Directory),
      K("eval_dataset", S,
        "Evaluation datasets by name (entries of dataset_info.json), instead of val_size")
          .list(),
      K("max_samples", I, "Use only the first this many records of each dataset file").min(1),
      K("tokenizer", S,
        "\"auto\": the tokenizer.json of model_name_or_path (a folder without one is an error), or "
        "the byte tokenizer when training an inline [model]; \"bytes\": the byte tokenizer (256 bytes + "
        "BOS, EOS, PAD) whatever the model")
          .def("auto")
          .allowed({"auto", "bytes"}),
      K("stage", S,
        "\"pt\": pre-training on text (documents with BOS/EOS, packed into cutoff_len); \"sft\": "
        "supervised fine-tuning on conversations through `template`, prompts masked from the loss; "
        "\"dpo\": preference optimisation on pairs (a prompt, a chosen and a rejected answer) with "
        "pref_loss; \"rm\": a reward model on the same pairs (LlamaFactory's classic stage rm: TRL's value "
        "head scores each sequence's last token, loss -log sigmoid(chosen - rejected))")
          .def("pt")
          .allowed({"pt", "sft", "dpo", "rm"}),
      K("dataset_format", S,
        "Record format of train_dataset; auto decides from each file's first record and logs it")
          .def("auto")
          .allowed({"auto", "alpaca", "sharegpt", "messages", "text"}),
      K("template", S,
        "Chat template for stage = \"sft\": the classic trainer's (default, llama3, qwen, mistral), "
        "LlamaFactory v1 0.9.5's (qwen3_nothink, qwen3, chatml: each message rendered and trained as "
        "v1 renders it, the assistant header included, sequences cut at cutoff_len), or \"model\": the "
        "model folder's own Jinja chat template (or custom_chat_template, else ChatML) as LlamaFactory "
        "main's v1 renders it (one example per trained answer, everything after the generation prompt "
        "trained; a v1 file without template)")
          .def("default")
          .allowed({"default", "llama3", "qwen", "mistral", "qwen3_nothink", "qwen3", "chatml", "model"}),
      K("custom_chat_template", S,
        "template = \"model\": a Jinja chat template used in place of the model folder's (LlamaFactory "
        "main's v1 key)"),
      K("packing", B, "Pack several samples into each cutoff_len sequence").def(false),
      K("pad_to_multiple_of", I,
        "Pad each micro-batch to its longest sequence rounded up to a multiple of this (as "
        "LlamaFactory); 0: pad every sequence to cutoff_len")
          .def(8)
          .min(0),
      K("neat_packing", B,
        "Packing with attention kept within each sample and positions restarted (implies packing)")
          .def(false),
      K("val_size", F,
        "Held-out share of the sequences for an eval loss: a fraction < 1, or a count >= 1; 0: none")
          .def(0.0)
          .min(0),
      K("eval_steps", I,
        "Eval loss every this many steps when val_size > 0 or eval_dataset is set; 0: only at the end")
          .def(0)
          .min(0),
      K("tokenized_path", S,
        "Cache of the tokenized sequences (a file, or a folder for tokenized.lftok): written once, "
        "reused while the data, tokenizer and options are unchanged"),
      K("output_dir", S, "Directory for checkpoints, logs and the final model").def("output"),
      K("deepspeed", S, "DeepSpeed JSON config file; required with distributed = \"deepspeed\"")
          .path(PathCheck::File)
          .engines({"deepspeed"}),
      K("fp8", B,
        "Float8 linears (torchao's tensorwise recipe): the decoder layers' linears compute in e4m3/e5m2 "
        "with dynamic per-tensor scales; master weights fp32. Engines none, ddp, fsdp2, megatron")
          .def(false),
      K("fp8_enable_fsdp_float8_all_gather", B,
        "fsdp2 (or megatron with data_parallel_sharding_strategy optim_grads_params) with fp8: each rank "
        "casts its shard of a float8 linear's weight to e4m3 with the whole weight's scale and the "
        "all-gather moves one byte an element")
          .def(false)
          .engines({"fsdp2", "megatron"}),
      // ---- which parameters train (LlamaFactory's finetuning_args) ----
      K("finetuning_type", S,
        "\"full\": every parameter trains; \"freeze\": only the layers and modules the freeze_* "
        "keys choose; \"lora\": low-rank adapters beside the lora_target linears, the base frozen")
          .def("full")
          .allowed({"full", "freeze", "lora"}),
      K("lora_rank", I, "LoRA: the adapters' rank r").def(8).min(1),
      K("lora_alpha", I, "LoRA: the scale numerator (scaling = alpha / r); default 2 x lora_rank").min(1),
      K("lora_dropout", F, "LoRA: dropout on the adapters' input while training").def(0.0).min(0).max(0.999),
      K("lora_target", S,
        "LoRA: \"all\" (every linear of the decoder layers) or module names (q_proj, k_proj, v_proj, "
        "o_proj, gate_proj, up_proj, down_proj), a list or one comma-separated string")
          .def("all")
          .list(),
      K("additional_target", S,
        "LoRA: modules trained whole beside the adapters (embed_tokens, lm_head, norm), saved with them")
          .list(),
      K("use_rslora", B, "LoRA: rank-stabilised scaling alpha / sqrt(r)").def(false),
      K("use_dora", B,
        "LoRA: DoRA (PEFT's use_dora): a trained magnitude per output row of each adapted linear, starting at the "
        "base weight's row norms; not with mesh.tp > 1 or fp8")
          .def(false),
      K("quantization_bit", I,
        "LoRA over a quantized base (QLoRA): 4 quantizes every linear of the decoder layers to 4 bits at load, "
        "as bitsandbytes (8 is refused: LLM.int8 training is not built); 0: no quantization")
          .def(0)
          .min(0)
          .max(8),
      K("quantization_type", S, "QLoRA: bitsandbytes' 4-bit data type, nf4 or fp4").def("nf4").allowed({"nf4", "fp4"}),
      K("double_quantization", B, "QLoRA: quantize the 4-bit blocks' absmax values again, to 8 bits (bitsandbytes)")
          .def(true),
      K("quantization_method", S, "QLoRA: the quantization library; bnb (bitsandbytes' formats) only")
          .def("bnb")
          .allowed({"bnb"}),
      K("moe_aux_loss_coef", F,
        "A mixture of experts (qwen3_moe, qwen2_moe, mixtral): the auxiliary load-balancing loss's "
        "coefficient, as LlamaFactory's key: when non-zero it sets config.json's router_aux_loss_coef "
        "and output_router_logits = true; unset or 0: config.json's own")
          .min(0),
      K("moe_expert_capacity_factor", F,
        "A mixture of experts: each expert takes at most ceil(rows x k / experts x factor) of the rows a "
        "layer routes in one forward on a rank, the rest of its rows dropped (their weight lost, as "
        "Megatron's key; the log's expert_dropped counts them); unset or 0: dropless, every row reaches its k experts")
          .min(0),
      K("moe_token_drop_policy", S,
        "With moe_expert_capacity_factor: which of an expert's rows it keeps: probs (its highest routing "
        "weights) or position (its first rows in token order), as Megatron's key")
          .def("probs")
          .allowed({"probs", "position"}),
      K("adapter_name_or_path", S,
        "LoRA: a PEFT adapter folder (adapter_config.json, adapter_model.safetensors) to start from")
          .path(PathCheck::Directory),
      K("freeze_trainable_layers", I,
        "freeze: train the last n decoder layers (n > 0) or the first -n (n < 0)")
          .def(2),
      K("freeze_trainable_modules", S,
        "freeze: the modules of those layers that train: \"all\" or names (self_attn, mlp, "
        "input_layernorm, post_attention_layernorm)")
          .def("all")
          .list(),
      K("freeze_extra_modules", S,
        "freeze: modules outside the decoder layers that train too (embed_tokens, norm, lm_head)")
          .list(),
      // ---- preference training (stage = "dpo"; LlamaFactory's finetuning_args) ----
      K("pref_beta", F, "dpo: the beta of the preference loss (the reward scale)").def(0.1).min(0),
      K("pref_loss", S,
        "dpo: sigmoid (DPO), hinge, ipo (on per-token mean log-probabilities), orpo and simpo "
        "(reference-free: no reference model)")
          .def("sigmoid")
          .allowed({"sigmoid", "hinge", "ipo", "orpo", "simpo"}),
      K("pref_ftx", F, "dpo: weight of the SFT loss (per-token mean NLL of the chosen answer) added to the preference loss")
          .def(0.0)
          .min(0),
      K("simpo_gamma", F, "dpo with pref_loss = \"simpo\": the target reward margin").def(0.5),
      K("dpo_label_smoothing", F, "dpo with pref_loss = \"sigmoid\": robust DPO's label smoothing, in [0, 0.5]")
          .def(0.0)
          .min(0)
          .max(0.5),
      K("ld_alpha", F,
        "dpo: LD-DPO (LlamaFactory's ld_alpha): the policy's tokens of an answer beyond the length of the shorter "
        "answer of its pair weigh ld_alpha in its log-probability (the reference's all weigh 1); unset: off")
          .min(1e-6),
      K("rm_head", S,
        "rm: the reward model's head: \"value_head\" (TRL's v_head.summary beside the LM head, saved as "
        "value_head.safetensors: LlamaFactory 0.9.5's stage rm) or \"score\" (transformers' "
        "...ForTokenClassification with one label, no LM head, saved with the model: LlamaFactory main's v1 "
        "model_class: cls; set by such files)")
          .def("value_head")
          .allowed({"value_head", "score"}),
      K("pref_loss_weighting", S,
        "dpo and rm: how a step's pairs weigh in its loss: \"pairs\" (its mean over the global batch's pairs: TRL, "
        "LlamaFactory 0.9.5), or \"tokens\" (each micro-batch's mean pair loss weighs the micro-batch's trained "
        "tokens over the step's: LlamaFactory main's v1 trainer; set by its v1 files)")
          .def("pairs")
          .allowed({"pairs", "tokens"}),
      K("ref_model", S,
        "dpo: the reference model's Hugging Face folder (default: the policy's starting weights; with LoRA, "
        "the base model without the adapters)")
          .path(PathCheck::Directory),
      // ---- optimisation ----
      K("per_device_train_batch_size", I, "Sequences per rank in one micro-step").def(1).min(1),
      K("gradient_accumulation_steps", I, "Micro-steps accumulated into one optimizer step")
          .def(1)
          .min(1),
      K("global_batch_size", I,
        "Sequences per optimizer step over all data-parallel ranks (LlamaFactory v1's key): sets "
        "gradient_accumulation_steps = global_batch_size / (data-parallel size x "
        "per_device_train_batch_size), which must divide")
          .min(1),
      K("ray_num_workers", I,
        "LlamaFactory's Ray worker count: under MPI one worker is one rank, so it must equal the "
        "number of ranks")
          .min(1),
      K("sample_order", S,
        "\"global\": one order of the samples whatever the layout (any two layouts with the same "
        "global batch train on the same samples); \"per_rank\": torch's DistributedSampler order "
        "(a torch.randperm seeded seed + epoch, dealt to the data-parallel ranks in turn), as "
        "LlamaFactory v1, which depends on the data-parallel size")
          .def("global")
          .allowed({"global", "per_rank"}),
      K("batching_strategy", S,
        "\"normal\": per_device_train_batch_size samples a micro-batch; \"dynamic_batching\" "
        "(LlamaFactory v1's): each data-parallel rank cuts its own stream of samples (the per_rank "
        "order of epoch 0, repeated) into micro-batches of at most per_device_train_batch_size x "
        "cutoff_len padded tokens, gradient_accumulation_steps of them a step; needs max_steps; "
        "\"padding_free\" (v1's): the normal micro-batches, each one row of its samples end to end "
        "(attention and positions within each sample); \"dynamic_padding_free\" (v1's): each rank's "
        "stream cut into rows of samples end to end of at most per_device_train_batch_size x cutoff_len "
        "tokens; needs max_steps")
          .def("normal")
          .allowed({"normal", "dynamic_batching", "padding_free", "dynamic_padding_free"}),
      K("learning_rate", F, "Peak learning rate of AdamW").def(5e-5).min(0),
      K("weight_decay", F, "AdamW decoupled weight decay").def(0.0).min(0),
      K("decay_all_parameters", B,
        "Weight decay on every parameter, norms included (torch's AdamW over all parameters, as "
        "LlamaFactory v1); false: on matrices only, as the Hugging Face Trainer")
          .def(false),
      K("adam_beta1", F, "AdamW beta1 (first-moment decay)").def(0.9).min(0).max(1),
      K("adam_beta2", F, "AdamW beta2 (second-moment decay)").def(0.999).min(0).max(1),
      K("adam_epsilon", F, "AdamW epsilon").def(1e-8).min(0),
      K("use_muon", B,
        "Muon (LlamaFactory's use_muon, Moonlight's): the decoder's matrices take Newton-Schulz-orthogonalised "
        "momentum, the rest (embedding, head, norms, biases, experts) Moonlight's AdamW with adam_beta1/2 and "
        "adam_epsilon; weight_decay on every parameter; every engine")
          .def(false),
      K("muon_momentum", F, "Muon: the SGD momentum of its matrices").def(0.95).min(0).max(1),
      K("muon_nesterov", B, "Muon: Nesterov momentum").def(true),
      K("muon_ns_steps", I, "Muon: Newton-Schulz iterations").def(5).min(1),
      K("muon_adapters", B,
        "Muon: LoRA's A and B take Muon, as the classic trainer's use_muon; false: AdamW, as v1's optim_config")
          .def(true),
      K("max_grad_norm", F, "Gradient clipping norm; 0 disables clipping").def(1.0).min(0),
      K("lr_scheduler_type", S,
        "Learning-rate schedule, as the Hugging Face Trainer's (\"constant\" has no warm-up; "
        "\"constant_with_warmup\" has)")
          .def("linear")
          // transformers' SchedulerType names that optim::LrSchedule implements, in their order
          // (test LrSchedule.TheSchemaAllowsEveryScheduleItBuilds holds the two lists equal).
          .allowed({"linear", "cosine", "cosine_with_restarts", "polynomial", "constant", "constant_with_warmup",
                    "inverse_sqrt", "cosine_with_min_lr", "cosine_warmup_with_min_lr", "warmup_stable_decay"}),
      K("lr_scheduler_kwargs.num_cycles", F, "Cosine schedules: number of half-waves (cosine: 0.5)"),
      K("lr_scheduler_kwargs.power", F, "polynomial: power of the decay (1.0)"),
      K("lr_scheduler_kwargs.lr_end", F, "polynomial: final learning rate (1e-7)"),
      K("lr_scheduler_kwargs.timescale", F, "inverse_sqrt: time scale (warm-up steps, or 10000)"),
      K("lr_scheduler_kwargs.min_lr", F, "cosine_with_min_lr: the floor of the learning rate"),
      K("lr_scheduler_kwargs.min_lr_rate", F, "cosine_with_min_lr: the floor as a fraction of learning_rate"),
      K("lr_scheduler_kwargs.warmup_lr_rate", F, "cosine_warmup_with_min_lr: the first warm-up step's fraction"),
      K("lr_scheduler_kwargs.num_stable_steps", F, "warmup_stable_decay: steps at the peak"),
      K("lr_scheduler_kwargs.num_decay_steps", F, "warmup_stable_decay: steps of decay"),
      K("lr_scheduler_kwargs.min_lr_ratio", F, "warmup_stable_decay: the floor as a fraction of learning_rate"),
      K("warmup_ratio", F, "Fraction of the total steps used for linear warm-up (or warmup_steps)")
          .def(0.0)
          .min(0)
          .max(1),
      K("warmup_steps", I, "Optimizer steps of linear warm-up (or warmup_ratio)").def(0).min(0),
      K("max_steps", I,
        "Total optimizer steps; -1: run num_train_epochs epochs (set one of the two); 0 is refused, except in a "
        "LlamaFactory YAML, where it means -1 as in the Hugging Face Trainer")
          .def(-1)
          .min(-1),
      K("num_train_epochs", F, "Epochs over train_dataset, used when max_steps = -1")
          .def(3.0)
          .min(0),
      K("seed", I, "Random seed (initialisation, data order)").def(42).min(0),
      K("use_cpu", B, "Train on the CPU even where GPUs are present (the Hugging Face Trainer's use_cpu)")
          .def(false),
      K("ranks_per_gpu", I,
        "Ranks that share one GPU: rank i of a node computes on GPU i / ranks_per_gpu (a rank its "
        "launcher bound to fewer GPUs takes one it sees), and the device communicators are MPI "
        "staged through host memory (NCCL refuses two ranks on one device). 1: one rank per GPU, "
        "NCCL; more ranks on one GPU are refused")
          .def(1)
          .min(1),
      K("bf16", B, "bfloat16 mixed precision (not together with fp16)").def(false),
      K("fp16", B,
        "float16 mixed precision (not together with bf16), with dynamic loss scaling: DeepSpeed's "
        "fp16 block with distributed = \"deepspeed\", else its defaults (2^16, window 1000, "
        "hysteresis 2, minimum 1)")
          .def(false),
      K("plot_loss", B,
        "At the end, draw training_loss.png (and training_eval_loss.png) in output_dir, as "
        "LlamaFactory does")
          .def(false),
      K("logging_steps", I, "Log loss and throughput every this many optimizer steps")
          .def(10)
          .min(1),
      K("cutoff_len", I, "Maximum tokens per sequence; longer samples are truncated")
          .def(2048)
          .min(1),
      K("gradient_checkpointing", B, "Recompute activations in the backward pass to save memory")
          .def(false),
      // ---- checkpoints (docs/checkpoint.md) ----
      K("save_strategy", S,
        "When to save checkpoints: \"steps\" (every save_steps and at the end) or \"no\"")
          .def("steps")
          .allowed({"steps", "no"}),
      K("save_steps", I, "Save a checkpoint every this many optimizer steps; 0: only at the end")
          .def(500)
          .min(0),
      K("save_total_limit", I,
        "Keep at most this many checkpoints, deleting the oldest (never the newest complete "
        "one); 0: keep all")
          .def(0)
          .min(0),
      K("resume_from_checkpoint", S,
        "Resume from \"auto\" (the newest complete checkpoint in output_dir, if any) or from a "
        "checkpoint folder"),
      K("checkpoint_format", S,
        "\"shared\": every rank writes its slices into one HDF5 file with MPI-IO; \"per_rank\": "
        "one HDF5 file per rank (for filesystems where shared-file I/O is slow)")
          .def("shared")
          .allowed({"shared", "per_rank"}),
      K("async_checkpoint", B,
        "Periodic saves copy the state to host memory at the step boundary and write it in the "
        "background while training goes on (the end-of-run and stop saves are synchronous)")
          .def(false),
      // ---- robustness and resources ----
      K("comm_timeout", F,
        "Seconds a collective may take; one that does not finish in time aborts the job with a "
        "report")
          .def(600.0)
          .min(0),
      K("setup_timeout", F,
        "Seconds a set-up phase (loading, tokenizing, communicator creation) may take before the "
        "job aborts with a report")
          .def(1800.0)
          .min(0),
      K("comm_progress_us", F,
        "Microseconds between the MPI progress thread's calls while a collective or transfer "
        "is in flight (Open MPI advances them only inside MPI calls, so without the thread a "
        "collective posted during backward mostly runs in its final wait); 0: no thread")
          .def(1000.0)
          .min(0),
      K("fused_kernels", S,
        "Fused CPU kernels for the memory-bound parts of the step: \"all\", \"none\" or a "
        "comma list of rmsnorm, swiglu, rotary, cross_entropy, attention (the blocked "
        "attention's scale, causal mask, softmax and casts; with it the blocked attention serves "
        "fp32 as well as bf16), moe_combine (the routed experts' "
        "weighted outputs summed into their tokens); one pass forward and one backward each; same "
        "arithmetic as the plain formulas, rounded in another order, exp to 20 ulp where the "
        "values are bf16; CPUs with AVX2 and FMA, an AVX-512 build where the CPU has AVX-512 "
        "F/BW/VL/DQ (the start-up report's kernels line names it); CUDA tensors take the plain "
        "formulas")
          .def("all"),
      K("intra_op_threads", I,
        "LibTorch threads per rank; 0: cores on the node / ranks on the node")
          .def(0)
          .min(0),
      K("ddp_bucket_cap_mb", F,
        "Gradient all-reduce bucket size in MiB: ddp's, and megatron's data parallelism's (without "
        "use_distributed_optimizer)")
          .def(25.0)
          .min(0)
          .engines({"ddp", "megatron"}),

      // ---- [mesh]: sizes of the device mesh, the one place every engine reads them from ----
      K("mesh.pp", I, "Pipeline-parallel size").min(-1),
      K("mesh.dp_replicate", I, "Data-parallel replicas (each holds whole parameters)").min(-1),
      K("mesh.dp_shard", I, "Data-parallel shard group size (parameters sharded across it)")
          .min(-1),
      K("mesh.cp", I,
        "Context-parallel size: each sequence split into cp chunks over as many ranks, which share "
        "the parameters (every multi-rank engine; LlamaFactory v1's dist_config.cp_size)")
          .min(-1),
      K("mesh.tp", I, "Tensor-parallel size").min(-1),
      K("mesh.ep", I,
        "Expert-parallel size (mixtures of experts): each MoE layer's experts split over ep ranks "
        "borrowed from dp x cp, which exchange tokens all-to-all; must divide dp_replicate x "
        "dp_shard x cp and the model's experts (ddp, fsdp, fsdp2, deepspeed, megatron)")
          .min(1),

      // ---- [model]: an inline model (Hugging Face config.json names), trained from scratch ----
      K("model.vocab_size", I, "Vocabulary size").min(1).required(),
      K("model.hidden_size", I, "Hidden size; a multiple of num_attention_heads").min(1).required(),
      K("model.intermediate_size", I, "MLP intermediate size").min(1).required(),
      K("model.num_hidden_layers", I, "Number of decoder layers").min(1).required(),
      K("model.num_attention_heads", I, "Attention heads; must divide hidden_size")
          .min(1)
          .required(),
      K("model.num_key_value_heads", I,
        "Key/value heads (grouped-query attention); must divide num_attention_heads; unset: "
        "num_attention_heads")
          .min(1),
      K("model.max_position_embeddings", I, "Longest sequence the position tables cover")
          .def(2048)
          .min(1),
      K("model.rope_theta", F, "RoPE base frequency").def(10000.0).min(0),
      K("model.rms_norm_eps", F, "RMSNorm epsilon").def(1e-6).min(0),
      K("model.tie_word_embeddings", B, "Share the input embedding with the output projection")
          .def(false),

      // ---- [dist_config]: FSDP and FSDP2 options ----
      K("dist_config.mixed_precision", S,
        "Dtype of the gathered parameters and of the compute (gradients are reduced, master "
        "weights and optimizer state kept, in fp32); unset: follows bf16 / fp16, and a value "
        "that contradicts them is an error")
          .def("fp32")
          .allowed({"bf16", "fp16", "fp32"})
          .engines({"fsdp2", "fsdp"}),
      K("dist_config.sharding_strategy", S,
        "FSDP v1 strategy: FULL_SHARD (free gathered units after forward), SHARD_GRAD_OP (keep "
        "them until backward), NO_SHARD (all-reduce, as ddp), HYBRID_SHARD (shard within "
        "[mesh] dp_shard, replicate across dp_replicate)")
          .def("FULL_SHARD")
          .allowed({"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"})
          .engines({"fsdp"}),
      K("dist_config.offload_params", B,
        "Keep sharded parameters and optimizer state in host memory (megatron: with a "
        "data_parallel_sharding_strategy or use_distributed_optimizer, the shards of its data parallelism)")
          .def(false)
          .engines({"fsdp2", "megatron"}),
      K("dist_config.reshard_after_forward", B,
        "Free gathered parameters after forward and gather them again in backward")
          .def(true)
          .engines({"fsdp2"}),
      K("dist_config.pin_memory", B, "Pin the host memory of offloaded parameters")
          .def(false)
          .engines({"fsdp2", "megatron"}),
      K("dist_config.fp8_enable_fsdp_float8_all_gather", B,
        "Gather the weights of float8 linears as e4m3 (one byte an element) with the whole weight's "
        "scale (under megatron tp the amax agreed over tp too); needs fp8 = true, and under megatron "
        "data_parallel_sharding_strategy = \"optim_grads_params\"")
          .def(false)
          .engines({"fsdp2", "megatron"}),

      K("dist_config.cp_mode", S,
        "How [mesh] cp > 1 splits attention: ulysses (all-to-all from sequence chunks to whole "
        "sequences of heads / cp heads and back; heads must divide by cp x tp); ring (key/value "
        "blocks passed around the cp ranks, online softmax; rank i holds pieces i and 2cp-1-i of "
        "2cp for causal balance; any head count)")
          .def("ulysses")
          .allowed({"ulysses", "ring"}),

      // ---- [dist_config]: megatron options (Megatron-LM's names; sizes are in [mesh]) ----
      K("dist_config.sequence_parallel", B,
        "Shard norms and residuals along the sequence across [mesh] tp: all-gather / "
        "reduce-scatter in place of all-reduce (cutoff_len must divide by tp)")
          .def(false)
          .engines({"megatron"}),
      K("dist_config.pipeline_schedule", S,
        "Pipeline schedule over gradient_accumulation_steps micro-batches: 1f1b (at most pp "
        "micro-batches of activations per stage), interleaved_1f1b (virtual stages, smaller "
        "bubble), gpipe (all forwards, then all backwards)")
          .def("1f1b")
          .allowed({"1f1b", "interleaved_1f1b", "gpipe"})
          .engines({"megatron"}),
      K("dist_config.virtual_pipeline_model_parallel_size", I,
        "Model chunks per pipeline stage for interleaved_1f1b (stage s holds layer blocks s, s + "
        "pp, ...)")
          .def(1)
          .min(1)
          .engines({"megatron"}),
      K("dist_config.use_distributed_optimizer", B,
        "Shard the optimizer state (and the fp32 update) across every data-parallel rank "
        "(Megatron-LM's distributed optimizer, ZeRO-1): gradients are reduce-scattered during the "
        "last micro-batch's backward and updated parameters all-gathered under the next forward")
          .def(false)
          .engines({"megatron"}),
      K("dist_config.data_parallel_sharding_strategy", S,
        "What megatron's data parallelism shards over [mesh] dp_shard (x cp), replicated over "
        "dp_replicate (HSDP when both > 1): no_shard (gradients all-reduced), optim (optimizer "
        "state, ZeRO-1), optim_grads (and gradients, ZeRO-2), optim_grads_params (and "
        "parameters, gathered per layer: ZeRO-3 / FSDP); with a sharding strategy the default "
        "mesh puts the data-parallel ranks on dp_shard")
          .def("no_shard")
          .allowed({"no_shard", "optim", "optim_grads", "optim_grads_params"})
          .engines({"megatron"}),
      K("dist_config.decoder_first_pipeline_num_layers", I,
        "Decoder layers on the first pipeline stage; unset: the layers are balanced")
          .min(1)
          .engines({"megatron"}),
      K("dist_config.decoder_last_pipeline_num_layers", I,
        "Decoder layers on the last pipeline stage; unset: the layers are balanced")
          .min(1)
          .engines({"megatron"}),
  };
  return t;
}

}  // namespace

const std::vector<KeySpec>& schema() {
  static const std::vector<KeySpec> table = build();
  return table;
}

}  // namespace lft::config
