"""Built-in agents: `demo` (no network), `openai` (OpenAI-compatible tool loop), `python`."""
