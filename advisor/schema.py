"""Schema validation of a DeepSpeed config against schemas/deepspeed-config.schema.json.

(Stub: replaced by the schema work.) ``validate_config`` returns Findings.
"""

from __future__ import annotations

from advisor.findings import Finding
from advisor.loading import LoadedConfig


def validate_config(loaded: LoadedConfig, hf: bool = False) -> list[Finding]:
    """Schema findings for ``loaded`` (unknown keys, types, ranges, removed and misplaced keys)."""
    return []
