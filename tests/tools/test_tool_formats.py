"""The qwen3_coder and pythonic tool-call formats, and the format registry."""

from __future__ import annotations

import warnings
from typing import Any, Literal, Optional

import pytest
from pydantic import BaseModel

from agent_gym.tools import (
    PARSERS,
    BaseToolCallParser,
    HermesParser,
    ParsedResponse,
    PythonicParser,
    Qwen3CoderParser,
    ToolCall,
    ToolCallError,
    ToolExecutor,
    calculator,
    describe_tools,
    get_parser,
    register_parser,
    tool,
)
from agent_gym.tools.parsing import ToolCallParser


class Point(BaseModel):
    x: int
    y: int


@tool
def plot(
    title: str,
    count: int,
    scale: float = 1.5,
    show: bool = False,
    tags: list[str] = [],  # noqa: B006 - a schema default, never mutated
    options: dict[str, int] = {},  # noqa: B006
    limit: Optional[int] = None,
    mode: Literal["fast", "slow"] = "fast",
    origin: Optional[Point] = None,
) -> str:
    """Draw a plot.

    Args:
        title: The title, as written.
        count: How many points.
        scale: The zoom factor.
        show: Whether to show it.
        tags: Labels.
        options: Named integer options.
        limit: An upper bound, if any.
        mode: Drawing speed.
        origin: Where the axes cross.
    """
    return f"{title}|{count}|{scale}|{show}|{tags}|{options}|{limit}|{mode}|{origin}"


SCHEMAS = [calculator.schema(), plot.schema()]
Q = Qwen3CoderParser(SCHEMAS)
P = PythonicParser(SCHEMAS)


def _calls(parsed: ParsedResponse) -> list[tuple[str, str, dict[str, Any]]]:
    return [(c.id, c.name, c.arguments) for c in parsed.calls]


def _errors(parsed: ParsedResponse) -> list[str]:
    assert all(isinstance(e, ToolCallError) and e.kind == "malformed" for e in parsed.errors)
    return [e.message for e in parsed.errors]


# ---------------------------------------------------------------------------------------- qwen3_coder

CALC_Q = "<tool_call>\n<function=calculate>\n<parameter=expression>\n2 + 3 * 4\n</parameter>\n</function>\n</tool_call>"


def test_qwen3_coder_single_call() -> None:
    parsed = Q.parse(f"Let me compute.\n{CALC_Q}")
    assert parsed == ParsedResponse(
        content="Let me compute.",
        calls=(ToolCall(id="call_0", name="calculate", arguments={"expression": "2 + 3 * 4"}, raw=CALC_Q),),
    )


def test_qwen3_coder_several_calls_in_one_turn() -> None:
    second = "<tool_call><function=plot><parameter=title>Sales</parameter><parameter=count>3</parameter></function></tool_call>"
    parsed = Q.parse(f"A\n{CALC_Q}\nB {second} C")
    assert _calls(parsed) == [
        ("call_0", "calculate", {"expression": "2 + 3 * 4"}),
        ("call_1", "plot", {"title": "Sales", "count": 3}),
    ]
    assert parsed.content == "A\n\nB  C" and parsed.errors == ()


def test_qwen3_coder_values_are_typed_by_the_schema() -> None:
    text = (
        "<tool_call>\n<function=plot>\n"
        "<parameter=title>\n  42 \n\n</parameter>\n"  # a string keeps everything but one newline each side
        "<parameter=count>\n 7 \n</parameter>\n"
        "<parameter=scale>\n2\n</parameter>\n"
        "<parameter=show>\nTrue\n</parameter>\n"
        '<parameter=tags>\n["a", "b"]\n</parameter>\n'
        '<parameter=options>\n{"k": 1}\n</parameter>\n'
        "<parameter=limit>\nnull\n</parameter>\n"
        "<parameter=mode>\nslow\n</parameter>\n"
        '<parameter=origin>\n{"x": 1, "y": 2}\n</parameter>\n'
        "</function>\n</tool_call>"
    )
    (call,) = Q.parse(text).calls
    assert call.arguments == {
        "title": "  42 \n",
        "count": 7,
        "scale": 2,
        "show": True,
        "tags": ["a", "b"],
        "options": {"k": 1},
        "limit": None,
        "mode": "slow",
        "origin": {"x": 1, "y": 2},
    }
    (result,) = ToolExecutor([plot]).execute(Q.parse(text))
    assert result.content == "  42 \n|7|2.0|True|['a', 'b']|{'k': 1}|None|slow|x=1 y=2" and result.ok


