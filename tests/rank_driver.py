"""One training process running several ``fairseq-train`` command lines in turn.

The multi-rank and resume tests (``tests/test_distributed.py``) start one such process per rank,
so that fairseq's import (most of a tiny run's time) is paid once per process, not once per
model: each command line goes through ``fairseq_cli.train.cli_main`` exactly as
``fairseq-train`` would (argument parsing, ``--user-dir``, ``call_main``; the process group of
the first run is reused by the next, as fairseq's ``distributed_init`` allows).

    python tests/rank_driver.py RUNS.json

``RUNS.json`` holds a list of ``{"argv": [...], "log": PATH}``: the arguments without the program
name, and a file that receives that run's log records (``train_inner`` lines included).
"""

import json
import logging
import sys


def main() -> None:
    from fairseq_cli import train

    with open(sys.argv[1], encoding="utf-8") as handle:
        runs = json.load(handle)
    for run in runs:
        handler = logging.FileHandler(run["log"], encoding="utf-8")
        logging.getLogger().addHandler(handler)
        try:
            sys.argv = ["fairseq-train", *run["argv"]]
            train.cli_main()
        finally:
            logging.getLogger().removeHandler(handler)
            handler.close()


if __name__ == "__main__":
    main()
