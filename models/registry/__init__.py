"""The task registry: every task denki knows, by its one name (:attr:`models.task.base.Task.name`, the bundle kind).

Fine-tuning, export, the runtime, batch, HTTP, Ray and the demo ask :func:`.tasks.task_for` (a bundle kind,
PyTorch or ONNX) or :func:`.tasks.by_command` (the verb of ``denki finetune``/``evaluate``) instead of comparing
kind strings. A new task is one package with a :class:`~models.task.base.Task` subclass plus one line in :data:`.tasks.TASKS` (or, for a
plugin or a test, :func:`.tasks.register`); docs/architecture.md walks through one.

May import: every package of ``models/`` (it is the top of ``models/``); torch-free at import time.
"""