def test_qwen3_coder_multiline_code_is_kept_exactly() -> None:
    code = 'def f(x):\n    return "</function>" + x\n\n'
    parsed = Q.parse(f"<tool_call>\n<function=python>\n<parameter=code>\n{code}\n</parameter>\n</function>\n</tool_call>")
    assert _calls(parsed) == [("call_0", "python", {"code": code})]


def test_qwen3_coder_untyped_values_stay_text() -> None:
    # An unknown tool, an unknown parameter, a value that does not read as its type: the executor
    # then reports them in the tool's own words.
    parsed = Q.parse(
        "<tool_call><function=nope><parameter=n>5</parameter></function></tool_call>"
        "<tool_call><function=plot><parameter=title>t</parameter><parameter=count>many</parameter>"
        "<parameter=extra>[1]</parameter></function></tool_call>"
    )
    assert [c.arguments for c in parsed.calls] == [{"n": "5"}, {"title": "t", "count": "many", "extra": "[1]"}]
    results = ToolExecutor([calculator, plot]).execute(parsed)
    assert [(r.error_kind, r.content) for r in results] == [
        ("unknown_tool", "Error: unknown tool 'nope'. Available tools: calculate, plot."),
        (
            "invalid_arguments",
            "Error: invalid arguments for 'plot': count: Input should be a valid integer, unable to parse string "
            "as an integer; extra: Extra inputs are not permitted",
        ),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<tool_call></tool_call>", "empty <tool_call> block"),
        ("<tool_call>hi<function=calculate></function></tool_call>",
         "a <tool_call> block must start with <function=NAME>, got 'hi<function=calculate></function>'"),
        ('<tool_call>{"name": "calculate", "arguments": {}}</tool_call>',
         "a <tool_call> block must start with <function=NAME>, got '{\"name\": \"calculate\", \"arguments\": {}}'"),
        ("<tool_call><function=calculate</tool_call>", "unclosed <function= tag: '<function=calculate'"),
        ("<tool_call><function=></function></tool_call>", "<function=...> needs a name, got ''"),
        ("<tool_call><function=calculate><parameter=>x</parameter></function></tool_call>",
         "<parameter=...> needs a name, got ''"),
        ("<tool_call><function=calculate><parameter=expression\n1</parameter></function></tool_call>",
         "unclosed <parameter= tag: '<parameter=expression\\n1</parameter></fun...'"),
        ("<tool_call><function=calculate><parameter=expression>\n1\n</function></tool_call>",
         "parameter 'expression' of 'calculate' has no closing </parameter>"),
        ("<tool_call><function=calculate><parameter=expression>1</parameter></tool_call>",
         "<function=calculate> is not closed with </function>"),
        ("<tool_call><function=calculate><parameter=expression>1</parameter><parameter=expression>2</parameter>"
         "</function></tool_call>", "parameter 'expression' of 'calculate' is given twice"),
        ("<tool_call><function=calculate>junk</function></tool_call>",
         "unexpected text in <function=calculate>: 'junk</function>'; expected <parameter=NAME> or </function>"),
        ("<tool_call><function=a></function><function=b></function></tool_call>",
         "unexpected text after </function>: '<function=b></function>'; write one <function=...> per <tool_call> block"),
        ("<tool_call>\n<function=calculate>", "unterminated <tool_call> block (missing </tool_call>)"),
        ("x </tool_call>", "stray </tool_call> without a matching <tool_call>"),
    ],
)
def test_qwen3_coder_malformed(text: str, message: str) -> None:
    parsed = Q.parse(text)
    assert parsed.calls == () and _errors(parsed) == [message]
    (result,) = ToolExecutor([calculator]).execute(parsed)
    assert (result.error_kind, result.content) == ("malformed", f"Error: malformed tool call: {message}")


def test_qwen3_coder_a_new_block_ends_an_unterminated_one() -> None:
    parsed = Q.parse("<tool_call><function=a></function><tool_call><function=b></function></tool_call>")
    assert [c.name for c in parsed.calls] == ["b"]
    assert _errors(parsed) == ["unterminated <tool_call> block (missing </tool_call>)"]


