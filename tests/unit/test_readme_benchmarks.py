"""README.md's benchmark table says what BENCHMARKS.md's "Headline" table measured, never an older number."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NUMBER = re.compile(r"\d+(?:\.\d+)?")


def section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start:end if end >= 0 else None]


def table_rows(text: str) -> list[list[str]]:
    """The cells of each row of the markdown tables in `text`, the header and rule rows left out."""
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in text.splitlines()
            if line.startswith("|")]
    return [row for row in rows if not set("".join(row)) <= set("- ") and row[0] not in ("model", "what")]


def readme_rows() -> dict[str, list[str]]:
    rows = table_rows(section((ROOT / "README.md").read_text(), "## Benchmarks"))
    return {row[0].strip("`"): row for row in rows}


def headline() -> str:
    return section((ROOT / "BENCHMARKS.md").read_text(), "## Headline")


def test_every_capacity_in_the_readme_table_is_the_headline_s():
    rows, measured = readme_rows(), headline()
    assert rows, "README.md has no benchmark table"
    for model, (_, voxlane, timeshare, _) in rows.items():
        for number in NUMBER.findall(voxlane + " " + timeshare):
            assert re.search(rf"(?<![\d.]){re.escape(number)}(?![\d])", measured), (model, number)


def test_the_qwen3_row_is_the_headline_s_capacity_on_the_6_s_workload():
    line = next(line for line in headline().splitlines() if "`qwen3-tts-1.7b`" in line and "capped at 6 s" in line)
    capacity = re.search(r"\*\*([\d.]+) req/s\*\*", line).group(1)
    assert re.search(r"\*\*([\d.]+) req/s\*\*", readme_rows()["qwen3-tts-1.7b"][1]).group(1) == capacity == "43.5"
