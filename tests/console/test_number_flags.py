"""The command line's number flags refuse NaN and infinity, in one line (exit 2)."""

from __future__ import annotations

import pytest

from mlra.console.cli.cli import main


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "$nan"])
@pytest.mark.parametrize("flag", ["--max-cost", "--temperature"])
def test_float_flags_refuse_nan_and_inf(
    capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    if flag == "--temperature" and value.startswith("$"):
        return
    with pytest.raises(SystemExit) as exited:
        main(["run", "answer", "--model", "baseline", flag, value])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip()
    assert flag in err and len(err.splitlines()) == 1
