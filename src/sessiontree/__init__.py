"""sessiontree: LLM-agent conversations as trees in SQLite."""
