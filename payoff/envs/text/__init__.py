"""Multi-turn text environments with tools (agents): protocol, tools, formats, tasks."""

from payoff.envs.text.env import Message, StepResult, TextEnv, ToolEnv, exact_match, extract_answer
from payoff.envs.text.formats import ChatTemplateFormat, PlainFormat
from payoff.envs.text.tools import (
    Tool,
    ToolCall,
    ToolInputError,
    calculator,
    call_tool,
    parse_tool_call,
    run_tool_call,
)

__all__ = [
    "ChatTemplateFormat",
    "Message",
    "PlainFormat",
    "StepResult",
    "TextEnv",
    "Tool",
    "ToolCall",
    "ToolEnv",
    "ToolInputError",
    "calculator",
    "call_tool",
    "exact_match",
    "extract_answer",
    "parse_tool_call",
    "run_tool_call",
]
