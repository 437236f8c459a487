"""The inquiry router (``denki finetune classify`` / ``denki evaluate classify``): fine-tuning (:mod:`.finetune`,
torch; a list of steps over the settings :mod:`.config`, the model and one step's loss :mod:`.model`, the features
and one seed's training loop :mod:`.train`, and the fit of the routing rule on dev :mod:`.routing_rule`) on top of
batched PyTorch prediction (:mod:`.predict`, torch); the routing decision rule
(:mod:`.decision`, its :mod:`.softmax`, numpy — the one implementation PyTorch evaluation, the ONNX runtime and the demo call) and
the numpy pieces around it: metrics (:mod:`.metrics`), calibration of the rule on dev (:mod:`.calibration`),
scoring logits on labelled data (:mod:`.evaluate`), the TF-IDF baseline (:mod:`.baseline`, scikit-learn), its
numpy copy that a fused router carries (:mod:`.lexical`), the fusion of the two (:mod:`.fusion`) and the report
with its figures (:mod:`.report`, :mod:`.plots`).

May import: :mod:`models.io`, :mod:`models.text`, :mod:`models.bundle`, :mod:`models.training`. Inside, one
way: ``finetune → train, routing_rule, evaluate → predict`` (evaluate imports predict lazily, only to score a
PyTorch bundle). ``config``, ``routing_rule``, ``decision``, ``metrics``, ``calibration``, ``evaluate``, ``lexical``,
``fusion`` stay torch-free at import time
(``lexical`` and ``fusion`` also free of scikit-learn: the serving runtime imports them).
"""
