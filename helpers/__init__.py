"""Verified building blocks for the transformer-notebooks course (re-exports only)."""

from helpers.attention import (
    MultiHeadAttention,
    causal_mask,
    check_mask,
    padding_mask,
    scaled_dot_product_attention,
)
from helpers.bpe import BPETokenizer
from helpers.checkpoint import load_checkpoint, save_checkpoint
from helpers.compare import check_close
from helpers.data import document_starts, get_batch, load_corpus, split_documents, train_val_split
from helpers.device import get_device, set_seed
from helpers.exercises import attempt, call_unchanged, refuse_calls, rejects, verify
from helpers.gpt2 import load_gpt2
from helpers.gpt2_tokenizer import GPT2Tokenizer
from helpers.layers import DecoderLayer, EncoderLayer, FeedForward
from helpers.models import GPT, GPTConfig, Transformer, count_parameters, parameter_breakdown
from helpers.positional import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    sinusoidal_table,
)
from helpers.pretrained import load_pretrained
from helpers.stacks import Decoder, Encoder
from helpers.tokenizers import CharTokenizer, WordTokenizer
from helpers.training import TrainConfig, estimate_loss, train

__all__ = [
    "BPETokenizer", "CharTokenizer", "Decoder", "DecoderLayer", "Encoder", "EncoderLayer",
    "FeedForward", "GPT", "GPTConfig", "LearnedPositionalEmbedding", "MultiHeadAttention",
    "SinusoidalPositionalEncoding", "TrainConfig", "Transformer", "WordTokenizer", "causal_mask",
    "check_close", "check_mask",
    "count_parameters", "estimate_loss", "document_starts", "get_batch", "get_device", "load_checkpoint", "load_corpus", "split_documents",
    "load_pretrained",
    "padding_mask", "parameter_breakdown", "save_checkpoint", "scaled_dot_product_attention",
    "set_seed", "sinusoidal_table", "train", "train_val_split",
]
__all__ += ["GPT2Tokenizer", "load_gpt2"]
__all__ += ["attempt", "call_unchanged", "refuse_calls", "rejects", "verify"]
