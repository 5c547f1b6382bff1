"""actlab specs in Hugging Face configs: ``hidden_act="actlab:SPEC"``.

transformers builds a model's activations from ``ACT2FN[config.hidden_act]`` (BERT, LLaMA,
Mistral, ...; ``ACT2FN[config.activation_function]`` for GPT-2), a table of fixed names.
:func:`register` teaches that table the names ``"actlab:SPEC"``: each look-up builds a new
:func:`actlab.activation` module, so ``LlamaConfig(hidden_act="actlab:gelu:adaptive")`` gives
every MLP its own adaptive GELU. The config stores the string, so ``save_pretrained`` and
``from_pretrained`` round-trip the model in any process that has called :func:`register`
first (a process that has not gets transformers' ``KeyError`` for the name)::

    from actlab.integrations.transformers import register
    register()
    model = AutoModelForCausalLM.from_pretrained(folder)   # config.json: "actlab:gelu:adaptive"

Models that read ``ACT2CLS`` (a few vision backbones) are not reached.
"""

from __future__ import annotations

from typing import Any

from actlab.activations.spec_activation import SpecActivation, activation

#: The prefix that marks an actlab spec among transformers' activation names.
PREFIX = "actlab:"


def _table_class(base: type) -> type:
    """A subclass of transformers' ``ClassInstantier`` that also answers ``actlab:`` names."""

    class ActlabInstantier(base):  # type: ignore[misc, valid-type]
        """``ACT2FN`` that builds ``actlab:SPEC`` with :func:`actlab.activation`."""

        def __getitem__(self, key: Any) -> Any:
            if isinstance(key, str) and key.startswith(PREFIX):
                # an invalid spec raises SpecError naming the closest valid names
                return activation(key[len(PREFIX):])
            return super().__getitem__(key)

        def __contains__(self, key: object) -> bool:
            # get_activation() asks first; say yes so an invalid spec gets SpecError's
            # message instead of "not found"
            return (isinstance(key, str) and key.startswith(PREFIX)) or super().__contains__(key)

    return ActlabInstantier


def register() -> None:
    """Make ``"actlab:SPEC"`` a valid ``hidden_act`` / ``activation_function`` of any Hugging
    Face config whose model reads ``transformers.activations.ACT2FN``.

    Changes the class of that one table object in place (every model module shares it), so
    it reaches models already imported, and has ``from_pretrained`` restore each actlab
    module's shift (see :func:`_restore_shifts_on_load`); calling it again does nothing.
    Imports transformers.
    """
    from transformers import PreTrainedModel, activations

    table = activations.ACT2FN
    if getattr(type(table), "__actlab__", False):
        return
    cls = _table_class(type(table))
    cls.__actlab__ = True
    table.__class__ = cls
    _restore_shifts_on_load(PreTrainedModel)


def _restore_shifts_on_load(model_class: type) -> None:
    """Have ``from_pretrained`` give every actlab activation its shift back.

    transformers builds the model on the meta device, loads the checkpoint, then fills every
    buffer the checkpoint does not hold with uninitialised memory and leaves its value to the
    model's weight initialisation, which knows its own modules only. An actlab module's
    ``offset`` is such a buffer (the spec determines it, so it is not saved): each module that
    initialisation visits gets it back from its spec first.
    """
    original = getattr(model_class, "_initialize_weights", None)
    if original is None or getattr(original, "__actlab__", False):
        return

    def _initialize_weights(self: Any, module: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(module, SpecActivation):
            module.restore_shift_()
        return original(self, module, *args, **kwargs)

    _initialize_weights.__actlab__ = True  # type: ignore[attr-defined]
    model_class._initialize_weights = _initialize_weights

