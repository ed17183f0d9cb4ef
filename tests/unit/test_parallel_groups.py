"""How the suite is split among parallel workers (tests/parallel.py): what shares a costly fixture stays on one
worker, and the longest groups start first."""
from types import SimpleNamespace

from tests.parallel import auto_workers, family_presets, group_of, in_start_order

PRESETS = family_presets()


def test_a_familys_tests_are_one_group_across_modules_and_parameters():
    ids = ["tests/e2e/test_streaming.py::test_one_stream_arrives_in_order[csm-tiny]",
           "tests/e2e/test_family_errors.py::test_bad_input_is_rejected_per_family[csm-tiny-too-long]",
           "tests/e2e/test_streaming.py::test_very_short_request[csm-tiny-0.08]"]
    assert {group_of(i, PRESETS) for i in ids} == {"family csm-tiny"}


def test_the_longest_preset_name_that_fits_wins():
    presets = ["qwen3-tts-tiny", "qwen3-tts-tiny-base"]
    ordered = sorted(presets, key=len, reverse=True)
    assert group_of("tests/e2e/test_x.py::test_y[qwen3-tts-tiny-base-too-long]", ordered) == "family qwen3-tts-tiny-base"
    assert group_of("tests/e2e/test_x.py::test_y[qwen3-tts-tiny-too-long]", ordered) == "family qwen3-tts-tiny"


def test_other_tests_go_with_their_module_and_a_soak_alone():
    assert group_of("tests/e2e/test_modes.py::test_mode[timeshare]", PRESETS) == "tests/e2e/test_modes.py"
    assert group_of("tests/unit/test_x.py::test_y[csm-tiny]", PRESETS) == "tests/unit/test_x.py"  # no server there
    soaks = ["tests/e2e/test_soak.py::test_a", "tests/e2e/test_soak.py::test_b"]
    assert [group_of(i, PRESETS) for i in soaks] == soaks


def test_groups_stay_whole_and_start_soaks_then_servers_then_in_process_layers():
    ids = ["tests/unit/test_a.py::test_1", "tests/e2e/test_streaming.py::test_s[csm-tiny]",
           "tests/middle/test_m.py::test_1", "tests/e2e/test_modes.py::test_1",
           "tests/e2e/test_errors.py::test_e[csm-tiny-whitespace]", "tests/e2e/test_soak.py::test_soak",
           "tests/unit/test_a.py::test_2", "tests/e2e/test_modes.py::test_2"]
    got = [item.nodeid for item in in_start_order([SimpleNamespace(nodeid=i) for i in ids])]
    assert got == ["tests/e2e/test_soak.py::test_soak",
                   "tests/e2e/test_streaming.py::test_s[csm-tiny]", "tests/e2e/test_errors.py::test_e[csm-tiny-whitespace]",
                   "tests/e2e/test_modes.py::test_1", "tests/e2e/test_modes.py::test_2",
                   "tests/middle/test_m.py::test_1",
                   "tests/unit/test_a.py::test_1", "tests/unit/test_a.py::test_2"]


def test_auto_workers_are_one_more_than_the_cores_as_memory_allows():
    assert auto_workers(2, 22.0) == 3
    assert auto_workers(16, 22.0) == 3  # the memory bounds it
    assert auto_workers(2, 8.0) == 1
    assert auto_workers(2, 3.0) == 1  # never none
