"""The registry itself (see the package docstring): :data:`TASKS` and the lookups."""
from __future__ import annotations

from denki.models.classify.task import ROUTER
from denki.models.io.errors import DenkiError
from denki.models.qa.task import READER
from denki.models.bundle.format import ONNX_PREFIX, PRETRAINED
from denki.models.task.base import Task

#: the registered tasks, by name (= their PyTorch bundle kind); the built-in ones first
TASKS: dict[str, Task] = {t.name: t for t in (ROUTER, READER)}


def register(task: Task) -> Task:
    """Add ``task`` (a new task package's instance) to the registry; returns it. A name can be registered once."""
    if not task.name or task.name.startswith(ONNX_PREFIX) or task.name == PRETRAINED:
        raise ValueError(f"task name {task.name!r}: not empty, not {PRETRAINED!r}, not starting with {ONNX_PREFIX!r}")
    if TASKS.get(task.name) not in (None, task):
        raise ValueError(f"a task named {task.name!r} is already registered")
    TASKS[task.name] = task
    return task


def unregister(name: str) -> None:
    """Remove a task added with :func:`register` (tests); the built-in tasks stay."""
    if name not in (ROUTER.name, READER.name):
        TASKS.pop(name, None)


def task_for(kind: str) -> Task:
    """The task whose PyTorch (``classifier``) or ONNX (``onnx-classifier``) bundles have this ``kind``."""
    name = kind[len(ONNX_PREFIX):] if kind.startswith(ONNX_PREFIX) else kind
    if name not in TASKS:
        raise DenkiError(f"no task handles bundle kind {kind!r} (tasks: {', '.join(TASKS)})")
    return TASKS[name]


def by_command(command: str) -> Task:
    """The task behind a ``denki finetune``/``evaluate`` verb or an experiment task spec (``classify``, ``qa``)."""
    for t in TASKS.values():
        if t.command == command:
            return t
    raise DenkiError(f"unknown task {command!r}: choose one of {', '.join(commands())}")


def commands() -> list[str]:
    return [t.command for t in TASKS.values()]


def torch_kinds() -> tuple[str, ...]:
    """The kinds of fine-tuned PyTorch bundles (what ``denki export`` takes)."""
    return tuple(TASKS)


def onnx_kinds() -> tuple[str, ...]:
    """The kinds of ONNX bundles (what the runtime serves)."""
    return tuple(t.onnx_kind for t in TASKS.values())


def all_kinds() -> tuple[str, ...]:
    """Every bundle kind: the pretrained encoder, then each task's PyTorch and ONNX kinds."""
    return (PRETRAINED, *torch_kinds(), *onnx_kinds())


def is_onnx(kind: str) -> bool:
    return kind.startswith(ONNX_PREFIX)
