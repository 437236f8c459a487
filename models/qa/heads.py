"""An ELECTRA QA model with an extra *answerable* classifier (optional; ``--answerable-head``).

The official ELECTRA SQuAD 2.0 fine-tuning adds a binary "is there an answer" classifier next to the start/end
head. Here: a 2-layer MLP on the [CLS] hidden state → one logit per window, trained with binary cross-entropy
against "this window contains the answer" (the same event the start/end targets encode), added to the span loss.

At inference a question's answerable score is the max over its windows. :mod:`models.qa.postprocess` then
offers three null rules (``task.json`` ``null_rule``):

* ``cls``      — ``null_score_diff = min_w(start[CLS]+end[CLS]) − best span score`` (plain SQuAD 2.0 rule);
* ``head``     — ``null_score_diff = −max_w answerable_logit``;
* ``combined`` — the sum of the two (both are log-odds-like: larger ⇒ "no answer").

The model is a subclass of ``ElectraForQuestionAnswering`` (``BertForQuestionAnswering`` for a BERT bundle from
``denki import``): same encoder and ``qa_outputs`` weights plus ``answerable.*``, so
``save_pretrained``/``from_pretrained`` work unchanged; an exporter that only knows the plain class would drop the
head (and must then use the ``cls`` rule). :func:`qa_model_class` picks the class for a bundle.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from transformers import BertForQuestionAnswering, ElectraForQuestionAnswering
from transformers.modeling_outputs import QuestionAnsweringModelOutput


@dataclass
class QAWithAnswerableOutput(QuestionAnsweringModelOutput):
    answerable_logits: torch.FloatTensor | None = None  # (batch,)


class _AnswerableMixin:
    """The answerable head on top of whichever encoder the QA class holds (``self.electra`` / ``self.bert``)."""

    def _add_answerable(self, config):
        h = config.hidden_size
        self.answerable = nn.Sequential(nn.Linear(h, h), nn.GELU(), nn.Linear(h, 1))
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, start_positions=None,
                end_positions=None, **kwargs):
        encoder = getattr(self, self.base_model_prefix)
        hidden = encoder(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)[0]  # (b, seq, h)
        logits = self.qa_outputs(hidden)  # (batch, seq, 2)
        start_logits, end_logits = (t.squeeze(-1).contiguous() for t in logits.split(1, dim=-1))
        answerable_logits = self.answerable(hidden[:, 0]).squeeze(-1)  # (batch,)
        loss = None
        if start_positions is not None and end_positions is not None:
            ce = nn.CrossEntropyLoss()
            span_loss = (ce(start_logits, start_positions) + ce(end_logits, end_positions)) / 2
            has = (start_positions > 0).float()
            loss = span_loss + nn.functional.binary_cross_entropy_with_logits(answerable_logits, has)
        return QAWithAnswerableOutput(loss=loss, start_logits=start_logits, end_logits=end_logits,
                                      answerable_logits=answerable_logits)


class ElectraForQuestionAnsweringWithAnswerable(_AnswerableMixin, ElectraForQuestionAnswering):
    def __init__(self, config):
        super().__init__(config)
        self._add_answerable(config)


class BertForQuestionAnsweringWithAnswerable(_AnswerableMixin, BertForQuestionAnswering):
    def __init__(self, config):
        super().__init__(config)
        self._add_answerable(config)


_QA_CLASSES = {"electra": (ElectraForQuestionAnswering, ElectraForQuestionAnsweringWithAnswerable),
               "bert": (BertForQuestionAnswering, BertForQuestionAnsweringWithAnswerable)}


def qa_model_class(bundle_dir, answerable_head: bool = False):
    """The QA class for a bundle's architecture (``config.json`` ``model_type``: electra, or bert from
    ``denki import``; ELECTRA for ``None``, the random-init control), with or without the answerable head."""
    p = Path(bundle_dir) / "config.json" if bundle_dir is not None else None
    model_type = json.loads(p.read_text(encoding="utf-8")).get("model_type") if p and p.is_file() else "electra"
    if model_type not in _QA_CLASSES:
        from denki.models.io.errors import DenkiError

        raise DenkiError(f"{p}: model_type {model_type!r}; QA fine-tuning supports {sorted(_QA_CLASSES)}")
    return _QA_CLASSES[model_type][int(bool(answerable_head))]
