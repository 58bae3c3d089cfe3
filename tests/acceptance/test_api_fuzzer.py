"""A third party's fuzzer finds nothing unacknowledged: schemathesis, seeded and bounded, against the local API over
real HTTP, as two principals (peers) and as the operator (tests/acceptance/api_fuzzer.py says what it checks;
`make fuzz` runs a longer campaign)."""

from __future__ import annotations

from pathlib import Path

from tests.acceptance.api_fuzzer import acknowledged_without_reason, campaign

MAX_TIME_S = 60  # the principals' pass; the operator's gets a quarter (at least 20 s)
MAX_EXAMPLES = 25


def test_schemathesis_finds_nothing_unacknowledged_and_every_acknowledgement_says_why(tmp_path: Path) -> None:
    assert acknowledged_without_reason() == []
    passes = campaign(tmp_path, max_time_s=MAX_TIME_S, max_examples=MAX_EXAMPLES)
    for result in passes:
        assert result.returncode == 0, f"schemathesis {result.name}:\n{result.output[-12_000:]}"
        assert "Test cases:" in result.output and " generated" in result.output  # it ran, and generated cases
