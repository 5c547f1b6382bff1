"""Config checks as field metadata: the runner's name for :mod:`actlab.config`, where the
checked dataclasses live now (below every layer that is configured).

Importing this module also registers the spec kinds an experiment's fields may name
(``checked(spec="activation" | "init" | "norm")``): their registries sit above
:mod:`actlab.config`, which cannot import them.
"""

import actlab.activations.spec_activation  # noqa: F401 - registers the "activation" spec kind
import actlab.init  # noqa: F401 - registers the "init" spec kind
import actlab.nn.norm_spec  # noqa: F401 - registers the "norm" spec kind
from actlab.config import (  # noqa: F401 - re-exported
    CheckedConfig,
    FieldCheck,
    check_fields,
    check_plain_activations,
    checked,
    field_checks,
    register_spec_kind,
)

__all__ = ["CheckedConfig", "FieldCheck", "check_fields", "check_plain_activations", "checked",
           "field_checks", "register_spec_kind"]