def test_qwen3_coder_format_calls_exact_and_round_trip() -> None:
    calls = [
        {"name": "calculate", "arguments": {"expression": "2 + 3 * 4"}},
        {"name": "plot", "arguments": {"title": "\nline\n", "count": 2, "tags": ["x"], "limit": None, "show": True}},
    ]
    text = Q.format_calls(calls)
    assert text.split("\n</tool_call>\n")[0] + "\n</tool_call>" == CALC_Q
    parsed = Q.parse(text)
    assert parsed.errors == () and parsed.content == ""
    assert [(c.name, c.arguments) for c in parsed.calls] == [(c["name"], c["arguments"]) for c in calls]
    assert Q.format_calls([]) == ""


@pytest.mark.parametrize(
    "call",
    [
        {"name": "calculate", "arguments": {"expression": "a </parameter> b"}},
        {"name": "calculate", "arguments": {"expression": "<tool_call>"}},
        {"name": "calculate", "arguments": {"expression": "</tool_call>"}},
        {"name": "calc>", "arguments": {}},
        {"name": "calculate", "arguments": {"bad\nname": 1}},
    ],
)
def test_qwen3_coder_refuses_to_write_what_it_cannot_read_back(call: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="qwen3_coder format"):
        Q.format_calls([call])


def test_qwen3_coder_describe_tools() -> None:
    assert Q.describe_tools([plot.schema()]) == "\n".join([
        "<tools>", "<function>", "<name>plot</name>", "<description>Draw a plot.</description>", "<parameters>",
        "<parameter>", "<name>title</name>", "<type>string</type>", "<description>The title, as written.</description>", "</parameter>",
        "<parameter>", "<name>count</name>", "<type>integer</type>", "<description>How many points.</description>", "</parameter>",
        "<parameter>", "<name>scale</name>", "<type>number</type>", "<description>The zoom factor.</description>", "<default>1.5</default>", "</parameter>",
        "<parameter>", "<name>show</name>", "<type>boolean</type>", "<description>Whether to show it.</description>", "<default>false</default>", "</parameter>",
        "<parameter>", "<name>tags</name>", "<type>array</type>", "<description>Labels.</description>", "<default>[]</default>", '<items>{"type": "string"}</items>', "</parameter>",
        "<parameter>", "<name>options</name>", "<type>object</type>", "<description>Named integer options.</description>", '<additionalProperties>{"type": "integer"}</additionalProperties>', "<default>{}</default>", "</parameter>",
        "<parameter>", "<name>limit</name>", "<type>integer | null</type>", "<description>An upper bound, if any.</description>", '<anyOf>[{"type": "integer"}, {"type": "null"}]</anyOf>', "<default>null</default>", "</parameter>",
        "<parameter>", "<name>mode</name>", "<type>string</type>", "<description>Drawing speed.</description>", '<default>"fast"</default>', '<enum>["fast", "slow"]</enum>', "</parameter>",
        "<parameter>", "<name>origin</name>", "<type>null | object</type>", "<description>Where the axes cross.</description>", '<anyOf>[{"$ref": "#/$defs/Point"}, {"type": "null"}]</anyOf>', "<default>null</default>", "</parameter>",
        '<required>["title", "count"]</required>', "</parameters>", "</function>", "</tools>",
    ])
    assert Q.describe_tools([]) == ""


# ------------------------------------------------------------------------------------------- pythonic


def test_pythonic_single_call() -> None:
    raw = '[calculate(expression="2 + 3 * 4")]'
    parsed = P.parse(f"Let me compute.\n{raw}")
    assert parsed == ParsedResponse(
        content="Let me compute.",
        calls=(ToolCall(id="call_0", name="calculate", arguments={"expression": "2 + 3 * 4"}, raw=raw),),
    )


def test_pythonic_several_calls_in_one_list_and_in_several_lists() -> None:
    parsed = P.parse("[calculate(expression='1+1'), plot(title=\"t\", count=2)] then\n[calculate(expression='3')]")
    assert _calls(parsed) == [
        ("call_0", "calculate", {"expression": "1+1"}),
        ("call_1", "plot", {"title": "t", "count": 2}),
        ("call_2", "calculate", {"expression": "3"}),
    ]
    # Every call of one list carries the whole list as its raw text.
    assert parsed.calls[0].raw == parsed.calls[1].raw == "[calculate(expression='1+1'), plot(title=\"t\", count=2)]"
    assert parsed.content == "then" and parsed.errors == ()


