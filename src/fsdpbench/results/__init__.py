"""The run folder's format (docs/DATA.md): file and folder names, the typed records of summary.json, status.json
and steps.jsonl, and the pure statistics they use. ``run/`` writes it; ``report/`` and ``analysis/`` read it, and
it imports neither (nor torch)."""
