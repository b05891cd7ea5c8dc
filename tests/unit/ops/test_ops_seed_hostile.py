"""Hostile operator input (issue 21, item 6): seed entries a worker would dead-letter, spider names,
flag order, bad flags, and CSV cells a spreadsheet would run."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from crawlfleet.cli import build_parser, main
from crawlfleet.commands.export import _cell
from crawlfleet.commands.opsargs import UsageError, check_spider
from crawlfleet.commands.seed import policy_for
from crawlfleet.jobs.seeding import check_entry


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ('{"url": "http://h/", "priority": 1e400}', "out of range"),
        ('{"url": "http://h/", "priority": Infinity}', "Infinity"),
        ('{"url": "http://h/", "priority": -Infinity}', "Infinity"),
        ('{"url": "http://h/", "priority": NaN}', "NaN"),
        ('{"url": "http://h/", "priority": 18446744073709551617}', "'priority'"),
        ('{"url": "http://h/", "priority": 9007199254740993}', "between"),
        ('{"url": "http://h/", "priority": 1.5}', "'priority'"),
        ('{"url": "http://h/", "meta": {"n": 9223372036854775808}}', "64-bit"),
        ('{"url": "http://h/", "meta": {"n": [-9223372036854775809]}}', "64-bit"),
        ('{"url": "http://h/", "colour": "red"}', "unknown field"),
        ('{"url": "http://h/", "encoding": "nosuch"}', "unknown field"),
        ('{"url": "http://h/", "_class": "this.s"}', "unknown field"),
        ('{"url": "http://h/", "callback": "__init__"}', "callback"),
        ('{"url": "http://h/", "callback": "_private"}', "callback"),
        ('{"url": "http://h/", "method": "GET /x"}', "'method'"),
        ('{"url": "http://h/", "headers": {"X": 1.5}}', "'headers'"),
        ('{"url": "http://h/", "meta": {"x": ' + "[" * 70 + "]" * 70 + "}}", "nested deeper"),
        ('{"url": "file:///etc/hostname"}', "not an http"),
        ("data:text/plain,hi", "not an http"),
    ],
)
def test_seed_refuses_what_a_worker_would_dead_letter(entry: str, why: str) -> None:
    with pytest.raises(ValueError, match=why) as excinfo:
        check_entry(entry)
    assert "\n" not in str(excinfo.value)


def test_seed_checks_the_schemes_a_worker_with_that_setting_checks() -> None:
    ftp = policy_for(" https , ftp ")
    assert ftp.url_schemes == ("https", "ftp")
    assert check_entry("ftp://h/a", ftp) == "ftp://h/a"
    assert check_entry('{"url": "ftp://h/b"}', ftp) == '{"url":"ftp://h/b"}'
    with pytest.raises(
        ValueError, match=r"not an https:// or ftp:// URL \(SCHEDULER_URL_SCHEMES\)"
    ):
        check_entry("http://h/", ftp)
    with pytest.raises(UsageError, match=r"^--schemes: SCHEDULER_URL_SCHEMES must list .*'FTP'$"):
        policy_for("https,FTP")


def test_seed_keeps_what_a_worker_takes() -> None:
    stored = check_entry(
        '{"url": "http://h/", "priority": -9007199254740992, "meta": {"n": 9223372036854775807},'
        ' "callback": "parse_item", "headers": {"X": ["a", "b"]}, "method": "PATCH"}'
    )
    assert '"priority":-9007199254740992' in stored and '"callback":"parse_item"' in stored


@pytest.mark.parametrize("name", ["", "adv*", "a?c", "[ab]", "a\\b", "a b", "a\x1b[31m", "x" * 201])
def test_one_spider_name_validator(name: str) -> None:
    with pytest.raises(UsageError, match="not a spider name") as excinfo:
        check_spider(name)
    assert "\n" not in str(excinfo.value) and len(str(excinfo.value)) < 200


@pytest.mark.parametrize("name", ["adv", "book", "my-spider_2", "site.example", "ünï"])
def test_spider_names_that_address_one_crawl(name: str) -> None:
    assert check_spider(name) == name


@pytest.mark.parametrize(
    "argv",
    [
        ["seed", "", "http://h/", "--new", "--redis-url", "redis://127.0.0.1:1/0"],
        ["seed", "adv*", "http://h/", "--new", "--redis-url", "redis://127.0.0.1:1/0"],
        ["purge", "adv*", "--yes", "--redis-url", "redis://127.0.0.1:1/0"],
        ["purge", "", "--yes", "--redis-url", "redis://127.0.0.1:1/0"],
        ["requeue-failed", "a*", "--redis-url", "redis://127.0.0.1:1/0"],
        ["export", "a*", "-o", "x.csv", "--redis-url", "redis://127.0.0.1:1/0"],
        ["pause", "?", "--redis-url", "redis://127.0.0.1:1/0"],
        ["status", "", "--redis-url", "redis://127.0.0.1:1/0"],
        ["bloom-info", "a*", "--redis-url", "redis://127.0.0.1:1/0"],
        ["bloom-info", "", "--key", "bf:%(spider)s", "--redis-url", "redis://127.0.0.1:1/0"],
    ],
)
def test_commands_refuse_bad_spider_names_before_connecting(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a spider name" in err and "cannot reach" not in err


@pytest.mark.parametrize(
    "argv",
    [
        ["seed", "adv", "--new", "http://h/a", "http://h/b"],
        ["seed", "--new", "adv", "http://h/a", "http://h/b"],
        ["seed", "adv", "http://h/a", "--new", "http://h/b"],
        [
            "seed",
            "adv",
            "--redis-url",
            "redis://r/0",
            "http://h/a",
            "-f",
            "-",
            "http://h/b",
            "--new",
        ],
    ],
)
def test_seed_flags_go_anywhere(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert args.spider == "adv" and args.new and args.urls == ["http://h/a", "http://h/b"]


def test_requeue_failed_negative_limit_is_a_bad_flag(capsys: pytest.CaptureFixture[str]) -> None:
    # issue 21 item 6: `requeue-failed --limit -5` exited 1; bad flags exit 2
    with pytest.raises(SystemExit) as exit_info:
        main(["requeue-failed", "adv", "--limit", "-5", "--redis-url", "redis://127.0.0.1:1/0"])
    assert exit_info.value.code == 2
    assert "--limit: must be >= 0, got -5" in capsys.readouterr().err
    args = build_parser().parse_args(["requeue-failed", "adv", "--limit", "0"])
    assert args.limit == 0
    with pytest.raises(SystemExit):
        build_parser().parse_args(["requeue-failed", "adv", "--limit", "1e3"])


def test_a_bad_seed_file_line_is_quoted_short_and_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seeds = tmp_path / "seeds.txt"
    evil = "\x1b]0;owned\x07ftp://h/" + "A" * 5000
    seeds.write_text(f"http://h/ok\n# comment\n{evil}\n", encoding="utf-8")
    code = main(["seed", "adv", "-f", str(seeds), "--new", "--redis-url", "redis://127.0.0.1:1/0"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert f"{seeds} line 3 '\\x1b]0;owned\\x07ftp://h/AAA" in err
    assert "\x1b" not in err and "\x07" not in err and len(err) < 400


@pytest.mark.parametrize(
    ("value", "cell"),
    [
        ('=HYPERLINK("http://evil/","x")', '\'=HYPERLINK("http://evil/","x")'),
        ("+1+2", "'+1+2"),
        ("-1+2", "'-1+2"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("\tx", "'\tx"),
        ("\rx", "'\rx"),
        ("plain", "plain"),
        ("a=b", "a=b"),
        (-5, -5),
        (1.5, 1.5),
        (None, None),
        (["=1"], '["=1"]'),
    ],
)
def test_csv_cells_that_would_run_are_defused(value: object, cell: object) -> None:
    assert _cell(value) == cell


@pytest.mark.fuzz
@given(st.text(max_size=300))
@example('{"url": "http://h/", "priority": 1e400}')
@example("{" * 5000)
@example('{"url": "http://h/", "meta": ' + "[" * 3000 + "]" * 3000 + "}")
def test_seed_validator_answers_any_line_with_an_entry_or_one_line(text: str) -> None:
    started = time.monotonic()
    try:
        stored = check_entry(text)
    except ValueError as exc:
        assert str(exc) and "\n" not in str(exc) and len(str(exc)) < 600
    else:
        assert isinstance(stored, str) and stored
    assert time.monotonic() - started < 2


@pytest.mark.fuzz
@given(st.text(max_size=50))
def test_spider_name_validator_answers_any_text(text: str) -> None:
    try:
        assert check_spider(text) == text
    except UsageError as exc:
        assert "\n" not in str(exc)
    else:
        assert text and not set(text) & set("*?[]\\") and text.isprintable()
