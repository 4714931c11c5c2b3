from typing import Literal

import pytest
from pydantic import BaseModel, ValidationError

from inhouse.spec.errors_format import describe_validation_error


class _Kind(BaseModel):
    kind: Literal["agent", "utility"]


def _describe(data: dict[str, object]) -> str:
    with pytest.raises(ValidationError) as caught:
        _Kind.model_validate(data)
    return describe_validation_error(caught.value, "spec.yaml")


def test_a_literal_error_names_each_choice_once() -> None:
    # "Input should be 'agent' or 'utility' (allowed: 'agent' or 'utility')" named them twice.
    text = _describe({"kind": "chatbot"})
    assert text.splitlines()[1] == "  kind: Input should be 'agent' or 'utility'"


def test_a_missing_field_is_worded() -> None:
    assert _describe({}).splitlines()[1] == "  kind: required field is missing"
