"""CPU workarounds for LlamaFactory v1, loaded at start-up by every Python process that
tools/v1-reference starts (it puts this folder first on PYTHONPATH, which torchrun's workers
inherit) and active only under LFT_V1_CPU=1. It patches torch at run time; the installed
package is never edited.

What else v1 needs on a CPU at N ranks comes from the environment (tools/v1-reference):
CUDA_VISIBLE_DEVICES="" makes torch.accelerator report none, so v1 picks the "cpu" device, the
gloo backend (helper.get_process_group_backend) and CPU device meshes, all of which work for
FSDP2 and DeepSpeed ZeRO-3; FORCE_TORCHRUN=1 + NPROC_PER_NODE=N, because v1 only relaunches
itself through torchrun when it counts more than one accelerator.

batching_strategy padding_free and dynamic_padding_free need flash attention in v1; on the CPU
the joined rows get sdpa's per-sample attention instead (the last workaround below).
"""
import os

if os.environ.get("LFT_V1_CPU") == "1":
    import torch

    # v1 calls torch.accelerator.synchronize() after every step when distributed
    # (DistributedInterface.sync). With no accelerator, the CUDA build of torch raises "Found no
    # NVIDIA driver"; on a CPU every op has completed by then, so there is nothing to wait for.
    _synchronize = torch.accelerator.synchronize

    def _synchronize_if_accelerator(device=None):
        if torch.accelerator.is_available():
            _synchronize(device)

    torch.accelerator.synchronize = _synchronize_if_accelerator

    # v1 ends with destroy_process_group() on every rank at once, but rank 0 is still writing the
    # model then; over gloo, a rank that tears its group down while its peer is still in the
    # group's last collectives now and then aborts ("terminate called without an active
    # exception", exit -6) after the training is done. Waiting for all ranks first avoids that.
    import torch.distributed as dist

    _destroy_process_group = dist.destroy_process_group

    def _barrier_then_destroy(group=None):
        if group is None and dist.is_initialized() and dist.get_backend() == "gloo":
            dist.barrier()
        _destroy_process_group(group)

    dist.destroy_process_group = _barrier_then_destroy

    # batching_strategy padding_free / dynamic_padding_free: v1 0.9.5 joins a micro-batch's samples
    # into one row with an all-ones attention mask and position ids restarting at each sample, and
    # demands flash_attention_2, whose varlen kernels read the samples' bounds from those position
    # ids: each sample attends only to itself. The CPU has no flash attention; transformers' sdpa
    # gives the same attention when the row's attention mask is None (it then finds the packed
    # samples in the position ids, masking_utils.find_packed_sequence_indices), which is what
    # LlamaFactory main passes. So, on the CPU: the joined row's mask is None, and the
    # flash_attention_2 check of BaseTrainer._create_batch_generator sees it while the batch
    # generator is made (the model itself keeps sdpa).
    import importlib.abc
    import sys

    def _after_import(module_name, patch):
        class _Finder(importlib.abc.MetaPathFinder):
            def find_spec(self, fullname, path=None, target=None):
                if fullname != module_name:
                    return None
                sys.meta_path.remove(self)
                try:
                    spec = importlib.util.find_spec(fullname)
                finally:
                    sys.meta_path.insert(0, self)
                exec_module = spec.loader.exec_module

                def exec_then_patch(module):
                    exec_module(module)
                    patch(module)

                spec.loader.exec_module = exec_then_patch
                return spec

        sys.meta_path.insert(0, _Finder())

    def _patch_batching(module):
        pack = module._pack_padding_free_samples

        def pack_without_mask(samples, cutoff_len):
            packed = pack(samples, cutoff_len)
            if packed is not None:
                packed["attention_mask"] = None
            return packed

        module._pack_padding_free_samples = pack_without_mask

    def _patch_trainer(module):
        create = module.BaseTrainer._create_batch_generator

        def create_as_under_flash_attention(self):
            config = self.model.config
            kept = config._attn_implementation
            config._attn_implementation = "flash_attention_2"
            try:
                create(self)
            finally:
                config._attn_implementation = kept

        module.BaseTrainer._create_batch_generator = create_as_under_flash_attention

    import importlib.util

    _after_import("llamafactory.v1.plugins.trainer_plugins.batching", _patch_batching)
    _after_import("llamafactory.v1.core.base_trainer", _patch_trainer)
