"""CPU workarounds for LlamaFactory v1, loaded at start-up by every Python process that
tools/v1-reference starts (it puts this folder first on PYTHONPATH, which torchrun's workers
inherit) and active only under LFT_V1_CPU=1. It patches torch at run time; the installed
package is never edited.

What else v1 needs on a CPU at N ranks comes from the environment (tools/v1-reference):
CUDA_VISIBLE_DEVICES="" makes torch.accelerator report none, so v1 picks the "cpu" device, the
gloo backend (helper.get_process_group_backend) and CPU device meshes, all of which work for
FSDP2 and DeepSpeed ZeRO-3; FORCE_TORCHRUN=1 + NPROC_PER_NODE=N, because v1 only relaunches
itself through torchrun when it counts more than one accelerator.
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
