"""A device profile group parsed once (exosuit/schemas/profile_groups.py): what ``parse``
accepts and how it normalizes it, what it refuses and with which message, what ``read``
makes of a stored group, and what the typed value answers (units, matching)."""

from __future__ import annotations

import pytest

from exosuit.schemas import profile_groups
from exosuit.schemas.profile_groups import GroupInvalid, ProfileGroup

# (group as given, its normal form, resources, required, forbidden, accel)
ACCEPTED = [
    (
        {"resources:FPGA": "1"},
        {"resources:FPGA": "1"},
        {"FPGA": 1},
        set(),
        set(),
        {},
    ),
    (
        {"resources:CUSTOM_X": 2, "trait:CUSTOM_FAKE_DEVICE": " required "},
        {"resources:CUSTOM_X": "2", "trait:CUSTOM_FAKE_DEVICE": "required"},
        {"CUSTOM_X": 2},
        {"CUSTOM_FAKE_DEVICE"},
        set(),
        {},
    ),
    (
        {"resources: VGPU ": "007", "trait: HW_GPU_API_VULKAN": "forbidden"},
        {"resources:VGPU": "7", "trait:HW_GPU_API_VULKAN": "forbidden"},
        {"VGPU": 7},
        set(),
        {"HW_GPU_API_VULKAN"},
        {},
    ),
    (
        {"resources:FPGA": "1", "accel:bitstream_id": " abc ", "accel:same_numa_node": "TRUE"},
        {"resources:FPGA": "1", "accel:bitstream_id": "abc", "accel:same_numa_node": "true"},
        {"FPGA": 1},
        set(),
        set(),
        {"bitstream_id": "abc", "same_numa_node": "true"},
    ),
    (  # a label, and the NUMA node of the device
        {"resources:PGPU": "1", "accel:label:team ": " ml ", "accel:numa_node": 1},
        {"resources:PGPU": "1", "accel:label:team": "ml", "accel:numa_node": "1"},
        {"PGPU": 1},
        set(),
        set(),
        {"label:team": "ml", "numa_node": "1"},
    ),
    (  # Cyborg's resource classes stay valid; a standard one of os-resource-classes too
        {"resources:PGPU": "1", "resources:VCPU": "2"},
        {"resources:PGPU": "1", "resources:VCPU": "2"},
        {"PGPU": 1, "VCPU": 2},
        set(),
        set(),
        {},
    ),
    (  # the same name twice after stripping: the last one counts
        {"resources:FPGA": 1, "trait:CUSTOM_A": "required", "trait: CUSTOM_A": "forbidden"},
        {"resources:FPGA": "1", "trait:CUSTOM_A": "forbidden"},
        {"FPGA": 1},
        set(),
        {"CUSTOM_A"},
        {},
    ),
]


@pytest.mark.parametrize(
    ("given", "normal", "resources", "required", "forbidden", "accel"), ACCEPTED
)
def test_parse_accepts_and_normalizes(given, normal, resources, required, forbidden, accel):
    group = profile_groups.parse(given)
    assert dict(group.entries) == normal
    assert list(group.entries) == list(normal)  # the order given
    assert dict(group.resources) == resources
    assert group.required_traits == required
    assert group.forbidden_traits == forbidden
    assert dict(group.accel) == accel