def test_pythonic_literals() -> None:
    text = (
        "[plot(title='a\\tb\\x41\\u00e9\\N{GREEK SMALL LETTER ALPHA}\\d\\\n' \"c\", count=-3, scale=+2.5e1, show=true,"
        " tags=('x', r'\\n'), options={'k': -1}, limit=null, mode=\"\"\"sl\now\"\"\", origin=None)]"
    )
    (call,) = P.parse(text).calls
    assert call.arguments == {
        "title": "a\tbAé\u03b1\\dc",
        "count": -3,
        "scale": 25.0,
        "show": True,
        "tags": ["x", "\\n"],
        "options": {"k": -1},
        "limit": None,
        "mode": "sl\now",
        "origin": None,
    }


def test_pythonic_brackets_in_strings_and_comments_do_not_end_the_list() -> None:
    parsed = P.parse('[calculate(expression="(1 + 2]"),  # a ] comment\n plot(title="[", count=1)] end')
    assert [c.arguments for c in parsed.calls] == [{"expression": "(1 + 2]"}, {"title": "[", "count": 1}]
    assert parsed.content == "end"


def test_pythonic_names_with_digits_before_keyword_letters_are_names() -> None:
    # "5_for" in "md5_for" is no number followed by a keyword (which CPython would warn about).
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parsed = P.parse("[md5_for(text='a'), sha1in(x=1)]")
    assert _calls(parsed) == [("call_0", "md5_for", {"text": "a"}), ("call_1", "sha1in", {"x": 1})]


