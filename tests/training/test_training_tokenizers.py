"""Tokenizers learnt offline: deterministic, with the special tokens encode and the audit use."""

from __future__ import annotations

from phisieve.encode.tokenizer import SpecialTokens, load_tokenizer
from phisieve.training.learn_tokenizer import train_bpe, train_wordpiece

LINES = [
    "Pt seen by Dr. Smith on 3/4, BP 120/80, afebrile.",
    "Patient resting comfortably; plan to continue lasix.",
    "Family meeting held with daughter Anna; questions answered.",
] * 20


def test_wordpiece_is_deterministic_and_has_bert_specials(tmp_path):
    a = train_wordpiece(LINES, tmp_path / "a", vocab_size=300, max_len=64)
    b = train_wordpiece(list(reversed(LINES)), tmp_path / "b", vocab_size=300, max_len=64)
    assert (a / "tokenizer.json").read_bytes() == (b / "tokenizer.json").read_bytes()
    tok = load_tokenizer(a)
    special = SpecialTokens.of(tok)
    assert (special.pad_id, tok.unk_token_id, special.prefix, special.suffix, special.mask_id) == (
        0, 1, [2], [3], 4
    )  # fmt: skip
    ids = tok("Lasix for Smith", add_special_tokens=False)["input_ids"]
    assert tok.unk_token_id not in ids  # every character is in the vocabulary
    assert tok.decode(ids) == "lasix for smith"


def test_bpe_has_gpt2_specials(tmp_path):
    tok = load_tokenizer(train_bpe(LINES, tmp_path / "bpe", vocab_size=300))
    assert tok.eos_token == "<|endoftext|>" and tok.pad_token == "<pad>"
    text = "Family meeting held with daughter Anna."
    assert tok.decode(tok(text)["input_ids"]) == text
