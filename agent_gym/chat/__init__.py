"""Chat templates and the no-drift context: incremental prompt ids, the conformance check.

Where models and tokenizers come from (GGUF tokenizers, the template-matrix families) and the env-side
chat backends of judges and simulated users live in :mod:`agent_gym.models`, below this package."""