def test_pythonic_plain_text_and_lists_are_not_calls() -> None:
    text = "Lists like [1, 2] and [x for x in y], calls like f(x=1) and [ (a) ] are prose."
    assert P.parse(text) == ParsedResponse(content=text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[calculate(expression="1"', "unterminated call list (missing ])"),
        ('[calculate(expression="1)]', "unterminated string literal in the call list"),
        ("[calculate(expression='''1)]", "unterminated string literal in the call list"),
        ("[calculate(expression=)]", "invalid Python in the call list: invalid syntax"),
        ("[calc(x=1]", "invalid Python in the call list: closing parenthesis ']' does not match opening parenthesis '('"),
        ('[calculate("1")]', "arguments of 'calculate' must be given by keyword, like calculate(arg=value)"),
        ('[calculate(**{"a": 1})]', "**arguments are not allowed in a call of 'calculate'; name each argument"),
        ("[math.sqrt(x=1)]", "element 1 calls 'math.sqrt': a tool is called by its plain name"),
        ('[calculate(expression="1"), 3]', "element 2 of the call list is not a call like name(arg=value)"),
        ('[calculate(expression="1"), "s"(x=1)]', "element 2 of the call list calls a string, not a tool"),
        ("[calculate(x=1) for x in y]", "the call list must be a plain list of calls, like [name(arg=value)]"),
        ('[calculate(expression="1", expression="2")]', "argument 'expression' of 'calculate' is given twice"),
        ("[calculate(expression=x)]", "argument 'expression' of 'calculate' is the name x, not a literal value; quote strings"),
        ("[calculate(expression=1 + 2)]", "argument 'expression' of 'calculate' is not a literal value (BinOp); use strings, numbers, True/False/None, lists and dicts"),
        ("[calculate(expression=g(x=1))]", "argument 'expression' of 'calculate' is not a literal value (Call); use strings, numbers, True/False/None, lists and dicts"),
        ("[calculate(expression={1, 2})]", "argument 'expression' of 'calculate' is not a literal value (Set); use strings, numbers, True/False/None, lists and dicts"),
        ("[calculate(expression=1j)]", "argument 'expression' of 'calculate' is not a literal value (complex); use strings, numbers, True/False/None, lists and dicts"),
        ("[calculate(expression=...)]", "argument 'expression' of 'calculate' is not a literal value (ellipsis); use strings, numbers, True/False/None, lists and dicts"),
        ("[calculate(expression={1: 2})]", "argument 'expression' of 'calculate': dict keys must be strings"),
        ('[calculate(expression=f"{1}")]', "f-strings are not literal values; write a plain string"),
        ('[calculate(expression=b"1")]', "bytes literals are not allowed; write a string"),
        ('[calculate(expression="\\x4")]', "truncated \\x escape in a string: \\x4"),
        ('[calculate(expression="\\U00110000")]', "\\U00110000 is not a Unicode character"),
        ('[calculate(expression="\\N{NOPE}")]', "unknown Unicode character name in \\N{NOPE}"),
        ('[calculate(expression="\\N")]', "malformed \\N escape in a string; write \\N{NAME}"),
        ("[calculate(expression=1if 1 else 2)]", "invalid Python in the call list: a number is directly followed by a word"),
        ("[calculate(expression=" + "9" * 5000 + ")]", "invalid Python in the call list: a number has too many digits"),
    ],
)
def test_pythonic_malformed(text: str, message: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the parser must not make CPython warn, e.g. on "1if"
        parsed = P.parse("Calling: " + text)
    assert parsed.calls == () and _errors(parsed) == [message]
    assert parsed.errors[0].raw in text and parsed.content == "Calling:"
    (result,) = ToolExecutor([calculator]).execute(parsed)
    assert (result.error_kind, result.content) == ("malformed", f"Error: malformed tool call: {message}")


def test_pythonic_escapes_python_warns_about_parse_silently() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (call,) = P.parse('[calculate(expression="\\d+\\.")]').calls
    assert call.arguments == {"expression": "\\d+\\."}


def test_pythonic_unknown_tool_and_bad_arguments_are_the_executors() -> None:
    parsed = P.parse('[nope(x=1), calculate(expression=5), calculate(expression="2**3")]')
    results = ToolExecutor([calculator]).execute(parsed)
    assert [(r.error_kind, r.content) for r in results] == [
        ("unknown_tool", "Error: unknown tool 'nope'. Available tools: calculate."),
        ("invalid_arguments", "Error: invalid arguments for 'calculate': expression: Input should be a valid string"),
        (None, "8"),
    ]


def test_pythonic_format_calls_exact_and_round_trip() -> None:
    calls = [
        {"name": "calculate", "arguments": {"expression": "2 + 3 * 4"}},
        {"name": "plot", "arguments": {"title": 'q"\n\\d ü', "count": -1, "scale": 0.1, "tags": ["]", "#"], "options": {"k": 2},
                                       "show": False, "limit": None}},
    ]
    text = P.format_calls(calls)
    assert text == (
        '[calculate(expression="2 + 3 * 4"), plot(title="q\\"\\n\\\\d ü", count=-1, scale=0.1, tags=["]", "#"], '
        'options={"k": 2}, show=False, limit=None)]'
    )
    parsed = P.parse(text)
    assert parsed.errors == () and parsed.content == ""
    assert [(c.name, c.arguments) for c in parsed.calls] == [(c["name"], c["arguments"]) for c in calls]
    assert P.format_calls([]) == ""


@pytest.mark.parametrize(
    ("call", "match"),
    [
        ({"name": "my-tool", "arguments": {}}, "not a Python identifier"),
        ({"name": "class", "arguments": {}}, "not a Python identifier"),
        ({"name": "f", "arguments": {"x-y": 1}}, "not a Python identifier"),
        ({"name": "f", "arguments": {"x": float("inf")}}, "has no literal"),
        ({"name": "f", "arguments": {"x": {1: 2}}}, "is not a string"),
        ({"name": "f", "arguments": {"x": object()}}, "has no literal"),
    ],
)
def test_pythonic_refuses_to_write_what_it_cannot_read_back(call: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        P.format_calls([call])


def test_pythonic_needs_identifier_names() -> None:
    @tool(name="web-search")
    def search(q: str) -> str:
        """Search."""
        return q

    with pytest.raises(ValueError, match=r"^tool name 'web-search' cannot be used in the pythonic tool-call format: it is not a Python identifier$"):
        PythonicParser([search.schema()])
    with pytest.raises(ValueError, match="not a Python identifier"):
        get_parser("pythonic", [search.schema()])
    assert HermesParser([search.schema()]).parse('<tool_call>{"name": "web-search"}</tool_call>').calls[0].name == "web-search"


def test_pythonic_describe_tools() -> None:
    assert P.describe_tools() == (
        "def calculate(expression: str):\n"
        f'    """{calculator.description}\n'
        "\n"
        "    Args:\n"
        '        expression: The arithmetic expression to evaluate, e.g. "(1.5 + 2.5) / 2".\n'
        '    """\n'
        "\n"
        "def plot(title: str, count: int, scale: float = 1.5, show: bool = False, tags: list[str] = [], "
        "options: dict[str, int] = {}, limit: int | None = None, mode: Literal[\"fast\", \"slow\"] = \"fast\", "
        "origin: Point | None = None):\n"
        '    """Draw a plot.\n'
        "\n"
        "    Args:\n"
        "        title: The title, as written.\n"
        "        count: How many points.\n"
        "        scale: The zoom factor.\n"
        "        show: Whether to show it.\n"
        "        tags: Labels.\n"
        "        options: Named integer options.\n"
        "        limit: An upper bound, if any.\n"
        "        mode: Drawing speed.\n"
        "        origin: Where the axes cross.\n"
        '    """'
    )
    bare = {"type": "function", "function": {"name": "ping", "description": 'Say """hi"', "parameters": {"type": "object", "properties": {}}}}
    assert P.describe_tools([bare]) == 'def ping():\n    """Say \\"\\"\\"hi" """'
    assert P.describe_tools([]) == ""


# ------------------------------------------------------------------------------------------- registry


def test_builtin_formats_are_registered() -> None:
    assert PARSERS == {"hermes": HermesParser, "qwen3_coder": Qwen3CoderParser, "pythonic": PythonicParser}
    for name, cls in PARSERS.items():
        parser = get_parser(name, SCHEMAS)
        assert type(parser) is cls and parser.name == name and isinstance(parser, ToolCallParser)
        assert parser.tools == SCHEMAS
    assert get_parser("hermes").tools == []


@pytest.fixture
def registry():
    """PARSERS restored after the test."""
    saved = dict(PARSERS)
    yield PARSERS
    PARSERS.clear()
    PARSERS.update(saved)


class Shouting(BaseToolCallParser):
    """A user format: one call per line, ``CALL name`` (no arguments)."""

    name = "shouting"

    def parse(self, text: str) -> ParsedResponse:
        calls, rest = [], []
        for line in text.splitlines():
            if line.startswith("CALL "):
                calls.append(ToolCall(id=f"call_{len(calls)}", name=line[5:].strip(), arguments={}, raw=line))
            else:
                rest.append(line)
        return ParsedResponse(content="\n".join(rest).strip(), calls=tuple(calls))

    def format_calls(self, calls: Any) -> str:
        return "\n".join(f"CALL {c['name'] if isinstance(c, dict) else c.name}" for c in calls)


def test_register_a_user_format_in_one_call(registry: dict[str, Any]) -> None:
    assert register_parser("shouting", Shouting) is Shouting
    parser = get_parser("shouting", SCHEMAS)
    assert isinstance(parser, Shouting) and parser.tools == SCHEMAS
    assert _calls(parser.parse("hi\nCALL calculate")) == [("call_0", "calculate", {})]
    # The inherited describe_tools offers the schemas hermes-style.
    assert parser.describe_tools() == HermesParser(SCHEMAS).describe_tools()
    with pytest.raises(ValueError, match=r"^tool-call format 'shouting' is already registered; pass replace=True to override it$"):
        register_parser("shouting", HermesParser)
    register_parser("shouting", HermesParser, replace=True)
    assert isinstance(get_parser("shouting"), HermesParser)


def test_register_as_decorator_and_factories_without_tools(registry: dict[str, Any]) -> None:
    @register_parser("bare")
    class Bare:  # no tools= keyword, no describe_tools: the factory is called without arguments
        name = "bare"

        def parse(self, text: str) -> ParsedResponse:
            return ParsedResponse(content=text.strip())

        def format_calls(self, calls: Any) -> str:
            return ""

    assert PARSERS["bare"] is Bare
    parser = get_parser("bare", SCHEMAS)
    assert isinstance(parser, Bare) and isinstance(parser, ToolCallParser)
    assert describe_tools(parser, SCHEMAS) == HermesParser().describe_tools(SCHEMAS)
    register_parser("lambda", lambda **kwargs: Shouting(**kwargs))
    assert get_parser("lambda", SCHEMAS).tools == SCHEMAS


def test_registry_errors() -> None:
    with pytest.raises(ValueError, match=r"^unknown tool-call format 'xml'; known: hermes, pythonic, qwen3_coder$"):
        get_parser("xml")
    with pytest.raises(ValueError, match="non-empty name"):
        register_parser(" ", HermesParser)
    with pytest.raises(TypeError, match="must be a class or callable"):
        register_parser("nothing", 3)  # type: ignore[arg-type]
    assert "nothing" not in PARSERS


def test_a_parser_object_is_used_as_it_is() -> None:
    parser = Shouting()
    assert get_parser(parser) is parser


def test_hermes_describe_tools_is_the_env_templates_tojson() -> None:
    import jinja2

    tojson = jinja2.Environment().from_string("<tools>{% for t in tools %}\n{{ t | tojson }}{% endfor %}\n</tools>")
    assert HermesParser().describe_tools(SCHEMAS) == tojson.render(tools=SCHEMAS)
    assert "\\u0027^\\u0027" in HermesParser().describe_tools(SCHEMAS)  # jinja's HTML-safe escapes
    assert HermesParser().describe_tools([]) == ""
