"""The env contract: the base env class, its spaces, and prompt templates."""
