"""Device-side probe: one actor micro-batch of SmolLM2-135M (bf16, sdpa, padding mask), forward + token
log-probs (chunked, as agent_gym_verl.fast_logprobs) + entropy + backward, timed outside verl, to compare
with the ~0.4 s per micro-batch that verl's update takes on the same GPU."""
import sys, time
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM

model = AutoModelForCausalLM.from_pretrained(sys.argv[1], torch_dtype=torch.bfloat16, attn_implementation="sdpa").cuda()
model.train()
g = torch.Generator().manual_seed(0)


def step(B, L, mask, ckpt, entropy):
    ids = torch.randint(0, 49152, (B, L), generator=g).cuda()
    att = torch.ones(B, L, dtype=torch.long).cuda()
    if mask:  # right padding: real lengths between L/2 and L
        lens = torch.randint(L // 2, L + 1, (B,), generator=g)
        for i, n in enumerate(lens.tolist()):
            att[i, n:] = 0
    out = model(input_ids=ids, attention_mask=att, use_cache=False)
    logits = out.logits[:, :-1].reshape(-1, out.logits.shape[-1])
    labels = ids[:, 1:].reshape(-1)
    lp = torch.cat([F.log_softmax(logits[i:i + 1024], -1).gather(-1, labels[i:i + 1024, None]).squeeze(-1)
                    for i in range(0, logits.shape[0], 1024)])
    loss = -(lp * att[:, 1:].reshape(-1)).sum() / att.sum()
    if entropy:
        p = F.softmax(logits.float(), -1)
        loss = loss - 0.0 * (p * logits.float()).sum()
    loss.backward()
    model.zero_grad(set_to_none=True)


for B, L in [(32, 1000), (16, 1000), (64, 550)]:
    for mask in (True, False):
        for ckpt in (False, True):
            if ckpt:
                model.gradient_checkpointing_enable()
            else:
                model.gradient_checkpointing_disable()
            for _ in range(2):
                step(B, L, mask, ckpt, False)
            torch.cuda.synchronize(); t = time.perf_counter()
            for _ in range(5):
                step(B, L, mask, ckpt, False)
            torch.cuda.synchronize(); dt = (time.perf_counter() - t) / 5
            print(f"B={B} L={L} padding_mask={mask} grad_ckpt={ckpt}: {dt*1e3:.0f} ms per micro-batch, {B*L/dt/1e3:.0f}k tokens/s, peak {torch.cuda.max_memory_allocated()/2**30:.1f} GiB", flush=True)
