"""Where a lane process's Python time goes, from a py-spy recording (`py-spy record --format raw`: folded stacks).

    python3 -m tools.folded_report LM.folded [--thread-root LMEngine._loop] [--top 40]

Prints, for the samples whose stack passes through `--thread-root` (the LM engine's loop by default), each
function's inclusive share (the samples with it anywhere on the stack), and for every other sample the stacks'
first frames below the thread's bootstrap, most sampled first: what the engine thread spends its time on, and
what else runs in the process beside it (request threads, the chunk channel, metrics).
"""
from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path


def read_folded(path: Path) -> list[tuple[list[str], int]]:
    """[(frames root first, samples)] of a py-spy raw file (`frame;frame;... count` per line)."""
    stacks = []
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks.append((stack.split(";"), int(count)))
    return stacks


def function(frame: str) -> str:
    """`Class.method (path/file.py:123)` -> `Class.method file.py`."""
    name, _, where = frame.partition(" (")
    return f"{name} {where.split(':')[0].rsplit('/', 1)[-1]}" if where else name


def inclusive(stacks: list[tuple[list[str], int]], root: str) -> tuple[int, Counter]:
    """Samples through `root`, and per function the samples with it on the stack (once per sample)."""
    total, shares = 0, Counter()
    for frames, count in stacks:
        names = [function(f) for f in frames]
        if not any(name.startswith(root + " ") for name in names):
            continue
        total += count
        for name in dict.fromkeys(names):
            shares[name] += count
    return total, shares


def others(stacks: list[tuple[list[str], int]], root: str, depth: int = 5) -> Counter:
    """Samples outside `root`, by the first `depth` frames after the thread's bootstrap frames."""
    found = Counter()
    for frames, count in stacks:
        names = [function(f) for f in frames]
        if any(name.startswith(root + " ") for name in names):
            continue
        body = [n for n in names if not n.startswith("Thread.")]
        found[";".join(n.split(" ")[0] for n in body[:depth])] += count
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folded", type=Path)
    parser.add_argument("--thread-root", default="LMEngine._loop")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args(argv)
    stacks = read_folded(args.folded)
    all_samples = sum(count for _, count in stacks)
    total, shares = inclusive(stacks, args.thread_root)
    print(f"{all_samples} samples; {total} through {args.thread_root}")
    for name, count in shares.most_common(args.top):
        print(f"{count:7d} {100 * count / max(total, 1):5.1f}%  {name}")
    print(f"\nthe other {all_samples - total} samples, by their first frames:")
    for stack, count in others(stacks, args.thread_root).most_common(args.top // 2):
        print(f"{count:7d}  {stack or '(no Python frame)'}")


if __name__ == "__main__":
    main()
