"""A fleet of VoxLane servers under the chart's scaling rule, second by second: how many GPUs a load needs, how
fast the fleet follows it, what drains cost (docs/DEPLOY.md, "Scaling out").

    .venv/bin/python -m tools.fleet_sim [--seed 1]

prints the tables of that section. Pure Python, deterministic for a seed, a few seconds.

The model. Streams arrive as a Poisson process and each lives its audio length (its listener plays it in real
time), so the live streams are what the scaler reads. One GPU carries `Workload.capacity_streams` of them at
90 % SLO: its measured capacity in req/s times the mean length (BENCHMARKS.md). The scaler (a KEDA ScaledObject's
HPA, or an HPA on the adapter's Pods metric) asks every `poll_s` for ceil(live / (target x admission limit)) pods,
reading the live streams `metric_lag_s` late (a Prometheus scrape), leaves a change within `tolerance` alone, at
most doubles (or adds 4) per poll, and scales in to the highest ask of the last `scale_in_window_s`, at most
`scale_in_pods_per_min` pods a minute. A new pod serves `start_s` after it is asked for; a leaving pod takes no
new stream and is held until its last stream has ended, plus `leave_s`. The gateways spread streams evenly over
the serving pods.
"""
from __future__ import annotations

import argparse
import collections
import math
import random
from dataclasses import dataclass, field
from typing import Callable

DAY_S = 86_400


@dataclass(frozen=True)
class Workload:
    """Stream lengths (seconds of audio: two uniform pieces meeting at the mean) and one GPU's measured capacity."""
    name: str
    min_s: float
    mean_s: float
    max_s: float
    capacity_rps: float  # req/s one H200 holds at 90 % SLO (BENCHMARKS.md)

    def __post_init__(self) -> None:
        if not 0 < self.min_s <= self.mean_s <= self.max_s or self.capacity_rps <= 0:
            raise ValueError(f"inconsistent workload: {self}")

    @property
    def capacity_streams(self) -> float:
        """Live real-time streams one GPU carries at 90 % SLO (Little's law: req/s x seconds)."""
        return self.capacity_rps * self.mean_s

    def length_pmf(self, step_s: float = 0.01) -> list[tuple[int, float]]:
        """(whole seconds a stream lives, probability): each length split between the whole seconds around it so
        that the mean stays the workload's."""
        weights: dict[int, float] = collections.defaultdict(float)
        num = max(1, round((self.max_s - self.min_s) / step_s))
        for i in range(num):
            x0 = self.min_s + (self.max_s - self.min_s) * i / num
            x1 = self.min_s + (self.max_s - self.min_s) * (i + 1) / num
            self._split(weights, (x0 + x1) / 2, self._cdf(x1) - self._cdf(x0) if x1 > x0 else 1.0)
        return sorted((k, p) for k, p in weights.items() if p > 0)

    @staticmethod
    def _split(weights: dict[int, float], x: float, p: float) -> None:
        low = max(1, math.floor(x))
        weights[low] += p * (low + 1 - x) if x > low else p
        if x > low:
            weights[low + 1] += p * (x - low)

    def _cdf(self, x: float) -> float:
        if x >= self.max_s:
            return 1.0
        if x <= self.min_s:
            return 0.0
        low = (self.max_s - self.mean_s) / (self.max_s - self.min_s)  # weight of [min, mean]: keeps the mean
        if x < self.mean_s:
            return low * (x - self.min_s) / (self.mean_s - self.min_s)
        return low + (1 - low) * (x - self.mean_s) / (self.max_s - self.mean_s)


# BENCHMARKS.md, "Live streams apart from the step's rows (H200)": the shared LibriSpeech texts capped at 6 s and
# uncapped (4-10 s), and long-form paragraphs (12.6-68 s; >= 6.5 and < 8.7 req/s at the steady state: 6.5 here)
WORKLOADS = (Workload("short6", 4.0, 5.53, 6.0, 43.5), Workload("short", 4.0, 6.5, 10.0, 39.5),
             Workload("paragraphs", 12.6, 36.2, 68.0, 6.5))


@dataclass(frozen=True)
class ScalerConfig:
    """The chart's defaults (values.yaml `autoscaling`, `drain`) and Kubernetes' HPA."""
    target: float = 0.75  # live streams over the admission limit each server is kept at
    admission_limit: int = 256  # voxlane_admission_limit: the LM's slots
    min_replicas: int = 1
    max_replicas: int = 10_000
    poll_s: int = 15  # the HPA's sync period (KEDA's query is asked then)
    metric_lag_s: int = 15  # the scrape interval: the value read is this old at worst
    tolerance: float = 0.1  # the HPA leaves a change of at most 10 % alone
    scale_in_window_s: int = 300
    scale_in_pods_per_min: int = 2
    start_s: int = 120  # asked for -> serving: scheduling, a cached image, ~100 s of server start, probe, DNS
    leave_s: int = 15  # a leaving pod's wait while the gateways forget it

    def pods_for(self, live: float) -> int:
        """The rule: ceil(live / (target x limit)) pods, within the bounds."""
        wanted = math.ceil(live / (self.target * self.admission_limit) - 1e-9)
        return min(self.max_replicas, max(self.min_replicas, wanted))


