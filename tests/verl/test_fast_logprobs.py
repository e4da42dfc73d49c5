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

MODULE = "agent_gym_verl.fast_logprobs"


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


def test_float32_uses_logsumexp_like_verl():
    torch.manual_seed(1)
    logits = torch.randn(2500, 64, dtype=torch.float32)
    labels = torch.randint(0, 64, (2500,))
    got = fast_logprobs.chunked_logprobs_from_logits(logits, labels)
    torch.testing.assert_close(got, fast_logprobs.verl_logprobs_from_logits_v2(logits, labels), rtol=0, atol=2e-6)
    torch.testing.assert_close(got, torch.log_softmax(logits, -1).gather(-1, labels[:, None])[:, 0], rtol=0, atol=2e-6)
    assert fast_logprobs.chunked_logprobs_from_logits(logits[:0], labels[:0]).shape == (0,)


def test_importing_patches_verls_dispatcher():
    from verl.utils import torch_functional as tf

    assert tf.logprobs_from_logits_v2 is fast_logprobs.chunked_logprobs_from_logits
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
    assert out.stdout.strip().splitlines()[-1] == MODULE
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
        assert ray.get(ray.remote(where).remote(), timeout=240) == MODULE
    finally:
        ray.shutdown()
