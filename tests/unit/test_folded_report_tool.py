"""tools/folded_report.py: a py-spy recording's engine-thread shares and the other threads' stacks."""
from __future__ import annotations

from tools.folded_report import function, inclusive, others, read_folded

ENGINE = "Thread.run (threading.py:982);LMEngine._loop (backend_python/engine/engine.py:145)"
FOLDED = f"""{ENGINE};LMEngine.step (backend_python/engine/engine.py:210);LMEngine._launch (backend_python/engine/engine.py:360) 6
{ENGINE};LMEngine.step (backend_python/engine/engine.py:210);LMEngine._process (backend_python/engine/engine.py:390) 3
{ENGINE};LMEngine.step (backend_python/engine/engine.py:210);LMEngine._process (backend_python/engine/engine.py:391);LMEngine._process (backend_python/engine/engine.py:390) 1
Thread.run (threading.py:982);Periodic._loop (backend_python/stub_common/periodic.py:30) 4
LMModel.execute (backend_python/speechlm_lm/model.py:122);LMModel._submit (backend_python/speechlm_lm/model.py:140) 2
not a line
"""


def test_shares_count_each_sample_once_per_function_and_the_rest_by_thread(tmp_path):
    path = tmp_path / "lm.folded"
    path.write_text(FOLDED)
    stacks = read_folded(path)
    assert len(stacks) == 5 and sum(count for _, count in stacks) == 16
    total, shares = inclusive(stacks, "LMEngine._loop")
    assert total == 10
    assert shares["LMEngine.step engine.py"] == 10 and shares["LMEngine._launch engine.py"] == 6
    assert shares["LMEngine._process engine.py"] == 4  # a recursive frame counts its sample once
    rest = others(stacks, "LMEngine._loop")
    assert rest == {"Periodic._loop": 4, "LMModel.execute;LMModel._submit": 2}
    assert function("f (a/b/c.py:3)") == "f c.py" and function("f") == "f"
