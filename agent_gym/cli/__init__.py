"""The ``agent-gym`` command line: ``list``, ``play`` and ``eval`` (see :func:`agent_gym.cli.main.main`)."""

from agent_gym.cli.main import main

__all__ = ["main"]
