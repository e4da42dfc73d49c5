"""Chat context and tokenization: templates, incremental no-drift ids, the conformance check."""
