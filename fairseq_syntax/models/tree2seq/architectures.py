"""``tree2seq`` architectures: Eriguchi et al. (2016)'s small (256) and large (512) settings (sec. 4.2)."""

from fairseq.models import register_model_architecture

from .model import Tree2SeqModel  # noqa: F401  (registers the model)


@register_model_architecture("tree2seq", "tree2seq")
def base_architecture(args) -> None:
    """d = 256: embeddings, sequential LSTM, Tree-LSTM and decoder (the paper's first setting)."""
    args.dropout = getattr(args, "dropout", 0.1)
    args.encoder_embed_dim = getattr(args, "encoder_embed_dim", 256)
    args.encoder_hidden_size = getattr(args, "encoder_hidden_size", args.encoder_embed_dim)
    args.encoder_dropout_in = getattr(args, "encoder_dropout_in", args.dropout)
    args.encoder_dropout_out = getattr(args, "encoder_dropout_out", args.dropout)
    args.decoder_embed_dim = getattr(args, "decoder_embed_dim", args.encoder_embed_dim)
    args.decoder_hidden_size = getattr(args, "decoder_hidden_size", args.encoder_hidden_size)
    args.decoder_out_embed_dim = getattr(args, "decoder_out_embed_dim", args.decoder_hidden_size)
    args.decoder_dropout_in = getattr(args, "decoder_dropout_in", args.dropout)
    args.decoder_dropout_out = getattr(args, "decoder_dropout_out", args.dropout)
    args.share_decoder_input_output_embed = getattr(args, "share_decoder_input_output_embed", False)
    args.share_all_embeddings = getattr(args, "share_all_embeddings", False)
    args.no_sequential_encoder = getattr(args, "no_sequential_encoder", False)
    args.forget_bias = getattr(args, "forget_bias", 1.0)


@register_model_architecture("tree2seq", "tree2seq_large")
def tree2seq_large(args) -> None:
    """512-dimensional embeddings and d = 512 (the paper's larger setting)."""
    args.encoder_embed_dim = getattr(args, "encoder_embed_dim", 512)
    args.encoder_hidden_size = getattr(args, "encoder_hidden_size", 512)
    base_architecture(args)
