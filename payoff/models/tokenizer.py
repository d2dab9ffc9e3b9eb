"""payoff's character tokenizer: one token per character, saved as Hugging Face tokenizer files.

Small vocabularies make tiny models learn fast, and a character tokenizer never splits a
number in surprising ways. Built with the `tokenizers` library (WordLevel over single
characters), it saves with `save_pretrained` and loads back with plain
`AutoTokenizer.from_pretrained`, like any other Hugging Face tokenizer.
"""

from __future__ import annotations

import string

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS = [PAD, BOS, EOS, UNK]
# Printable ASCII plus newline covers arithmetic, lists, the <think>/<answer> tags and Python.
DEFAULT_CHARACTERS = "\n" + "".join(c for c in string.printable if c not in "\t\n\r\x0b\x0c")


def build_char_tokenizer(characters: str = DEFAULT_CHARACTERS):  # -> PreTrainedTokenizerFast
    """A `PreTrainedTokenizerFast` with one id per character in `characters` (plus specials)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    unique = list(dict.fromkeys(characters))
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
    for char in unique:
        vocab.setdefault(char, len(vocab))
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    # Every single character is its own pre-token, spaces and newlines included.
    core.pre_tokenizer = pre_tokenizers.Split(Regex("(?m:.)"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        padding_side="left",  # generation appends on the right, so prompts pad on the left
        clean_up_tokenization_spaces=False,
    )
    return tokenizer
