from __future__ import annotations

import pytest

from inhouse.errors import SpecError
from inhouse.spec.catalog import get_model, known_models
from inhouse.spec.licenses import get_licence, licence_catalog


def test_every_catalog_model_has_licence_terms_with_sources() -> None:
    for name in known_models():
        licence = get_licence(get_model(name).license)
        assert licence.sources and licence.redistribution and licence.attribution


def test_llama_names_its_mau_threshold_and_use_policy() -> None:
    terms = " ".join(get_licence("Llama 3.3 Community License").use_restrictions)
    assert (
        "700 million" in terms
        and "onthly active users" in terms
        and "Acceptable Use Policy" in terms
    )
    assert licence_catalog()["Mistral Research License"].tenant_classes == ("research",)


def test_an_unknown_licence_says_where_to_add_it() -> None:
    with pytest.raises(SpecError, match=r"licenses\.yaml"):
        get_licence("Some Licence")
