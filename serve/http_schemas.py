"""The request and response schemas of the HTTP API (pydantic models, in the OpenAPI schema under these names),
built per app because their limits come from its :class:`~serve.http.ServerSettings`, and the shaping of a QA
answer into JSON. No ``from __future__ import annotations`` here: FastAPI and pydantic read these annotations at
run time, and the models are local to :func:`build_schemas`."""
import math
from types import SimpleNamespace
from typing import Any

NOT_BLANK = r"[^\s\x1c-\x1f]"  # at least one character that str.strip() keeps
MODEL_VERSION = ("the served bundle's version: the first 12 hex characters of the sha256 of its manifest.json "
                 "(as /v1/models and the denki_model_info metric show it)")

#: the fields of a QA answer, in the order the API returns them
ANSWER_KEYS = ("answer", "start", "end", "score", "has_answer", "null_score_diff", "null_threshold", "span_answer",
               "windows", "confidence", "reason", "abstained")


def _finite(x):
    """JSON has no inf/nan: a non-finite score becomes null (e.g. null_score_diff when no span exists)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def clean_answer(r: dict) -> dict:
    """One QA result as the API returns it: the documented fields only, non-finite scores as null."""
    return {k: _finite(r.get(k)) for k in ANSWER_KEYS}


def _utf8(v: str) -> str:
    """``v`` if it encodes as UTF-8, else a validation error (a lone surrogate cannot reach the tokenizer)."""
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("text is not valid Unicode (lone surrogate)") from None
    return v


def build_schemas(s) -> SimpleNamespace:
    """The pydantic models of one app, their limits taken from the settings ``s``, and ``errors`` (the documented
    error responses of a model endpoint), as attributes of one namespace: ``ErrorResponse``, ``errors``, then
    per task ``ClassifyRequest`` … ``AnswerBatchResponse`` (every response of a model endpoint has
    ``model_version``)."""
    out = _error_schemas()
    out.update(_classify_schemas(s))
    out.update(_answer_schemas(s))
    out.update(_ask_schemas(s))
    return SimpleNamespace(**out)


def _error_schemas() -> dict[str, Any]:
    """``ErrorDetail``, ``ErrorResponse`` (``{"error": {"code", "message", "details"}}``) and ``errors``."""
    from pydantic import BaseModel, Field

    class ErrorDetail(BaseModel):
        code: str = Field(description="machine-readable error code, e.g. too_many_texts, body_too_large")
        message: str
        details: Any = None

    class ErrorResponse(BaseModel):
        error: ErrorDetail

    errors = {401: {"model": ErrorResponse, "description": "no valid API key (with keys set: Authorization: Bearer "
                                                           "KEY)"},
              413: {"model": ErrorResponse, "description": "request body too large"},
              422: {"model": ErrorResponse, "description": "invalid input (limits, types, empty text)"},
              503: {"model": ErrorResponse,
                    "description": "overloaded (would not start within the deadline; details.reason says why) or "
                                   "shutting down; see Retry-After"}}
    return {"ErrorDetail": ErrorDetail, "ErrorResponse": ErrorResponse, "errors": errors}


def _classify_schemas(s) -> dict[str, Any]:
    """``/v1/classify``: ``ClassifyRequest`` (at most ``s.max_texts`` texts of ``s.max_text_chars``),
    ``ClassifyResult``, ``ClassifyResponse``."""
    from pydantic import BaseModel, ConfigDict, Field, field_validator

    class ClassifyRequest(BaseModel):
        model_config = ConfigDict(extra="forbid",
                                  json_schema_extra={"examples": [{"texts": ["ログインできません"]}]})
        texts: list[str] = Field(min_length=1, max_length=s.max_texts,
                                 description=f"1–{s.max_texts} texts, each ≤ {s.max_text_chars:,} characters")

        @field_validator("texts")
        @classmethod
        def _check(cls, v: list[str]) -> list[str]:
            for i, t in enumerate(v):
                if len(t) > s.max_text_chars:
                    raise ValueError(f"text {i} is {len(t):,} characters; the limit is {s.max_text_chars:,}")
                _utf8(t)
            return v

    class ClassifyResult(BaseModel):
        label: str = Field(description="most likely label")
        score: float = Field(description="its calibrated probability")
        scores: dict[str, float] = Field(description="probability of every label")
        route: str = Field(description="the label, or the human label when the model abstains")
        reason: str | None = Field(default=None, description="why the text goes to a human: unsure (below the "
                                   "threshold) or out_of_scope (fits no label); null when routed")

    class ClassifyResponse(BaseModel):
        results: list[ClassifyResult]
        model_version: str = Field(description=MODEL_VERSION)

    return {"ClassifyRequest": ClassifyRequest, "ClassifyResult": ClassifyResult, "ClassifyResponse": ClassifyResponse}


def _answer_schemas(s) -> dict[str, Any]:
    """``/v1/answer`` and ``/v1/answer/batch``: ``AnswerRequest`` (question ≤ ``s.max_text_chars``, context ≤
    ``s.max_context_chars``, neither blank), ``AnswerBatchRequest`` (≤ ``s.max_pairs``), ``AnswerResult``,
    ``AnswerBatchResponse``."""
    from pydantic import BaseModel, ConfigDict, Field, field_validator

    class AnswerRequest(BaseModel):
        model_config = ConfigDict(extra="forbid", json_schema_extra={
            "examples": [{"question": "会議は何時から?",
                          "context": "定例会議は毎週月曜の10時から始まる。"}]})
        # "not blank" as Python's str.strip() sees it: U+001C–U+001F count as whitespace there (not in \s)
        question: str = Field(min_length=1, max_length=s.max_text_chars, pattern=NOT_BLANK)
        context: str = Field(min_length=1, max_length=s.max_context_chars, pattern=NOT_BLANK)

        @field_validator("question", "context")
        @classmethod
        def _check(cls, v: str) -> str:
            return _utf8(v)

    class AnswerBatchRequest(BaseModel):
        model_config = ConfigDict(extra="forbid")
        items: list[AnswerRequest] = Field(min_length=1, max_length=s.max_pairs)

    class AnswerResult(BaseModel):
        answer: str = Field(description="the answer, exactly context[start:end]; empty when has_answer is false")
        start: int | None
        end: int | None
        score: float | None
        has_answer: bool
        null_score_diff: float | None = Field(description="null score − best span score (null: no valid span)")
        null_threshold: float
        span_answer: str = Field(description="the best span even when the model abstains")
        windows: int = Field(description="windows the context was split into")
        confidence: float | None = Field(description="calibrated probability (0–1) that this answer — a span or "
                                                     "no answer — is right (null: a bundle fine-tuned before "
                                                     "confidences existed)")
        reason: str = Field(description="answer | no_answer | unsure (confidence below the bundle's "
                                        "min_confidence: no answer is given; span_answer holds the candidate)")
        abstained: bool = Field(description="true when reason is unsure")

    class AnswerResponse(AnswerResult):
        model_version: str = Field(description=MODEL_VERSION)

    class AnswerBatchResponse(BaseModel):
        results: list[AnswerResult]
        model_version: str = Field(description=MODEL_VERSION)

    return {"AnswerRequest": AnswerRequest, "AnswerBatchRequest": AnswerBatchRequest, "AnswerResult": AnswerResult,
            "AnswerResponse": AnswerResponse, "AnswerBatchResponse": AnswerBatchResponse}


def clean_ask(r: dict) -> dict:
    """One /v1/ask result as the API returns it: non-finite scores as null, in the passages too."""
    out = {k: _finite(v) for k, v in r.items() if k != "passages"}
    out["passages"] = [{k: _finite(v) for k, v in p.items()} for p in r.get("passages", [])]
    return out


def _ask_schemas(s) -> dict[str, Any]:
    """``/v1/ask``: ``AskRequest`` (a question ≤ ``s.max_text_chars``, not blank; ``k`` ≤ ``MAX_ASK_K``),
    ``AskPassage`` (one passage read), ``AskResult``."""
    from pydantic import BaseModel, ConfigDict, Field, field_validator

    from denki.serve.http_settings import MAX_ASK_K

    class AskRequest(BaseModel):
        model_config = ConfigDict(extra="forbid",
                                  json_schema_extra={"examples": [{"question": "保証期間はどのくらいですか?"}]})
        question: str = Field(min_length=1, max_length=s.max_text_chars, pattern=NOT_BLANK)
        k: int | None = Field(default=None, ge=1, le=MAX_ASK_K,
                              description=f"passages to read (default: the server's --ask-k, {s.ask_k})")

        @field_validator("question")
        @classmethod
        def _check(cls, v: str) -> str:
            return _utf8(v)

    class AskPassage(BaseModel):
        rank: int
        id: str = Field(description="passage id in the index (FILE#N, FILE:LINE, TITLE#N)")
        document: str
        title: str | None
        bm25: float
        span_answer: str = Field(description="the reader's best span in this passage")
        null_score_diff: float | None = Field(description="no-answer score − best span score (lower: surer)")
        score: float | None

    class AskResult(BaseModel):
        answer: str = Field(description="the answer, exactly passage[start:end]; empty when has_answer is false")
        has_answer: bool
        reason: str = Field(description="answer | no_answer (no passage holds one) | unsure (below the reader's "
                                        "confidence floor) | no_passage (no passage shares a word with the "
                                        "question)")
        document: str | None
        passage_id: str | None
        title: str | None
        passage: str | None = Field(description="the candidate passage's text (null: none)")
        start: int | None = Field(description="offsets of the answer into passage")
        end: int | None
        score: float | None
        confidence: float | None
        null_score_diff: float | None
        null_threshold: float
        span_answer: str | None = Field(default=None, description="the candidate turned down (no_answer, unsure)")
        passages: list[AskPassage] = Field(description="the passages read, best BM25 first")
        retrieval_ms: float
        reader_ms: float = Field(description="time from the reader's queue to its answers (micro-batching "
                                             "included)")
        model_version: str = Field(description="the QA bundle's version: " + MODEL_VERSION)

    return {"AskRequest": AskRequest, "AskPassage": AskPassage, "AskResult": AskResult}
