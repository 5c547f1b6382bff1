"""The documents' settings as presets: ``--paper`` runs an experiment at the setting its
documents state, on the user's copy of the data.

An experiment's ``paper`` class attribute is a :class:`PaperPreset`: config fields mapped to
:class:`Setting` values, each carrying where it comes from, in one of three forms:

* :func:`doc` -- stated by a specification document ("Rethinking Activation Functions" §4.3);
* :func:`code` -- read from the public code a document says it follows (the paper trains
  "following Karpathy's training setup": the value is nanoGPT's, and says so);
* :func:`ours` -- the documents are silent; the value is our choice and says why.

A preset that equals another experiment's recipe is built from it (:meth:`PaperPreset.extend`),
not copied. The data set is the user's, given by path: ``--set data=PATH``. A preset names the
data it needs (:class:`DataNeed`: which data set, in which on-disk format, which config field
takes it); without it, :func:`paper_overrides` refuses in one line that says so. The run
directory's ``config.json`` records every value with its source (:meth:`PaperPreset.record`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from actlab.errors import ConfigError

__all__ = ["DATA_KEY", "DataNeed", "PaperPreset", "Setting", "code", "doc", "ours",
           "paper_overrides", "paper_preset", "paper_seeds"]

DATA_KEY = "data"  # ``--set data=PATH`` names the data set of every preset


@dataclass(frozen=True)
class Setting:
    """A config value and where it comes from (``"document, section"``, ``"code: ..."`` or
    ``"ours: why"``)."""

    value: Any
    source: str

    def __post_init__(self) -> None:
        if not self.source.strip():
            raise ValueError("a paper setting needs its source (document and section, or ours)")

    @property
    def is_ours(self) -> bool:
        """Whether the value is our choice rather than a document's or its code's."""
        return self.source.startswith("ours")


def doc(title: str, where: str, value: Any, note: str = "") -> Setting:
    """A value a document states: ``doc("Bug or Feature²", "App. D.2", 1024)``."""
    return Setting(value, f"{title}, {where}" + (f" ({note})" if note else ""))


def code(where: str, value: Any, note: str = "") -> Setting:
    """A value of the public code a document follows: ``code("karpathy/nanoGPT train.py", 6e-4)``."""
    return Setting(value, f"code: {where}" + (f" ({note})" if note else ""))


def ours(value: Any, why: str) -> Setting:
    """A value the documents do not state, chosen by us for the reason ``why``."""
    return Setting(value, f"ours: {why}")


@dataclass(frozen=True)
class DataNeed:
    """The data set a preset trains on: ``what`` (named by ``source``) in ``format`` on disk,
    given to the config field ``field``; ``prefix`` is put before a bare path (``shards:``)."""

    what: str
    source: str
    format: str
    field: str = DATA_KEY
    prefix: str = ""

    def value(self, path: str) -> str:
        """The config value for the user's ``path`` (the prefix added when missing)."""
        path = str(path)
        return path if not self.prefix or path.startswith(self.prefix) else self.prefix + path

    def message(self, experiment: str) -> str:
        """The one line that says what ``--paper`` needs."""
        return (f"{experiment} --paper trains on {self.what} ({self.source}): give "
                f"--set {DATA_KEY}=PATH, {self.format}")


@dataclass(frozen=True)
class PaperPreset:
    """Config values of the documents' setting, each with its source (module docstring),
    the data set it needs and the number of seeds the documents use (``None``: the
    experiment's default)."""

    settings: Mapping[str, Setting]
    data: DataNeed | None = None
    seeds: Setting | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def overrides(self) -> dict[str, Any]:
        """The config field overrides of the preset (values only)."""
        return {name: setting.value for name, setting in self.settings.items()}

    def sources(self) -> dict[str, str]:
        """``{field: source}`` of every value."""
        return {name: setting.source for name, setting in self.settings.items()}

    def extend(self, settings: Mapping[str, Setting] | None = None, *,
               data: DataNeed | None = None, seeds: Setting | None = None,
               notes: tuple[str, ...] = ()) -> PaperPreset:
        """A preset built on this one: ``settings`` added or replacing, a data set or seed
        count replacing when given, ``notes`` appended."""
        return replace(self, settings={**self.settings, **(settings or {})},
                       data=data or self.data, seeds=seeds or self.seeds,
                       notes=self.notes + tuple(notes))

    def record(self) -> dict[str, Any]:
        """What ``config.json`` records: every value with its source, the data set, seeds."""
        out: dict[str, Any] = {
            "settings": {name: {"value": s.value, "source": s.source}
                         for name, s in self.settings.items()},
            "ours": sorted(name for name, s in self.settings.items() if s.is_ours),
        }
        if self.data is not None:
            out["data"] = {"what": self.data.what, "source": self.data.source,
                           "format": self.data.format, "field": self.data.field}
        if self.seeds is not None:
            out["seeds"] = {"value": self.seeds.value, "source": self.seeds.source}
        if self.notes:
            out["notes"] = list(self.notes)
        return out


def paper_preset(experiment: Any) -> PaperPreset:
    """The experiment's preset; ``ConfigError`` naming those that have one when it has none."""
    preset = getattr(experiment, "paper", None)
    if preset is None:
        from actlab.runner.experiment import list_experiments

        having = [name for name, cls in list_experiments().items() if cls.paper is not None]
        raise ConfigError("--paper", f"{experiment.name} has no paper preset (its documents "
                                     f"state no setting beyond its default); experiments with "
                                     f"one: {', '.join(having) or 'none'}")
    return preset


def paper_overrides(experiment: Any, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The user's ``--set`` overrides under ``--paper``: ``data=PATH`` given to the preset's
    data field (with its prefix); ``ConfigError`` in one line when the preset needs data and
    none is given."""
    preset = paper_preset(experiment)
    out = dict(overrides)
    need = preset.data
    if need is None:
        return out
    given = out.pop(DATA_KEY, None)
    if need.field != DATA_KEY and need.field in out:
        given = out.pop(need.field) if given is None else given
    if given is None or not str(given).strip():
        raise ConfigError(DATA_KEY, need.message(experiment.name))
    out[need.field] = need.value(given)
    return out


def paper_seeds(experiment: Any) -> int | None:
    """The number of seeds the documents use, when the preset states one."""
    preset = paper_preset(experiment)
    return None if preset.seeds is None else int(preset.seeds.value)
