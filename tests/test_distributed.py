"""The jitted GPT inside DistributedDataParallel and FSDP2 (`fully_shard`), and the GPT through
`torch.compile` with our backend around DDP / inside the FSDP2 recipe: 2 CPU processes on
the gloo backend over loopback, spawned here; 3 AdamW steps on each rank's own batches give the
losses and parameters of eager DDP / FSDP2."""
import socket
import sys
import time
from pathlib import Path

import torch
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import distributed_training  # noqa: E402

TIMEOUT_S = 300     # a hung collective fails the test instead of hanging the suite


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_jitted_gpt_trains_like_eager_under_ddp_and_fsdp2(tmp_path):
    context = mp.spawn(distributed_training.worker, (free_port(), str(tmp_path)),
                       nprocs=distributed_training.WORLD, join=False)
    deadline = time.monotonic() + TIMEOUT_S
    while not context.join(timeout=5):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            raise AssertionError(f"the distributed run took over {TIMEOUT_S} s")
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(distributed_training.WORLD)]
    for kind in ("ddp", "fsdp2"):
        for rank, results in enumerate(ranks):
            eager = results[(kind, False)]
            assert results[(kind, True)]["misses"] == 1
            compiled = results[(kind, "compile")]
            assert compiled["graphs"] > 0 and compiled["kernels"] > 0 and not compiled["refused"]
            for front in (True, "compile"):
                ours = results[(kind, front)]
                where = f"{kind}, {'ir.jit' if front is True else 'torch.compile'}, rank {rank}"
                torch.testing.assert_close(ours["losses"], eager["losses"], rtol=1e-5,
                                           atol=1e-5, msg=lambda m: f"{where}, losses: {m}")
                for name, p in eager["parameters"].items():
                    torch.testing.assert_close(ours["parameters"][name], p, rtol=1e-4,
                                               atol=1e-5, msg=lambda m: f"{where}, {name}: {m}")
        # the ranks saw other batches, yet hold the same parameters: gradients were reduced
        for front in (True, "compile"):
            assert not torch.equal(ranks[0][(kind, front)]["losses"],
                                   ranks[1][(kind, front)]["losses"])
            for name, p in ranks[0][(kind, front)]["parameters"].items():
                torch.testing.assert_close(ranks[1][(kind, front)]["parameters"][name], p,
                                           rtol=0, atol=0)
