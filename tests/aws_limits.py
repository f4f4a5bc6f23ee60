"""Documented AWS hard limits that the local stack (moto), cfn-lint and checkov do not enforce.

`check(template, definitions)` reads a translated (plain CloudFormation) template and the state machine
definitions and returns every violation; each `Limit` names the documentation page it comes from. Values are
resolved from the parameters given, else their defaults, and the conditions they decide; a value that cannot
be resolved (a resource's generated name) counts as the longest name AWS allows for it where a length is
summed, and is skipped where a value is compared.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Limit:
    """One documented limit: a short key, what it says, and the page that says it."""

    key: str
    text: str
    url: str


@dataclass(frozen=True)
class Violation:
    """A resource (or state) of the template that breaks `limit`."""

    limit: Limit
    where: str
    found: str

    def __str__(self) -> str:
        return f"{self.where}: {self.found} ({self.limit.text}; {self.limit.url})"


CW_QUOTAS = "https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/cloudwatch_limits.html"
CW_PUT_METRIC_ALARM = "https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_PutMetricAlarm.html"
CW_PUT_COMPOSITE_ALARM = "https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_PutCompositeAlarm.html"
LAMBDA_QUOTAS = "https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html"
LAMBDA_CONCURRENCY = "https://docs.aws.amazon.com/lambda/latest/dg/configuration-concurrency.html"
LAMBDA_CREATE_FUNCTION = "https://docs.aws.amazon.com/lambda/latest/api/API_CreateFunction.html"
SFN_QUOTAS = "https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html"
SFN_STATE_ENTERED = "https://docs.aws.amazon.com/step-functions/latest/apireference/API_StateEnteredEventDetails.html"
SFN_HISTORY_EVENT = "https://docs.aws.amazon.com/step-functions/latest/apireference/API_HistoryEvent.html"
EB_QUOTAS = "https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-quota.html"
EB_INPUT_TRANSFORMER = "https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_InputTransformer.html"
EB_PUT_RULE = "https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_PutRule.html"
SNS_CREATE_TOPIC = "https://docs.aws.amazon.com/sns/latest/api/API_CreateTopic.html"
SNS_FILTER_POLICY = "https://docs.aws.amazon.com/sns/latest/dg/subscription-filter-policy-constraints.html"
DDB_NAMING = "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/HowItWorks.NamingRulesDataTypes.html"
DDB_QUOTAS = "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html"
DDB_TTL_SPECIFICATION = (
    "https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TimeToLiveSpecification.html"
)
S3_BUCKET_NAMING = "https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html"
S3_LIFECYCLE_CONFIGURATION = "https://docs.aws.amazon.com/AmazonS3/latest/API/API_LifecycleConfiguration.html"
S3_LIFECYCLE_RULE = "https://docs.aws.amazon.com/AmazonS3/latest/API/API_LifecycleRule.html"

LIMITS = {
    limit.key: limit
    for limit in (
        # CloudWatch alarms
        Limit("cloudwatch.alarm-metrics", "an alarm on metric math watches at most 10 metrics", CW_QUOTAS),
        Limit("cloudwatch.alarm-actions", "at most 5 actions of each kind per alarm", CW_QUOTAS),
        Limit("cloudwatch.period", "a metric's period is at most one day (86,400 s)", CW_QUOTAS),
        Limit("cloudwatch.alarm-name", "an alarm name has 1 to 255 characters", CW_PUT_METRIC_ALARM),
        Limit("cloudwatch.alarm-description", "an alarm description has at most 1,024 characters", CW_PUT_METRIC_ALARM),
        Limit(
            "cloudwatch.composite-rule-length",
            "a composite alarm rule has 1 to 10,240 characters",
            CW_PUT_COMPOSITE_ALARM,
        ),
        Limit(
            "cloudwatch.composite-rule-alarms",
            "a composite alarm rule names at most 100 alarms",
            CW_PUT_COMPOSITE_ALARM,
        ),
        # Lambda
        Limit("lambda.memory", "a function has 128 to 10,240 MB of memory", LAMBDA_QUOTAS),
        Limit("lambda.timeout", "a function times out after at most 900 s", LAMBDA_QUOTAS),
        Limit("lambda.environment-size", "a function's environment variables total at most 4 KB", LAMBDA_QUOTAS),
        Limit("lambda.layers", "a function uses at most 5 layers", LAMBDA_QUOTAS),
        Limit("lambda.description", "a function description has at most 256 characters", LAMBDA_CREATE_FUNCTION),
        Limit("lambda.function-name", "a function name has 1 to 64 of a-z A-Z 0-9 - _", LAMBDA_CREATE_FUNCTION),
        Limit(
            "lambda.unreserved-concurrency",
            "reserved concurrency leaves at least 100 of the account's concurrency unreserved",
            LAMBDA_CONCURRENCY,
        ),
        # Step Functions
        Limit("states.definition-size", "a state machine definition is at most 1 MB", SFN_QUOTAS),
        Limit("states.name", "state machine and execution names: 1 to 80 characters, none of the excluded", SFN_QUOTAS),
        Limit("states.state-name", "a state name has 1 to 80 characters", SFN_STATE_ENTERED),
        Limit("states.timeout", "an execution runs at most one year, so no timeout exceeds it", SFN_QUOTAS),
        Limit("states.history", "an execution history holds at most 25,000 events", SFN_QUOTAS),
        # EventBridge
        Limit("events.pattern-size", "an event pattern has at most 2,048 characters", EB_QUOTAS),
        Limit("events.targets", "a rule has at most 5 targets", EB_QUOTAS),
        Limit("events.input-paths", "an input transformer maps at most 100 paths", EB_INPUT_TRANSFORMER),
        Limit("events.input-template", "an input template has 1 to 8,192 characters", EB_INPUT_TRANSFORMER),
        Limit("events.rule-name", "a rule name has 1 to 64 of . - _ A-Z a-z 0-9", EB_PUT_RULE),
        Limit("events.rule-description", "a rule description has at most 512 characters", EB_PUT_RULE),
        # SNS
        Limit("sns.topic-name", "a topic name has 1 to 256 of A-Z a-z 0-9 - _ (.fifo for FIFO)", SNS_CREATE_TOPIC),
        Limit("sns.filter-policy-size", "a filter policy is at most 256 KB", SNS_FILTER_POLICY),
        Limit("sns.filter-policy-keys", "a filter policy has at most 5 keys", SNS_FILTER_POLICY),
        # DynamoDB
        Limit("dynamodb.table-name", "a table or index name has 3 to 255 of a-z A-Z 0-9 _ - .", DDB_NAMING),
        Limit("dynamodb.global-indexes", "a table has at most 20 global secondary indexes", DDB_QUOTAS),
        Limit("dynamodb.local-indexes", "a table has at most 5 local secondary indexes", DDB_QUOTAS),
        Limit("dynamodb.ttl-attribute", "the TTL attribute name has 1 to 255 characters", DDB_TTL_SPECIFICATION),
        # S3
        Limit("s3.bucket-name", "a general purpose bucket name follows S3's naming rules", S3_BUCKET_NAMING),
        Limit("s3.lifecycle-rules", "a lifecycle configuration has at most 1,000 rules", S3_LIFECYCLE_CONFIGURATION),
        Limit("s3.lifecycle-rule-id", "a lifecycle rule ID has at most 255 characters", S3_LIFECYCLE_RULE),
    )
}

ONE_YEAR_S = 365 * 24 * 3600  # SFN_QUOTAS: "Maximum execution time: 1 year"
HISTORY_EVENTS = 25_000  # SFN_QUOTAS: "Maximum execution history size: 25,000 events"
UNRESERVED_MINIMUM = 100  # LAMBDA_CONCURRENCY: reserve up to the unreserved account concurrency minus 100
# The account's "Concurrent executions" quota assumed when none is given: Lambda's default (LAMBDA_QUOTAS). New
# accounts start lower; pass the account's own quota (Service Quotas) to check a real deployment.
DEFAULT_ACCOUNT_CONCURRENCY = 1000
# SFN_QUOTAS: names must not contain whitespace, ? *, < > { } [ ], " # % \ ^ | ~ ` $ & , ; : / or control characters.
EXCLUDED_NAME_CHARACTERS = re.compile(r"[\s?*<>{}\[\]\"#%\\^|~`$&,;:/\u0000-\u001f\u007f-\u009f]")

# Pseudo parameters' values (the longest account id and partition are as long as these).
PSEUDO = {
    "AWS::AccountId": "123456789012",
    "AWS::Partition": "aws",
    "AWS::Region": "us-east-1",
    "AWS::URLSuffix": "amazonaws.com",
}
_ARN_PREFIX = "arn:aws:{service}:us-east-1:123456789012:"
# The longest value a Ref of a resource whose name CloudFormation generates can take, per the service's name limit.
LONGEST_REF = {
    "AWS::S3::Bucket": 63,  # S3_BUCKET_NAMING
    "AWS::DynamoDB::Table": 255,  # DDB_NAMING
    "AWS::SNS::Topic": len(_ARN_PREFIX.format(service="sns")) + 256,  # SNS_CREATE_TOPIC: the topic's ARN
    "AWS::StepFunctions::StateMachine": len(_ARN_PREFIX.format(service="states")) + len("stateMachine:") + 80,
    "AWS::Lambda::Function": 64,  # LAMBDA_CREATE_FUNCTION
    "AWS::SQS::Queue": len("https://sqs.us-east-1.amazonaws.com/123456789012/") + 80,
    "AWS::CloudWatch::Alarm": 255,  # CW_PUT_METRIC_ALARM
}
LONGEST_GETATT_ARN = {
    "AWS::Lambda::Function": len(_ARN_PREFIX.format(service="lambda")) + len("function:") + 64,
    "AWS::StepFunctions::StateMachine": LONGEST_REF["AWS::StepFunctions::StateMachine"],
    "AWS::CloudWatch::Alarm": len(_ARN_PREFIX.format(service="cloudwatch")) + len("alarm:") + 255,
}


class Unresolved:
    """A value known only at deploy time; `length` is the longest it can be (0 when unknown), `text` what is
    known of it (a Fn::Sub's text without the values it could not resolve)."""

    def __init__(self, length: int = 0, text: str = "") -> None:
        self.length = length
        self.text = text


NO_VALUE = object()  # AWS::NoValue: the property is absent


class Resolver:
    """Resolves intrinsic functions of a template for one set of parameter values."""

    def __init__(self, template: dict[str, Any], parameters: dict[str, Any] | None = None) -> None:
        self.template = template
        self.values: dict[str, Any] = dict(PSEUDO)
        for name, declared in template.get("Parameters", {}).items():
            given = (parameters or {}).get(name, declared.get("Default"))
            if given is not None:
                self.values[name] = given.split(",") if declared.get("Type") == "CommaDelimitedList" else given
        self.conditions: dict[str, bool | None] = {}

    def condition(self, name: str) -> bool | None:
        """A condition's value, or None when it depends on what is not known."""
        if name not in self.conditions:
            self.conditions[name] = None  # no cycles
            self.conditions[name] = self._truth(self.template.get("Conditions", {}).get(name))
        return self.conditions[name]

    def _truth(self, value: Any) -> bool | None:
        if not isinstance(value, dict) or len(value) != 1:
            return None
        [(function, args)] = value.items()
        if function == "Condition":
            return self.condition(args)
        if function == "Fn::Equals":
            left, right = (self.resolve(arg) for arg in args)
            if isinstance(left, Unresolved) or isinstance(right, Unresolved):
                return None
            return str(left) == str(right)
        parts = [self._truth(arg) for arg in args]
        if function == "Fn::Not":
            return None if parts[0] is None else not parts[0]
        if function == "Fn::And":
            return False if False in parts else (None if None in parts else True)
        if function == "Fn::Or":
            return True if True in parts else (None if None in parts else False)
        return None

    def resolve(self, value: Any) -> Any:
        """`value` with every intrinsic it can resolve resolved; `Unresolved` where it cannot."""
        if isinstance(value, list):
            return [item for item in (self.resolve(v) for v in value) if item is not NO_VALUE]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            [(function, args)] = value.items()
            if function == "Ref":
                return self._ref(args)
            if function == "Fn::GetAtt":
                return self._get_att(args if isinstance(args, list) else args.split(".", 1))
            if function == "Fn::If":
                truth = self.condition(args[0])
                if truth is None:
                    return Unresolved()
                return self.resolve(args[1] if truth else args[2])
            if function == "Fn::Join":
                parts = self.resolve(args[1])
                if isinstance(parts, Unresolved) or any(isinstance(part, Unresolved) for part in parts):
                    return Unresolved(sum(getattr(p, "length", len(str(p))) for p in as_list(parts)))
                return args[0].join(str(part) for part in parts)
            if function == "Fn::Sub":
                return self._sub(*(args if isinstance(args, list) else [args, {}]))
            if function.startswith("Fn::"):
                return Unresolved()
        return {key: item for key, item in ((k, self.resolve(v)) for k, v in value.items()) if item is not NO_VALUE}

    def _ref(self, name: str) -> Any:
        if name == "AWS::NoValue":
            return NO_VALUE
        if name in self.values:
            return self.values[name]
        resource = self.template.get("Resources", {}).get(name)
        return Unresolved(LONGEST_REF.get(resource["Type"], 0) if resource else 0)

    def _get_att(self, args: list[str]) -> Any:
        resource = self.template.get("Resources", {}).get(args[0])
        length = LONGEST_GETATT_ARN.get(resource["Type"], 0) if resource and args[1] == "Arn" else 0
        return Unresolved(length)

    def _sub(self, text: str, variables: dict[str, Any]) -> Any:
        unresolved = 0
        known = {name: self.resolve(value) for name, value in variables.items()}

        def fill(match: re.Match[str]) -> str:
            nonlocal unresolved
            name = match.group(1)
            value = known[name] if name in known else self._ref(name) if "." not in name else Unresolved()
            if isinstance(value, Unresolved):
                unresolved += max(value.length, 1)
                return ""
            return str(value)

        filled = re.sub(r"\$\{([^}!]+)\}", fill, text)
        return Unresolved(len(filled) + unresolved, filled) if unresolved else filled


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def length(value: Any) -> int:
    """The length of a resolved string, or the longest an unresolved one can be."""
    return value.length if isinstance(value, Unresolved) else len(str(value))


def resources(template: dict[str, Any], resolver: Resolver, resource_type: str) -> Iterator[tuple[str, dict]]:
    """(logical id, resolved properties) of the template's resources of `resource_type` that are created."""
    for name, resource in template.get("Resources", {}).items():
        if resource.get("Type") != resource_type:
            continue
        if "Condition" in resource and resolver.condition(resource["Condition"]) is False:
            continue
        yield name, resolver.resolve(resource.get("Properties", {}))


# ------------------------------------------------------------------------------------------ state machines


def state_machine_definitions(template: dict[str, Any], parameters: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ASL definition of each state machine of a translated template, its substitutions filled in: values
    of parameters as given (else their defaults), and ARNs of the stack's resources as the longest they can be."""
    resolver = Resolver(template, parameters)
    definitions = {}
    for name, resource in template.get("Resources", {}).items():
        if resource.get("Type") != "AWS::StepFunctions::StateMachine":
            continue
        properties = resource["Properties"]
        text = properties.get("DefinitionString")
        if isinstance(text, dict):
            separator, lines = text["Fn::Join"]
            text = separator.join(lines)
        elif text is None:
            text = json.dumps(properties["Definition"])
        for placeholder, value in properties.get("DefinitionSubstitutions", {}).items():
            resolved = resolver.resolve(value)
            filled = "x" * resolved.length if isinstance(resolved, Unresolved) else str(resolved)
            text = text.replace("${" + placeholder + "}", filled)
        definitions[name] = json.loads(text)
    return definitions


# Events each kind of state adds to the history when it runs once without a retry (the event types of
# SFN_HISTORY_EVENT): <Type>StateEntered and <Type>StateExited, and for a Task TaskScheduled, TaskStarted
# and TaskSucceeded between them. A retried attempt adds TaskScheduled, TaskStarted and TaskFailed.
STATE_EVENTS = {"Task": 5, "Pass": 2, "Wait": 2, "Choice": 2, "Succeed": 2, "Fail": 1}
EXECUTION_EVENTS = 2  # ExecutionStarted and the execution's end event


def history_bound(definition: dict[str, Any]) -> int | None:
    """An upper bound on the history events of one execution whose tasks succeed at their first attempt,
    or None where none is computable (Map or Parallel states, a Wait without a fixed `Seconds`, a loop that
    can go round without waiting, or no TimeoutSeconds to bound the loops)."""
    states = definition["States"]
    if any(state["Type"] not in STATE_EVENTS for state in states.values()):
        return None
    graph = {name: _successors(state) for name, state in states.items()}
    loops = [scc for scc in _strongly_connected(graph) if len(scc) > 1 or scc[0] in graph[scc[0]]]
    total = EXECUTION_EVENTS + sum(STATE_EVENTS[states[name]["Type"]] for name in states)
    for loop in loops:
        waits = [states[name] for name in loop if states[name]["Type"] == "Wait"]
        if not waits or any(not isinstance(w.get("Seconds"), (int, float)) or w["Seconds"] <= 0 for w in waits):
            return None
        without_waits = {name: [n for n in graph[name] if n in loop and states[n]["Type"] != "Wait"] for name in loop}
        if any(len(c) > 1 or c[0] in without_waits[c[0]] for c in _strongly_connected(without_waits) if c[0] in loop):
            return None  # a cycle that skips every Wait
        if "TimeoutSeconds" not in definition:
            return None
        rounds = math.ceil(definition["TimeoutSeconds"] / min(w["Seconds"] for w in waits))
        total += rounds * sum(STATE_EVENTS[states[name]["Type"]] for name in loop)
    return total


def _successors(state: dict[str, Any]) -> list[str]:
    found = [state["Next"]] if "Next" in state else []
    found += [choice["Next"] for choice in state.get("Choices", [])]
    found += [state["Default"]] if "Default" in state else []
    found += [catch["Next"] for catch in state.get("Catch", [])]
    return found


def _strongly_connected(graph: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of `graph` (edges to unknown nodes are ignored)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for successor in graph[node]:
            if successor not in graph:
                continue
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            components.append(component)

    for node in graph:
        if node not in index:
            visit(node)
    return components


def _all_states(states: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, state in states.items():
        yield name, state
        for branch in state.get("Branches", []):
            yield from _all_states(branch["States"])
        for key in ("Iterator", "ItemProcessor"):
            if key in state:
                yield from _all_states(state[key]["States"])


def execution_name_violations(name: str, where: str = "execution name") -> list[Violation]:
    """Violations of Step Functions' rules for a state machine or execution name."""
    bad = EXCLUDED_NAME_CHARACTERS.search(name)
    if not 1 <= len(name) <= 80 or bad:
        found = f"{name[:100]!r} has {len(name)} characters" + (f" and {bad.group()!r}" if bad else "")
        return [Violation(LIMITS["states.name"], where, found)]
    return []


# ------------------------------------------------------------------------------------------ checks


Check = Callable[[str, dict[str, Any], Callable[[str, str, str], None]], None]


def check(
    template: dict[str, Any],
    definitions: dict[str, Any] | None = None,
    parameters: dict[str, Any] | None = None,
    account_concurrency: int = DEFAULT_ACCOUNT_CONCURRENCY,
) -> list[Violation]:
    """Every violation of the encoded limits by a translated template and its state machine definitions
    (by logical id; derived from the template when not given), for the given parameter values."""
    resolver = Resolver(template, parameters)
    violations: list[Violation] = []

    def report(key: str, where: str, found: str) -> None:
        violations.append(Violation(LIMITS[key], where, found))

    for resource_type, checker in CHECKS.items():
        for name, properties in resources(template, resolver, resource_type):
            checker(name, properties, report)
    reserved = [
        properties.get("ReservedConcurrentExecutions")
        for _, properties in resources(template, resolver, "AWS::Lambda::Function")
    ]
    total = sum(int(value) for value in reserved if value is not None and not isinstance(value, Unresolved))
    if total > account_concurrency - UNRESERVED_MINIMUM:
        report(
            "lambda.unreserved-concurrency",
            "AWS::Lambda::Function",
            f"{total} reserved of an account concurrency of {account_concurrency} (assumed; pass the account's)",
        )
    if definitions is None:
        definitions = state_machine_definitions(template, parameters)
    for name, definition in definitions.items():
        _check_definition(name, definition, report)
    return violations


def _limit_length(report: Callable[..., None], key: str, where: str, value: Any, low: int, high: int) -> None:
    if value is not None and not isinstance(value, Unresolved) and not low <= len(str(value)) <= high:
        report(key, where, f"{len(str(value))} characters")


def _check_alarm(name: str, properties: dict[str, Any], report: Callable[..., None]) -> None:
    metrics = [query for query in properties.get("Metrics", []) if "MetricStat" in query]
    if len(metrics) > 10:
        report("cloudwatch.alarm-metrics", name, f"{len(metrics)} metrics")
    periods = [properties.get("Period")] + [
        query.get("MetricStat", query).get("Period") for query in properties.get("Metrics", [])
    ]
    if any(isinstance(p, int) and p > 86_400 for p in periods):
        report("cloudwatch.period", name, f"period {max(p for p in periods if isinstance(p, int))} s")
    _check_alarm_common(name, properties, report)


def _check_composite_alarm(name: str, properties: dict[str, Any], report: Callable[..., None]) -> None:
    rule = properties.get("AlarmRule", "")
    if length(rule) > 10_240 or length(rule) < 1:
        report("cloudwatch.composite-rule-length", name, f"at most {length(rule)} characters")
    named = re.findall(r"(?:ALARM|OK|INSUFFICIENT_DATA)\(", rule.text if isinstance(rule, Unresolved) else rule)
    if len(named) > 100:
        report("cloudwatch.composite-rule-alarms", name, f"{len(named)} alarms")
    _check_alarm_common(name, properties, report)


def _check_alarm_common(name: str, properties: dict[str, Any], report: Callable[..., None]) -> None:
    for kind in ("AlarmActions", "OKActions", "InsufficientDataActions"):
        if len(properties.get(kind, [])) > 5:
            report("cloudwatch.alarm-actions", name, f"{len(properties[kind])} {kind}")
    _limit_length(report, "cloudwatch.alarm-name", name, properties.get("AlarmName"), 1, 255)
    _limit_length(report, "cloudwatch.alarm-description", name, properties.get("AlarmDescription"), 0, 1024)


def _check_function(name: str, properties: dict[str, Any], report: Callable[..., None]) -> None:
    memory, timeout = properties.get("MemorySize", 128), properties.get("Timeout", 3)
    if isinstance(memory, (int, str)) and not 128 <= int(memory) <= 10_240:
        report("lambda.memory", name, f"{memory} MB")
    if isinstance(timeout, (int, str)) and not 1 <= int(timeout) <= 900:
        report("lambda.timeout", name, f"{timeout} s")
    variables = properties.get("Environment", {}).get("Variables", {})
    size = sum(
        len(key.encode()) + (v.length if isinstance(v, Unresolved) else len(str(v).encode()))
        for key, v in variables.items()
    )
    if size > 4096:
        report("lambda.environment-size", name, f"up to {size} bytes")
    if len(properties.get("Layers", [])) > 5:
        report("lambda.layers", name, f"{len(properties['Layers'])} layers")
    _limit_length(report, "lambda.description", name, properties.get("Description"), 0, 256)
    function_name = properties.get("FunctionName")
    if isinstance(function_name, str) and not re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", function_name):
        report("lambda.function-name", name, repr(function_name[:100]))


def _check_state_machine(name: str, properties: dict[str, Any], report: Callable[..., None]) -> None:
    machine_name = properties.get("StateMachineName")
    if isinstance(machine_name, str):
        for violation in execution_name_violations(machine_name, name):
            report(violation.limit.key, name, violation.found)


def _check_definition(name: str, definition: dict[str, Any], report: Callable[..., None]) -> None:
    size = len(json.dumps(definition).encode())
    if size > 1_048_576:
        report("states.definition-size", name, f"{size} bytes")
    timeouts = [("TimeoutSeconds", definition.get("TimeoutSeconds"))]
    for state_name, state in _all_states(definition["States"]):
        if not 1 <= len(state_name) <= 80:
            report("states.state-name", f"{name}.{state_name[:100]}", f"{len(state_name)} characters")
        timeouts += [(f"{state_name}.{key}", state.get(key)) for key in ("TimeoutSeconds", "HeartbeatSeconds")]
    for where, seconds in timeouts:
        if isinstance(seconds, (int, float)) and seconds > ONE_YEAR_S:
            report("states.timeout", f"{name}.{where}", f"{seconds} s")
    bound = history_bound(definition)
    if bound is not None and bound > HISTORY_EVENTS:
        report("states.history", name, f"up to {bound} events in {definition['TimeoutSeconds']} s")


def _check_rule(name: str, properties: dict[str, Any], report: Callable[..., None]) -> None:
    pattern = properties.get("EventPattern")
    if pattern is not None:
        text = pattern if isinstance(pattern, str) else json.dumps(_lengthen(pattern), separators=(",", ":"))
        if len(text) > 2048:
            report("events.pattern-size", name, f"up to {len(text)} characters")
    targets = properties.get("Targets", [])
    if len(targets) > 5:
        report("events.targets", name, f"{len(targets)} targets")
    for target in targets:
        transformer = target.get("InputTransformer")
        if transformer:
            if len(transformer.get("InputPathsMap", {})) > 100:
                report("events.input-paths", f"{name}.{target.get('Id')}", f"{len(transformer['InputPathsMap'])} paths")
            _limit_length(
                report, "events.input-template", f"{name}.{target.get('Id')}", transformer.get("InputTemplate"), 1, 8192
            )
    rule_name = properties.get("Name")
    if isinstance(rule_name, str) and not re.fullmatch(r"[.\-_A-Za-z0-9]{1,64}", rule_name):
        report("events.rule-name", name, repr(rule_name[:100]))
    _limit_length(report, "events.rule-description", name, properties.get("Description"), 0, 512)


def _lengthen(value: Any) -> Any:
    """A resolved value with each unresolved part as a string of the longest length it can have."""
    if isinstance(value, Unresolved):
        return "x" * value.length
    if isinstance(value, list):
        return [_lengthen(v) for v in value]
    if isinstance(value, dict):
        return {k: _lengthen(v) for k, v in value.items()}
    return value


def _check_topic(name: str, properties: dict[str, Any], report: Callable[..., None]) -> None:
    topic_name = properties.get("TopicName")
    if isinstance(topic_name, str):
        fifo = str(properties.get("FifoTopic", "false")).lower() == "true"
        base = topic_name.removesuffix(".fifo") if fifo else topic_name
        if not re.fullmatch(r"[A-Za-z0-9_-]+", base) or not 1 <= len(topic_name) <= 256:
            report("sns.topic-name", name, repr(topic_name[:100]))


def _check_subscription(name: str, properties: dict[str, Any], report: Callable[..., None]) -> None:
    policy = properties.get("FilterPolicy")
    if policy is None:
        return
    parsed = json.loads(policy) if isinstance(policy, str) else _lengthen(policy)
    size = len(json.dumps(parsed).encode())
    if size > 256 * 1024:
        report("sns.filter-policy-size", name, f"{size} bytes")
    if isinstance(parsed, dict) and len(parsed) > 5:
        report("sns.filter-policy-keys", name, f"{len(parsed)} keys")


def _check_table(name: str, properties: dict[str, Any], report: Callable[..., None]) -> None:
    names = [("TableName", properties.get("TableName"))]
    for kind, key, most in (
        ("GlobalSecondaryIndexes", "dynamodb.global-indexes", 20),
        ("LocalSecondaryIndexes", "dynamodb.local-indexes", 5),
    ):
        indexes = properties.get(kind, [])
        if len(indexes) > most:
            report(key, name, f"{len(indexes)} {kind}")
        names += [(f"{kind}.IndexName", index.get("IndexName")) for index in indexes]
    for where, value in names:
        if isinstance(value, str) and not re.fullmatch(r"[a-zA-Z0-9_.-]{3,255}", value):
            report("dynamodb.table-name", f"{name}.{where}", repr(value[:100]))
    ttl = properties.get("TimeToLiveSpecification", {}).get("AttributeName")
    _limit_length(report, "dynamodb.ttl-attribute", name, ttl, 1, 255)


def bucket_name_problem(name: str) -> str | None:
    """Why `name` is not a valid general purpose bucket name (S3_BUCKET_NAMING), or None."""
    if not 3 <= len(name) <= 63:
        return f"{len(name)} characters"
    if not re.fullmatch(r"[a-z0-9][a-z0-9.-]*[a-z0-9]", name):
        return "characters other than a-z 0-9 . -, or not beginning and ending with a letter or digit"
    if ".." in name:
        return "two adjacent periods"
    try:
        ipaddress.IPv4Address(name)
        return "formatted as an IP address"
    except ValueError:
        pass
    for prefix in ("xn--", "sthree-", "amzn-s3-demo-"):
        if name.startswith(prefix):
            return f"the reserved prefix {prefix}"
    for suffix in ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3"):
        if name.endswith(suffix):
            return f"the reserved suffix {suffix}"
    return None


def _check_bucket(name: str, properties: dict[str, Any], report: Callable[..., None]) -> None:
    bucket_name = properties.get("BucketName")
    if isinstance(bucket_name, str) and (problem := bucket_name_problem(bucket_name)):
        report("s3.bucket-name", name, f"{bucket_name[:100]!r}: {problem}")
    rules = properties.get("LifecycleConfiguration", {}).get("Rules", [])
    if len(rules) > 1000:
        report("s3.lifecycle-rules", name, f"{len(rules)} rules")
    for rule in rules:
        _limit_length(report, "s3.lifecycle-rule-id", name, rule.get("Id"), 0, 255)


CHECKS: dict[str, Check] = {
    "AWS::CloudWatch::Alarm": _check_alarm,
    "AWS::CloudWatch::CompositeAlarm": _check_composite_alarm,
    "AWS::Lambda::Function": _check_function,
    "AWS::StepFunctions::StateMachine": _check_state_machine,
    "AWS::Events::Rule": _check_rule,
    "AWS::SNS::Topic": _check_topic,
    "AWS::SNS::Subscription": _check_subscription,
    "AWS::DynamoDB::Table": _check_table,
    "AWS::S3::Bucket": _check_bucket,
}
