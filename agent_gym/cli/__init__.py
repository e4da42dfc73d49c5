"""The ``agent-gym`` command line: ``list``, ``play``, ``eval`` and the other core commands, and those the
installed adapters add (see :func:`agent_gym.cli.main.main` and :mod:`agent_gym.commands`)."""

from agent_gym.cli.main import main

__all__ = ["main"]
