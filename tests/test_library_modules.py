"""Third-party code through `ir.jit`, unmodified, against eager: modules whose Python reads
metadata, number arguments and masks on the way (torch.nn's MultiheadAttention with a key padding
mask, transformers' GPT-2 and BERT built from tiny configs with random weights). Outputs and
every parameter's gradient equal eager's (fp32 tolerance), in both cache modes, with the Triton
and the torch executor."""
import copy

import pytest
import torch
import torch.nn as nn
import transformers

import ir
import triton_exec  # noqa: F401  (registers the "triton" executor)

MODES = ["constant values", "symbolic values"]


def multihead_attention():
    x = torch.randn(2, 5, 16)
    mask = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    return nn.MultiheadAttention(16, 4, batch_first=True), (x, x, x), dict(key_padding_mask=mask)


def gpt2():
    """`logits_to_keep=0`: `slice(-n, None) if isinstance(n, int) else n` keeps every position."""
    config = transformers.GPT2Config(vocab_size=128, n_positions=64, n_embd=64, n_layer=1,
                                     n_head=4, bos_token_id=0, eos_token_id=0)
    ids = torch.randint(0, 128, (2, 8), generator=torch.Generator().manual_seed(1))
    return transformers.GPT2LMHeadModel(config), (ids,), dict(use_cache=False)


def bert():
    """Its forward is wrapped by decorators that read `use_cache` from *args or **kwargs as the
    caller passed it (with a padding mask, its mask builder reads the mask's data: refused)."""
    config = transformers.BertConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                     num_hidden_layers=1, num_attention_heads=4,
                                     max_position_embeddings=64)
    ids = torch.randint(0, 128, (2, 8), generator=torch.Generator().manual_seed(1))
    return transformers.BertModel(config), (ids,), dict(token_type_ids=torch.zeros_like(ids))


def first_tensor(out):
    if isinstance(out, tuple):
        return out[0]
    return out.logits if hasattr(out, "logits") else out.last_hidden_state


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("executor", ["triton", "torch"])
@pytest.mark.parametrize("build", [multihead_attention, gpt2, bert])
def test_library_modules_match_eager(build, executor, mode):
    torch.manual_seed(0)
    module, args, kwargs = build()
    module.eval()
    jitted_copy = copy.deepcopy(module)
    jitted = ir.jit(jitted_copy, executors=[executor], cache=mode)
    for step in range(2):
        expected = first_tensor(module(*args, **kwargs))
        actual = first_tensor(jitted(*args, **kwargs))
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
        weights = torch.randn(expected.shape, generator=torch.Generator().manual_seed(step))
        (expected * weights).sum().backward()
        (actual * weights).sum().backward()
    for (name, p), q in zip(module.named_parameters(), jitted_copy.parameters()):
        assert (p.grad is None) == (q.grad is None), name
        if p.grad is not None:
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-4, msg=name)
