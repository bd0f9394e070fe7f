"""The worker of tests/test_distributed.py (a module of its own, so that spawned processes import
it without the tests): trains the small GPT on its rank's batches under DistributedDataParallel
and FSDP2 (`fully_shard`), eager and jitted, on the gloo backend over loopback, and saves the
losses and final parameters."""
import os

import torch
import torch.distributed as dist

WORLD = 2
STEPS = 3


def train(kind: str, jitted: bool, rank: int):
    """(losses, parameters) of STEPS AdamW steps of the GPT wrapped by DDP or fully_shard."""
    import ir
    from ir.examples import GPT, GPTConfig, gpt_batch, gpt_loss
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)            # the same initial parameters on every rank
    model = GPT(GPTConfig(n_layer=1))
    module = ir.jit(model, executors=["triton"]) if jitted else model
    wrapped = DistributedDataParallel(module) if kind == "ddp" else fully_shard(module)
    optimizer = torch.optim.AdamW(wrapped.parameters(), lr=1e-3)
    losses = []
    for step in range(STEPS):
        idx, targets = gpt_batch(model.config, 2, 16, seed=100 * rank + step)
        loss = gpt_loss(wrapped(idx), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    parameters = {name: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone()
                  for name, p in model.named_parameters()}
    stats = ir.cache_stats(module) if jitted else None
    return {"losses": torch.stack(losses), "parameters": parameters,
            "misses": stats and stats.misses}


def worker(rank: int, port: int, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORLD)
    try:
        results = {(kind, jitted): train(kind, jitted, rank)
                   for kind in ("ddp", "fsdp2") for jitted in (False, True)}
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()
