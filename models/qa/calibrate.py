"""``denki calibrate qa``: give a ``qa`` bundle a confidence calibration (and, with a target precision, an
abstention floor) fitted on a labelled file, as ``denki finetune qa`` does on its dev set — for a bundle
fine-tuned before confidences existed, or to fit on your own questions. Writes a new bundle; the source is left
as it is. Torch is imported inside the functions."""
from __future__ import annotations

from denki.models.io.errors import DenkiError


def calibrate_qa(*, model: str, data: str, out: str, target_precision: float | None = None,
                 threads: int | None = None, device: str = "auto", progress: bool = True) -> dict:
    """Fit ``task.json`` ``confidence`` (+ ``min_confidence``) of ``model`` on ``data`` and write the bundle to
    ``out`` (built in ``OUT.partial``, then renamed) → ``{"task": the new fields, "report": the coverage table on
    data}`` (optimistic: fitted there)."""
    from denki.models.bundle.format import command_line, copy_with_task
    from denki.models.qa.evaluate import predict_file
    from denki.models.qa.report import golds_of, jsonable
    from denki.models.qa.selective import fit_confidence, fit_min_confidence, selective_report

    if target_precision is not None and not 0.0 < target_precision < 1.0:
        raise DenkiError(f"--target-precision must be between 0 and 1, not {target_precision}")
    src, task, _, feats, res = predict_file(model, data, device=device, threads=threads, progress=progress)
    golds = golds_of(feats.examples)
    thr = float(task["null_threshold"])
    fields = {"confidence": fit_confidence(res, golds, thr, fitted_on=str(data))}
    for stale in ("min_confidence", "target_precision", "target_precision_reached"):
        task.pop(stale, None)
    if target_precision is not None:
        chosen = fit_min_confidence(res, golds, fields["confidence"], thr, target_precision)
        fields.update(min_confidence=chosen["threshold"], target_precision=target_precision,
                      target_precision_reached=chosen["reached"])
    copy_with_task(src, out, jsonable({**task, **fields}),
                   {"calibrated": {"from": str(src), "data": str(data), "command": command_line()}})
    return {"task": fields, "report": selective_report(res, golds, {**task, **fields})}
