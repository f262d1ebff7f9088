# A thin wrapper over CMake. `make run` and `make test` install what is missing first.
BUILD ?= build
JOBS ?= $(shell nproc)
TORCH_DIR ?= $(CURDIR)/.venv/lib/python3.11/site-packages/torch/share/cmake/Torch
CMAKE_FLAGS ?=
CTEST_FLAGS ?=
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1

.PHONY: sft-moe all deps python-env v1-env build run sft bench bench-real plan-check test test-fast check docs clean

all: build

deps:
	@tools/install-deps

$(BUILD)/CMakeCache.txt:
	@tools/install-deps
	cmake -S . -B $(BUILD) -DTorch_DIR=$(or $(Torch_DIR),$(TORCH_DIR)) $(CMAKE_FLAGS)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# transformers & co. in .venv, for the tests that compare with them (quick when present).
python-env: $(BUILD)/CMakeCache.txt
	@tools/install-python-env

# LlamaFactory v1 itself (llamafactory 0.9.5 beside the project's torch), for job_v1_parity.
v1-env: python-env
	@tools/install-v1-env

# ctest, then tools/test-budget: the ten slowest tests, each label's sum, and a warning when the
# whole suite took longer than its budget on this machine's CPU kind (a failure with
# TEST_BUDGET=strict; docs/testing.md).
# tools/slurm-local tidy first: a socket left by a munged that is gone (the Slurm tests start
# one) makes every mpirun wait ~2.2 s for it.
CTEST_TIMED = tools/slurm-local tidy; start=$$(date +%s); status=0; rm -f $(BUILD)/Testing/last-run.xml; \
	(cd $(BUILD) && ctest --output-on-failure --output-junit Testing/last-run.xml -j $(JOBS) $(1) $(CTEST_FLAGS)) \
	|| status=$$?; tools/test-budget $(BUILD) $$(( $$(date +%s) - start )) || status=1; exit $$status

# Every test: unit, multi-rank (1-8 ranks) and whole-job. None is skipped for want of the Python
# environment: it is installed first.
test: build python-env v1-env
	@$(call CTEST_TIMED,)

# The quick loop while developing: everything but the tests labelled slow.
test-fast: build python-env
	@$(call CTEST_TIMED,-LE slow)

# The main job: the bundled example on 2 ranks (README, "What make run does"). Builds lftrain only.
run: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS) --target lftrain
	mpirun --oversubscribe -np 2 $(BUILD)/lftrain inputs/run.toml

# The SFT example: lftrain writes the tiny Llama 3-style model, then fine-tunes it (alpaca data,
# llama3 template) on 2 ranks. `make sft SFT_DATA=path/to/your_alpaca.json` trains on your file.
SFT_DATA ?= inputs/data/arithmetic_alpaca.json
sft: build
	$(BUILD)/lftrain --init-model output/tiny-llama3 --tokenizer tests/fixtures/tokenizers/llama3 inputs/tiny_llama3.toml
	mpirun --oversubscribe -np 2 $(BUILD)/lftrain inputs/sft_alpaca.toml train_dataset=$(SFT_DATA)

# The mixture-of-experts example: lftrain writes a tiny Qwen3-MoE, then fine-tunes it with its
# auxiliary load-balancing loss on FSDP2, 2 ranks (docs/moe.md).
sft-moe: build
	$(BUILD)/lftrain --init-model output/tiny-qwen3-moe --tokenizer tests/fixtures/tokenizers/llama3 inputs/tiny_qwen3_moe.toml
	mpirun --oversubscribe -np 2 $(BUILD)/lftrain inputs/sft_moe.toml train_dataset=$(SFT_DATA)

# lftrain and PyTorch side by side on the benchmark model (docs/performance.md).
bench: build
	.venv/bin/python tools/bench/run.py --build $(BUILD)
	.venv/bin/python tools/bench/finetuning.py --build $(BUILD)
	.venv/bin/python tools/bench/fp8.py --build $(BUILD)
	.venv/bin/python tools/bench/moe.py --build $(BUILD)
	.venv/bin/python tools/bench/context_parallel.py --build $(BUILD)
	.venv/bin/python tools/bench/checkpoint.py $(BUILD)
	.venv/bin/python tools/bench/real_size.py --build $(BUILD) --dtypes bf16,fp32

# Qwen3-0.6B at its real shape, 2 ranks: lftrain's engines beside PyTorch FSDP2 and LlamaFactory v1
# (docs/performance.md, "Real size"). About half an hour on 2 cores.
bench-real: build v1-env
	.venv/bin/python tools/bench/real_size.py --build $(BUILD) --dtypes bf16,fp32

# `lftrain --plan` against steps measured across two namespace hosts (root; docs/plan.md).
plan-check: build
	python3 tools/bench/plan_check.py --build $(BUILD)

# Validates the example run on 2 ranks without training.
check: build
	mpirun --oversubscribe -np 2 $(BUILD)/lftrain --check inputs/run.toml

# Regenerates docs/config.md from the key table.
docs: build
	$(BUILD)/lftrain --help-config --markdown > docs/config.md

clean:
	rm -rf $(BUILD)
