"""The recurrent ops' numpy path (compiled kernels off) against the numpy references, case by case: the conformance
suite checks the compiled path where numba is installed, this checks the other one."""

from __future__ import annotations

import pytest

from ggml_core import get_registry
from ggml_core.testing import Case, Status, run_case
from ggml_core.testing.cases import select
from ggml_cpu.jit import _jit

CASES = select(ops="SSM_CONV,SSM_SCAN,GATED_DELTA_NET,RWKV_WKV7")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_numpy_path_matches_reference(case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_jit, "enabled", lambda: False)  # every bind in this test takes the numpy path
    result = run_case(case, get_registry().get_device("CPU"), reference="numpy")
    assert result.status == Status.OK, f"{case.name}: {result.status.name} {result.message}"