def diurnal(low: float, high: float, day_s: int = DAY_S) -> Callable[[int], float]:
    """req/s over a day: `low` at midnight, `high` at noon, a cosine between."""
    return lambda t: low + (high - low) * (1 - math.cos(2 * math.pi * t / day_s)) / 2


def step(before: float, after: float, at_s: int) -> Callable[[int], float]:
    return lambda t: before if t < at_s else after


@dataclass
class Outcome:
    gpu_s: float = 0.0  # pods held (starting, serving, draining) x seconds
    drain_gpu_s: float = 0.0  # of that, pods held while draining
    stream_s: float = 0.0  # live streams x seconds
    over_stream_s: float = 0.0  # stream-seconds past the serving pods' capacity (these miss their SLO)
    over_s: int = 0  # seconds in which the serving pods were past capacity
    peak_over: float = 0.0  # the largest share of the live streams past capacity in one second
    peak_pods: int = 0
    serving: list[int] = field(default_factory=list)  # serving pods, each second

    @property
    def over_share(self) -> float:
        return self.over_stream_s / self.stream_s if self.stream_s else 0.0


class Fleet:
    """Pods and streams, one second at a time; `scale` applies the HPA's rule at each poll."""

    def __init__(self, workload: Workload, config: ScalerConfig, initial_pods: int) -> None:
        self.workload, self.config, self.pmf = workload, config, workload.length_pmf()
        self.span = self.pmf[-1][0] + 1
        self.ends = [0.0] * self.span  # streams that end at t % span, on serving pods
        self.drain_ends = [0.0] * self.span  # the same, on leaving pods
        self.live = self.drain_live = 0.0
        self.serving, self.starting, self.leaving = initial_pods, collections.deque(), []
        self.history = collections.deque(maxlen=config.metric_lag_s + 1)  # live streams, oldest first
        self.asks: collections.deque = collections.deque()  # (t, pods asked) within the scale-in window
        self.removed: collections.deque = collections.deque()  # times of scale-in removals, last minute

    @property
    def replicas(self) -> int:
        """The Deployment's count: serving and starting pods (leaving ones no longer count)."""
        return self.serving + len(self.starting)

    def tick(self, t: int, arrivals: float) -> None:
        for k, p in self.pmf:
            self.ends[(t + k) % self.span] += arrivals * p
        self.live += arrivals - self.ends[t % self.span]
        self.drain_live -= self.drain_ends[t % self.span]
        self.ends[t % self.span] = self.drain_ends[t % self.span] = 0.0
        while self.starting and self.starting[0] <= t:
            self.starting.popleft()
            self.serving += 1
        self.leaving = [free for free in self.leaving if free > t]
        self.history.append(self.live + self.drain_live)  # KEDA's sum counts a leaving pod's streams too

    def scale(self, t: int) -> None:
        config, current = self.config, self.replicas
        seen = self.history[0]
        ask = config.pods_for(seen)
        if abs(seen / (config.target * config.admission_limit * max(current, 1)) - 1) <= config.tolerance:
            ask = current
        self.asks.append((t, ask))
        while self.asks[0][0] <= t - config.scale_in_window_s:
            self.asks.popleft()
        if ask > current:
            self._add(t, min(ask, max(2 * current, current + 4)) - current)
        elif (settled := max(a for _, a in self.asks)) < current:
            self._remove(t, current - settled)

    def _add(self, t: int, num: int) -> None:
        self.starting.extend([t + self.config.start_s] * num)

    def _remove(self, t: int, num: int) -> None:
        while self.removed and self.removed[0] <= t - 60:
            self.removed.popleft()
        num = min(num, self.config.scale_in_pods_per_min - len(self.removed))
        for _ in range(max(0, num)):
            self.removed.append(t)
            if self.starting:  # a ReplicaSet removes a pod that is not ready first
                self.starting.pop()
            elif self.serving > 1:
                self._drain_one(t)

    def _drain_one(self, t: int) -> None:
        """One serving pod leaves: its share of the live streams ends on it, which it holds until the last does."""
        share = 1 / self.serving
        last = 0
        for k in range(1, self.span):
            slot = (t + k) % self.span
            moved = self.ends[slot] * share
            self.ends[slot] -= moved
            self.drain_ends[slot] += moved
            last = k if moved > 1e-9 else last
        self.drain_live += self.live * share
        self.live -= self.live * share
        self.serving -= 1
        self.leaving.append(t + self.config.leave_s + last)


