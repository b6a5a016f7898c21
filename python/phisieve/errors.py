"""phisieve's exceptions: one base class, messages that say what and where, never patient text."""

from __future__ import annotations


class PhisieveError(Exception):
    """Base class of every error phisieve raises on purpose."""

    def __reduce__(self) -> tuple[object, ...]:
        # Sent back from a worker process as it is: its message and attributes, whatever
        # its constructor's parameters.
        return (_rebuilt, (type(self), self.args, self.__dict__))


def _rebuilt(cls: type[PhisieveError], args: tuple[object, ...], state: dict) -> PhisieveError:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class InputError(PhisieveError, ValueError):
    """Bad input: a missing column, an unknown format, a file that cannot be read.

    Parameters
    ----------
    message
        What is wrong. It must never contain note text.
    path, row, column
        Where it is wrong, when known (row is 0-based within the file or table).
    """

    def __init__(
        self,
        message: str,
        *,
        path: object | None = None,
        row: int | None = None,
        column: str | None = None,
    ) -> None:
        self.path = None if path is None else str(path)
        self.row = row
        self.column = column
        where = []
        if self.path is not None:
            where.append(f"file {self.path}")
        if row is not None:
            where.append(f"row {row}")
        if column is not None:
            where.append(f"column {column!r}")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)


class OutputExistsError(PhisieveError, FileExistsError):
    """A stage's output already exists and ``overwrite`` (``--overwrite``) was not given."""

    def __init__(self, path: object) -> None:
        self.path = str(path)
        super().__init__(
            f"the output exists (file {self.path}); pass --overwrite (overwrite=True) to "
            "replace it: the old output stays until the new one is complete"
        )


class MissingDependencyError(PhisieveError, ImportError):
    """An optional dependency is needed for this feature but is not installed."""

    def __init__(self, package: str, extra: str) -> None:
        super().__init__(
            f"this feature needs the optional package {package!r}: pip install 'phisieve[{extra}]'"
        )


class MissingModelError(MissingDependencyError):
    """A model that is distributed apart from phisieve (under its own licence) is needed but
    not installed.

    Parameters
    ----------
    distribution
        The distribution that holds the model (what ``pip install`` takes).
    needed_by
        What needs it, e.g. "the recognizer `crf`".
    instead
        How to go on without it, e.g. "--recognizers rules,lists".
    """

    def __init__(self, distribution: str, needed_by: str, instead: str) -> None:
        self.distribution = distribution
        # MissingDependencyError's message names a phisieve extra; this one a distribution.
        super(MissingDependencyError, self).__init__(
            f"{needed_by} needs the model distribution {distribution!r}, which is not "
            f"installed: pip install {distribution} (in phisieve's repository, `make build` "
            f"installs it), or go on without it: {instead}",
        )


class ConfigError(PhisieveError, ValueError):
    """An option is out of range or inconsistent (bad ``k``, unknown normalisation, ...)."""


class NotGroupedError(InputError):
    """Documents of a patient are not contiguous where the index, ``encode`` or an engine
    needs them grouped."""


def not_consecutive(path: object, row: int, column: str) -> NotGroupedError:
    """The refusal of a patient whose documents come back after another patient's, at
    ``row`` (``encode``, and the engines that split its input)."""
    return NotGroupedError(
        "the documents of a patient are not consecutive (sort or group the documents by "
        "patient first)",
        path=path,
        row=row,
        column=column,
    )


class MemoryBudgetExceeded(PhisieveError, MemoryError):
    """A pass of the index outgrew the memory budget (phisieve splits the pass and retries)."""
