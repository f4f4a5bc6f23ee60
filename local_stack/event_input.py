"""The input an EventBridge rule target receives for a matched event: the whole event, ``Input``,
``InputPath`` or ``InputTransformer``, as EventBridge renders them."""

from __future__ import annotations

import json
import re
from typing import Any

from jsonpath_ng import parse as parse_jsonpath
from jsonpath_ng.exceptions import JSONPathError

_PLACEHOLDER = re.compile(r"<([A-Za-z0-9_.\-]+)>")


class TargetInputError(ValueError):
    """A rule target's Input, InputPath or InputTransformer cannot be applied to the event."""


def target_input(target: dict[str, Any], event: dict[str, Any], rule_name: str, rule_arn: str) -> Any:
    """Return the JSON value `target` (a PutTargets target dict) receives for `event`."""
    if "Input" in target:
        try:
            return json.loads(target["Input"])
        except json.JSONDecodeError as exc:
            raise TargetInputError(f"target {target.get('Id')}: Input is not valid JSON: {exc}") from exc
    if "InputPath" in target:
        return _select(target["InputPath"], event, target.get("Id"))
    if "InputTransformer" in target:
        transformer = target["InputTransformer"]
        values = {
            name: _select(path, event, target.get("Id")) for name, path in transformer.get("InputPathsMap", {}).items()
        }
        values.update(
            {
                "aws.events.event": event,
                "aws.events.event.json": event,
                "aws.events.rule-name": rule_name,
                "aws.events.rule-arn": rule_arn,
            }
        )
        text = render_template(transformer["InputTemplate"], values)
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text
    return event


def render_template(template: str, values: dict[str, Any]) -> str:
    """Fill `<name>` placeholders in an InputTemplate; unknown names are left as written."""
    json_template = template.lstrip()[:1] in ("{", "[", '"')
    out: list[str] = []
    in_string = False
    position = 0
    while position < len(template):
        char = template[position]
        match = _PLACEHOLDER.match(template, position) if char == "<" else None
        if match and match.group(1) in values:
            value = values[match.group(1)]
            raw = value if isinstance(value, str) else json.dumps(value)
            if not json_template:
                out.append(raw)
            elif in_string:
                out.append(json.dumps(raw)[1:-1])
            else:
                out.append(json.dumps(value))
            position = match.end()
            continue
        if char == '"' and not _escaped(template, position):
            in_string = not in_string
        out.append(char)
        position += 1
    return "".join(out)


def _escaped(text: str, position: int) -> bool:
    backslashes = 0
    while position - backslashes - 1 >= 0 and text[position - backslashes - 1] == "\\":
        backslashes += 1
    return backslashes % 2 == 1


def _select(path: str, event: dict[str, Any], target_id: str | None) -> Any:
    try:
        matches = parse_jsonpath(path).find(event)
    except JSONPathError as exc:
        raise TargetInputError(f"target {target_id}: bad JSONPath {path!r}: {exc}") from exc
    return matches[0].value if matches else None
