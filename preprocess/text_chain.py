"""The text's chain: BPE (learn, apply) and the text dictionaries (counted by fairseq-preprocess itself), in a
forked process that runs while the parent parses (``fairseq-syntax-preprocess``; :class:`TextChain`)."""

import json
import logging
import os
import shutil
import time
from typing import Dict, List

from fairseq_syntax_core.databin import CODES_FILE
from fairseq_syntax_core.errors import InputError, StageError, UserError
from fairseq_syntax_core.jsonfile import read_json_file

from . import bpe as bpe_stage
from .split import Split


class StageClock:
    """Wall-clock seconds per stage, for the closing summary."""

    def __init__(self) -> None:
        self.seconds: Dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.seconds[stage] = round(self.seconds.get(stage, 0.0) + now - self._last, 2)
        self._last = now



def _write_text(path: str, lines: List[List[str]]) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for tokens in lines:
            handle.write(" ".join(tokens) + "\n")


def _text_dictionaries(args, work: str, out: str, splits: List[Split]) -> None:
    """The text dictionaries, ``dict.SRC.txt`` and ``dict.TGT.txt``, of the BPE text: counted by
    ``fairseq-preprocess --dict-only`` itself (its thresholds, ``--nwords*`` and ``--joined-dictionary``), or the
    given ones saved as it saves them. The text is binarized with them by ``streaming.write_split``."""
    from fairseq import options
    from fairseq_cli import preprocess as fairseq_preprocess

    argv = [
        "--source-lang", args.source_lang, "--target-lang", args.target_lang,
        "--destdir", out, "--workers", str(args.workers), "--dataset-impl", "mmap", "--dict-only",
        "--thresholdsrc", str(args.thresholdsrc), "--thresholdtgt", str(args.thresholdtgt),
        "--nwordssrc", str(args.nwordssrc), "--nwordstgt", str(args.nwordstgt),
    ]
    if any(s.name == "train" for s in splits):
        argv += ["--trainpref", os.path.join(work, "train")]
    if args.joined_dictionary:
        argv.append("--joined-dictionary")
    if args.srcdict:
        argv += ["--srcdict", args.srcdict]
    if args.tgtdict:
        argv += ["--tgtdict", args.tgtdict]
    fairseq_args = options.get_preprocessing_parser().parse_args(argv)
    fairseq_logger = logging.getLogger("fairseq_cli.preprocess")
    handlers = list(fairseq_logger.handlers)
    fairseq_preprocess.main(fairseq_args)
    for handler in fairseq_logger.handlers:
        if handler not in handlers:  # fairseq adds a FileHandler on preprocess.log
            handler.close()
            fairseq_logger.removeHandler(handler)
    log = os.path.join(out, "preprocess.log")
    if os.path.exists(log):
        os.remove(log)  # holds temporary paths; the summary is printed instead



class TextChain:
    """BPE (learn, apply) and the text dictionaries, in a forked process.

    The child inherits the tokenized splits (fork, no pickling), writes the BPE text to
    ``work`` and the codes and text dictionaries to ``out``, and reports its stage times, or its
    error, through a file.
    """

    def __init__(self, args, splits: List[Split], work: str, out: str) -> None:
        self.args, self.splits, self.work, self.out = args, splits, work, out
        self.report = os.path.join(work, "text_chain.json")
        self.process = None

    def start(self) -> None:
        import multiprocessing

        self.process = multiprocessing.get_context("fork").Process(target=self._main, name="bpe-dictionaries")
        self.process.start()

    def _main(self) -> None:
        try:
            clock = StageClock()
            args, src, tgt = self.args, self.args.source_lang, self.args.target_lang
            codes = os.path.join(self.out, CODES_FILE)
            if args.no_bpe:
                pass
            elif args.bpe_codes:
                shutil.copyfile(args.bpe_codes, codes)
            else:
                train = next(s for s in self.splits if s.name == "train")
                merges = bpe_stage.learn_codes(train.src_tokens + train.tgt_tokens, args.bpe_symbols, codes)
                if merges == 0:
                    raise InputError(train.src_path, None,
                                     f"BPE learned no merges from the train split ({len(train.src_tokens)} lines, "
                                     "too little text): use --no-bpe, or give --bpe-codes")
            clock.lap("bpe_learn")
            for split in self.splits:
                for lang, tokens in ((src, split.src_tokens), (tgt, split.tgt_tokens)):
                    pieces = tokens if args.no_bpe else bpe_stage.apply_codes(tokens, codes, args.workers)
                    _write_text(os.path.join(self.work, f"{split.name}.{lang}"), pieces)
            clock.lap("bpe_apply")
            _text_dictionaries(args, self.work, self.out, self.splits)
            clock.lap("text_dictionaries")
            result = {"seconds": clock.seconds}
        except BaseException as error:  # reported to the parent, which raises
            if isinstance(error, UserError):
                result = {"user_error": str(error)}
            else:
                result = {"error": f"{type(error).__name__}: {error}"}
        with open(self.report, "w", encoding="utf-8") as handle:
            json.dump(result, handle)
        os._exit(0 if "seconds" in result else 1)

    def join(self) -> Dict[str, float]:
        self.process.join()
        if self.process.exitcode is not None and self.process.exitcode < 0:
            raise StageError(f"the BPE/dictionary process was killed by signal {-self.process.exitcode} "
                             "(out of memory, or killed by hand)")
        if not os.path.exists(self.report):
            raise StageError(f"the BPE/dictionary process died (exit code {self.process.exitcode}; "
                             "killed for memory?)")
        result = read_json_file(self.report)  # this run's own file: damaged only by a full disk
        if "user_error" in result:
            raise StageError(result["user_error"])
        if "error" in result:
            raise StageError(f"BPE/dictionary failed: {result['error']}")
        return result["seconds"]

    def stop(self) -> None:
        if self.process is not None and self.process.is_alive():
            self.process.kill()  # its output is discarded with the temporary folder
            self.process.join()