def poisson(rng: random.Random, mean: float) -> float:
    """A Poisson draw (a normal one past 50, rounded), or `mean` itself where rng is None (no noise)."""
    if rng is None:
        return mean
    if mean > 50:
        return max(0.0, round(rng.gauss(mean, math.sqrt(mean))))
    limit, k, product = math.exp(-mean), 0, rng.random()
    while product > limit:
        k += 1
        product *= rng.random()
    return float(k)


def simulate(workload: Workload, load: Callable[[int], float], duration_s: int, config: ScalerConfig = ScalerConfig(),
             seed: int | None = 1) -> Outcome:
    """Run `duration_s` seconds of `load` (req/s at second t); seed None: arrivals at their mean, no noise."""
    rng = None if seed is None else random.Random(seed)
    fleet = Fleet(workload, config, config.pods_for(load(0) * workload.mean_s))
    for t in range(-fleet.span, 0):  # the streams at time 0 already live, at the rule's pods for them
        fleet.tick(t, poisson(rng, load(0)))
    outcome = Outcome()
    for t in range(duration_s):
        fleet.tick(t, poisson(rng, load(t)))
        if t % config.poll_s == 0:
            fleet.scale(t)
        _account(outcome, fleet)
    return outcome


def _account(outcome: Outcome, fleet: Fleet) -> None:
    held = fleet.replicas + len(fleet.leaving)
    capacity = fleet.serving * fleet.workload.capacity_streams
    outcome.gpu_s += held
    outcome.drain_gpu_s += len(fleet.leaving)
    outcome.stream_s += fleet.live + fleet.drain_live
    outcome.over_stream_s += max(0.0, fleet.live - capacity)
    outcome.over_s += fleet.live > capacity
    outcome.peak_over = max(outcome.peak_over, 1 - capacity / fleet.live if fleet.live > capacity else 0.0)
    outcome.peak_pods = max(outcome.peak_pods, held)
    outcome.serving.append(fleet.serving)


def reached_s(outcome: Outcome, pods: float, at_s: int) -> int | None:
    """Seconds from `at_s` until `pods` serve."""
    return next((t - at_s for t in range(at_s, len(outcome.serving)) if outcome.serving[t] >= pods), None)


def day_table(seed: int, low: float = 10, high: float = 2000) -> list[str]:
    config = ScalerConfig()
    rows = ["| workload | GPUs at 10 / 2,000 req/s (rule) | GPUs at 2,000 req/s at measured capacity | peak pods | "
            "GPU-hours a day (static at peak) | of which draining | stream-seconds past capacity |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for workload in WORKLOADS:
        day = simulate(workload, diurnal(low, high), DAY_S, config, seed)
        rule = [config.pods_for(rate * workload.mean_s) for rate in (low, high)]
        static = math.ceil(rule[1] * DAY_S / 3600)
        lengths = f"{workload.mean_s:g} s mean, {workload.max_s:g} s max"
        rows.append(f"| `{workload.name}` ({lengths}) | {rule[0]} / {rule[1]} | {math.ceil(high / workload.capacity_rps)} | "
                    f"{day.peak_pods} | {day.gpu_s / 3600:,.0f} ({static:,}) | {day.drain_gpu_s / 3600:.1f} | "
                    f"{100 * day.over_share:.3f} % |")
    return rows


def step_table(seed: int, before: float = 500, at_s: int = 1800, duration_s: int = 3600) -> list[str]:
    rows = ["| workload | step (req/s) | start-up | GPUs before → after (the rule's ask after) | at capacity after | "
            "settled after | seconds past capacity | worst second: streams past capacity |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for workload in (WORKLOADS[0], WORKLOADS[2]):
        for after in (600, 1000):
            for start_s in (120, 360):
                config = ScalerConfig(start_s=start_s)
                run = simulate(workload, step(before, after, at_s), duration_s, config, seed)
                settled = run.serving[-1]
                capacity = reached_s(run, after * workload.mean_s / workload.capacity_streams, at_s)
                ask = config.pods_for(after * workload.mean_s)
                rows.append(f"| `{workload.name}` | {before:g} → {after:g} | {start_s} s | {run.serving[at_s - 1]} → "
                            f"{settled} ({ask}) | {capacity} s | {reached_s(run, settled, at_s)} s | {run.over_s} | "
                            f"{100 * run.peak_over:.0f} % |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print("\n".join(day_table(args.seed)) + "\n\n" + "\n".join(step_table(args.seed)))


if __name__ == "__main__":
    main()
