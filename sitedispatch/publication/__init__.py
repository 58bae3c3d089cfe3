"""Publication: deterministic rendering of a revision into immutable route objects, fan-out/fan-in, receipts and
monotonic promotion of the live pointer."""
