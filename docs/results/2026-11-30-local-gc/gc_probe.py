"""Local probe (2-core VM, 2026-11-30): 512 GSM8KTool episodes x 3 runs with the async runner and a scripted
policy, in a process that has imported torch and transformers; the runner's gc stats with and without
gc.freeze() after the envs are built. Run from the repository root:

    python docs/results/2026-11-30-local-gc/gc_probe.py nofreeze
    python docs/results/2026-11-30-local-gc/gc_probe.py freeze

Output of both: output.txt.
"""
import gc, sys, time
import torch, transformers  # the heap of a real rollout process (vLLM adds more)
import gymnasium as gym
import agent_gym
from agent_gym.models import load_tokenizer
from agent_gym.rollout.async_runner import run_episodes_async
sys.path.insert(0, "tests")
from test_async_runner import ContentPolicy, script
tok = load_tokenizer(None)
envs = [gym.make("AgentR1/GSM8KTool-v0", tokenizer=tok, split="test", max_turns=4) for _ in range(512)]
policy = ContentPolicy(tok, script)
script("x<|im_start|>user\nq<|im_end|>", 1)
if sys.argv[1] == "freeze":
    gc.collect(); gc.freeze()
print("objects tracked:", len(gc.get_objects()), "frozen:", gc.get_freeze_count())
for r in range(3):
    res = run_episodes_async(envs, policy, episodes=512, base_seed=r*512, concurrency=512, max_new_tokens=512, generate_in_thread=False)
    s = res.stats
    print(f"{sys.argv[1]}: wall {s['wall_s']:.2f} s, steps {s['steps']}, step p50 {s['step_latency_p50_s']*1e3:.1f} ms p95 {s['step_latency_p95_s']*1e3:.1f} ms, gc {s['gc_s']:.2f} s, collections {s['gc_collections']}, longest {s['gc_longest_s']*1e3:.0f} ms")
