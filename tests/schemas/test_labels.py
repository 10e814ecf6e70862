"""The rules of device labels (exosuit/schemas/labels.py): keys, values, the stored form
and a list's key=value selector."""

from __future__ import annotations

import pytest

from exosuit.schemas import labels


@pytest.mark.parametrize("key", ["rack", "a", "0", "team.ml", "cooling-zone", "gpu_tier", "k" * 63])
def test_keys_the_rules_take(key):
    assert labels.check_key(key) == key


@pytest.mark.parametrize("key", ["", "Rack", "-rack", "rack-", "rack.", "_x", "a b", "k" * 64, "é"])
def test_keys_the_rules_refuse_saying_the_rule(key):
    with pytest.raises(labels.LabelInvalid, match="is not 1-63 lower-case letters"):
        labels.check_key(key)


@pytest.mark.parametrize("value", ["a1", "A 1", "x" * 63, 'a"b,c%_}', "été"])
def test_values_the_rules_take(value):
    assert labels.check_value("k", value) == value


@pytest.mark.parametrize("value", ["", " a", "a ", "a\tb", "a\x00", "x" * 64])
def test_values_the_rules_refuse(value):
    with pytest.raises(labels.LabelInvalid, match="the value of label k"):
        labels.check_value("k", value)


def test_the_stored_form_is_canonical_and_none_for_none():
    assert labels.encode({"b": "2", "a": "1"}) == '{"a":"1","b":"2"}'
    assert labels.encode({}) is None
    assert labels.decode(None) == {} and labels.decode("") == {}
    assert labels.decode('{"a":"1"}') == {"a": "1"}
    assert labels.decode("[1]") == {}  # not an object: no labels


def test_a_selector_is_key_equals_value_by_the_same_rules():
    assert labels.parse_selector("rack=a=1") == ("rack", "a=1")
    for text, words in (("rack", "is not key=value"), ("Rack=a", "label key"), ("r= a", "value")):
        with pytest.raises(labels.LabelInvalid, match=words):
            labels.parse_selector(text)
