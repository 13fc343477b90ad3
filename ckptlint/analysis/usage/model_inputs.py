"""Which parameter of a library model's `forward` holds the data the model is trained on.

A model's main input comes from a data loader and never requires grad. The libraries say
which parameter that is, each by its own convention:

- transformers: a `PreTrainedModel` subclass's `main_input_name` (a class attribute, inherited;
  `input_ids` unless a class in its bases says otherwise: `pixel_values`, `input_features`);
- diffusers: the first positional parameter of a `ModelMixin` subclass's forward (`sample`,
  `hidden_states`: the noisy latents or the images);
- timm: the first positional parameter of the forward of a class handed to
  `build_model_with_cfg`, timm's model factory, in the module that defines the class (the images).

A reentrant checkpoint whose only inputs come from there starves the parameters inside of
gradients (CKP301). That holds when the model is trained from that entry; a class fed another
model's activations under the same name (a backbone inside a detector) may receive a tensor
that requires grad, so the message names the entry it assumes.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ckptlint.classes import ClassIndex, ClassInfo
from ckptlint.symbols import positional_parameters

_TRANSFORMERS_MODEL = frozenset({"transformers.modeling_utils.PreTrainedModel", "transformers.PreTrainedModel"})
_DIFFUSERS_MODEL = frozenset({"diffusers.models.modeling_utils.ModelMixin", "diffusers.ModelMixin", "diffusers.models.ModelMixin"})
_TIMM_FACTORY = frozenset({"timm.models._builder.build_model_with_cfg", "timm.models.build_model_with_cfg", "timm.models.helpers.build_model_with_cfg"})
_DEFAULT_MAIN_INPUT = "input_ids"  # PreTrainedModel.main_input_name


@dataclass(frozen=True)
class DataParameter:
    """The forward parameter of an entry model that holds its data, and the convention that says so."""

    model: str  # the class, `PvtV2Model`
    name: str  # `pixel_values`
    convention: str  # `its main_input_name`, `a diffusers model's first input`
    line: int  # the forward's `def` line


class ModelInputs:
    def __init__(self, classes: ClassIndex):
        self.classes = classes
        self._found: dict[int, DataParameter | None] = {}

    def data_parameter(self, info: ClassInfo) -> DataParameter | None:
        """The data parameter of `info`'s forward when `info` is an entry model; None otherwise."""
        key = id(info.node)
        if key not in self._found:
            self._found[key] = self._data_parameter(info)
        return self._found[key]

    def _data_parameter(self, info: ClassInfo) -> DataParameter | None:
        found = self.classes.find_method(info, "forward")
        if found is None or not isinstance(found[1].node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
        node = found[1].node
        parameters = [a.arg for a in positional_parameters(node.args)][1:]
        if self.classes.inherits_from(info, _TRANSFORMERS_MODEL):
            name = self._main_input_name(info)
            if name in parameters or name in (a.arg for a in node.args.kwonlyargs):
                return DataParameter(info.name, name, "its main_input_name", node.lineno)
            return None
        if not parameters:
            return None
        if self.classes.inherits_from(info, _DIFFUSERS_MODEL):
            return DataParameter(info.name, parameters[0], "a diffusers model's first input", node.lineno)
        if self._built_by_timm(info):
            return DataParameter(info.name, parameters[0], "a timm model's input, built by build_model_with_cfg", node.lineno)
        return None

    def _main_input_name(self, info: ClassInfo) -> str:
        for cls in self.classes.mro(info):
            for statement in cls.node.body:
                targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target] if isinstance(statement, ast.AnnAssign) else []
                value = statement.value if isinstance(statement, (ast.Assign, ast.AnnAssign)) else None
                if any(isinstance(t, ast.Name) and t.id == "main_input_name" for t in targets):
                    return value.value if isinstance(value, ast.Constant) and isinstance(value.value, str) else ""
        return _DEFAULT_MAIN_INPUT

    def _built_by_timm(self, info: ClassInfo) -> bool:
        module = info.module
        for call, scope in module.calls:
            if not call.args or not isinstance(call.args[0], ast.Name) or call.args[0].id != info.name:
                continue
            if module.qualified_name(call.func, scope) in _TIMM_FACTORY:
                return True
        return False