# (group, the refusal's message): the messages of POST /v2/device_profiles's 400s.
REFUSED = [
    (
        {"resource:FPGA": "1"},
        "key 'resource:FPGA' must start with one of resources:, trait:, accel:",
    ),
    ({" resources:FPGA": "1"}, "key ' resources:FPGA' must start with one of"),
    ({"resources:fpga": "1"}, "unsupported resource class 'fpga'"),
    ({"resources:CUSTOM_x": "1"}, "unsupported resource class 'CUSTOM_x'"),
    ({"resources:FPGA": "0"}, "amount of FPGA must be a positive integer, not '0'"),
    ({"resources:FPGA": "-1"}, "amount of FPGA must be a positive integer, not '-1'"),
    ({"resources:FPGA": "1.5"}, "amount of FPGA must be a positive integer, not '1.5'"),
    ({"resources:FPGA": ""}, "amount of FPGA must be a positive integer, not ''"),
    ({"trait:NOT_A_TRAIT": "required"}, "unsupported trait name 'NOT_A_TRAIT'"),
    (
        {"trait:CUSTOM_A": "Required"},
        "trait CUSTOM_A must be 'required' or 'forbidden', not 'Required'",
    ),
    ({"trait:CUSTOM_A": 1}, "trait CUSTOM_A must be 'required' or 'forbidden', not '1'"),
    ({"accel:": "x"}, "empty accel: key"),
    ({"accel:  ": "x"}, "empty accel: key"),
    (
        {"accel:other": ""},
        "unknown key 'accel:other': the accel: keys are accel:bitstream_id, accel:function_id,"
        " accel:numa_node, accel:same_numa_node, accel:same_pcie_root, accel:distinct_devices"
        " and accel:label:<key>",
    ),
    ({"accel:numa_node": "-1"}, "accel:numa_node must be a NUMA node number (0, 1 …), not '-1'"),
    ({"accel:same_pcie_root": "yes"}, "accel:same_pcie_root must be 'true' or 'false', not 'yes'"),
    ({"accel:label:": "x"}, "accel:label: needs a label key and a value"),
    ({"accel:label:team": " "}, "accel:label:team needs a label key and a value"),
    # a label no device can have (exosuit/schemas/labels.py)
    (
        {"accel:label:Team": "ml"},
        "accel:label:Team: label key 'Team' is not 1-63 lower-case letters, digits",
    ),
    ({"accel:label: team": "ml"}, "accel:label: team: label key ' team' is not"),
    ({"accel:label:team": "x" * 64}, "accel:label:team: the value of label team"),
    # a trait needs a resource class to land on (Placement), forbidden ones too
    (
        {"trait:CUSTOM_A": "required"},
        "trait:CUSTOM_A without a resources: key: Placement needs a resource class",
    ),
    (
        {"trait:CUSTOM_A": "required", "trait:CUSTOM_B": "forbidden", "accel:numa_node": "0"},
        "trait:CUSTOM_A, trait:CUSTOM_B without a resources: key",
    ),
    # the first key refused is the one named
    ({"resources:FPGA": "1", "trait:X": "maybe", "bad": "1"}, "unsupported trait name 'X'"),
]


@pytest.mark.parametrize(("given", "message"), REFUSED)
def test_parse_refuses_with_the_reason(given, message):
    with pytest.raises(GroupInvalid) as refused:
        profile_groups.parse(given)
    assert str(refused.value).startswith(message)
    assert isinstance(refused.value, ValueError)


# (stored group, resources, required, forbidden, accel): read judges nothing again.
READ = [
    ({}, {}, set(), set(), {}),
    ({"resources:FPGA": "2", "resources:GPU": "1"}, {"FPGA": 2, "GPU": 1}, set(), set(), {}),
    (  # blanks as an import may have kept them; duplicates after stripping add up
        {"resources:FPGA": " 1", "resources: FPGA": "2", "trait: CUSTOM_A ": " required"},
        {"FPGA": 3},
        {"CUSTOM_A"},
        set(),
        {},
    ),
    (  # what the rules would refuse but a stored group may hold counts for nothing
        {"trait:CUSTOM_A": "preferred", "other:key": "x", "resources:unknown": "1"},
        {"unknown": 1},
        set(),
        set(),
        {},
    ),
    (
        {"accel:function_id": "f", "trait:CUSTOM_B": "forbidden"},
        {},
        set(),
        {"CUSTOM_B"},
        {"function_id": "f"},
    ),
]


@pytest.mark.parametrize(("stored", "resources", "required", "forbidden", "accel"), READ)
def test_read_takes_a_stored_group_as_it_is(stored, resources, required, forbidden, accel):
    group = profile_groups.read(stored)
    assert dict(group.entries) == stored
    assert dict(group.resources) == resources
    assert group.required_traits == required
    assert group.forbidden_traits == forbidden
    assert dict(group.accel) == accel


