"""The README's two first commands stay true: CI runs the test command verbatim."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def test_readme_opens_with_a_run_command_and_a_test_command() -> None:
    """Exactly two commands: install and serve; install and test."""
    run, test = _readme_commands()
    assert run.endswith("countersign serve")
    assert "pytest" in test and "mypy" in test and "ruff" in test


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    """`.ci/run` executes the README's test command, character for character."""
    _run, test = _readme_commands()
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test in ci


def test_the_readme_adapter_example_declares_a_valid_tool_from_the_public_api() -> None:
    """The adapter example runs as written: it imports only `gateway` and its `Tool` is accepted."""
    text = (ROOT / "README.md").read_text()
    [example] = [block.split("```", 1)[0] for block in text.split("```python\n")[1:] if "TOOLS = (" in block]
    namespace: dict[str, object] = {}
    exec(compile(example, "README.md", "exec"), namespace)
    tools = namespace["TOOLS"]
    assert isinstance(tools, tuple) and [tool.name for tool in tools] == ["billing_get_invoice"]
    assert [line for line in example.splitlines() if line.startswith(("from gateway", "import gateway"))] == [
        "from gateway import Access, Mode, Tool, ToolContext, fill_path, request_json"
    ]


def test_the_readme_policy_example_is_the_tested_policy_set() -> None:
    """The Cedar block of "Policies" is the set tests/cedar/ runs through a real gateway, word for word."""
    from tests.cedar.test_engine import EXAMPLE

    text = (ROOT / "README.md").read_text()
    block = text.split("```cedar\n", 1)[1].split("```", 1)[0]
    assert block.split() == EXAMPLE.split()
