"""Evaluate a translated template's conditions, rules and intrinsic functions for given parameter values, as
CloudFormation would at stack creation: which resources a stack gets, and the values of their properties.

Covers the functions the product template uses in conditions, rules and the properties tests read (Ref, Condition,
Fn::If/And/Or/Not/Equals/Contains/Join/Split/Select/Sub); a reference to a resource or its attribute stays symbolic
(`{"Ref": "Name"}` / `{"Fn::GetAtt": [...]}`), as it is only known once the resource exists.
"""

from __future__ import annotations

import re
from typing import Any

PSEUDO = {
    "AWS::Region": "us-east-1",
    "AWS::AccountId": "123456789012",
    "AWS::Partition": "aws",
    "AWS::StackName": "maze-rl-ops",
    "AWS::URLSuffix": "amazonaws.com",
}
_NO_VALUE = object()
_PLACEHOLDER = re.compile(r"\$\{([^}!][^}]*)\}")


class Stack:
    """A translated template with parameter values: its conditions, rules and resolved resources."""

    def __init__(self, template: dict[str, Any], values: dict[str, str]):
        """values: the parameters given (others take their Default); list parameters as CloudFormation's text."""
        self.template = template
        self.parameters: dict[str, Any] = {}
        for name, spec in template["Parameters"].items():
            text = str(values.get(name, spec.get("Default", "")))
            self.parameters[name] = text.split(",") if spec["Type"] == "CommaDelimitedList" else text

    def condition(self, name: str) -> bool:
        """The value of the named condition."""
        return bool(self.resolve(self.template["Conditions"][name]))

    def failed_rules(self) -> list[str]:
        """The AssertDescription of every assertion of an applicable rule that does not hold."""
        failed = []
        for rule in self.template.get("Rules", {}).values():
            if "RuleCondition" in rule and not self.resolve(rule["RuleCondition"]):
                continue
            failed += [a["AssertDescription"] for a in rule["Assertions"] if not self.resolve(a["Assert"])]
        return failed

    def resources(self, resource_type: str | None = None) -> dict[str, dict[str, Any]]:
        """The resources the stack gets (their conditions hold), properties resolved, of a type if given."""
        return {
            name: {**resource, "Properties": self.resolve(resource.get("Properties", {}))}
            for name, resource in self.template["Resources"].items()
            if (resource_type is None or resource["Type"] == resource_type)
            and ("Condition" not in resource or self.condition(resource["Condition"]))
        }

    def resolve(self, value: Any) -> Any:
        """The value of `value` with parameters, pseudo parameters, conditions and functions applied."""
        if isinstance(value, list):
            return [item for item in (self.resolve(v) for v in value) if item is not _NO_VALUE]
        if not isinstance(value, dict):
            return value
        if len(value) != 1:
            return {k: v for k, v in ((k, self.resolve(v)) for k, v in value.items()) if v is not _NO_VALUE}
        [(function, argument)] = value.items()
        intrinsic = function.startswith("Fn::") or (function in ("Ref", "Condition") and isinstance(argument, str))
        handler = getattr(self, "_" + function.replace("Fn::", "fn_").lower(), None) if intrinsic else None
        if handler is None:
            return {function: self.resolve(argument)}
        return handler(argument)

    def _ref(self, name: str) -> Any:
        if name == "AWS::NoValue":
            return _NO_VALUE
        if name in PSEUDO:
            return PSEUDO[name]
        return self.parameters.get(name, {"Ref": name})

    def _condition(self, name: str) -> bool:
        return self.condition(name)

    def _fn_if(self, argument: list[Any]) -> Any:
        name, when_true, when_false = argument
        return self.resolve(when_true if self.condition(name) else when_false)

    def _fn_and(self, argument: list[Any]) -> bool:
        return all(self.resolve(item) for item in argument)

    def _fn_or(self, argument: list[Any]) -> bool:
        return any(self.resolve(item) for item in argument)

    def _fn_not(self, argument: list[Any]) -> bool:
        return not self.resolve(argument[0])

    def _fn_equals(self, argument: list[Any]) -> bool:
        left, right = (self.resolve(item) for item in argument)
        return str(left) == str(right)

    def _fn_contains(self, argument: list[Any]) -> bool:
        items, item = (self.resolve(part) for part in argument)
        return item in items

    def _fn_join(self, argument: list[Any]) -> str:
        separator, items = argument
        return separator.join(str(item) for item in self.resolve(items))

    def _fn_split(self, argument: list[Any]) -> list[str]:
        separator, text = argument
        return str(self.resolve(text)).split(separator)

    def _fn_select(self, argument: list[Any]) -> Any:
        index, items = argument
        return self.resolve(items)[int(self.resolve(index))]

    def _fn_sub(self, argument: Any) -> Any:
        text, variables = (argument, {}) if isinstance(argument, str) else argument
        variables = {name: self.resolve(v) for name, v in variables.items()}

        def value(match: re.Match[str]) -> str:
            name = match.group(1)
            resolved = variables[name] if name in variables else self._ref(name)
            return resolved if isinstance(resolved, str) else match.group(0)

        return _PLACEHOLDER.sub(value, text)
