"""Write a real verl FSDP checkpoint on CPU: two gloo ranks, FSDP2, verl's own FSDPCheckpointManager.

``python -m tests.rl.fsdp_checkpoint POLICY_DIR OUT_DIR PORT`` loads the policy, shards it over two ranks,
scales every weight by ``SCALE`` (so the checkpoint differs from the policy it came from) and saves
``OUT_DIR/global_step_1/actor`` exactly as verl's trainer does.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist

WORLD_SIZE = 2
SCALE = 0.5
"""Every parameter is multiplied by this before saving."""


def _rank(rank: int, policy_dir: str, out_dir: str, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD_SIZE)
    from omegaconf import OmegaConf
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoModelForImageTextToText
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

    from ragym.rl.models import load_processor

    model = AutoModelForImageTextToText.from_pretrained(policy_dir, dtype=torch.float32)
    with torch.no_grad():
        for param in model.parameters():
            param.mul_(SCALE)
    fully_shard(model, mesh=init_device_mesh("cpu", (WORLD_SIZE,), mesh_dim_names=("fsdp",)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    contents = ["model", "optimizer", "extra"]
    manager = FSDPCheckpointManager(
        model,
        optimizer,
        None,
        processing_class=load_processor(policy_dir),
        checkpoint_config=OmegaConf.create({"save_contents": contents, "load_contents": contents}),
    )
    manager.save_checkpoint(local_path=os.path.join(out_dir, "global_step_1", "actor"), global_step=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    import torch.multiprocessing as mp

    mp.spawn(_rank, args=(sys.argv[1], sys.argv[2], int(sys.argv[3])), nprocs=WORLD_SIZE)
