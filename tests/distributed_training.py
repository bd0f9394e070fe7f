"""The worker of tests/test_distributed.py (a module of its own, so that spawned processes import
it without the tests): trains the small GPT on its rank's batches, eager and jitted, under
DistributedDataParallel and FSDP2 (`fully_shard`) in each recipe, on the gloo backend over
loopback, and saves the losses, gradients, final parameters and kernel counts."""
import os

import torch
import torch.distributed as dist

WORLD = 2
STEPS = 3
B, T = 2, 16
# name -> (recipe, jitted); each jitted recipe is compared with the eager one of its kind
RECIPES = {
    "ddp": ("ddp", False), "ddp_jit": ("ddp", True),
    # a DDP inside the jitted module: an opaque call, its communication at every call
    "ddp_inside_jit": ("ddp_inside", True),
    "fsdp2": ("fsdp2", False), "fsdp2_jit": ("fsdp2", True),
    "fsdp2_blocks": ("fsdp2_blocks", False),
    # each block jitted, then sharded (fuses inside the blocks), then the model
    "fsdp2_blocks_jit": ("fsdp2_blocks_jitted", True),
    # the blocks sharded first (their hooks make them opaque calls), the whole model jitted
    "fsdp2_blocks_sharded_jit": ("fsdp2_blocks_sharded", True),
    # through torch.compile with our backend: DDP compiled (Dynamo's DDP optimizer splits the
    # graph at bucket boundaries), and FSDP2's recipe: each block compiled and sharded
    "ddp_compile": ("ddp_compile", True), "fsdp2_blocks_compile": ("fsdp2_blocks_compile", True),
}


def wrap(recipe: str, jitted: bool, model):
    """(the module to train, the jitted modules or the torch.compile backend) for a recipe."""
    import ir
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel

    def jit(m):
        return ir.jit(m, executors=["triton"])
    if recipe == "ddp":
        module = jit(model) if jitted else model
        return DistributedDataParallel(module), [module] if jitted else []
    if recipe == "ddp_inside":
        module = jit(Scaled(DistributedDataParallel(model)))
        return module, [module]
    if recipe == "fsdp2":
        module = jit(model) if jitted else model
        return fully_shard(module), [module] if jitted else []
    if recipe == "ddp_compile":
        backend = ir.dynamo.Backend()
        return torch.compile(DistributedDataParallel(model), backend=backend), [backend]
    if recipe == "fsdp2_blocks_compile":
        backend = ir.dynamo.Backend()
        for block in model.blocks:
            block.compile(backend=backend)
            fully_shard(block)
        return fully_shard(model), [backend]
    if recipe == "fsdp2_blocks_jitted":
        blocks = [jit(block) for block in model.blocks]
        for i, block in enumerate(blocks):
            model.blocks[i] = fully_shard(block)
        return fully_shard(model), blocks
    for block in model.blocks:
        fully_shard(block)
    if recipe == "fsdp2_blocks":
        return fully_shard(model), []
    module = jit(model)
    return fully_shard(module), [module]


class Scaled(torch.nn.Module):
    """A module calling a DDP-wrapped model, then an elementwise op (exact: * 1.0) to fuse."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, idx):
        return self.inner(idx) * 1.0


def train(recipe: str, jitted: bool, rank: int):
    """STEPS AdamW steps of the GPT wrapped as the recipe says: losses, gradients (before each
    step), final parameters, the jitted modules' misses and their kernels in the first step."""
    import ir
    import triton_exec
    from ir.examples import GPT, GPTConfig, gpt_batch, gpt_loss

    torch.manual_seed(0)            # the same initial parameters on every rank
    model = GPT(GPTConfig(n_layer=2))
    wrapped, jitted_modules = wrap(recipe, jitted, model)
    optimizer = torch.optim.AdamW(wrapped.parameters(), lr=1e-3)
    losses, grads, kernels = [], [], 0
    for step in range(STEPS):
        idx, targets = gpt_batch(model.config, B, T, seed=100 * rank + step)
        loss = gpt_loss(wrapped(idx), targets)
        optimizer.zero_grad()
        loss.backward()
        if step == 0:
            kernels = sum(len(triton_exec.last_kernels(m)) for m in jitted_modules)
        grads.append(_full({n: p.grad for n, p in model.named_parameters()}))
        optimizer.step()
        losses.append(loss.detach())
    return {"losses": torch.stack(losses), "grads": grads,
            "parameters": _full(dict(model.named_parameters())), "kernels": kernels,
            "misses": [ir.cache_stats(m).misses for m in jitted_modules
                       if not isinstance(m, ir.dynamo.Backend)]}


def _full(tensors: dict) -> dict:
    """name -> a plain tensor (a DTensor gathered whole), detached."""
    return {name: (t.full_tensor() if hasattr(t, "full_tensor") else t).detach().clone()
            for name, t in tensors.items()}


def concatenated_eager():
    """The gradients of single-process eager training on both ranks' batches, concatenated."""
    from ir.examples import GPT, GPTConfig, gpt_batch, gpt_loss

    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    grads = []
    for step in range(STEPS):
        batches = [gpt_batch(model.config, B, T, seed=100 * rank + step) for rank in range(WORLD)]
        idx, targets = (torch.cat(parts) for parts in zip(*batches))
        loss = gpt_loss(model(idx), targets)
        optimizer.zero_grad()
        loss.backward()
        grads.append(_full({n: p.grad for n, p in model.named_parameters()}))
        optimizer.step()
    return grads


def refusal() -> str:
    """The error of ir.jit(DistributedDataParallel(model))."""
    import ir
    from ir.examples import GPT, GPTConfig
    from torch.nn.parallel import DistributedDataParallel
    try:
        ir.jit(DistributedDataParallel(GPT(GPTConfig(n_layer=1))))
    except TypeError as error:
        return str(error)
    return "no error"


def worker(rank: int, port: int, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORLD)
    try:
        results = {name: train(*recipe, rank) for name, recipe in RECIPES.items()}
        results["refusal"] = refusal()
        if rank == 0:
            results["concatenated"] = concatenated_eager()
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()
