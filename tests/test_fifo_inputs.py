"""A FIFO (or device) given where a checkpoint or a JSON file is read is refused at once, never read forever."""

import os

import pytest

from fairseq_syntax_core.checkpoint_loader import load_checkpoint
from fairseq_syntax_core.errors import CheckpointError, InputError
from fairseq_syntax_core.jsonfile import read_json_file


@pytest.mark.parametrize("reader, error, name", [(load_checkpoint, CheckpointError, "checkpoint_best.pt"),
                                                 (read_json_file, InputError, "result.json")])
def test_a_fifo_is_refused_without_opening_it(tmp_path, reader, error, name):
    fifo = tmp_path / name
    os.mkfifo(fifo)  # opening it for reading would block until a writer comes
    with pytest.raises(error, match=rf"{name}: is not a regular file \(a FIFO"):
        reader(str(fifo))


def test_report_table_refuses_a_fifo_among_the_results(tmp_path, capsys):
    from fairseq_syntax_analysis import results as rs

    os.mkfifo(tmp_path / "x.json")
    assert rs.cli_main(["table", str(tmp_path)]) == 1
    assert "x.json: is not a regular file" in capsys.readouterr().err
