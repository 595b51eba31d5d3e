"""Templates and the data embedded in pages: escaped wherever text from a run lands."""

from __future__ import annotations

import json
import re

import pytest

from specsuite.report.render import embedded_json, environment, number, percent, sparkline

HOSTILE = '</script><script>window.pwned=1</script><!-- <img src=x onerror="alert(1)"> & \u2028'


def test_embedded_json_cannot_end_its_script_and_reads_back_the_same() -> None:
    text = str(embedded_json({"name": HOSTILE, "n": [1.5, float("nan"), None]}))
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"name": HOSTILE, "n": [1.5, None, None]}


def test_autoescape_on_every_template() -> None:
    env = environment()
    out = env.from_string('<td>{{ x }}</td><a title="{{ x }}">').render(x=HOSTILE)
    assert "<script>" not in out and "<img" not in out and 'onerror="' not in out
    assert "&lt;/script&gt;" in out


@pytest.mark.parametrize(
    ("value", "fmt", "text"),
    [
        (0.47751, ".4f", "0.4775"),
        (None, ".4f", "–"),
        (float("nan"), ".3f", "–"),
        (True, ".4f", "–"),
        (2, ".1f", "2.0"),
    ],
)
def test_numbers(value: object, fmt: str, text: str) -> None:
    assert number(value, fmt) == text


def test_percent() -> None:
    assert percent(-0.1) == "-10.0 %" and percent(0.025) == "+2.5 %" and percent(None) == "–"


def test_sparkline_draws_values_gaps_and_failures() -> None:
    svg = str(sparkline([0.5, 0.6, None, 0.4, 0.45], [False, False, False, True, False]))
    assert svg.startswith("<svg") and svg.count("<polyline") == 2  # the gap splits the line
    assert svg.count('class="spark-bad"') == 1
    ys = [float(y) for y in re.findall(r",([\d.]+)", svg.split("<circle")[0])]
    assert min(ys) >= 0 and max(ys) <= 24  # inside its box
    one = str(sparkline([0.7], [False]))
    assert "spark-dot" in one and "<polyline" not in one
    assert 'aria-label="no values"' in str(sparkline([None, None], [True, True]))
