"""Tools for LLM-agent environments: definition, parsing of calls, safe execution.

Typical flow inside an environment step::

    parser = get_parser("hermes")  # or "qwen3_coder", "pythonic", a registered format
    executor = ToolExecutor([calculator])
    parsed = parser.parse(assistant_text)
    results = executor.execute(parsed)  # or: await executor.aexecute(parsed)

This package deliberately imports no deep-learning framework, so environments
that only use tools stay lightweight.
"""

from agent_gym.tools.base import Tool, ToolError, tool
from agent_gym.tools.calculator import CalculatorError, calculator, evaluate_arithmetic, format_number
from agent_gym.tools.executor import ERROR_KINDS, ToolExecutor, ToolResult, count_errors
from agent_gym.tools.formats import PARSERS, describe_tools, get_parser, register_parser
from agent_gym.tools.parsing import (
    BaseToolCallParser,
    HermesParser,
    ParsedResponse,
    TaggedBlockParser,
    ToolCall,
    ToolCallError,
    ToolCallParser,
)
from agent_gym.tools.pythonic import PythonicParser
from agent_gym.tools.qwen3_coder import Qwen3CoderParser

__all__ = [
    "ERROR_KINDS",
    "PARSERS",
    "BaseToolCallParser",
    "CalculatorError",
    "HermesParser",
    "ParsedResponse",
    "PythonicParser",
    "Qwen3CoderParser",
    "TaggedBlockParser",
    "Tool",
    "ToolCall",
    "ToolCallError",
    "ToolCallParser",
    "ToolError",
    "ToolExecutor",
    "ToolResult",
    "calculator",
    "count_errors",
    "describe_tools",
    "evaluate_arithmetic",
    "format_number",
    "get_parser",
    "register_parser",
    "tool",
]
