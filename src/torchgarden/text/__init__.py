"""Text for the language-model experiment: the Python standard library as a corpus,
byte-level packing, and the metrics of language modelling (bits per byte, tokens per
second, MFU)."""

from torchgarden.text.corpus import Corpus, list_files, python_stdlib_root, read_corpus, split_of
from torchgarden.text.flops import PEAK_BF16_FLOPS, flops_per_token, peak_flops
from torchgarden.text.metrics import BitsPerByte, Throughput, logits_of
from torchgarden.text.packed import pack_bytes, unigram_bits_per_byte

__all__ = [
    "PEAK_BF16_FLOPS",
    "BitsPerByte",
    "Corpus",
    "Throughput",
    "flops_per_token",
    "list_files",
    "logits_of",
    "pack_bytes",
    "peak_flops",
    "python_stdlib_root",
    "read_corpus",
    "split_of",
    "unigram_bits_per_byte",
]
