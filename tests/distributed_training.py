"""The worker of tests/test_distributed.py (a module of its own, so that spawned processes import
it without the tests): trains the small GPT on its rank's batches under DistributedDataParallel
and FSDP2 (`fully_shard`), eager, jitted and through `torch.compile(backend=ir.dynamo.Backend())`,
on the gloo backend over loopback, and saves the losses and final parameters."""
import os

import torch
import torch.distributed as dist

WORLD = 2
STEPS = 3


def wrap(model, kind: str, front):
    """(the module to train, the module ir.jit returned or the torch.compile backend): front
    None is eager; True jits the model, then wraps it; "compile" wraps it, then compiles with
    our backend: `torch.compile(DDP(model))` (Dynamo's DDP optimizer splits the graph at bucket
    boundaries), and FSDP2's recipe: each block compiled and sharded, then the model sharded."""
    import ir
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel

    if front == "compile":
        backend = ir.dynamo.Backend()
        if kind == "ddp":
            return torch.compile(DistributedDataParallel(model), backend=backend), backend
        for block in model.blocks:
            block.compile(backend=backend)
            fully_shard(block)
        return fully_shard(model), backend
    module = ir.jit(model, executors=["triton"]) if front else model
    return (DistributedDataParallel(module) if kind == "ddp" else fully_shard(module)), module


def train(kind: str, front, rank: int):
    """(losses, parameters) of STEPS AdamW steps of the GPT wrapped by DDP or fully_shard."""
    import ir
    import triton_exec
    from ir.examples import GPT, GPTConfig, gpt_batch, gpt_loss

    torch.manual_seed(0)            # the same initial parameters on every rank
    model = GPT(GPTConfig(n_layer=1))
    wrapped, module = wrap(model, kind, front)
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
    if front == "compile":
        return {"losses": torch.stack(losses), "parameters": parameters,
                "graphs": len(module.graphs), "kernels": len(triton_exec.last_kernels(module)),
                "refused": [g.name for g in module.graphs if g.refused]}
    stats = ir.cache_stats(module) if front else None
    return {"losses": torch.stack(losses), "parameters": parameters,
            "misses": stats and stats.misses}


def worker(rank: int, port: int, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORLD)
    try:
        results = {(kind, front): train(kind, front, rank)
                   for kind in ("ddp", "fsdp2") for front in (False, True, "compile")}
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()
