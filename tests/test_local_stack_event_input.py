"""EventBridge target input: Input, InputPath, InputTransformer, as EventBridge applies them."""

import pytest

from local_stack.event_input import TargetInputError, render_template, target_input

EVENT = {
    "id": "e-1",
    "detail-type": "Object Created",
    "source": "aws.s3",
    "detail": {"bucket": {"name": "b"}, "object": {"key": 'in/a "quoted".json', "size": 12}},
}


def test_the_whole_event_by_default():
    assert target_input({"Id": "t"}, EVENT, "rule", "arn:rule") == EVENT


def test_constant_input_is_parsed_json():
    assert target_input({"Id": "t", "Input": '{"a": [1, 2]}'}, EVENT, "rule", "arn:rule") == {"a": [1, 2]}


def test_input_path_selects_part_of_the_event():
    assert target_input({"Id": "t", "InputPath": "$.detail.bucket"}, EVENT, "rule", "arn:rule") == {"name": "b"}


def test_input_transformer_quotes_values_as_eventbridge_does():
    target = {
        "Id": "t",
        "InputTransformer": {
            "InputPathsMap": {"key": "$.detail.object.key", "size": "$.detail.object.size", "type": "$.detail-type"},
            "InputTemplate": (
                '{"key": <key>, "size": <size>, "text": "<type>: <key> (<size> bytes)", "rule": <aws.events.rule-name>}'
            ),
        },
    }

    assert target_input(target, EVENT, "my-rule", "arn:rule") == {
        "key": 'in/a "quoted".json',
        "size": 12,
        "text": 'Object Created: in/a "quoted".json (12 bytes)',
        "rule": "my-rule",
    }


def test_a_plain_text_template_gives_a_string_with_raw_values():
    target = {
        "Id": "t",
        "InputTransformer": {"InputPathsMap": {"size": "$.detail.object.size"}, "InputTemplate": "<size> bytes"},
    }
    assert target_input(target, EVENT, "rule", "arn:rule") == "12 bytes"
    assert render_template("<type> happened", {"type": "Object Created"}) == "Object Created happened"
    assert render_template('"<type> happened"', {"type": 'a "b"'}) == '"a \\"b\\" happened"'


def test_unknown_placeholders_are_left_alone():
    assert render_template('{"a": "<nope>"}', {}) == '{"a": "<nope>"}'


@pytest.mark.parametrize(
    "target",
    [{"Id": "t", "Input": "{not json"}, {"Id": "t", "InputPath": "$.["}],
)
def test_bad_target_settings_raise_a_clear_error(target):
    with pytest.raises(TargetInputError, match="target t"):
        target_input(target, EVENT, "rule", "arn:rule")
