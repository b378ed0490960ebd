"""Config mistakes: one wording for an unknown name everywhere, with the closest known name
suggested, and every mistake of a file reported at once (`check` exits 1 with the list)."""

from __future__ import annotations

from pathlib import Path

import pytest
from backchannel.cli import main
from backchannel.config import load_config
from backchannel.errors import ConfigError, ConfigErrors, unknown_key
from click.testing import CliRunner

MANY_MISTAKES = """
[server]
prot = 8080

[stores]
path = "x.db"

[accounts.tg]
channel = "telegram"
token = "123456:abcdef"
pol_timeout = 30

[accounts.web]
channel = "webchat"
titel = "Support"

[agents.helper]
kind = "openai"
modle = "llama3.2"

[[bindings]]
agent = "helper"
respond = "sometimes"
windw = 10
"""


def test_unknown_key_suggests_the_closest_known_one() -> None:
    assert unknown_key("pol_timeout", ["token", "poll_timeout", "poll_limit"]) == (
        "unknown key; did you mean `poll_timeout`? (known keys: poll_limit, poll_timeout, token)"
    )
    assert unknown_key("zzz", ["host", "port"]) == "unknown key (known keys: host, port)"


def test_check_reports_every_mistake_of_a_file_at_once(tmp_path: Path) -> None:
    path = tmp_path / "bot.toml"
    path.write_text(MANY_MISTAKES, encoding="utf-8")

    result = CliRunner().invoke(main, ["check", "-c", str(path)])

    assert result.exit_code == 1
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert all(line.startswith(f"error: {path}: ") for line in lines), lines
    problems = [line.removeprefix(f"error: {path}: ").split(" (known")[0] for line in lines]
    assert problems == [
        "stores: unknown section; did you mean `store`?",
        "server.prot: unknown key; did you mean `port`?",
        "bindings[0].windw: unknown key; did you mean `window`?",
        'bindings[0].respond: expected one of always, mention, never, got "sometimes"',
        "accounts.tg.pol_timeout: unknown key; did you mean `poll_timeout`?",
        "accounts.web.titel: unknown key; did you mean `title`?",
        "agents.helper.modle: unknown key; did you mean `model`?",
    ]


def test_one_mistake_is_still_one_plain_error(tmp_path: Path) -> None:
    path = tmp_path / "bot.toml"
    path.write_text("[server]\nprot = 1\n", encoding="utf-8")

    with pytest.raises(ConfigError) as caught:
        load_config(path)

    assert not isinstance(caught.value, ConfigErrors)
    assert caught.value.key == "server.prot"


def check(tmp_path: Path, body: str) -> list[str]:
    """Run `backchannel check` on a config of `body` with its own store; return its lines
    (exit 1 and no traceback asserted: every caller expects mistakes)."""
    config = tmp_path / "bot.toml"
    config.write_text(f'[store]\npath = "{tmp_path / "bc.db"}"\n{body}', encoding="utf-8")
    result = CliRunner().invoke(main, ["check", "-c", str(config)])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    return result.output.strip().splitlines()


def test_nan_and_infinity_are_refused_wherever_seconds_are_read(tmp_path: Path) -> None:
    """TOML has nan and inf. Every comparison with nan is false, so a nan passed checks
    like "< 0": a nan debounce acked messages and never ran the agent, a nan Telegram
    retry_initial stopped polling after the first error. Each is one error naming its key."""
    lines = check(
        tmp_path,
        f"""
[accounts.web]
channel = "webchat"
rate_limit = nan
[accounts.tg]
channel = "telegram"
token = "123456:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
retry_initial = nan
[accounts.tp]
channel = "tinyplace"
identity = "{"0" * 63}1"
poll_interval = nan
[agents.demo]
kind = "demo"
[[bindings]]
agent = "demo"
accounts = ["web"]
debounce = nan
run_timeout = inf
[orchestration]
ask_timeout = inf
""",
    )
    named = sorted(line.split(": ")[2] for line in lines)
    assert named == [
        "accounts.tg.retry_initial",
        "accounts.tp.poll_interval",
        "accounts.web.rate_limit",
        "bindings[0].debounce",
        "bindings[0].run_timeout",
        "orchestration.ask_timeout",
    ], lines


