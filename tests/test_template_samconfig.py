"""samconfig.toml: three environments whose parameter overrides fit the template's parameters."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest

from local_stack.sam_deploy import load_template

ROOT = Path(__file__).resolve().parent.parent
ENVIRONMENTS = ("default", "dev", "prod")
PLACEHOLDERS = {"RayAddress", "ServeUrl"}


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    return tomllib.loads((ROOT / "samconfig.toml").read_text())


@pytest.fixture(scope="module")
def parameters() -> dict[str, Any]:
    return load_template(ROOT / "template.yaml")["Parameters"]


def overrides(config: dict[str, Any], environment: str) -> dict[str, str]:
    """The deploy parameter overrides as SAM CLI reads them ("Key=Value", value optionally quoted)."""
    pairs = [
        shlex.split(entry)[0].split("=", 1)
        for entry in config[environment]["deploy"]["parameters"]["parameter_overrides"]
    ]
    return dict(pairs)


def is_allowed(value: str, parameter: dict[str, Any]) -> bool:
    """Whether CloudFormation would accept `value` for `parameter`."""
    if "AllowedValues" in parameter and value not in parameter["AllowedValues"]:
        return False
    if "AllowedPattern" in parameter and not re.fullmatch(parameter["AllowedPattern"], value):
        return False
    if parameter["Type"] == "Number":
        number = float(value)
        return parameter.get("MinValue", number) <= number <= parameter.get("MaxValue", number)
    return True


def test_config_has_version_and_the_three_environments(config: dict[str, Any]) -> None:
    assert config["version"] == 0.1
    stacks = {environment: config[environment]["global"]["parameters"]["stack_name"] for environment in ENVIRONMENTS}
    assert len(set(stacks.values())) == 3
    for environment in ENVIRONMENTS:
        deploy = config[environment]["deploy"]["parameters"]
        assert deploy["capabilities"] == "CAPABILITY_IAM" and deploy["resolve_s3"] is True, environment
        assert config[environment]["global"]["parameters"]["region"], environment


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_overrides_name_template_parameters_with_allowed_values(
    config: dict[str, Any], parameters: dict[str, Any], environment: str
) -> None:
    values = overrides(config, environment)
    assert set(values) <= set(parameters)
    assert set(parameters) - set(values) <= {name for name, p in parameters.items() if "Default" in p}
    for name, value in values.items():
        if name not in PLACEHOLDERS:
            assert is_allowed(value, parameters[name]), f"{environment}: {name}={value!r}"


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_cluster_placeholders_are_refused_until_replaced(
    config: dict[str, Any], parameters: dict[str, Any], environment: str
) -> None:
    values = overrides(config, environment)
    assert values["RayAddress"] == "https://<hyperpod-ray-dashboard>"
    for name in PLACEHOLDERS:
        assert not is_allowed(values[name], parameters[name]), f"{environment}: {name} placeholder would deploy"
        assert is_allowed(values[name].replace("<", "").replace(">", ".example.com"), parameters[name])


def test_dev_polls_often_and_prod_schedule_waits_for_an_operator(config: dict[str, Any]) -> None:
    dev, prod = overrides(config, "dev"), overrides(config, "prod")
    assert int(dev["PollSeconds"]) < int(prod["PollSeconds"])
    assert dev["ScheduleState"] == prod["ScheduleState"] == "DISABLED"
    assert prod["ScheduleExpression"].startswith(("cron(", "rate("))
    assert (dev["Stage"], prod["Stage"]) == ("dev", "prod")
