"""Tool calls written as text (cli/loop/textcalls.py) and the prompt that asks for them
(cli/loop/toolprompt.py): every format read, what stays text, hostile input, and the round trip
from the prompt's example back to a call."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli.backends.messages import MAX_JSON_DEPTH
from cli.loop.textcalls import CALL_CLOSE, CALL_OPEN, extract_tool_calls
from cli.loop.tokens import estimate_tokens
from cli.loop.toolprompt import HEADING, describe_tools, format_call
from cli.tools import ALL_TOOLS
from cli.tools.schema import validate_arguments

OFFERED = ("read_file", "write_file", "list_directory", "run_command")
CALL = '{"name": "read_file", "arguments": {"path": "a.txt"}}'
READ = ("read_file", {"path": "a.txt"}, None)
LIST = ("list_directory", {"path": "."}, None)
DEEP = "[" * (MAX_JSON_DEPTH + 1)
TOO_DEEP = f"the tool call nests deeper than {MAX_JSON_DEPTH} levels; send a flat object"

Seen = tuple[str, dict[str, Any], str | None]


def read(content: str, offered: tuple[str, ...] = OFFERED) -> tuple[list[Seen], str]:
    calls, rest = extract_tool_calls(content, offered)
    return [(c.name, dict(c.arguments), c.arguments_error) for c in calls], rest


# -- every format ---------------------------------------------------------------------------

FORMATS = [
    pytest.param(f"<tool_call>\n{CALL}\n</tool_call>", [READ], "", id="qwen3-tagged"),
    pytest.param(f"<tool_call>{CALL}", [READ], "", id="tagged-cut-by-stop-token"),
    pytest.param(
        f"I will read it.\n<tool_call>\n{CALL}\n</tool_call>",
        [READ],
        "I will read it.",
        id="hermes-tagged-after-prose",
    ),
    pytest.param(
        f"First a.\n<tool_call>{CALL}</tool_call>\nThen the dir.\n"
        '<tool_call>{"name": "list_directory", "arguments": {"path": "."}}</tool_call>\nDone.',
        [READ, LIST],
        "First a.\n\nThen the dir.\n\nDone.",
        id="several-tagged-blocks-prose-kept",
    ),
    pytest.param(
        f"<tool_call>{CALL}\n<tool_call>"
        '{"name": "list_directory", "arguments": {"path": "."}}</tool_call>',
        [READ, LIST],
        "",
        id="tagged-closer-left-out-between-blocks",
    ),
    pytest.param(
        f'<tool_call>[{CALL}, {{"name": "list_directory", "arguments": {{"path": "."}}}}]'
        "</tool_call>",
        [READ, LIST],
        "",
        id="tagged-list",
    ),
    pytest.param(
        '<tool_call>{"type": "function", "function": {"name": "read_file", '
        '"arguments": "{\\"path\\": \\"a.txt\\"}"}}</tool_call>',
        [READ],
        "",
        id="tagged-wire-shape-arguments-as-string",
    ),
    pytest.param(
        '{"name": "write_file", "arguments": {"path": "a.md", '
        '"content": "use <tool_call> and </tool_call>"}}',
        [("write_file", {"path": "a.md", "content": "use <tool_call> and </tool_call>"}, None)],
        "",
        id="whole-answer-json-with-tags-in-a-string",
    ),
    pytest.param(
        'Writing docs.\n<tool_call>{"name": "write_file", "arguments": {"path": "a.md", '
        '"content": "wrap calls in <tool_call> tags"}}</tool_call>',
        [("write_file", {"path": "a.md", "content": "wrap calls in <tool_call> tags"}, None)],
        "Writing docs.",
        id="tagged-open-tag-inside-a-string",
    ),
    pytest.param(
        '<tool_call>{"name": "read_file", "arguments": {"path": "a.txt"}, "reason": "look"}'
        "</tool_call>",
        [READ],
        "",
        id="tagged-extra-key",
    ),
    pytest.param(
        '<tool_call>{"name": "write_file", "arguments": {"path": "a.py", '
        '"content": "x = 1\ny = 2\n"}}</tool_call>',
        [("write_file", {"path": "a.py", "content": "x = 1\ny = 2\n"}, None)],
        "",
        id="tagged-raw-newlines-inside-a-string",
    ),
    pytest.param(
        "<tool_call>\n<function=read_file>\n<parameter=path>\na.txt\n</parameter>\n</function>"
        "\n</tool_call>",
        [READ],
        "",
        id="qwen3-coder-xml-in-tags",
    ),
    pytest.param(
        "Reading.\n<function=read_file>\n<parameter=path>\na.txt\n</parameter>\n</function>",
        [READ],
        "Reading.",
        id="qwen3-coder-xml-bare",
    ),
    pytest.param(
        "<tool_call>\n<function=read_file>\n<parameter=path>\na.txt\n</parameter>\n</function>"
        "\n<function=list_directory>\n<parameter=path>\n.\n</parameter>\n</function>\n"
        "</tool_call>",
        [READ, LIST],
        "",
        id="qwen3-coder-two-functions-one-block",
    ),
    pytest.param(
        "<tool_call>\n<function=read_file>\n<parameter=path>\na.txt\n</parameter>\n"
        "<parameter=start_line>\n3\n</parameter>\n<parameter=strict>\ntrue\n</parameter>\n"
        "<parameter=lines>\n[1, 2]\n</parameter>\n</function>\n</tool_call>",
        [("read_file", {"path": "a.txt", "start_line": 3, "strict": True, "lines": [1, 2]}, None)],
        "",
        id="qwen3-coder-typed-values",
    ),
    pytest.param(
        "<tool_call>\n<function=write_file>\n<parameter=path>\na.md\n</parameter>\n"
        "<parameter=content>\n# Calls\nwrite <tool_call> first\n</parameter>\n</function>\n"
        "</tool_call>",
        [("write_file", {"path": "a.md", "content": "# Calls\nwrite <tool_call> first"}, None)],
        "",
        id="qwen3-coder-open-tag-inside-a-value",
    ),
    pytest.param(
        '<|python_tag|>{"name": "read_file", "parameters": {"path": "a.txt"}}',
        [READ],
        "",
        id="llama-python-tag",
    ),
    pytest.param(
        '<|python_tag|>{"name": "read_file", "parameters": {"path": "a.txt"}}<|eom_id|>',
        [READ],
        "",
        id="llama-python-tag-eom",
    ),
    pytest.param(
        '<|python_tag|>{"name": "read_file", "parameters": {"path": "a.txt"}}; '
        '{"name": "list_directory", "parameters": {"path": "."}}<|eot_id|>',
        [READ, LIST],
        "",
        id="llama-python-tag-several-semicolon",
    ),
    pytest.param(
        'Let me look.\n<|python_tag|>{"name": "read_file", "arguments": {"path": "a.txt"}}\n'
        '{"name": "list_directory", "arguments": {"path": "."}}',
        [READ, LIST],
        "Let me look.",
        id="llama-python-tag-several-newlines-after-prose",
    ),
    pytest.param(
        '{"type": "function", "name": "read_file", "parameters": {"path": "a.txt"}}',
        [READ],
        "",
        id="llama-bare-type-function",
    ),
    pytest.param(
        '{"name": "read_file", "parameters": {"path": "a.txt"}}; '
        '{"name": "list_directory", "parameters": {"path": "."}}',
        [READ, LIST],
        "",
        id="llama-bare-several-semicolon",
    ),
    pytest.param(CALL, [READ], "", id="qwen2.5-coder-bare-object"),
    pytest.param(f"[{CALL}]", [READ], "", id="bare-list"),
    pytest.param(f"[TOOL_CALLS] [{CALL}]", [READ], "", id="mistral-list"),
    pytest.param(
        f"I'll check.[TOOL_CALLS][{CALL}]", [READ], "I'll check.", id="mistral-after-prose"
    ),
    pytest.param('[TOOL_CALLS]read_file[ARGS]{"path": "a.txt"}', [READ], "", id="mistral-v11"),
    pytest.param(
        '[TOOL_CALLS]read_file[CALL_ID]a1b2c3d4e[ARGS]{"path": "a.txt"}'
        '[TOOL_CALLS]list_directory[ARGS]{"path": "."}',
        [READ, LIST],
        "",
        id="mistral-v11-call-id-two-calls",
    ),
    pytest.param(f"```json\n{CALL}\n```", [READ], "", id="fenced-json-whole-answer"),
    pytest.param(
        f"I will read the file first.\n\n```json\n{CALL}\n```\n\nThen I will summarise it.",
        [READ],
        "I will read the file first.\n\nThen I will summarise it.",
        id="fenced-json-inside-prose",
    ),
    pytest.param(f"```\n{CALL}\n```", [READ], "", id="fenced-no-language"),
    pytest.param(
        f'```json\n[{CALL}, {{"name": "list_directory", "arguments": {{"path": "."}}}}]\n```',
        [READ, LIST],
        "",
        id="fenced-list",
    ),
    pytest.param(
        '```json\n{"name": "read_file", "parameters": {"path": "a.txt"}}\n```',
        [READ],
        "",
        id="fenced-llama-parameters",
    ),
    pytest.param(f"Reading:\n```json\n{CALL}", [READ], "Reading:", id="fenced-cut-at-the-end"),
    pytest.param(
        f"Here:\n```\n<tool_call>\n{CALL}\n</tool_call>\n```\nok",
        [READ],
        "Here:\n\nok",
        id="tagged-inside-a-fence-fence-goes-too",
    ),
    pytest.param(
        f'```json\n{{"a": 1}}\n```\nand\n```json\n{CALL}\n```',
        [READ],
        '```json\n{"a": 1}\n```\nand',
        id="example-fence-kept-call-fence-taken",
    ),
    pytest.param(
        f"```xml\n<tool_call>{CALL}</tool_call>\n<tool_call>{CALL}</tool_call>\n```\nbye",
        [READ, READ],
        "bye",
        id="several-tagged-inside-one-fence",
    ),
    pytest.param(
        f"```python\nprint(1)\n```\n<tool_call>{CALL}</tool_call>\n```\nmore\n```",
        [READ],
        "```python\nprint(1)\n```\n\n```\nmore\n```",
        id="closed-fences-around-a-call-untouched",
    ),
    pytest.param(
        f"Text\r\n```json\r\n{CALL}\r\n```\r\nmore", [READ], "Text\n\nmore", id="fence-crlf"
    ),
    pytest.param(
        f"<|python_tag|>{CALL}\nI will now read it.",
        [READ],
        "I will now read it.",
        id="llama-python-tag-prose-after",
    ),
    pytest.param('```tool_code\nread_file(path="a.txt")\n```', [READ], "", id="gemma-tool-code"),
    pytest.param("```tool_code\nprint(read_file(path='a.txt'))\n```", [READ], "", id="gemma-print"),
    pytest.param(
        '```tool_code\n[read_file(path="a.txt"), list_directory(path=".")]\n```',
        [READ, LIST],
        "",
        id="gemma-list",
    ),
    pytest.param(
        '```tool_code\nrun_command(command="ls", env=("A", "B"), quiet=True, n=-1)\n```',
        [("run_command", {"command": "ls", "env": ["A", "B"], "quiet": True, "n": -1}, None)],
        "",
        id="gemma-literal-values",
    ),
]


@pytest.mark.parametrize(("content", "calls", "rest"), FORMATS)
def test_a_format_is_read(content: str, calls: list[Seen], rest: str) -> None:
    assert read(content) == (calls, rest)


# -- what stays text ------------------------------------------------------------------------

TEXT = [
    pytest.param("The file holds three lines.", id="prose"),
    pytest.param('<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>', id="tagged-unknown"),
    pytest.param('{"name": "Ada", "arguments": {"age": 36}}', id="bare-unknown"),
    pytest.param(f'[{CALL}, {{"name": "rm_rf", "arguments": {{}}}}]', id="bare-list-one-unknown"),
    pytest.param('```json\n{"name": "Ada", "arguments": {}}\n```', id="fenced-unknown"),
    pytest.param(
        '<|python_tag|>{"name": "brave_search", "parameters": {}}', id="python-tag-unknown"
    ),
    pytest.param('<|python_tag|>brave_search.call(query="x")<|eom_id|>', id="llama-builtin-tool"),
    pytest.param('[TOOL_CALLS][{"name": "rm_rf", "arguments": {}}]', id="mistral-unknown"),
    pytest.param('[TOOL_CALLS]rm_rf[ARGS]{"path": "/"}', id="mistral-v11-unknown"),
    pytest.param("<function=rm_rf><parameter=path>/</parameter></function>", id="xml-unknown"),
    pytest.param(
        "<tool_call><function=rm_rf><parameter=path>/</parameter></function></tool_call>",
        id="tagged-xml-unknown",
    ),
    pytest.param('<tool_call>{"name": "", "arguments": {}}</tool_call>', id="empty-name"),
    pytest.param('{"name": "", "arguments": {}}', id="bare-empty-name"),
    pytest.param('<tool_call>{"name": 7, "arguments": {}}</tool_call>', id="name-not-a-string"),
    pytest.param("<tool_call>I should read a.txt first.</tool_call>", id="tagged-prose"),
    pytest.param("<tool_call>{not json at all</tool_call>", id="tagged-bad-json-no-name"),
    pytest.param(
        '```json\n{"name": "read_file", "description": "Read a file", "parameters": '
        '{"type": "object", "properties": {"path": {"type": "string"}}}}\n```',
        id="tool-definition-shown",
    ),
    pytest.param(
        'Put this in config.json:\n```json\n{"model": "qwen3", "tools": ["read_file"]}\n```',
        id="example-config",
    ),
    pytest.param(f"```python\n{CALL}\n```", id="fence-of-another-language"),
    pytest.param(f"Here is the call:\n{CALL}\nas JSON.", id="bare-json-inside-prose"),
    pytest.param(
        '{"type": "object", "name": "read_file", "parameters": {"path": "a"}}',
        id="type-not-function",
    ),
    pytest.param('```tool_code\nimport os\nos.system("rm -rf /")\n```', id="tool-code-python"),
    pytest.param('```tool_code\nrm_rf(path="/")\n```', id="tool-code-unknown"),
    pytest.param('```tool_code\nread_file("a.txt")\n```', id="tool-code-positional"),
    pytest.param("```tool_code\nread_file(**opts)\n```", id="tool-code-double-star"),
    pytest.param('```tool_code\ndefault_api.read_file(path="a")\n```', id="tool-code-attribute"),
    pytest.param("```tool_code\nread_file(path='a'\n```", id="tool-code-syntax-error"),
    pytest.param(DEEP, id="bare-too-deep"),
    pytest.param(f"```json\n{DEEP}\n```", id="fenced-too-deep"),
    pytest.param("```\n\n```", id="empty-fence"),
    pytest.param("</tool_call> stray closer", id="stray-closer"),
]


@pytest.mark.parametrize("content", TEXT)
def test_what_is_not_a_call_stays_text(content: str) -> None:
    assert extract_tool_calls(content, OFFERED) == ([], content)


def test_no_tools_offered_means_no_calls() -> None:
    for param in FORMATS:
        content = param.values[0]
        assert isinstance(content, str)
        assert extract_tool_calls(content, ()) == ([], content)


@pytest.mark.parametrize(
    "unknown",
    [
        pytest.param('<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>', id="tagged"),
        pytest.param("<function=rm_rf><parameter=p>1</parameter></function>", id="xml"),
        pytest.param('```json\n{"name": "rm_rf", "arguments": {}}\n```', id="fenced"),
        pytest.param('<|python_tag|>{"name": "rm_rf", "parameters": {}}', id="python-tag"),
    ],
)
def test_a_block_naming_a_tool_not_offered_stays_where_it_stands(unknown: str) -> None:
    calls, rest = read(f"Before.\n<tool_call>{CALL}</tool_call>\n{unknown}\nAfter.")
    assert calls == [READ]
    assert rest == f"Before.\n\n{unknown}\nAfter."


def test_a_tool_not_offered_in_this_request_is_text() -> None:
    content = f"<tool_call>{CALL}</tool_call>"
    assert extract_tool_calls(content, ("list_directory",)) == ([], content)


# -- calls that are refused, so the model learns why ----------------------------------------


@pytest.mark.parametrize(
    ("content", "error"),
    [
        pytest.param(
            '<tool_call>{"name": "read_file", "arguments": {"path": "a.txt"}</tool_call>',
            "not valid JSON",
            id="tagged-missing-brace",
        ),
        pytest.param(
            "<tool_call>{'name': 'read_file', 'arguments': {}}</tool_call>",
            None,
            id="tagged-single-quotes-no-readable-name",
        ),
        pytest.param(
            '<|python_tag|>{"name": "read_file", "parameters": {"path": }<|eom_id|>',
            "not valid JSON",
            id="python-tag-bad-json",
        ),
        pytest.param(
            '[TOOL_CALLS]read_file[ARGS]{"path": a.txt}', "not valid JSON", id="mistral-v11-bad"
        ),
        pytest.param(
            '<tool_call>{"name": "read_file", "arguments": "{\\"path\\": "}</tool_call>',
            "arguments are not valid JSON",
            id="arguments-string-not-json",
        ),
        pytest.param(
            '<tool_call>{"name": "read_file", "arguments": ["a.txt"]}</tool_call>',
            "arguments must be a JSON object",
            id="arguments-a-list",
        ),
        pytest.param(
            '<tool_call>{"name": "read_file", "arguments": {"n": NaN}}</tool_call>',
            "NaN",
            id="arguments-nan",
        ),
        pytest.param(
            "<tool_call><function=read_file><parameter=path>\na.t",
            "no </parameter>",
            id="xml-parameter-cut-off",
        ),
        pytest.param(
            "```tool_code\nread_file(path={1, 2})\n```", "plain values", id="tool-code-a-set"
        ),
        pytest.param(
            "```tool_code\nread_file(path=secret)\n```", "plain values", id="tool-code-a-name"
        ),
    ],
)
def test_a_malformed_call_to_an_offered_tool_is_refused(content: str, error: str | None) -> None:
    calls, rest = read(content)
    if error is None:  # nothing names an offered tool: text
        assert (calls, rest) == ([], content)
        return
    ((name, arguments, why),) = calls
    assert (name, arguments, rest) == ("read_file", {}, "")
    assert why is not None and error in why


def test_a_closer_inside_a_string_ends_the_block_and_the_call_is_refused() -> None:
    # A known limit, as in the models' own templates: the call is refused with a reason,
    # never run with half its arguments.
    content = (
        '<tool_call>{"name": "write_file", "arguments": {"path": "a.md", '
        '"content": "end blocks with </tool_call> always"}}</tool_call>'
    )
    calls, rest = read(content)
    assert [(name, arguments) for name, arguments, _ in calls] == [("write_file", {})]
    assert calls[0][2] is not None and "not valid JSON" in calls[0][2]
    assert rest == 'always"}}</tool_call>'


def test_one_malformed_block_does_not_sink_the_others() -> None:
    content = (
        f"<tool_call>{CALL}</tool_call>\n"
        '<tool_call>{"name": "write_file", "arguments": {"path": </tool_call>\n'
        "<tool_call>just thinking aloud</tool_call>\n"
        '<tool_call>{"name": "list_directory", "arguments": {"path": "."}}</tool_call>'
    )
    calls, rest = read(content)
    assert [c[0] for c in calls] == ["read_file", "write_file", "list_directory"]
    assert calls[1][2] is not None and "not valid JSON" in calls[1][2]
    assert rest == "<tool_call>just thinking aloud</tool_call>"


# -- nesting --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        pytest.param(f"<tool_call>{DEEP}</tool_call>", ("", TOO_DEEP), id="tagged-no-name"),
        pytest.param(
            f'<tool_call>{{"name": "write_file", "arguments": {DEEP}</tool_call>',
            ("write_file", TOO_DEEP),
            id="tagged-named",
        ),
        pytest.param(
            f'[TOOL_CALLS] [{{"name": "write_file", "arguments": {DEEP}',
            ("write_file", TOO_DEEP),
            id="mistral",
        ),
        pytest.param(
            f"[TOOL_CALLS]write_file[ARGS]{DEEP}", ("write_file", TOO_DEEP), id="mistral-v11"
        ),
        pytest.param(
            f'<|python_tag|>{{"name": "write_file", "parameters": {DEEP}',
            ("write_file", TOO_DEEP),
            id="python-tag",
        ),
        pytest.param(
            "<function=write_file><parameter=path>\nx.txt\n</parameter>"
            f"<parameter=content>\n{DEEP}\n</parameter></function>",
            ("write_file", f"'content': {TOO_DEEP}"),
            id="xml-value",
        ),
        pytest.param(
            f'<tool_call>{{"name": "write_file", "arguments": {json.dumps(DEEP)}}}</tool_call>',
            (
                "write_file",
                f"arguments nest deeper than {MAX_JSON_DEPTH} levels; send a flat object",
            ),
            id="arguments-string",
        ),
    ],
)
def test_json_too_deep_in_a_marked_call_is_refused(content: str, expected: tuple[str, str]) -> None:
    calls, rest = read(content)
    assert [(name, why) for name, _, why in calls] == [expected]
    assert rest == ""


def test_deep_json_naming_a_tool_not_offered_is_text() -> None:
    content = f'<tool_call>{{"name": "rm_rf", "arguments": {DEEP}</tool_call>'
    assert extract_tool_calls(content, OFFERED) == ([], content)


def test_nesting_up_to_the_limit_is_read() -> None:
    depth = MAX_JSON_DEPTH - 2  # the call object and "arguments" take two levels
    value: Any = "x"
    for _ in range(depth - 1):
        value = [value]
    content = f"<tool_call>{json.dumps({'name': 'write_file', 'arguments': {'v': value}})}"
    ((name, arguments, why),) = read(content)[0]
    assert (name, arguments, why) == ("write_file", {"v": value}, None)


def test_a_long_number_in_an_xml_value_stays_text() -> None:
    digits = "9" * 10_000  # longer than Python turns into an int
    content = f"<function=write_file><parameter=content>\n{digits}\n</parameter></function>"
    assert read(content)[0] == [("write_file", {"content": digits}, None)]


# -- hostile input: linear time -------------------------------------------------------------

MB = 1_000_000
HOSTILE = [
    pytest.param(lambda: "<tool_call>" * (MB // 11), id="open-tags"),
    pytest.param(lambda: "<tool_call>{" * (MB // 12), id="open-tags-brace"),
    pytest.param(lambda: ("<tool_call>" + " " * 50) * (MB // 60), id="open-tags-spaces"),
    pytest.param(
        lambda: '<tool_call>{"name": "read_file", "x": ' * (MB // 40) + "</tool_call>",
        id="open-tags-one-closer",
    ),
    pytest.param(lambda: "</tool_call>" * (MB // 12), id="closers"),
    pytest.param(lambda: "```" * (MB // 3), id="backticks-one-line"),
    pytest.param(lambda: "```\n" * (MB // 4), id="fence-lines"),
    pytest.param(lambda: "```json\n{\n" * (MB // 10), id="json-fences-no-closer"),
    pytest.param(lambda: "<|python_tag|>{" * (MB // 15), id="python-tags"),
    pytest.param(lambda: "[TOOL_CALLS]read_file[ARGS]{" * (MB // 28), id="mistral-markers"),
    pytest.param(lambda: "<function=read_file>" * (MB // 20), id="functions-no-closer"),
    pytest.param(
        lambda: "<function=read_file>" + "<parameter=a>" * (MB // 13) + "</function>",
        id="parameters-no-closer",
    ),
    pytest.param(lambda: "[" * MB, id="brackets"),
    pytest.param(lambda: '{"a": "' + '\\"' * (MB // 2), id="escaped-quotes"),
    pytest.param(lambda: "```tool_code\n" + "-" * MB + "1\n```", id="tool-code-unary-chain"),
    pytest.param(
        lambda: "<tool_call>```\n<|python_tag|>[TOOL_CALLS]<function=x>" * (MB // 55), id="mixed"
    ),
    pytest.param(lambda: (f"<tool_call>{CALL}</tool_call>\n") * (MB // 70), id="many-calls"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("make", HOSTILE)
def test_hostile_answers_are_read_in_linear_time(make: Any) -> None:
    """About 1 MB each: a quadratic scan would take hours here (and hit the timeout); a
    linear one takes well under a second."""
    content = make()
    calls, rest = extract_tool_calls(content, OFFERED)
    assert all(c.name in OFFERED or c.arguments_error for c in calls)
    assert len(rest) <= len(content)


# -- properties -----------------------------------------------------------------------------

FRAGMENTS = [
    CALL_OPEN,
    CALL_CLOSE,
    "```",
    "```json\n",
    "\n```\n",
    "<|python_tag|>",
    "<|eom_id|>",
    "[TOOL_CALLS]",
    "[ARGS]",
    "<function=read_file>",
    "</function>",
    "<parameter=path>",
    "</parameter>",
    CALL,
    '{"name": "rm_rf", "arguments": {}}',
    '{"name": "read_file", "arguments": ',
    "{",
    "}",
    "[",
    "]",
    '"',
    ";",
    "\n",
    " ",
    "read_file",
    "hello",
    DEEP,
]
PROSE = st.text(alphabet="abc xyz.,!?\n:-", max_size=40)


@settings(max_examples=400, deadline=None, database=None)
@given(st.lists(st.sampled_from(FRAGMENTS) | PROSE, max_size=25))
def test_any_mix_of_fragments_reads_without_surprises(pieces: list[str]) -> None:
    content = "".join(pieces)
    calls, rest = extract_tool_calls(content, OFFERED)
    for call in calls:
        # A call names an offered tool; only JSON too deep to read may come without a name.
        assert call.name in OFFERED or (call.name == "" and call.arguments_error == TOO_DEEP)
        json.dumps(dict(call.arguments), allow_nan=False)
    if not calls:
        assert rest == content


ARGUMENT_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None, database=None)
@given(
    st.lists(
        st.tuples(
            PROSE,
            st.sampled_from(OFFERED),
            st.dictionaries(st.text(min_size=1, max_size=8), ARGUMENT_VALUES, max_size=3),
        ),
        min_size=1,
        max_size=4,
    ),
    PROSE,
)
def test_calls_in_the_prompted_format_come_back_as_written(
    written: list[tuple[str, str, dict[str, Any]]], tail: str
) -> None:
    content = "".join(f"{prose}\n{format_call(name, args)}\n" for prose, name, args in written)
    calls, rest = extract_tool_calls(content + tail, OFFERED)
    assert [(c.name, dict(c.arguments), c.arguments_error) for c in calls] == [
        (name, args, None) for _, name, args in written
    ]
    prose = [p.strip() for p, _, _ in written] + [tail.strip()]
    assert rest == "\n\n".join(p for p in prose if p)


# -- the prompt -----------------------------------------------------------------------------

DEFINITIONS = [tool.definition() for tool in ALL_TOOLS.values()]


def example_block(section: str) -> str:
    start = section.index(CALL_OPEN)
    return section[start : section.index(CALL_CLOSE, start) + len(CALL_CLOSE)]


def test_the_prompt_describes_each_offered_tool() -> None:
    section = describe_tools(DEFINITIONS)
    assert section.startswith(HEADING)
    for definition in DEFINITIONS:
        function = definition["function"]
        line = next(li for li in section.splitlines() if li.startswith(f"- {function['name']}:"))
        first, *more = function["description"].split(". ")
        assert first.rstrip(".") + "." in line
        assert not more or more[0] not in line  # only the first sentence
        assert line.endswith(json.dumps(function["parameters"], separators=(",", ":")))
    for rule in ("double quotes", "several blocks", "tool message", "answer normally"):
        assert rule in section


def test_the_prompt_is_leaner_than_the_native_definitions() -> None:
    section = describe_tools(DEFINITIONS)
    assert estimate_tokens(section) < estimate_tokens(json.dumps(DEFINITIONS))
    # What the section adds beyond the tools themselves stays small.
    one = [{"type": "function", "function": {"name": "t", "description": "", "parameters": {}}}]
    assert estimate_tokens(describe_tools(one)) < 150


def test_no_tools_no_section() -> None:
    assert describe_tools([]) == ""


@pytest.mark.parametrize(
    "offered",
    [pytest.param(tuple(ALL_TOOLS), id="all")]
    + [pytest.param((name,), id=name) for name in ALL_TOOLS],
)
def test_the_prompts_example_reads_back_as_that_call(offered: tuple[str, ...]) -> None:
    section = describe_tools([ALL_TOOLS[name].definition() for name in offered])
    block = example_block(section)
    calls, rest = extract_tool_calls(block, offered)
    assert rest == "" and len(calls) == 1
    (call,) = calls
    assert call.arguments_error is None and call.name in offered
    assert block == format_call(call.name, call.arguments)
    # The example is a call the tool would take.
    validate_arguments(call.arguments, ALL_TOOLS[call.name].parameters)
    if "read_file" in offered:
        assert (call.name, dict(call.arguments)) == ("read_file", {"path": "README.md"})


@pytest.mark.parametrize(
    ("description", "shown"),
    [
        pytest.param("Read a file. Returns it.", "Read a file.", id="two-sentences"),
        pytest.param(
            "Files over 1.5 MB are refused", "Files over 1.5 MB are refused", id="no-stop"
        ),
        pytest.param("Line one\nline two.", "Line one", id="first-line"),
        pytest.param("  Spaced   out.  ", "Spaced out.", id="spaces"),
        pytest.param("", "", id="empty"),
    ],
)
def test_a_tool_is_summed_up_by_its_first_sentence(description: str, shown: str) -> None:
    definition = {"function": {"name": "t", "description": description, "parameters": {}}}
    line = describe_tools([definition]).splitlines()[2]
    assert line == " ".join(filter(None, ["- t:", shown, "Parameters: {}"]))
