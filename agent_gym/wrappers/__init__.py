"""Wrappers for agent envs (opt-in reward shaping, a judge reward for open-ended answers, ...)."""

from agent_gym.wrappers.judge import (
    DEFAULT_RUBRIC,
    HFJudge,
    JudgeError,
    JudgeReward,
    OpenAICompatibleJudge,
    ScriptedJudge,
    VerdictCache,
    default_extract,
    parse_verdict,
)
from agent_gym.wrappers.shaping import RewardShaping

__all__ = [
    "DEFAULT_RUBRIC",
    "HFJudge",
    "JudgeError",
    "JudgeReward",
    "OpenAICompatibleJudge",
    "RewardShaping",
    "ScriptedJudge",
    "VerdictCache",
    "default_extract",
    "parse_verdict",
]
