"""agent_gym_verl.fast_logprobs: verl's token log-probs without its per-row Python loop.

Real parts: verl's own ``logprobs_from_logits`` dispatcher and row-loop function, verl's
``VERL_USE_EXTERNAL_MODULES`` hook, and a real Ray worker process.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("verl")

import torch  # noqa: E402

from agent_gym_verl import fast_logprobs  # noqa: E402

MODULE = "agent_gym_verl.fast_logprobs"  # the hook module verl imports
IMPLEMENTATION = "agent_gym_verl.logprobs"  # the module of the function it puts in verl


@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 1030)])  # 2 x 1030 rows crosses a chunk boundary
def test_same_values_and_gradients_as_verls_row_loop_in_bf16(shape):
    torch.manual_seed(0)
    logits = torch.randn(*shape, 300, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, 300, shape)
    expected = fast_logprobs.verl_logprobs_from_logits_v2(logits.reshape(-1, 300), labels.reshape(-1)).reshape(shape)
    (grad_expected,) = torch.autograd.grad(expected.float().pow(2).sum(), logits)
    got = fast_logprobs.chunked_logprobs_from_logits(logits, labels)
    (grad_got,) = torch.autograd.grad(got.float().pow(2).sum(), logits)
    assert got.shape == labels.shape and got.dtype == torch.bfloat16
    assert torch.equal(got, expected)  # bf16: the same log_softmax per row, bit for bit
    assert torch.equal(grad_got, grad_expected)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_a_non_contiguous_batch_like_verl_07s_matches_and_keeps_gradients(dtype):
    """verl 0.7's actor passes ``logits[:, -R-1:-1, :]``: cut along the batch, never copied whole."""
    torch.manual_seed(2)
    full = torch.randn(5, 700, 300, dtype=dtype, requires_grad=True)
    logits = full[:, -601:-1, :]  # 5 x 600 rows: chunks of one sample (1024 // 600)
    labels = torch.randint(0, 300, (5, 600))
    assert not logits.is_contiguous()
    expected = torch.stack([fast_logprobs.verl_logprobs_from_logits_v2(row, lab) for row, lab in zip(logits, labels)])
    (grad_expected,) = torch.autograd.grad(expected.double().pow(2).sum(), full)
    got = fast_logprobs.chunked_logprobs_from_logits(logits, labels)
    (grad_got,) = torch.autograd.grad(got.double().pow(2).sum(), full)
    torch.testing.assert_close(got, expected, rtol=0, atol=0 if dtype != torch.float32 else 2e-6)
    torch.testing.assert_close(grad_got, grad_expected, rtol=0, atol=0 if dtype != torch.float32 else 1e-6)


def test_empty_input_keeps_the_autograd_graph():
    logits = torch.randn(0, 50, dtype=torch.bfloat16, requires_grad=True)
    out = fast_logprobs.chunked_logprobs_from_logits(logits, torch.zeros(0, dtype=torch.long))
    assert out.shape == (0,) and out.requires_grad
    out.sum().backward()
    assert logits.grad.shape == (0, 50)


def test_float32_uses_logsumexp_like_verl():
    torch.manual_seed(1)
    logits = torch.randn(2500, 64, dtype=torch.float32)
    labels = torch.randint(0, 64, (2500,))
    got = fast_logprobs.chunked_logprobs_from_logits(logits, labels)
    torch.testing.assert_close(got, fast_logprobs.verl_logprobs_from_logits_v2(logits, labels), rtol=0, atol=2e-6)
    torch.testing.assert_close(got, torch.log_softmax(logits, -1).gather(-1, labels[:, None])[:, 0], rtol=0, atol=2e-6)
    (g_got,) = torch.autograd.grad(fast_logprobs.chunked_logprobs_from_logits(logits.requires_grad_(), labels).sum(), logits)
    (g_ref,) = torch.autograd.grad(torch.log_softmax(logits, -1).gather(-1, labels[:, None]).sum(), logits)
    torch.testing.assert_close(g_got, g_ref, rtol=0, atol=1e-6)


def test_importing_patches_verls_dispatcher():
    from verl.utils import torch_functional as tf

    assert tf.logprobs_from_logits_v2 is fast_logprobs.chunked_logprobs_from_logits
    expected = "flash-attn cross-entropy" if tf.FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE else IMPLEMENTATION
    assert fast_logprobs.active_implementation() == expected
    assert fast_logprobs.verl_logprobs_from_logits_v2.__module__ == "verl.utils.torch_functional"
    if not tf.FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE:  # the machines this is for: no flash-attn
        logits = torch.randn(4, 10, dtype=torch.bfloat16)
        labels = torch.tensor([1, 2, 3, 9])
        assert torch.equal(tf.logprobs_from_logits(logits, labels), fast_logprobs.chunked_logprobs_from_logits(logits, labels))


def test_verls_external_modules_hook_installs_it_in_a_fresh_process():
    code = "import verl.utils.torch_functional as tf; print(tf.logprobs_from_logits_v2.__module__)"
    env = {**os.environ, "VERL_USE_EXTERNAL_MODULES": MODULE}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == IMPLEMENTATION
    env.pop("VERL_USE_EXTERNAL_MODULES")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.stdout.strip().splitlines()[-1] == "verl.utils.torch_functional"  # not without the hook


def test_ray_workers_inherit_the_hook(monkeypatch):
    """verl's actor workers are Ray processes: the variable set before ``ray.init`` reaches them."""
    import ray

    monkeypatch.setenv("VERL_USE_EXTERNAL_MODULES", MODULE)

    def where() -> str:
        import verl.utils.torch_functional as tf

        return tf.logprobs_from_logits_v2.__module__

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        assert ray.get(ray.remote(where).remote(), timeout=240) == IMPLEMENTATION
    finally:
        ray.shutdown()
