"""Errors a user can act on. The CLI prints them without a traceback."""


class DenkiError(Exception):
    """Base class for errors that are the user's to fix (bad input, missing file, wrong bundle)."""


class InputError(DenkiError):
    """Bad input data. The message names the file, line and field where known."""

    def __init__(self, message: str, path: str | None = None, line: int | None = None, field: str | None = None):
        where = ""
        if path is not None:
            where = str(path)
            if line is not None:
                where += f":{line}"
            if field is not None:
                where += f" (field {field!r})"
            where += ": "
        super().__init__(where + message)
        self.path, self.line, self.field = path, line, field
