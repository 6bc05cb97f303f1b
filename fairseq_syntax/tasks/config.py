"""Options of the ``syntax_translation`` task (fairseq's ``translation`` options, plus the syntax ones) and
the checks of the settings it is combined with."""

from dataclasses import dataclass, field
from typing import Optional

from fairseq.tasks.translation import TranslationConfig

from fairseq_syntax_core.errors import UsageError

__all__ = ["SyntaxTranslationConfig", "check_config"]


def _is_syntax_model(cfg) -> bool:
    """Whether ``cfg`` builds one of our models (fairseq's own get no extra args)."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    arch = getattr(cfg, "arch", None) or getattr(cfg, "_name", None)
    model_class = ARCH_MODEL_REGISTRY.get(arch)
    # our models declare the side inputs they consume; fairseq's own have no such method
    return isinstance(model_class, type) and callable(getattr(model_class, "syntax_inputs", None))


def _set_arg(cfg, name: str, value) -> None:
    """``cfg.name = value`` on an argparse Namespace or an omegaconf DictConfig (struct or not)."""
    try:
        from omegaconf import DictConfig, open_dict

        if isinstance(cfg, DictConfig):
            with open_dict(cfg):
                cfg[name] = value
            return
    except ImportError:  # pragma: no cover - fairseq depends on omegaconf
        pass
    setattr(cfg, name, value)


def _missing(cfg, key: str) -> bool:
    """Whether omegaconf's ``cfg.key`` is the mandatory value ``???`` that nobody gave."""
    from omegaconf import DictConfig, OmegaConf

    return isinstance(cfg, DictConfig) and OmegaConf.is_missing(cfg, key)


def check_config(cfg) -> None:
    """Refuse, before any data is read, the options of fairseq's translation task that would change the
    source tokens without their side-files (a UsageError naming the flag and why)."""
    if getattr(cfg, "truncate_source", False):
        raise UsageError(
            "--truncate-source is not supported by --task syntax_translation: it would cut the source text "
            "but not its parse (the side-files). Leave it out: fairseq then skips the training sentences longer "
            "than --max-source-positions (valid and test ones with --skip-invalid-size-inputs-valid-test)"
        )
    upsample = getattr(cfg, "upsample_primary", 1)
    if upsample == -1:  # fairseq main's default, which tiles a split of several shards -1 times (a ValueError)
        cfg.upsample_primary = 1
    elif isinstance(upsample, int) and upsample < 1:
        raise UsageError(f"--upsample-primary {upsample}: expected a factor >= 1 (1: the primary split once)")
    if isinstance(getattr(cfg, "num_batch_buckets", 0), int) and cfg.num_batch_buckets < 0:
        raise UsageError(f"--num-batch-buckets {cfg.num_batch_buckets}: expected 0 (the task pads by length itself)")
    if (getattr(cfg, "num_batch_buckets", 0) or 0) > 0:
        raise UsageError(
            f"--num-batch-buckets {cfg.num_batch_buckets} is not supported by --task syntax_translation: it pads "
            "the source tokens inside each sentence, and the side-files (the parse) are not padded with them. "
            "Leave it out"
        )
    impl = getattr(cfg, "dataset_impl", None)
    if impl is not None and str(impl) != "mmap":
        raise UsageError(
            f"--dataset-impl {impl} is not supported by --task syntax_translation: fairseq-syntax-preprocess "
            "stores a data-bin's text and side-files as mmap datasets. Leave it out, or give --dataset-impl mmap"
        )


#: how errors name the symbol streams' dictionaries

@dataclass
class SyntaxTranslationConfig(TranslationConfig):
    syntax_parser: Optional[str] = field(
        default=None,
        metadata={
            "help": "spaCy pipeline (name or path) for parsing raw source text on the fly "
            "(fairseq-interactive, hub); default: the one recorded in the data-bin's syntax.json"
        },
    )
    strict_phrase_structure: bool = field(
        default=False,
        metadata={
            "help": "raw text gets phrase structures converted from its dependency parse: refuse (instead of "
            "warning) when the data-bin's were imported brackets (--constituency-parse)"
        },
    )
    length_prior: bool = field(
        default=False,
        metadata={
            "help": "decode with Eriguchi et al. (2016)'s length prior (section 4.3): a finished hypothesis scores "
            "S(y) + W * log p(len(y) | len(x)), p counted on the data-bin's train split in BPE pieces without </s> "
            "(length_prior.SRC-TGT.json, add-one smoothed), lengths capped at max(100, longest train target); "
            "S(y) = log p(y|x) with --unnormalized (the paper's search), else fairseq's score / len ** lenpen"
        },
    )
    length_prior_weight: float = field(
        default=1.0, metadata={"help": "W of --length-prior (the paper: 1; 0: fairseq's beam search)"}
    )
    allow_other_data_bin: bool = field(
        default=False,
        metadata={
            "help": "go on, with a warning, when a checkpoint is loaded onto a data-bin whose dictionaries (text, "
            "labels, POS) or BPE codes differ from those it was trained with (its ids would mean other words). "
            "Without it fairseq-generate, -interactive, -validate and the hub refuse, naming the files and their "
            "SHA-256; so does fairseq-train when it restores weights (checkpoint_last.pt, --restore-file, "
            "--finetune-from-model): fine-tuning on a data-bin made with other dictionaries needs this flag, "
            "and the new checkpoints record that data-bin. A data-bin made with --dictdir from the training one "
            "has the same files and needs no flag; other parser versions are only warnings"
        },
    )
