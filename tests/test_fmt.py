"""fsdpbench.fmt: one glyph for a missing value, binary byte units, and one meaning of "x% slower"."""

from __future__ import annotations

import math

import pytest

from fsdpbench import fmt


@pytest.mark.parametrize("missing", [None, math.nan, math.inf])
def test_every_formatter_shows_a_missing_value_as_the_one_glyph(missing):
    formatters = [
        fmt.fmt,
        fmt.fmt_sig,
        fmt.fmt_pct,
        fmt.fmt_points,
        fmt.fmt_us,
        fmt.fmt_us_as_ms,
        fmt.fmt_count,
        fmt.fmt_bytes,
        fmt.fmt_x,
        fmt.speed_text,
    ]
    assert {f(missing) for f in formatters} == {fmt.MISSING} == {"—"}


def test_bytes_use_binary_units_everywhere():
    assert fmt.fmt_bytes(512) == "512 B"
    assert fmt.fmt_bytes(4096) == "4.00 KiB"
    assert fmt.fmt_bytes(3 * 2**20) == "3.00 MiB"
    assert fmt.fmt_bytes(1.5 * 2**30) == "1.50 GiB"
    assert fmt.fmt_bytes(2 * 2**40) == "2.00 TiB"


def test_times_counts_and_points_carry_the_typographic_minus():
    assert fmt.fmt_us(640.0) == "640 µs" and fmt.fmt_us(12_345.0) == "12.3 ms"
    assert fmt.fmt_us(-64_000.0, signed=True) == "−64.0 ms" and fmt.fmt_us(0.0, signed=True) == "±0 µs"
    assert fmt.fmt_count(12.0) == "12" and fmt.fmt_count(12.5) == "12.5"
    assert fmt.fmt_count(-3.0, signed=True) == "−3" and fmt.fmt_count(306.0, signed=True) == "+306"
    assert fmt.fmt_points(-0.05) == "−5.0 pts" and fmt.fmt_pct(0.488) == "48.8%"


def test_speed_phrase_gives_the_time_ratio_first_then_the_step_time_change():
    """The issue's run: a step of 4.899 s against 1 s is 4.90× slower, +389.9% step time; the same
    phrase in the other direction is 4.90× faster, −79.6% (1/4.899 − 1)."""
    assert fmt.speed_phrase("hyper", "torch", 4.899) == "hyper is 4.90× slower than torch (+389.9%)"
    assert fmt.speed_phrase("torch", "hyper", 1 / 4.899) == "torch is 4.90× faster than hyper (−79.6%)"
    assert fmt.speed_phrase("b", "a", 1.0) == "b is as fast as a (±0.0%)"
    assert fmt.speed_text(2.7) == "2.70× slower (+170.0%)"


def test_speed_phrase_shows_the_ci_in_the_phrase_direction():
    assert fmt.speed_phrase("b", "a", 1.25, (1.2, 1.3)).endswith("(+25.0%; 95% CI 1.20×–1.30×)")
    # test faster: a CI 0.75..0.8 of test/base is 1.25..1.33 times faster
    assert fmt.speed_phrase("b", "a", 0.78, (0.75, 0.8)).endswith(f"95% CI {1 / 0.8:.2f}×–{1 / 0.75:.2f}×)")
