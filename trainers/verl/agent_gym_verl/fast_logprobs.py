"""Vectorised token log-probs for verl without flash-attn: imported, it replaces verl's row loop.

Without flash-attn (no wheel for the GPU machine's torch), verl computes the log-prob of every label
with ``verl.utils.torch_functional.logprobs_from_logits_v2``, which runs ``log_softmax`` + ``gather``
in a Python loop over the rows of the logits, to bound peak memory. verl 0.9's FSDP engine flattens
each micro-batch to one row per real token before calling it, so the loop runs ~23,000 times per
micro-batch of 64 SmolLM2 samples; each iteration is a handful of tiny kernels forward and backward.
On one H200 that loop was the actor update: 17.5 s per step, ~0.19 ms per token, 0.5% MFU
(docs/results/gpu-runs.md). Here the same arithmetic runs over chunks of rows, so the loop has
~``len/CHUNK_ROWS`` iterations. The memory kept for backward is the same as verl's row loop: one
log-softmax output per row either way.

Use it in every verl process, Ray workers included, through verl's own hook, which imports the modules
it names on ``import verl``::

    export VERL_USE_EXTERNAL_MODULES=agent_gym_verl.fast_logprobs

(the run scripts in ``examples/`` do). Importing this module patches ``verl.utils.torch_functional``
once; :data:`verl_logprobs_from_logits_v2` keeps verl's function.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from verl.utils import torch_functional as _tf

__all__ = ["CHUNK_ROWS", "chunked_logprobs_from_logits", "verl_logprobs_from_logits_v2"]

#: Rows (tokens) per vectorised chunk: 1024 x 49,152 bf16 logits is ~100 MB of temporaries.
CHUNK_ROWS = 1024


def chunked_logprobs_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``log_softmax(logits)[..., labels]`` with verl's numerics, in chunks of :data:`CHUNK_ROWS` rows.

    As verl's ``logprobs_from_logits_v2``: float32/float64 logits use ``x - logsumexp(x)``, bfloat16 and
    float16 ``log_softmax`` in their own dtype (logsumexp is unstable there). Any leading shape.
    """
    vocab = logits.shape[-1]
    flat_logits = logits.reshape(-1, vocab)
    flat_labels = labels.reshape(-1)
    pieces = []
    for start in range(0, flat_logits.shape[0], CHUNK_ROWS):
        rows = flat_logits[start : start + CHUNK_ROWS]
        index = flat_labels[start : start + CHUNK_ROWS].unsqueeze(-1)
        if rows.dtype in (torch.float32, torch.float64):
            pieces.append(rows.gather(-1, index).squeeze(-1) - torch.logsumexp(rows, dim=-1))
        else:
            pieces.append(F.log_softmax(rows, dim=-1).gather(-1, index).squeeze(-1))
    if not pieces:
        return flat_logits.new_empty(labels.shape)
    return torch.cat(pieces).reshape(labels.shape)


#: verl's own row-loop function, kept for comparison and tests.
verl_logprobs_from_logits_v2 = getattr(_tf, "_agent_gym_original_logprobs_from_logits_v2", _tf.logprobs_from_logits_v2)
_tf._agent_gym_original_logprobs_from_logits_v2 = verl_logprobs_from_logits_v2
# verl's dispatcher (logprobs_from_logits) looks the name up as a module global at call time.
_tf.logprobs_from_logits_v2 = chunked_logprobs_from_logits