def test_a_public_url_that_is_no_web_address_is_an_error(tmp_path: Path) -> None:
    for url, ok in [
        ("not a url", False),
        ("ftp://bot.example.com", False),
        ("https://:80", False),
        ("https://bot.example.com", True),
        ("http://127.0.0.1:8080/hooks", True),
    ]:
        config = tmp_path / "bot.toml"
        config.write_text(
            f'[store]\npath = "{tmp_path / "bc.db"}"\n[server]\npublic_url = "{url}"\n',
            encoding="utf-8",
        )
        result = CliRunner().invoke(main, ["check", "-c", str(config)])
        assert (result.exit_code == 0) is ok, (url, result.output)
        if not ok:
            assert "server.public_url: expected the address the platforms reach" in result.output


def test_an_empty_store_path_is_an_error_not_the_config_folder(tmp_path: Path) -> None:
    config = tmp_path / "bot.toml"
    config.write_text('[store]\npath = "  "\n', encoding="utf-8")
    result = CliRunner().invoke(main, ["check", "-c", str(config)])
    assert result.exit_code == 1
    assert "store.path: expected the SQLite file's path, got an empty one" in result.output


@pytest.mark.parametrize(
    ("body", "first", "second"),
    [
        # an unset token is reported once, not also as a malformed token; the other
        # account's own mistake still is
        (
            '[accounts.tg]\nchannel = "telegram"\ntoken = "${UNSET_FOR_CHECK}"\n'
            '[accounts.web]\nchannel = "webchat"\nrate_limit = -1\n',
            "accounts.tg.token: environment variable UNSET_FOR_CHECK is not set",
            "accounts.web.rate_limit",
        ),
        # a name with a dot: the mistake in "tg.main" does not hide account tg's own
        (
            '[accounts."tg.main"]\nchannel = "telegram"\ntoken = "${UNSET_FOR_CHECK}"\n'
            '[accounts.tg]\nchannel = "telegram"\ntoken = "not a token"\n',
            "accounts.tg.main.token: environment variable UNSET_FOR_CHECK",
            "accounts.tg.token",
        ),
    ],
    ids=["unset-token", "dotted-name"],
)
def test_a_table_with_a_mistake_is_reported_once_and_hides_no_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, first: str, second: str
) -> None:
    monkeypatch.delenv("UNSET_FOR_CHECK", raising=False)
    lines = check(tmp_path, body)
    assert len(lines) == 2, lines
    assert first in lines[0] and second in lines[1]


def test_a_table_with_a_bad_name_is_reported_once_not_again_where_it_is_named(
    tmp_path: Path,
) -> None:
    # the binding naming it said "expected one of webchat": the broken [accounts] were
    # replaced by the default ones, and the name was reported a second time, misleadingly
    path = tmp_path / "bot.toml"
    path.write_text(
        '[accounts."bad name!"]\nchannel = "telegram"\ntoken = "1:a"\n\n'
        '[agents."bad agent"]\nkind = "demo"\n\n'
        '[[bindings]]\nagent = "bad agent"\naccounts = ["bad name!"]\n',
        encoding="utf-8",
    )
    result = CliRunner().invoke(main, ["check", "-c", str(path)])
    assert result.exit_code == 1
    lines = [line.removeprefix(f"error: {path}: ") for line in result.stderr.splitlines()]
    assert [line.split(":")[0] for line in lines] == ["accounts.bad name!", "agents.bad agent"]
    assert "webchat" not in result.stderr


def test_an_unreadable_agent_is_not_replaced_by_the_demo_agent(tmp_path: Path) -> None:
    path = tmp_path / "bot.toml"
    path.write_text('[agents."bad agent"]\nkind = "demo"\n', encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value).count("\n") == 0 and "agents.bad agent" in str(caught.value)
