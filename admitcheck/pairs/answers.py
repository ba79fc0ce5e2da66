"""A held-out or training answer's rules (pure): a response's text, and whether it gets its answer.

    reply_text(tokenizer, eos_id, ids)        # cut at the first EOS, special tokens dropped
    answer_in_reply("Paris", "It is Paris.")  # True: the answer as a whole word, case and punctuation ignored

`eval.accuracy: contains` and `grpo.reward: answer_in_reply` score with `answer_in_reply` (SmolLM2's accuracy
rule: pairs.smollm2, whose prompts carry the answers); `eval.accuracy: exact` compares the whole reply
(calibration.evaluation.accuracy).
"""

from __future__ import annotations

import re


def reply_text(tokenizer, eos_token_id: int, ids: list[int]) -> str:
    """A response's text: cut at the first EOS, special tokens dropped."""
    ids = ids[: ids.index(eos_token_id)] if eos_token_id in ids else ids
    return tokenizer.decode(ids, skip_special_tokens=True)


def answer_in_reply(answer: str, reply: str) -> bool:
    """The answer appears in the reply as a whole word (case and surrounding punctuation ignored): `eval.accuracy:
    contains` and `grpo.reward: answer_in_reply` (pairs.smollm2's accuracy rule)."""
    return re.search(rf"(?<![\w-]){re.escape(answer.lower())}(?![\w])", reply.lower()) is not None
