"""An OpenAI-compatible endpoint in front of the policy: any agent program that calls a chat API becomes an env.

- :mod:`agent_gym.endpoint.wire`: the chat-completions wire format (requests read and checked, completions
  and errors written);
- :mod:`agent_gym.endpoint.server`: the HTTP server (standard library only) and its per-program sessions;
- :mod:`agent_gym.endpoint.conversation`: a program's requests as prompt token ids, appended without drift
  while the program only appends to its history, rendered afresh (a new segment) when it rewrites it.

``AgentR1/AgentProgram-v0`` (the ``envs/agent_program`` package) is the Gymnasium view built on them:
see docs/agent-programs.md.
"""
