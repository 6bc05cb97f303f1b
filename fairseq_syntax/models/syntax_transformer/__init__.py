"""``syntax_transformer``, split the way fairseq splits ``fairseq/models/transformer/``.

* :mod:`.config`: every option, its default and help (one dataclass);
* :mod:`.components`: the input and attention components, one module per idea;
* :mod:`.layers`: encoder and decoder layers taking the components' attention terms;
* :mod:`.encoder`: the encoder that builds and runs the components;
* :mod:`.decoder`: the decoder (our layers; target-side NSD, Ma et al. 2019, secs. 3.1-3.3);
* :mod:`.model`: the registered model;
* :mod:`.architectures`: the presets, one table row per paper and size.
"""

from .config import SyntaxModelConfig, duan_attention_heads  # noqa: F401
from .encoder import SyntaxTransformerEncoder, encoder_model_dim  # noqa: F401
from .layers import SyntaxDecoderLayer, SyntaxEncoderLayer  # noqa: F401
from .model import SyntaxTransformerDecoder, SyntaxTransformerModel  # noqa: F401
from .architectures import PRESETS, syntax_base_architecture  # noqa: F401
from fairseq_syntax.modules.syntactic_distance import NSD_LOGITS_KEY  # noqa: F401
