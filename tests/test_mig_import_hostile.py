"""`gpuprov mig import` of hostile mig-parted files (issue #26): alias bombs, huge integers,
names that are not strings, deep nesting, files that are not UTF-8 or cannot be read, GPU
indices no host has, one bad value repeated thousands of times. Each is exit 2 with one line per
distinct problem naming the file and the key, no traceback, no hang (the real process runs under
a time limit), and nothing printed as group data."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ENTRY = "version: v1\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: true\n"
# A billion laughs: nine levels of ten aliases each, 10**9 leaves for whoever walks it.
BOMB = "".join(
    f"l{n}: &l{n} [" + ", ".join([f"*l{n - 1}"] * 10) + "]\n" if n else "l0: &l0 [x]\n"
    for n in range(10)
)


def import_(path, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuprov",
            "mig",
            "import",
            str(path),
            "--model",
            "H100-80GB",
            *args,
        ],
        capture_output=True,
        timeout=60,
    )


def refused(result: subprocess.CompletedProcess, *fragments: str) -> list[str]:
    err = result.stderr.decode()
    assert result.returncode == 2, err
    assert "Traceback" not in err and result.stdout == b""
    lines = err.splitlines()
    assert lines and all(line.startswith("error: ") for line in lines), lines
    for fragment in fragments:
        assert any(fragment in line for line in lines), (fragment, lines)
    return lines


def write(tmp_path, text: str | bytes):
    path = tmp_path / "parted.yaml"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


@pytest.mark.parametrize(
    "document",
    [
        f"{BOMB}version: *l9\nmig-configs: {{c: [{{devices: all, mig-enabled: false}}]}}\n",
        f"{BOMB}version: v1\nmig-configs: {{c: [{{devices: *l9, mig-enabled: false}}]}}\n",
        f"{BOMB}version: v1\nmig-configs: {{c: [{{devices: all, mig-enabled: *l9}}]}}\n",
        f"{BOMB}version: v1\nmig-configs: {{c: [{{devices: all, mig-enabled: true, "
        "mig-devices: *l9}]}\n",
    ],
)
def test_an_alias_bomb_is_refused_before_anything_is_built(tmp_path, document):
    [line] = refused(import_(write(tmp_path, document)), "parted.yaml: line 2: an alias (*l0)")
    assert "aliases are not accepted" in line


@pytest.mark.parametrize(
    "text",
    [
        ENTRY + "      mig-devices: {1g.10gb: " + "9" * 5000 + "}\n",
        "version: v1\nmig-configs:\n  c:\n    - devices: [" + "1" * 5000 + "]\n"
        "      mig-enabled: false\n",
    ],
)
def test_a_5000_digit_count_or_gpu_index_is_refused(tmp_path, text):
    refused(import_(write(tmp_path, text)), "an integer of 5000 characters (at most 32)")


@pytest.mark.parametrize("name", ["1", "[a]", "{a: 1}", "null", "true"])
def test_config_names_that_are_not_strings_are_refused(tmp_path, name):
    text = f"version: v1\nmig-configs:\n  ? {name}\n  : [{{devices: all, mig-enabled: false}}]\n"
    result = import_(write(tmp_path, text))
    refused(result, "parted.yaml: ")
    assert "config names must be strings" in result.stderr.decode() or "unhashable" in (
        result.stderr.decode()
    )


@pytest.mark.parametrize("nesting", ["[" * 3000 + "]" * 3000, "{a: " * 3000 + "1" + "}" * 3000])
def test_3000_deep_nesting_is_refused(tmp_path, nesting):
    refused(import_(write(tmp_path, f"version: v1\nmig-configs: {nesting}\n")), "nest")


@pytest.mark.parametrize(
    "data, said",
    [
        (ENTRY.encode("utf-16"), "UTF-16 text; save the file as UTF-8"),
        (ENTRY.encode("utf-32"), "UTF-32 text; save the file as UTF-8"),
        (ENTRY.encode() + b"# caf\xe9\n", "line 6: not UTF-8 text (byte 0xe9)"),
        (ENTRY.encode() + b"      x: \x00\n", "line 6: not YAML: character #x0000"),
    ],
)
def test_text_that_is_not_utf8_yaml_is_refused(tmp_path, data, said):
    refused(import_(write(tmp_path, data)), f"parted.yaml: {said}")


def test_a_file_that_cannot_be_read_or_is_no_file_is_refused_without_blocking(tmp_path):
    (tmp_path / "eio.yaml").symlink_to("/proc/self/mem")  # a regular file whose read fails
    refused(import_(tmp_path / "eio.yaml"), "eio.yaml: cannot read: Input/output error")
    os.mkfifo(tmp_path / "fifo.yaml")
    refused(import_(tmp_path / "fifo.yaml"), "fifo.yaml: not a regular file")
    (tmp_path / "big.yaml").write_bytes(b"#" * (5 << 20))
    refused(import_(tmp_path / "big.yaml"), "big.yaml: larger than 4194304 bytes")
    refused(import_(tmp_path / "nope.yaml"), "nope.yaml: file not found")


def test_a_gpu_index_no_host_has_is_refused(tmp_path):
    text = "version: v1\nmig-configs:\n  c:\n    - devices: [99]\n      mig-enabled: false\n"
    refused(import_(write(tmp_path, text)), "devices: must be all or a non-empty list of GPU ind")
    text = text.replace("[99]", "[3, 9]").replace("false", "true\n      mig-devices: {}")
    refused(
        import_(write(tmp_path, text), "--gpu-count", "8"),
        "config c: devices: GPU index 9 does not exist (--gpu-count is 8: GPUs 0 to 7)",
    )
    result = import_(write(tmp_path, text.replace("9]", "7]")), "--gpu-count", "8")
    assert result.returncode == 0, result.stderr
    assert b"gpu_count = 8" in result.stdout


def test_one_bad_value_repeated_5000_times_is_one_line_with_a_count(tmp_path):
    items = "".join("    - {devices: x, mig-enabled: maybe}\n" for _ in range(5000))
    lines = refused(import_(write(tmp_path, f"version: v1\nmig-configs:\n  c:\n{items}")))
    assert len(lines) == 2, lines
    assert any(
        "mig-configs.c[0].devices: must be all or a non-empty list" in line
        and "[and 4999 more entries like it]" in line
        for line in lines
    ), lines
    assert all(len(line) < 600 for line in lines)


def test_many_configs_are_named_in_one_short_line(tmp_path):
    configs = "".join(f"  c{n}: [{{devices: all, mig-enabled: false}}]\n" for n in range(5000))
    [line] = refused(import_(write(tmp_path, f"version: v1\nmig-configs:\n{configs}")))
    assert "holds 5000 configs; pick one with --config: c0, c1," in line
    assert "and 4990 more" in line and len(line) < 400
