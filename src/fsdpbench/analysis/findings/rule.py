"""One documented rule: the row of the rules table and the function that checks it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from fsdpbench.analysis.findings.records import Finding, RuleInput


@dataclass(frozen=True)
class Rule:
    """One documented rule: its id, when it fires, its severity, the action it recommends, its check."""

    id: str
    fires_when: str
    severity: str
    action: str
    check: Callable[[RuleInput], list[Finding]] = field(repr=False, compare=False)
