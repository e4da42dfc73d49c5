"""Vectorised token log-probs for verl without flash-attn: the function that replaces verl's row loop.

Without flash-attn (no wheel for the GPU machine's torch), verl computes the log-prob of every label
with ``verl.utils.torch_functional.logprobs_from_logits_v2``, which runs ``log_softmax`` + ``gather``
in a Python loop over the rows of the logits, to bound peak memory. verl 0.9's FSDP engine flattens
each micro-batch to one row per real token before calling it, so the loop runs ~23,000 times per
micro-batch of 64 SmolLM2 samples; each iteration is a handful of tiny kernels forward and backward,
so the actor update is bound by kernel launches, not by arithmetic. Here the same arithmetic runs over
chunks of rows, so the loop has ~``len/CHUNK_ROWS`` iterations: for SmolLM2-135M on one H200 the actor
update of the Countdown run takes 1.7 s instead of 15.6 s per step (docs/performance.md). For bf16/fp16 logits the memory kept for backward is the same as
verl's row loop (one log-softmax output per row either way); chunks add one chunk of temporaries.
With flash-attn (or torch_npu) installed verl never calls the row loop and the function changes nothing.

Importing this module changes nothing: row 1 of :mod:`agent_gym_verl.patches` puts the function in
verl, and :mod:`agent_gym_verl.fast_logprobs`, the module verl's hook imports, installs that row.
"""

from __future__ import annotations

import math
import os

import torch
import torch.nn.functional as F
from verl.utils import torch_functional as _tf

__all__ = ["CHUNK_ROWS", "active_implementation", "chunked_logprobs_from_logits"]

#: Rows (tokens) per vectorised chunk: 1024 x 49,152 bf16 logits is ~100 MB of temporaries.
CHUNK_ROWS = 1024


def _label_logprobs(rows: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``log_softmax(rows)[i, labels[i]]`` for 2-D ``rows``, with verl's choice of formula per dtype."""
    index = labels.unsqueeze(-1)
    if rows.dtype in (torch.float32, torch.float64):
        return rows.gather(-1, index).squeeze(-1) - torch.logsumexp(rows, dim=-1)
    return F.log_softmax(rows, dim=-1).gather(-1, index).squeeze(-1)


def chunked_logprobs_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``log_softmax(logits)[..., labels]`` with verl's numerics, in chunks of about :data:`CHUNK_ROWS` rows.

    As verl's ``logprobs_from_logits_v2``: float32/float64 logits use ``x - logsumexp(x)``, bfloat16 and
    float16 ``log_softmax`` in their own dtype (logsumexp is unstable there). Any leading shape; a
    non-contiguous batch (verl 0.7 passes ``logits[:, -R-1:-1]``) is cut along its first dimension
    before flattening, so only one chunk at a time is copied, never the whole tensor.
    """
    vocab = logits.shape[-1]
    if logits.dim() > 2 and not logits.is_contiguous():
        step = max(1, CHUNK_ROWS // max(1, math.prod(logits.shape[1:-1])))
        pieces = [
            _label_logprobs(logits[i : i + step].reshape(-1, vocab), labels[i : i + step].reshape(-1))
            for i in range(0, max(1, logits.shape[0]), step)
        ]
    else:
        flat_logits, flat_labels = logits.reshape(-1, vocab), labels.reshape(-1)
        pieces = [
            _label_logprobs(flat_logits[i : i + CHUNK_ROWS], flat_labels[i : i + CHUNK_ROWS])
            for i in range(0, max(1, flat_logits.shape[0]), CHUNK_ROWS)
        ]
    return torch.cat(pieces).reshape(labels.shape)


def active_implementation() -> str:
    """What verl's ``logprobs_from_logits`` uses in this process: flash-attn's or torch_npu's cross-entropy
    when available (verl prefers them; this module changes nothing then), else the module of the
    row-loop fallback (``agent_gym_verl.logprobs`` once :mod:`agent_gym_verl.fast_logprobs` installed it)."""
    if _tf.FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE and os.environ.get("VERL_DISABLE_FLASH_ATTN_CE", "0") != "1":
        return "flash-attn cross-entropy"
    if getattr(_tf, "NPU_CROSS_ENTROPY_LOSS_AVAILABLE", False):
        return "torch_npu cross-entropy"
    return _tf.logprobs_from_logits_v2.__module__
