"""Live streams apart from the step's rows, end to end: streams paced to their listeners (non-reading, non-acking
gRPC clients of long utterances) stay live in the LM lane, more of them than a decode step has rows, and a new
request is served beside them instead of queueing behind them; no step runs more than `max_batch` rows."""
from __future__ import annotations

import pytest

from clients.stream import synthesize
from tests.e2e.conftest import DEFAULT_PRESET, start_server
from tests.e2e.test_backpressure import SilentClient
from tests.e2e.test_metrics import scrape
from tests.waiting import wait_for

NUM_PACED = 12  # paced to real-time playback, live for the whole test: more than a step has rows
# their length: the LM makes a paced stream's audio in real time, so each stays live in it this long after its start,
# past a test slowed down by a loaded machine (at 60 s, one loaded run's LM had ended them all before the metrics
# were read); the LM lane's 2048 positions hold it
PACED_S = 150.0
MAX_BATCH = 8  # a bucket of the step histogram


@pytest.fixture(scope="module")
def resident(model_cache, tmp_path_factory):
    srv = start_server(DEFAULT_PRESET, tmp_path_factory, max_slots=64, max_batch=MAX_BATCH)
    yield srv
    srv.stop(grace_s=0)


def step_batches(metrics: dict[str, float]) -> tuple[float, float]:
    """(decode steps of at most MAX_BATCH rows, all decode steps) so far."""
    return metrics[f'voxlane_lm_step_batch_bucket{{le="{MAX_BATCH}"}}'], metrics["voxlane_lm_step_batch_count"]


def test_paced_streams_stay_live_beside_a_newcomer_and_steps_keep_to_max_batch(resident):
    paced = [SilentClient(resident.grpc_url, acks=False, seconds=PACED_S) for _ in range(NUM_PACED)]
    try:
        assert wait_for(lambda: scrape(resident)["voxlane_lm_live_streams"] >= NUM_PACED, timeout_s=60)
        newcomer = synthesize(resident.grpc_url, "I came later.", seed=7, max_audio_seconds=2.0, ignore_eos=True)
        assert newcomer.audio.size == 25 * 1920  # served in full while the others are live
        metrics = scrape(resident)
        assert metrics["voxlane_live_requests"] >= NUM_PACED  # none of them ended to make room
        within, steps = step_batches(metrics)
        assert steps > 0 and within == steps
        lm = {name: value for name, value in metrics.items() if name.startswith(("voxlane_lm_live", "voxlane_lm_kv"))}
        assert metrics["voxlane_lm_kv_blocks_used"] > 0 and metrics["voxlane_lm_kv_blocks_free"] > 0, lm
    finally:
        for client in paced:
            client.close()
    assert wait_for(lambda: scrape(resident)["voxlane_lm_live_streams"] == 0, timeout_s=30)
    assert wait_for(lambda: scrape(resident)["voxlane_lm_kv_blocks_used"] == 0, timeout_s=10)
