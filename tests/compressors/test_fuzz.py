"""Payload fuzzing: mutated bytes decode to the original output or raise PayloadError.

Bit flips, truncations, extensions, header field edits and splices of every registered
compressor's payloads. A mutation whose checksum is left as it was must never decode to
anything new; half the mutations get a recomputed checksum so the field checks behind it are
fuzzed too (those may decode to a different, well-formed output). Never another exception.
scripts/fuzz_payloads.py runs the same with many more mutations."""

from __future__ import annotations

import pytest

import compressors

from .fuzzing import DIFFERENT, REFUSED, SAME, tally

MUTATIONS = 4000


@pytest.mark.parametrize("name", compressors.available())
def test_mutations_decode_to_the_original_or_raise_payload_error(name):
    counts, bad = tally(name, MUTATIONS)
    assert not bad, "\n".join(bad[:20])
    assert sum(counts.values()) == MUTATIONS
    assert counts[(False, REFUSED)] > 0 and counts[(True, REFUSED)] > 0
    assert counts[(False, DIFFERENT)] == 0
    assert counts[(False, SAME)] + counts[(True, SAME)] + counts[(True, DIFFERENT)] > 0 or \
        counts[(False, REFUSED)] + counts[(True, REFUSED)] == MUTATIONS