def test_read_refuses_an_amount_that_is_not_an_integer():
    with pytest.raises(GroupInvalid, match="amount of FPGA is not an integer: 'x'"):
        profile_groups.read({"resources:FPGA": "x"})


def test_the_value_is_frozen_and_a_parsed_group_equals_its_stored_reading():
    group = profile_groups.parse({"resources:FPGA": 1, "trait:CUSTOM_A": "required"})
    assert group == profile_groups.read(dict(group.entries))
    with pytest.raises(AttributeError):
        group.resources = {}  # type: ignore[misc]
    with pytest.raises(TypeError):
        group.resources["FPGA"] = 2  # type: ignore[index]
    assert ProfileGroup() == profile_groups.read({})


# (group, handles_per_unit, units)
UNITS = [
    ({"resources:FPGA": "1"}, {}, 1),
    ({"resources:FPGA": "2", "resources:GPU": "3"}, {}, 5),
    ({"resources:FPGA": "2", "trait:CUSTOM_DUAL": "required"}, {"CUSTOM_DUAL": 2}, 4),
    ({"resources:FPGA": "2", "trait:CUSTOM_DUAL": "forbidden"}, {"CUSTOM_DUAL": 2}, 2),
    (
        {"resources:FPGA": "1", "trait:CUSTOM_A": "required", "trait:CUSTOM_B": "required"},
        {"CUSTOM_A": 2, "CUSTOM_B": 3},
        6,
    ),
    ({"trait:CUSTOM_A": "required"}, {}, 0),
]


@pytest.mark.parametrize(("stored", "per_unit", "units"), UNITS)
def test_units_are_the_amounts_times_the_factor_of_each_required_trait(stored, per_unit, units):
    assert profile_groups.read(stored).units(per_unit) == units


# (group, provider's resource class, its traits, why it does not serve the group)
MATCHES = [
    ({}, "FPGA", set(), None),
    ({"accel:function_id": "f"}, "GPU", set(), None),
    ({"resources:FPGA": "1"}, "FPGA", {"CUSTOM_A"}, None),
    ({"resources:FPGA": "1", "resources:GPU": "1"}, "GPU", set(), None),
    (
        {"resources:GPU": "1", "resources:FPGA": "1"},
        "CUSTOM_X",
        set(),
        "offers resource class CUSTOM_X, not FPGA or GPU as its device profile group asks",
    ),
    (
        {"trait:CUSTOM_B": "required", "trait:CUSTOM_A": "required"},
        "FPGA",
        {"CUSTOM_A"},
        "lacks required trait(s) CUSTOM_B",
    ),
    (
        {"trait:CUSTOM_A": "required", "trait:CUSTOM_C": "forbidden"},
        "FPGA",
        {"CUSTOM_A", "CUSTOM_C"},
        "has forbidden trait(s) CUSTOM_C",
    ),
    (  # the resource class is judged first
        {"resources:GPU": "1", "trait:CUSTOM_A": "required"},
        "FPGA",
        set(),
        "offers resource class FPGA, not GPU as its device profile group asks",
    ),
]


@pytest.mark.parametrize(("stored", "rc", "traits", "why"), MATCHES)
def test_a_provider_matches_a_group_as_placement_would(stored, rc, traits, why):
    group = profile_groups.read(stored)
    assert group.mismatch(rc, frozenset(traits)) == why
    assert group.matches(rc, frozenset(traits)) is (why is None)


@pytest.mark.parametrize(
    ("stored", "bitstream", "function", "loads", "selects"),
    [
        ({"resources:FPGA": "1"}, None, None, False, True),
        ({"resources:FPGA": "1", "accel:bitstream_id": "b"}, "b", None, True, True),
        ({"accel:function_id": "f"}, None, "f", True, False),
        ({"accel:other": "o", "trait:CUSTOM_A": "forbidden"}, None, None, False, True),
        ({}, None, None, False, False),
    ],
)
def test_what_a_group_asks_to_be_loaded(stored, bitstream, function, loads, selects):
    group = profile_groups.read(stored)
    assert (group.bitstream_id, group.function_id) == (bitstream, function)
    assert group.loads_image is loads
    assert group.selects is selects
